"""Recurring extras inside steps: steps that stand out on a period (an evaluation or a
checkpoint in a plain loop makes every N-th step longer). A period is taken from the schedule
the framework or script gave (steps per epoch, checkpoint every N, the evaluation plan), or
learned from ``MIN_HITS`` occurrences, jittered or not; one spike or a burst of slow steps is
no period. Outliers that fit no period stay in the level at their rate, or are a one-off
(``parts.split_spikes``)."""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from itertools import repeat

import numpy as np

from ..._stats import binomial_tail, occurrences
from .level import StepLevel
from .parts import Part, cold_precision, first_occurrence, per_occurrence_precision
from .schedule import JITTER, EvalPlan, Schedule, fit_lattice

MAX_SPIKES = 64  # recent spikes the recurring extras are learned from
# A period learned from the steps alone needs this many occurrences: two pauses a hundred
# steps apart are no schedule yet.
MIN_HITS = 3


@dataclass(frozen=True)
class _Lattice:
    """Steps on a period: positions ``floor(start + j * period + 0.5)``, j >= 0, matched
    within ``tol`` steps (0 for a whole period; 1 for a jittered one). ``what``: the
    schedule's name for it ("" when learned); ``first_at``: spike steps where the schedule
    puts an occurrence."""

    period: float
    start: float
    tol: int
    what: str = ""
    first_at: frozenset = frozenset()

    def index(self, k: int) -> int:
        return round((k - self.start) / self.period)

    def on(self, k: int) -> bool:
        j = self.index(k)
        return j >= 0 and abs(k - math.floor(self.start + j * self.period + 0.5)) <= self.tol

    def count(self, lo: int, hi: int) -> int:
        if not self.tol:  # a whole period: positions start + j * period
            return occurrences(int(self.period), int(self.start), max(lo, 0), hi)
        return EvalPlan(self.period, self.start).count(lo, hi)


def recurring_extras(
    spikes: dict[int, float], s: int, schedule: Schedule, warmup_steps: int
) -> tuple[list[Part], set[int]]:
    """Recurring extras inside steps: the spikes (step -> seconds over the level) on a
    period, after ``s`` steps; and the steps they explain."""
    steps = sorted(k for k, v in spikes.items() if v > 0)[-MAX_SPIKES:]
    if not steps:
        return [], set()
    chosen = _periodic(steps, s, schedule, warmup_steps)
    if not chosen:
        return [], set()
    x, resid, rows = _fit(chosen, spikes)
    # An extra that comes on a longer period inside a shorter one's steps (a checkpoint
    # every 100 steps on an evaluation every 25) shows as a periodic residual: a second pass.
    big = [k for k, r in zip(rows, resid, strict=True) if r > max(0.5 * x.mean(), 0.0)]
    more = [c for c in _periodic(big, s, schedule, warmup_steps) if c not in chosen]
    if more:
        chosen += more
        x, resid, rows = _fit(chosen, spikes)
    covered = set(rows)
    out = []
    for j, lat in enumerate(chosen):
        member = [lat.on(k) for k in rows]
        hits = sum(member)
        per = float(x[j])
        if hits > 1:
            spread = float(np.std(resid[member]))
            precise = per_occurrence_precision(per, spread, hits)
        else:
            # One hit: the first occurrence, cold like a first section (issue 30, 4): a
            # later one is a share of it (``first_occurrence``), not the whole of it on
            # every one to come.
            share, sd = first_occurrence(lat.what)
            per, spread, precise = share * per, sd * per, cold_precision(lat.what)
        first = next(k for k in rows if lat.on(k))
        every = f"every {lat.period:g} steps"
        out.append(
            Part(
                every + (f" ({lat.what})" if lat.what else ""),
                f"{every} from step {first + 1}",
                "schedule" if lat.what else "learned",
                per,
                spread,
                hits,
                "in-step",
                plan=EvalPlan(lat.period, lat.start),
                precision=precise,
            )
        )
    return out, covered


def _periodic(steps: list[int], s: int, schedule: Schedule, warmup: int) -> list[_Lattice]:
    """Periods that explain the spike steps ``steps``: greedily the one with the most steps
    not yet explained, while it is significant (schedule periods: at 5 %; learned ones:
    0.1 % after a Bonferroni correction, with ``MIN_HITS``).

    One spike is no period: a period needs two hits, or one where the schedule puts its
    first occurrence since the warm-up (no position of it passed without one). A burst of
    slow steps is no period either: the steps between the hits must be quiet, and a
    period is at least 2 steps. Learned periods may jitter: gaps that agree within a step
    or ``JITTER`` give a fractional period whose positions are matched within a step."""
    if not steps:
        return []
    seen = max(s - warmup, 1)
    visible = warmup + StepLevel.START  # the first step a spike can be seen at
    cands, tested = _candidates(steps, s, schedule)
    classes = []
    for lat, members in cands:
        if not members:
            continue
        hits = len({lat.index(k) for k in members}) if lat.tol else len(members)
        expected = lat.count(members[0], s - 1)
        if expected == 0 or hits / expected < 0.8:
            continue
        # How likely so many hits are by chance, at the rate of the other spikes: over
        # the run, and between the first and last hit (a burst is not a period).
        span = members[-1] - members[0] + 1
        others = bisect_right(steps, members[-1]) - bisect_left(steps, members[0]) - len(members)
        off = max(span - expected, 1)
        rate = max(max(len(steps) - len(members), 1) / max(seen - expected, 1), others / off)
        p = binomial_tail(hits, expected, min(rate * (2 * lat.tol + 1), 1.0))
        if lat.what:
            ok = p < 0.05 and (
                hits >= 2 or (members[0] in lat.first_at and lat.count(visible, s - 1) == 1)
            )
        else:
            ok = hits >= MIN_HITS and p * tested < 0.001
        if ok:
            classes.append((lat, set(members)))
    return _greedy(classes)


def _greedy(classes: list[tuple[_Lattice, set[int]]]) -> list[_Lattice]:
    """The periods that explain the most spikes not yet explained, one after the other."""
    chosen, covered = [], set()
    while classes:
        best = max(classes, key=lambda c: (len(c[1] - covered), bool(c[0].what), -c[0].period))
        if len(best[1] - covered) < (1 if best[0].what else MIN_HITS):
            break
        chosen.append(best[0])
        covered |= best[1]
        classes.remove(best)
    return chosen


def _candidates(
    steps: list[int], s: int, schedule: Schedule
) -> tuple[list[tuple[_Lattice, list[int]]], int]:
    """The periods worth testing on the spike steps after ``s`` steps, with the steps on
    each: the schedule's, the gaps between recent spikes, and a jittered one from the recent
    gaps that agree; and how many lattices were tested (the Bonferroni count). A learned
    whole period's offset that :func:`_periodic` would refuse anyway (fewer than
    ``MIN_HITS`` steps on it, or under 80 % of its positions hit) is counted, not built:
    building one per lone spike made an evaluation cost milliseconds with a few dozen
    random outliers (issue 33)."""
    out: list[tuple[_Lattice, list[int]]] = []
    tested = 0
    named = schedule.periods()
    plan = schedule.eval_plan()
    recent = steps[-8:]
    periods: dict[int, str] = {p: w for p, w in named.items() if p >= 2}
    for i, a in enumerate(recent):
        for b in recent[i + 1 :]:
            if b - a >= 2:
                periods.setdefault(b - a, "")
    learned_tested, learned = _learned_offsets(steps, [p for p, w in periods.items() if not w], s)
    tested += learned_tested
    for period, what in periods.items():
        if not what:
            kept = learned.get(period)
            if not kept:
                continue  # no offset of this learned period can pass (the common case)
            members: dict[int, list[int]] = {offset: [] for offset in kept}
            for k in steps:  # one pass, kept offsets only
                on_offset = members.get(k % period)
                if on_offset is not None:
                    on_offset.append(k)
            out += [(_Lattice(period, o, 0), ks) for o, ks in members.items()]
            continue
        # Offsets in the order of their first step.
        mods = list(map(operator.mod, steps, repeat(period)))
        tested += len(set(mods))
        # Where the schedule puts an occurrence: an evaluation after step k lands in step
        # k's interval, or in step k - 1's when it runs before the step's end.
        first = 0 if what != "evaluation" or plan is None else round(plan.start) % period
        first_at = frozenset(k for k in steps if k % period in (first, (first - 1) % period))
        members = {offset: [] for offset in dict.fromkeys(mods)}
        for offset, k in zip(mods, steps, strict=True):
            members[offset].append(k)
        out += [(_Lattice(period, o, 0, what, first_at), ks) for o, ks in members.items()]
    jittered = _jittered(steps, recent)
    if jittered is not None:
        out.append(jittered)
        tested += 1
    return out, tested


def _learned_offsets(
    steps: list[int], periods: list[int], s: int
) -> tuple[int, dict[int, list[int]]]:
    """The learned whole ``periods``' distinct offsets on the (ascending) spike ``steps``,
    counted (what they add to the Bonferroni count); and, for each period that has any, the
    offsets that pass :func:`_periodic`'s first tests (``MIN_HITS`` steps, and at least 80 %
    of its positions from the offset's first step up to step ``s - 1`` hit), in the order of
    their first step. All periods at once in numpy: this runs at every evaluation, and with a
    few dozen random outliers the gaps between recent spikes give tens of periods whose
    offsets were counted one by one in Python (~0.35 ms an evaluation with 64 spikes; issue
    33)."""
    if not periods:
        return 0, {}
    ks = np.asarray(steps, dtype=np.int64)
    per = np.asarray(periods, dtype=np.int64)
    width = int(per.max())
    keys = (np.arange(len(per))[:, None] * width + ks[None, :] % per[:, None]).ravel()
    # Stable: each (period, offset) with its first step in ``steps``' order.
    uniq, first_index, hits = np.unique(keys, return_index=True, return_counts=True)
    row, offset, first = uniq // width, uniq % width, ks[first_index % len(ks)]
    expected = np.where(first <= s - 1, (s - 1 - first) // per[row] + 1, 0)
    dense = (hits >= MIN_HITS) & (expected > 0)
    dense &= ~(hits / np.maximum(expected, 1) < 0.8)
    kept: dict[int, list[tuple[int, int]]] = {}
    for j in np.flatnonzero(dense):
        kept.setdefault(periods[row[j]], []).append((int(first[j]), int(offset[j])))
    return len(uniq), {p: [o for _, o in sorted(firsts)] for p, firsts in kept.items()}


def _jittered(steps: list[int], recent: list[int]) -> tuple[_Lattice, list[int]] | None:
    """A jittered period from the longest run of recent gaps that agree, with its steps."""
    diffs = [b - a for a, b in zip(recent, recent[1:], strict=False)]
    for r in range(len(diffs), 1, -1):
        tail = diffs[-r:]
        mid = sorted(tail)[len(tail) // 2]
        if max(tail) - min(tail) <= max(1.0, JITTER * mid):
            if max(tail) > min(tail) and min(tail) >= 2:
                period, last = fit_lattice(recent[-1 - r :])
                # Matched within the jitter the gaps were accepted with.
                tol = max(1, round(JITTER * period))
                lat = _Lattice(period, last % period, tol)
                return lat, [k for k in steps if lat.on(k)]
            return None
    return None


def _fit(chosen: list[_Lattice], spikes: dict[int, float]):
    """Each spike is the sum of the extras whose periods it lies on (an evaluation and a
    checkpoint on the same step): least squares, clipped at zero."""
    rows = sorted(k for k in spikes if spikes[k] > 0 and any(c.on(k) for c in chosen))
    a = np.array([[1.0 if c.on(k) else 0.0 for c in chosen] for k in rows])
    y = np.array([spikes[k] for k in rows])
    x = np.maximum(np.linalg.lstsq(a, y, rcond=None)[0], 0.0)
    return x, y - a @ x, rows
