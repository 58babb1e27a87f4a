"""Learned step-time predictor from a run history (seeds 001 and 002; docs/learned.md).

A training sample is a pair of runs of the same job: the *source* run's signature record
(what a user has) and a *target* configuration (layout and platform) with its measured step
time. Three predictors of the target's step time:

* ``analytic``: the what-if model (``predict.whatif.whatif``), read from the source record's grid
  of analytic predictions (or computed live by ``ailens whatif``): the baseline;
* ``ridge``: ridge regression (numpy) on the log residual of the analytic model;
* ``gbt``: gradient-boosted regression trees (numpy, histogram splits) on the same residual;
* ``finet``: an FI-Net-style network (seed 002: Fourier layers in an Inception-style
  multi-branch block) on the same residual, in torch (``pip install ailens[learn]``; skipped
  with a message when torch is missing).

Split as seed 002 does: configurations (job, platform, ranks, ranks per node, threads) are
deduplicated (repeats averaged) and assigned whole to train or validation, and no pair
crosses: a validation target is predicted only from training-configuration sources. The
learner with the lowest validation MAPE is kept, refitted on all pairs, and named in the
model file. The learners themselves are in ``learners``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from .._io import read_json_file, write_json
from .learners import LEARNERS, LearnError, fit_learner, predict_residual, torch_available
from .signature_record import GRID_CORES, GRID_RANKS, GRID_THREADS, signature_record

__all__ = [
    "MODEL_VERSION",
    "LEARNERS",
    "LearnError",
    "configs",
    "config_key",
    "target",
    "pairs",
    "analytic_from_record",
    "target_of_record",
    "pair_features",
    "fit_model",
    "predict",
    "learned_step_times",
    "mape",
    "split_configs",
    "save_model",
    "load_model",
    "format_fit",
]

MODEL_VERSION = 1
FEATURES = (
    "log_analytic_s", "log_src_step_s", "log_src_compute_s", "log_src_comm_s", "src_comm_frac",
    "log_src_parallelism", "src_ranks", "src_threads", "src_cores", "src_affinity",
    "src_quota_limited", "src_oversub", "tgt_ranks", "tgt_threads", "tgt_cores",
    "tgt_affinity", "tgt_quota_limited", "tgt_oversub", "log_cores_per_rank_ratio",
    "log_ranks_ratio", "log_threads_ratio", "log_analytic_over_src", "log_comm_bytes",
    "log_params", "strong", "mpi", "gloo", "horovod",
)  # fmt: skip


# --------------------------------------------------------------------------- data


def target_of_record(rec: dict) -> dict:
    """The configuration a record ran on: layout and platform facts the model reads."""
    lay, plat = rec["layout"], rec["platform"]
    return target(
        int(lay["ranks"]),
        int(lay["ranks_per_node"]),
        int(lay["threads_per_rank"]),
        float(lay["cores_per_node"]),
        affinity=plat.get("affinity_cores"),
        quota=plat.get("cpu_quota"),
        platform=str(plat.get("name", "")),
    )


def target(
    ranks: int,
    ranks_per_node: int,
    threads: int,
    cores: float,
    *,
    affinity: float | None = None,
    quota: float | None = None,
    platform: str = "",
) -> dict:
    """A target configuration: ``cores`` usable per node, ``affinity`` CPUs the ranks may
    run on (default ceil(cores)), ``quota`` the CPU quota in CPUs (None: unlimited)."""
    aff = float(affinity) if affinity else float(math.ceil(cores))
    limited = bool(quota) and float(quota) < aff - 1e-9
    return {"ranks": ranks, "ranks_per_node": ranks_per_node, "threads": threads,
            "cores": float(cores), "affinity": aff, "quota_limited": limited,
            "platform": platform}  # fmt: skip


def config_key(rec: dict) -> tuple:
    t = target_of_record(rec)
    return (rec["job"], t["platform"], t["ranks"], t["ranks_per_node"], t["threads"])


def configs(records: list[dict]) -> dict[tuple, dict]:
    """Deduplicated configurations: key -> {"records": [...], "step_s": mean measured}."""
    out: dict[tuple, dict] = {}
    for r in records:
        out.setdefault(config_key(r), {"records": []})["records"].append(r)
    for c in out.values():
        c["step_s"] = float(np.mean([r["step"]["step_s"] for r in c["records"]]))
    return out


def analytic_from_record(rec: dict, tgt: dict, mode: str | None = None) -> float | None:
    """The analytic what-if's step time on ``tgt`` from the record's grid (log-linear in
    cores between grid points); None off the grid (other ranks or threads, multi-node)."""
    mode = mode or rec.get("mode", "weak")
    if tgt["ranks"] not in GRID_RANKS or tgt["threads"] not in GRID_THREADS:
        return None
    if tgt["ranks_per_node"] < tgt["ranks"]:
        return None
    rows = [r for r in rec["analytic"][mode] if r[0] == tgt["ranks"] and r[1] == tgt["threads"]]
    if not rows:
        return None
    rows.sort(key=lambda r: r[2])
    c = float(np.clip(tgt["cores"], GRID_CORES[0], GRID_CORES[-1]))
    xs = np.log([r[2] for r in rows])
    ys = np.log([max(r[3], 1e-9) for r in rows])
    return float(np.exp(np.interp(math.log(c), xs, ys)))


def pair_features(src: dict, tgt: dict, analytic_s: float) -> np.ndarray:
    """The learner's inputs for predicting ``tgt`` from the source record ``src``."""
    st = src["step"]
    s = target_of_record(src)
    step = max(float(st["step_s"]), 1e-9)

    def per_rank(t):
        return min(t["threads"], t["cores"] / max(t["ranks_per_node"], 1) if t["ranks"] > 1
                   else t["cores"])  # fmt: skip

    def oversub(t):
        return min(t["ranks"], t["ranks_per_node"]) * t["threads"] / t["cores"]

    tr = src.get("transport", "")
    return np.array([
        math.log(max(analytic_s, 1e-9)), math.log(step),
        math.log(max(float(st["compute_s"]), 1e-9)), math.log(float(st["comm_s"]) + 1e-5),
        float(st["comm_s"]) / step, math.log(max(float(st.get("parallelism") or 1.0), 0.05)),
        s["ranks"], s["threads"], s["cores"], s["affinity"], float(s["quota_limited"]),
        oversub(s), tgt["ranks"], tgt["threads"], tgt["cores"], tgt["affinity"],
        float(tgt["quota_limited"]), oversub(tgt),
        math.log(per_rank(tgt) / per_rank(s)), math.log(tgt["ranks"] / s["ranks"]),
        math.log(tgt["threads"] / s["threads"]), math.log(max(analytic_s, 1e-9) / step),
        math.log1p(float(st.get("comm_bytes") or 0.0)),
        math.log1p(float(src.get("param_count") or 0.0)), float(src.get("mode") == "strong"),
        float(tr == "mpi"), float(tr == "gloo"), float(tr == "horovod"),
    ], dtype=np.float64)  # fmt: skip


def pairs(records: list[dict], targets: set | None = None, sources: set | None = None):
    """All (source, target) pairs of the same job with different configurations: features
    X, log-residual y (measured over analytic), analytic and measured step times, and the
    target configuration keys. ``targets``/``sources`` restrict the configurations used."""
    cfg = configs(records)
    by_job: dict[str, list] = {}
    for key in cfg:
        by_job.setdefault(key[0], []).append(key)
    X, y, ana, meas, keys = [], [], [], [], []
    for keys_j in by_job.values():
        for tk in keys_j:
            if targets is not None and tk not in targets:
                continue
            trec = cfg[tk]["records"][0]
            tgt = target_of_record(trec)
            for sk in keys_j:
                if sk == tk or (sources is not None and sk not in sources):
                    continue
                for src in cfg[sk]["records"]:
                    a = analytic_from_record(src, tgt)
                    if a is None or not a > 0:
                        continue
                    X.append(pair_features(src, tgt, a))
                    y.append(math.log(cfg[tk]["step_s"] / a))
                    ana.append(a)
                    meas.append(cfg[tk]["step_s"])
                    keys.append(tk)
    n = len(FEATURES)
    return (np.array(X).reshape(-1, n), np.array(y), np.array(ana), np.array(meas), keys)


def split_configs(keys, frac: float, seed: int) -> tuple[set, set]:
    """Seed 002's split of configurations into (train, held-out): the runs (one key per run,
    repeats allowed) split at random (1 - frac) : frac, each side deduplicated, and the
    configurations on both sides (the intersection) dealt out again (1 - frac) : frac, so
    no configuration is on both sides."""
    keys = list(keys)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(keys))
    n_out = max(1, int(round(frac * len(keys))))
    held = {keys[i] for i in order[:n_out]}
    train = {keys[i] for i in order[n_out:]}
    both = sorted(train & held, key=repr)
    both = [both[i] for i in rng.permutation(len(both))]
    cut = int(round((1 - frac) * len(both)))
    train = (train - set(both)) | set(both[:cut])
    held = (held - set(both)) | set(both[cut:])
    if not train or not held:
        raise LearnError(f"{len(set(keys))} configurations: too few to hold some out")
    return train, held


def mape(pred: np.ndarray, meas: np.ndarray) -> float:
    """Mean absolute percentage error (%)."""
    return float(100.0 * np.mean(np.abs(pred - meas) / meas)) if len(meas) else float("nan")


# --------------------------------------------------------------------------- model


def fit_model(
    records: list[dict],
    *,
    learners=LEARNERS,
    seed: int = 0,
    val_frac: float = 0.2,
    finet_steps: int = 300,
    log=None,
) -> dict:
    """Split configurations into train/validation, fit each learner, keep the one with the
    lowest validation MAPE (the analytic baseline competes too), refit it on all pairs."""
    say = log or (lambda msg: None)
    if len(records) < 4:
        raise LearnError(f"{len(records)} runs in the history: fit needs at least 4 runs of one "
                         "job at different layouts or platforms (ailens history add)")  # fmt: skip
    X, y, ana, meas, keys = pairs(records)
    if len(y) < 4:
        raise LearnError("fewer than 4 pairs of runs of the same job at different "
                         "configurations: record more layouts or platforms per job")  # fmt: skip
    train_k, val_k = split_configs([config_key(r) for r in records], val_frac, seed)
    Xt, yt, _, _, kt = pairs(records, targets=train_k, sources=train_k)
    Xv, _, av, mv, _ = pairs(records, targets=val_k, sources=train_k)
    val = {"analytic": mape(av, mv)}
    skipped = {}
    for name in learners:
        if name not in LEARNERS:
            raise LearnError(f"unknown learner {name!r}: choose from {', '.join(LEARNERS)}")
        if name == "finet" and not torch_available():
            skipped[name] = "torch not installed (pip install ailens[learn])"
            say(f"skipping finet: {skipped[name]}")
            continue
        if len(yt) < 4 or not len(mv):
            skipped[name] = "too few training or validation pairs"
            continue
        m = fit_learner(name, Xt, yt, kt, seed, finet_steps=finet_steps)
        val[name] = mape(av * np.exp(predict_residual(m, Xv)), mv)
        say(f"{name}: validation MAPE {val[name]:.2f} %")
    best = min(val, key=lambda k: val[k] if math.isfinite(val[k]) else math.inf)
    final = (
        {"learner": "analytic"}
        if best == "analytic"
        else fit_learner(best, X, y, keys, seed, finet_steps=finet_steps)
    )
    return {
        "format": "ailens-learned-model",
        "version": MODEL_VERSION,
        "best": best,
        "model": final,
        "features": list(FEATURES),
        "validation_mape": val,
        "skipped": skipped,
        "trained_on": {
            "runs": len(records),
            "configurations": len(configs(records)),
            "pairs": int(len(y)),
            "validation_configurations": len(val_k),
            "jobs": sorted({r["job"] for r in records}),
        },
        "seed": seed,
    }


def predict(model: dict, src: dict, tgt: dict, analytic_s: float) -> float:
    """The model's step time on ``tgt`` from the source record and the analytic
    prediction for that target."""
    X = pair_features(src, tgt, analytic_s)[None, :]
    return float(analytic_s * math.exp(float(predict_residual(model["model"], X)[0])))


def learned_step_times(
    model: dict, a, rows, platform: dict | None, *, mode: str, cores_per_node: float | None
) -> list[float]:
    """The learned model's step time on each what-if row's target (``ailens whatif --model``):
    the source is the analysed run ``a``'s record; the target node is ``platform`` (an
    ``ailens probe`` descriptor), else a node of exactly ``cores_per_node`` cores, else the
    run's own node."""
    src = signature_record(a, mode=mode, analytic_grid=False)
    node = (platform or {}).get("node") or {}
    out = []
    for r in rows:
        if platform is not None:
            aff, quota = len(node.get("affinity") or []) or None, node.get("cpu_quota")
        elif cores_per_node is not None:  # a node of exactly that many cores
            aff, quota = None, None
        else:  # the run's own node
            aff, quota = src["platform"]["affinity_cores"], src["platform"]["cpu_quota"]
        tgt = target(r.ranks, r.ranks_per_node, r.threads_per_rank, r.cores_per_node,
                     affinity=aff, quota=quota)  # fmt: skip
        out.append(predict(model, src, tgt, r.step_time_s) if r.step_time_s > 0 else 0.0)
    return out


def save_model(model: dict, path: str | os.PathLike) -> None:
    write_json(Path(path), model, indent=None)


def load_model(path: str | os.PathLike) -> dict:
    """A model file from ``ailens fit``, checked (LearnError naming the file)."""
    p = Path(path)
    doc = read_json_file(p, what="model", error=LearnError, fix="write one with `ailens fit`")
    if doc.get("format") != "ailens-learned-model":
        raise LearnError(
            f"{p}: not an ailens model; write one with `ailens fit --history H -o {p}`"
        )
    if doc.get("version") != MODEL_VERSION or doc.get("features") != list(FEATURES):
        raise LearnError(f"{p}: model from another ailens version; fit it again with `ailens fit`")
    return doc


def format_fit(model: dict) -> str:
    """What ``ailens fit`` prints: validation MAPE per learner and the one kept."""
    t = model["trained_on"]
    lines = [
        f"{t['runs']} runs, {t['configurations']} configurations, {t['pairs']} pairs of runs "
        f"of the same job; validation on {t['validation_configurations']} held-out "
        "configurations",
        "learner    validation MAPE",
    ]
    for k, v in model["validation_mape"].items():
        lines.append(f"{k:<10} {v:8.2f} %" + ("   <- kept" if k == model["best"] else ""))
    for k, why in model["skipped"].items():
        lines.append(f"{k:<10} skipped: {why}")
    return "\n".join(lines)
