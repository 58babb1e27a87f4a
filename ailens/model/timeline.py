"""Forecast any run that can be described as a timeline, through the live Lens's own model.

A :class:`Timeline` is what a log says about a run: when each training step ended, the
intervals of named sections (``"eval"``, ``"checkpoint"``, ``"init"``, ...), the schedule the
script knows (the keywords of ``Lens.set_schedule``) and, once it is over, when the run ended.
:func:`forecast_timeline` feeds it to ``OnlineAnalysis`` exactly as a single-rank ``Lens``
driven by a clock that follows the timeline would: the schedule as a mark at the start, each
step end, each section as a mark after the step end it follows, and an evaluation point
wherever that Lens's exchange cadence puts one (so the signature lands on the same step).
There is no second model: the numbers are the live ones. :class:`TimelineReplay` does the
feeding, and feeds a timeline that grows (a log being written) only what each read adds.
An ailens run directory's own recording is fed by ``ailens.analyze`` instead (its settings
and recorded exchanges: ``analysis.run_forecast``).

Beside the forecast at every step it gives the progress-bar ETA and MosaicML Composer's
``RuntimeEstimator`` (``baselines``), computed from the same timeline.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ..record.config import LensConfig
from ..record.exchange import Cadence, Summed
from ..record.schedule import SCHEDULE_KEYS
from .baselines import composer_total_s, naive_total_s
from .forecast import Component, Forecast
from .online import OnlineAnalysis, feed_recorded

__all__ = [
    "Section",
    "StepForecast",
    "Timeline",
    "TimelineForecast",
    "TimelineReplay",
    "forecast_timeline",
    "timeline_forecast",
]


@dataclass(frozen=True)
class Section:
    """A named part of the run other than training steps, in seconds from the run's start.
    ``"eval"`` (evaluation), ``"checkpoint"`` and ``"init"`` are the names the forecast and
    the baselines know; any other name is timed and scheduled the same way."""

    name: str
    begin_s: float
    end_s: float


@dataclass(frozen=True)
class Timeline:
    """A run as a timeline: seconds from its start (the Lens's start, or the log's origin).

    ``step_end_s``: when each training step ended (increasing). ``sections``: named intervals.
    ``schedule``: what the script knows, with the keywords of ``Lens.set_schedule``
    (``total_steps``, ``steps_per_epoch``, ``eval_every_steps``, ...). ``end_s``: when the run
    ended (None: still running, or unknown). ``unit`` says what one step of the timeline is
    ("step", "epoch", "block", ...) and ``steps_per_epoch`` converts epochs into those steps
    (readers fill both from the log). ``info``: what the reader learned besides (file,
    benchmark, ranks, ...). ``reading_steps``: where the log read the clock less often than
    every step (a line every k steps), the steps done at each reading; the ends between two
    readings are spread evenly over their interval, an estimate, not a reading (empty: every
    step's end was read).
    """

    step_end_s: tuple[float, ...]
    sections: tuple[Section, ...] = ()
    schedule: Mapping = field(default_factory=dict)
    end_s: float | None = None
    name: str = ""
    source: str = ""
    unit: str = "step"
    steps_per_epoch: float | None = None
    info: Mapping = field(default_factory=dict)
    reading_steps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        t = np.asarray(self.step_end_s, dtype=float)
        where = f"{self.name}: " if self.name else ""
        if t.ndim != 1 or not np.all(np.isfinite(t)):
            raise ValueError(f"{where}step end times must be a list of finite numbers")
        if len(t) and (t[0] < 0 or np.any(np.diff(t) < 0)):
            raise ValueError(
                f"{where}step end times must be >= 0 (seconds from the run's start) and "
                "non-decreasing"
            )
        for s in self.sections:
            if not (0 <= s.begin_s <= s.end_s) or not math.isfinite(s.end_s):
                raise ValueError(
                    f"{where}section {s.name!r} [{s.begin_s}, {s.end_s}]: needs "
                    "0 <= begin_s <= end_s (seconds from the run's start)"
                )
        unknown = set(self.schedule) - set(SCHEDULE_KEYS)
        if unknown:
            raise ValueError(
                f"{where}unknown schedule keys {sorted(unknown)}; known: {', '.join(SCHEDULE_KEYS)}"
            )
        object.__setattr__(self, "step_end_s", tuple(float(x) for x in t))
        object.__setattr__(self, "sections", tuple(sorted(self.sections, key=lambda s: s.end_s)))
        reads = tuple(int(k) for k in self.reading_steps)
        if any(b <= a for a, b in zip(reads, reads[1:], strict=False)) or (
            reads and not 1 <= reads[0] <= reads[-1] <= len(t)
        ):
            raise ValueError(f"{where}reading steps must increase within 1..steps")
        object.__setattr__(self, "reading_steps", reads)

    @property
    def total_steps(self) -> int | None:
        n = self.schedule.get("total_steps")
        return int(n) if n else None

    @property
    def steps(self) -> int:
        return len(self.step_end_s)

    @property
    def init_s(self) -> float:
        """Seconds before the first step began: the ``"init"`` section that starts the
        timeline (0 without one). A progress bar (tqdm, Keras) starts its clock there."""
        return max(
            (s.end_s for s in self.sections if s.name == "init" and s.begin_s <= 0), default=0.0
        )

    @property
    def finished(self) -> bool:
        """The run ended after all its steps (its actual total is known)."""
        n = self.total_steps
        return self.end_s is not None and bool(n) and self.steps >= n

    def head(self, steps: int) -> Timeline:
        """The timeline as it stood when its ``steps``-th step ended: those steps, the
        sections that had ended by then, the run not ended yet."""
        if steps >= self.steps:
            return replace(self, end_s=None) if self.end_s is not None else self
        t = self.step_end_s[steps - 1] if steps > 0 else 0.0
        return replace(
            self,
            step_end_s=self.step_end_s[:steps],
            sections=tuple(s for s in self.sections if s.end_s <= t),
            end_s=None,
            reading_steps=tuple(k for k in self.reading_steps if k <= steps),
        )

    def with_total(self, total_steps: int | None = None, epochs: float | None = None) -> Timeline:
        """The same timeline with the run's length said: ``total_steps`` steps, or ``epochs``
        epochs (converted with ``steps_per_epoch``)."""
        if total_steps is None and epochs is None:
            return self
        if total_steps is None:
            if not self.steps_per_epoch:
                raise ValueError(
                    f"{self.name or 'timeline'}: steps per epoch unknown, so --epochs cannot be "
                    "converted; give --total-steps instead"
                )
            total_steps = max(1, round(float(epochs) * self.steps_per_epoch))
        if int(total_steps) < 1:
            raise ValueError(f"total steps must be >= 1, got {total_steps}")
        return replace(self, schedule={**self.schedule, "total_steps": int(total_steps)})


@dataclass(frozen=True)
class StepForecast:
    """The forecasts a user would have read once ``steps_done`` steps had ended (seconds from
    the run's start): ailens (``predicted_total_s``, its 95 % interval and its parts), the
    progress bar (its clock started with the first step, as tqdm's and Keras' do: the
    initialisation before it, ``Timeline.init_s``, is added as it was) and Composer's
    ``RuntimeEstimator``."""

    steps_done: int
    elapsed_s: float
    predicted_total_s: float | None
    interval_s: tuple[float, float] | None
    step_time_s: float | None
    components: tuple[Component, ...]
    progress_bar_total_s: float | None
    composer_total_s: float | None
    signature_ready: bool

    @property
    def eta_s(self) -> float | None:
        """ailens's predicted time still to go."""
        t = self.predicted_total_s
        return None if t is None else max(t - self.elapsed_s, 0.0)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["interval_s"] = None if self.interval_s is None else list(self.interval_s)
        d["components"] = [asdict(c) for c in self.components]
        d["eta_s"] = self.eta_s
        return d


@dataclass(frozen=True)
class TimelineForecast:
    """The result of :func:`forecast_timeline`: ``steps[i]`` is the forecast after step
    ``i + 1``; ``forecast`` is the run's forecast as ``ailens predict`` gives it (made at the
    signature, else at 10 % of the steps, else the latest); ``actual_total_s`` is the run's
    end when it finished all its steps. ``now``: on a run still going, the forecast after
    everything its timeline holds: what ran after its last step (an evaluation that ended
    since, the clock's last reading) counted, as ``--follow`` shows it."""

    timeline: Timeline
    steps: tuple[StepForecast, ...]
    signature_step: int | None
    forecast: Forecast | None
    actual_total_s: float | None
    now: StepForecast | None = None

    def at_step(self, steps_done: int) -> StepForecast | None:
        if 1 <= steps_done <= len(self.steps):
            return self.steps[steps_done - 1]
        return None

    def at_fraction(self, fraction: float) -> StepForecast | None:
        """The forecast at ``fraction`` of the total steps (at least one step)."""
        n = self.timeline.total_steps
        if not n:
            return None
        return self.at_step(max(1, math.floor(fraction * n + 1e-9)))

    @property
    def latest(self) -> StepForecast | None:
        """``now`` on a run still going, else the forecast after the last step."""
        if self.now is not None:
            return self.now
        return self.steps[-1] if self.steps else None

    def to_dict(self, fractions: Iterable[float] | None = None) -> dict:
        """JSON-ready: the run, its forecast, and the per-step forecasts at ``fractions``
        (default: every step)."""
        tl = self.timeline
        if fractions is None:
            rows = list(self.steps)
        else:
            rows = [r for r in (self.at_fraction(f) for f in fractions) if r is not None]
        return {
            "name": tl.name,
            "source": tl.source,
            "unit": tl.unit,
            "steps": tl.steps,
            "total_steps": tl.total_steps,
            "steps_per_epoch": tl.steps_per_epoch,
            "schedule": dict(tl.schedule),
            "sections": {n: c for n, c in _section_counts(tl.sections).items()},
            "end_s": tl.end_s,
            "init_s": tl.init_s,
            "actual_total_s": self.actual_total_s,
            "signature_step": self.signature_step,
            "forecast": None if self.forecast is None else self.forecast.to_dict(),
            "at": [r.to_dict() for r in rows],
            "info": dict(tl.info),
        }


def _section_counts(sections: Iterable[Section]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in sections:
        out[s.name] = out.get(s.name, 0) + 1
    return out


def forecast_timeline(timeline: Timeline, *, config: LensConfig | None = None) -> TimelineForecast:
    """Forecast ``timeline`` at every step through the live Lens's model.

    ``config``: the Lens settings (warm-up, signature rule); default ``LensConfig()``. The
    result holds, after every step, ailens's forecast with its interval and parts, the
    progress-bar ETA and Composer's, and the step at which the signature was ready. (An
    ailens run directory's own recording goes through ``ailens.analyze`` instead: its
    settings and exchanges as recorded, see ``ailens forecast RUN_DIR``.)
    """
    replay = TimelineReplay(config)
    rows: list[tuple] = []
    replay.feed(timeline, watch=lambda o: rows.append((o.predict(), o.total_steps)))
    oa = replay.oa
    result = timeline_forecast(timeline, oa, rows, oa.forecast(actual_total_s=oa.actual_total_s))
    if timeline.end_s is None:
        result = replace(result, now=replay.latest())
    return result


def timeline_forecast(
    tl: Timeline, oa: OnlineAnalysis, rows: list[tuple], forecast: Forecast | None
) -> TimelineForecast:
    """The :class:`TimelineForecast` of ``tl`` from the model ``oa`` it was fed to, the
    per-step ``rows`` (prediction, total steps) read as it went and the run's ``forecast``
    (``ailens.analyze`` places a run directory's in the job)."""
    return TimelineForecast(
        timeline=tl,
        steps=_beside_baselines(tl, rows, oa.signature_step),
        signature_step=oa.signature_step,
        forecast=forecast,
        actual_total_s=oa.actual_total_s,
    )


class TimelineReplay:
    """The live Lens's model (``OnlineAnalysis``) fed a timeline as a single-rank Lens driven
    by a clock that follows it would have fed it: the schedule as a mark, each step end, each
    section as a mark after the step end it follows, and an evaluation point wherever that
    Lens's exchange cadence puts one. A timeline that grows (a log being written: ``ailens
    forecast --follow``) is fed what it adds, each event once, so feeding it in pieces gives
    the numbers of feeding it whole; one that changed what was fed (a log replaced, a
    restart merged differently) needs a new replay (``extends`` says which)."""

    def __init__(self, config: LensConfig | None = None) -> None:
        self.cfg = config or LensConfig()
        self.oa = OnlineAnalysis(self.cfg, 1, 0, [])
        self.timeline: Timeline | None = None  # what was fed
        self._cadence = Cadence(
            1 << 62,
            self.cfg.exchange_seconds,
            self.cfg.signature_window // 2,
            elapsed_share=self.cfg.exchange_elapsed_share,
        )
        self._seq = 0
        self._schedule: dict = {}
        self._sections: list[tuple[int, int]] = []  # (steps done, step) of each section fed

    @property
    def closed(self) -> bool:
        """The timeline fed said the run ended: nothing more can follow."""
        return self.timeline is not None and self.timeline.end_s is not None

    def extends(self, tl: Timeline) -> bool:
        """``tl`` holds everything fed so far as it was fed (step ends, sections where they
        were placed, the schedule's values), so feeding it adds only what came after."""
        old = self.timeline
        if old is None:
            return True
        n, k = old.steps, len(old.sections)
        if self.closed or tl.steps < n or tl.step_end_s[:n] != old.step_end_s:
            return False
        if tl.reading_steps[: len(old.reading_steps)] != old.reading_steps:
            return False
        if tl.sections[:k] != old.sections:
            return False
        ends = tl.step_end_s
        if any(_placed(ends, s) != at for s, at in zip(tl.sections, self._sections, strict=False)):
            return False
        last = ends[n - 1] if n else -math.inf
        if any(s.end_s <= last for s in tl.sections[k:]):
            return False  # a section placed among steps already fed
        return all(tl.schedule.get(key) == v for key, v in self._schedule.items())

    def feed(self, tl: Timeline, *, watch=None) -> None:
        """Feed what ``tl`` adds to the timeline fed so far (``extends(tl)`` must hold);
        ``watch(oa)`` runs after each step end. A timeline that says the run ended closes
        the model."""
        if not self.extends(tl):
            raise ValueError(
                f"{tl.name or 'timeline'}: it changed what was already fed; start a new replay"
            )
        n = 0 if self.timeline is None else self.timeline.steps
        k = 0 if self.timeline is None else len(self.timeline.sections)
        ends = list(tl.step_end_s)
        step_ns = np.round(np.asarray(_known_at(tl)[n:], dtype=float) * 1e9).astype(np.int64)
        # Events in the order a Lens records them: (steps done, order within that step, mark).
        events: list[tuple[int, float, dict | None]] = []
        sched = {
            key: v
            for key, v in tl.schedule.items()
            if v is not None and self._schedule.get(key) != v
        }
        if sched:
            events.append((n, -1.0, {"kind": "schedule", **sched, "step": n}))
            self._schedule.update(sched)
        for s in tl.sections[k:]:
            at, step = _placed(ends, s)
            self._sections.append((at, step))
            mark = {
                "kind": "section",
                "name": s.name,
                "step": step,
                "t_begin_ns": round(s.begin_s * 1e9),
                "t_end_ns": round(s.end_s * 1e9),
            }
            events.append((at, s.end_s, mark))
        # The exchanges of a single-rank Lens: an evaluation point at the step ends its
        # cadence picks (the first after signature_window // 2 steps, then about every
        # exchange_seconds).
        cadence = self._cadence
        for k_done, t in enumerate(step_ns.tolist(), n + 1):
            if cadence.due(0, k_done, alone=True):
                cadence.done(0, k_done, t, cadence.propose(k_done, t))
                events.append((k_done, -0.5, None))  # at the step end itself: before a section
        events.sort(key=lambda e: (e[0], e[1]))
        marks, exchanges = [], []
        for at, _, mark in events:
            self._seq += 1
            if mark is None:
                exchanges.append((self._seq, at, 0, 0))
            else:
                marks.append({**mark, "seq": self._seq, "at_step": at})
        empty = np.zeros(0, dtype=np.int64)

        def batch(lo: int, hi: int, disabled: int):
            return Summed(empty, empty, empty, 0, False, 0), empty, empty

        end_ns = None if tl.end_s is None else round(tl.end_s * 1e9)
        feed_recorded(self.oa, step_ns, marks, exchanges, batch, end_ns, watch, first_step=n)
        self.timeline = tl

    def latest(self) -> StepForecast | None:
        """The forecast after the last step fed, with the baselines beside it."""
        tl, oa = self.timeline, self.oa
        if tl is None or not tl.steps:
            return None
        (row,) = _beside_baselines(tl, [(oa.predict(), oa.total_steps)], oa.signature_step)
        return row


def _known_at(tl: Timeline) -> list[float]:
    """When each step's end is known to a Lens that reads the clock where the log did: at
    its own reading; a step between two readings shares the previous reading's time (it
    ended, its time is not read yet), so the model takes the interval's time as one
    observation shared by its steps, as it does a coarse clock's."""
    ends = tl.step_end_s
    if not tl.reading_steps:
        return list(ends)
    out, last, reads = [], 0.0, set(tl.reading_steps)
    for k, t in enumerate(ends, 1):
        if k in reads:
            last = t
        out.append(last)
    return out


def _placed(ends: list[float] | tuple[float, ...], s: Section) -> tuple[int, int]:
    """Where a Lens records section ``s`` among the step ends: (steps done when it ended,
    steps done when it began). One that ends with a step (the same clock reading) ended
    before it, as section_end comes before that step_end."""
    return bisect.bisect_left(ends, s.end_s), bisect.bisect_right(ends, s.begin_s)


def _beside_baselines(tl: Timeline, rows: list[tuple], sig: int | None) -> tuple:
    """Each step's forecast (``rows``: prediction, total steps) with the baselines beside."""
    ends = list(tl.step_end_s)
    # Baselines: evaluations finished by each step end (with the steps done when each ended),
    # and when Composer's clock started (the end of the first step).
    evals = [s for s in tl.sections if s.name.lower().startswith("eval")]
    first_end = ends[0] if ends else math.inf
    init = tl.init_s  # the progress bar's clock starts after it
    out = []
    j = 0
    done: dict[str, list[tuple[int, float]]] = {}
    for p, n in rows:
        t = p.elapsed_s
        while j < len(evals) and evals[j].end_s <= ends[p.steps_done - 1]:
            e = evals[j]
            done.setdefault(e.name, []).append(
                (bisect.bisect_right(ends, e.end_s), e.end_s - e.begin_s)
            )
            j += 1
        out.append(
            StepForecast(
                steps_done=p.steps_done,
                elapsed_s=t,
                predicted_total_s=p.predicted_total_s,
                interval_s=p.interval_s,
                step_time_s=p.step_time_s,
                components=p.components,
                progress_bar_total_s=_plus(init, naive_total_s(t - init, p.steps_done, n)),
                composer_total_s=composer_total_s(
                    t, p.steps_done, n, done, clock_start_s=first_end
                ),
                signature_ready=sig is not None and p.steps_done >= sig,
            )
        )
    return tuple(out)


def _plus(offset: float, total: float | None) -> float | None:
    return None if total is None else offset + total
