"""Sections the integration or a log marked (``lens.section("eval")``: Keras validation,
Lightning validation loops, MLPerf evaluations, ...): their measured time per occurrence (the
cold first one left out once a later one is seen) and their schedule (from the framework, else
learned from where they happened); a section announced but not seen yet is assumed
(``eval_steps`` forward passes, else a prior share of the run); one during which steps ended
ran beside the training and has no time of its own (a one-off)."""

from __future__ import annotations

import math

import numpy as np

from ..._stats import NORMAL_95
from .parts import (
    SECTION_CV,
    SECTION_PRIOR,
    Part,
    cold_precision,
    first_occurrence,
    per_occurrence_precision,
)
from .schedule import EvalPlan, Schedule, learned_plan

# A run of at most this many steps is a run of epochs or blocks (iterations come by the
# thousand): evaluations nobody announced may still come between them.
COARSE_STEPS = 200
# An evaluation announced but not seen: ``eval_steps`` forward-only batches at about a
# third of a training step each (+/- 50 %); without ``eval_steps``, a prior: all the
# evaluations of the run take a share of its training that is log-normal, median
# EVAL_SHARE, log spread EVAL_SHARE_LOG_SD (45 MLPerf runs of the development corpus whose
# evaluations run inside the steps: 0.6 % to 47 %, log-mean 5.3 %, log sd 1.26; learned
# leave-one-family-out 4.4-7.6 % and 1.07-1.33, benchmarks/forecast_priors_lofo.py): its
# 2.5-97.5 % range, 0.4-59 %, is the interval's, a little below the point, much above.
# EVAL_SHARE_SD: the room kept for evaluations that may come, nobody announced (snapshot).
# With the samples an evaluation runs and the training's samples per step: an evaluation
# sample costs EVAL_SAMPLE_COST training samples, +/- EVAL_SAMPLE_SD of that. On the
# development corpus (18 MLPerf runs whose logs say eval_samples and train_samples per
# epoch) the ratio has median 1.15, quartiles 0.77 and 2.9 (data loading, metrics and
# decoding besides the forward pass): a wide range, stated.
EVAL_SAMPLE_COST = 1.15
EVAL_SAMPLE_SD = 1.0
FORWARD_SHARE = 1 / 3
FORWARD_SD = 0.5
EVAL_SHARE = 0.05
EVAL_SHARE_SD = 0.05
EVAL_SHARE_LOG_SD = 1.26
# A checkpoint announced but not seen, the state it writes known (``checkpoint_bytes``):
# that state at CHECKPOINT_WRITE_RATE bytes/s, log-normal, the time within a factor
# CHECKPOINT_RATE_FACTOR of it either way (95 %). torch.save of a model and its AdamW state
# wrote 0.65-1.4 GB/s in the development corpus's two GPU recordings (ResNet-50, 0.31 GB,
# and GPT-2, 1.49 GB, three checkpoints each on an H200 host: the device-to-host copy and
# the serialisation included) and 0.48-1.76 GB/s on the development machine's disk; the
# range leaves room for a shared file system and for local NVMe. A framework's own fixed
# cost per checkpoint (NeMo 2 saved a 10M-parameter model in 5-17 s) is beyond it: once one
# is seen, its time replaces the assumption.
CHECKPOINT_WRITE_RATE = 1e9
CHECKPOINT_RATE_FACTOR = 10.0


def eval_share_range() -> tuple[float, float]:
    """The 2.5-97.5 % range of the share of the training all of a run's evaluations take,
    a log-normal of median ``EVAL_SHARE`` and log spread ``EVAL_SHARE_LOG_SD``."""
    w = NORMAL_95 * EVAL_SHARE_LOG_SD
    return EVAL_SHARE * math.exp(-w), EVAL_SHARE * math.exp(w)


def unannounced(schedule: Schedule, seen_eval: bool) -> bool:
    """A run of epochs or blocks (at most ``COARSE_STEPS`` steps), between which
    evaluations come, with none announced by the schedule nor seen so far."""
    n = schedule.total_steps
    return bool(n) and n <= COARSE_STEPS and not seen_eval and schedule.eval_plan() is None


def section_parts(
    sections: dict[str, list[tuple[int, float]]],
    beside: dict[str, list[float]],
    schedule: Schedule,
    s: int,
    level: float,
    beside_units: dict[str, list[tuple[int, float]]] | None = None,
    in_step: tuple[str, ...] = (),
    under_way_now: dict[str, tuple[int, float]] | None = None,
) -> list[Part]:
    """Marked sections (evaluation, checkpoints) with their schedule, after ``s`` steps; an
    evaluation the schedule announces but the run has not reached yet is assumed (said so).
    ``sections``: name -> (step, seconds) of each; ``beside``: the seconds of those that ran
    beside the steps; ``under_way_now``: by name, the one under way (``under_way``): its
    position and what it took so far (the units over the level since then)."""
    eval_plan = schedule.eval_plan()
    out = [_marked(name, seen, schedule, eval_plan, s) for name, seen in sections.items()]
    for name, secs in beside.items():
        mean = sum(secs) / len(secs)
        out.append(
            Part(f"section {name}", "beside the steps", "measured", mean, 0.0, len(secs), "one-off")
        )
    for name, units in (beside_units or {}).items():
        now, spent = (under_way_now or {}).get(name, (None, None))
        out.append(_beside_units(name, units, schedule, eval_plan, level, s, now, spent))
    # Announced evaluations whose first position passed with no section marked run
    # inside the steps: their time is in the step level or an in-step extra already.
    # A section is marked when it ends: one that runs beside the steps for a while after its
    # position is not known to run inside them until half an evaluation spacing passed
    # (or an in-step extra on the evaluation period showed it).
    seen_eval = "eval" in sections or "eval" in beside or "evaluation" in in_step
    if eval_plan is not None and not seen_eval:
        grace = int(eval_plan.spacing() / 2)
        if not eval_plan.count(0, s - 1 - grace):
            out.append(_not_seen_yet(schedule, eval_plan, s, level))
    # A checkpoint the same way, where the schedule says the state it writes.
    every = schedule.checkpoint_every_steps
    seen_ckpt = "checkpoint" in sections or "checkpoint" in beside or "checkpoint" in in_step
    if every and schedule.checkpoint_bytes and not seen_ckpt and s - 1 - every // 2 < every:
        out.append(_checkpoint_not_seen_yet(schedule, s))
    return out


def _marked(
    name: str,
    seen: list[tuple[int, float]],
    sched: Schedule,
    eval_plan: EvalPlan | None,
    s: int,
) -> Part:
    """A section seen at least once: its cost per occurrence, and where the rest come."""
    at = [k for k, _ in seen]
    cost, sd, used = _section_cost([x for _, x in seen], name)
    plan, source = None, "learned"
    if name == "eval" and eval_plan is not None:
        plan, source = eval_plan, "schedule"
    elif name == "checkpoint" and sched.checkpoint_every_steps:
        every = float(sched.checkpoint_every_steps)
        plan, source = EvalPlan(every, every), "schedule"
    else:
        plan, source = learned_plan(at, sched.epoch_steps(), s)
    if plan is None:
        return Part(f"section {name}", "one-off", "measured", cost, sd, used, "one-off")
    count_unknown = source.startswith("assumed: every")
    # Known once the period is known; from the cold first one alone, to the prior's spread.
    precise = None if count_unknown else cold_precision(name) if len(seen) < 2 else _precision(seen)
    return Part(
        f"section {name}",
        plan.describe(),
        source,
        cost,
        sd,
        used,
        "section",
        # Due right now: its step is done and the section has not begun.
        due_now=at[-1] < s and plan.count(s, s) > 0,
        plan=plan,
        count_unknown=count_unknown,
        precision=precise,
    )


def _precision(seen: list[tuple[int, float]]) -> float | None:
    warm = [x for _, x in seen[1:]]
    mean = sum(warm) / len(warm)
    sd = float(np.std(warm, ddof=1)) if len(warm) > 1 else 0.0
    return per_occurrence_precision(mean, sd, len(warm))


def _beside_units(
    name: str,
    units: list[tuple[int, float]],
    sched: Schedule,
    eval_plan: EvalPlan | None,
    level: float,
    s: int,
    now: int | None = None,
    spent: float | None = None,
) -> Part:
    """A section that runs beside the training inside the units it falls in: what those
    units take over the level, on the section's schedule (in-step). Its precision is the
    95 % half-width of that time relative to the step level (it may be about nothing).
    ``now``: the position of one under way (``under_way``), still to come
    (``due_now``) less what it took so far (``spent``)."""
    excess = [x for _, x in units]
    plan, source = _beside_plan(name, units, sched, eval_plan, s)
    if len(excess) == 1:  # its first occurrence, cold like a first section
        share, spread = first_occurrence(name)
        per = max(excess[0], 0.0)
        per, sd, precise, m = share * per, spread * per, cold_precision(name), 1
    else:
        # The first is cold, like a first section's: once a later one is seen it is left
        # out (spent, not extrapolated), else a slow first evaluation (compilation, caches)
        # is averaged into every later one.
        warm = excess[1:]
        m = len(warm)
        per = max(sum(warm) / m, 0.0)
        sd_seen = float(np.std(warm, ddof=1)) if m > 1 else 0.0
        # Relative to its time, or to a hundredth of a step when it costs about nothing;
        # pooled with the prior spread as a section's (a few equal ones are no certainty).
        base = max(per, 0.01 * level)
        k0 = SECTION_PRIOR
        sd = math.sqrt((k0 * (SECTION_CV * base) ** 2 + (m - 1) * sd_seen**2) / (k0 + m - 1))
        precise = per_occurrence_precision(base, sd_seen, m)
    if source.startswith("assumed: every"):
        precise = None
    return Part(
        f"section {name} (beside the steps)",
        plan.describe() if plan else "one-off",
        source or "learned",
        per,
        sd,
        m,
        "in-step" if plan else "one-off",
        plan=plan,
        precision=precise,
        due_now=now is not None,
        spent_s=spent or 0.0,
        # A section comes after its step: the one after the last step (a final evaluation)
        # runs before the end, though no unit holds it.
        after_last=True,
    )


def _beside_plan(
    name: str,
    units: list[tuple[int, float]],
    sched: Schedule,
    eval_plan: EvalPlan | None,
    s: int,
) -> tuple[EvalPlan | None, str]:
    """Where a section beside the steps comes: the schedule's evaluations, else learned."""
    if name == "eval" and eval_plan:
        return eval_plan, "schedule"
    return learned_plan([i for i, _ in units], sched.epoch_steps(), s)


def under_way(
    name: str,
    sections: dict[str, list[tuple[int, float]]],
    units: list[tuple[int, float]],
    sched: Schedule,
    s: int,
) -> int | None:
    """The position of an occurrence of a section beside the steps under way after ``s``
    steps, or None: a section is marked when it ends and steps end while this one runs, so
    one whose position passed within the last spacing with none marked since (beside the
    steps or not: some occurrences may lengthen a unit) has begun and not ended."""
    plan, _ = _beside_plan(name, units, sched, sched.eval_plan(), s)
    if plan is None:
        return None
    last = max(k for k, _ in (*sections.get(name, ()), *units))
    lo = max(last + 1, s - math.ceil(plan.spacing()))
    for k in range(s - 1, lo - 1, -1):
        if plan.count(k, k):
            return k
    return None


def _not_seen_yet(sched: Schedule, eval_plan: EvalPlan, s: int, level: float) -> Part:
    """An announced evaluation the run has not reached yet: its assumed cost."""
    sd_lo = None  # symmetric unless the share prior prices it
    if sched.eval_samples and sched.samples_per_step:
        # The samples it runs at the training's cost per sample, times what an evaluation
        # sample costs against a training one on the development corpus.
        mean = EVAL_SAMPLE_COST * sched.eval_samples / sched.samples_per_step * level
        sd = EVAL_SAMPLE_SD * mean
        source = (
            f"assumed: {sched.eval_samples} samples at {EVAL_SAMPLE_COST:g}x a training "
            f"sample's cost (+/- {100 * EVAL_SAMPLE_SD:.0f} %)"
        )
    elif sched.eval_steps:
        # Forward passes only: about FORWARD_SHARE of a training step per batch.
        mean = sched.eval_steps * level * FORWARD_SHARE
        sd = FORWARD_SD * mean
        source = f"assumed: {sched.eval_steps} batches at 1/3 of a training step (+/- 50 %)"
    else:
        # Nothing says how long one takes: a prior share of the run's training for
        # all of them, log-normal (real ones take from under 1 % to 47 %): its median as
        # the point, its 95 % range as a split spread (a little below, much above).
        n = sched.total_steps
        count = eval_plan.count(1, n) if n else 0
        per = n / count if count else eval_plan.spacing()
        mean = EVAL_SHARE * per * level
        lo, hi = eval_share_range()
        sd = (hi - EVAL_SHARE) / NORMAL_95 * per * level
        sd_lo = (EVAL_SHARE - lo) / NORMAL_95 * per * level
        source = (
            f"assumed: not seen yet, all of them {100 * EVAL_SHARE:g} % of the training "
            f"({100 * lo:.1f}-{100 * hi:.0f} %)"
        )
    return Part(
        "section eval (not seen yet)",
        eval_plan.describe(),
        source,
        mean,
        sd,
        0,
        "section",
        due_now=s > 0 and eval_plan.count(s, s) > 0,
        plan=eval_plan,
        sd_lo_s=sd_lo,
    )


def _checkpoint_not_seen_yet(sched: Schedule, s: int) -> Part:
    """An announced checkpoint the run has not reached yet, the bytes it writes known: its
    assumed cost (``CHECKPOINT_WRITE_RATE``), skewed as the rate's range is."""
    every = float(sched.checkpoint_every_steps)
    plan = EvalPlan(every, every)
    point = sched.checkpoint_bytes / CHECKPOINT_WRITE_RATE  # the log-normal's median
    lo, hi = point / CHECKPOINT_RATE_FACTOR, point * CHECKPOINT_RATE_FACTOR
    rate, f = CHECKPOINT_WRITE_RATE / 1e9, CHECKPOINT_RATE_FACTOR
    return Part(
        name="section checkpoint (not seen yet)",
        schedule=plan.describe(),
        source=f"assumed: {sched.checkpoint_bytes / 1e9:.3g} GB of state written at "
        f"{rate:g} GB/s ({rate / f:g}-{rate * f:g} GB/s)",
        per_occurrence_s=point,
        sd_s=(hi - point) / NORMAL_95,
        seen=0,
        kind="section",
        due_now=s > 0 and plan.count(s, s) > 0,
        plan=plan,
        sd_lo_s=(point - lo) / NORMAL_95,
    )


def _section_cost(secs: list[float], name: str = "") -> tuple[float, float, int]:
    """(time per remaining occurrence, its spread, occurrences it rests on) of section
    ``name``.

    A first occurrence is cold (compilation, caches, data loading: 1-3x a later one), like
    a training step's warm-up: once a later one is seen, it is left out; while it is the only
    one, a later one is taken as a share of it (``first_occurrence``: ``FIRST_WARM`` +/-
    ``FIRST_WARM_SD``; a checkpoint's, the whole +/- half of it). The spread of the
    occurrences is pooled with a prior one (``SECTION_CV``, worth ``SECTION_PRIOR`` of them):
    a few equal occurrences do not make a certainty."""
    if len(secs) == 1:
        share, sd = first_occurrence(name)
        return secs[0] * share, secs[0] * sd, 1
    warm = secs[1:]
    m = len(warm)
    mean = sum(warm) / m
    var_seen = float(np.var(warm, ddof=1)) if m > 1 else 0.0
    k0 = SECTION_PRIOR
    sd = math.sqrt((k0 * (SECTION_CV * mean) ** 2 + (m - 1) * var_seen) / (k0 + m - 1))
    return mean, sd, m
