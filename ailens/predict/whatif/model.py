"""The run-directory what-if: a recorded run's step time on another layout of ranks,
threads, cores and links (docs/whatif.md has the derivation and the measured accuracy).

``whatif(a, ranks, ...)`` takes a run's features, measured once (``features.py``:
``prepare``), builds what every target shares (``terms.source``: the scaling and compute
models, the replay of the run's own collective groups), then for each target evaluates the
named step terms (``terms.py``) into a :class:`Prediction` and a :class:`WhatIfRow`.

* Compute: the time a rank is not waiting on a collective, so comm hidden under backward
  (DDP buckets, Horovod's background allreduces) stays compute at 1 rank. Its speed
  depends on the cores a rank's threads get and its node's load (``compute.py``:
  measured by ``ailens calibrate``'s probe, else from the run or assumed, each labelled).
* Collectives: each one's pure duration moves to the target by the cost model of the run's
  transport (``links.py``); groups of overlapped collectives are replayed through one queue
  against the compute that overlaps them, the rank's cores shared between its compute and
  its transport's threads (``replay.py``). Calibrations are read by ``calibration.py``.
* Every input not measured is an entry of ``assumptions``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ..terms import TermValue
from .calibration import load_calibration
from .features import MeasuredRun, Prepared, RunFeatures, prepare
from .layout import Layout
from .replay import cpu_of
from .terms import TERMS, Source, Target, replay_on, step_time
from .terms import source as _source

__all__ = ["Prediction", "WhatIfRow", "whatif", "whatif_source"]


@dataclass(frozen=True)
class WhatIfRow:
    """Predicted step and total time on one target layout; ``to_dict()`` is one row of
    ``ailens whatif --json``. ``speedup``/``efficiency`` are against the model's own 1-rank
    prediction (efficiency = speedup / ranks)."""

    ranks: int
    step_time_s: float
    total_time_s: float
    speedup: float
    efficiency: float
    comm_pct: float
    steps: float
    compute_step_s: float
    comm_step_s: float
    links: str  # "none" (1 rank), "intra" or "inter" node
    measured: bool = False  # the run's own layout
    phases: tuple[tuple[int, float, float], ...] = field(default=())
    ranks_per_node: int = 1
    threads_per_rank: int = 1
    cores_per_node: float = 1.0
    # Work per rank and speed of its cores, target over source (strong scaling's p/q, the
    # thread speed-up and node sharing); the transport's CPU contention comes on top.
    compute_factor: float = 1.0
    assumptions: tuple[str, ...] = ()
    # The named terms the step time is the sum of (terms.py), each with its assumptions.
    terms: tuple[TermValue, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["phases"] = [{"id": i, "compute_step_s": c, "comm_step_s": m} for i, c, m in self.phases]
        d["assumptions"] = list(self.assumptions)
        d["terms"] = [t.to_dict() for t in self.terms]
        return d


@dataclass(frozen=True)
class Prediction:
    """One target's step: its layout, the compute factor, the terms' values, the step and
    its comm (seconds per step), the steps and total time of the run there, and what this
    target's prediction assumed beyond the run's own assumptions."""

    layout: Layout
    compute_factor: float
    terms: tuple[TermValue, ...]
    step_s: float
    comm_s: float
    steps: float
    total_s: float
    assumptions: tuple[str, ...]


def whatif(
    a,
    ranks: list[int],
    *,
    mode: str = "weak",
    ranks_per_node: int | None = None,
    cores_per_node: float | None = None,
    threads_per_rank: int | None = None,
    calibration: dict | None = None,
    fixed_dataset: bool = True,
    warmup: int | None = None,
    prepared: Prepared | None = None,
    source: Source | None = None,
) -> list[WhatIfRow]:
    """Predicted step time, total time, speedup, efficiency and comm % on each target.

    ``mode="weak"``: per-rank batch fixed (per-rank compute unchanged), and with
    ``fixed_dataset`` the steps scale by p/p'. ``mode="strong"``: global batch fixed,
    per-rank compute x p/p', steps unchanged. ``ranks_per_node``, ``cores_per_node``,
    ``threads_per_rank`` describe the target nodes (default: what the run had; ranks per
    node defaults to "all on one node" for a single-host run). ``prepared``: what
    :func:`prepare` extracted from ``a`` (with the same ``warmup``), to evaluate many
    targets of one run without extracting its features again; ``source``: what
    :func:`whatif_source` made of the run with this ``calibration`` and ``ranks_per_node``
    (then those two are not read again), to evaluate many targets without replaying the
    run's collective groups again.
    """
    _check(mode, ranks, ranks_per_node, cores_per_node, threads_per_rank)
    src = source or whatif_source(
        a, calibration=calibration, ranks_per_node=ranks_per_node, warmup=warmup, prepared=prepared
    )
    shape = (ranks_per_node, threads_per_rank, cores_per_node)
    totals = _totals(a, src.feats)

    def predict(q: int) -> Prediction:
        layout = _target_layout(src, q, *shape)
        return _predict(src, layout, mode, fixed_dataset, totals)

    base_total = predict(1).total_s
    return [_row(a, src, predict(q), base_total) for q in sorted({int(r) for r in ranks})]


def whatif_source(
    a,
    *,
    calibration: dict | None = None,
    ranks_per_node: int | None = None,
    warmup: int | None = None,
    prepared: Prepared | None = None,
) -> Source:
    """What every target of ``a`` shares (its features, models and the replay of its own
    collective groups) for this calibration (default: the run directory's) and target ranks
    per node: ``whatif(a, ..., source=whatif_source(a))`` for many targets."""
    feats, run = prepared if prepared is not None else prepare(a, warmup=warmup)
    cal = calibration if calibration is not None else load_calibration(a.run.path)
    return _source(a, feats, run, cal, ranks_per_node)


def _check(mode, ranks, ranks_per_node, cores_per_node, threads_per_rank) -> None:
    if mode not in ("weak", "strong"):
        raise ValueError(f"mode={mode!r}: choose weak or strong")
    if not ranks or any(int(r) < 1 for r in ranks):
        raise ValueError("ranks must be positive integers")
    for name, v in (
        ("ranks_per_node", ranks_per_node),
        ("cores_per_node", cores_per_node),
        ("threads_per_rank", threads_per_rank),
    ):
        if v is not None and not v > 0:
            raise ValueError(f"{name} must be > 0, got {v}")


def _target_layout(src: Source, q: int, ranks_per_node, threads_per_rank, cores_per_node):
    """The target's layout: what was asked, else what the run had."""
    lay = src.feats.layout
    rpn = ranks_per_node or (
        src.model.ranks_per_node if src.model.ranks_per_node else max(q, lay.ranks_per_node)
    )
    return Layout(
        q,
        int(rpn),
        int(threads_per_rank or lay.threads_per_rank),
        float(cores_per_node or lay.cores_per_node),
    )


def _predict(src: Source, tgt: Layout, mode: str, fixed_dataset: bool, totals) -> Prediction:
    """The terms on one target, summed; the run's steps and total time there."""
    p, q = src.feats.layout.ranks, tgt.ranks
    work_scale = p / q if mode == "strong" else 1.0
    f = work_scale * src.compute.speed(src.feats.layout) / src.compute.speed(tgt)
    share = cpu_of(tgt, src.model.background(q, tgt.links) if q > 1 else 0.0)
    t = Target(
        src=src,
        layout=tgt,
        factor=f,
        share=share,
        contention=1.0 / share.rate(0.0),
        replayed=replay_on(src, tgt, f, share),
    )
    values = [term.value(t) for term in TERMS]
    step, comm = step_time(t, values)
    total_steps, fixed = totals
    n_steps = total_steps * p / q if mode == "weak" and fixed_dataset else float(total_steps)
    terms = tuple(TermValue(v.name, v.seconds, v.assumptions, v.detail) for v in values)
    return Prediction(
        layout=tgt,
        compute_factor=f,
        terms=terms,
        step_s=step,
        comm_s=comm,
        steps=n_steps,
        total_s=fixed + n_steps * step,
        assumptions=tuple(a for v in values for a in v.assumptions),
    )


def _row(a, src: Source, pr: Prediction, base_total: float) -> WhatIfRow:
    tgt, step, comm, total = pr.layout, pr.step_s, pr.comm_s, pr.total_s
    lay = src.feats.layout
    speedup = base_total / total if total > 0 else float("nan")
    return WhatIfRow(
        ranks=tgt.ranks,
        step_time_s=step,
        total_time_s=float(total),
        speedup=float(speedup),
        efficiency=float(speedup / tgt.ranks),
        comm_pct=float(100.0 * comm / step) if step > 0 else 0.0,
        steps=float(pr.steps),
        compute_step_s=float(step - comm),
        comm_step_s=comm,
        links=tgt.links,
        measured=tgt.ranks == lay.ranks and tgt == replace(lay, ranks_per_node=tgt.ranks_per_node),
        phases=_phase_split(a, src.run, pr.compute_factor, tgt.ranks),
        ranks_per_node=tgt.ranks_per_node,
        threads_per_rank=tgt.threads_per_rank,
        cores_per_node=tgt.cores_per_node,
        compute_factor=float(pr.compute_factor),
        assumptions=src.notes + pr.assumptions,
        terms=pr.terms,
    )


def _totals(a, feats: RunFeatures) -> tuple[int, float]:
    """Total steps of the run and its time outside the steps (start-up, sections), which the
    total-time prediction keeps (sections scaled like compute)."""
    fc = a.forecast
    n_steps = len(a.step_end_s)
    total_steps = fc.total_steps if fc is not None and fc.total_steps else max(n_steps, 1)
    if fc is not None:
        measured = fc.actual_total_s if fc.actual_total_s is not None else fc.predicted_total_s
    else:
        measured = float(a.step_end_s[-1]) if n_steps else a.total_s
    fixed = max(float(measured or 0.0) - total_steps * feats.step_s, 0.0)
    return int(total_steps), fixed


def _phase_split(a, run: MeasuredRun, f: float, q: int) -> tuple[tuple[int, float, float], ...]:
    """(phase id, compute s, comm s) per step on the target: the run's per-phase split with
    compute scaled by ``f`` and collectives removed at 1 rank (the table the report shows)."""
    steps, steady = run.steps, run.steady_ticks
    ids = a.phase_ids[steady]
    if not len(ids):
        return ()
    per = max(len(steps.idx), 1)
    size = int(ids.max()) + 1
    pc = np.bincount(ids, weights=a.compute_s[steady] * f, minlength=size) / per
    comm = a.comm_s[steady] if q > 1 else np.zeros(int(steady.sum()))
    pm = np.bincount(ids, weights=comm, minlength=size) / per
    return tuple(
        (ph.id, float(pc[ph.id]), float(pm[ph.id])) for ph in a.table.phases if ph.id < size
    )
