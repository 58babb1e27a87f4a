"""The forecaster: fed step ends, sections and schedules, it keeps the training-step level
(``level.py``), the sections and the schedule, and sums them with the recurring extras and
one-offs (``extras.py``, ``parts.py``, ``sections.py``) into a ``Snapshot`` of the run."""

from __future__ import annotations

import math

from .extras import recurring_extras
from .level import StepLevel
from .parts import split_spikes
from .schedule import Schedule
from .sections import section_parts, unannounced
from .snapshot import Prediction, Snapshot
from .stats import NORMAL_DF


class Forecaster:
    """Builds the run's model from step ends, sections and schedules. ``snapshot()`` (and
    ``predict()``, its evaluation) only read that state, so any point of the run can be
    forecast without changing it."""

    CHANGE_PRIOR_STEPS = 500
    # The step spread before the steps say it: 5 % of the level, worth 2 steps.
    PRIOR_CV = 0.05
    PRIOR_STEPS = 2
    COLD_CV = 0.25  # the level from warm-up steps (a run of tens of steps, at 5 %): +/- 25 %

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
                steps_done=s,
                elapsed_s=self.t_now / 1e9,
                total_steps=self.schedule.total_steps,
                level=None,
                level_var=0.0,
                sd=0.0,
                excess=0.0,
                level_n=lv.n,
                regime_start=lv.regime_start,
                change_rate=0.0,
                change_size2=0.0,
            )
        extras, explained = recurring_extras(lv.spikes, s, self.schedule, self.warmup_steps)
        # The regime's mean step, less what the recurring extras and the largest one-off took
        # (those are scheduled apart, or spent once); other outliers stay in at their rate.
        taken, loose, one_off = split_spikes(lv.spikes, lv.regime_start, explained)
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
            # Over all regimes, with the same parts taken out as from the regime's mean: their
            # seconds spread over all the steps (spread over the regime's few steps, a first
            # evaluation inside a young regime once made this mean negative: -230 %).
            longrun=(lv.all_sum - taken - one_off) / lv.all_n,
            reversals=sum(
                (b1 - a1) * (b2 - a2) < 0
                for (_, a1, b1), (_, a2, b2) in zip(changes, changes[1:], strict=False)
            ),
            changes=len(changes),
        )

    def _sections(self, s: int, level: float):
        return section_parts(self.sections, self.beside, self.schedule, s, level)

    def _unannounced(self) -> bool:
        return unannounced(self.schedule, "eval" in self.sections or "eval" in self.beside)

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
            df=NORMAL_DF,
            unannounced=self._unannounced(),
        )
