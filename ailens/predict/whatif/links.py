"""Links and collective costs: what each collective would take on the target.

``ScalingModel`` holds the link parameters per link kind and where they came from (the
calibration, the fit on this run's collectives, labelled defaults); a collective's pure
duration moves to the target by the cost model of the run's transport,
``d' = d + T(q, link') - T(p, link)``, the run's own overhead kept (``target_durations``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..collectives import (
    DEFAULT_INTER,
    DEFAULT_INTRA,
    CostParams,
    Fit,
    canonical_op,
    collective_time,
)
from .calibration import interp_samples, link_calibration, load_calibration
from .features import RunFeatures, features, tick_keys

__all__ = ["ScalingModel", "scaling_model", "target_durations", "tick_cpu", "tick_keys"]


@dataclass(frozen=True, kw_only=True)
class ScalingModel:
    """The link parameters the what-if uses and where each came from (built by keyword)."""

    ranks: int
    run_fit: Fit  # fit on this run's own collectives (None params at 1 rank)
    intra: CostParams
    inter: CostParams
    run_links: str  # "none", "intra" or "inter": what this run's collectives crossed
    ranks_per_node: int | None  # None: every rank count fits on one node
    transport: str = ""
    calibration_transport: str | None = None
    # Calibration measurements per link kind: (ranks, {op: (sizes, seconds)}), looked up
    # (log-log interpolation) for the rank count they were measured at.
    samples: dict = field(default_factory=dict)
    cpu_samples: dict = field(default_factory=dict)  # the same for the CPU time they took
    # ... for their time while the ranks compute beside them
    loaded_samples: dict = field(default_factory=dict)
    background_cpu: dict = field(default_factory=dict)  # links -> idle CPU s per s

    def params(self, links: str) -> CostParams:
        return self.inter if links == "inter" else self.intra

    def time(self, op: str, q: int, nbytes: float, links: str) -> float:
        """Seconds of one collective on ``q`` ranks over ``links``: the calibration's own
        measurement at that size when it was taken on ``q`` ranks, else the cost model."""
        if q <= 1:
            return 0.0
        got = self.samples.get(links)
        if got is not None and got[0] == q:
            t = interp_samples(got[1], op, nbytes)
            if t is not None:
                return t
        return collective_time(op, q, nbytes, self.params(links))

    def loaded(self, op: str, q: int, nbytes: float, links: str) -> float | None:
        """Speed of a collective (1 = as if alone) while the ranks compute beside it on no
        spare core, as ailens calibrate measured it; None when not measured. (The stand-in
        kernel's own slowdown meanwhile is recorded too, but a job's kernels suffer
        differently: the compute side uses the fair-share model.)"""
        got = self.loaded_samples.get(links)
        if q <= 1 or got is None or got[0] != q:
            return None
        slow = interp_samples(got[1], op, nbytes)
        if slow is None:
            return None
        return min(self.time(op, q, nbytes, links) / slow, 1.0)

    def background(self, q: int, links: str) -> float:
        """CPU seconds per second the transport burns on each rank while idle."""
        got = self.background_cpu.get(links)
        return float(got[1]) if got is not None and q > 1 else 0.0

    def cpu(self, op: str, q: int, nbytes: float, links: str) -> float:
        """CPU seconds a rank spends on one collective (its transport's threads included),
        as calibrated on ``q`` ranks over ``links``; 0 when not measured."""
        got = self.cpu_samples.get(links)
        if q <= 1 or got is None or got[0] != q:
            return 0.0
        sizes_ok = interp_samples(got[1], op, nbytes)
        if sizes_ok is not None:
            return sizes_ok
        table = got[1].get(canonical_op(op) or "allreduce")
        if table is None:
            return 0.0
        # Outside the measured sizes: the CPU share of the nearest measured size.
        i = 0 if nbytes < table[0][0] else -1
        t = self.time(op, q, nbytes, links)
        ref = self.time(op, q, float(table[0][i]), links)
        return float(table[1][i]) * (t / ref if ref > 0 else 1.0)

    def to_dict(self) -> dict:
        return {
            "ranks": self.ranks,
            "run_fit": self.run_fit.to_dict(),
            "intra": self.intra.to_dict(),
            "inter": self.inter.to_dict(),
            "run_links": self.run_links,
            "ranks_per_node": self.ranks_per_node,
            "transport": self.transport,
            "calibration_transport": self.calibration_transport,
        }


def scaling_model(
    a,
    *,
    calibration: dict | None = None,
    ranks_per_node: int | None = None,
    feats: RunFeatures | None = None,
) -> ScalingModel:
    """Link parameters for the what-if: ``calibration`` (or the run directory's
    calibration.json) when it measured the run's transport, then the fit on this run's
    collectives, then labelled defaults."""
    feats = feats or features(a)
    multi = feats.layout.nodes > 1
    run_links = "none" if a.ranks == 1 else ("inter" if multi else "intra")
    if ranks_per_node is None and multi:
        ranks_per_node = feats.layout.ranks_per_node
    cal = calibration if calibration is not None else load_calibration(a.run.path)
    lc = link_calibration(cal, feats.transport)
    fit = feats.link_fit
    fitted = (
        fit.params
        if fit.params is not None and (fit.params.alpha > 0 or fit.params.beta > 0)
        else None
    )
    intra = lc.intra or (fitted if run_links == "intra" else None) or DEFAULT_INTRA
    inter = lc.inter or (fitted if multi else None)
    if inter is None:
        inter = CostParams(
            max(intra.alpha, DEFAULT_INTER.alpha),
            max(intra.beta, DEFAULT_INTER.beta),
            intra.gamma,
            source=f"{DEFAULT_INTER.source} (inter-node not measured)",
        )
    if multi and lc.intra is None:
        intra = replace(inter, source=f"{inter.source}; intra-node assumed equal")
    return ScalingModel(
        ranks=a.ranks,
        run_fit=fit,
        intra=intra,
        inter=inter,
        run_links=run_links,
        ranks_per_node=ranks_per_node,
        transport=feats.transport,
        calibration_transport=lc.transport,
        samples=lc.samples,
        cpu_samples=lc.cpu_samples,
        loaded_samples=lc.loaded_samples,
        background_cpu=lc.background_cpu,
    )


def target_durations(
    feats: RunFeatures, model: ScalingModel, ops, nbytes, pure, q: int, links: str, keys=None
) -> np.ndarray:
    """Per tick: pure collective duration on the target, ``d + T(q, links) - T(p, run)``
    (the run's own overhead above its cost model kept); nothing at 1 rank. ``keys``:
    :func:`tick_keys` of the ticks, when the caller has them."""
    if q == 1:
        return np.zeros(len(pure))
    p = feats.layout.ranks
    out = np.array(pure, dtype=np.float64)
    if q == p and links == model.run_links:
        return out
    uniq, inv = keys if keys is not None else tick_keys(ops, nbytes)
    added = np.array(
        [
            model.time(o, q, n, links) - (model.time(o, p, n, model.run_links) if p > 1 else 0.0)
            for o, n in uniq
        ]
    )
    return np.maximum(out + added[inv], 0.0) if len(out) else out


def tick_cpu(model: ScalingModel, ops, nbytes, q: int, links: str, keys=None) -> np.ndarray:
    """Per tick on ``q`` ranks (calibrated): columns CPU seconds a rank spends on the
    collective, and its speed while the ranks compute on no spare core (NaN: not measured)."""
    out = np.zeros((len(ops), 2))
    out[:, 1] = np.nan
    if q <= 1:
        return out
    uniq, inv = keys if keys is not None else tick_keys(ops, nbytes)
    table = np.zeros((len(uniq), 2))
    for j, (o, n) in enumerate(uniq):
        loaded = model.loaded(o, q, n, links)
        table[j] = (model.cpu(o, q, n, links), np.nan if loaded is None else loaded)
    return table[inv] if len(ops) else out
