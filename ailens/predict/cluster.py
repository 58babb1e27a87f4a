"""The cluster what-if: a data-parallel job's step time on GPUs of a described platform.

Step time is a sum of named terms (the protocol of ``terms.py``, shared with the
run-directory what-if); each returns its seconds and the assumptions it rests on, so adding
an effect is adding one class to ``TERMS``::

    step = Compute + ExposedGradientSync + SlowestRank + MeasuredResidual

* ``Compute``: forward + backward + optimizer at the target's batch per device: the job's
  measured compute, moved along its measured curve (log-log interpolation inside it, a
  per-step overhead + per-sample fit outside), else along a stated assumption with its
  uncertainty (strong scaling only: weak scaling keeps the batch).
* ``ExposedGradientSync``: DDP's bucketed allreduces overlapping the backward pass. Bucket
  i is ready at t_i (backward produces gradients evenly in bytes, last parameters first),
  buckets are reduced one at a time on one stream: finish_i = max(t_i, finish_{i-1}) +
  t_comm(bucket i); exposed = max(0, finish_last - backward end). Without overlap the
  whole reduction is exposed. t_comm comes from the NCCL model (``nccl``).
* ``SlowestRank``: the sync waits for the slowest of q devices: the step-to-step spread
  (``step_sd_s``) x E[max of q normals], less the source's own.
* ``MeasuredResidual``: what runs at other scales measured beyond the other terms
  (``measured.py``); 0 with one measured scale.

The source's compute is the measured step minus what the same model says was exposed
there: the wait DDP spends outside its recorded collectives is not counted as compute.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .device_speed import (
    PRECISION_PEAK_KEY,
    DeviceRatio,
    DeviceSpeedModel,
    load_device_speed,
    precision_class,
)
from .job import JobDescription
from .nccl import latency_growth_beyond_measured, nccl_collective_s
from .platforms import Platform, load_platform
from .terms import TermValue, expected_max_normal

__all__ = [
    "ClusterPrediction",
    "ClusterTarget",
    "Compute",
    "ExposedGradientSync",
    "MeasuredResidual",
    "MeasuredScale",
    "SlowestRank",
    "TERMS",
    "TermValue",
    "UNEXPLAINED_PER_DOUBLING",
    "UNMEASURED_BANDWIDTH_RANGE",
    "compute_at",
    "measured_links",
    "overlap_exposed",
    "predict",
    "scale_bandwidth",
    "unexplained_band",
    "widen_unexplained",
]

# An unmeasured link (a datasheet figure, not fitted on nccl-tests output or on the job's own
# runs) may deliver anything from its datasheet bandwidth down to a small share of it (TCP
# instead of RDMA, a shared or oversubscribed fabric, PCIe through the host): the interval
# prices its collectives between these two fractions of the datasheet.
UNMEASURED_BANDWIDTH_RANGE = (1 / 16, 1.0)
NARROW_BY = {
    "network": "an nccl-tests log of the cluster (ailens calibrate --from-nccl-tests) or a "
    "run of the job at one more scale",
    "compute": "the step at a second batch per device (compute_curve)",
    "extrapolation": "a run of the job at a scale nearer the target",
    "device": "a run of the job on the target platform, or runs of your other jobs on both "
    "device types (ailens whatif ... --history H.sqlite)",
    "unexplained": "a run of the job at a scale nearer the target (ailens whatif A B ...)",
    "latency": "an nccl-tests log spanning as many nodes (ailens calibrate --from-nccl-tests) "
    "or a run of the job at more nodes",
}
# What each ``wide_term`` is called in a report (the JSON keeps the short key).
TERM_NAMES = {"device": "device speed", "latency": "network latency beyond the measured nodes"}
# What no term prices and no run measured at the target (a host's CPUs and input pipeline
# shared by more processes, boards sharing a PCIe switch, the slowest rank beyond its
# modelled spread, the measurement noise of the runs themselves): the step may move by
# exp(low x d) .. exp(high x d) beyond the other terms' interval, d the doublings of the
# devices from the nearest measured scale. The range is the 2.5 % / 97.5 % quantiles of
# what the development data's one-scale cases needed beyond the other terms, per doubling;
# the two-scale cases, which it was not fitted on, check it (``bench_whatif.py --public``:
# ``goals.measured_scales.*.unexplained_band`` fits it again and leaves each source out).
UNEXPLAINED_PER_DOUBLING = (-0.12, 0.145)

# Strong scaling without a measured curve: the share of the step that does not shrink with
# the batch (kernel launches, optimizer, small layers) is taken as 10 %, between 0 and 30 %.
# Measured on the development data's batch curves (Gavel's one-worker rows of 8 jobs at
# 4-5 batches, ``bench_whatif.py --public``: ``compute_floor``): 10 % predicts the smaller
# batches within 11.5 % (median; 38 % with no floor, 16 % with the median share of the other
# jobs), and 27 of their 30 shares lie in 0-30 % (2.5-97.5 % quantiles: -18 %, 29 %).
FLOOR_SHARE = 0.10
FLOOR_BAND = (0.0, 0.30)


@dataclass(frozen=True)
class ClusterTarget:
    """Where the job would run: ``ranks`` devices, ``ranks_per_node`` per node (default:
    the platform's devices per node), ``scaling`` weak (batch per device kept) or strong
    (``global_batch`` split over the devices)."""

    ranks: int
    platform: Platform
    ranks_per_node: int | None = None
    scaling: str = "weak"
    global_batch: float | None = None

    @property
    def per_node(self) -> int:
        return max(min(self.ranks_per_node or self.platform.devices_per_node, self.ranks), 1)

    @property
    def nodes(self) -> int:
        return -(-self.ranks // self.per_node)


@dataclass(frozen=True, kw_only=True)
class MeasuredScale:
    """What a run of the job at another scale measured beyond the model's other terms
    (``measured.fit_measured`` makes them)."""

    ranks: int
    ranks_per_node: int
    step_s: float  # the measured step
    residual_s: float  # measured step minus the model's other terms there
    source: str


@dataclass
class _Context:
    job: JobDescription
    target: ClusterTarget
    batch: float | None  # per device on the target
    compute_s: float  # compute at the target batch
    compute_band: tuple[float, float]
    compute_notes: list
    measured: tuple[MeasuredScale, ...] = ()


def compute_at(
    job: JobDescription, compute_src: float, batch: float | None
) -> tuple[float, tuple[float, float], list[str]]:
    """Step compute at ``batch`` per device: (seconds, (low, high), assumptions)."""
    b0 = job.batch_per_device
    if batch is None or b0 is None or abs(batch - b0) <= 1e-9 * b0:
        return compute_src, (compute_src, compute_src), []
    ratio = batch / b0
    if len(job.curve) >= 2:
        xs = np.array([b for b, _ in job.curve])
        ys = np.array([s for _, s in job.curve])
        # The curve sets the shape; the source measurement sets the level.
        at = _curve(xs, ys)
        t = compute_src * at(batch) / at(b0)
        inside = xs[0] <= batch <= xs[-1]
        how = "log-log interpolation" if inside else "per-step overhead + per-sample fit"
        note = (
            f"compute at batch {batch:g} per device from the measured curve "
            f"({len(xs)} points, {xs[0]:g}-{xs[-1]:g}): {how}"
        )
        return t, (t, t), [note]
    lo_share, hi_share = FLOOR_BAND
    t = compute_src * (FLOOR_SHARE + (1 - FLOOR_SHARE) * ratio)
    band = sorted(compute_src * (s + (1 - s) * ratio) for s in (lo_share, hi_share))
    note = (
        f"compute at batch {batch:g} per device (measured at {b0:g}) assumed linear in the "
        f"batch with a per-step floor of {FLOOR_SHARE:.0%} of the measured compute "
        f"(uncertainty: floor {lo_share:.0%}-{hi_share:.0%}: {band[0] * 1e3:.4g}-"
        f"{band[1] * 1e3:.4g} ms); give compute_curve to measure it"
    )
    return t, (band[0], band[1]), [note]


def _curve(xs: np.ndarray, ys: np.ndarray):
    """Seconds at a batch: log-log interpolation inside the points, an affine fit
    a + b * batch (a >= 0) outside them."""
    A = np.stack([np.ones_like(xs), xs], axis=1)
    a, b = np.linalg.lstsq(A, ys, rcond=None)[0]
    if a < 0 or b <= 0:
        a, b = 0.0, float(np.sum(xs * ys) / np.sum(xs * xs))

    def at(x: float) -> float:
        if xs[0] <= x <= xs[-1]:
            return float(np.exp(np.interp(math.log(x), np.log(xs), np.log(ys))))
        # Outside: the fit, anchored at the nearest measured end.
        end = 0 if x < xs[0] else -1
        return float(ys[end] * (a + b * x) / (a + b * xs[end]))

    return at


def overlap_exposed(
    ready_s: list[float], comm_s: list[float], backward_end_s: float
) -> tuple[float, float]:
    """Buckets reduced one at a time on one stream, each starting when it is ready and the
    previous one is done: (finish of the last, exposed = max(0, finish - backward end))."""
    finish = 0.0
    for r, c in zip(ready_s, comm_s, strict=True):
        finish = max(r, finish) + c
    return finish, max(0.0, finish - backward_end_s)


def _sync(job: JobDescription, compute: float, ranks: int, rpn: int, platform: Platform):
    """(exposed seconds, per-bucket estimates, total comm seconds) of the gradient
    allreduces of one step."""
    if ranks <= 1:
        return 0.0, [], 0.0
    ests = [nccl_collective_s("allreduce", b, ranks, platform, rpn) for b in job.buckets]
    comm = [e.seconds for e in ests]
    total = float(sum(comm))
    if not job.overlap:
        return total, ests, total
    bwd = job.backward_fraction * compute
    start = compute - bwd
    ready, cum = [], 0
    for b in job.buckets:
        cum += b
        ready.append(start + bwd * cum / max(sum(job.buckets), 1))
    _, exposed = overlap_exposed(ready, comm, compute)
    return exposed, ests, total


class Compute:
    """Forward, backward and optimizer at the target's batch per device."""

    name = "compute"
    part = "compute"

    def value(self, ctx: _Context) -> TermValue:
        lo, hi = ctx.compute_band
        return TermValue(
            self.name,
            ctx.compute_s,
            tuple(ctx.compute_notes),
            {"batch_per_device": ctx.batch, "low_s": lo, "high_s": hi},
        )


class ExposedGradientSync:
    """The gradient allreduces' time not hidden under the backward pass."""

    name = "exposed_gradient_sync"
    part = "comm"

    def value(self, ctx: _Context) -> TermValue:
        t = ctx.target
        exposed, ests, total = _sync(ctx.job, ctx.compute_s, t.ranks, t.per_node, t.platform)
        notes: list[str] = []
        if t.ranks > 1:
            algos = sorted({f"{e.algorithm}/{e.protocol}" for e in ests})
            how = (
                f"backward = {ctx.job.backward_fraction:.2f} of the compute, gradients "
                "produced evenly in bytes, buckets reduced in ready order on one stream"
                if ctx.job.overlap
                else "no overlap: every bucket waited for after the backward pass"
            )
            notes.append(
                f"{len(ests)} allreduce(s) of {ctx.job.grad_bytes / 1e6:.4g} MB in all "
                f"({ctx.job.grad_dtype}), NCCL {', '.join(algos)} on {t.ranks} ranks "
                f"({t.nodes} node(s) x {t.per_node}): {total * 1e3:.3g} ms, "
                f"{exposed * 1e3:.3g} ms exposed; {how}"
            )
            bottleneck = ests[-1].bottleneck if ests else ""
            if bottleneck:
                notes.append(f"bottleneck: {bottleneck}")
            for e in ests[:1]:
                notes.extend(e.assumptions)
        over = any(e.bus_bandwidth_Bps > e.ceiling_Bps * (1 + 1e-9) for e in ests)
        return TermValue(
            self.name,
            exposed,
            tuple(notes),
            {"comm_total_s": total, "buckets": len(ests), "over_link_ceiling": over},
        )


class SlowestRank:
    """The step waits for the slowest device at the gradient sync: with independent
    step-to-step noise of spread sd on each, the slowest of q lags the mean by
    sd * E[max of q standard normals] (the source's own lag already in its step)."""

    name = "slowest_rank"
    part = "compute"  # time a device waits for the others' compute, as the run-dir what-if

    def value(self, ctx: _Context) -> TermValue:
        sd = ctx.job.step_sd_s
        q, p = ctx.target.ranks, ctx.job.ranks
        if not sd or q <= 1:
            why = "one device" if q <= 1 else "no step_sd_s given: not modelled"
            return TermValue(self.name, 0.0, () if q <= 1 else (why,))
        lag = sd * (expected_max_normal(q) - expected_max_normal(p))
        note = (
            f"slowest of {q} devices: step-to-step spread {sd * 1e3:.3g} ms x "
            f"(E[max of {q}] - E[max of {p}] normals) = {lag * 1e3:.3g} ms (noise assumed "
            "independent across devices)"
        )
        return TermValue(self.name, lag, (note,), {"step_sd_s": sd})


class MeasuredResidual:
    """What runs of the job at other scales measured beyond the other terms (per-node and
    per-rank costs, the slowest rank, host contention): interpolated in log2(devices)
    between measured scales, the nearest one's beyond them; 0 with one measured scale.
    Weak scaling keeps each device's work, so the step is not below the one measured at the
    largest scale under the target (more devices only add waiting); where the other terms
    price less, the runs decide (``weak_floor``: beyond the runs, their growth continued)."""

    name = "measured_residual"
    part = "compute"

    def value(self, ctx: _Context) -> TermValue:
        pts = sorted(ctx.measured, key=lambda m: m.ranks)
        q = ctx.target.ranks
        if not pts or q <= 1:
            return TermValue(self.name, 0.0, ())
        xs = [m.ranks for m in pts]
        if q <= xs[0] or q >= xs[-1]:
            near = pts[0] if q <= xs[0] else pts[-1]
            resid, how = near.residual_s, f"as measured at {near.ranks} devices ({near.source})"
        else:
            lo = max((m for m in pts if m.ranks <= q), key=lambda m: m.ranks)
            hi = min((m for m in pts if m.ranks >= q), key=lambda m: m.ranks)
            resid = float(np.interp(math.log2(q), np.log2(xs), [m.residual_s for m in pts]))
            how = f"interpolated between the runs at {lo.ranks} and {hi.ranks} devices"
        notes = [f"what the measured runs show beyond the model: {resid * 1e3:+.3g} ms, {how}"]
        below = [m for m in pts if m.ranks <= q]
        if ctx.target.scaling == "weak" and below:
            others = sum(t.value(ctx).seconds for t in TERMS if t is not self)
            last = max(below, key=lambda m: m.ranks)
            if others + resid < last.step_s:
                floor, how = weak_floor(below, q)
                notes.append(
                    f"the model's {(others + resid) * 1e3:.4g} ms is below the "
                    f"{last.step_s * 1e3:.4g} ms measured at {last.ranks} devices: weak "
                    f"scaling does not speed a device up, so the runs decide: {how}"
                )
                resid = floor - others
        return TermValue(self.name, resid, tuple(notes))


def weak_floor(below: list[MeasuredScale], q: int) -> tuple[float, str]:
    """The weak-scaling step at q devices where the model's terms price less than the
    largest run at or below q (``below``; each device keeps its work, so the step does not
    fall): the model's shape contradicts the runs and they decide. At least that run's step;
    beyond it, where the two largest runs' steps GREW with the devices, that growth is a
    cost of more devices the model does not continue: it goes on as the slowest of q devices
    lags further, E[max of q normals] with the spread the two runs imply, not flat. (step,
    what it rests on)."""
    pts = sorted(below, key=lambda m: m.ranks)
    last = pts[-1]
    how = f"the step measured at {last.ranks} devices kept"
    prev = pts[-2] if len(pts) >= 2 else last
    if q <= last.ranks or prev.ranks >= last.ranks or last.step_s <= prev.step_s:
        return last.step_s, how
    spread = (last.step_s - prev.step_s) / (
        expected_max_normal(last.ranks) - expected_max_normal(prev.ranks)
    )
    lag = spread * (expected_max_normal(q) - expected_max_normal(last.ranks))
    how = (
        f"the step measured at {last.ranks} devices plus the growth measured from "
        f"{prev.ranks} to {last.ranks} devices continued as the "
        f"slowest of {q} lags ({spread * 1e3:.3g} ms spread x (E[max of {q}] - "
        f"E[max of {last.ranks}]) = {lag * 1e3:.3g} ms)"
    )
    return last.step_s + lag, how


# The step-time model: one instance per named term, summed.
TERMS = (Compute(), ExposedGradientSync(), SlowestRank(), MeasuredResidual())


@dataclass(frozen=True)
class ClusterPrediction:
    """Predicted step time of the job on one target; ``to_dict()`` is one row of
    ``ailens whatif --json`` (the run-dir rows' keys, plus ``platform`` and ``terms``)."""

    ranks: int
    ranks_per_node: int
    nodes: int
    platform: str
    scaling: str
    batch_per_device: float | None
    step_time_s: float
    compute_step_s: float
    comm_step_s: float
    compute_low_s: float
    compute_high_s: float
    speedup: float
    efficiency: float
    terms: tuple[TermValue, ...]
    over_link_ceiling: bool
    assumptions: tuple[str, ...]
    # The plausible range of the step where something was assumed, the part of the model
    # that makes it widest and what to measure to narrow it.
    step_low_s: float | None = None
    step_high_s: float | None = None
    wide_term: str = ""
    narrow_by: str = ""

    @property
    def links(self) -> str:
        return "none" if self.ranks == 1 else ("inter" if self.nodes > 1 else "intra")

    def to_dict(self) -> dict:
        return {
            "ranks": self.ranks,
            "step_time_s": self.step_time_s,
            "total_time_s": None,
            "speedup": self.speedup,
            "efficiency": self.efficiency,
            "comm_pct": 100.0 * self.comm_step_s / self.step_time_s if self.step_time_s else 0.0,
            "steps": None,
            "compute_step_s": self.compute_step_s,
            "comm_step_s": self.comm_step_s,
            "links": self.links,
            "measured": False,
            "phases": [],
            "ranks_per_node": self.ranks_per_node,
            "threads_per_rank": None,
            "cores_per_node": None,
            "compute_factor": None,
            "platform": self.platform,
            "nodes": self.nodes,
            "scaling": self.scaling,
            "batch_per_device": self.batch_per_device,
            "compute_low_s": self.compute_low_s,
            "compute_high_s": self.compute_high_s,
            "over_link_ceiling": self.over_link_ceiling,
            "step_low_s": self.step_low_s,
            "step_high_s": self.step_high_s,
            "wide_term": self.wide_term,
            "narrow_by": self.narrow_by,
            "terms": [t.to_dict() for t in self.terms],
            "assumptions": list(self.assumptions),
        }


def _platform(p: Platform | str | None, fallback: Platform | None = None) -> Platform | None:
    if p is None:
        return fallback
    return p if isinstance(p, Platform) else load_platform(p)


def source_compute(job: JobDescription, platform: Platform) -> tuple[float, list[str]]:
    """The job's compute per step at its source layout: given, or the measured step minus
    the exposed gradient sync the model gives there."""
    if job.compute_s is not None:
        return job.compute_s, [f"source compute {job.compute_s * 1e3:.4g} ms as given"]
    if job.ranks <= 1:
        return job.step_s, [f"source: 1 device, step {job.step_s * 1e3:.4g} ms is all compute"]
    # Solve c + exposed(c) = step (exposed shrinks as c grows: a few fixed-point rounds).
    c = job.step_s
    for _ in range(30):
        e = _sync(job, c, job.ranks, job.ranks_per_node, platform)[0]
        c_new = max(job.step_s - e, 1e-9)
        if abs(c_new - c) <= 1e-12 + 1e-9 * c:
            break
        c = c_new
    return c, [
        f"source compute {c * 1e3:.4g} ms = measured step {job.step_s * 1e3:.4g} ms minus the "
        f"modelled exposed sync at {job.ranks} ranks on {platform.name} (DDP's wait outside "
        "its recorded collectives is not compute)"
    ]


def _context(
    job: JobDescription, target: ClusterTarget, c_src: float, measured: tuple = ()
) -> _Context:
    """What the terms read on one target: its batch per device and compute there."""
    q = target.ranks
    if q < 1:
        raise ValueError(f"ranks must be >= 1, got {q}")
    if target.scaling == "strong":
        if target.global_batch is None:
            raise ValueError(
                f"{job.source}: strong scaling needs batch_per_device (or global_batch)"
            )
        batch = target.global_batch / q
    else:
        batch = job.batch_per_device
    c, band, c_notes = compute_at(job, c_src, batch)
    return _Context(job, target, batch, c, band, c_notes, measured)


def _throughput(q: int, batch, step: float) -> float:
    return q * (batch or 1.0) / step if step > 0 else float("nan")


def predict(
    job: JobDescription,
    ranks: list[int],
    platform: Platform | str | None = None,
    *,
    ranks_per_node: int | None = None,
    scaling: str | None = None,
    global_batch: float | None = None,
    source_platform: Platform | str | None = None,
    measured: tuple[MeasuredScale, ...] = (),
    device_speed: DeviceSpeedModel | None = None,
) -> list[ClusterPrediction]:
    """The job's step time at each rank count on ``platform`` (default: the job's own).

    ``scaling``/``global_batch`` default to the job's; strong scaling splits the global
    batch (default: the source's batch per device x its ranks) over the target's devices.
    ``source_platform``: where the job was measured (default: the job's, else the target's).
    ``measured``: the job's other measured scales (``measured.predict_measured``), priced by
    the term ``MeasuredResidual``. ``device_speed``: the device-speed model that carries the
    compute to another device type (default: the shipped one; ``with_history`` adds the
    user's jobs measured on two devices)."""
    tgt_p = _platform(platform) or _platform(job.platform)
    if tgt_p is None:
        raise ValueError(
            f"{job.source}: no platform: give one (a label such as dgx1-v100, or a platform "
            "JSON from ailens calibrate --from-nccl-tests)"
        )
    if source_platform is not None:
        src_p = _platform(source_platform)
    elif job.platform in (None, tgt_p.name):
        src_p = tgt_p
    else:
        src_p = _platform(job.platform)
    scaling = scaling or job.scaling
    if scaling not in ("weak", "strong"):
        raise ValueError(f"scaling={scaling!r}: choose weak or strong")
    c_src, src_notes = source_compute(job, src_p)
    b0 = job.batch_per_device
    gb = global_batch or job.global_batch or (b0 * job.ranks if b0 else None)
    notes = list(job.assumptions) + src_notes
    device_ratio = _device_ratio(job, src_p, tgt_p, notes, device_speed or load_device_speed())
    if device_ratio is not None:
        ran_on = recorded_device(job) or src_p.name
        notes.append(
            f"compute measured on {ran_on} carried to {tgt_p.name} "
            + (
                f"x{device_ratio.ratio:.3g} (learned device speed)"
                if device_ratio.learned
                else "unchanged (same device speed assumed)"
            )
        )
        c_src = c_src * device_ratio.ratio
    notes.append(f"platform {tgt_p.name}: {tgt_p.description}")

    def one(q: int) -> _Context:
        target = ClusterTarget(q, tgt_p, ranks_per_node, scaling, gb)
        return _context(job, target, c_src, tuple(measured))

    ctx1 = one(1)  # speedup and efficiency are against the model's own 1 device
    t1 = tuple(t.value(ctx1) for t in TERMS)
    thr1 = _throughput(1, ctx1.batch, float(sum(t.seconds for t in t1)))
    out = []
    for q in sorted({int(r) for r in ranks}):
        ctx = one(q)
        target, batch, band = ctx.target, ctx.batch, ctx.compute_band
        terms = tuple(t.value(ctx) for t in TERMS)
        step = float(sum(t.seconds for t in terms))
        comm = float(sum(t.seconds for t, k in zip(terms, TERMS, strict=True) if k.part == "comm"))
        speedup = _throughput(q, batch, step) / thr1
        term_notes = [f"{t.name}: {a}" for t in terms for a in t.assumptions]
        low, high, wide = _interval(job, target, terms, c_src, device_ratio)
        if not measured:  # several measured scales: measured.predict_measured widens it
            low, high, wide = widen_unexplained(low, high, wide, q, [job.ranks])
        out.append(
            ClusterPrediction(
                ranks=q,
                ranks_per_node=target.per_node,
                nodes=target.nodes,
                platform=tgt_p.name,
                scaling=scaling,
                batch_per_device=batch,
                step_time_s=step,
                compute_step_s=step - comm,
                comm_step_s=comm,
                compute_low_s=band[0],
                compute_high_s=band[1],
                speedup=float(speedup),
                efficiency=float(speedup / q),
                terms=terms,
                over_link_ceiling=any(t.detail.get("over_link_ceiling") for t in terms),
                assumptions=tuple(notes + term_notes),
                step_low_s=low,
                step_high_s=high,
                wide_term=wide,
                narrow_by=NARROW_BY.get(wide, ""),
            )
        )
    return out


def unexplained_band(
    q: int, measured_ranks: list[int], per_doubling: tuple[float, float] | None = None
) -> tuple[float, float]:
    """(low, high) factors on the step for what no term prices (``per_doubling``, default
    ``UNEXPLAINED_PER_DOUBLING``): 1 at a measured scale, wider with each doubling of the
    devices away from the nearest one; towards fewer devices the growth is taken off."""
    d = min((math.log2(q / p) for p in measured_ranks), key=abs)
    lo, hi = per_doubling or UNEXPLAINED_PER_DOUBLING
    if d < 0:
        lo, hi = -hi, -lo
    d = abs(d)
    return math.exp(lo * d), math.exp(hi * d)


def widen_unexplained(
    low: float,
    high: float,
    wide: str,
    q: int,
    measured_ranks: list[int],
    per_doubling: tuple[float, float] | None = None,
) -> tuple[float, float, str]:
    """The interval ``(low, high)`` widened by ``unexplained_band``; its term is the widest
    when the band adds more than the other terms span together."""
    f_lo, f_hi = unexplained_band(q, measured_ranks, per_doubling)
    new_low, new_high = low * min(f_lo, 1.0), high * max(f_hi, 1.0)
    if (low - new_low) + (new_high - high) > high - low:
        wide = "unexplained"
    return new_low, new_high, wide


def measured_links(platform: Platform, nodes: int) -> bool:
    """Whether the links ``nodes`` nodes' collectives cross were measured (fitted on
    nccl-tests output or on the job's runs), not datasheet figures."""
    links = [platform.intra] + ([platform.network] if nodes > 1 else [])
    return all(link is not None and "fitted" in link.source for link in links)


def scale_bandwidth(platform: Platform, k: float, *, source: str | None = None) -> Platform:
    """``platform`` with every link's bandwidth x ``k`` (``source``: where that came from)."""

    def link(x):
        if x is None:
            return None
        return replace(x, bandwidth_Bps=x.bandwidth_Bps * k, source=source or x.source)

    return replace(
        platform,
        intra=link(platform.intra),
        network=link(platform.network),
        host=link(platform.host),
        intra_by_devices={a: b * k for a, b in platform.intra_by_devices.items()},
        busbw_by_devices={a: b * k for a, b in platform.busbw_by_devices.items()},
    )


def recorded_device(job: JobDescription) -> str | None:
    """The device a job's step was measured on where no platform of its says it (a GPU run's
    recorded accelerator), else None."""
    return job.device if job.device and job.platform is None else None


def _device_ratio(
    job, src_p: Platform, tgt_p: Platform, notes: list, model: DeviceSpeedModel
) -> DeviceRatio | None:
    """Compute time on ``tgt_p`` over ``src_p`` at the job's precision, with its interval:
    the learned device-speed model (``device_speed.py``, with the user's history where it
    was given one), or for a device it does not know "same speed" with a wide interval
    (None: same platform)."""
    src = recorded_device(job)
    if src is None and (src_p is tgt_p or src_p.name == tgt_p.name):
        return None
    key = PRECISION_PEAK_KEY[precision_class(job.precision)]  # the peak that bounds it
    r = model.ratio(
        # The accelerator a run recorded; fitted platforms name theirs in the description.
        src or src_p.device or src_p.description or src_p.name,
        tgt_p.device or tgt_p.description or tgt_p.name,
        job.precision,
        src_peak=None if src else src_p.peak_tflops.get(key),
        tgt_peak=tgt_p.peak_tflops.get(key),
        batch_per_device=job.batch_per_device,
    )
    notes.append(f"device speed: {r.basis}")
    return r


def _interval(job, target: ClusterTarget, terms, c_src: float, device_ratio: DeviceRatio | None):
    """(low, high, widest term) of the step: the compute's band, an unmeasured link anywhere
    in UNMEASURED_BANDWIDTH_RANGE of its datasheet bandwidth, and on another platform the
    compute over the device-speed interval (``device_ratio``, around its point)."""
    step = float(sum(t.seconds for t in terms))
    comp = terms[0]
    width = {"compute": (comp.detail["low_s"] - comp.seconds, comp.detail["high_s"] - comp.seconds)}
    if device_ratio is not None:
        k = device_ratio
        width["device"] = (
            comp.seconds * (k.low / k.ratio - 1.0),
            comp.seconds * (k.high / k.ratio - 1.0),
        )
    if target.ranks > 1 and not measured_links(target.platform, target.nodes):
        lo_k, hi_k = UNMEASURED_BANDWIDTH_RANGE
        ends = []
        for k in (lo_k, hi_k):
            slow = replace(target, platform=scale_bandwidth(target.platform, k))
            ends.append(ExposedGradientSync().value(_context(job, slow, c_src)).seconds)
        exposed = terms[1].seconds
        width["network"] = (min(ends) - exposed, max(ends) - exposed)
    net = target.platform.network
    grow = latency_growth_beyond_measured(target.platform, target.nodes) if net else 1.0
    if target.nodes > 1 and grow > 1.0:  # latency beyond the measured nodes: up to linear
        slow_net = replace(net, latency_s=net.latency_s * grow)
        slow = replace(target, platform=replace(target.platform, network=slow_net))
        end = ExposedGradientSync().value(_context(job, slow, c_src)).seconds
        width["latency"] = (0.0, max(end - terms[1].seconds, 0.0))
    low = step + sum(min(d[0], 0.0) for d in width.values())
    high = step + sum(max(d[1], 0.0) for d in width.values())
    wide = max(width, key=lambda k: width[k][1] - width[k][0])
    if width[wide][1] - width[wide][0] <= 0:
        wide = ""
    return low, high, wide
