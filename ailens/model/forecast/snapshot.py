"""The run's model at one step (``Snapshot``) and what it forecasts for a total
(``Snapshot.evaluate`` -> ``Prediction``, its breakdown in ``Component`` rows).

At ``S`` steps done of ``N``, with ``R = N - S``::

    predicted total = elapsed(S) + R * level + sum over extras and sections of
                      (remaining occurrences x time per occurrence)
    interval        = predicted total +/- z * sqrt(R^2 var(level) + R sd^2 + drift(R)
                                               + sum over parts of their variance)

(an assumed part with a skewed prior adds its spread below the point to the lower side's
variance and the one above to the upper side's: a split normal, the interval asymmetric)

``var(level)`` is the uncertainty of the regime's mean step time (step-to-step, or from batch
means of ``BLOCK`` steps when larger: slow swings), ``sd`` the step-to-step spread and
``drift(R)`` the risk that the speed moves again before the end: the changes of speed seen so
far and the wander of the batch means beyond their noise, scaled to the remaining steps."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..._stats import t_quantile
from .level import StepLevel
from .parts import Part
from .sections import COARSE_STEPS, EVAL_SHARE_SD

INTERVAL_LEVEL = 0.95


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
    # 95 % half-width of its time per occurrence, relative to it (None: not known yet)
    precision: float | None = None
    # One sd of what it still costs, above the point: its share of the interval's width.
    spread_s: float = 0.0


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
    # The latest steps in a row off the level on one side that no part explains (a change
    # of speed may be under way).
    off_level: int = 0
    # Recurring positions the schedule announces (epoch ends, checkpoints) none of which
    # has passed yet: what happens there is not seen.
    unseen_periods: tuple[str, ...] = ()
    # The level is the first unit's time at the first-unit prior: no step after it seen.
    first_unit_only: bool = False
    # Where the step level comes from (the training steps' source in the breakdown).
    level_source: str = "measured"

    REVERSALS = 2
    # Real runs' step time wanders over a run (data, thermals, the schedule's later phases),
    # more than its first steps can show: a random walk of WANDER over the whole run, as a
    # prior. Calibrated on the development corpus (61 MLPerf runs, at 10/20/50 % of the
    # steps: the remaining steps' mean against the level so far, scaled by the walk's
    # sqrt(R / 3N)): median |walk| 3.2 %, i.e. a normal sd of 4.7 % (68 % quantile 5.6 %);
    # the tail beyond (speed changes of 10-30 %) is what the change detection's rate covers.
    WANDER = 0.045

    def evaluate(self, total_steps: int | None = None) -> Prediction:
        """The forecast this state gives for a run of ``total_steps`` (default: as known)."""
        n = total_steps or self.total_steps
        s, elapsed, lvl = self.steps_done, self.elapsed_s, self.level
        naive = naive_total_s(elapsed, s, n)
        if self.first_unit_only and n and n > COARSE_STEPS:
            # A run of iterations (thousands of steps), not of epochs or blocks: its first
            # step holds the start-up (CUDA and the loader starting, tracing, compiling),
            # tens of steps' time, which the first-unit prior (a share of an epoch) does not
            # describe: a food-101 log's first iteration said 9 h for a 26-minute run. No
            # forecast until a second step's time is read.
            lvl = None
        if lvl is None or self.level_n < 1:
            return Prediction(
                steps_done=s,
                total_steps=n,
                elapsed_s=elapsed,
                predicted_total_s=None,
                interval_s=None,
                naive_total_s=naive,
                step_time_s=lvl,
                step_time_sd_s=None,
                regime_start_step=None,
            )
        if not n:
            return Prediction(
                steps_done=s,
                total_steps=None,
                elapsed_s=elapsed,
                predicted_total_s=None,
                interval_s=None,
                naive_total_s=None,
                step_time_s=lvl,
                step_time_sd_s=self.sd,
                regime_start_step=self.regime_start,
            )
        r = max(n - s, 0)
        lvl = self._expected_level(r)
        var = r * r * self.level_var + r * self.sd**2 + self._drift_var(r, n)
        comps = [
            Component(
                "training steps",
                "each step",
                self.level_source,
                lvl,
                self.level_n,
                r,
                r * lvl,
                self.sd,
                self.level_precision(),
                spread_s=math.sqrt(var),
            )
        ]
        room = 0.0
        if self.unannounced:
            # Evaluations nobody announced may still come (some start half-way through a
            # run): the prior share's spread on the remaining training, less likely the later
            # none has come.
            room = EVAL_SHARE_SD * (1 - s / n) * r * lvl
        if self.unseen_periods:
            # An announced epoch end (or checkpoint position) not passed yet: what happens
            # there (an evaluation in the next step, a loader restarting) is not seen. The
            # same prior share's spread on the remaining training, as room, not a cost.
            room = max(room, EVAL_SHARE_SD * r * lvl)
        if room > 0:
            comps.append(
                Component(
                    "room for what is not seen yet",
                    "an announced epoch end or checkpoint not passed, evaluations nobody announced",
                    "assumed: no cost, +/- the evaluations' prior share of the training",
                    0.0,
                    0,
                    0,
                    0.0,
                    spread_s=room,
                )
            )
        var += room * room
        var_lo, var_hi = self._add_parts(comps, var, s, n, r)
        total = elapsed + sum(c.remaining_s for c in comps)
        # Student's t on the regime's steps: few steps, a wider interval.
        z = t_quantile(0.5 + INTERVAL_LEVEL / 2, max(self.df, 1))
        return Prediction(
            steps_done=s,
            total_steps=n,
            elapsed_s=elapsed,
            predicted_total_s=total,
            # No run ends before the time already spent.
            interval_s=(max(total - z * math.sqrt(var_lo), elapsed), total + z * math.sqrt(var_hi)),
            naive_total_s=naive,
            step_time_s=lvl,
            step_time_sd_s=self.sd,
            regime_start_step=self.regime_start,
            components=tuple(comps),
        )

    def level_precision(self) -> float | None:
        """The 95 % half-width of the step level, relative to it (Student's t on the pooled
        degrees of freedom; a provisional level's stated prior)."""
        if not self.level or self.level_n < 1:
            return None
        return t_quantile(0.975, max(self.df, 1)) * math.sqrt(self.level_var) / self.level

    def _add_parts(
        self, comps: list[Component], var: float, s: int, n: int, r: int
    ) -> tuple[float, float]:
        """Append each part's row to ``comps``; ``var`` plus their variance (added one after
        the other, in order), below and above the point: (lower side, upper side)."""
        var_lo = var
        for part in self.parts:
            left = part.remaining(s, n)
            if part.seen:  # measured: its spread, and the uncertainty of its mean
                add = left * part.sd_s**2 + left * left * part.sd_s**2 / part.seen
                add_lo = add
            else:  # assumed: one unknown cost that every occurrence shares
                add = (left * part.sd_s) ** 2
                below = part.sd_s if part.sd_lo_s is None else part.sd_lo_s
                add_lo = (left * below) ** 2
            if part.count_unknown:
                # Seen once: from none to twice the assumed count still to come (at most one
                # a step), uniform. (Up to one a step whatever the period put +/- 2,750 % on
                # a 20-epoch log with an evaluation seen after its first epoch.)
                most = min(2 * left, r)
                extra = (most / math.sqrt(12) * part.per_occurrence_s) ** 2
                add, add_lo = add + extra, add_lo + extra
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
                    part.precision,
                    spread_s=math.sqrt(add),
                )
            )
            var, var_lo = var + add, var_lo + add_lo
        return var_lo, var

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
