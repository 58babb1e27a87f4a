"""The run's forecast: the total time from the first steps on, with an honest interval.

A training run is more than identical steps, so the forecast models it as its parts, each
with a time per occurrence and a schedule of occurrences over the whole run:

- **training steps**: a robust local level of the step time (rank 0's clock). A step far
  from the level (> ``Z_OUT`` robust sd) is left out of it, so a one-off outlier (a GC pause,
  a burst from another process) does not move the forecast; ``CHANGE_RUN`` such steps in a
  row on the same side, or a drift that a CUSUM test catches, start a new regime: a lasting
  change of speed is adopted within a few steps. Steps before ``warmup_steps`` are left out.
- **recurring extras**: steps that stand out on a period (an evaluation or a checkpoint in a
  plain loop makes every N-th step longer). A period is taken from the schedule the
  framework or script gave (steps per epoch, checkpoint every N, the evaluation plan), or
  learned from three occurrences, jittered or not; one spike or a burst of slow steps is no
  period. Outliers that fit no period stay in the level at their rate, or are a one-off.
- **sections** the integration or a log marked (``lens.section("eval")``: Keras validation,
  Lightning validation loops, MLPerf evaluations, ...): their measured time per occurrence
  (the cold first one left out once a later one is seen) and their schedule (from the
  framework, else learned from where they happened); a section announced but not seen yet
  is assumed (``eval_steps`` forward passes, else a prior share of the run); one during
  which steps ended ran beside the training and has no time of its own.

What the run cannot show yet is a stated prior (the step spread, a cold first section, an
unseen evaluation's cost, the step time's wander over the run), replaced by what it measures
as it goes; docs/forecast.md lists each with its figure.

At ``S`` steps done of ``N``, with ``R = N - S``::

    predicted total = elapsed(S) + R * level + sum over extras and sections of
                      (remaining occurrences x time per occurrence)
    interval        = predicted total +/- z * sqrt(R^2 var(level) + R sd^2 + drift(R)
                                               + sum over parts of their variance)

``var(level)`` is the uncertainty of the regime's mean step time (step-to-step, or from batch
means of ``BLOCK`` steps when larger: slow swings), ``sd`` the step-to-step spread and
``drift(R)`` the risk that the speed moves again before the end: the changes of speed seen so
far and the wander of the batch means beyond their noise, scaled to the remaining steps.

The signature is the first evaluation at which the interval's half-width is within
``signature_rel_tol`` of the predicted total (after ``signature_min_steps`` steps); the
forecast made there is the run's early forecast. The progress-bar ETA a user already has
(elapsed + remaining steps x mean step time so far, as tqdm and Keras' progbar compute it) is
computed at every point beside it.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import asdict, dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

__all__ = [
    "Component",
    "EvalPlan",
    "Forecast",
    "Forecaster",
    "Part",
    "Prediction",
    "Schedule",
    "Snapshot",
    "StepLevel",
    "naive_total_s",
    "t_quantile",
]

INTERVAL_LEVEL = 0.95
# The first point a forecast is asked for: 5 % of the steps (a run of tens of steps has one).
EARLY_SHARE = 0.05
# A run of at most this many steps is a run of epochs or blocks (iterations come by the
# thousand): evaluations nobody announced may still come between them.
COARSE_STEPS = 200
# Degrees of freedom that make Student's t the normal quantile: for stated priors.
_NORMAL_DF = 10**6

# --------------------------------------------------------------------------- statistics


def _t_two_sided_cdf(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer ``df`` (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    s = math.sin(theta)
    if df % 2:  # odd
        if df == 1:
            return 2 * theta / math.pi
        term, acc = 1.0, 1.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            acc += term
        return 2 / math.pi * (theta + s * math.cos(theta) * acc)
    term, acc = 1.0, 1.0
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        acc += term
    return s * acc


@lru_cache(maxsize=512)
def t_quantile(q: float, df: int) -> float:
    """Quantile ``q`` (0.5 < q < 1) of Student's t with ``df`` degrees of freedom.

    Exact (bisection on the closed-form CDF) up to 60 degrees of freedom, the Cornish-Fisher
    expansion beyond (relative error < 1e-8 there). Stdlib only: the core does not use scipy.
    """
    if not 0.5 < q < 1:
        raise ValueError(f"q must be in (0.5, 1), got {q}")
    df = int(df)
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    z = NormalDist().inv_cdf(q)
    if df > 60:
        v = float(df)
        return (
            z
            + (z**3 + z) / (4 * v)
            + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
        )
    target = 2 * q - 1
    lo, hi = z, max(z, 1.0)
    while _t_two_sided_cdf(hi, df) < target:
        hi *= 2
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _t_two_sided_cdf(mid, df) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


# --------------------------------------------------------------------------- training steps


class StepLevel:
    """The training-step time of the current regime, one step at a time in O(1).

    The regime's sums hold every step since it began, so their mean is what the steps cost,
    heavy tail included. Besides, a robust centre (the mean of the steps within ``Z_OUT``
    robust sd of it) and scale classify each step: an outlier is kept in ``spikes`` (step ->
    seconds over the centre, < 0 for a fast one), from which the forecast takes out one-offs
    and recurring extras. ``CHANGE_RUN`` consistent outliers in a row on one side, or a CUSUM
    alarm, start a new regime from where the change began, when the speed moved by at least
    ``MIN_CHANGE``.
    """

    Z_OUT = 4.0
    CHANGE_RUN = 4
    MIN_CHANGE = 0.05
    CUSUM_K = 0.5
    CUSUM_H = 10.0
    CUSUM_AFTER = 10  # accepted steps before the CUSUM test starts (the scale settles first)
    BLOCK = 10
    KEEP = 64
    START = 3  # steps taken as they come at the start of a regime
    EW = 0.05  # weight of a new step in the robust scale
    MIN_SCALE = 0.01
    MAX_SPIKES = 256  # outliers kept for the forecast to classify (the most recent)
    MAX_RUN = 16  # a run of same-side outliers is judged on its most recent ones: O(1) a step

    def __init__(self) -> None:
        self.regime_start: int | None = None
        self.changes: list[tuple[int, float, float]] = []  # (step, level before, after)
        self.spikes: dict[int, float] = {}
        self.all_n, self.all_sum = 0, 0.0  # every step since the warm-up, across regimes
        self._reset([])

    def _reset(self, values: list[tuple[int, float]]) -> None:
        self.n = 0
        self.sum = 0.0
        self.wsum = self.wsum2 = 0.0  # winsorised at the centre +/- Z_OUT scale: the spread
        self.acc_n, self.acc_sum = 0, 0.0  # the steps that were not outliers: the centre
        self.dev = 0.0
        self.recent: deque[tuple[int, float]] = deque(maxlen=self.KEEP)
        self.run: list[tuple[int, float]] = []
        self.run_sign = 0
        self.cusum = [0.0, 0.0]  # up, down
        self.cusum_from: list[int | None] = [None, None]
        self.block_sum, self.block_n = 0.0, 0
        self.blocks, self.bsum, self.bsum2 = 0, 0.0, 0.0
        self.si = self.sii = self.siw = 0.0  # for the regime's linear trend
        if values:
            self.regime_start = values[0][0]
            xs = sorted(x for _, x in values)
            mid = xs[len(xs) // 2]
            self.dev = max(sum(abs(x - mid) for x in xs) / len(xs), 0.002 * mid)
            for i, x in values:
                self._add_to_sums(i, x, x)
                self.acc_n += 1
                self.acc_sum += x

    @property
    def center(self) -> float | None:
        return self.acc_sum / self.acc_n if self.acc_n else None

    @property
    def mean(self) -> float | None:
        return self.sum / self.n if self.n else None

    @property
    def scale(self) -> float:
        """Robust sd of one step, floored at ``MIN_SCALE`` of the centre: steps a few percent
        off are ordinary jitter, not outliers or spikes worth scheduling."""
        c = self.center or 0.0
        return max(1.2533 * self.dev, self.MIN_SCALE * c, 1e-9)

    def add(self, i: int, x: float) -> None:
        """Step ``i`` took ``x`` seconds of training (sections left out)."""
        self.all_n += 1
        self.all_sum += x
        if self.n < self.START:
            # Taken as they come (the scale is not known yet), but counted: the level of the
            # first steps is their mean.
            if self.n == 0:
                self.regime_start = i
            self._add_to_sums(i, x, x)
            self.acc_n += 1
            self.acc_sum += x
            if self.n == self.START:
                self._reset(list(self.recent))
            return
        c, s = self.center, self.scale
        z = (x - c) / s
        if abs(z) > self.Z_OUT:
            sign = 1 if z > 0 else -1
            if sign != self.run_sign:
                self.run, self.run_sign = [], sign
            self.run.append((i, x))
            if len(self.run) > self.MAX_RUN:  # outliers on one side that never agree
                del self.run[0]
            self.spikes[i] = x - c
            if len(self.spikes) > self.MAX_SPIKES:
                # Only recent outliers are classified; older ones stay in the regime's mean.
                del self.spikes[next(iter(self.spikes))]
            self._add_to_sums(i, x, c + sign * self.Z_OUT * s)
            if len(self.run) >= self.CHANGE_RUN and self._consistent(self.run, c):
                self._restart(list(self.run))
            return
        self.run, self.run_sign = [], 0
        self.dev += self.EW * (abs(x - c) - self.dev)
        self.acc_n += 1
        self.acc_sum += x
        self._add_to_sums(i, x, x)
        if self.acc_n >= self.CUSUM_AFTER:
            self._cusum(i, z)

    def _consistent(self, run: list[tuple[int, float]], c: float) -> bool:
        """Outliers that agree with each other and sit a material distance from the centre."""
        xs = sorted(x for _, x in run)
        shift = abs(xs[len(xs) // 2] - c)
        return xs[-1] - xs[0] <= 0.5 * shift and shift >= self.MIN_CHANGE * c

    def _cusum(self, i: int, z: float) -> None:
        for side, zz in ((0, z), (1, -z)):
            before = self.cusum[side]
            self.cusum[side] = max(0.0, before + zz - self.CUSUM_K)
            if before == 0.0 and self.cusum[side] > 0.0:
                self.cusum_from[side] = i
            if self.cusum[side] > self.CUSUM_H:
                start = self.cusum_from[side]
                values = [(j, x) for j, x in self.recent if j >= start]
                self.cusum = [0.0, 0.0]
                new = sum(x for _, x in values) / max(len(values), 1)
                if len(values) >= self.START and abs(new - self.center) >= self.MIN_CHANGE * new:
                    self._restart(values)
                return

    def _add_to_sums(self, i: int, x: float, w: float) -> None:
        self.n += 1
        self.sum += x
        self.wsum += w
        self.wsum2 += w * w
        j = i - (self.regime_start or 0)
        self.si += j
        self.sii += j * j
        self.siw += j * w
        self.recent.append((i, x))
        self.block_sum += w
        self.block_n += 1
        if self.block_n == self.BLOCK:
            self.blocks += 1
            self.bsum += self.block_sum
            self.bsum2 += self.block_sum * self.block_sum
            self.block_sum, self.block_n = 0.0, 0

    def _restart(self, values: list[tuple[int, float]]) -> None:
        before = self.center
        for j, _ in values:
            self.spikes.pop(j, None)
        self._reset(values)
        self.changes.append((values[0][0], before or 0.0, self.center or 0.0))

    def sd(self) -> float:
        """Step-to-step sd of the regime's steps, winsorised (outliers are counted apart)."""
        n = self.n
        if n < 2:
            return self.scale
        return math.sqrt(max((self.wsum2 - self.wsum * self.wsum / n) / (n - 1), 0.0))

    def trend(self) -> float:
        """Seconds per step per step of a linear trend in the regime's steps, when it is
        significant (|t| > 3), else 0."""
        n = self.n
        sxx = self.sii - self.si * self.si / n if n > 2 else 0.0
        if sxx <= 0:
            return 0.0
        slope = (self.siw - self.si * self.wsum / n) / sxx
        # The spread around the line, not around the mean (which holds the trend itself).
        sww = self.wsum2 - self.wsum * self.wsum / n
        resid = max((sww - slope * slope * sxx) / (n - 2), (self.MIN_SCALE * self.center) ** 2 / 4)
        return slope if abs(slope) > 3 * math.sqrt(resid / sxx) else 0.0

    def mean_var(self) -> tuple[float, float]:
        """(variance of the regime's mean step from its spread, excess variance of the batch
        means per step^2: slow swings beyond the step-to-step noise)."""
        n, sd = self.n, self.sd()
        var = sd * sd / max(n, 1)
        excess = 0.0
        k = self.blocks
        if k >= 5 and sd > 0:
            b = self.BLOCK
            var_b = max((self.bsum2 - self.bsum * self.bsum / k) / (k - 1), 0.0) / (b * b)
            # Slow swings: batch means that vary significantly more than the step-to-step
            # noise allows (chi-square test at 99 %) set the level's uncertainty instead.
            if (k - 1) * var_b / (sd * sd / b) > _chi2_quantile(0.99, k - 1):
                var = max(var, var_b / k)
                excess = var_b - sd * sd / b
        return var, excess


# --------------------------------------------------------------------------- schedules


@dataclass(frozen=True)
class EvalPlan:
    """Where the announced evaluations come, in steps done (an evaluation "at k" runs after
    the k-th step ends): every ``period`` steps from ``start`` (``period`` may be fractional:
    each lands on the nearest step), and at the listed steps ``at``; the union."""

    period: float | None = None
    start: float = 0.0
    at: tuple[int, ...] = ()

    def _j_range(self, lo: int, hi: int) -> tuple[int, int]:
        # Position j is floor(start + j * period + 0.5): j's whose position is in [lo, hi].
        p, eps = self.period, 1e-9
        j_lo = max(0, math.ceil((lo - 0.5 - self.start) / p - eps))
        j_hi = math.ceil((hi + 0.5 - self.start) / p - eps) - 1
        return j_lo, j_hi

    def periodic_at(self, k: int) -> bool:
        if not self.period:
            return False
        j_lo, j_hi = self._j_range(k, k)
        return j_hi >= j_lo

    def count(self, lo: int, hi: int) -> int:
        """Announced evaluations at steps ``lo..hi`` (inclusive)."""
        if hi < lo:
            return 0
        n = 0
        if self.period:
            j_lo, j_hi = self._j_range(lo, hi)
            n = max(j_hi - j_lo + 1, 0)
        return n + sum(lo <= k <= hi and not self.periodic_at(k) for k in self.at)

    def spacing(self) -> float:
        """Steps between two evaluations, on average."""
        if self.period:
            return self.period
        return self.at[-1] / len(self.at) if self.at and self.at[-1] > 0 else 1.0

    def describe(self) -> str:
        parts = []
        if self.period:
            period = f"{self.period:g}"
            parts.append(
                f"every {period} steps"
                + (f" from step {self.start:g}" if self.start != self.period else "")
            )
        if self.at:
            shown = ", ".join(str(k) for k in self.at[:4]) + (", ..." if len(self.at) > 4 else "")
            parts.append(f"at steps {shown}")
        return " and ".join(parts)


@dataclass
class Schedule:
    """What the framework or script said the run will do (None: unknown). Keys and meaning
    are those of ``Lens.set_schedule``."""

    total_steps: int | None = None
    steps_per_epoch: int | None = None
    epochs: int | None = None
    eval_every_epochs: float | None = None
    eval_every_steps: int | None = None
    eval_steps: int | None = None  # batches per evaluation
    checkpoint_every_steps: int | None = None
    eval_start_step: int | None = None
    eval_start_epoch: float | None = None
    eval_at_steps: tuple[int, ...] = ()
    eval_at_epochs: tuple[float, ...] = ()

    _LISTS = ("eval_at_steps", "eval_at_epochs")
    _STARTS = ("eval_start_step", "eval_start_epoch")  # may be 0
    _FLOATS = ("eval_every_epochs", "eval_start_epoch")

    def update(self, mark: dict) -> None:
        for key in self.__dataclass_fields__:
            value = mark.get(key)
            if value is None or isinstance(value, bool):
                continue
            if key in self._LISTS:
                if isinstance(value, (list, tuple)):
                    setattr(self, key, tuple(sorted(v for v in value if _num(v) and v >= 0)))
            elif _num(value) and (value > 0 or (key in self._STARTS and value == 0)):
                setattr(self, key, float(value) if key in self._FLOATS else int(value))
        if self.steps_per_epoch and self.epochs and not mark.get("total_steps"):
            self.total_steps = self.steps_per_epoch * self.epochs

    def eval_plan(self) -> EvalPlan | None:
        """Where the announced evaluations come, or None when the schedule does not say."""
        spe = self.steps_per_epoch
        period = None
        if self.eval_every_steps:
            period = float(self.eval_every_steps)
        elif spe and self.eval_every_epochs:
            period = spe * self.eval_every_epochs
        at = set(self.eval_at_steps)
        if spe:
            at |= {math.floor(e * spe + 0.5) for e in self.eval_at_epochs}
        if period is None and not at:
            return None
        start = period or 0.0
        if self.eval_start_epoch is not None and spe:
            start = self.eval_start_epoch * spe
        elif self.eval_start_step is not None:
            start = float(self.eval_start_step)
        return EvalPlan(period, start, tuple(sorted(at)))

    def eval_period(self) -> int | None:
        """Whole steps between periodic evaluations starting at a multiple of them, when the
        schedule says (the in-step extras' periods)."""
        plan = self.eval_plan()
        if not plan or not plan.period or plan.period != int(plan.period):
            return None
        return int(plan.period)

    def periods(self) -> dict[int, str]:
        """Step periods the schedule names, with what they are."""
        out: dict[int, str] = {}
        if self.checkpoint_every_steps:
            out[self.checkpoint_every_steps] = "checkpoint"
        if self.eval_period():
            out[self.eval_period()] = "evaluation"
        if self.steps_per_epoch:
            out.setdefault(self.steps_per_epoch, "epoch end")
        return out


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _chi2_quantile(q: float, df: int) -> float:
    """Quantile of chi-square with ``df`` degrees of freedom (Wilson-Hilferty)."""
    z = NormalDist().inv_cdf(q)
    h = 2.0 / (9.0 * df)
    return df * (1 - h + z * math.sqrt(h)) ** 3


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for j in range(k, n + 1):
        total += math.exp(
            math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq
        )
    return min(total, 1.0)


def _occurrences(period: int, offset: int, lo: int, hi: int) -> int:
    """How many i in [lo, hi] have i % period == offset."""
    if hi < lo:
        return 0
    first = lo + (offset - lo) % period
    return 0 if first > hi else (hi - first) // period + 1


# --------------------------------------------------------------------------- forecast


@dataclass(frozen=True)
class Component:
    """One part of the run and what it still costs; a row of the forecast's breakdown."""

    name: str  # "training steps", "every 10 steps", "section eval", ...
    schedule: str  # "each step", "every 10 steps from step 10", "each epoch", "one-off"
    source: str  # "measured", "schedule", "learned", "assumed"
    per_occurrence_s: float
    seen: int  # occurrences so far
    remaining: int  # occurrences still to come
    remaining_s: float
    sd_s: float = 0.0  # spread of one occurrence


@dataclass(frozen=True)
class Prediction:
    """The forecast at one point of the run (seconds from the Lens start)."""

    steps_done: int
    total_steps: int | None
    elapsed_s: float
    predicted_total_s: float | None
    interval_s: tuple[float, float] | None
    naive_total_s: float | None  # what a progress bar says the total is
    step_time_s: float | None  # the training-step level
    step_time_sd_s: float | None
    regime_start_step: int | None
    components: tuple[Component, ...] = ()

    @property
    def half_width_rel(self) -> float | None:
        if self.interval_s is None or not self.predicted_total_s:
            return None
        return (self.interval_s[1] - self.interval_s[0]) / 2 / self.predicted_total_s


def naive_total_s(elapsed_s: float, steps_done: int, total_steps: int | None) -> float | None:
    """The progress-bar forecast: elapsed + remaining steps x mean step time so far."""
    if not steps_done or not total_steps or elapsed_s <= 0:
        return None
    return elapsed_s * total_steps / steps_done


@dataclass(frozen=True)
class Part:
    """A part of the run besides the training-step level, as the forecast schedules it.

    ``kind``: "in-step" (extra time inside step intervals ``i`` with ``i % period ==
    offset``), "section" (after step ends ``k`` with ``k % period == offset``; ``due_now``: the
    current step end is one and its section has not begun), "rate" (irregular: ``rate`` per
    remaining step) or "one-off" (already spent).
    """

    name: str
    schedule: str
    source: str
    per_occurrence_s: float
    sd_s: float
    seen: int
    kind: str
    period: int = 0
    offset: int = 0
    rate: float = 0.0
    due_now: bool = False
    plan: EvalPlan | None = None  # a section's occurrences (replaces period and offset)
    count_unknown: bool = False  # seen once: how many more come is anyone's guess

    def remaining(self, s: int, n: int) -> float:
        if self.kind == "in-step":
            if self.plan is not None:
                return self.plan.count(s, n - 1)
            return _occurrences(self.period, self.offset, s, n - 1)
        if self.kind == "section":
            if self.plan is not None:
                return self.plan.count(s + 1, n) + int(self.due_now)
            return _occurrences(self.period, self.offset, s + 1, n) + int(self.due_now)
        if self.kind == "rate":
            return self.rate * max(n - s, 0)
        return 0


@dataclass(frozen=True)
class Snapshot:
    """The run's model at one step: everything a forecast for any total needs."""

    steps_done: int
    elapsed_s: float
    total_steps: int | None  # as known then
    level: float | None  # training-step time
    level_var: float  # variance of that estimate
    sd: float  # step-to-step spread
    excess: float  # batch-mean wander beyond noise (per step^2)
    level_n: int
    regime_start: int | None
    change_rate: float  # changes of speed per step so far
    change_size2: float  # their mean squared relative size
    parts: tuple[Part, ...] = ()
    trend: float = 0.0  # significant linear trend of the steps (s per step per step)
    longrun: float | None = None  # the step time over all regimes (same parts taken out)
    reversals: int = 0  # changes of speed that went back the other way
    changes: int = 0
    df: int = 1  # degrees of freedom of the step spread (steps seen and the prior's)
    unannounced: bool = False  # no evaluation announced nor seen: some may still come

    REVERSALS = 2
    # Real runs' step time wanders a few percent over a run (data, thermals, the schedule's
    # later phases), more than its first steps can show: 2 % over the whole run, as a prior.
    WANDER = 0.02

    def evaluate(self, total_steps: int | None = None) -> Prediction:
        """The forecast this state gives for a run of ``total_steps`` (default: as known)."""
        n = total_steps or self.total_steps
        s, elapsed, lvl = self.steps_done, self.elapsed_s, self.level
        naive = naive_total_s(elapsed, s, n)
        if lvl is None or self.level_n < 1:
            return Prediction(s, n, elapsed, None, None, naive, lvl, None, None)
        if not n:
            return Prediction(s, None, elapsed, None, None, None, lvl, self.sd, self.regime_start)
        r = max(n - s, 0)
        lvl = self._expected_level(r)
        comps = [
            Component(
                "training steps", "each step", "measured", lvl, self.level_n, r, r * lvl, self.sd
            )
        ]
        var = r * r * self.level_var + r * self.sd**2 + self._drift_var(r, n)
        if self.unannounced:
            # Evaluations nobody announced may still come (some start half-way through a
            # run): the prior share's spread on the remaining training, less likely the later
            # none has come.
            var += (Forecaster.EVAL_SHARE_SD * (1 - s / n) * r * lvl) ** 2
        for part in self.parts:
            left = part.remaining(s, n)
            comps.append(
                Component(
                    part.name,
                    part.schedule,
                    part.source,
                    part.per_occurrence_s,
                    part.seen,
                    int(round(left)),
                    left * part.per_occurrence_s,
                    part.sd_s,
                )
            )
            if part.seen:  # measured: its spread, and the uncertainty of its mean
                var += left * part.sd_s**2 + left * left * part.sd_s**2 / part.seen
            else:  # assumed: one unknown cost that every occurrence shares
                var += (left * part.sd_s) ** 2
            if part.count_unknown:  # from none to one a step: uniform over the steps left
                var += (r / math.sqrt(12) * part.per_occurrence_s) ** 2
        total = elapsed + sum(c.remaining_s for c in comps)
        # Student's t on the regime's steps: few steps, a wider interval.
        half = t_quantile(0.5 + INTERVAL_LEVEL / 2, max(self.df, 1)) * math.sqrt(var)
        return Prediction(
            s,
            n,
            elapsed,
            total,
            (total - half, total + half),
            naive,
            lvl,
            self.sd,
            self.regime_start,
            tuple(comps),
        )

    def _expected_level(self, r: int) -> float:
        """The mean step time over the remaining ``r`` steps. Speeds that went up and down
        again and again (``REVERSALS``) are a machine whose load comes and goes: the current
        regime holds for a while (1 / rate of changes, on average), then the speed returns to
        the run's long-run mean. Changes in one direction (a warm-up, a job that arrived and
        stays) are taken as lasting."""
        lvl = self.level
        if self.reversals < self.REVERSALS or self.longrun is None or r <= 0:
            return lvl
        x = self.changes / max(self.steps_done, 1) * r
        stay = (1.0 - math.exp(-x)) / x
        return stay * lvl + (1.0 - stay) * self.longrun

    def _drift_var(self, r: int, n: int) -> float:
        """Variance of the remaining time from the speed moving again before the end: the
        swings of the batch means, and the changes of speed seen so far (as a rate, with
        their mean relative size); and, seen or not, a slow wander of the speed over the
        run (a random walk of ``WANDER`` of the level over the whole run: what the remaining
        ``r`` of ``n`` steps add up to varies by ``WANDER * level * r * sqrt(r / 3n)``)."""
        lvl = self.level or 0.0
        wander = self.WANDER * lvl * r
        base = wander * wander * r / (3 * max(n, 1))
        # Swings seen so far continue: the batch means' wander, over the remaining steps.
        var = self.excess * r * StepLevel.BLOCK
        # Changes of speed as a rate: one at a uniform point of the remaining steps changes
        # the time after it by its size.
        var += self.change_rate * r * self.change_size2 * (lvl * r) ** 2 / 3
        # A trend seen in the steps (a long warm-up, throttling) may go on about as long as
        # it was seen, or stop now: what it would add, as one sd.
        h = min(r, max(self.level_n, 1))
        var += (self.trend * (h * h / 2 + h * (r - h))) ** 2
        return var + base


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
            return _occurrences(int(self.period), int(self.start), max(lo, 0), hi)
        return EvalPlan(self.period, self.start).count(lo, hi)


class Forecaster:
    """Builds the run's model from step ends, sections and schedules. ``snapshot()`` (and
    ``predict()``, its evaluation) only read that state, so any point of the run can be
    forecast without changing it."""

    MAX_SPIKES = 64  # recent spikes the recurring extras are learned from
    CHANGE_PRIOR_STEPS = 500
    # The step spread before the steps say it: 5 % of the level, worth 2 steps.
    PRIOR_CV = 0.05
    PRIOR_STEPS = 2
    COLD_CV = 0.25  # the level from warm-up steps (a run of tens of steps, at 5 %): +/- 25 %
    # An evaluation announced but not seen: ``eval_steps`` forward-only batches at about a
    # third of a training step each (+/- 50 %); without ``eval_steps``, a prior: all the
    # evaluations of the run take 5 % +/- 5 % of its training (real runs: under 1 % to 17 %).
    FORWARD_SHARE = 1 / 3
    FORWARD_SD = 0.5
    EVAL_SHARE = 0.05
    EVAL_SHARE_SD = 0.05
    # A period learned from the steps alone needs this many occurrences: two pauses a
    # hundred steps apart are no schedule yet.
    MIN_HITS = 3

    def __init__(self, *, warmup_steps: int = 2) -> None:
        self.warmup_steps = warmup_steps
        self.schedule = Schedule()
        self.level = StepLevel()
        self.steps = 0
        self.t_last = 0  # ns, the last step end
        self.t_now = 0  # ns, the latest event seen (a step end or a section's end)
        self.sections: dict[str, list[tuple[int, float]]] = {}  # name -> (step, seconds)
        self.beside: dict[str, list[float]] = {}  # sections that ran beside the steps
        self._in_step = 0.0  # section seconds inside the step interval now running
        self._warm: list[float] = []  # the warm-up steps' training times
        self.end_ns: int | None = None

    # ------------------------------------------------------------ feeding

    def on_schedule(self, mark: dict) -> None:
        self.schedule.update(mark)

    def on_section(self, name: str, step: int, t_begin_ns: int, t_end_ns: int) -> None:
        secs = max(t_end_ns - t_begin_ns, 0) / 1e9
        if step < self.steps:
            # Steps ended while it ran: it ran beside the training (an asynchronous
            # evaluation), whose steps carry whatever it slowed them by. No time of its own.
            self.beside.setdefault(name, []).append(secs)
            return
        self.sections.setdefault(name, []).append((int(step), secs))
        if step == self.steps:  # inside the running step interval: not training time
            self._in_step += secs
        self.t_now = max(self.t_now, t_end_ns)

    def on_step(self, t_ns: int) -> None:
        i = self.steps
        x = (t_ns - self.t_last) / 1e9 - self._in_step
        self.t_last = t_ns
        self.t_now = max(self.t_now, t_ns)
        self.steps = i + 1
        self._in_step = 0.0
        if i >= self.warmup_steps:
            self.level.add(i, max(x, 0.0))
        else:
            self._warm.append(max(x, 0.0))

    def on_close(self, t_ns: int) -> None:
        self.end_ns = t_ns

    # ------------------------------------------------------------ reading

    def predict(self, total_steps: int | None = None) -> Prediction:
        return self.snapshot().evaluate(total_steps)

    def snapshot(self) -> Snapshot:
        lv = self.level
        s = self.steps
        if lv.n < 1 and self._warm:
            return self._provisional()
        if lv.n < 1:
            return Snapshot(
                s,
                self.t_now / 1e9,
                self.schedule.total_steps,
                None,
                0.0,
                0.0,
                0.0,
                lv.n,
                lv.regime_start,
                0.0,
                0.0,
            )
        extras, explained = self._extras(s)
        # The regime's mean step, less what the recurring extras and the largest one-off took
        # (those are scheduled apart, or spent once); other outliers stay in at their rate.
        start = lv.regime_start or 0
        regime = {k: v for k, v in lv.spikes.items() if k >= start}
        taken = sum(v for k, v in regime.items() if k in explained)
        loose = sorted((v for k, v in regime.items() if k not in explained), key=abs)
        # The largest is a one-off when it stands alone (the only one, or 3x the next): its
        # time is spent, not a rate. Outliers that keep coming (a noisy machine) stay in.
        one_off = 0.0
        if loose and (len(loose) == 1 or abs(loose[-1]) > 3 * abs(loose[-2])):
            one_off = loose.pop()
        n = lv.n
        level = (lv.sum - taken - one_off) / n
        slope = lv.trend()
        if slope:
            # A significant trend: the steps to come start where the line ends, not at the
            # regime's mean (a long warm-up still settling, a machine heating up).
            end = (s - 1 - (lv.regime_start or 0)) - lv.si / n
            level = max(level + slope * end, 0.5 * level)
        var_mean, excess = lv.mean_var()
        # A spread measured on a few steps is no spread (two identical steps are not a
        # certainty): pooled with a prior one, PRIOR_CV of the level worth PRIOR_STEPS steps;
        # the interval's Student t has the pooled degrees of freedom.
        sd_seen2 = lv.sd() ** 2 if n >= 2 else 0.0
        k0 = self.PRIOR_STEPS
        sd2 = (k0 * (self.PRIOR_CV * level) ** 2 + (n - 1) * sd_seen2) / (k0 + n - 1)
        # Outliers that fit no period add their spread to every step's (at the rate they came).
        loose_var = sum(v * v for v in loose) / n
        changes = lv.changes
        size2 = (
            sum(((b - a) / a) ** 2 for _, a, b in changes if a > 0) / len(changes)
            if changes
            else 0.0
        )
        seen = max(s - self.warmup_steps, 1)
        return Snapshot(
            steps_done=s,
            elapsed_s=self.t_now / 1e9,
            total_steps=self.schedule.total_steps,
            level=level,
            level_var=max(var_mean, sd2 / n) + loose_var / n,
            sd=math.sqrt(sd2 + loose_var),
            excess=excess,
            level_n=n,
            df=n - 1 + k0,
            regime_start=lv.regime_start,
            # A change of speed seen once in a short run says little about the rate: temper it
            # with ``CHANGE_PRIOR_STEPS`` steps that had none.
            change_rate=len(changes) / (seen + self.CHANGE_PRIOR_STEPS),
            change_size2=size2,
            parts=(*extras, *self._sections(s, level)),
            unannounced=self._unannounced(),
            trend=slope,
            # Over all regimes, with the same parts taken out as from the regime's mean.
            longrun=level + lv.all_sum / lv.all_n - lv.sum / lv.n,
            reversals=sum(
                (b1 - a1) * (b2 - a2) < 0
                for (_, a1, b1), (_, a2, b2) in zip(changes, changes[1:], strict=False)
            ),
            changes=len(changes),
        )

    def _unannounced(self) -> bool:
        """A run of epochs or blocks (at most ``COARSE_STEPS`` steps), between which
        evaluations come, with none announced by the schedule nor seen so far."""
        n = self.schedule.total_steps
        seen = "eval" in self.sections or "eval" in self.beside
        return bool(n) and n <= COARSE_STEPS and not seen and self.schedule.eval_plan() is None

    def _provisional(self) -> Snapshot:
        """The forecast while every step so far is warm-up (a run of tens of steps, at 5 %):
        the steps after the first (the first alone when it is the only one) as the level,
        +/- ``COLD_CV``: they may still be warming up. A stated prior, not a spread measured
        on few steps: the normal quantile, not Student's t."""
        used = self._warm[1:] or self._warm
        level = sum(used) / len(used)
        sd = self.COLD_CV * level
        return Snapshot(
            steps_done=self.steps,
            elapsed_s=self.t_now / 1e9,
            total_steps=self.schedule.total_steps,
            level=level,
            level_var=sd * sd,
            sd=sd,
            excess=0.0,
            level_n=len(used),
            regime_start=None,
            change_rate=0.0,
            change_size2=0.0,
            parts=tuple(self._sections(self.steps, level)),
            df=_NORMAL_DF,
            unannounced=self._unannounced(),
        )

    def _extras(self, s: int) -> tuple[list[Part], set[int]]:
        """Recurring extras inside steps: spikes on a period (see module doc); and the steps
        they explain."""
        spikes = self.level.spikes
        steps = sorted(k for k, v in spikes.items() if v > 0)[-self.MAX_SPIKES :]
        if not steps:
            return [], set()
        chosen = self._periodic(steps, s)
        if not chosen:
            return [], set()
        x, resid, rows = self._fit(chosen, spikes)
        # An extra that comes on a longer period inside a shorter one's steps (a checkpoint
        # every 100 steps on an evaluation every 25) shows as a periodic residual: a second pass.
        big = [k for k, r in zip(rows, resid, strict=True) if r > max(0.5 * x.mean(), 0.0)]
        more = [c for c in self._periodic(big, s) if c not in chosen]
        if more:
            chosen += more
            x, resid, rows = self._fit(chosen, spikes)
        covered = set(rows)
        out = []
        for j, lat in enumerate(chosen):
            member = [lat.on(k) for k in rows]
            hits = sum(member)
            spread = float(np.std(resid[member])) if hits > 1 else float(x[j]) / 2
            first = next(k for k in rows if lat.on(k))
            every = f"every {lat.period:g} steps"
            out.append(
                Part(
                    every + (f" ({lat.what})" if lat.what else ""),
                    f"{every} from step {first + 1}",
                    "schedule" if lat.what else "learned",
                    float(x[j]),
                    spread,
                    hits,
                    "in-step",
                    plan=EvalPlan(lat.period, lat.start),
                )
            )
        return out, covered

    def _periodic(self, steps: list[int], s: int) -> list[_Lattice]:
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
        warmup = self.warmup_steps
        seen = max(s - warmup, 1)
        visible = warmup + StepLevel.START  # the first step a spike can be seen at
        cands = self._candidates(steps)
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
            others = (
                bisect_right(steps, members[-1]) - bisect_left(steps, members[0]) - len(members)
            )
            off = max(span - expected, 1)
            rate = max(max(len(steps) - len(members), 1) / max(seen - expected, 1), others / off)
            p = _binomial_tail(hits, expected, min(rate * (2 * lat.tol + 1), 1.0))
            if lat.what:
                ok = p < 0.05 and (
                    hits >= 2 or (members[0] in lat.first_at and lat.count(visible, s - 1) == 1)
                )
            else:
                ok = hits >= self.MIN_HITS and p * len(cands) < 0.001
            if ok:
                classes.append((lat, set(members)))
        chosen, covered = [], set()
        while classes:
            best = max(classes, key=lambda c: (len(c[1] - covered), bool(c[0].what), -c[0].period))
            if len(best[1] - covered) < (1 if best[0].what else self.MIN_HITS):
                break
            chosen.append(best[0])
            covered |= best[1]
            classes.remove(best)
        return chosen

    def _candidates(self, steps: list[int]) -> list[tuple[_Lattice, list[int]]]:
        """The periods worth testing on the spike steps, with the steps on each: the
        schedule's, the gaps between recent spikes, and a jittered one from the recent gaps
        that agree."""
        out: list[tuple[_Lattice, list[int]]] = []
        named = self.schedule.periods()
        plan = self.schedule.eval_plan()
        recent = steps[-8:]
        periods: dict[int, str] = {p: w for p, w in named.items() if p >= 2}
        for i, a in enumerate(recent):
            for b in recent[i + 1 :]:
                if b - a >= 2:
                    periods.setdefault(b - a, "")
        for period, what in periods.items():
            by_offset: dict[int, list[int]] = {}
            for k in steps:
                by_offset.setdefault(k % period, []).append(k)
            first_at: frozenset = frozenset()
            if what:
                # Where the schedule puts an occurrence: an evaluation after step k lands in
                # step k's interval, or in step k - 1's when it runs before the step's end.
                first = 0 if what != "evaluation" or plan is None else round(plan.start) % period
                first_at = frozenset(
                    k for k in steps if k % period in (first, (first - 1) % period)
                )
            out += [
                (_Lattice(period, offset, 0, what, first_at), members)
                for offset, members in by_offset.items()
            ]
        diffs = [b - a for a, b in zip(recent, recent[1:], strict=False)]
        for r in range(len(diffs), 1, -1):  # the longest run of recent gaps that agree
            tail = diffs[-r:]
            mid = sorted(tail)[len(tail) // 2]
            if max(tail) - min(tail) <= max(1.0, JITTER * mid):
                if max(tail) > min(tail) and min(tail) >= 2:
                    period, last = _fit_lattice(recent[-1 - r :])
                    # Matched within the jitter the gaps were accepted with.
                    tol = max(1, round(JITTER * period))
                    lat = _Lattice(period, last % period, tol)
                    out.append((lat, [k for k in steps if lat.on(k)]))
                break
        return out

    @staticmethod
    def _fit(chosen: list[_Lattice], spikes: dict[int, float]):
        """Each spike is the sum of the extras whose periods it lies on (an evaluation and a
        checkpoint on the same step): least squares, clipped at zero."""
        rows = sorted(k for k in spikes if spikes[k] > 0 and any(c.on(k) for c in chosen))
        a = np.array([[1.0 if c.on(k) else 0.0 for c in chosen] for k in rows])
        y = np.array([spikes[k] for k in rows])
        x = np.maximum(np.linalg.lstsq(a, y, rcond=None)[0], 0.0)
        return x, y - a @ x, rows

    def _sections(self, s: int, level: float) -> list[Part]:
        """Marked sections (evaluation, checkpoints) with their schedule; an evaluation the
        schedule announces but the run has not reached yet is assumed (said so)."""
        out = []
        sched = self.schedule
        eval_plan = sched.eval_plan()
        for name, seen in self.sections.items():
            at = [k for k, _ in seen]
            cost, sd, used = _section_cost([x for _, x in seen])
            plan, source = None, "learned"
            if name == "eval" and eval_plan is not None:
                plan, source = eval_plan, "schedule"
            elif name == "checkpoint" and sched.checkpoint_every_steps:
                every = float(sched.checkpoint_every_steps)
                plan, source = EvalPlan(every, every), "schedule"
            else:
                plan, source = _learned_plan(at, sched.steps_per_epoch)
            if plan is None:
                out.append(
                    Part(f"section {name}", "one-off", "measured", cost, sd, used, "one-off")
                )
                continue
            out.append(
                Part(
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
                    count_unknown=source.startswith("assumed: every"),
                )
            )
        for name, secs in self.beside.items():
            mean = sum(secs) / len(secs)
            out.append(
                Part(
                    f"section {name}",
                    "beside the steps",
                    "measured",
                    mean,
                    0.0,
                    len(secs),
                    "one-off",
                )
            )
        # Announced evaluations whose first position passed with no section marked run
        # inside the steps: their time is in the step level or an in-step extra already.
        seen_eval = "eval" in self.sections or "eval" in self.beside
        if eval_plan is not None and not seen_eval and not eval_plan.count(0, s - 1):
            if sched.eval_steps:
                # Forward passes only: about FORWARD_SHARE of a training step per batch.
                mean = sched.eval_steps * level * self.FORWARD_SHARE
                sd = self.FORWARD_SD * mean
                source = f"assumed: {sched.eval_steps} batches at 1/3 of a training step (+/- 50 %)"
            else:
                # Nothing says how long one takes: a prior share of the run's training for
                # all of them (real ones take from under 1 % to 17 %), with its wide spread.
                n = sched.total_steps
                count = eval_plan.count(1, n) if n else 0
                per = n / count if count else eval_plan.spacing()
                mean = self.EVAL_SHARE * per * level
                sd = self.EVAL_SHARE_SD * per * level
                source = "assumed: not seen yet, all of them 5 % +/- 5 % of the training"
            out.append(
                Part(
                    "section eval (not seen yet)",
                    eval_plan.describe(),
                    source,
                    mean,
                    sd,
                    0,
                    "section",
                    due_now=s > 0 and eval_plan.count(s, s) > 0,
                    plan=eval_plan,
                )
            )
        return out


def _section_cost(secs: list[float]) -> tuple[float, float, int]:
    """(time per remaining occurrence, its spread, occurrences it rests on) of a section.

    A first occurrence is cold (compilation, caches, data loading: 1-3x a later one), like
    a training step's warm-up: once a later one is seen, it is left out; while it is the only
    one, a later one is taken as ``FIRST_WARM`` of it, +/- ``FIRST_WARM_SD``. The spread of
    the occurrences is pooled with a prior one (``SECTION_CV``, worth ``SECTION_PRIOR`` of
    them): a few equal occurrences do not make a certainty."""
    if len(secs) == 1:
        return secs[0] * FIRST_WARM, secs[0] * FIRST_WARM_SD, 1
    warm = secs[1:]
    m = len(warm)
    mean = sum(warm) / m
    var_seen = float(np.var(warm, ddof=1)) if m > 1 else 0.0
    k0 = SECTION_PRIOR
    sd = math.sqrt((k0 * (SECTION_CV * mean) ** 2 + (m - 1) * var_seen) / (k0 + m - 1))
    return mean, sd, m


def _learned_plan(at: list[int], steps_per_epoch: int | None) -> tuple[EvalPlan | None, str]:
    """Where a section comes, from where it came: the recent gaps when they agree within a
    step or ``JITTER`` (a period that is not a whole number of steps, an epoch that ends on
    either side of a step), their mean as the period; one occurrence assumes its own step
    as the period (an epoch when it fell on an epoch end)."""
    recent = at[-(JITTER_SPAN + 1) :]
    gaps = [b - a for a, b in zip(recent, recent[1:], strict=False)]
    if gaps and min(gaps) > 0:
        mid = sorted(gaps)[len(gaps) // 2]
        if max(gaps) - min(gaps) <= max(1.0, JITTER * mid):
            period, last = _fit_lattice(recent)
            return EvalPlan(period, last), "learned"
        return None, "learned"
    if len(at) == 1 and at[0] > 0:
        spe = steps_per_epoch
        if spe and at[0] % spe == 0:
            return EvalPlan(float(spe), float(at[0])), "assumed: each epoch"
        return EvalPlan(float(at[0]), float(at[0])), f"assumed: every {at[0]} steps"
    return None, "learned"


def _fit_lattice(at: list[int]) -> tuple[float, float]:
    """(period, fitted last position) of occurrences one period apart give or take a step:
    least squares on their index, so the jitter at either end does not set the period."""
    m = len(at)
    xm, ym = (m - 1) / 2, sum(at) / m
    sxx = sum((j - xm) ** 2 for j in range(m))
    period = sum((j - xm) * (k - ym) for j, k in enumerate(at)) / sxx
    return period, ym + period * (m - 1 - xm)


# A section's first occurrence, while it is the only one: a later one is taken as this
# share of it (first occurrences are 1-3x later ones), +/- this much of it.
FIRST_WARM = 0.75
FIRST_WARM_SD = 0.25
# The spread of a section's occurrences before they show it: 10 %, worth 2 occurrences.
SECTION_CV = 0.1
SECTION_PRIOR = 2
# Learned section periods: gaps that agree within a step or this share, over the last
# JITTER_SPAN gaps.
JITTER = 0.05
JITTER_SPAN = 4


@dataclass(frozen=True)
class Forecast:
    """A total-time forecast and how it was made; ``to_dict()`` is ``ailens predict --json``.

    ``predicted_total_s``/``interval_s``: the forecast made at the signature step when the
    signature was reached (``basis`` "signature"), else the one made at a fixed early point
    (``basis`` "early", 10 % of the steps) once the run got there, else the latest. Totals
    are seconds from the Lens's start on rank 0 to the end of the run (its close); the
    ``job_*`` fields count from the process start instead. ``history`` holds (steps done,
    predicted total) at most once per step.
    """

    predicted_total_s: float | None
    interval_s: tuple[float, float] | None
    signature_step: int | None
    signature_fraction: float | None  # signature_step / total_steps
    actual_total_s: float | None
    history: tuple[tuple[int, float], ...]
    made_at_step: int
    basis: str  # "signature", "early" or "latest"
    elapsed_s: float  # rank 0's time at made_at_step
    total_steps: int | None
    naive_eta_s: float | None  # the progress-bar ETA (time still to go) at made_at_step
    naive_total_s: float | None  # elapsed + naive_eta_s
    step_time_s: float | None
    step_time_sd_s: float | None
    regime_start_step: int | None
    components: tuple[Component, ...] = ()
    steps_done: int = 0  # steps recorded by the end of the data
    job_offset_s: float | None = None  # process start -> Lens start
    actual_job_total_s: float | None = None  # process start -> process exit, when recorded
    signature_rel_tol: float | None = None
    level: float = INTERVAL_LEVEL
    note: str = ""

    @property
    def error_pct(self) -> float | None:
        """Signed error of the forecast against the actual total, in percent; None for a
        forecast made at the end of the run (it is never scored against itself)."""
        return None if self.basis == "latest" else _pct(self.predicted_total_s, self.actual_total_s)

    @property
    def naive_error_pct(self) -> float | None:
        """The same for the progress-bar ETA made at the same step."""
        return None if self.basis == "latest" else _pct(self.naive_total_s, self.actual_total_s)

    @property
    def covered(self) -> bool | None:
        """Whether the actual total fell inside the interval (None: not scored)."""
        if self.error_pct is None or self.interval_s is None:
            return None
        return self.interval_s[0] <= self.actual_total_s <= self.interval_s[1]

    @property
    def predicted_job_total_s(self) -> float | None:
        if self.predicted_total_s is None or self.job_offset_s is None:
            return None
        return self.job_offset_s + self.predicted_total_s

    def to_dict(self) -> dict:
        """JSON-ready dict (plain Python types)."""
        d = asdict(self)
        d["interval_s"] = None if self.interval_s is None else list(self.interval_s)
        d["history"] = [[int(s), float(v)] for s, v in self.history]
        d["components"] = [asdict(c) for c in self.components]
        d["error_pct"] = self.error_pct
        d["naive_error_pct"] = self.naive_error_pct
        d["predicted_job_total_s"] = self.predicted_job_total_s
        d["covered"] = self.covered
        return d


def _pct(pred: float | None, actual: float | None) -> float | None:
    if pred is None or not actual:
        return None
    return 100.0 * (pred - actual) / actual
