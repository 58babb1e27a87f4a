"""The cluster what-if from several measured scales of one job: what the runs pin down
decides, the platform model fills only what no run measured.

``fit_measured(jobs, platform)`` takes the job measured at two or more device counts (job
descriptions or signature records: ``JobDescription`` each) and fits:

* **the effective network the job sees**: one factor ``k`` on every link bandwidth of the
  platform (0 < k <= 1: a datasheet figure is an upper bound), least squares on log step
  over the measured scales above the smallest, the smallest's compute held as measured. It
  stands for whatever slows the job's allreduces below the datasheet (TCP, a shared fabric,
  PCIe through the host) as the job itself measured it.
* **what is not communication** (per-node and per-rank costs, the slowest rank, host
  contention): the measured step minus the model's at each measured scale (the model with
  ``k``), interpolated in log2(devices) between measured scales and carried from the
  nearest one beyond them.

``predict_measured`` predicts every target from the fit: the smallest scale's compute and
buckets, the fitted network, the residual term. Each row's ``assumptions`` say which term
came from which run; beyond the largest measured scale the row carries an interval between
"nothing grows further" (ideal scaling from the nearest measured scale) and the
measurements' own growth continued linearly in the number of devices (Amdahl's law through
the two largest measured scales), with the model's point between them. The interval also
spans the other splits of the measured growth between the network and what no term prices
(``_growth_split``): each run above the smallest may lie off the model by the unexplained
range, so the network is fitted again at both ends of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .cluster import (
    NARROW_BY,
    ClusterPrediction,
    MeasuredScale,
    predict,
    recorded_device,
    scale_bandwidth,
    unexplained_band,
    widen_unexplained,
)
from .device_speed import device_key
from .job import JobDescription
from .platforms import Platform, load_platform

__all__ = ["MeasuredFit", "fit_measured", "predict_measured"]

# The effective bandwidth factor is searched in [K_MIN, 1] (log scale, bisection).
K_MIN = 1e-3
# A measured step the fitted model meets within this share is met: 40 golden-section steps
# on log k leave ~1e-8 of it, the search's rounding, not a residual to print or carry.
FIT_TOLERANCE = 1e-6


@dataclass(frozen=True, kw_only=True)
class MeasuredFit:
    """What the measured scales pinned down (``fit_measured``)."""

    base: JobDescription  # the smallest measured scale: compute, buckets, batch
    platform: Platform  # the platform with the fitted effective bandwidth
    bandwidth_factor: float | None  # effective / platform bandwidth; None: not fitted
    scales: tuple[MeasuredScale, ...]  # every measured scale, its residual over the model
    notes: tuple[str, ...]


def _platform(job: JobDescription, platform: Platform | str | None) -> Platform:
    p = platform if platform is not None else job.platform
    if p is None:
        raise ValueError(
            f"{job.source}: no platform: give one (a label such as dgx1-v100, or a platform "
            "JSON from ailens calibrate --from-nccl-tests)"
        )
    return p if isinstance(p, Platform) else load_platform(p)


def _named_platform(name: str) -> Platform | None:
    """The platform a job description names, None where it is no label or file ailens reads
    (the fit then takes the one it is given, as it always has)."""
    try:
        return load_platform(name)
    except (ValueError, OSError):
        return None


def _other_device(a: str, b: str) -> bool:
    """Whether two device descriptions name different device types (both known to the
    model)."""
    ka, kb = device_key(a), device_key(b)
    return ka is not None and kb is not None and ka != kb


def _model_step(base: JobDescription, platform: Platform, ranks: int, rpn: int, scaling, gb):
    row = predict(base, [ranks], platform, ranks_per_node=rpn, scaling=scaling, global_batch=gb)
    return row[0]


def fit_measured(
    jobs: list[JobDescription],
    platform: Platform | str | None = None,
    *,
    scaling: str | None = None,
    global_batch: float | None = None,
) -> MeasuredFit:
    """The fit of several measured scales of one job (see the module docstring)."""
    if len(jobs) < 2:
        raise ValueError("fit_measured needs the job measured at two or more device counts")
    jobs = sorted(jobs, key=lambda j: (j.ranks, -j.ranks_per_node))
    base = jobs[0]
    if len({(j.ranks, j.ranks_per_node) for j in jobs}) < len(jobs):
        raise ValueError(
            f"{', '.join(j.source for j in jobs)}: two measurements of the same layout; give "
            "one per device count and ranks per node"
        )
    named = sorted({j.platform for j in jobs if j.platform})
    if len(named) > 1:
        raise ValueError(
            f"{', '.join(j.source for j in jobs)}: measured on different platforms "
            f"({', '.join(named)}): the scales of one job are fitted on one platform; give "
            "the runs of one cluster"
        )
    plat = _platform(base, platform)
    ran_on = _named_platform(named[0]) if named and named[0] != plat.name else None
    where = ran_on.name if ran_on else recorded_device(base)
    device = (ran_on.device or ran_on.description) if ran_on else recorded_device(base)
    if device and _other_device(device, plat.device or plat.description):
        raise ValueError(
            f"{', '.join(j.source for j in jobs)}: measured on {where}; the scales of one job "
            f"are fitted on the platform they ran on, and {plat.name} has other devices: "
            f"predict them there, or one of them on {plat.name} (the device speed carries "
            "its compute)"
        )
    scaling = scaling or base.scaling
    gb = global_batch or base.global_batch
    if scaling == "strong" and gb is None and base.batch_per_device:
        gb = base.batch_per_device * base.ranks
    above = [j for j in jobs[1:] if j.ranks > base.ranks]
    notes = [f"compute, buckets and batch from the run at {base.ranks} device(s) ({base.source})"]
    curve_from_runs = scaling == "strong" and len(base.curve) < 2 and gb is not None
    if curve_from_runs:
        # Strong scaling with no measured compute curve: the runs at other batches per device
        # are its points (each run's step less the modelled exposed sync there), and the
        # network stays the platform's (its range is the interval's).
        pts = {}
        for j in jobs:
            b = gb / j.ranks
            row = _model_step(replace(j, curve=()), plat, j.ranks, j.ranks_per_node, "weak", None)
            pts[b] = max(j.step_s - row.comm_step_s, 1e-9)
        base = replace(base, curve=tuple(sorted(pts.items())))
        notes.append(
            "compute at other batches per device from the runs' own steps (a measured curve: "
            + ", ".join(f"{b:g} per device {t * 1e3:.4g} ms" for b, t in sorted(pts.items()))
            + ")"
        )
        above = []

    def steps(k: float) -> list[float]:
        p = scale_bandwidth(plat, k)
        return [
            _model_step(base, p, j.ranks, j.ranks_per_node, scaling, gb).step_time_s for j in above
        ]

    def loss(k: float) -> float:
        return sum(
            (math.log(m) - math.log(j.step_s)) ** 2 for m, j in zip(steps(k), above, strict=True)
        )

    k: float | None = None
    if above and base.grad_bytes > 0:
        # The step only grows as the bandwidth falls: a golden-section search on log k.
        lo, hi = math.log(K_MIN), 0.0
        g = (math.sqrt(5) - 1) / 2
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        fa, fb = loss(math.exp(a)), loss(math.exp(b))
        for _ in range(40):
            if fa < fb:
                hi, b, fb = b, a, fa
                a = hi - g * (hi - lo)
                fa = loss(math.exp(a))
            else:
                lo, a, fa = a, b, fb
                b = lo + g * (hi - lo)
                fb = loss(math.exp(b))
        k = math.exp((lo + hi) / 2)
        if loss(1.0) <= loss(k):
            k = 1.0
        runs = ", ".join(f"{j.ranks} ({j.source})" for j in above)
        notes.append(
            f"effective network: {k:.3g} x {plat.name}'s link bandwidths, fitted on the runs "
            f"at {runs}"
        )
    fitted = (
        plat
        if k is None
        else scale_bandwidth(
            plat, k, source=f"effective bandwidth fitted on the job's runs ({k:.3g} x {plat.name})"
        )
    )
    scales = []
    for j in jobs:
        m = _model_step(base, fitted, j.ranks, j.ranks_per_node, scaling, gb).step_time_s
        if abs(j.step_s - m) <= FIT_TOLERANCE * j.step_s:
            m = j.step_s
        scales.append(
            MeasuredScale(ranks=j.ranks, ranks_per_node=j.ranks_per_node, step_s=j.step_s,
                          residual_s=j.step_s - m, source=j.source)
        )  # fmt: skip
    notes.append(
        "what the model does not explain (per-node and per-rank costs, the slowest rank): "
        + "; ".join(f"{m.residual_s * 1e3:+.3g} ms at {m.ranks} devices" for m in scales)
    )
    return MeasuredFit(
        base=base, platform=fitted, bandwidth_factor=k, scales=tuple(scales), notes=tuple(notes)
    )


def predict_measured(
    jobs: list[JobDescription],
    ranks: list[int],
    platform: Platform | str | None = None,
    *,
    ranks_per_node: int | None = None,
    scaling: str | None = None,
    global_batch: float | None = None,
    unexplained_per_doubling: tuple[float, float] | None = None,
) -> list[ClusterPrediction]:
    """The job's step at each device count from all its measured scales (``jobs``), on
    ``platform`` (default: the smallest run's). Rows as ``cluster.predict``'s, the term
    ``measured_residual`` priced from the runs and, beyond the largest measured scale, the
    interval. ``unexplained_per_doubling``: the unexplained range (default
    ``cluster.UNEXPLAINED_PER_DOUBLING``; a benchmark passes one fitted without a source)."""
    band = unexplained_per_doubling
    fit = fit_measured(jobs, platform, scaling=scaling, global_batch=global_batch)
    base = fit.base
    scaling = scaling or base.scaling
    gb = global_batch or base.global_batch
    if scaling == "strong" and gb is None and base.batch_per_device:
        gb = base.batch_per_device * base.ranks
    rows = _predict_fit(base, fit.platform, fit.scales, ranks, ranks_per_node, scaling, gb)
    split = _growth_split(jobs, fit, ranks, platform, ranks_per_node, scaling, gb, band)
    out = []
    for r in rows:
        low, high, wide = _extrapolation(fit.scales, r, r.step_time_s, scaling)
        if not wide:
            low, high, wide = r.step_low_s, r.step_high_s, r.wide_term
        alt = split.get(r.ranks, ())
        if alt and (min(alt) < low or max(alt) > high):
            low, high = min(low, *alt), max(high, *alt)
            wide = wide or "network"
        low, high, noise = _disagreement(fit.scales, r.ranks, low, high, scaling)
        low, high, wide = widen_unexplained(
            low, high, wide, r.ranks, [m.ranks for m in fit.scales], band
        )
        out.append(
            replace(
                r,
                assumptions=tuple(fit.notes) + r.assumptions + noise,
                step_low_s=low,
                step_high_s=high,
                wide_term=wide,
                narrow_by=NARROW_BY.get(wide, ""),
            )
        )
    return out


def _predict_fit(base, platform, scales, ranks, rpn, scaling, gb) -> list[ClusterPrediction]:
    """``cluster.predict`` from a measured fit: its base job on its fitted platform (the
    source platform too), the measured scales pricing the residual."""
    return predict(
        base,
        ranks,
        platform,
        ranks_per_node=rpn,
        scaling=scaling,
        global_batch=gb,
        source_platform=platform,
        measured=scales,
    )


def _disagreement(scales, q: int, low: float, high: float, scaling: str):
    """Weak scaling keeps each device's work, so a step measured to FALL as devices were
    added is the runs' own noise (other hosts, another moment), at least that large: the
    interval then spans every step measured at or below the target's scale."""
    pts = sorted((m for m in scales if m.ranks <= q), key=lambda m: m.ranks)
    falls = [b for a, b in zip(pts[:-1], pts[1:], strict=True) if b.step_s < a.step_s]
    if scaling != "weak" or not falls:
        return low, high, ()
    steps = [m.step_s for m in pts]
    note = (
        "the measured steps fall as devices are added ("
        + ", ".join(f"{m.step_s * 1e3:.4g} ms at {m.ranks}" for m in pts)
        + "): weak scaling keeps each device's work, so that is measurement noise; the "
        "interval spans every measured step"
    )
    return min(low, *steps), max(high, *steps), (note,)


def _extrapolation(scales, row, step: float, scaling: str) -> tuple[float, float, str]:
    """The interval of a target beyond the largest measured scale: between ideal scaling
    from the nearest measured scale and the growth of the two largest continued linearly in
    the devices (Amdahl); inside the measured range none (empty ``wide``). A growth that
    falls (weak: the larger run's step below the smaller's; strong: a speed-up beyond
    ideal, a negative serial part) is not continued: it would reach a step of 0 and below,
    and weak scaling keeps each device's work, so such a fall is the runs' noise, which
    ``_disagreement`` spans; its continuation is ideal scaling."""
    q = row.ranks
    second, last = sorted(scales, key=lambda m: m.ranks)[-2:]
    (q1, s1), (q2, s2) = (second.ranks, second.step_s), (last.ranks, last.step_s)
    if q <= q2 or q2 == q1:
        return step, step, ""
    if scaling == "strong":
        # step = a + b / n through the two largest measured scales; ideal: work / q.
        b = (s1 - s2) / (1 / q1 - 1 / q2)
        linear = s1 - b / q1 + b / q
        ideal = s2 * q2 / q
    else:
        linear = s1 + (s2 - s1) * (q - q1) / (q2 - q1)
        ideal = s2
    ends = (ideal, max(linear, ideal), step)
    return float(min(ends)), float(max(ends)), "extrapolation"


def _growth_split(jobs, fit: MeasuredFit, ranks, platform, rpn, scaling, gb, band) -> dict:
    """The target's step when the growth the runs measured is split otherwise between the
    fitted network and what no term prices. Each run above the smallest may lie off the
    model by the unexplained range (``unexplained_band`` at its doublings from the smallest
    run, whose compute is the base), so the network is fitted again to each such run's step
    / either end of that range, the rest of its step kept as the residual: the network that
    explains more of the growth (or less) continues it faster (or slower) beyond the runs.
    {ranks: (step at one end, step at the other)}; empty where no network was fitted."""
    if fit.bandwidth_factor is None:
        return {}
    jobs = sorted(jobs, key=lambda j: (j.ranks, -j.ranks_per_node))
    out: dict[int, list[float]] = {}
    for end in (0, 1):
        alt = [jobs[0]] + [
            replace(j, step_s=j.step_s / unexplained_band(j.ranks, [jobs[0].ranks], band)[end])
            for j in jobs[1:]
        ]
        other = fit_measured(alt, platform, scaling=scaling, global_batch=gb)
        # The measured steps stay what was measured: the part the network no longer
        # explains is the residual.
        scales = tuple(
            replace(m, step_s=j.step_s, residual_s=m.residual_s + (j.step_s - a.step_s))
            for m, j, a in zip(other.scales, jobs, alt, strict=True)
        )
        rows = _predict_fit(other.base, other.platform, scales, ranks, rpn, scaling, gb)
        for r in rows:
            out.setdefault(r.ranks, []).append(r.step_time_s)
    return {q: tuple(v) for q, v in out.items()}
