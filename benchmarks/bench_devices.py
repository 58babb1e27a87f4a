"""Device speed across platforms: fit the learned relative-performance model on public
development data and evaluate it held out, beside the baselines "same speed" and "ratio of
peak FLOP/s" (issue 32 item 3; the model is ``ailens/predict/device_speed.py``).

Data (development parts only; the READMEs there name what is held out and is never read):

* ``$AILENS_SCALING_DATA/scaling/gavel_dp_throughputs.csv``: 19 PyTorch jobs on one P100
  and one V100 (fp32);
* ``.../dle_training_perf_dgx1_dgx2.csv``: NVIDIA DeepLearningExamples at 1 GPU, V100 at
  fp32 and mixed precision (DGX-1 and DGX-2 both as V100);
* ``$AILENS_MLPERF_DATA`` (default ``shared/mlperf-dev`` beside the checkout): MLPerf
  Training logs, a job being one benchmark in one round; the time per unit of training
  (epoch, or sample where the benchmark counts samples) per device: (run_stop - run_start
  - evaluation) x devices / units. Devices per system come from the system's name
  (``MLPERF_SYSTEMS``; systems whose name does not say are left out).

``tensorflow_benchmarks_dgx1_p100_nccl.csv`` has one device type only and adds no pair.

Evaluation: every ordered pair (A, B) of cells measured for one job: predict t_B from t_A.
Leave-one-job-out (the model refitted without the job) and leave-one-device-out (without
any measurement on B's device: B priced from its features). All methods get the same scale
and batch correction (the fold's ``beta`` and ``delta``, or where a batch is unknown its
unknown-batch slope) so only the device part differs. The batch per device: Gavel's and
DLE's tables, MLPerf's ``global_batch_size`` / devices in the standard ``:::MLLOG`` logs.
Each row also gives the share of pairs within 10 % (``within_10_pct``: a median of 10 %
needs half), beside the same share for the model fitted on every job (in-sample).
Interactions and other mechanisms tried and not kept: ``bench_devices_candidates.py``.

The user's own history (``history`` in the JSON; ``DeviceSpeedModel.with_history``): each
source in turn is a user's cluster. The model is fitted without the source; each pair of
one of its jobs at one precision across device types is predicted by that model alone, and
moved by the source's other jobs measured on the same two devices (their mean log residual
each, ``pooled_ratio``: the user's history), its interval from the widths learned without
the source (``half_widths`` of that model's own held-out cases).

    python benchmarks/bench_devices.py [--json OUT] [--write [PATH]]
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's ailens

from ailens import read_timeline  # noqa: E402
from ailens.analysis.logformats import parse_mlperf  # noqa: E402
from ailens.predict import (  # noqa: E402
    DEVICE_SPEED_FILE,
    PRECISION_PEAK_KEY,
    batch_term,
    fit_device_speed,
    pooled_ratio,
)

# Vendor datasheets (dense peaks per device; TPU v3 per core, the unit its systems count).
FEATURES = {
    "P100": {
        "peak_tflops": {"fp32": 9.3, "tf32": 9.3, "fp16": 18.7},
        "mem_GBps": 732,
        "stack": "cuda",
    },
    "V100": {
        "peak_tflops": {"fp32": 15.7, "tf32": 15.7, "fp16": 125.0},
        "mem_GBps": 900,
        "stack": "cuda",
    },
    "A100-SXM": {
        "peak_tflops": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0},
        "mem_GBps": 2039,
        "stack": "cuda",
    },
    "A100-PCIE": {
        "peak_tflops": {"fp32": 19.5, "tf32": 156.0, "fp16": 312.0},
        "mem_GBps": 1935,
        "stack": "cuda",
    },
    "H100-SXM": {
        "peak_tflops": {"fp32": 67.0, "tf32": 494.7, "fp16": 989.4},
        "mem_GBps": 3350,
        "stack": "cuda",
    },
    "H100-PCIE": {
        "peak_tflops": {"fp32": 51.0, "tf32": 378.0, "fp16": 756.0},
        "mem_GBps": 2000,
        "stack": "cuda",
    },
    "A30": {
        "peak_tflops": {"fp32": 10.3, "tf32": 82.0, "fp16": 165.0},
        "mem_GBps": 933,
        "stack": "cuda",
    },
    "TPU-v3": {"peak_tflops": {"fp16": 61.5}, "mem_GBps": 450, "stack": "xla"},
    "Gaudi2": {"peak_tflops": {"fp16": 432.0}, "mem_GBps": 2450, "stack": "synapse"},
}

# MLPerf system -> (device, devices), from the system's name (nodes x devices per node as
# the name states; the submitter's server model where the name gives only that).
MLPERF_SYSTEMS = {
    "dgx1_n48_ngc19.05_pytorch": ("V100", 384),
    "dgx1_n24_ngc19.05_pytorch": ("V100", 192),
    "dgx1_ngc19.05_pytorch": ("V100", 8),
    "dgx2_ngc19.05_pytorch": ("V100", 16),
    "dgx2h_n12_ngc19.05_pytorch": ("V100", 192),
    "dgx1_n130_ngc19.05_mxnet": ("V100", 1040),
    "abci_2048xV100_mxnet": ("V100", 2048),
    "dgx1_n30_ngc19.05_pytorch": ("V100", 240),
    "dgx1_n60_ngc19.05_pytorch": ("V100", 480),
    "tpu-v3-32": ("TPU-v3", 32),
    "tpu-v3-128": ("TPU-v3", 128),
    "tpu-v3-256": ("TPU-v3", 256),
    "tpu-v3-1024": ("TPU-v3", 1024),
    "tpu-v3-2048": ("TPU-v3", 2048),
    "2xXE8545x4A100-SXM-80GB": ("A100-SXM", 8),
    "G492-ID0_A100_20211013.pytorch": ("A100-SXM", 8),
    "G492-ID0_A100_20211013.mxnet": ("A100-SXM", 8),
    "gx_A100x4_pytorch_NGC_21.09": ("A100-SXM", 4),
    "gx_A100x4_mxnet_NGC_21.09": ("A100-SXM", 4),
    "nd96amsr_a100_v4_n128_ngc21.09_pytorch": ("A100-SXM", 1024),
    "nd96amsr_a100_v4_n34_ngc21.09_pytorch": ("A100-SXM", 272),
    "nd96amsr_a100_v4_n8_ngc21.09_mxnet": ("A100-SXM", 64),
    "nd96amsr_a100_v4_n16_ngc21.09_pytorch": ("A100-SXM", 128),
    "nd96amsr_a100_v4_n128_ngc21.09_mxnet": ("A100-SXM", 1024),
    "nd96amsr_a100_v4_n96_ngc21.09_mxnet": ("A100-SXM", 768),
    "HPE-ProLiant-XL675d-Gen10-Plus_A100-SXM4-80GB_pytorch": ("A100-SXM", 8),
    "1_node_8_A100_NGC21.05_MXNet": ("A100-SXM", 8),
    "2xR750xax4A100-PCIE-80GB": ("A100-PCIE", 8),
    "DSS8440x8A100-PCIE-80GB": ("A100-PCIE", 8),
    "8_node_64_A100_PaddlePaddle": ("A100-SXM", 64),
    "ESC8000A-E11-8xA100-PCIE-80GB-NVBridge": ("A100-PCIE", 8),
    "NC96ads_A100_v4_pytorch_2209": ("A100-PCIE", 4),
    "ND96amsr_A100_v4_n16_pytorch": ("A100-SXM", 128),
    "XE8545x4A100-SXM-40GB": ("A100-SXM", 4),
    "gx_A100-SXMx8_pytorch_NGC_22.09": ("A100-SXM", 8),
    "gx_A100-SXMx8_pytorch_NGC_22.04": ("A100-SXM", 8),
    "G492-ZD2_mxnet": ("A100-SXM", 8),
    "G492-ZD2_pytorch": ("A100-SXM", 8),
    "rx_A100-PCIex2_mxnet_NGC_22.04": ("A100-PCIE", 2),
    "HPE-ProLiant-XL675d-Gen10-Plus_A100-SXM-80GB_16N_pytorch": ("A100-SXM", 128),
    "HPE-ProLiant-XL675d-Gen10-Plus_A100-SXM-80GB_9N_mxnet": ("A100-SXM", 72),
    "dgxh100_n4_preview": ("H100-SXM", 32),
    "dgxh100_n3_preview": ("H100-SXM", 24),
    "AS-4124GS-TNR_8_A100-PCIe-80GB-300W": ("A100-PCIE", 8),
    "2xR750xax4A100-PCIE-80GB-1opa": ("A100-PCIE", 8),
    "ESC4000-E11-4xA100-PCIE-80GB": ("A100-PCIE", 4),
    "G593-SD0_pytorch": ("H100-SXM", 8),
    "G593-SD0_mxnet": ("H100-SXM", 8),
    "HLS-Gaudi2-N32-PT": ("Gaudi2", 256),
    "HLS-Gaudi2-N48-PT": ("Gaudi2", 384),
    "dgxh100_n64_nemo": ("H100-SXM", 512),
    "R750xax4A100-PCIE-80GB": ("A100-PCIE", 4),
    "ND_H100_v5_pytorch": ("H100-SXM", 8),
    "2xXE9680x8A100-SXM-80GB": ("A100-SXM", 16),
    "R5300G6x8A30-PCIE-24GB": ("A30", 8),
}
# Benchmarks whose progress is counted in samples (the last train_samples/trained_samples);
# the others in epochs. DLRM trains under one epoch and logs no usable amount; minigo is
# reinforcement learning (self-play on the hosts): both left out.
_SAMPLE_BENCHMARKS = {"bert", "gpt3"}
_SKIP_BENCHMARKS = {"dlrm", "dlrm_dcnv2", "minigo"}


REPO = Path(__file__).resolve().parents[1]


def _shared(name: str, env: str) -> Path:
    """``$env``, else ``shared/name`` beside the checkout (or beside the main checkout for a
    worktree under ``wt/``)."""
    if os.environ.get(env):
        return Path(os.environ[env])
    for base in (REPO.parent, REPO.parent.parent):
        if (base / "shared" / name).is_dir():
            return base / "shared" / name
    return REPO.parent / "shared" / name


def scaling_dir() -> Path:
    base = _shared("scaling-dev", "AILENS_SCALING_DATA")
    return base / "scaling" if (base / "scaling").is_dir() else base


def mlperf_dir() -> Path:
    return _shared("mlperf-dev", "AILENS_MLPERF_DATA")


def gavel_observations(d: Path) -> list[dict]:
    out = []
    with open(d / "gavel_dp_throughputs.csv") as f:
        for r in csv.DictReader(f):
            if r["workers"] != "1" or r["placement"] != "consolidated":
                continue
            t = float(r["per_step_s_derived"]) / float(r["batch_per_worker"])
            out.append(
                {
                    "source": "gavel",
                    "job": f"gavel:{r['job_type']}",
                    "cell": f"{r['worker_type']}|fp32",
                    "log_t": math.log(t),
                    "devices": 1,
                    "batch": float(r["batch_per_worker"]),
                }
            )
    return out


def dle_observations(d: Path) -> list[dict]:
    rows: dict = {}
    with open(d / "dle_training_perf_dgx1_dgx2.csv") as f:
        for r in csv.DictReader(f):
            if r["gpus"] != "1" or r["precision"] not in ("fp32", "mixed") or r["flag"]:
                continue
            thr = float(r["throughput"])
            if thr <= 0:
                continue
            # One job per README and batch (the two precisions at the same batch).
            key = (f"dle:{r['readme']}:{r['sub_heading']}:{r['batch_per_gpu']}", r["precision"])
            rows.setdefault(key, []).append(-math.log(thr))
    return [
        {
            "source": "dle",
            "job": job,
            "cell": f"V100|{prec}",
            "log_t": float(np.mean(v)),
            "devices": 1,
            "batch": _number(job.rsplit(":", 1)[1]),
        }
        for (job, prec), v in rows.items()
    ]


def _number(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def mlperf_observations(root: Path) -> list[dict]:
    index = json.loads((root / "index.json").read_text())
    per: dict = {}
    for e in index:
        bench, system = e["benchmark"], e["system"]
        if bench in _SKIP_BENCHMARKS or system not in MLPERF_SYSTEMS:
            continue
        text = gzip.open(root / e["file"], "rt", errors="replace").read()
        ev = parse_mlperf(text)
        starts = [t for t, k, _, _ in ev if k == "run_start"]
        stops = [t for t, k, _, _ in ev if k == "run_stop"]
        if not starts or not stops:
            continue
        t0, t1 = starts[0], stops[-1]
        tl = read_timeline(root / e["file"], fmt="mlperf", include_init=False)
        eval_s = sum(s.end_s - s.begin_s for s in tl.sections if s.name == "eval")
        if bench in _SAMPLE_BENCHMARKS:
            amounts = [
                v
                for _, k, v, _ in ev
                if k in ("trained_samples", "train_samples") and isinstance(v, (int, float))
            ]
            amount = float(amounts[-1]) if amounts else 0.0
        else:
            amount = 0.0
            for t, k, _, m in ev:
                if not (t0 - 2 <= t <= t1 + 2):
                    continue
                if k == "epoch_stop" and isinstance(m.get("epoch_num"), (int, float)):
                    amount = max(amount, float(m["epoch_num"]))
                fe, ec = m.get("first_epoch_num"), m.get("epoch_count")
                if (
                    k == "block_start"
                    and isinstance(fe, (int, float))
                    and isinstance(ec, (int, float))
                ):
                    amount = max(amount, float(fe + ec - 1))
        train_s = t1 - t0 - eval_s
        if amount <= 0 or train_s <= 0:
            continue
        device, n = MLPERF_SYSTEMS[system]
        job = f"mlperf:{e['round']}:{'maskrcnn' if bench == 'mask' else bench}"
        # The batch per device, from the standard logging (":::MLLOG", v0.7 on) only: v0.6's
        # older format states it in each submitter's own unit (tokens for one, sentences for
        # another on the same benchmark), so there it is unknown.
        gbs = [
            v
            for _, k, v, _ in ev
            if k == "global_batch_size" and isinstance(v, (int, float)) and ":::MLLOG" in text
        ]
        batch = float(gbs[0]) / n if gbs else None
        per.setdefault((job, system), []).append((math.log(train_s * n / amount), device, n, batch))
    return [
        {
            "source": "mlperf",
            "job": job,
            "cell": f"{v[0][1]}|mixed",
            "log_t": float(np.mean([x[0] for x in v])),
            "devices": v[0][2],
            "batch": v[0][3],
            "system": system,
        }
        for (job, system), v in per.items()
    ]


def observations() -> list[dict]:
    d = scaling_dir()
    return gavel_observations(d) + dle_observations(d) + mlperf_observations(mlperf_dir())


def _peak(cell: str) -> float | None:
    dev, prec = cell.split("|")
    return FEATURES.get(dev, {}).get("peak_tflops", {}).get(PRECISION_PEAK_KEY[prec])


def _effect(fitted: dict, cell: str) -> tuple[float, bool] | None:
    if cell in fitted["effects"]:
        return fitted["effects"][cell], True
    dev, prec = cell.split("|")
    f = FEATURES.get(dev)
    peak = _peak(cell)
    if not f or not peak:
        return None
    c0, cp, cm = fitted["coef"]
    return c0 + cp * math.log(peak) + cm * math.log(f["mem_GBps"]), False


def _stack(cell: str) -> str | None:
    return FEATURES.get(cell.split("|")[0], {}).get("stack")


def _width_key(c: dict) -> str:
    measured = c["fold"] == "leave-one-job-out" and c["both_measured"]
    return (
        f"{'measured' if measured else 'features'}|"
        f"{'same stack' if c['same_stack'] else 'across stacks'}"
    )


def _in_width_set(x: dict, key: str) -> bool:
    """Whether case ``x`` informs the width ``key``: the held-out residuals of its kind
    (jobs held out for "measured", devices held out for "features")."""
    fold = "leave-one-job-out" if key.startswith("measured") else "leave-one-device-out"
    return (
        x["fold"] == fold
        and (x["both_measured"] or fold != "leave-one-job-out")
        and (x["same_stack"] == key.endswith("same stack"))
    )


WIDTH_KEYS = ("measured|same stack", "measured|across stacks", "features|same stack",
              "features|across stacks")  # fmt: skip


def _pairs(obs: list[dict], job: str) -> list[tuple[dict, dict]]:
    mine = [o for o in obs if o["job"] == job]
    return [(a, b) for a in mine for b in mine if a is not b and a["cell"] != b["cell"]]


def _case(fitted: dict, a: dict, b: dict, fold: str) -> dict | None:
    ea, eb = _effect(fitted, a["cell"]), _effect(fitted, b["cell"])
    if ea is None or eb is None:
        return None
    xa, xb = batch_term(a.get("batch")), batch_term(b.get("batch"))
    beta = fitted["scale_slope"]
    if not (a.get("batch") and b.get("batch")):
        xa = xb = 0.0  # a batch not known on one side: the model's point at one batch,
        beta = fitted["scale_slope_batch_unknown"]  # the device count standing for it
    # The scale and batch corrections every method gets (only the device part differs).
    scale = beta * (math.log2(b["devices"]) - math.log2(a["devices"]))
    scale += fitted["batch_slope"] * (xb - xa)
    slopes = fitted["batch_slopes"]
    device_batch = slopes.get(b["cell"], 0.0) * xb - slopes.get(a["cell"], 0.0) * xa
    truth = b["log_t"] - a["log_t"]
    pa, pb = _peak(a["cell"]), _peak(b["cell"])
    return {
        "fold": fold,
        "job": a["job"],
        "source": a["source"],
        "from": a["cell"],
        "to": b["cell"],
        "from_devices": a["devices"],
        "to_devices": b["devices"],
        "same_device_type": a["cell"].split("|")[0] == b["cell"].split("|")[0],
        "both_measured": ea[1]
        and eb[1]
        and fitted["groups"].get(a["cell"]) == fitted["groups"].get(b["cell"]),
        "same_stack": _stack(a["cell"]) == _stack(b["cell"]),
        "true_log_ratio": truth,
        "model_log_ratio": eb[0] - ea[0] + device_batch + scale,
        "same_speed_log_ratio": scale,
        "peak_log_ratio": (math.log(pa / pb) if pa and pb else 0.0) + scale,
    }


def evaluate(obs: list[dict]) -> list[dict]:
    cases = []
    for job in sorted({o["job"] for o in obs}):
        pairs = _pairs(obs, job)
        if not pairs:
            continue
        fitted = fit_device_speed([o for o in obs if o["job"] != job], FEATURES)
        cases += [c for a, b in pairs if (c := _case(fitted, a, b, "leave-one-job-out"))]
    devices = sorted({o["cell"].split("|")[0] for o in obs})
    for dev in devices:
        train = [o for o in obs if o["cell"].split("|")[0] != dev]
        if len({o["cell"] for o in train}) < 2:
            continue
        fitted = fit_device_speed(train, FEATURES)
        for job in sorted({o["job"] for o in obs}):
            for a, b in _pairs(obs, job):
                if b["cell"].split("|")[0] == dev and a["cell"].split("|")[0] != dev:
                    c = _case(fitted, a, b, "leave-one-device-out")
                    if c:
                        cases.append(c)
    return cases


def _err(log_pred: float, log_true: float) -> float:
    return 100.0 * abs(math.exp(log_pred - log_true) - 1.0)


def half_widths(cases: list[dict]) -> dict:
    """95 % quantiles of |log residual| per kind of pair (``WIDTH_KEYS``; a kind with no
    case is left out)."""
    out = {}
    for k in WIDTH_KEYS:
        res = [
            abs(x["model_log_ratio"] - x["true_log_ratio"]) for x in cases if _in_width_set(x, k)
        ]
        if res:
            out[k] = float(np.quantile(res, 0.95))
    return out


def _cross_width(cases: list[dict], c: dict) -> float:
    """The 95 % half-width for case ``c`` from the residuals of other jobs and, for a pair
    across device types, other target devices (the shipped widths use every case). A pair
    on one device at two precisions (DLE's V100) keeps the other jobs' such pairs: without
    them its width would come from device changes only."""
    key = _width_key(c)
    res = [
        abs(x["model_log_ratio"] - x["true_log_ratio"])
        for x in cases
        if x["job"] != c["job"]
        and (c["same_device_type"] or x["to"].split("|")[0] != c["to"].split("|")[0])
        and _in_width_set(x, key)
    ]
    return float(np.quantile(res, 0.95))


def job_weighted_median(cases: list[dict], errors: list[float]) -> float:
    """The median of ``errors`` with each job weighing one (its pairs share the weight): a
    job measured on many systems (MLPerf v0.6 Mask R-CNN: 24 pairs across stacks) counts
    once."""
    pairs: dict = {}
    for c in cases:
        pairs[c["job"]] = pairs.get(c["job"], 0) + 1
    order = np.argsort(errors)
    weight = np.cumsum([1.0 / pairs[cases[i]["job"]] for i in order])
    return float(np.asarray(errors)[order][np.searchsorted(weight, weight[-1] / 2)])


def summarise(cases: list[dict]) -> dict:
    out: dict = {}
    subsets = {
        "all": lambda c: True,
        "across device types": lambda c: not c["same_device_type"],
        "same device, other precision (DLE)": lambda c: c["same_device_type"],
        "across CUDA GPU types": lambda c: not c["same_device_type"] and c["same_stack"],
        "across software stacks (GPU<->TPU, Gaudi)": lambda c: not c["same_stack"],
        "gavel P100<->V100": lambda c: c["source"] == "gavel",
        "mlperf": lambda c: c["source"] == "mlperf",
        "mlperf across CUDA GPU types": lambda c: (
            c["source"] == "mlperf" and not c["same_device_type"] and c["same_stack"]
        ),
        "mlperf across CUDA GPU types, same count": lambda c: (
            c["source"] == "mlperf"
            and not c["same_device_type"]
            and c["same_stack"]
            and c["from_devices"] == c["to_devices"]
        ),
        "mlperf, device counts within 2x": lambda c: (
            c["source"] == "mlperf" and abs(math.log2(c["from_devices"] / c["to_devices"])) <= 1
        ),
    }
    for fold in ("leave-one-job-out", "leave-one-device-out"):
        for name, keep in subsets.items():
            sel = [c for c in cases if c["fold"] == fold and keep(c)]
            if not sel:
                continue
            row = {"cases": len(sel), "jobs": len({c["job"] for c in sel})}
            for m in ("model", "same_speed", "peak"):
                e = [_err(c[f"{m}_log_ratio"], c["true_log_ratio"]) for c in sel]
                row[m] = {
                    "median_pct": float(np.median(e)),
                    # A median of 10 % needs half the pairs within 10 %.
                    "within_10_pct": float(np.mean(np.asarray(e) <= 10.0)),
                    "p90_pct": float(np.quantile(e, 0.9)),
                    "worst_pct": float(max(e)),
                    "job_weighted_median_pct": job_weighted_median(sel, e),
                }
            # Coverage of an interval whose width was learned without this case's job and
            # target device (the shipped widths use every case).
            cov = [
                abs(c["model_log_ratio"] - c["true_log_ratio"]) <= _cross_width(cases, c)
                for c in sel
            ]
            row["model"]["coverage_95"] = float(np.mean(cov))
            old = [
                min(c["same_speed_log_ratio"], c["peak_log_ratio"]) - 1e-12
                <= c["true_log_ratio"]
                <= max(c["same_speed_log_ratio"], c["peak_log_ratio"]) + 1e-12
                for c in sel
            ]
            row["same_speed"]["coverage_same_to_peak"] = float(np.mean(old))
            row["model_closer_than_both"] = float(
                np.mean(
                    [
                        _err(c["model_log_ratio"], c["true_log_ratio"])
                        < min(
                            _err(c["same_speed_log_ratio"], c["true_log_ratio"]),
                            _err(c["peak_log_ratio"], c["true_log_ratio"]),
                        )
                        for c in sel
                    ]
                )
            )
            out[f"{fold} / {name}"] = row
    return out


def history_cases(obs: list[dict], widths_all: dict) -> list[dict]:
    """The user's history, each source in turn a user's cluster (see the module docstring):
    a row per pair of one of its jobs at one precision across device types, the model's
    log ratio fitted without the source and the same moved by the source's other jobs on
    the two cells (``pooled_ratio``), each with its 95 % half-width (``widths_all``, every
    source's, where the source's absence leaves a kind of pair without cases)."""
    out = []
    for src in sorted({o["source"] for o in obs}):
        train = [o for o in obs if o["source"] != src]
        fitted = fit_device_speed(train, FEATURES)
        widths = {**widths_all, **half_widths(evaluate(train))}
        mine = [o for o in obs if o["source"] == src]
        cases = [
            c
            for job in sorted({o["job"] for o in mine})
            for a, b in _pairs(mine, job)
            if a["cell"].split("|")[1] == b["cell"].split("|")[1]
            and a["cell"].split("|")[0] != b["cell"].split("|")[0]
            and (c := _case(fitted, a, b, "leave-one-source-out"))
        ]
        for c in cases:
            others: dict = {}  # the other jobs on the same two cells: one residual each
            for x in cases:
                if x["job"] != c["job"] and (x["from"], x["to"]) == (c["from"], c["to"]):
                    others.setdefault(x["job"], []).append(
                        x["true_log_ratio"] - x["model_log_ratio"]
                    )
            kind = "measured" if c["both_measured"] else "features"
            h = widths[f"{kind}|{'same stack' if c['same_stack'] else 'across stacks'}"]
            point, width = pooled_ratio(
                c["model_log_ratio"], h, [float(np.mean(v)) for v in others.values()]
            )
            out.append({**c, "history_jobs": len(others), "model_half_width_log": h,
                        "history_log_ratio": point, "history_half_width_log": width})  # fmt: skip
    return out


def summarise_history(cases: list[dict]) -> dict:
    """Median |error| % and 95 % coverage of the model alone, with the user's history and
    of same speed, by source and in all."""
    out = {}
    for name in ("all", *sorted({c["source"] for c in cases})):
        sel = [c for c in cases if name in ("all", c["source"])]
        row = {"cases": len(sel), "jobs": len({c["job"] for c in sel}),
               "with_history": sum(c["history_jobs"] > 0 for c in sel)}  # fmt: skip
        for m, point, width in (("model", "model_log_ratio", "model_half_width_log"),
                                ("history", "history_log_ratio", "history_half_width_log"),
                                ("same_speed", "same_speed_log_ratio", None)):  # fmt: skip
            e = [_err(c[point], c["true_log_ratio"]) for c in sel]
            row[m] = {"median_pct": float(np.median(e))}
            if width:
                row[m]["coverage_95"] = float(
                    np.mean([abs(c[point] - c["true_log_ratio"]) <= c[width] for c in sel])
                )
                row[m]["median_half_width_factor"] = float(
                    math.exp(np.median([c[width] for c in sel]))
                )
        out[name] = row
    return out


def in_sample_errors(obs: list[dict]) -> dict:
    """|error| % of the model fitted on every job (the held-out one included) over the pairs
    across device types, and its CUDA and across-stacks parts: the part of the held-out
    error that is job x device interaction, which no per-device ratio removes."""
    everything = fit_device_speed(obs, FEATURES)
    cases = [
        c
        for job in sorted({o["job"] for o in obs})
        for a, b in _pairs(obs, job)
        if (c := _case(everything, a, b, "in-sample")) and not c["same_device_type"]
    ]
    parts = {
        "across device types": lambda c: True,
        "across CUDA GPU types": lambda c: c["same_stack"],
        "across software stacks": lambda c: not c["same_stack"],
    }
    out = {}
    for name, keep in parts.items():
        e = [_err(c["model_log_ratio"], c["true_log_ratio"]) for c in cases if keep(c)]
        if e:
            out[name] = e
    return out


def in_sample_medians(obs: list[dict]) -> dict:
    """The median of ``in_sample_errors`` by part."""
    return {k: float(np.median(e)) for k, e in in_sample_errors(obs).items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the summary and every case here")
    ap.add_argument(
        "--write",
        nargs="?",
        const=str(DEVICE_SPEED_FILE),
        help=f"write the fitted model (default {DEVICE_SPEED_FILE})",
    )
    args = ap.parse_args(argv)
    obs = observations()
    cases = evaluate(obs)
    hw = half_widths(cases)
    summary = summarise(cases)
    print(
        f"{len(obs)} measurements, {len({o['job'] for o in obs})} jobs, cells: "
        + ", ".join(sorted({o["cell"] for o in obs}))
    )
    print(
        "95 % interval, factor either way: "
        + ", ".join(f"{k} x{math.exp(v):.2f}" for k, v in hw.items())
    )
    print(
        f"{'fold / subset':66} {'n':>4}  {'model med/p90/worst %':>24} {'cov':>5}  "
        f"{'same-speed med/worst':>20}  {'peak-ratio med/worst':>20}  closer"
    )
    for k, r in summary.items():
        m, s, p = r["model"], r["same_speed"], r["peak"]
        print(
            f"{k:66} {r['cases']:4d}  {m['median_pct']:7.1f} {m['p90_pct']:7.1f} "
            f"{m['worst_pct']:8.1f} {100 * m['coverage_95']:4.0f}%  "
            f"{s['median_pct']:8.1f} {s['worst_pct']:10.1f}  {p['median_pct']:8.1f} "
            f"{p['worst_pct']:10.1f}  {100 * r['model_closer_than_both']:4.0f}%"
        )
    print("each job weighing one (its pairs share the weight), median %, model / same speed /"
          " peak ratio:")  # fmt: skip
    for k, r in summary.items():
        if "device types" in k or "CUDA" in k or "stacks" in k:
            w = [r[m]["job_weighted_median_pct"] for m in ("model", "same_speed", "peak")]
            print(f"  {k:64} {r['jobs']:3d} jobs  {w[0]:6.1f} {w[1]:6.1f} {w[2]:6.1f}")
    # The floor of any one-ratio-per-device model on this data: fitted on every job, the
    # pair's own included (what the job x device interaction leaves), by subset.
    in_sample = in_sample_errors(obs)
    floors = {k: float(np.median(e)) for k, e in in_sample.items()}
    within = {k: float(np.mean(np.asarray(e) <= 10.0)) for k, e in in_sample.items()}
    floor = floors["across device types"]
    print(
        "in-sample (no job held out), median: "
        + ", ".join(f"{k} {v:.1f} %" for k, v in floors.items())
    )
    # What a 10 % median needs: half the pairs within 10 %, held out as in-sample.
    held = summary["leave-one-job-out / across device types"]
    print(
        "pairs across device types within 10 %: held out by job "
        f"{100 * held['model']['within_10_pct']:.0f} %, in-sample "
        f"{100 * within['across device types']:.0f} % (a 10 % median needs 50 %); "
        "by kind, held out by job: "
        + ", ".join(
            f"{k.split(' / ')[1]} {100 * summary[k]['model']['within_10_pct']:.0f} % "
            f"of {summary[k]['cases']}"
            for k in (
                "leave-one-job-out / gavel P100<->V100",
                "leave-one-job-out / mlperf across CUDA GPU types",
                "leave-one-job-out / across software stacks (GPU<->TPU, Gaudi)",
            )
        )
    )
    # What no device model can remove: one job on two systems of the same cell and count.
    same: dict = {}
    for o in obs:
        same.setdefault((o["job"], o["cell"], o["devices"]), []).append(o["log_t"])
    twins = [
        _err(x, y) for v in same.values() for i, x in enumerate(v) for y in v[i + 1 :]
    ]  # fmt: skip
    twin_median = float(np.median(twins)) if twins else float("nan")
    print(
        f"one job on two systems of the same cell and device count: median "
        f"{twin_median:.1f} %, worst {max(twins, default=float('nan')):.1f} % "
        f"({len(twins)} pairs)"
    )
    hist = history_cases(obs, hw)
    hist_summary = summarise_history(hist)
    print("the user's history (each source left out in turn as a user's cluster; its other "
          "jobs on the pair moving the model), median % / 95 % coverage:")  # fmt: skip
    for k, r in hist_summary.items():
        m, h = r["model"], r["history"]
        print(
            f"  {k:8} {r['cases']:4d} pairs of {r['jobs']:3d} jobs: model {m['median_pct']:.1f} "
            f"% / {100 * m['coverage_95']:.1f} %, with the history {h['median_pct']:.1f} % / "
            f"{100 * h['coverage_95']:.1f} % (x{h['median_half_width_factor']:.2f}), same "
            f"speed {r['same_speed']['median_pct']:.1f} %"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "summary": summary,
                    "history": {"summary": hist_summary, "cases": hist},
                    "in_sample_across_device_types_median_pct": floor,
                    "in_sample_median_pct": floors,
                    "in_sample_within_10_pct": within,
                    "same_cell_and_count_two_systems_median_pct": twin_median,
                    "half_widths_log": hw,
                    "cases": cases,
                },
                indent=1,
            )
        )
    if args.write:
        fitted = fit_device_speed(obs, FEATURES)
        fitted.pop("jobs")
        doc = {
            "version": 1,
            "kind": "ailens.device_speed",
            "source": "benchmarks/bench_devices.py --write: Gavel (P100/V100), NVIDIA "
            "DeepLearningExamples (V100 fp32/mixed, 1 GPU), MLPerf Training v0.6/v1.1/v2.1/v3.0 "
            "development logs; features from vendor datasheets; robust (Huber) fit with "
            "per-cell slopes on log2(batch per device / 32)",
            **fitted,
            "half_widths": hw,
            "evaluation": {
                k: {
                    "cases": v["cases"],
                    "median_pct": round(v["model"]["median_pct"], 2),
                    "coverage_95": round(v["model"]["coverage_95"], 3),
                }
                for k, v in summary.items()
            },
        }
        Path(args.write).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
