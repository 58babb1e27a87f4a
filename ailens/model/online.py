"""The run model: phases, forecast and signature, kept up to date during training.

``OnlineAnalysis`` is fed three kinds of events, in the order they happened: step ends
(``on_step``, rank 0's clock), exchanged tick batches (``on_batch``, identical on every rank)
and run-structure marks (``on_mark``: schedules, sections). The trace records all three, so
the offline analysis (``feed_recorded``) feeds this same class the same events and gets the
same numbers; nothing is re-simulated. It writes and prints nothing: live outputs (rank 0's
progress lines and forecast.json, ``live.py``) subscribe to it.

The signature and the forecast history are evaluated at each exchanged batch: those are the
points where every rank can act on them together (early stop is voted there). The forecast
itself can be read at any step (``predict``, ``live_forecast``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..phases import SIZE_KEY_FACTOR, OnlinePhases
from ..record.config import LensConfig
from ..record.exchange import Summed
from .forecast import Forecast, Forecaster, Prediction, Snapshot
from .forecast.epoch import EpochForecast, epoch_forecast
from .forecast.policy import ForecastPolicy

# Forecast history kept for plots: thinned by half whenever it reaches this length.
_HISTORY_CAP = 512
# lens.forecast recomputes at most this often (the Lens's clock, ns); it is read every step
# (progress bars). Each recomputation is a snapshot (the recurring-extras search: 0.1-0.5 ms
# with hundreds of outliers): at 0.1 s that was up to 0.5 % of the training thread for a
# figure shown in seconds (issue 33). Short runs refresh sooner: after a quarter more steps.
_LIVE_REFRESH_NS = 1_000_000_000
# Step ends are queued and folded into the forecast in bulk, at the latest after this many
# steps or this much training time (or at any reading): a step end costs an append, and the
# forecast's work runs in one warm loop instead of once after every (cache-cold) step.
_STEP_BATCH = 64
_STEP_BATCH_NS = 250_000_000
# Between exchanges the forecast history also gets points on a geometric grid of steps (each
# step at first, then this factor apart): a short run's first forecasts are kept, at a cost
# that grows with the log of the steps.
_POINT_GROWTH = 1.25


@dataclass(frozen=True)
class LiveForecast:
    """``Lens.forecast``: the prediction at ``step``; seconds since the Lens started."""

    step: int
    total_steps: int | None
    predicted_total_s: float | None
    interval_s: tuple[float, float] | None
    eta_s: float | None  # predicted seconds still to go
    naive_eta_s: float | None  # what a progress bar would say is still to go
    elapsed_s: float
    step_time_s: float | None
    signature_ready: bool
    # When the current epoch ends (the steps per epoch known): shown whether or not the
    # run's total is known.
    epoch: EpochForecast | None = None


class Subscriber(Protocol):
    """What a live output of the run model gets (``OnlineAnalysis.subscribe``)."""

    # Fold the queued step ends in at every multiple of this many steps (0: never), so the
    # subscriber sees those steps when they end (a progress line is due there).
    flush_every: int

    def on_step(self, oa: OnlineAnalysis) -> None:
        """A step end was fed to the forecast."""

    def on_signature(self, oa: OnlineAnalysis) -> None:
        """The signature was reached."""

    def on_evaluation(self, oa: OnlineAnalysis, snap: Snapshot, p: Prediction) -> None:
        """An evaluation point: ``snap`` is the state now, ``p`` its evaluation."""


class OnlineAnalysis:
    """The run model on one rank: online phase table, forecast and signature. Pure: what it
    shows the user, its subscribers show (``subscribe``)."""

    def __init__(self, cfg: LensConfig, world_size: int, rank: int, op_names: list[str]) -> None:
        self.cfg = cfg
        self.world_size = world_size
        self.rank = rank
        self.op_names = op_names  # shared with the Lens, grows as ops appear
        self.phases = OnlinePhases(tolerance=cfg.tolerance, min_share=cfg.min_phase_share)
        self.forecaster = Forecaster(warmup_steps=cfg.warmup_steps)
        self.policy = ForecastPolicy(
            rel_tol=cfg.signature_rel_tol,
            part_precision=cfg.signature_part_precision,
            min_steps=cfg.signature_min_steps,
        )
        self.disabled_ranks = 0
        self.history: list[tuple[int, float]] = []
        self._history_stride = 1
        self._evaluations = 0
        self.end_ns: int | None = None
        self._live_cache: tuple[int, LiveForecast] | None = None
        self._queued: list[int] = []  # step end times (ns) not yet in the forecast
        self._subscribers: list[Subscriber] = []
        self._flush_every = 0
        self._next_point = 1  # steps at which the next geometric history point is due

    def subscribe(self, subscriber: Subscriber) -> None:
        """``subscriber`` sees every step end fed to the forecast and the signature."""
        self._subscribers.append(subscriber)
        self._flush_every = subscriber.flush_every or self._flush_every

    @property
    def steps(self) -> int:
        return self.forecaster.steps + len(self._queued)

    @property
    def total_steps(self) -> int | None:
        return self.forecaster.schedule.total_steps

    @property
    def signature_ready(self) -> bool:
        return self.policy.signature_ready

    @property
    def signature_step(self) -> int | None:
        return self.policy.signature_step

    # ------------------------------------------------------------ feeding

    def on_step(self, step: int, t_ns: int) -> None:
        """Step ``step`` (0-based) ended at ``t_ns`` on this rank's clock. Queued: every
        reading, batch and mark folds the queue in first, so the numbers are those of feeding
        each step at once."""
        queued = self._queued
        queued.append(t_ns)
        every = self._flush_every
        if (
            len(queued) >= _STEP_BATCH
            or t_ns - queued[0] >= _STEP_BATCH_NS
            or (every and (step + 1) % every == 0)
        ):
            self._catch_up()

    def _catch_up(self) -> None:
        """Feed the queued step ends to the forecast, one by one, as they came."""
        queued, self._queued = self._queued, []
        forecaster, policy, subscribers = self.forecaster, self.policy, self._subscribers
        for t_ns in queued:
            forecaster.on_step(t_ns)
            if policy.early is None:
                policy.on_step(forecaster)
            if forecaster.steps >= self._next_point:
                self._point()
            for sub in subscribers:
                sub.on_step(self)

    def on_batch(self, summed: Summed, key: np.ndarray, tick_steps: np.ndarray) -> None:
        """An exchanged batch of ticks (possibly empty): phases, then an evaluation point."""
        self._catch_up()
        self.disabled_ranks = max(self.disabled_ranks, summed.disabled_ranks)
        if len(key):
            key = np.asarray(key)
            op = key // SIZE_KEY_FACTOR if self.cfg.phase_key == "op+size" else None
            self.phases.add(summed.simo, key, summed.comm_ns / 1e9, summed.compute_ns / 1e9, op=op)
        self._evaluate()

    def on_mark(self, mark: dict) -> None:
        """A run-structure mark the Lens recorded (schedule, section, info)."""
        self._catch_up()
        kind = mark.get("kind")
        if kind == "schedule":
            self.forecaster.on_schedule(mark)
            self._live_cache = None  # what the run will do changed: so does its forecast
        elif kind == "section":
            self.forecaster.on_section(
                str(mark["name"]), int(mark["step"]), int(mark["t_begin_ns"]), int(mark["t_end_ns"])
            )

    def on_close(self, end_ns: int, *, crashed: bool = False) -> None:
        """The run ended (the Lens closed) at ``end_ns``; with no total given, the steps done
        are the total (a run that was not stopped early, nor ended by an uncaught exception,
        ran all its steps). A crashed run has no actual total."""
        self._catch_up()
        if crashed:
            return
        self.end_ns = end_ns
        if not self.total_steps and not self.cfg.early_stop and self.steps:
            self.forecaster.on_schedule({"total_steps": self.steps, "learned": True})

    # ------------------------------------------------------------ evaluation

    def snapshot(self) -> Snapshot:
        """The forecaster's state now, the queued steps folded in. One reading of several
        views (``forecast``, ``predict``, ``epoch_forecast``: forecast.json has all three)
        passes it to each as ``snapshot=``: each snapshot costs the recurring-extras search."""
        self._catch_up()
        return self.forecaster.snapshot()

    def predict(self, snapshot: Snapshot | None = None) -> Prediction:
        """The forecast now (of ``snapshot``, when the caller has it already)."""
        return (snapshot if snapshot is not None else self.snapshot()).evaluate()

    def _evaluate(self) -> None:
        snap = self.forecaster.snapshot()
        p = snap.evaluate()
        if p.predicted_total_s is not None:
            self._record(p.steps_done, p.predicted_total_s)
        if self.policy.on_evaluation(snap, p, self.forecaster.level):
            for sub in self._subscribers:
                sub.on_signature(self)
        # What progress bars read: this evaluation's, so a read within the refresh time
        # after an exchange costs no second snapshot (issue 33: the snapshot's recurring-
        # extras search was half of ailens's CPU at >= 50 ms steps).
        self._refresh_live(snap, p)
        for sub in self._subscribers:
            sub.on_evaluation(self, snap, p)

    def _point(self) -> None:
        """A geometric history point (see ``_POINT_GROWTH``)."""
        s = self.forecaster.steps
        self._next_point = max(s + 1, math.ceil(s * _POINT_GROWTH))
        p = self.forecaster.predict()
        if p.predicted_total_s is not None:
            self._record(p.steps_done, p.predicted_total_s)

    def _record(self, steps_done: int, predicted_total_s: float) -> None:
        """The forecast history: at most once per step, thinned to stay under the cap."""
        self._evaluations += 1
        if self._evaluations % self._history_stride == 0:
            if self.history and self.history[-1][0] == steps_done:
                self.history[-1] = (steps_done, predicted_total_s)
            else:
                self.history.append((steps_done, predicted_total_s))
            if len(self.history) >= _HISTORY_CAP:
                self.history = self.history[::2]
                self._history_stride *= 2

    @property
    def now_ns(self) -> int:
        """The Lens's clock at the latest step end (a replay's clock follows the log)."""
        return self._queued[-1] if self._queued else self.forecaster.t_last

    def live_forecast(self) -> LiveForecast | None:
        """The current prediction; recomputed at most every 1 s of the Lens's clock (or
        after a quarter more steps), so it can be read every step."""
        now = self.now_ns
        cached = self._live_cache
        if cached is not None:
            step = cached[1].step
            # Also after a quarter more steps: a short run's first forecast (its first steps
            # slow) must not stand for all of it when it lasts less than the refresh time.
            fresh = now - cached[0] < _LIVE_REFRESH_NS and self.steps - step < max(step // 4, 1)
            if step == self.steps or fresh:
                return cached[1]
        snap = self.snapshot()
        return self._refresh_live(snap, snap.evaluate())

    def _refresh_live(self, snap: Snapshot, p: Prediction) -> LiveForecast | None:
        """The live forecast of ``snap`` (evaluated as ``p``), kept as the one reads get until
        the next refresh; None before a step time is known."""
        if p.step_time_s is None:
            return None
        total = p.predicted_total_s
        live = LiveForecast(
            step=p.steps_done,
            total_steps=p.total_steps,
            predicted_total_s=total,
            interval_s=p.interval_s,
            eta_s=None if total is None else max(total - p.elapsed_s, 0.0),
            naive_eta_s=None if p.naive_total_s is None else p.naive_total_s - p.elapsed_s,
            elapsed_s=p.elapsed_s,
            step_time_s=p.step_time_s,
            signature_ready=self.signature_ready,
            epoch=self.epoch_forecast(snap),
        )
        self._live_cache = (self.now_ns, live)
        return live

    def forecast(
        self,
        *,
        actual_total_s: float | None = None,
        job_offset_s: float | None = None,
        actual_job_total_s: float | None = None,
        snapshot: Snapshot | None = None,
    ) -> Forecast | None:
        """The run's forecast (``ForecastPolicy`` picks it); None before any step time after
        the warm-up. ``snapshot``: :meth:`snapshot`, when the caller has it already."""
        latest = snapshot if snapshot is not None else self.snapshot()
        if latest.level is None:
            return None
        return self.policy.forecast(
            latest,
            self.total_steps,
            history=tuple(self.history),
            steps_done=self.steps,
            actual_total_s=actual_total_s,
            job_offset_s=job_offset_s,
            actual_job_total_s=actual_job_total_s,
        )

    def epoch_forecast(self, snapshot: Snapshot | None = None) -> EpochForecast | None:
        """When the current epoch ends, once the steps per epoch and a step time are known."""
        snap = snapshot if snapshot is not None else self.snapshot()
        return epoch_forecast(snap, self.forecaster.schedule.steps_per_epoch)

    @property
    def actual_total_s(self) -> float | None:
        """Rank 0's clock at the run's end, once it ran all its steps."""
        n = self.total_steps
        if self.end_ns is None or not n or self.steps < n:
            return None
        return self.end_ns / 1e9

    def table(self):
        return self.phases.table(op_names=self.op_names)


def feed_recorded(
    oa: OnlineAnalysis,
    step_t_ns: np.ndarray,
    marks: list[dict],
    exchanges: list[tuple[int, int, int, int]],
    batch,
    end_ns: int | None,
    watch=None,
    crashed: bool = False,
    first_step: int = 0,
    first_tick: int = 0,
) -> None:
    """Feed a recorded stream of rank 0 to ``oa`` in the order the Lens fed it.

    ``exchanges``: (seq, steps done, ticks covered, disabled ranks) per exchanged batch;
    ``batch(lo, hi, disabled)`` returns the ``on_batch`` arguments for ticks [lo, hi). Marks
    and exchanges are ordered by the steps done when they were recorded, then their ``seq``;
    each comes after the step end it followed. ``watch(oa)`` runs after each step end (a
    benchmark reads the forecast a user would have seen there). A stream fed in pieces (a
    log that grows) continues after ``first_step`` steps and ``first_tick`` ticks fed
    before: ``step_t_ns`` then holds the ends of the steps after those."""
    events: list[tuple[int, int, int, object]] = []  # (steps done, seq, kind, payload)
    for m in marks:
        if m.get("kind") in ("schedule", "section"):
            events.append((int(m.get("at_step", m.get("step", 0))), int(m.get("seq", 0)), 0, m))
    lo = first_tick
    for seq, step, ticks, disabled in exchanges:
        events.append((int(step), int(seq), 1, (lo, int(ticks), int(disabled))))
        lo = int(ticks)
    events.sort(key=lambda e: (e[0], e[1]))
    times = np.asarray(step_t_ns).tolist()
    j = 0
    for s in range(first_step, first_step + len(times) + 1):
        while j < len(events) and events[j][0] <= s:
            _, _, kind, payload = events[j]
            j += 1
            if kind == 0:
                oa.on_mark(payload)
            else:
                oa.on_batch(*batch(*payload))
        if s < first_step + len(times):
            oa.on_step(s, int(times[s - first_step]))
            if watch is not None:
                watch(oa)
    if end_ns is not None:
        oa.on_close(int(end_ns), crashed=crashed)
