"""Learned step-time predictor from a run history (seeds 001 and 002; docs/learned.md).

A training sample is a pair of runs of the same job: the *source* run's signature record
(what a user has) and a *target* configuration (layout and platform) with its measured step
time. Three predictors of the target's step time:

* ``analytic``: the what-if model (``_whatif.whatif``), read from the source record's grid
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
model file.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from ._io import write_json
from ._signature_record import GRID_CORES, GRID_RANKS, GRID_THREADS

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
    "fit_learner",
    "fit_model",
    "predict",
    "predict_residual",
    "mape",
    "split_configs",
    "save_model",
    "load_model",
    "format_fit",
]

MODEL_VERSION = 1
LEARNERS = ("ridge", "gbt", "finet")
FEATURES = (
    "log_analytic_s", "log_src_step_s", "log_src_compute_s", "log_src_comm_s", "src_comm_frac",
    "log_src_parallelism", "src_ranks", "src_threads", "src_cores", "src_affinity",
    "src_quota_limited", "src_oversub", "tgt_ranks", "tgt_threads", "tgt_cores",
    "tgt_affinity", "tgt_quota_limited", "tgt_oversub", "log_cores_per_rank_ratio",
    "log_ranks_ratio", "log_threads_ratio", "log_analytic_over_src", "log_comm_bytes",
    "log_params", "strong", "mpi", "gloo", "horovod",
)  # fmt: skip


class LearnError(ValueError):
    """Not enough or unusable data to fit or apply a model (message says what to do)."""


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


# --------------------------------------------------------------------------- learners


def _scaler(X: np.ndarray) -> dict:
    mu = X.mean(axis=0)
    sd = X.std(axis=0)
    sd[sd < 1e-12] = 1.0
    return {"mean": mu.tolist(), "std": sd.tolist()}


def _scale(X: np.ndarray, sc: dict) -> np.ndarray:
    return (X - np.asarray(sc["mean"])) / np.asarray(sc["std"])


def _ridge_solve(Z: np.ndarray, y: np.ndarray, lam: float) -> tuple[np.ndarray, float]:
    b0 = float(y.mean())
    A = Z.T @ Z + lam * np.eye(Z.shape[1])
    return np.linalg.solve(A, Z.T @ (y - b0)), b0


def _fit_ridge(X, y, groups, seed: int) -> dict:
    """Ridge on standardized features; the penalty chosen by grouped 4-fold CV (folds
    hold whole target configurations)."""
    sc = _scaler(X)
    Z = _scale(X, sc)
    uniq = sorted(set(groups), key=repr)
    rng = np.random.default_rng(seed)
    fold_of = {g: int(f) for g, f in zip(uniq, rng.integers(0, 4, len(uniq)), strict=True)}
    folds = np.array([fold_of[g] for g in groups])
    best = (math.inf, 1.0)
    for lam in (1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0):
        err = []
        for f in range(4):
            tr, te = folds != f, folds == f
            if not te.any() or not tr.any():
                continue
            w, b0 = _ridge_solve(Z[tr], y[tr], lam)
            err.append(np.mean(np.abs(np.expm1(Z[te] @ w + b0 - y[te]))))
        e = float(np.mean(err)) if err else 0.0
        if e < best[0]:
            best = (e, lam)
    w, b0 = _ridge_solve(Z, y, best[1])
    return {"scaler": sc, "coef": w.tolist(), "intercept": b0, "lambda": best[1]}


def _ridge_predict(m: dict, X: np.ndarray) -> np.ndarray:
    return _scale(X, m["scaler"]) @ np.asarray(m["coef"]) + m["intercept"]


def _fit_gbt(X, y, seed: int, rounds: int = 300, depth: int = 3, lr: float = 0.05,
             min_leaf: int = 8, subsample: float = 0.8, n_bins: int = 32) -> dict:  # fmt: skip
    """Gradient-boosted regression trees on squared error: each tree (``depth`` levels,
    splits at feature quantiles, leaves of at least ``min_leaf`` pairs) fits the residual of
    the trees before it on a random ``subsample`` of the pairs, shrunk by ``lr``."""
    rng = np.random.default_rng(seed)
    n, d = X.shape
    qs = np.linspace(0, 1, n_bins + 1)[1:-1]
    edges = [np.unique(np.quantile(X[:, j], qs)) for j in range(d)]
    B = np.stack([np.searchsorted(e, X[:, j], side="right") for j, e in enumerate(edges)], 1)
    base = float(y.mean())
    pred = np.full(n, base)
    trees = []
    for _ in range(rounds):
        r = y - pred
        rows = rng.random(n) < subsample
        feat, thr, left, right, val = [], [], [], [], []

        def build(idx, level, feat=feat, thr=thr, left=left, right=right, val=val, r=r):
            node = len(feat)
            feat.append(-1), thr.append(0.0), left.append(-1), right.append(-1)
            val.append(float(r[idx].mean()) if len(idx) else 0.0)
            if level == depth or len(idx) < 2 * min_leaf:
                return node
            g, tot_c, tot_s = r[idx], len(idx), float(r[idx].sum())
            best = (1e-12 + tot_s**2 / tot_c, -1, -1)
            for j in range(d):
                nb = len(edges[j]) + 1
                cc = np.cumsum(np.bincount(B[idx, j], minlength=nb))[:-1]
                cs = np.cumsum(np.bincount(B[idx, j], weights=g, minlength=nb))[:-1]
                ok = (cc >= min_leaf) & (tot_c - cc >= min_leaf)
                if not ok.any():
                    continue
                sse = cs**2 / np.maximum(cc, 1) + (tot_s - cs) ** 2 / np.maximum(tot_c - cc, 1)
                gain = np.where(ok, sse, -np.inf)
                b = int(np.argmax(gain))
                if gain[b] > best[0]:
                    best = (float(gain[b]), j, b)
            if best[1] < 0:
                return node
            j, b = best[1], best[2]
            feat[node], thr[node] = j, float(edges[j][b])
            go_left = B[idx, j] <= b
            left[node] = build(idx[go_left], level + 1)
            right[node] = build(idx[~go_left], level + 1)
            return node

        build(np.flatnonzero(rows), 0)
        tree = {"feat": feat, "thr": thr, "left": left, "right": right, "val": val}
        trees.append(tree)
        pred += lr * _tree_predict(tree, X)
    return {"base": base, "lr": lr, "trees": trees}


def _tree_predict(tree: dict, X: np.ndarray) -> np.ndarray:
    feat, thr = np.asarray(tree["feat"]), np.asarray(tree["thr"])
    left, right, val = np.asarray(tree["left"]), np.asarray(tree["right"]), np.asarray(tree["val"])
    node = np.zeros(len(X), dtype=np.int64)
    while True:
        f = feat[node]
        inner = f >= 0
        if not inner.any():
            return val[node]
        x = X[np.arange(len(X)), np.where(inner, f, 0)]
        nxt = np.where(x < thr[node], left[node], right[node])
        node = np.where(inner, nxt, node)


def _gbt_predict(m: dict, X: np.ndarray) -> np.ndarray:
    out = np.full(len(X), m["base"])
    for t in m["trees"]:
        out += m["lr"] * _tree_predict(t, X)
    return out


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _finet_module(torch, n_features: int, width: int = 16, modes: int = 6, blocks: int = 2):
    """FI-Net style: the feature vector as a 1-D signal of ``width`` channels; each block
    runs three branches side by side (Inception): a Fourier layer (FFT over the feature
    axis, ``modes`` learned complex mixing matrices, inverse FFT), a 1x1 and a 3-wide
    convolution; concatenated, mixed back to ``width`` channels, GELU, residual."""
    nn = torch.nn

    class Fourier(nn.Module):
        def __init__(self):
            super().__init__()
            scale = 1.0 / (width * width)
            self.m = min(modes, n_features // 2 + 1)
            self.w = nn.Parameter(scale * torch.randn(width, width, self.m, 2))

        def forward(self, x):
            f = torch.fft.rfft(x, dim=-1)
            w = torch.view_as_complex(self.w)
            out = torch.zeros_like(f)
            out[..., : self.m] = torch.einsum("bim,iom->bom", f[..., : self.m], w)
            return torch.fft.irfft(out, n=x.shape[-1], dim=-1)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fourier = Fourier()
            self.point = nn.Conv1d(width, width, 1)
            self.local = nn.Conv1d(width, width, 3, padding=1)
            self.mix = nn.Conv1d(3 * width, width, 1)

        def forward(self, x):
            b = torch.cat([self.fourier(x), self.point(x), self.local(x)], dim=1)
            return x + torch.nn.functional.gelu(self.mix(b))

    class FINet(nn.Module):
        def __init__(self):
            super().__init__()
            self.lift = nn.Conv1d(2, width, 1)  # value and a learned position channel
            self.pos = nn.Parameter(0.1 * torch.randn(1, 1, n_features))
            self.blocks = nn.Sequential(*[Block() for _ in range(blocks)])
            self.head = nn.Sequential(nn.Flatten(), nn.Linear(width * n_features, 32),
                                      nn.GELU(), nn.Linear(32, 1))  # fmt: skip

        def forward(self, z):
            x = torch.cat([z[:, None, :], self.pos.expand(z.shape[0], 1, -1)], dim=1)
            return self.head(self.blocks(self.lift(x)))[:, 0]

    return FINet()


def _fit_finet(X, y, seed: int, steps: int = 300) -> dict:
    torch = _torch()
    if torch is None:
        raise LearnError("finet needs torch: pip install ailens[learn]")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small: one thread is fastest and leaves the cores alone
    try:
        torch.manual_seed(seed)
        sc = _scaler(X)
        Z = torch.tensor(_scale(X, sc), dtype=torch.float32)
        y_mu, y_sd = float(y.mean()), float(y.std() or 1.0)
        T = torch.tensor((y - y_mu) / y_sd, dtype=torch.float32)
        net = _finet_module(torch, X.shape[1])
        opt = torch.optim.AdamW(net.parameters(), lr=3e-3, weight_decay=1e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
        bs = min(256, len(T))
        g = torch.Generator().manual_seed(seed)
        for _ in range(steps):  # a fixed budget of optimiser steps on random mini-batches
            idx = torch.randint(0, len(T), (bs,), generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.smooth_l1_loss(net(Z[idx]), T[idx], beta=0.5)
            loss.backward()
            opt.step()
            sched.step()
        state = {k: v.detach().cpu().numpy().tolist() for k, v in net.state_dict().items()}
    finally:
        torch.set_num_threads(threads)
    return {"scaler": sc, "y_mean": y_mu, "y_std": y_sd, "state": state,
            "n_features": X.shape[1], "steps": steps}  # fmt: skip


def _finet_predict(m: dict, X: np.ndarray) -> np.ndarray:
    torch = _torch()
    if torch is None:
        raise LearnError("this model is an FI-Net: it needs torch (pip install ailens[learn])")
    net = _finet_module(torch, int(m["n_features"]))
    net.load_state_dict({k: torch.tensor(v) for k, v in m["state"].items()})
    net.eval()
    with torch.no_grad():
        out = net(torch.tensor(_scale(X, m["scaler"]), dtype=torch.float32)).numpy()
    return out.astype(np.float64) * m["y_std"] + m["y_mean"]


def fit_learner(name: str, X, y, groups, seed: int = 0, *, finet_steps: int = 300) -> dict:
    """Fit one learner on pairs (X, log residual y); ``groups`` are the target
    configurations (ridge's CV folds)."""
    if name == "ridge":
        return {"learner": "ridge", **_fit_ridge(X, y, groups, seed)}
    if name == "gbt":
        return {"learner": "gbt", **_fit_gbt(X, y, seed)}
    if name == "finet":
        return {"learner": "finet", **_fit_finet(X, y, seed, finet_steps)}
    raise LearnError(f"unknown learner {name!r}: choose from {', '.join(LEARNERS)}")


def predict_residual(m: dict, X: np.ndarray) -> np.ndarray:
    """Log residual over the analytic model (0 for the analytic learner)."""
    kind = m.get("learner")
    if kind == "analytic":
        return np.zeros(len(X))
    if kind == "ridge":
        return _ridge_predict(m, X)
    if kind == "gbt":
        return _gbt_predict(m, X)
    if kind == "finet":
        return _finet_predict(m, X)
    raise LearnError(f"unknown learner {kind!r} in the model file; fit it again")


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
        if name == "finet" and _torch() is None:
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


def save_model(model: dict, path: str | os.PathLike) -> None:
    write_json(Path(path), model, indent=None)


def load_model(path: str | os.PathLike) -> dict:
    """A model file from ``ailens fit``, checked (LearnError naming the file)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise LearnError(f"{p}: cannot read model ({e.strerror})") from None
    except ValueError as e:
        raise LearnError(f"{p}: not a model JSON file ({e}); write one with `ailens fit`") from None
    if not isinstance(doc, dict) or doc.get("format") != "ailens-learned-model":
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
