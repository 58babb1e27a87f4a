"""The step time on a target as a sum of named terms (the protocol of ``predict/terms.py``).

Per training step::

    step' = f * k' * (outside + lag(q)) + span' + comm'

* ``Compute`` (``outside``): the mean rank's compute outside its collective groups;
* ``SlowestRank`` (``lag``): how far the slowest of the target's ranks lags the mean;
* ``OverlappedCompute`` (``span'``): compute inside collective groups, replayed against the
  target's collectives with the rank's cores shared (``replay.py``);
* ``ExposedComm`` (``comm'``): the collectives' waits the compute does not hide.

``f`` (the compute factor: work per rank and speed of its cores, target over source) and
``k'`` (the transport's idle CPU taking cores from the compute) move the source's measured
compute to the target: a term that returns ``work`` is such measured compute, moved with the
others in one product. Adding an effect is adding one class to ``TERMS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..terms import TermValue, expected_max_normal
from .compute import ComputeModel, compute_model
from .features import MeasuredRun, RunFeatures
from .layout import Layout
from .links import ScalingModel, scaling_model, target_durations, tick_cpu
from .replay import Cpu, Replay, cpu_of, replay_target, steps_at
from .replay import unstretch as _unstretch

__all__ = [
    "TERMS",
    "Compute",
    "ExposedComm",
    "OverlappedCompute",
    "SlowestRank",
    "Source",
    "StepTerm",
    "Target",
    "source",
]


@dataclass(frozen=True)
class Source:
    """The run as every target sees it (made once per run and calibration): its features,
    models, the replay of its collective groups without its own contention, and per step
    its compute outside the groups, its slowest rank's lag and its exposed comm."""

    feats: RunFeatures
    run: MeasuredRun
    model: ScalingModel
    compute: ComputeModel
    notes: tuple[str, ...]  # what every target's prediction rests on
    rep: Replay
    sample: np.ndarray | None  # the replayed steps (None: all of them)
    outside: np.ndarray  # per step: mean rank's compute outside group spans, uncontended
    lag: np.ndarray  # per step: slowest rank's compute over the mean, uncontended
    exposed: np.ndarray  # per step: what the slowest rank did not compute


def source(a, feats: RunFeatures, run: MeasuredRun, cal, ranks_per_node) -> Source:
    """The target-independent half of the what-if: made once per run, calibration and
    ranks per node (``whatif(..., source=)`` reuses it for more targets)."""
    model = scaling_model(a, calibration=cal, ranks_per_node=ranks_per_node, feats=feats)
    cm, cm_notes = compute_model(feats, cal)
    steps, src, p = run.steps, feats.layout, feats.layout.ranks
    notes = list(run.notes) + cm_notes
    notes.append(
        "time outside the training steps (start-up, evaluation, checkpoints) kept as measured"
    )
    # The source as the model sees it: its transport's CPU competing with its compute.
    share_src = cpu_of(src, model.background(p, model.run_links))
    cpu_src = tick_cpu(model, run.ops, run.nbytes, p, model.run_links, run.keys)
    # A long run replays REPLAY_STEPS of its steps, evenly spaced (see replay_sample).
    sample = run.sample
    sub = steps if sample is None else steps_at(steps, sample)
    rep = _unstretch(sub, run.pure, cpu_src, share_src)
    span_meas = rep.span_meas if sample is None else run.sampled_span_meas
    k_src = 1.0 / share_src.rate(0.0)  # compute slowdown by the idle transport alone
    if model.cpu_samples or model.background_cpu:
        notes.append(
            "the transport's own CPU time (measured by ailens calibrate) takes cores from "
            "the compute when the rank has none spare"
        )
    else:
        notes.append(
            "the CPU the collectives themselves use is not measured (run ailens calibrate): "
            "their competition with compute for the cores is not modelled"
        )
    return Source(
        feats,
        run,
        model,
        cm,
        tuple(notes),
        rep,
        sample,
        outside=(steps.comp_mean - span_meas) / k_src,
        lag=(steps.comp_max - steps.comp_mean) / k_src,
        exposed=steps.wall0 - steps.comp_max,
    )


@dataclass(frozen=True, kw_only=True)
class Target:
    """One target as the terms see it: its layout, the compute factor ``f`` (work per rank
    and speed of its cores, target over source), the rank's cores shared with the transport
    (``share``), the compute slowdown ``k`` that sharing gives at idle, and the source's
    collective groups replayed there (``replayed``: :func:`replay_on`)."""

    src: Source
    layout: Layout
    factor: float
    share: Cpu
    contention: float
    replayed: tuple[np.ndarray, np.ndarray] = field(repr=False)

    @property
    def ranks(self) -> int:
        return self.layout.ranks


def replay_on(src: Source, layout: Layout, factor: float, share: Cpu):
    """Per replayed step (compute inside group spans, exposed comm) on the target; at 1 rank
    the groups' compute without their collectives."""
    q = layout.ranks
    if q == 1:
        return (factor * src.rep.span_pure, src.rep.exposed)
    run, model, links = src.run, src.model, layout.links
    dur = target_durations(src.feats, model, run.ops, run.nbytes, run.pure, q, links, run.keys)
    cpu = tick_cpu(model, run.ops, run.nbytes, q, links, run.keys)
    return replay_target(src.rep, dur, cpu, factor, share)


@dataclass(frozen=True)
class StepTerm(TermValue):
    """A term's value with its seconds step by step (``per_step``), to be added to the
    other terms' before averaging: ``work`` is the source's compute (moved to the target by
    f * k with the other work terms), ``sampled`` says it runs over the replayed steps
    only (see ``replay_sample``)."""

    per_step: np.ndarray | None = field(default=None, repr=False, compare=False)
    work: bool = False
    sampled: bool = False


class Compute:
    """The mean rank's compute outside collective groups, moved to the target's cores."""

    name = "compute"
    part = "compute"

    def value(self, t: Target) -> StepTerm:
        src, tgt = t.src.feats.layout, t.layout
        notes = []
        if tgt.oversubscribed and not src.oversubscribed:
            notes.append(
                f"{tgt.ranks_on_node} ranks x {tgt.threads_per_rank} threads on "
                f"{tgt.cores_per_node:g} cores: threads time-share the cores; the cost of "
                "switching between them is not modelled"
            )
        return _work(self.name, t, t.src.outside, notes)


class SlowestRank:
    """The slowest of the target's ranks lags the mean: the run's own lag scaled by
    E[max of q normals] / E[max of p normals]; on a 1-rank run, the step-to-step noise
    of this rank x E[max of q normals] (noise assumed independent across ranks)."""

    name = "slowest_rank"
    part = "compute"

    def value(self, t: Target) -> StepTerm:
        feats, q = t.src.feats, t.ranks
        p = feats.layout.ranks
        notes = []
        if p > 1:
            g_src = expected_max_normal(p)
            lag = t.src.lag * (expected_max_normal(q) / g_src if g_src else 0.0)
        else:
            lag = np.full(len(t.src.run.steps.idx), feats.compute_sd_s * expected_max_normal(q))
            if q > 1:
                notes.append(
                    "1-rank run: the slowest of the ranks lags by the step-to-step noise of "
                    "this rank (assumed independent across ranks)"
                )
        return _work(self.name, t, lag, notes)


class OverlappedCompute:
    """Compute inside collective groups (under DDP's buckets, Horovod's background
    allreduces): replayed against the target's collectives on the rank's shared cores."""

    name = "overlapped_compute"
    part = "compute"

    def value(self, t: Target) -> StepTerm:
        span = t.replayed[0]
        sampled = t.src.sample is not None
        return StepTerm(self.name, float(np.mean(span)), per_step=span, sampled=sampled)


class ExposedComm:
    """The collectives' time the compute does not hide: the change the replay predicts,
    added to what the run's slowest rank did not compute (the part the replay does not
    explain kept); none at 1 rank."""

    name = "exposed_comm"
    part = "comm"

    def value(self, t: Target) -> StepTerm:
        src, q = t.src, t.ranks
        if q == 1:
            return StepTerm(self.name, 0.0)
        exposed = t.replayed[1]
        # Per step this difference is noisy (rank 0's step against the slowest rank's
        # compute): only its mean is clipped.
        if src.sample is None:
            comm = max(float(np.mean(src.exposed + exposed - src.rep.exposed)), 0.0)
        else:  # the measured part over every step, the replayed one over the sample
            comm = max(float(np.mean(src.exposed) + np.mean(exposed - src.rep.exposed)), 0.0)
        notes = []
        links, model = t.layout.links, src.model
        if q != src.feats.layout.ranks or links != model.run_links:
            notes.append(f"{links}-node collectives: {model.params(links).source}")
        return StepTerm(self.name, comm, tuple(notes))


def _work(name: str, t: Target, per_step: np.ndarray, notes: list[str]) -> StepTerm:
    seconds = float(np.mean(t.factor * t.contention * per_step))
    return StepTerm(name, seconds, tuple(notes), per_step=per_step, work=True)


# The step-time model: one instance per named term, summed in this order.
TERMS = (Compute(), SlowestRank(), OverlappedCompute(), ExposedComm())


def step_time(t: Target, values: list[StepTerm], terms=TERMS) -> tuple[float, float]:
    """(step, comm) seconds per step from the terms' values: the work terms added step by
    step and moved together (f * k * (w1 + w2 + ...)), the other compute terms added step
    by step to them (averaged apart when they run over the replay sample only), then the
    comm terms."""
    comm = _added([v.seconds for k, v in zip(terms, values, strict=True) if k.part == "comm"])
    values = [v for k, v in zip(terms, values, strict=True) if k.part != "comm"]
    work = _added([v.per_step for v in values if v.work])
    every = [t.factor * t.contention * work] if work is not None else []
    every += [v.per_step for v in values if not v.work and not v.sampled]
    sampled = [v.per_step for v in values if v.sampled]
    if sampled:
        compute = float(np.mean(_added(every)) + np.mean(_added(sampled)))
    else:
        compute = float(np.mean(_added(every)))
    comm = 0.0 if comm is None else comm
    return compute + comm, comm


def _added(xs: list):
    """x1 + x2 + ... in order (None for none): the sum starts from the first term itself."""
    out = None
    for x in xs:
        out = x if out is None else out + x
    return out
