"""A job description: what the cluster what-if needs to know about a data-parallel job.

One description, three ways to get it (one predictor, ``cluster.predict``):

* written by hand from what a person knows (``load_job(path)``, JSON, docs/whatif.md);
* from a run directory's features (``job_from_features``);
* from a ``signature.json`` a run wrote (``job_from_signature``).

The JSON a person writes (every key but ``step_s`` has a default, said in ``assumptions``)::

    {"job": "resnet50 DDP", "parameters": 25557032, "grad_dtype": "fp32",
     "bucket_cap_mb": 25, "first_bucket_mb": 1,          # or "bucket_bytes": [...]
     "step_s": 0.100, "batch_per_device": 32,              # measured at this layout
     "compute_curve": [[16, 0.056], [32, 0.100]],          # optional: step compute vs batch
     "step_sd_s": 0.0005,                                  # optional: step-to-step spread
     "ranks": 1, "ranks_per_node": 1, "platform": "dgx1-v100",
     "device": null,                                       # optional: where platform is not it
     "backward_fraction": 0.67, "overlap": true, "precision": "fp32",
     "scaling": "weak", "global_batch": null}
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from .._io import read_json_file
from .platforms import platform_labels

__all__ = [
    "JOB_FORMAT",
    "JobDescription",
    "JobError",
    "ddp_buckets",
    "job_from_dict",
    "job_from_features",
    "job_from_signature",
    "load_job",
]

JOB_FORMAT = "ailens-job"
MB = 1024 * 1024  # DDP's bucket_cap_mb counts MiB (bucket_cap_mb * 1024 * 1024 bytes)
DDP_BUCKET_CAP_MB = 25.0
DDP_FIRST_BUCKET_MB = 1.0
# Share of a training step's compute spent in the backward pass when not given: backward
# costs about twice the forward (two matrix products per layer instead of one).
DEFAULT_BACKWARD_FRACTION = 2.0 / 3.0
_DTYPE_BYTES = {
    "fp32": 4,
    "float32": 4,
    "tf32": 4,
    "fp16": 2,
    "float16": 2,
    "bf16": 2,
    "bfloat16": 2,
    "fp64": 8,
    "float64": 8,
}
_PRECISIONS = ("fp32", "tf32", "mixed", "fp16", "bf16", "fp64")
_KEYS = {
    "format",
    "version",
    "job",
    "parameters",
    "grad_bytes",
    "grad_dtype",
    "bucket_cap_mb",
    "first_bucket_mb",
    "bucket_bytes",
    "step_s",
    "compute_s",
    "batch_per_device",
    "compute_curve",
    "ranks",
    "ranks_per_node",
    "platform",
    "device",
    "backward_fraction",
    "overlap",
    "precision",
    "scaling",
    "global_batch",
    "source",
    "notes",
}


class JobError(ValueError):
    """A job description that cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class JobDescription:
    """A data-parallel job as the cluster what-if sees it.

    ``buckets``: gradient bytes per allreduce in the order they become ready in the backward
    pass (DDP fills buckets in reverse parameter order). ``step_s``: measured step time at
    the source layout (``ranks``, ``ranks_per_node`` on ``platform``); ``compute_s``: its
    time not waiting on gradients, when known (else the model derives it). ``curve``:
    measured (batch per device, step compute seconds) points. ``device``: the device type
    the step was measured on where ``platform`` does not say it (a GPU run's recorded
    accelerator)."""

    name: str
    grad_bytes: int
    buckets: tuple[int, ...]
    step_s: float
    batch_per_device: float | None = None
    curve: tuple[tuple[float, float], ...] = ()
    compute_s: float | None = None
    ranks: int = 1
    ranks_per_node: int = 1
    platform: str | None = None
    device: str | None = None
    backward_fraction: float = DEFAULT_BACKWARD_FRACTION
    overlap: bool = True
    precision: str = "fp32"
    grad_dtype: str = "fp32"
    scaling: str = "weak"
    global_batch: float | None = None
    step_sd_s: float | None = None  # step-to-step spread of one device's step (independent)
    source: str = ""
    assumptions: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["buckets"] = list(self.buckets)
        d["curve"] = [list(p) for p in self.curve]
        d["assumptions"] = list(self.assumptions)
        return d


def ddp_buckets(
    grad_bytes: int,
    cap_mb: float = DDP_BUCKET_CAP_MB,
    first_mb: float = DDP_FIRST_BUCKET_MB,
) -> tuple[int, ...]:
    """Bucket sizes in ready order when only the total is known: DDP's first bucket (the
    last parameters, ready first) holds ``first_mb``, the others ``cap_mb``; the last one
    what is left. (Real buckets end at parameter boundaries, so they run a little over.)"""
    left = int(grad_bytes)
    out = []
    cap = int(first_mb * MB) if first_mb else int(cap_mb * MB)
    while left > 0:
        take = min(left, max(cap, 1))
        out.append(take)
        left -= take
        cap = int(cap_mb * MB)
    return tuple(out)


def _num(doc: dict, key: str, where: str, *, positive=True, integer=False, default=None):
    v = doc.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise JobError(f"{where}: {key!r} must be a number, got {v!r}; fix the job description")
    if positive and not v > 0:
        raise JobError(f"{where}: {key!r} must be > 0, got {v!r}; fix the job description")
    if integer and int(v) != v:
        raise JobError(f"{where}: {key!r} must be a whole number, got {v!r}")
    return int(v) if integer else float(v)


def job_from_dict(doc, where: str = "job description") -> JobDescription:
    """A JobDescription from its JSON form, or JobError naming ``where`` and the fix."""
    if not isinstance(doc, dict):
        raise JobError(f"{where}: a job description is a JSON object (see docs/whatif.md)")
    fmt = doc.get("format", JOB_FORMAT)
    if fmt != JOB_FORMAT:
        raise JobError(f"{where}: format {fmt!r} is not {JOB_FORMAT!r}")
    unknown = sorted(set(doc) - _KEYS)
    if unknown:
        raise JobError(
            f"{where}: unknown key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(_KEYS))}"
        )
    notes: list[str] = [str(x) for x in doc.get("notes") or ()]
    precision, dtype = _precision(doc, where, notes)
    gbytes, buckets = _gradients(doc, where, dtype, notes)
    step, curve, batch = _step(doc, where)
    ranks = _num(doc, "ranks", where, integer=True, default=1)
    rpn = _num(doc, "ranks_per_node", where, integer=True, default=min(ranks, 8))
    if rpn > ranks:
        rpn = ranks
    if ranks > 1 and "ranks_per_node" not in doc:
        notes.append(f"source: {rpn} devices per node assumed (give ranks_per_node)")
    bf = _num(doc, "backward_fraction", where, default=None)
    if bf is None:
        bf = DEFAULT_BACKWARD_FRACTION
        notes.append(
            "backward pass = 2/3 of the step compute (backward ~ 2 x forward; "
            "set backward_fraction when measured)"
        )
    elif not 0 < bf <= 1:
        raise JobError(f"{where}: 'backward_fraction' must be in (0, 1], got {bf}")
    overlap = doc.get("overlap", True)
    if not isinstance(overlap, bool):
        raise JobError(f"{where}: 'overlap' must be true or false, got {overlap!r}")
    scaling = str(doc.get("scaling", "weak"))
    if scaling not in ("weak", "strong"):
        raise JobError(f"{where}: 'scaling' must be weak or strong, got {scaling!r}")
    gb = _num(doc, "global_batch", where)
    compute = _num(doc, "compute_s", where)
    sd = _num(doc, "step_sd_s", where, positive=False)
    if sd is not None and sd < 0:
        raise JobError(f"{where}: 'step_sd_s' must be >= 0, got {sd}")
    if compute is not None and compute > step * (1 + 1e-9):
        raise JobError(f"{where}: compute_s {compute} above step_s {step}")
    platform = doc.get("platform")
    return JobDescription(
        name=str(doc.get("job") or Path(where).stem),
        grad_bytes=int(gbytes),
        buckets=tuple(int(b) for b in buckets),
        step_s=float(step),
        batch_per_device=batch,
        curve=curve,
        compute_s=compute,
        ranks=int(ranks),
        ranks_per_node=int(rpn),
        platform=str(platform) if platform else None,
        device=str(doc["device"]) if doc.get("device") else None,
        backward_fraction=float(bf),
        overlap=overlap,
        precision=precision,
        grad_dtype=dtype,
        scaling=scaling,
        global_batch=gb,
        step_sd_s=sd,
        source=str(doc.get("source") or where),
        assumptions=tuple(notes),
    )


def _precision(doc: dict, where: str, notes: list[str]) -> tuple[str, str]:
    """The training precision and the gradients' dtype (what mixed precision assumed)."""
    precision = str(doc.get("precision", "fp32")).lower()
    if precision not in _PRECISIONS:
        raise JobError(f"{where}: precision {precision!r}: choose one of {', '.join(_PRECISIONS)}")
    dtype = doc.get("grad_dtype")
    if dtype is None:
        dtype = precision if precision in ("fp16", "bf16", "fp64") else "fp32"
        if precision == "mixed":
            notes.append(
                "mixed precision: gradients reduced in fp32 (torch.cuda.amp keeps "
                "fp32 gradients; set grad_dtype if yours are fp16)"
            )
    dtype = str(dtype).lower()
    if dtype not in _DTYPE_BYTES:
        raise JobError(f"{where}: grad_dtype {dtype!r}: choose one of {', '.join(_DTYPE_BYTES)}")
    return precision, dtype


def _gradients(doc: dict, where: str, dtype: str, notes: list[str]) -> tuple[int, tuple]:
    """The gradient bytes and their buckets in ready order (given, or DDP's defaults)."""
    params = _num(doc, "parameters", where, integer=True)
    gbytes = _num(doc, "grad_bytes", where, integer=True)
    explicit = doc.get("bucket_bytes")
    if explicit is not None:
        if not isinstance(explicit, list) or not explicit:
            raise JobError(f"{where}: 'bucket_bytes' must be a non-empty list of byte counts")
        buckets = tuple(
            _num({"bucket_bytes": b}, "bucket_bytes", where, integer=True) for b in explicit
        )
        if gbytes is None and params is None:
            gbytes = sum(buckets)
    if gbytes is None:
        if params is None:
            raise JobError(
                f"{where}: give the gradient size: 'parameters' (with 'grad_dtype') or "
                "'grad_bytes' or 'bucket_bytes'"
            )
        gbytes = params * _DTYPE_BYTES[dtype]
    if explicit is None:
        cap = _num(doc, "bucket_cap_mb", where, default=DDP_BUCKET_CAP_MB)
        first = _num(doc, "first_bucket_mb", where, positive=False, default=DDP_FIRST_BUCKET_MB)
        if "bucket_cap_mb" not in doc:
            notes.append(f"buckets: DDP's default bucket_cap_mb={DDP_BUCKET_CAP_MB:g}")
        if "first_bucket_mb" not in doc:
            notes.append(f"first bucket: DDP's default {DDP_FIRST_BUCKET_MB:g} MB")
        buckets = ddp_buckets(gbytes, cap, first)
        notes.append(
            f"{len(buckets)} buckets filled in ready order up to the cap (real buckets end at "
            "parameter boundaries)"
        )
    elif sum(buckets) != gbytes:
        notes.append(
            f"bucket_bytes sum to {sum(buckets):,} bytes, not the {gbytes:,} "
            "gradient bytes: the buckets are what is reduced"
        )
    return gbytes, buckets


def _step(doc: dict, where: str) -> tuple[float, tuple, float | None]:
    """The measured step, the compute curve and the batch per device it was measured at."""
    step = _num(doc, "step_s", where)
    curve_raw = doc.get("compute_curve") or []
    if not isinstance(curve_raw, list) or any(
        not isinstance(p, list) or len(p) != 2 for p in curve_raw
    ):
        raise JobError(f"{where}: 'compute_curve' must be a list of [batch_per_device, seconds]")
    curve = tuple(
        sorted(
            (
                _num({"batch": b}, "batch", where),
                _num({"compute_curve seconds": s}, "compute_curve seconds", where),
            )
            for b, s in curve_raw
        )
    )
    if len({b for b, _ in curve}) != len(curve):
        raise JobError(f"{where}: 'compute_curve' has two points at the same batch")
    batch = _num(doc, "batch_per_device", where)
    if step is None:
        if not curve or batch is None:
            raise JobError(
                f"{where}: give 'step_s', the measured step time at 'ranks' devices (seconds), "
                'e.g. "step_s": 0.1'
            )
        step = dict(curve).get(batch)
        if step is None:
            raise JobError(f"{where}: no 'step_s' and no compute_curve point at batch {batch:g}")
    return step, curve, batch


def load_job(path: str | os.PathLike) -> JobDescription:
    """A job description from a JSON file (JobError names the file and the fix)."""
    p = Path(path)
    doc = read_json_file(p, what="job description", error=JobError, fix="see docs/whatif.md")
    job = job_from_dict(doc, str(p))
    # A platform file named relative to the description is found beside it.
    if job.platform and not Path(job.platform).is_absolute():
        beside = p.parent / job.platform
        if beside.is_file():
            job = replace(job, platform=str(beside))
    return job


def _from_collectives(
    name: str,
    colls: list[dict],
    *,
    step_s: float,
    ranks: int,
    rpn: int,
    batch: float | None,
    params: int | None,
    source: str,
    notes: list[str],
    overlapped_default: bool,
    step_sd_s: float | None = None,
    platform: str | None = None,
    device: str | None = None,
) -> JobDescription:
    """Shared by the run-dir and signature paths: the allreduces per step become the
    buckets (largest sizes last when the order is unknown), the rest is compute, measured
    on ``platform`` where the run named its cluster platform, on ``device`` where it
    recorded its accelerator."""
    ar = [c for c in colls if "allreduce" in str(c["op"]).lower().replace("_", "")]
    buckets: list[int] = []
    for c in ar:
        buckets += [int(c["nbytes"])] * max(int(round(float(c["per_step"]))), 0)
    if not buckets and params:
        buckets = list(ddp_buckets(4 * int(params)))
        notes.append(
            f"no gradient allreduce recorded: {params:,} fp32 parameters in DDP's "
            "default buckets assumed"
        )
    if not buckets:
        raise JobError(
            f"{source}: no allreduce per step recorded and no parameter count: "
            "write a job description (docs/whatif.md) with 'parameters'"
        )
    overlap = any(bool(c.get("overlapped")) for c in ar) or overlapped_default
    notes.append(
        f"{len(buckets)} gradient allreduces per step from the recording "
        f"({sum(buckets):,} bytes), taken as ready smallest first (DDP's first bucket is its "
        "smallest; the per-step order is not kept)"
    )
    if platform is None and device is None:
        notes.append(
            "compute carried as the run measured it: the target's devices are taken to be as "
            "fast as the run's (write a job description with a step measured there otherwise)"
        )
    return JobDescription(
        name=name,
        grad_bytes=int(sum(buckets)),
        buckets=tuple(buckets),
        step_s=float(step_s),
        batch_per_device=batch,
        ranks=int(ranks),
        ranks_per_node=int(rpn),
        overlap=overlap,
        step_sd_s=step_sd_s,
        platform=platform,
        device=device,
        source=source,
        assumptions=tuple(notes),
    )


def _float_or_none(v) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok and v >= 0 else None


def job_from_features(feats, source: str = "run directory") -> JobDescription:
    """The job a run's ``RunFeatures`` describe (the same predictor as a description)."""
    lay = feats.layout
    colls = [
        {"op": g.op, "nbytes": g.nbytes, "per_step": g.per_step, "overlapped": g.overlapped}
        for g in feats.groups
    ]
    notes = [
        f"the run's step {feats.step_s * 1e3:.3g} ms: {feats.compute_s * 1e3:.3g} ms outside "
        f"recorded collectives, {feats.comm_s * 1e3:.3g} ms exposed in them; DDP's wait "
        "outside its recorded collectives is told apart by the model at the source layout"
    ]
    return _from_collectives(
        feats.framework or "run",
        colls,
        step_s=feats.step_s,
        ranks=lay.ranks,
        rpn=lay.ranks_per_node,
        batch=feats.batch_size,
        params=feats.param_count,
        source=source,
        notes=notes,
        overlapped_default=feats.framework.startswith(("torch-ddp", "horovod", "keras+horovod")),
        step_sd_s=feats.step_sd_s,  # the same figure a signature record keeps
        device=feats.accelerator,
    )


def job_from_signature(rec: dict, source: str = "signature.json") -> JobDescription:
    """The job a signature record (``signature.json``, read-only use) describes."""
    try:
        lay = rec["layout"]
        step = float(rec["step"]["step_s"])
        colls = list(rec.get("collectives") or [])
        fw = str(rec.get("framework") or "")
    except (KeyError, TypeError, ValueError) as e:
        raise JobError(
            f"{source}: signature record lacks {e}; rebuild it with "
            "`ailens history add RUN_DIR --rebuild`"
        ) from None
    # A record stored with a cluster platform's label (``ailens history add --platform``)
    # was measured there: the what-if's source platform, its device the compute's.
    named = str((rec.get("platform") or {}).get("name") or "")
    job = _from_collectives(
        str(rec.get("job") or fw or "run"),
        colls,
        step_s=step,
        ranks=int(lay["ranks"]),
        rpn=int(lay["ranks_per_node"]),
        batch=rec.get("batch_size"),
        params=rec.get("param_count"),
        source=source,
        notes=[f"from the signature record {source}"],
        overlapped_default=fw.startswith(("torch-ddp", "horovod", "keras+horovod")),
        step_sd_s=_float_or_none((rec.get("step") or {}).get("step_sd_s")),
        platform=named if named in platform_labels() else None,
        device=(rec.get("platform") or {}).get("accelerator") or None,
    )
    mode = rec.get("mode")
    return replace(job, scaling=mode) if mode in ("weak", "strong") else job
