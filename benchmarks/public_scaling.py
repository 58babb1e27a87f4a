"""Data-parallel scaling on public measurements (``bench_whatif.py --public``, kind "scaling").

Each case predicts a job's step time at a larger GPU count from its SMALLEST measured
configuration alone (its step time, batch and gradient size, and the platform the source
names), with the cluster what-if (``ailens.predict.predict``, the same predictor as
``ailens whatif JOB.json``), beside the measured step and the ideal-scaling baseline (the
source's step time x the per-device work ratio: 1 for weak scaling; communication ignored).
Nothing of a target's measurement is used.

Sources (``scaling/`` of the data folder; its README says how each figure was derived):

* ``pytorch_ddp_benchmark.csv``: per model, 1M/1G (DDP on one GPU) -> 1M/2G, 1M/4G, 1M/8G,
  2M/8G at the p50 iteration time; DGX-1 V100 (``dgx1-v100``), DDP buckets 25 MB.
* ``pytorch_ddp_bucket_cap.csv``: the same with bucket_cap_mb=1, p75 (the table's first).
* ``gavel_dp_throughputs.csv``: per job type and worker type, 1 -> 2, 4, 8 workers. Gavel
  records no server or network: ``pcie-node`` assumed (8 GPUs on PCIe, one 100 Gb/s NIC).
  V100 rows are noisy (README: per-step time drops by > 5 % when workers are added for 14 of
  19 job types); they are kept and summarised apart (``source`` ends in "V100").
  Strong scaling (``_gavel_strong_cases``): one worker at a job's largest batch B -> q
  workers at B/q where measured; the compute at B/q from the one-worker rows at every batch
  (the job's measured curve).
  Transformer: the README gives no parameter count, only "about 44.1 M + 512 x (V_src +
  V_tgt)"; 44.1 M is used (a lower bound, said in the case).
* ``tensorflow_benchmarks_dgx1_p100_nccl.csv``: 1 -> 2, 4, 8 GPUs per (model, data, batch)
  on a DGX-1 P100 (``dgx1-p100``, below: NVLink 1); AlexNet 61.1 M and VGG16 138.4 M
  parameters (the architectures' published counts), gradients in 25 MB groups assumed.
* ``dle_training_perf_dgx1_dgx2.csv``, only rows where the derivation is meaningful: a batch
  per GPU and a per-micro-batch time given, a throughput column that names a per-sample unit
  (img/s, imgs/second, sequences/sec, samples/s: so batch and throughput count the same
  thing; tok/s, mels/s, mol/ms and unnamed units are left out), the table's own column saying
  weak scaling, and a series (same README, platform, table, precision, batch and settings:
  sequence length, accumulation, XLA, dataset, ...) with more than one GPU count; from its
  smallest count. Strong scaling (``_dle_strong_cases``): tables whose column says strong
  scaling, the global batch constant along the series, per-sample units; compute at the
  smaller batch per GPU by the stated floor assumption (10 %, band 0-20 %), the baseline the
  source's step x (batch per GPU ratio). The gradient size
  is known only for the models in ``DLE_PARAMETERS``; the others are predicted without
  communication (said in the case: then prediction = baseline). Gradient accumulation (the
  table's "Accumulation steps") reduces once per that many micro-batches.
"""

from __future__ import annotations

import csv
import re
from dataclasses import replace
from pathlib import Path

from ailens.predict import (
    DEFAULT_PLATFORMS,
    JobDescription,
    Link,
    ddp_buckets,
    measured_links,
    predict,
    widen_unexplained,
)

MB = 1024 * 1024
GB = 1e9

# DGX-1 with 8 x P100: the hybrid cube mesh of the V100 DGX-1 with one NVLink 1 per edge.
_V = DEFAULT_PLATFORMS["dgx1-v100"]
DGX1_P100 = replace(
    _V,
    name="dgx1-p100",
    intra=Link(
        4 * 20 * GB,
        _V.intra.latency_s,
        "vendor datasheet value: NVLink 1, 4 links x 20 GB/s per direction per P100 "
        "(NVIDIA DGX-1 P100)",
    ),
    nvlinks=tuple(tuple(min(x, 1) for x in row) for row in _V.nvlinks),
    description="NVIDIA DGX-1 with 8 x P100: NVLink 1 hybrid cube mesh, 4 x 100 Gb/s IB",
)

# Parameters of the DeepLearningExamples models whose size is published with the model
# (paper or model card); the others get no communication term.
_UNET2D = (
    "counted from model/unet.py and model/layers.py (TensorFlow@3306ea2/11820597, "
    "TensorFlow2@2de2945): U-Net, 3x3 valid convolutions 64-1024 filters with bias, 3x3 "
    "transposed convolutions, 2 classes; 1 input channel (grayscale EM images) assumed"
)
DLE_PARAMETERS = {
    "PyTorch/LanguageModeling/BERT": (340_000_000, "BERT-large, Devlin et al. 2019"),
    "TensorFlow/LanguageModeling/BERT": (340_000_000, "BERT-large, Devlin et al. 2019"),
    "TensorFlow2/LanguageModeling/ELECTRA": (110_000_000, "ELECTRA-base, Clark et al. 2020"),
    "PyTorch/LanguageModeling/Transformer-XL": (
        151_000_000,
        "Transformer-XL base WT103, Dai et al. 2019",
    ),
    "TensorFlow/LanguageModeling/Transformer-XL": (
        151_000_000,
        "Transformer-XL base WT103, Dai et al. 2019",
    ),
    "PyTorch/Translation/Transformer": (210_000_000, "Transformer big, Vaswani et al. 2017"),
    # Counted from the READMEs' own model code (layer by layer: k x k x in x out weights +
    # biases), NVIDIA/DeepLearningExamples, model/ of each folder; only the code was read.
    "TensorFlow/Segmentation/UNet_Medical": (34_512_258, _UNET2D),
    "TensorFlow2/Segmentation/UNet_Medical": (34_512_258, _UNET2D),
    "TensorFlow/Segmentation/UNet_3D_Medical": (
        31_196_196,
        "counted from model/unet3d.py@115867b, model/layers.py@6194324, model/model_fn.py@"
        "115867b (4 classes), runtime/arguments.py@115867b (instancenorm by default: "
        "convolutions without bias, scale and shift per channel): 3x3x3 convolutions 32-320 "
        "filters, 2x2x2 transposed convolutions with bias; 4 input channels (BraTS "
        "modalities) assumed",
    ),
    "TensorFlow2/Segmentation/MaskRCNN": (
        44_178_993,
        "trainable parameters counted from mrcnn_tf2/model/: mask_rcnn.py@dcd5071, "
        "models/heads.py@8e46407, models/fpn.py@d58ccd7, models/resnet50/resnet.py@d58ccd7, "
        "conv2d_block.py@8e46407, bottleneck_block.py@dcd5071: ResNet-50 groups 2-4 (stem, "
        "group 1 and batch norm frozen), FPN levels 2-6, RPN, box and mask heads; 91 classes "
        "(COCO, the heads' default) and 3 anchors per location assumed",
    ),
}


def _read(path: Path) -> list[dict]:
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: public data not found; give --data DIR (the scaling-dev folder) or set "
            "AILENS_SCALING_DATA"
        )
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _case(
    source: str,
    job: JobDescription,
    frm: dict,
    to: dict,
    measured: float,
    platform,
    *,
    grad_known: bool = True,
    accumulation: int = 1,
    extra: dict | None = None,
) -> dict:
    """One case: the job predicted at ``to['gpus']``."""
    q = int(to["gpus"])
    rpn = int(to.get("gpus_per_node") or min(q, platform.devices_per_node))
    row = predict(job, [q], platform, ranks_per_node=rpn, scaling=job.scaling)[0]
    comm = row.comm_step_s / accumulation if grad_known else 0.0
    pred = row.compute_step_s + comm
    # Ideal scaling: the source's step x the per-device work ratio (1 for weak scaling).
    base = job.step_s * (
        row.batch_per_device / job.batch_per_device if job.scaling == "strong" else 1.0
    )
    # The interval: the compute's band, and (with a gradient size) the unmeasured links'.
    comp = row.terms[0]
    if grad_known:
        low = pred + row.step_low_s - row.step_time_s
        high = pred + row.step_high_s - row.step_time_s
        wide = row.wide_term
    else:
        low = pred + comp.detail["low_s"] - comp.seconds
        high = pred + comp.detail["high_s"] - comp.seconds
        wide = "compute" if high > low else ""
        # The communication is not modelled either: what no term prices still applies.
        low, high, wide = widen_unexplained(low, high, wide, q, [job.ranks])
    out = {
        "source": source,
        "kind": "scaling",
        "from": frm,
        "to": to,
        "band": None,
        "predicted_s": pred,
        "measured_s": measured,
        "error_pct": 100.0 * (pred - measured) / measured,
        "baseline_s": base,
        "baseline_error_pct": 100.0 * (base - measured) / measured,
        "over_link_ceiling": row.over_link_ceiling,
        "platform": platform.name,
        # Whether the links the target's collectives cross were fitted (nccl-tests or the
        # job's runs), not datasheet figures: issue 32's one-scale goal is on such platforms.
        "links_measured": measured_links(platform, row.nodes),
        "scaling": job.scaling,
        "compute_low_s": row.compute_low_s,
        "compute_high_s": row.compute_high_s,
        "step_low_s": low,
        "step_high_s": high,
        "covered": bool(low * (1 - 1e-9) <= measured <= high * (1 + 1e-9)),
        "wide_term": wide,
        "comm_total_s": row.terms[1].detail.get("comm_total_s", 0.0) if grad_known else None,
        "exposed_comm_s": comm,
        "assumptions": list(row.assumptions)
        + ([] if grad_known else ["no gradient size: communication not modelled"])
        + (
            [
                f"gradient accumulation {accumulation}: one reduction per {accumulation} "
                "micro-batches"
            ]
            if accumulation > 1
            else []
        ),
    }
    out.update(extra or {})
    return out


def _job(name: str, grad_bytes: int, step: float, batch, buckets=None, **kw) -> JobDescription:
    return JobDescription(
        name=name,
        grad_bytes=int(grad_bytes),
        buckets=tuple(buckets or ddp_buckets(grad_bytes)),
        step_s=float(step),
        batch_per_device=float(batch) if batch else None,
        **kw,
    )


def _ddp_cases(
    rows: list[dict], source: str, time_key: str, pct: str, cap_mb: float, case=None
) -> list:
    p = DEFAULT_PLATFORMS["dgx1-v100"]
    cases = []
    by_model: dict[str, list[dict]] = {}
    for r in rows:
        if r["percentile"] == pct and r["ddp"] == "True":
            by_model.setdefault(r["model"], []).append(r)
    for model, rs in by_model.items():
        rs.sort(key=lambda r: int(r["gpus"]))
        src = rs[0]
        # Step-to-step spread of the source from its own percentiles (normal: p95 - p50 =
        # 1.645 sd; the table prints milliseconds, so 0 when they round alike).
        pcts = {
            r["percentile"]: float(r[time_key])
            for r in rows
            if r["model"] == model and r["config_label"] == src["config_label"]
        }
        sd = max(pcts.get("p95", 0.0) - pcts.get("p50", pcts.get("p75", 0.0)), 0.0)
        sd /= 1.645 if "p50" in pcts else 1.645 - 0.674
        first = cap_mb if cap_mb < 1 else 1.0
        job = _job(
            model,
            int(src["grad_bytes_fp32"]),
            float(src[time_key]),
            src["batch_per_gpu"],
            ddp_buckets(int(src["grad_bytes_fp32"]), cap_mb, first),
            platform=p.name,
            step_sd_s=sd,
            source=f"{source} {model} {src['config_label']} {pct}",
        )
        frm = {
            "model": model,
            "config": src["config_label"],
            "gpus": 1,
            "percentile": pct,
            "step_s": job.step_s,
            "bucket_cap_MB": cap_mb,
            "step_sd_s": sd,
        }
        for r in rs[1:]:
            to = {
                "config": r["config_label"],
                "gpus": int(r["gpus"]),
                "gpus_per_node": int(r["gpus_per_machine"]),
                "nodes": int(r["machines"]),
            }
            cases.append((case or _case)(source, job, frm, to, float(r[time_key]), p))
    return cases


def _gavel_cases(rows: list[dict], case=None) -> list[dict]:
    p = DEFAULT_PLATFORMS["pcie-node"]
    cases = []
    series: dict[tuple, list[dict]] = {}
    for r in rows:
        series.setdefault((r["worker_type"], r["job_type"]), []).append(r)
    for (wt, jt), rs in sorted(series.items()):
        rs.sort(key=lambda r: int(r["workers"]))
        src = rs[0]
        notes = ["Gavel records no server or network: pcie-node assumed"]
        if src["parameters"]:
            params = int(src["parameters"])
        else:  # Transformer: the README's lower bound
            params = 44_100_000
            notes.append(
                "Transformer: 44.1 M parameters (README's count without the "
                "vocabulary embeddings: a lower bound)"
            )
        job = _job(
            jt,
            4 * params,
            float(src["per_step_s_derived"]),
            src["batch_per_worker"],
            platform=p.name,
            source=f"gavel {wt} {jt}",
            assumptions=tuple(notes),
        )
        frm = {"job": jt, "worker_type": wt, "gpus": int(src["workers"]), "step_s": job.step_s}
        for r in rs[1:]:
            to = {"gpus": int(r["workers"])}
            cases.append(
                (case or _case)(
                    f"gavel_dp_throughputs.csv {wt}",
                    job,
                    frm,
                    to,
                    float(r["per_step_s_derived"]),
                    p,
                )
            )
    return cases


def _gavel_strong_cases(rows: list[dict], case=None) -> list[dict]:
    """Strong scaling from Gavel's rows: one worker at its largest batch B is the source,
    and q workers at B/q (a global batch of B) the targets, where Gavel measured that batch.
    The compute at B/q comes from the source's own curve: the same job type at one worker
    and every batch Gavel ran (no multi-worker row is used)."""
    p = DEFAULT_PLATFORMS["pcie-node"]
    cases = []
    by: dict[tuple, dict[tuple[int, int], dict]] = {}
    for r in rows:
        fam = (r["worker_type"], r["model"])
        by.setdefault(fam, {})[(int(r["batch_per_worker"]), int(r["workers"]))] = r
    for (wt, model), cells in sorted(by.items()):
        curve = tuple(sorted((float(b), float(r["per_step_s_derived"]))
                             for (b, w), r in cells.items() if w == 1))  # fmt: skip
        if len(curve) < 2:
            continue
        big = int(curve[-1][0])
        src = cells[(big, 1)]
        params = int(src["parameters"]) if src["parameters"] else 44_100_000
        job = _job(
            f"{model} (global batch {big})",
            4 * params,
            float(src["per_step_s_derived"]),
            big,
            curve=curve,
            scaling="strong",
            global_batch=float(big),
            platform=p.name,
            source=f"gavel {wt} {model} strong",
            assumptions=("Gavel records no server or network: pcie-node assumed",),
        )
        frm = {"job": f"{model} strong", "worker_type": wt, "gpus": 1, "global_batch": big,
               "curve_batches": [int(b) for b, _ in curve], "step_s": job.step_s}  # fmt: skip
        for q in (2, 4, 8):
            r = cells.get((big // q, q)) if big % q == 0 else None
            if r is None:
                continue
            cases.append(
                (case or _case)(
                    f"gavel_dp_throughputs.csv {wt} strong",
                    job,
                    frm,
                    {"gpus": q, "batch_per_gpu": big // q},
                    float(r["per_step_s_derived"]),
                    p,
                )  # fmt: skip
            )
    return cases


_TF_PARAMS = {"Alexnet": 61_100_000, "VGG16": 138_400_000}


def _tf_cases(rows: list[dict], case=None) -> list[dict]:
    cases = []
    series: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["per_step_s_derived"]:
            series.setdefault((r["model"], r["data"], r["batch_per_gpu"]), []).append(r)
    for (model, data, batch), rs in sorted(series.items()):
        rs.sort(key=lambda r: int(r["gpus"]))
        src = rs[0]
        job = _job(
            model,
            4 * _TF_PARAMS[model],
            float(src["per_step_s_derived"]),
            batch,
            platform=DGX1_P100.name,
            source=f"tf benchmarks {model} {data} {batch}",
        )
        frm = {
            "model": model,
            "data": data,
            "batch_per_gpu": int(batch),
            "gpus": 1,
            "step_s": job.step_s,
        }
        for r in rs[1:]:
            cases.append(
                (case or _case)(
                    "tensorflow_benchmarks_dgx1_p100_nccl.csv",
                    job,
                    frm,
                    {"gpus": int(r["gpus"])},
                    float(r["per_step_s_derived"]),
                    DGX1_P100,
                )
            )
    return cases


_SAMPLE_UNITS = ("img/s", "imgs/second", "sequences/sec", "samples/s")
_SETTINGS = (
    "sequence length",
    "accumulation",
    "global batch",
    "xla",
    "model size",
    "dataset",
    "dgx system",
)


def _settings(other: str) -> dict:
    """The row's settings (sequence length, accumulation, ...), not its results."""
    out = {}
    for kv in other.split("; "):
        k, _, v = kv.partition("=")
        if any(s in k.lower() for s in _SETTINGS) and "scaling" not in k.lower():
            out[k.strip()] = v.strip()
    return out


def _accumulation(settings: dict, precision: str) -> int:
    """Micro-batches per optimizer step for this precision (1 when not stated)."""
    for k, v in settings.items():
        if "accum" not in k.lower():
            continue
        nums = [int(x) for x in re.findall(r"\d+", v)]
        if not nums:
            return 1
        if len(nums) == 1:
            return nums[0]
        low = k.lower()
        mixed_first = "mixed" in low and low.index("mixed") < low.find("fp32")
        fp32, mixed = (nums[1], nums[0]) if mixed_first else (nums[0], nums[1])
        return fp32 if precision in ("fp32", "tf32") else mixed
    return 1


def _dle_series(rows: list[dict], same=None) -> list[list[dict]]:
    """A table's rows in order, cut into series of growing GPU counts (and equal ``same(row)``
    when given); series of fewer than two rows are dropped."""
    rows = sorted(rows, key=lambda r: int(r["row_index"]))
    runs: list[list[dict]] = []
    cur: list[dict] = []
    for r in rows:
        if cur and (int(r["gpus"]) <= int(cur[-1]["gpus"]) or (same and same(r) != same(cur[0]))):
            runs.append(cur)
            cur = []
        cur.append(r)
    runs.append(cur)
    return [run for run in runs if len(run) >= 2]


def _dle_cases(rows: list[dict], case=None) -> list[dict]:
    cases = []
    series: dict[tuple, list[dict]] = {}
    for r in rows:
        other = r["other_columns"]
        if not (r["batch_per_gpu"] and r["per_microbatch_s_derived"]):
            continue
        if not re.search(r"weak scaling", other, re.I):
            continue
        if not any(u in r["throughput_column"] for u in _SAMPLE_UNITS):
            continue
        settings = tuple(sorted(_settings(other).items()))
        key = (
            r["readme"],
            r["platform_heading"],
            r["table_index"],
            r["precision"],
            r["batch_per_gpu"],
            settings,
        )
        series.setdefault(key, []).append(r)
    for (readme, heading, _t, prec, batch, settings), rs in sorted(series.items()):
        # Rows of one table at one batch can hold several settings (datasets, sequence
        # lengths): a series restarts when the GPU count does not grow.
        folder = readme.rsplit("/README.md", 1)[0]
        pc = DLE_PARAMETERS.get(folder)
        plat = DEFAULT_PLATFORMS["dgx2-v100" if "DGX-2" in heading else "dgx1-v100"]
        for run in _dle_series(rs):
            src = run[0]
            params = pc[0] if pc else 0
            dtype = 2 if prec == "mixed" and "TensorFlow" in readme else 4
            acc = _accumulation(dict(settings), prec)
            job = _job(
                folder,
                max(params * dtype, 1),
                float(src["per_microbatch_s_derived"]),
                batch,
                platform=plat.name,
                source=f"dle {folder} {heading} {prec}",
            )
            frm = {
                "readme": readme,
                "platform": src["platform_class"],
                "precision": prec,
                "batch_per_gpu": float(batch),
                "gpus": int(src["gpus"]),
                "step_s": job.step_s,
                "parameters": f"{params:,} ({pc[1]})" if pc else "unknown",
                "settings": dict(settings),
                "accumulation": acc,
            }
            for r in run[1:]:
                to = {"gpus": int(r["gpus"]), "nodes": int(r["nodes"] or 1)}
                gpn = int(r["gpus_per_node"] or plat.devices_per_node)
                to["gpus_per_node"] = min(gpn, int(r["gpus"]))
                cases.append(
                    (case or _case)(
                        "dle_training_perf_dgx1_dgx2.csv",
                        job,
                        frm,
                        to,
                        float(r["per_microbatch_s_derived"]),
                        plat,
                        grad_known=pc is not None,
                        accumulation=acc,
                    )
                )
    return cases


def _dle_strong_cases(rows: list[dict], case=None) -> list[dict]:
    """Tables whose own column says strong scaling: the global batch (GPUs x batch per GPU)
    the same along a series; rows with a per-sample unit and a plausible time (<= 1000 s;
    NCF's "samples/s" column holds millions) only."""
    cases = []
    series: dict[tuple, list[dict]] = {}
    for r in rows:
        other = r["other_columns"]
        if not (r["batch_per_gpu"] and r["per_microbatch_s_derived"]):
            continue
        if not re.search(r"strong scaling", other, re.I):
            continue
        if not any(u in r["throughput_column"] for u in _SAMPLE_UNITS):
            continue
        if float(r["per_microbatch_s_derived"]) > 1000:
            continue
        settings = tuple(sorted(_settings(other).items()))
        key = (r["readme"], r["platform_heading"], r["table_index"], r["precision"], settings)
        series.setdefault(key, []).append(r)
    for (readme, heading, _t, prec, settings), rs in sorted(series.items()):
        # A strong-scaling series keeps its global batch (GPUs x batch per GPU).
        folder = readme.rsplit("/README.md", 1)[0]
        pc = DLE_PARAMETERS.get(folder)
        plat = DEFAULT_PLATFORMS["dgx2-v100" if "DGX-2" in heading else "dgx1-v100"]
        for run in _dle_series(rs, lambda r: int(r["gpus"]) * float(r["batch_per_gpu"])):
            src = run[0]
            params = pc[0] if pc else 0
            gb = int(src["gpus"]) * float(src["batch_per_gpu"])
            job = _job(
                folder,
                max(params * 4, 1),
                float(src["per_microbatch_s_derived"]),
                src["batch_per_gpu"],
                platform=plat.name,
                scaling="strong",
                global_batch=gb,
                ranks=int(src["gpus"]),
                ranks_per_node=min(int(src["gpus"]), plat.devices_per_node),
                source=f"dle {folder} {heading} {prec} strong",
            )
            frm = {
                "readme": readme,
                "platform": src["platform_class"],
                "precision": prec,
                "batch_per_gpu": float(src["batch_per_gpu"]),
                "global_batch": gb,
                "gpus": int(src["gpus"]),
                "step_s": job.step_s,
                "parameters": f"{params:,} ({pc[1]})" if pc else "unknown",
                "settings": dict(settings),
            }
            for r in run[1:]:
                to = {"gpus": int(r["gpus"]), "batch_per_gpu": float(r["batch_per_gpu"])}
                cases.append(
                    (case or _case)(
                        "dle_training_perf_dgx1_dgx2.csv strong",
                        job,
                        frm,
                        to,
                        float(r["per_microbatch_s_derived"]),
                        plat,
                        grad_known=pc is not None,
                    )
                )
    return cases


def scaling_cases(data: Path, case=None) -> list[dict]:
    """Every data-parallel scaling case of the public data (see the module docstring).
    ``case``: what makes one case of (source, job, from, to, measured, platform, ...);
    default ``_case`` (the prediction from the smallest configuration)."""
    s = data / "scaling"
    cases = _ddp_cases(
        _read(s / "pytorch_ddp_benchmark.csv"),
        "pytorch_ddp_benchmark.csv",
        "sec_per_iter",
        "p50",
        25.0,
        case,
    )
    cases += _ddp_cases(
        _read(s / "pytorch_ddp_bucket_cap.csv"),
        "pytorch_ddp_bucket_cap.csv",
        "sec_per_iter_bucket1MB",
        "p75",
        1.0,
        case,
    )
    gavel = _read(s / "gavel_dp_throughputs.csv")
    cases += _gavel_cases(gavel, case)
    cases += _gavel_strong_cases(gavel, case)
    cases += _tf_cases(_read(s / "tensorflow_benchmarks_dgx1_p100_nccl.csv"), case)
    dle = _read(s / "dle_training_perf_dgx1_dgx2.csv")
    cases += _dle_cases(dle, case)
    cases += _dle_strong_cases(dle, case)
    return cases


def compute_floor_check(data: Path) -> dict:
    """The strong-scaling compute assumption (``cluster.FLOOR_SHARE``/``FLOOR_BAND``: the
    share of one device's step that does not shrink with its batch) against the measured
    batch curves of the development data: Gavel's one-worker rows of each job at every batch.
    Per job and smaller batch b, the share s that t(b) = t(B) (s + (1 - s) b / B) needs from
    the largest batch B; their quantiles (2.5 / 50 / 97.5 %), and each point predicted from
    B with the shipped share and with the median share of the OTHER jobs (leave one job
    out): median |error|, and how many fall inside the shipped band."""
    import statistics

    from ailens.predict import FLOOR_BAND, FLOOR_SHARE

    rows = _read(Path(data) / "scaling" / "gavel_dp_throughputs.csv")
    curves: dict[tuple, dict[float, float]] = {}
    for r in rows:
        if int(r["workers"]) == 1:
            key = (r["worker_type"], r["model"])
            curves.setdefault(key, {})[float(r["batch_per_worker"])] = float(
                r["per_step_s_derived"]
            )
    points = []  # (job, b / B, t(b) / t(B), share)
    for key, c in sorted(curves.items()):
        big = max(c)
        for b, t in sorted(c.items()):
            if b < big:
                x, y = b / big, t / c[big]
                points.append((key, x, y, (y - x) / (1 - x)))
    shares = sorted(p[3] for p in points)
    qs = statistics.quantiles(shares, n=40, method="inclusive")

    def err(s, x, y):
        return abs(s + (1 - s) * x - y) / y * 100.0

    held = []
    for key in sorted(curves):
        s = statistics.median(p[3] for p in points if p[0] != key)
        held += [err(s, x, y) for k, x, y, _ in points if k == key]
    lo, hi = FLOOR_BAND
    return {
        "points": len(points),
        "jobs": len(curves),
        "share_quantiles_2.5_50_97.5": [qs[0], statistics.median(shares), qs[-1]],
        "shipped_share": FLOOR_SHARE,
        "shipped_band": list(FLOOR_BAND),
        "median_abs_error_pct_shipped": statistics.median(
            err(FLOOR_SHARE, x, y) for _, x, y, _ in points
        ),
        "median_abs_error_pct_leave_one_job_out": statistics.median(held),
        "median_abs_error_pct_no_floor": statistics.median(err(0.0, x, y) for _, x, y, _ in points),
        "inside_shipped_band": sum(lo <= p[3] <= hi for p in points) / len(points),
    }
