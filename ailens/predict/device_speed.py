"""Device speed across platforms: how much longer (or shorter) a job's compute takes on
another device type, learned from public measurements of the same jobs on several devices.

The model (fitted offline by ``benchmarks/bench_devices.py --write`` with
``fit_device_speed``, shipped as ``device_speed.json`` beside this module) is additive in log
time per sample per device::

    log t(job, cell, n, b) = a_job + b_cell + beta * log2(n) + (delta + g_cell) * x(b)

A *cell* is a device at a precision class (``"V100|fp32"``, ``"A100-SXM|mixed"``); ``n`` the
devices the measurement ran on (MLPerf's large systems lose per-device speed to scale);
``x(b) = log2(batch per device / 32)`` (0 where the batch is not known; there the device
count, which shrinks the batch of a fixed global one, has a slope of its own,
``scale_slope_batch_unknown``). ``g_cell`` is how much the cell's speed depends on the work
per step: a small batch per device is bound by kernel launches and the host, and gains less
from a faster device than a large one. The job
effect cancels in a ratio, so the ratio of two cells at one batch is
``exp(b_B - b_A + (g_B - g_A) x(b))``. Each cell's effect is pulled towards a line in the
device's features (log peak TFLOP/s at the precision, log memory bandwidth), which is also
what prices a cell no measurement covers. The fit is robust (Huber weights on the
measurements): a public log whose system behaves unlike its device (another submitter's
software, a run at under one sample per device) does not drag a cell's effect. The interval
is the 95 % quantile of held-out residuals: leave-one-job-out where both cells were
measured, leave-one-device-out where one comes from the features. A device the table does
not know keeps "same speed" as its point, with an interval from that to the ratio of the
platforms' peaks widened by the features' held-out factor.

The user's own runs (``DeviceSpeedModel.with_history``): a job of theirs measured on both
devices of a pair (``MeasuredRatio``, from a run history) is a measured ratio, and its log
residual from the model says how the user's jobs, software and clusters differ from the
public ones. The pair's ratio moves by the residuals' mean pooled with the model, which
counts as ``HISTORY_PRIOR_JOBS`` jobs, and from two jobs on its interval is their spread
pooled with the model's held-out one (``pooled_ratio``).

Runtime: stdlib + numpy only; ``fit_device_speed`` (numpy least squares) is what the script
runs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .._stats import NORMAL_95, t_quantile

__all__ = [
    "DEVICE_SPEED_FILE",
    "DeviceRatio",
    "DeviceSpeedModel",
    "HISTORY_PRIOR_JOBS",
    "MeasuredRatio",
    "PRECISION_PEAK_KEY",
    "REFERENCE_BATCH",
    "batch_term",
    "device_key",
    "fit_device_speed",
    "linked_groups",
    "load_device_speed",
    "pooled_ratio",
    "precision_class",
]

DEVICE_SPEED_FILE = Path(__file__).with_name("device_speed.json")
_PRECISION_CLASS = {"fp32": "fp32", "fp64": "fp32", "tf32": "tf32"}
# The peak that bounds a precision class (keys of the features' ``peak_tflops``).
PRECISION_PEAK_KEY = {"fp32": "fp32", "tf32": "tf32", "mixed": "fp16"}
# The batch per device at which a cell's effect is defined (x(b) = log2(b / this)).
REFERENCE_BATCH = 32.0
# What the model's ratio for a pair weighs against the user's jobs measured on both devices:
# this many jobs. Leaving each public source out in turn (``bench_devices.py``, "history":
# the source is a user's cluster, the model fitted without it, its other jobs measured on
# the same two devices the history; pairs at one precision across device types), the
# held-out median error is 19.9 / 18.7 / 18.2 / 18.9 / 18.9 % at 1 / 2 / 4 / 8 / 12 (the
# model alone 22.8 %), the interval holding 96.6 % at each.
HISTORY_PRIOR_JOBS = 4


def batch_term(batch_per_device: float | None) -> float:
    """``x(b) = log2(b / 32)``: the model's batch feature; 0 (the reference) when unknown."""
    if not batch_per_device or batch_per_device <= 0:
        return 0.0
    return math.log2(float(batch_per_device) / REFERENCE_BATCH)


def precision_class(precision: str) -> str:
    """``fp32``, ``tf32`` or ``mixed`` (fp16, bf16 and autocast all run on the half-precision
    units)."""
    return _PRECISION_CLASS.get(str(precision).lower(), "mixed")


def device_key(device: str) -> str | None:
    """The model's device name in a free-text description (``Platform.device``: "A100 SXM4
    (vendor datasheet ...)" -> ``A100-SXM``), None when it names none the model knows."""
    s = str(device or "")
    m = re.search(r"\b(P100|V100|A100|H100|A30|TPU[- ]?v3|Gaudi ?2)\b", s, re.I)
    if not m:
        return None
    name = m.group(1).upper().replace(" ", "")
    if name.startswith("TPU"):
        return "TPU-v3"
    if name.startswith("GAUDI"):
        return "Gaudi2"
    if name in ("A100", "H100"):
        return name + ("-PCIE" if re.search(r"pci", s, re.I) else "-SXM")
    return name


@dataclass(frozen=True, kw_only=True)
class DeviceRatio:
    """Compute time on the target over the source: ``ratio`` (the point), ``low``-``high``
    (its 95 % interval) and ``basis`` (how it was priced, one line for the report)."""

    ratio: float
    low: float
    high: float
    basis: str
    learned: bool


@dataclass(frozen=True, kw_only=True)
class MeasuredRatio:
    """One of the user's jobs measured on two devices at one batch per device and device
    count: its compute time on ``tgt_device`` over ``src_device`` (free-text names, as
    ``Platform.device`` gives them) at ``precision``."""

    job: str
    src_device: str
    tgt_device: str
    precision: str
    ratio: float
    batch_per_device: float | None = None

    def __post_init__(self) -> None:
        r = self.ratio
        if not (isinstance(r, (int, float)) and math.isfinite(r) and r > 0):
            raise ValueError(f"{self.job}: a measured ratio must be a positive number, got {r!r}")


def pooled_ratio(
    log_point: float, half_width: float, residuals: Sequence[float]
) -> tuple[float, float]:
    """A pair's log ratio ``log_point`` (95 % half-width ``half_width``, log) moved by the
    log residuals of the user's jobs measured on both devices: (log point, 95 % half-width).
    The point moves by their mean times n / (n + ``HISTORY_PRIOR_JOBS``); with one job the
    width stays the model's, with two or more it is their variance pooled with the model's
    (its half-width over the normal quantile, worth ``HISTORY_PRIOR_JOBS`` jobs), for one new
    job about a mean of n + ``HISTORY_PRIOR_JOBS``, at Student's t of their degrees of
    freedom."""
    n, k = len(residuals), HISTORY_PRIOR_JOBS
    if n == 0:
        return log_point, half_width
    point = log_point + n / (n + k) * float(np.mean(residuals))
    if n < 2:
        return point, half_width
    dof = k + n - 1
    var = (k * (half_width / NORMAL_95) ** 2 + (n - 1) * float(np.var(residuals, ddof=1))) / dof
    return point, t_quantile(0.975, dof) * math.sqrt(var * (1 + 1 / (n + k)))


@dataclass(frozen=True, kw_only=True)
class DeviceSpeedModel:
    """The fitted model (``device_speed.json``): cell effects, the feature line, the scale
    slope and the held-out half-widths (log units) of the 95 % interval."""

    effects: dict  # cell -> b (log time per sample per device)
    counts: dict  # cell -> measurements behind it
    # cell -> its group: cells linked by jobs measured on both (a chain of such jobs). Two
    # cells of different groups were never compared on one job: their ratio rests on the
    # feature line, and is priced with its width.
    groups: dict
    features: dict  # device -> {"peak_tflops": {...}, "mem_GBps": x, "source": str}
    coef: tuple  # (c0, c_peak, c_mem): b ~ c0 + c_peak log(peak) + c_mem log(mem)
    scale_slope: float  # beta per doubling of devices
    # 95 % half-widths (log) by how the pair was priced: "measured" (both cells fitted) or
    # "features" (one from the feature line), and "same stack" (both devices run the same
    # software stack, e.g. CUDA) or "across stacks" (CUDA -> XLA on TPU: the job's kernels
    # change, so its relative speed varies much more).
    half_widths: dict
    source: str = ""
    evaluation: dict = field(default_factory=dict)
    # cell -> g: the cell's slope on x(b) = log2(batch per device / 32) (0 for a cell not
    # fitted); ``batch_slope`` (delta) is the slope every cell shares, which cancels in a
    # ratio at one batch.
    batch_slopes: dict = field(default_factory=dict)
    batch_slope: float = 0.0
    # The user's jobs measured on two devices (``with_history``): they move those pairs.
    history: tuple[MeasuredRatio, ...] = ()

    def with_history(self, measured: Iterable[MeasuredRatio]) -> DeviceSpeedModel:
        """This model with the user's measured ratios added to its history."""
        return replace(self, history=self.history + tuple(measured))

    def feature_effect(self, cell: str) -> float | None:
        x = _feature_row(self.features, cell)
        return None if x is None else sum(c * v for c, v in zip(self.coef, x, strict=True))

    def half_width(self, *, measured: bool, same_stack: bool) -> float:
        return float(
            self.half_widths[
                f"{'measured' if measured else 'features'}|"
                f"{'same stack' if same_stack else 'across stacks'}"
            ]
        )

    def stack(self, device: str | None) -> str | None:
        return (self.features.get(device) or {}).get("stack") if device else None

    def effect(self, cell: str) -> tuple[float, bool] | None:
        """(b, measured): the fitted effect, else the features' line, else None."""
        if cell in self.effects:
            return float(self.effects[cell]), True
        b = self.feature_effect(cell)
        return None if b is None else (b, False)

    def ratio(
        self,
        src_device: str,
        tgt_device: str,
        precision: str,
        *,
        src_peak: float | None = None,
        tgt_peak: float | None = None,
        batch_per_device: float | None = None,
    ) -> DeviceRatio:
        """Compute time on ``tgt_device`` over ``src_device`` at ``precision`` (free-text
        device names; ``*_peak``: the platforms' peak TFLOP/s, used when a device is not in
        the model; ``batch_per_device``: the job's, on both, where known: a small batch
        gains less from a faster device), moved by the user's jobs measured on the same two
        devices at the precision (``with_history``, ``pooled_ratio``)."""
        r = self._model_ratio(src_device, tgt_device, precision, (src_peak, tgt_peak),
                              batch_per_device)  # fmt: skip
        pair = (_pair_key(src_device), _pair_key(tgt_device), precision_class(precision))
        if pair[0] == pair[1]:
            return r
        by_job: dict[str, list[float]] = {}  # a job's runs on the pair: one residual, their mean
        for m in self.history:
            mine = (_pair_key(m.src_device), _pair_key(m.tgt_device), precision_class(m.precision))
            if mine[2] != pair[2] or mine[:2] not in (pair[:2], pair[1::-1]):
                continue
            sign = 1.0 if mine[:2] == pair[:2] else -1.0  # measured the other way round
            at = self._model_ratio(m.src_device, m.tgt_device, m.precision, (None, None),
                                   m.batch_per_device)  # fmt: skip
            by_job.setdefault(m.job, []).append(sign * (math.log(m.ratio) - math.log(at.ratio)))
        if not by_job:
            return r
        residuals = [sum(v) / len(v) for v in by_job.values()]
        log_k = math.log(r.ratio)
        half = max(math.log(r.high) - log_k, log_k - math.log(r.low))
        point, width = pooled_ratio(log_k, half, residuals)
        if len(residuals) < 2:  # one job moves the point; the model's interval moves with it
            low, high = r.low * math.exp(point - log_k), r.high * math.exp(point - log_k)
        else:
            low, high = math.exp(point - width), math.exp(point + width)
        k = math.exp(point)
        return DeviceRatio(
            ratio=k,
            low=low,
            high=high,
            learned=True,
            basis=f"{r.basis}; moved by {len(residuals)} of the user's jobs measured on both "
            f"({', '.join(sorted(by_job))}): x{k:.3g} (95 % {low:.3g}-{high:.3g})",
        )

    def _model_ratio(
        self, src_device: str, tgt_device: str, precision: str, peaks: tuple, batch: float | None
    ) -> DeviceRatio:
        """The public model's ratio (``ratio`` without the user's history; ``peaks``: the
        source's and the target's peak TFLOP/s, ``batch``: the batch per device)."""
        (src_peak, tgt_peak), batch_per_device = peaks, batch
        prec = precision_class(precision)
        ka, kb = device_key(src_device), device_key(tgt_device)
        if ka is not None and ka == kb:
            return DeviceRatio(
                ratio=1.0,
                low=1.0,
                high=1.0,
                learned=True,
                basis=f"same device type ({ka}) on both platforms",
            )
        ea = self.effect(f"{ka}|{prec}") if ka else None
        eb = self.effect(f"{kb}|{prec}") if kb else None
        if ea is None or eb is None:
            # Not in the model: the point stays "same speed" (as without the model); the
            # interval spans it and the ratio of the peaks where both are known, widened by
            # the factor the features missed by on held-out devices.
            unknown = src_device if ea is None else tgt_device
            f = math.exp(self.half_width(measured=False, same_stack=False))
            ends = [1.0] + ([src_peak / tgt_peak] if src_peak and tgt_peak else [])
            how = "same speed to the ratio of the peaks" if len(ends) > 1 else "same speed"
            return DeviceRatio(
                ratio=1.0,
                low=min(ends) / f,
                high=max(ends) * f,
                learned=False,
                basis=f"device {unknown or '(none named)'!r} is not in the device-speed model "
                f"at {prec}: {how}, widened x/ {f:.3g} (wide: {min(ends) / f:.3g}-"
                f"{max(ends) * f:.3g})",
            )
        x = batch_term(batch_per_device)
        slope = self.batch_slopes.get(f"{kb}|{prec}", 0.0) - self.batch_slopes.get(
            f"{ka}|{prec}", 0.0
        )
        k = math.exp(eb[0] - ea[0] + slope * x)
        both = (
            ea[1] and eb[1] and self.groups.get(f"{ka}|{prec}") == self.groups.get(f"{kb}|{prec}")
        )
        sa = self.stack(ka)
        same_stack = sa is not None and sa == self.stack(kb)
        h = self.half_width(measured=both, same_stack=same_stack)
        how = (
            "compared on the same public jobs"
            if both
            else "from the device features (peak at the precision, memory bandwidth)"
        ) + ("" if same_stack else "; across software stacks")
        if x:
            how += f"; at {batch_per_device:g} per device"
        return DeviceRatio(
            ratio=k,
            low=k * math.exp(-h),
            high=k * math.exp(h),
            learned=True,
            basis=f"learned device speed {ka} -> {kb} at {prec}: x{k:.3g} "
            f"(95 % {k * math.exp(-h):.3g}-{k * math.exp(h):.3g}; {how})",
        )


def _pair_key(device: str) -> str:
    """A device as history and model match it: the model's name, else the text itself."""
    return device_key(device) or " ".join(str(device or "").lower().split())


def load_device_speed(path: str | Path | None = None) -> DeviceSpeedModel:
    """The shipped model (or one written by ``bench_devices.py --write PATH``)."""
    doc = json.loads(Path(path or DEVICE_SPEED_FILE).read_text())
    return model_from_dict(doc)


def model_from_dict(doc: dict) -> DeviceSpeedModel:
    return DeviceSpeedModel(
        effects={str(k): float(v) for k, v in doc["effects"].items()},
        counts={str(k): int(v) for k, v in doc.get("counts", {}).items()},
        groups={str(k): int(v) for k, v in doc["groups"].items()},
        features=dict(doc["features"]),
        coef=tuple(float(x) for x in doc["coef"]),
        scale_slope=float(doc["scale_slope"]),
        half_widths={str(k): float(v) for k, v in doc["half_widths"].items()},
        source=str(doc.get("source", "")),
        evaluation=dict(doc.get("evaluation", {})),
        batch_slopes={str(k): float(v) for k, v in doc.get("batch_slopes", {}).items()},
        batch_slope=float(doc.get("batch_slope", 0.0)),
    )


def _feature_row(features: dict, cell: str) -> list[float] | None:
    dev, prec = cell.split("|")
    f = features.get(dev) or {}
    peak = f.get("peak_tflops", {}).get(PRECISION_PEAK_KEY[prec])
    if not peak or not f.get("mem_GBps"):
        return None
    return [1.0, math.log(peak), math.log(f["mem_GBps"])]


def linked_groups(observations: list[dict]) -> dict:
    """cell -> group number: cells joined by a job measured on both, transitively."""
    parent: dict = {}

    def root(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for o in observations:
        parent[root(("job", o["job"]))] = root(("cell", o["cell"]))
    roots = sorted({root(("cell", o["cell"])) for o in observations})
    return {o["cell"]: roots.index(root(("cell", o["cell"]))) for o in observations}


def fit_device_speed(
    observations: list[dict],
    features: dict,
    *,
    pull: float = 0.5,
    batch_pull: float = 1.0,
    huber: float = 0.1,
) -> dict:
    """Robust least squares of ``log t = a_job + b_cell + beta log2 n + (delta + g_cell) x``
    with every cell's ``b`` pulled (weight ``pull``, log units) towards
    ``c . [1, log peak, log mem]`` and every ``g`` towards 0 (weight ``batch_pull``), solved
    jointly, with ``beta`` plus a slope of its own for measurements whose batch is unknown;
    measurements whose residual exceeds ``huber`` (log) are down-weighted by Huber's rule
    (iteratively reweighted). ``observations``: dicts with ``job``, ``cell``,
    ``log_t``, ``devices`` and optionally ``batch`` (per device; x = 0 where absent)."""
    jobs = sorted({o["job"] for o in observations})
    cells = sorted({o["cell"] for o in observations})
    feat = {c: _feature_row(features, c) for c in cells}
    nj, nc = len(jobs), len(cells)
    ji = {j: i for i, j in enumerate(jobs)}
    ci = {c: nj + i for i, c in enumerate(cells)}
    gi = {c: nj + nc + i for i, c in enumerate(cells)}
    beta_i, delta_i, c_i = nj + 2 * nc, nj + 2 * nc + 1, nj + 2 * nc + 2
    beta_u_i = c_i + 3
    n_par = c_i + 4
    rows, ys = [], []
    for o in observations:
        r = np.zeros(n_par)
        r[ji[o["job"]]] = 1.0
        r[ci[o["cell"]]] = 1.0
        r[beta_i] = math.log2(max(o["devices"], 1))
        x = batch_term(o.get("batch"))
        r[delta_i] = x
        r[gi[o["cell"]]] = x
        if not o.get("batch"):  # the device count also stands for the batch it shrinks
            r[beta_u_i] = r[beta_i]
        rows.append(r)
        ys.append(o["log_t"])
    for c in cells:  # the pull towards the feature line (none for a cell without features)
        x = feat[c]
        r = np.zeros(n_par)
        r[ci[c]] = pull
        if x is not None:
            r[c_i : c_i + 3] = -pull * np.asarray(x)
        rows.append(r)
        ys.append(0.0)
        r = np.zeros(n_par)  # each cell's batch slope: towards the shared one
        r[gi[c]] = batch_pull
        rows.append(r)
        ys.append(0.0)
    # Job and cell effects are defined up to a constant: a tiny ridge on the job effects.
    for j in jobs:
        r = np.zeros(n_par)
        r[ji[j]] = 1e-3
        rows.append(r)
        ys.append(0.0)
    a, y = np.asarray(rows), np.asarray(ys)
    theta = np.linalg.lstsq(a, y, rcond=None)[0]
    m = len(observations)
    for _ in range(20):  # Huber weights on the measurements (the priors keep theirs)
        res = np.abs(a[:m] @ theta - y[:m])
        w = np.ones(len(y))
        w[:m] = np.sqrt(np.minimum(1.0, huber / np.maximum(res, 1e-12)))
        theta = np.linalg.lstsq(a * w[:, None], y * w, rcond=None)[0]
    counts: dict = {}
    for o in observations:
        counts[o["cell"]] = counts.get(o["cell"], 0) + 1
    return {
        "groups": linked_groups(observations),
        "effects": {c: float(theta[ci[c]]) for c in cells},
        "counts": counts,
        "features": features,
        "coef": [float(x) for x in theta[c_i : c_i + 3]],
        "scale_slope": float(theta[beta_i]),
        "batch_slope": float(theta[delta_i]),
        "scale_slope_batch_unknown": float(theta[beta_i] + theta[beta_u_i]),
        "batch_slopes": {c: float(theta[gi[c]]) for c in cells},
        "jobs": {j: float(theta[ji[j]]) for j in jobs},
    }
