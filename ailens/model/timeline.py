"""Forecast any run that can be described as a timeline, through the live Lens's own model.

A :class:`Timeline` is what a log says about a run: when each training step ended, the
intervals of named sections (``"eval"``, ``"checkpoint"``, ``"init"``, ...), the schedule the
script knows (the keywords of ``Lens.set_schedule``) and, once it is over, when the run ended.
:func:`forecast_timeline` feeds it to ``OnlineAnalysis`` exactly as a single-rank ``Lens``
driven by a clock that follows the timeline would: the schedule as a mark at the start, each
step end, each section as a mark after the step end it follows, and an evaluation point
wherever that Lens's exchange cadence puts one (so the signature lands on the same step).
There is no second model: the numbers are the live ones.

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
from .baselines import composer_total_s, naive_total_s
from .forecast import Component, Forecast
from .online import OnlineAnalysis, feed_recorded

__all__ = ["Section", "StepForecast", "Timeline", "TimelineForecast", "forecast_timeline"]

# The keywords of Lens.set_schedule, and the extension of the forecast's schedule.
SCHEDULE_KEYS = (
    "total_steps",
    "steps_per_epoch",
    "epochs",
    "eval_every_epochs",
    "eval_every_steps",
    "eval_steps",
    "checkpoint_every_steps",
    "eval_start_step",
    "eval_start_epoch",
    "eval_at_steps",
    "eval_at_epochs",
    "eval_samples",
    "samples_per_step",
)


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
    benchmark, ranks, ...).
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

    @property
    def total_steps(self) -> int | None:
        n = self.schedule.get("total_steps")
        return int(n) if n else None

    @property
    def steps(self) -> int:
        return len(self.step_end_s)

    @property
    def finished(self) -> bool:
        """The run ended after all its steps (its actual total is known)."""
        n = self.total_steps
        return self.end_s is not None and bool(n) and self.steps >= n

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
    progress bar and Composer's ``RuntimeEstimator``."""

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
    end when it finished all its steps."""

    timeline: Timeline
    steps: tuple[StepForecast, ...]
    signature_step: int | None
    forecast: Forecast | None
    actual_total_s: float | None

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
    progress-bar ETA and Composer's, and the step at which the signature was ready.
    """
    cfg = config or LensConfig()
    tl = timeline
    oa = OnlineAnalysis(cfg, 1, 0, [])
    step_ns = np.round(np.asarray(tl.step_end_s, dtype=float) * 1e9).astype(np.int64)
    marks, exchanges = _recorded(tl, cfg, step_ns)
    empty = np.zeros(0, dtype=np.int64)

    def batch(lo: int, hi: int, disabled: int):
        return Summed(empty, empty, empty, 0, False, 0), empty, empty

    rows: list[tuple] = []

    def watch(o: OnlineAnalysis) -> None:
        p = o.predict()
        rows.append((p, o.total_steps))

    end_ns = None if tl.end_s is None else round(tl.end_s * 1e9)
    feed_recorded(oa, step_ns, marks, exchanges, batch, end_ns, watch)
    sig = oa.signature_step
    actual = oa.actual_total_s
    return TimelineForecast(
        timeline=tl,
        steps=_beside_baselines(tl, rows, sig),
        signature_step=sig,
        forecast=oa.forecast(actual_total_s=actual),
        actual_total_s=actual,
    )


def _recorded(
    tl: Timeline, cfg: LensConfig, step_ns: np.ndarray
) -> tuple[list[dict], list[tuple[int, int, int, int]]]:
    """The marks and exchanges a single-rank Lens would have recorded for ``tl``, in the
    form ``feed_recorded`` takes them."""
    ends = list(tl.step_end_s)
    # Events in the order a Lens records them: (steps done, order within that step, mark).
    events: list[tuple[int, float, dict | None]] = []
    sched = {k: v for k, v in tl.schedule.items() if v is not None}
    if sched:
        events.append((0, -1.0, {"kind": "schedule", **sched, "step": 0}))
    for s in tl.sections:
        events.append(
            (
                # A section that ends with a step (the same clock reading) ended before it,
                # as a Lens records it: section_end comes before that step_end.
                bisect.bisect_left(ends, s.end_s),
                s.end_s,
                {
                    "kind": "section",
                    "name": s.name,
                    "step": bisect.bisect_right(ends, s.begin_s),
                    "t_begin_ns": round(s.begin_s * 1e9),
                    "t_end_ns": round(s.end_s * 1e9),
                },
            )
        )
    # The exchanges of a single-rank Lens: an evaluation point at the step ends its cadence
    # picks (the first after signature_window // 2 steps, then about every exchange_seconds).
    cadence = Cadence(1 << 62, cfg.exchange_seconds, cfg.signature_window // 2)
    for k, t in enumerate(step_ns.tolist(), 1):
        if cadence.due(0, k, alone=True):
            cadence.done(0, k, t, cadence.propose(k, t))
            events.append((k, -0.5, None))  # at the step end itself: before any section
    events.sort(key=lambda e: (e[0], e[1]))
    marks, exchanges = [], []
    for seq, (at, _, mark) in enumerate(events, 1):
        if mark is None:
            exchanges.append((seq, at, 0, 0))
        else:
            marks.append({**mark, "seq": seq, "at_step": at})
    return marks, exchanges


def _beside_baselines(tl: Timeline, rows: list[tuple], sig: int | None) -> tuple:
    """Each step's forecast (``rows``: prediction, total steps) with the baselines beside."""
    ends = list(tl.step_end_s)
    # Baselines: evaluations finished by each step end (with the steps done when each ended),
    # and when Composer's clock started (the end of the first step).
    evals = [s for s in tl.sections if s.name.lower().startswith("eval")]
    first_end = ends[0] if ends else math.inf
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
                progress_bar_total_s=naive_total_s(t, p.steps_done, n),
                composer_total_s=composer_total_s(
                    t, p.steps_done, n, done, clock_start_s=first_end
                ),
                signature_ready=sig is not None and p.steps_done >= sig,
            )
        )
    return tuple(out)
