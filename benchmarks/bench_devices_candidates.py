"""Job x device interactions tried for the device-speed model (issue 32 item 3) and not
kept: each candidate is added to the shipped model's design (``fit_device_speed``: robust
fit, per-cell batch slope, a scale slope of its own where the batch is unknown) and
evaluated held out as ``bench_devices.py`` does, beside the shipped model ("shipped" row,
which must reproduce ``bench_devices.py``'s medians).

Candidates (each a ridge-pulled term, 0 for a job whose label or feature is unknown):

* ``class x cell``: an effect per (model class, cell); classes (CNN, detection,
  segmentation, transformer, RNN, recommender, graph) from the job's name (``CLASSES``);
* ``family x cell``: per (model family, cell): coarse families from the name (ResNet-50,
  BERT, Mask R-CNN, ...), or fine ones (the DeepLearningExamples model directory, the MLPerf
  benchmark with SSD and its v2.0+ RetinaNet apart, Gavel's model);
* ``class roofline``: per class, a weight on log peak FLOP/s and on log memory bandwidth (how
  much of the class's time follows each);
* ``family scale``: a per-family slope on log2(devices);
* ``step time x cell``: a per-cell slope on log2 of the job's step time (Gavel's measured
  step, MLPerf's where the unit is samples or the dataset is known), the held-out job's from
  its source measurement;
* ``node scale``: a shared slope on log2 of the nodes a measurement spans (devices per node
  from the system's name, ``devices_per_node``), beside the one on log2 of the devices: a
  step synchronises within a node over NVLink or the pod's links, across nodes over the
  network;
* ``cell scale``: a per-cell slope on log2(devices), pulled towards the shared one (a TPU
  pod, a DGX SuperPOD and a cloud cluster lose per-device speed to scale differently);
* the shipped model with its feature pull (0.5) or Huber threshold (0.1) changed: how much
  the medians move with no new term;
* ``cell dispersion``: each cell's measurements weighted by the median |residual| of all
  measurements over that cell's (capped at 1; to the power given), so a cell whose jobs
  disagree (TPU v3: Mask R-CNN 3-4x slower than on a V100, Transformer faster) leans more
  on the feature line (an empirical-Bayes shrinkage).

Second round (issue 32 item 3: general mechanisms, same folds):

* ``chip`` / ``generation`` / ``precision`` pooling: each cell's effect is the feature line
  plus a deviation shared by its chip (A100 SXM and PCIe; V100 at both precisions), its
  architecture generation (``GENERATION``: Pascal, Volta, Ampere with A100 and A30, Hopper)
  or its precision class, ridge-pulled to 0; a cell no measurement covers (held out by
  device) is priced at the line plus its groups' deviations (partial pooling);
* ``line: peak only`` / ``memory bandwidth only``: the feature line on one feature (the
  shipped line uses both); ``roofline sum``: its two slopes pulled to sum to -1 (time falls
  as a mix of peak FLOP/s and memory bandwidth, nothing else);
* ``Cauchy``: a redescending robust weight 1 / (1 + (r / c)^2) instead of Huber's;
* ``evidence``: a job measured on k systems of one cell (MLPerf) weighs k^(1 - power)
  there, not k (power 1: one job-cell, one vote);
* pairs and a triple of the best single rows.

Folds: leave-one-job-out (LOJO), leave-one-device-out (LODO; the target's device unseen)
and leave-one-family-out (LOFO; every job of the held-out job's fine family removed, for
families with several jobs). Columns: median |error| % across device types / across CUDA
GPU types / across software stacks / V100 fp32 <-> mixed (DLE; LOJO and LOFO only), and the
coverage (%) across device types of the 95 % interval as ``bench_devices.py`` learns and
checks it (LOJO and LODO).

    python benchmarks/bench_devices_candidates.py [CANDIDATE ...]   (about 25 s a row on
    2 busy cores, 60-90 s under load 4; named ones: those and "shipped")
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_devices as bench  # noqa: E402

from ailens.predict import PRECISION_PEAK_KEY, batch_term, linked_groups  # noqa: E402

# name pattern -> (coarse family, class); the first match wins.
CLASSES = (
    (r"resnet-?50|^resnet$", "resnet50", "cnn"),
    (r"resnet-?18", "resnet18", "cnn"),
    (r"resnext", "resnext", "cnn"),
    (r"mask-?rcnn", "maskrcnn", "detection"),
    (r"\bssd\b|/ssd/", "ssd", "detection"),
    (r"unet.?3d|3d.?unet|unet_3d", "unet3d", "segmentation"),
    (r"unet|vnet", "unet", "segmentation"),
    (r"se3transformer", "se3transformer", "graph"),
    (r"transformer-?xl", "transformer-xl", "transformer"),
    (r"bert|electra", "bert", "transformer"),
    (r"gpt", "gpt", "transformer"),
    (r"/tft/", "tft", "transformer"),
    (r"fastspeech|fastpitch", "fastpitch", "transformer"),
    (r"transformer", "transformer", "transformer"),
    (r"rnnt", "rnnt", "rnn"),
    (r"gnmt", "gnmt", "rnn"),
    (r"\blm\b|lstm", "lstm", "rnn"),
    (r"jasper|quartznet", "jasper", "cnn"),
    (r"hifigan", "hifigan", "cnn"),
    (r"dlrm", "dlrm", "recommender"),
    (r"ncf|vae-cf|wideanddeep", "recommender", "recommender"),
)
# Training-set sizes of MLPerf's epoch benchmarks (public; for a step time from an epoch).
DATASET = {"resnet": 1281167, "unet3d": 168, "rnnt": 278528, "maskrcnn": 117266}


def _feature_row(features: dict, cell: str) -> list[float] | None:
    """[1, log peak at the cell's precision, log memory bandwidth] (the model's features)."""
    dev, prec = cell.split("|")
    f = features.get(dev) or {}
    peak = f.get("peak_tflops", {}).get(PRECISION_PEAK_KEY[prec])
    return [1.0, math.log(peak), math.log(f["mem_GBps"])] if peak and f.get("mem_GBps") else None


# Devices per node where a system's name does not state it ("4xA100", "x4A100", "A100x4",
# "-PCIex2", "x8A30"): a DGX-2 holds 16, an ABCI node 4, Azure's NC A100 v4 4; every other
# system here is an 8-device server (DGX, HLS-Gaudi2, a TPU v3 host's 8 cores).
_DEVICES_PER_NODE = {"dgx2": 16, "abci": 4, "NC96ads_A100_v4": 4}


def devices_per_node(system: str) -> int:
    m = re.search(r"(\d+)x(?:A100|H100)|x(\d+)(?:A100|A30|H100)|(?:A100|A100-PCIe|A100-SXM)x(\d+)",
                  system)  # fmt: skip
    if m:
        return int(next(g for g in m.groups() if g))
    return next((n for k, n in _DEVICES_PER_NODE.items() if system.startswith(k)), 8)


# Groups of cells whose deviations from the feature line are pooled (one shared deviation
# per group, ridge-pulled to 0; a cell no measurement covers is priced at the line plus its
# groups' deviations): the chip (A100 SXM and PCIe, V100 at both precisions), the
# architecture generation, the precision class.
GENERATION = {"P100": "pascal", "V100": "volta", "A100": "ampere", "A30": "ampere",
              "H100": "hopper"}  # fmt: skip
POOLS = ("chip", "generation", "precision")


def pool_key(kind: str, cell: str) -> tuple:
    dev, prec = cell.split("|")
    chip = dev.split("-SXM")[0].split("-PCIE")[0]
    if kind == "chip":
        return (kind, chip)
    if kind == "generation":
        return (kind, GENERATION.get(chip, chip))
    return (kind, prec)


def _nodes(o: dict) -> float:
    """log2 of the nodes a measurement spans (0 for one device or one node)."""
    per = devices_per_node(o["system"]) if o.get("system") else 8
    return math.log2(max(1, math.ceil(o["devices"] / per)))


def _name(o: dict) -> str:
    if o["source"] == "mlperf":
        return o["job"].split(":")[2]
    if o["source"] == "dle":
        return o["job"].split(":")[1]
    return o["job"]


def labelled(obs: list[dict]) -> list[dict]:
    steps = {}
    for r in bench.csv.DictReader(open(bench.scaling_dir() / "gavel_dp_throughputs.csv")):
        if r["workers"] == "1" and r["placement"] == "consolidated":
            steps[(f"gavel:{r['job_type']}", r["worker_type"])] = float(r["per_step_s_derived"])
    out = []
    for o in obs:
        s = _name(o).lower()
        fam, cls = next(((f, c) for rx, f, c in CLASSES if re.search(rx, s)), (None, None))
        if o["source"] == "dle":
            fine = o["job"].split(":")[1].rsplit("/", 1)[0]
        elif o["source"] == "gavel":
            fine = o["job"].split(" (")[0]
        else:
            rnd, bn = o["job"].split(":")[1:3]
            fine = "retinanet" if bn == "ssd" and rnd not in ("v0.6", "v1.1") else bn
        step = None
        if o["source"] == "gavel":
            step = steps[(o["job"], o["cell"].split("|")[0])]
        elif o["source"] == "mlperf" and o["batch"]:
            bn = o["job"].split(":")[2]
            per_unit = math.exp(o["log_t"]) * o["batch"]
            step = per_unit if bn in bench._SAMPLE_BENCHMARKS else None
            step = per_unit / DATASET[bn] if bn in DATASET else step
        out.append({**o, "family": fam, "fine": fine, "class": cls, "step": step})
    z: dict = {}
    for o in out:
        if o["step"]:
            z.setdefault(o["job"], []).append(math.log2(o["step"] / 0.1))
    return [{**o, "z_job": float(np.mean(z[o["job"]])) if o["job"] in z else None} for o in out]


def fit(obs: list[dict], *, family_key="family", **pulls) -> dict:
    """``fit_device_speed``'s design (same pulls, Huber 0.1, batch slopes) plus the
    candidate terms named in ``pulls`` (their ridge weights)."""
    idx: dict = {}

    def p(key):
        return idx.setdefault(key, len(idx))

    cells = sorted({o["cell"] for o in obs})
    feat = {c: _feature_row(bench.FEATURES, c) for c in cells}
    for o in obs:
        p(("job", o["job"]))
    for c in cells:
        p(("cell", c)), p(("g", c))
        if "step" in pulls:
            p(("h", c))
        if "cell_scale" in pulls:
            p(("s", c))
    for k in ("beta", "beta_u", "delta", "c0", "c1", "c2", "node"):
        p(k)
    for c in cells:  # the pooled deviations from the feature line the pull row may carry
        for kind in POOLS:
            if kind in pulls:
                p(pool_key(kind, c))
    rows, ys = [], []
    for o in obs:
        terms = {("job", o["job"]): 1.0, ("cell", o["cell"]): 1.0}
        terms["beta"] = math.log2(max(o["devices"], 1))
        x = batch_term(o.get("batch"))
        terms["delta"] = x
        terms[("g", o["cell"])] = x
        if not o.get("batch"):
            terms["beta_u"] = terms["beta"]
        if "class" in pulls and o["class"]:
            terms[("u", o["class"], o["cell"])] = 1.0
        if "family" in pulls and o[family_key]:
            terms[("v", o[family_key], o["cell"])] = 1.0
        if "family_scale" in pulls and o[family_key]:
            terms[("fb", o[family_key])] = math.log2(max(o["devices"], 1))
        if "roof" in pulls and o["class"] and feat[o["cell"]]:
            terms[("roof", o["class"], 0)] = feat[o["cell"]][1] - 3.5
            terms[("roof", o["class"], 1)] = feat[o["cell"]][2] - 7.0
        if "step" in pulls and o["z_job"] is not None:
            terms[("h", o["cell"])] = o["z_job"]
        if "node" in pulls:
            terms["node"] = _nodes(o)
        if "cell_scale" in pulls:
            terms[("s", o["cell"])] = terms["beta"]
        rows.append({p(k): v for k, v in terms.items()})
        ys.append(o["log_t"])
    n = len(idx)
    a = np.zeros((len(rows) + 2 * len(cells) + n, n))
    y = np.zeros(len(a))
    for i, r in enumerate(rows):
        for j, v in r.items():
            a[i, j] = v
        y[i] = ys[i]
    i = len(rows)
    for c in cells:
        a[i, idx[("cell", c)]] = pulls.get("feature_pull", 0.5)
        if feat[c]:
            for k in range(3):
                a[i, idx[f"c{k}"]] = -pulls.get("feature_pull", 0.5) * feat[c][k]
            for kind in POOLS:  # the line plus the pooled deviation of the cell's group
                if kind in pulls:
                    a[i, idx[pool_key(kind, c)]] = -pulls.get("feature_pull", 0.5)
        a[i + 1, idx[("g", c)]] = 1.0
        i += 2
    weight = {"job": 1e-3, "u": pulls.get("class"), "v": pulls.get("family"),
              **{kind: pulls.get(kind) for kind in POOLS},
              "fb": pulls.get("family_scale"), "roof": pulls.get("roof"),
              "h": pulls.get("step"), "s": pulls.get("cell_scale")}  # fmt: skip
    for key, j in idx.items():
        w = weight.get(key[0]) if isinstance(key, tuple) else None
        if w:
            a[i, j] = w
        i += 1
    extra = []
    if "roof_sum" in pulls:  # c_peak + c_mem = -1: time falls as one roofline mix of both
        r = np.zeros(n)
        r[idx["c1"]] = r[idx["c2"]] = pulls["roof_sum"]
        extra.append((r, -pulls["roof_sum"]))
    for k in pulls.get("drop_features", ()):  # a feature left out of the line
        r = np.zeros(n)
        r[idx[f"c{k}"]] = 1e3
        extra.append((r, 0.0))
    if extra:
        a = np.vstack([a, [r for r, _ in extra]])
        y = np.concatenate([y, [v for _, v in extra]])
    # Evidence weights (row scale = sqrt of the weight): a job measured on k systems of one
    # cell weighs k^(1 - power) there, not k.
    ev = np.ones(len(rows))
    if "evidence" in pulls:
        systems: dict = {}
        for o in obs:
            systems[(o["job"], o["cell"])] = systems.get((o["job"], o["cell"]), 0) + 1
        ev = np.array([systems[(o["job"], o["cell"])] ** -pulls["evidence"] for o in obs])
    s0 = np.ones(len(y))
    s0[: len(rows)] = np.sqrt(ev)
    theta = np.linalg.lstsq(a * s0[:, None], y * s0, rcond=None)[0]
    m = len(rows)
    for _ in range(20):
        res = np.abs(a[:m] @ theta - y[:m])
        w = np.ones(len(y))
        if "cauchy" in pulls:  # redescending: a far-off measurement loses almost all weight
            w[:m] = np.sqrt(1.0 / (1.0 + (res / pulls["cauchy"]) ** 2))
        else:
            w[:m] = np.sqrt(np.minimum(1.0, pulls.get("huber", 0.1) / np.maximum(res, 1e-12)))
        w[:m] *= np.sqrt(ev)
        if "dispersion" in pulls:
            typical = np.median(res)
            for c in cells:
                mine = np.array([o["cell"] == c for o in obs])
                spread = np.median(res[mine]) if mine.sum() > 2 else typical
                w[:m][mine] *= min(1.0, typical / max(spread, 1e-12)) ** pulls["dispersion"]
        theta = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)[0]
    t = {k: float(theta[j]) for k, j in idx.items()}
    return {
        "groups": linked_groups(obs),
        "effects": {c: t[("cell", c)] for c in cells},
        "coef": [t["c0"], t["c1"], t["c2"]],
        "scale_slope": t["beta"],
        "scale_slope_batch_unknown": t["beta"] + t["beta_u"],
        "batch_slope": t["delta"],
        "batch_slopes": {c: t[("g", c)] for c in cells},
        "terms": t,
        "family_key": family_key,
    }


def case(fitted: dict, a: dict, b: dict, fold: str) -> dict | None:
    c = bench._case(fitted, a, b, fold)
    if c is None:
        return None
    t, fk = fitted["terms"], fitted["family_key"]
    d = 0.0
    for key in (("u", a["class"]), ("v", a[fk])):
        d += t.get((*key, b["cell"]), 0.0) - t.get((*key, a["cell"]), 0.0)
    d += t.get(("fb", a[fk]), 0.0) * (math.log2(b["devices"]) - math.log2(a["devices"]))
    node = t.get("node", 0.0) * (_nodes(b) - _nodes(a))  # a scale correction: every method
    for m in ("model", "same_speed", "peak"):
        c[f"{m}_log_ratio"] += node
    d += t.get(("s", b["cell"]), 0.0) * math.log2(b["devices"])
    d -= t.get(("s", a["cell"]), 0.0) * math.log2(a["devices"])
    xa, xb = _feature_row(bench.FEATURES, a["cell"]), _feature_row(bench.FEATURES, b["cell"])
    if xa and xb:
        d += t.get(("roof", a["class"], 0), 0.0) * (xb[1] - xa[1])
        d += t.get(("roof", a["class"], 1), 0.0) * (xb[2] - xa[2])
    if a["step"]:
        z = math.log2(a["step"] / 0.1)
        d += (t.get(("h", b["cell"]), 0.0) - t.get(("h", a["cell"]), 0.0)) * z
    for kind in POOLS:  # an unmeasured cell: the line plus its groups' pooled deviations
        for cell, sign in ((b["cell"], 1.0), (a["cell"], -1.0)):
            if cell not in fitted["effects"]:
                d += sign * t.get(pool_key(kind, cell), 0.0)
    c["model_log_ratio"] += d
    return c


def evaluate(obs: list[dict], **kw) -> dict:
    jobs = sorted({o["job"] for o in obs})
    cases = []
    for job in jobs:
        f = fit([o for o in obs if o["job"] != job], **kw)
        cases += [c for a, b in bench._pairs(obs, job) if (c := case(f, a, b, "LOJO"))]
    for dev in sorted({o["cell"].split("|")[0] for o in obs}):
        f = fit([o for o in obs if o["cell"].split("|")[0] != dev], **kw)
        for job in jobs:
            for a, b in bench._pairs(obs, job):
                if b["cell"].split("|")[0] == dev != a["cell"].split("|")[0]:
                    cases += [c] if (c := case(f, a, b, "LODO")) else []
    fams: dict = {}
    for o in obs:
        fams.setdefault(o["fine"], set()).add(o["job"])
    for fam, js in sorted(fams.items()):
        if len(js) > 1:
            f = fit([o for o in obs if o["fine"] != fam], **kw)
            for job in sorted(js):
                cases += [c for a, b in bench._pairs(obs, job) if (c := case(f, a, b, "LOFO"))]
    subsets = {
        "devices": lambda c: not c["same_device_type"],
        "CUDA": lambda c: not c["same_device_type"] and c["same_stack"],
        "stacks": lambda c: not c["same_stack"],
        "precision": lambda c: c["same_device_type"],
    }
    out = {}
    for fold in ("LOJO", "LODO", "LOFO"):
        for name, keep in subsets.items():
            e = [
                bench._err(c["model_log_ratio"], c["true_log_ratio"])
                for c in cases
                if c["fold"] == fold and keep(c)
            ]
            if e:
                out[f"{fold} {name}"] = float(np.median(e))
    # Coverage across device types of the held-out 95 % interval as bench_devices.py learns it
    # (widths from other jobs' and other target devices' residuals of the same kind).
    named = {"LOJO": "leave-one-job-out", "LODO": "leave-one-device-out"}
    held = [{**c, "fold": named[c["fold"]]} for c in cases if c["fold"] in named]
    for fold in named.values():
        sel = [c for c in held if c["fold"] == fold and not c["same_device_type"]]
        out[f"{'LOJO' if 'job' in fold else 'LODO'} cov"] = 100.0 * float(
            np.mean(
                [
                    abs(c["model_log_ratio"] - c["true_log_ratio"]) <= bench._cross_width(held, c)
                    for c in sel
                ]
            )
        )
    return out


CANDIDATES = {
    "shipped": {},
    "class x cell": {"class": 1.0},
    "family x cell (coarse)": {"family": 1.0},
    "family x cell (fine)": {"family": 1.0, "family_key": "fine"},
    "family x cell (fine, pull 0.3)": {"family": 0.3, "family_key": "fine"},
    "class roofline": {"roof": 1.0},
    "family scale (fine)": {"family_scale": 1.0, "family_key": "fine"},
    "step time x cell": {"step": 1.0},
    "node scale": {"node": 1.0},
    "cell scale (pull 1)": {"cell_scale": 1.0},
    "cell scale (pull 3)": {"cell_scale": 3.0},
    "cell dispersion (power 1)": {"dispersion": 1.0},
    "cell dispersion (power 0.5)": {"dispersion": 0.5},
    # The shipped settings' neighbours: how much the medians move with no new term.
    "feature pull 0.25": {"feature_pull": 0.25},
    "feature pull 1": {"feature_pull": 1.0},
    "Huber 0.05": {"huber": 0.05},
    "Huber 0.2": {"huber": 0.2},
    # Issue 32 item 3, second round: pooling, precision, features, loss, evidence.
    "chip pooling (ridge 1)": {"chip": 1.0},
    "chip pooling (ridge 0.3)": {"chip": 0.3},
    "generation pooling (ridge 1)": {"generation": 1.0},
    "generation pooling (ridge 0.3)": {"generation": 0.3},
    "precision intercept (ridge 0.3)": {"precision": 0.3},
    "precision intercept (ridge 0.1)": {"precision": 0.1},
    "chip + precision pooling": {"chip": 0.3, "precision": 0.3},
    "line: peak only": {"drop_features": (2,)},
    "line: memory bandwidth only": {"drop_features": (1,)},
    "line: roofline sum -1 (weight 1)": {"roof_sum": 1.0},
    "line: roofline sum -1 (weight 10)": {"roof_sum": 10.0},
    "Cauchy 0.1": {"cauchy": 0.1},
    "Cauchy 0.2": {"cauchy": 0.2},
    "evidence: 1/k per job-cell": {"evidence": 1.0},
    "evidence: 1/sqrt(k) per job-cell": {"evidence": 0.5},
    # Pairs of the round's best single changes.
    "peak only + generation pooling": {"drop_features": (2,), "generation": 1.0},
    "peak only + precision intercept": {"drop_features": (2,), "precision": 0.3},
    "peak only + Cauchy 0.2": {"drop_features": (2,), "cauchy": 0.2},
    "generation pooling + Cauchy 0.2": {"generation": 1.0, "cauchy": 0.2},
    "peak only + precision + generation": {
        "drop_features": (2,),
        "precision": 0.3,
        "generation": 1.0,
    },
}


def main(argv=None) -> int:
    only = (sys.argv[1:] if argv is None else argv) or list(CANDIDATES)
    obs = labelled(bench.observations())
    head = None
    for name, kw in CANDIDATES.items():
        if name != "shipped" and name not in only:
            continue
        r = evaluate(obs, **kw)
        if head is None:
            head = list(r)
            print(f"{'candidate':32} " + " ".join(f"{k:>15}" for k in head))
        print(f"{name:32} " + " ".join(f"{r[k]:15.1f}" for k in head), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
