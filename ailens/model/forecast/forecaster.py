"""The forecaster: fed step ends, sections and schedules, it keeps the training-step level
(``level.py``), the sections and the schedule, and sums them with the recurring extras and
one-offs (``extras.py``, ``parts.py``, ``sections.py``) into a ``Snapshot`` of the run."""

from __future__ import annotations

import math

from ..._stats import NORMAL_DF
from .extras import recurring_extras
from .level import StepLevel
from .parts import split_spikes
from .schedule import Schedule
from .sections import section_parts, unannounced, under_way
from .snapshot import Prediction, Snapshot


class Forecaster:
    """Builds the run's model from step ends, sections and schedules. ``snapshot()`` (and
    ``predict()``, its evaluation) only read that state, so any point of the run can be
    forecast without changing it."""

    CHANGE_PRIOR_STEPS = 500
    # The step spread before the steps say it: 5 % of the level, worth 2 steps.
    PRIOR_CV = 0.05
    PRIOR_STEPS = 2
    COLD_CV = 0.25  # the level from warm-up steps (a run of tens of steps, at 5 %): +/- 25 %
    # The first unit alone (a run of tens of epochs or blocks, at its first step) holds
    # compilation and warm-up (the start-up before the training began is a section out of
    # it where the log says where the training began): on the development corpus (61 MLPerf
    # runs) the steady level is a median 0.83 of its training time (quartiles 0.67 and 0.98;
    # 0.83-0.90 learned leaving each benchmark family out): 0.83 +/- 0.37 of it, a stated
    # prior until later units show. Its low tail is long (10 % of runs below 0.27, 2.5 %
    # below 0.11): the sd puts the 2.5 % quantile at the interval's lower end.
    FIRST_UNIT_SHARE = 0.83
    FIRST_UNIT_SD = 0.37

    def __init__(self, *, warmup_steps: int = 2) -> None:
        self.warmup_steps = warmup_steps
        self.schedule = Schedule()
        self.level = StepLevel()
        self.steps = 0
        self.t_last = 0  # ns, the last step end
        self.t_now = 0  # ns, the latest event seen (a step end or a section's end)
        self.sections: dict[str, list[tuple[int, float]]] = {}  # name -> (step, seconds)
        self.beside: dict[str, list[float]] = {}  # sections that ran beside the steps
        # Those inside one unit: (the unit's index, its time over the level), by name.
        self.beside_units: dict[str, list[tuple[int, float]]] = {}
        # Those during which steps ended: the units each ran beside (first, last index).
        self.beside_spans: dict[str, list[tuple[int, int]]] = {}
        self._in_step = 0.0  # section seconds inside the step interval now running
        # Those sections, in order: (name, index in ``sections[name]``, begin ns, end ns).
        self._in_step_sections: list[tuple[str, int, int, int]] = []
        self._warm: list[float] = []  # the warm-up steps' training times
        self._tied: list[int] = []  # steps that ended on the clock reading of the one before
        self.tick_s = 0.0  # a coarse clock's resolution, once steps shared a reading
        self.end_ns: int | None = None

    # ------------------------------------------------------------ feeding

    def on_schedule(self, mark: dict) -> None:
        self.schedule = self.schedule.merged(mark)

    def on_section(self, name: str, step: int, t_begin_ns: int, t_end_ns: int) -> None:
        secs = max(t_end_ns - t_begin_ns, 0) / 1e9
        if step < self.steps:
            # Steps ended while it ran: it ran beside the training (an asynchronous
            # evaluation), whose steps carry whatever it slowed them by. No time of its own.
            self.beside.setdefault(name, []).append(secs)
            # The units it ran beside: from the one after step ``step`` to the one running.
            self.beside_spans.setdefault(name, []).append((int(step), self.steps))
            return
        self.sections.setdefault(name, []).append((int(step), secs))
        if step == self.steps:  # inside the running step interval: not training time
            self._in_step += secs
            at = len(self.sections[name]) - 1
            self._in_step_sections.append((name, at, t_begin_ns, t_end_ns))
        self.t_now = max(self.t_now, t_end_ns)

    def on_step(self, t_ns: int) -> None:
        i = self.steps
        self.steps = i + 1
        if t_ns <= self.t_last + round(self._in_step * 1e9):
            # A step with no time beyond its sections: a clock coarser than the steps (a log
            # with 1-second timestamps), or a log that reads it every k steps (a step between
            # two readings comes at the last one). Its time is in the next step the clock
            # moves on: shared evenly over the steps since the clock last moved, one
            # observation, not a 0 s step and a slow one.
            self._tied.append(i)
            return
        dt = (t_ns - self.t_last) / 1e9
        x = dt - self._in_step
        if self._in_step and self._ran_beside(dt):
            # The unit is no longer than a training unit: the sections inside it ran beside
            # the training (an asynchronous evaluation inside one logged unit). Not training
            # time taken out, nor a section's time to come: what it costs is what the unit
            # took over the level, a recurring extra on the section's schedule.
            c = self.level.center
            names = [name for name, *_ in self._in_step_sections]
            for name in names:
                self.beside.setdefault(name, []).append(self.sections[name].pop()[1])
                if not self.sections[name]:
                    del self.sections[name]
                self.beside_units.setdefault(name, []).append((i, (dt - c) / len(names)))
            x = c
        elif self._in_step:
            self._place_at_unit_end(i, t_ns)
        self.t_last = t_ns
        self.t_now = max(self.t_now, t_ns)
        self._in_step = 0.0
        self._in_step_sections = []
        tied, self._tied = self._tied, []
        k = len(tied) + 1
        share = max(x, 0.0) / k
        if tied:  # the share is known to about one step in k
            self.level.quantum_s = max(self.level.quantum_s, share / k)
            self.tick_s = x if not self.tick_s else min(self.tick_s, x)
        # The k steps ending at step i: those still in the warm-up, the rest one observation.
        warm = min(k, max(self.warmup_steps - (i - k + 1), 0))
        self._warm.extend([share] * warm)
        if k > warm:
            self.level.add(i, share, k=k - warm)

    def _place_at_unit_end(self, i: int, t_ns: int) -> None:
        """Sections inside unit ``i`` nearer its end than its start ran after its training (a
        log whose unit ends with its evaluation: MLPerf's blocks): they come after step
        ``i + 1`` ends, not after step ``i``. Else an evaluation every unit is one position
        early, and the one at the current step is taken as still to come (issue 30)."""
        for name, j, begin, end in self._in_step_sections:
            if t_ns - end < begin - self.t_last:
                self.sections[name][j] = (i + 1, self.sections[name][j][1])

    def _ran_beside(self, dt: float) -> bool:
        """Whether a unit of ``dt`` seconds with sections inside it ran them beside the
        training: it is shorter than the training level plus half their time, by more than
        the steps' spread (judged once the level has a centre)."""
        lv = self.level
        c = lv.center
        if c is None or lv.acc_n < StepLevel.START:
            return False
        s = self._in_step
        return s > 2 * lv.Z_OUT * lv.scale and dt < c + 0.5 * s

    def on_close(self, t_ns: int) -> None:
        self.end_ns = t_ns

    # ------------------------------------------------------------ reading

    def predict(self, total_steps: int | None = None) -> Prediction:
        return self.snapshot().evaluate(total_steps)

    @property
    def steps_known(self) -> int:
        """The steps whose time has been read: those that ended since the clock last moved
        are done, but their time is not known yet (a forecast is as of the last reading)."""
        return self.steps - len(self._tied)

    def snapshot(self) -> Snapshot:
        lv = self.level
        s = self.steps_known
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
        units, by_beside = self._beside_excess()
        now = self._under_way_now(s, units, by_beside)
        spikes = {k: v for k, v in lv.spikes.items() if k not in by_beside}
        extras, explained = recurring_extras(spikes, s, self.schedule, self.warmup_steps)
        explained |= by_beside
        # The regime's mean step, less what the recurring extras and the largest one-off took
        # (those are scheduled apart, or spent once); other outliers stay in at their rate.
        taken, loose, one_off = split_spikes(lv.spikes, lv.regime_start, explained)
        if lv.retired_sum and taken:
            # Outliers too old to be classified are still in the regime's sums: taken out in
            # the share the recent ones are explained.
            slow = taken + sum(v for v in loose if v > 0) + max(one_off, 0.0)
            taken += lv.retired_sum * taken / slow
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
            # A coarse clock reads each end of the regime's span to within a tick.
            level_var=max(var_mean, sd2 / n) + loose_var / n + (self.tick_s / n) ** 2 / 6,
            sd=math.sqrt(sd2 + loose_var),
            excess=excess,
            level_n=n,
            df=n - 1 + k0,
            regime_start=lv.regime_start,
            # A change of speed seen once in a short run says little about the rate: temper it
            # with ``CHANGE_PRIOR_STEPS`` steps that had none.
            change_rate=len(changes) / (seen + self.CHANGE_PRIOR_STEPS),
            change_size2=size2,
            parts=(*extras, *self._sections(s, level, units, extras, now)),
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
            off_level=sum(k not in explained for k, _ in lv.run),
            unseen_periods=self._unseen_periods(s),
        )

    def _unseen_periods(self, s: int) -> tuple[str, ...]:
        """The schedule's recurring positions besides evaluations (epoch ends, checkpoints)
        whose first one has not passed yet, with one inside the run; not a checkpoint the
        schedule prices (its state's bytes known: a part of its own)."""
        n = self.schedule.total_steps
        return tuple(
            f"{what} (every {period} steps)"
            for period, what in self.schedule.periods().items()
            if what != "evaluation"
            and not (what == "checkpoint" and self.schedule.checkpoint_bytes)
            and s <= period
            and (not n or period < n)
        )

    def _sections(self, s: int, level: float, units=None, extras=(), now=None):
        units = self.beside_units if units is None else units
        in_step = _seen_in_steps(extras, self.schedule)
        if now is None:  # nothing of the one under way is known to be spent yet
            now = {name: (at, 0.0) for name, at in self._under_way_at(s, units).items()}
        return section_parts(
            self.sections,
            self.beside,
            self.schedule,
            s,
            level,
            units,
            in_step=in_step,
            under_way_now=now,
        )

    def _under_way_at(self, s: int, units: dict[str, list[tuple[int, float]]]) -> dict[str, int]:
        """The position of each section beside the steps under way after ``s`` steps."""
        out = {}
        for name, occ in units.items():
            at = under_way(name, self.sections, occ, self.schedule, s)
            if at is not None:
                out[name] = at
        return out

    def _under_way_now(
        self, s: int, units: dict[str, list[tuple[int, float]]], taken: set[int]
    ) -> dict[str, tuple[int, float]]:
        """By name, each section beside the steps under way: its position and what it took
        so far, the slow steps since its position (outliers of the current regime), added to
        ``taken`` (they are its time, spent, not the level's)."""
        lv = self.level
        now: dict[str, tuple[int, float]] = {}
        for name, at in self._under_way_at(s, units).items():
            start = max(at, lv.regime_start or 0)
            ks = [k for k, v in lv.spikes.items() if k >= start and v > 0 and k not in taken]
            taken.update(ks)
            now[name] = (at, sum(lv.spikes[k] for k in ks))
        return now

    def _beside_excess(self) -> tuple[dict[str, list[tuple[int, float]]], set[int]]:
        """What the sections that ran beside the steps cost: by name, (first unit, time over
        the level) of each occurrence, those inside one unit and those during which steps
        ended (the outliers among the units they overlapped, which the level leaves out);
        and the steps of those outliers. Those of an earlier regime (before a change of
        speed) keep their cost, over the level of their time; one whose outliers are too old
        to be kept (``StepLevel.MAX_SPIKES``) is left out, its cost unknown, not nothing."""
        lv = self.level
        units = {name: list(v) for name, v in self.beside_units.items()}
        taken: set[int] = set()
        full = len(lv.spikes) >= lv.MAX_SPIKES
        oldest = min(lv.spikes, default=0)
        for name, spans in self.beside_spans.items():
            for a, b in spans:
                if full and a < oldest:
                    continue
                ks = [k for k in range(a, b + 1) if lv.spikes.get(k, 0.0) > 0]
                taken.update(ks)
                units.setdefault(name, []).append((a, sum(lv.spikes[k] for k in ks)))
        return {name: sorted(v) for name, v in units.items()}, taken

    def _unannounced(self) -> bool:
        return unannounced(self.schedule, "eval" in self.sections or "eval" in self.beside)

    def _provisional(self) -> Snapshot:
        """The forecast while every step so far is warm-up (a run of tens of steps, at 5 %):
        the steps after the first as the level, +/- ``COLD_CV``: they may still be warming
        up; the first alone holds the start-up: ``FIRST_UNIT_SHARE`` +/- ``FIRST_UNIT_SD``
        of it. A stated prior, not a spread measured
        on few steps: the normal quantile, not Student's t."""
        used = self._warm[1:] or self._warm
        if len(self._warm) == 1:
            first = self._warm[0]
            level, sd = self.FIRST_UNIT_SHARE * first, self.FIRST_UNIT_SD * first
            source = (
                f"assumed: {self.FIRST_UNIT_SHARE:g} +/- {self.FIRST_UNIT_SD:g} of the first "
                "step, its start-up not told apart yet"
            )
        else:
            level = sum(used) / len(used)
            sd = self.COLD_CV * level
            source = f"warm-up steps after the first, +/- {100 * self.COLD_CV:.0f} %"
        return Snapshot(
            steps_done=self.steps_known,
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
            parts=tuple(self._sections(self.steps_known, level)),
            df=NORMAL_DF,
            unannounced=self._unannounced(),
            first_unit_only=len(self._warm) == 1,
            level_source=source,
        )


def _seen_in_steps(extras, schedule: Schedule) -> tuple[str, ...]:
    """What the in-step extras on the schedule's periods found inside the steps
    ("evaluation", "checkpoint"): seen there, not to be assumed again. A checkpoint on the
    evaluations' period shares their extra."""
    ckpt = schedule.checkpoint_every_steps
    found = {
        "evaluation": any(e.name.endswith("(evaluation)") for e in extras),
        "checkpoint": any(e.plan is not None and e.plan.period == ckpt for e in extras),
    }
    return tuple(what for what, seen in found.items() if seen)
