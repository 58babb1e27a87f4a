"""What the Lens keeps up to date during training: phases, forecast, signature, live output.

``OnlineAnalysis`` is fed three kinds of events, in the order they happened: step ends
(``on_step``, rank 0's clock), exchanged tick batches (``on_batch``, identical on every rank)
and run-structure marks (``on_mark``: schedules, sections). The trace records all three, so
the offline analysis (``feed_recorded``) feeds this same class the same events and gets the
same numbers; nothing is re-simulated.

The signature and the forecast history are evaluated at each exchanged batch: those are the
points where every rank can act on them together (early stop is voted there). The forecast
itself can be read at any step (``predict``, ``live_forecast``).
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._config import LensConfig
from .._exchange import Summed
from ..phases import SIZE_KEY_FACTOR, OnlinePhases
from .forecast import EARLY_SHARE, Forecast, Forecaster, Prediction, Snapshot, t_quantile

log = logging.getLogger("ailens")

# Live forecast.json: at most every this many steps and seconds (plus progress lines,
# signature and finish), so the file costs the training loop nothing measurable.
_WRITE_EVERY_STEPS = 100
_WRITE_EVERY_NS = 2_000_000_000
# Forecast history kept for plots: thinned by half whenever it reaches this length.
_HISTORY_CAP = 512
# The early forecast of a run that never reached its signature is the one made here.
EARLY_FRACTION = 0.10
# lens.forecast recomputes at most this often (the Lens's clock, ns); it is read every step.
_LIVE_REFRESH_NS = 100_000_000
# Step ends are queued and folded into the forecast in bulk, at the latest after this many
# steps or this much training time (or at any reading): a step end costs an append, and the
# forecast's work runs in one warm loop instead of once after every (cache-cold) step.
_STEP_BATCH = 64
_STEP_BATCH_NS = 250_000_000


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


class OnlineAnalysis:
    """Online phase table, forecast and signature on one rank (``live``: rank 0 prints and
    writes forecast.json)."""

    def __init__(
        self, cfg: LensConfig, world_size: int, rank: int, op_names: list[str], *, live: bool = True
    ) -> None:
        self.cfg = cfg
        self.world_size = world_size
        self.rank = rank
        self.op_names = op_names  # shared with the Lens, grows as ops appear
        self.phases = OnlinePhases(tolerance=cfg.tolerance, min_share=cfg.min_phase_share)
        self.forecaster = Forecaster(warmup_steps=cfg.warmup_steps)
        self.disabled_ranks = 0
        self.live = live and rank == 0
        self.signature_ready = False
        self.signature_step: int | None = None
        self.at_signature: Snapshot | None = None
        self.early: Snapshot | None = None
        self.history: list[tuple[int, float]] = []
        self._history_stride = 1
        self._evaluations = 0
        self.marks: list[dict] = []
        self.end_ns: int | None = None
        self.io_failed = False
        self._last_write_step = 0
        self._last_write_ns = 0  # the Lens's clock, like every time here
        self._live_cache: tuple[int, LiveForecast] | None = None
        self.job_offset_s: float | None = None  # process start -> Lens start (set by the Lens)
        self.exit_wall_ns: int | None = None
        self.process_start_wall_ns: int | None = None
        self._queued: list[int] = []  # step end times (ns) not yet in the forecast

    @property
    def steps(self) -> int:
        return self.forecaster.steps + len(self._queued)

    @property
    def total_steps(self) -> int | None:
        return self.forecaster.schedule.total_steps

    # ------------------------------------------------------------ feeding

    def on_step(self, step: int, t_ns: int) -> None:
        """Step ``step`` (0-based) ended at ``t_ns`` on this rank's clock. Queued: every
        reading, batch and mark folds the queue in first, so the numbers are those of feeding
        each step at once."""
        queued = self._queued
        queued.append(t_ns)
        every = self.cfg.progress_every if self.live else 0
        if (
            len(queued) >= _STEP_BATCH
            or t_ns - queued[0] >= _STEP_BATCH_NS
            or (every and (step + 1) % every == 0)
        ):
            self._catch_up()

    def _catch_up(self) -> None:
        """Feed the queued step ends to the forecast, one by one, as they came."""
        queued, self._queued = self._queued, []
        forecaster, live = self.forecaster, self.live
        for t_ns in queued:
            forecaster.on_step(t_ns)
            n = forecaster.schedule.total_steps
            if (
                n
                and self.early is None
                and forecaster.steps == max(1, math.ceil(EARLY_FRACTION * n))
            ):
                self.early = forecaster.snapshot()
            if live:
                self._live_output()

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
        self.marks.append(mark)
        kind = mark.get("kind")
        if kind == "schedule":
            self.forecaster.on_schedule(mark)
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

    def predict(self) -> Prediction:
        self._catch_up()
        return self.forecaster.predict()

    def _evaluate(self) -> None:
        snap = self.forecaster.snapshot()
        p = snap.evaluate()
        if p.predicted_total_s is not None:
            self._evaluations += 1
            if self._evaluations % self._history_stride == 0:
                if self.history and self.history[-1][0] == p.steps_done:
                    self.history[-1] = (p.steps_done, p.predicted_total_s)
                else:
                    self.history.append((p.steps_done, p.predicted_total_s))
                if len(self.history) >= _HISTORY_CAP:
                    self.history = self.history[::2]
                    self._history_stride *= 2
        if not self.signature_ready and self._converged(p):
            self.signature_ready = True
            self.signature_step = p.steps_done
            self.at_signature = snap
            if self.live:
                self._announce_signature()

    def _converged(self, p: Prediction) -> bool:
        """The signature rule: enough steps, and the forecast's interval within the tolerance
        (the step time's, while the total is unknown)."""
        if p.steps_done < self._signature_min_steps() or p.step_time_s is None:
            return False
        rel = p.half_width_rel
        level = self.forecaster.level
        if rel is None and p.step_time_sd_s is not None and level.n >= 2:
            var, _ = level.mean_var()
            rel = t_quantile(0.975, level.n - 1) * math.sqrt(var) / p.step_time_s
        return rel is not None and rel <= self.cfg.signature_rel_tol

    @property
    def now_ns(self) -> int:
        """The Lens's clock at the latest step end (a replay's clock follows the log)."""
        return self._queued[-1] if self._queued else self.forecaster.t_last

    def _signature_min_steps(self) -> int:
        """``signature_min_steps``, or 5 % of a run of tens of steps (epochs, blocks): the
        interval decides there, not a count of steps meant for runs of thousands."""
        n = self.total_steps
        m = self.cfg.signature_min_steps
        return min(m, max(math.ceil(EARLY_SHARE * n), 2)) if n else m

    def live_forecast(self) -> LiveForecast | None:
        """The current prediction; recomputed at most every 0.1 s of the Lens's clock (or
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
        self._catch_up()
        p = self.forecaster.predict()
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
        )
        self._live_cache = (now, live)
        return live

    def forecast(
        self,
        *,
        actual_total_s: float | None = None,
        job_offset_s: float | None = None,
        actual_job_total_s: float | None = None,
    ) -> Forecast | None:
        """The run's forecast: the one made at the signature, else at 10 % of the steps once
        the run got there, else the latest; None before any step time after the warm-up."""
        self._catch_up()
        latest = self.forecaster.snapshot()
        if latest.level is None:
            return None
        if self.at_signature is not None:
            snap, basis = self.at_signature, "signature"
        elif self.early is not None:
            snap, basis = self.early, "early"
        else:
            snap, basis = latest, "latest"
        n = self.total_steps
        p = snap.evaluate(n)  # with the total known now (it may have been learned since)
        sig = self.signature_step
        note = ""
        if n is None:
            note = "total_steps unknown: per-step time only (set total_steps for a total)"
        return Forecast(
            predicted_total_s=p.predicted_total_s,
            interval_s=p.interval_s,
            signature_step=sig,
            signature_fraction=None if sig is None or not n else sig / n,
            actual_total_s=actual_total_s,
            history=tuple(self.history),
            made_at_step=p.steps_done,
            basis=basis,
            elapsed_s=p.elapsed_s,
            total_steps=n,
            naive_eta_s=None if p.naive_total_s is None else p.naive_total_s - p.elapsed_s,
            naive_total_s=p.naive_total_s,
            step_time_s=p.step_time_s,
            step_time_sd_s=p.step_time_sd_s,
            regime_start_step=p.regime_start_step,
            components=p.components,
            steps_done=self.steps,
            job_offset_s=job_offset_s,
            actual_job_total_s=actual_job_total_s,
            signature_rel_tol=self.cfg.signature_rel_tol,
            note=note,
        )

    @property
    def actual_total_s(self) -> float | None:
        """Rank 0's clock at the run's end, once it ran all its steps."""
        n = self.total_steps
        if self.end_ns is None or not n or self.steps < n:
            return None
        return self.end_ns / 1e9

    def table(self):
        return self.phases.table(op_names=self.op_names)

    # ------------------------------------------------------------ output (rank 0)

    def _announce_signature(self) -> None:
        n = self.total_steps
        frac = f" ({100 * self.steps / n:.1f}% of {n} steps)" if n else ""
        _progress(f"ailens: signature ready at step {self.steps}{frac}")

    def _live_output(self) -> None:
        s = self.steps
        every = self.cfg.progress_every
        line = bool(every) and s % every == 0
        due = s - self._last_write_step >= _WRITE_EVERY_STEPS and (
            self.now_ns - self._last_write_ns >= _WRITE_EVERY_NS
        )
        if not (line or due):
            return
        if line:
            _progress(self.progress_line())
        self._write_forecast(final=False)

    def progress_line(self) -> str:
        """One line: step, % done, forecast +/- interval, what a progress bar would say,
        signature state."""
        self._catch_up()
        p = self.forecaster.predict()
        s, n = self.steps, self.total_steps
        head = f"ailens: step {s}/{n} ({100 * s / n:.1f}%)" if n else f"ailens: step {s}"
        sig = (
            f"signature ready at step {self.signature_step}"
            if self.signature_ready
            else "signature pending"
        )
        if p.step_time_s is None:
            return f"{head}  warming up  {sig}"
        if p.predicted_total_s is not None:
            lo, hi = p.interval_s
            body = f"forecast {_fmt(p.predicted_total_s)} ± {_fmt((hi - lo) / 2)}"
            if p.naive_total_s is not None:
                body += f" (a progress bar would say {_fmt(p.naive_total_s)})"
        else:
            body = f"step time {_fmt(p.step_time_s)} (total steps unknown)"
        return f"{head}  {body}  {sig}"

    def _forecast_doc(self, *, final: bool) -> dict | None:
        job_end = None
        if self.exit_wall_ns and self.process_start_wall_ns:
            job_end = (self.exit_wall_ns - self.process_start_wall_ns) / 1e9
        f = self.forecast(
            actual_total_s=self.actual_total_s if final else None,
            job_offset_s=self.job_offset_s,
            actual_job_total_s=job_end,
        )
        if f is None:
            return None
        latest = self.forecaster.predict()
        return {
            "source": "online",
            "final": final,
            "rank": self.rank,
            "world_size": self.world_size,
            "steps_done": self.steps,
            "early_stop": self.cfg.early_stop,
            "signature_rule": {
                "rel_tol": self.cfg.signature_rel_tol,
                "min_steps": self.cfg.signature_min_steps,
                "warmup_steps": self.cfg.warmup_steps,
            },
            **f.to_dict(),
            "latest": {
                "step": latest.steps_done,
                "predicted_total_s": latest.predicted_total_s,
                "interval_s": None if latest.interval_s is None else list(latest.interval_s),
                "naive_total_s": latest.naive_total_s,
                "step_time_s": latest.step_time_s,
            },
            **({"closed_s": self.end_ns / 1e9} if final and self.end_ns is not None else {}),
            **({"exit_wall_ns": self.exit_wall_ns} if self.exit_wall_ns else {}),
        }

    def _write_forecast(self, *, final: bool) -> None:
        if self.io_failed or not self.live:
            return
        self._last_write_step = self.steps
        self._last_write_ns = self.now_ns
        doc = self._forecast_doc(final=final)
        if doc is None:
            return
        try:
            write_json(Path(self.cfg.run_dir) / "forecast.json", doc)
        except OSError as e:
            # The forecast file is a convenience: note it once, keep training and tracing.
            self.io_failed = True
            log.warning("ailens: cannot write forecast.json (%s); live forecast off", e)

    def on_exit(self, wall_ns: int) -> None:
        """The process is exiting: the job's wall time is known now (rank 0 rewrites
        forecast.json with it)."""
        self.exit_wall_ns = wall_ns
        # Closed: the final document gets the job's end too (unless the run directory has
        # gone meanwhile, e.g. a temporary one: nothing to update then).
        if self.end_ns is not None and Path(self.cfg.run_dir).is_dir():
            self._write_forecast(final=True)

    def finish(self, run_dir: Path) -> None:
        """Rank 0 writes the online phase table and the final forecast to the run directory."""
        if self.rank != 0:
            return
        doc = {
            "source": "online",
            "world_size": self.world_size,
            "disabled_ranks": self.disabled_ranks,
            "elapsed_s": None if self.end_ns is None else self.end_ns / 1e9,
            "steps": self.steps,
            "table": self.table().to_dict(),
            "op_names": list(self.op_names),
        }
        write_json(Path(run_dir) / "phases-online.json", doc)
        self._write_forecast(final=True)
        every = self.cfg.progress_every
        if self.live and every and self.steps % every:
            _progress(self.progress_line())


def feed_recorded(
    oa: OnlineAnalysis,
    step_t_ns: np.ndarray,
    marks: list[dict],
    exchanges: list[tuple[int, int, int, int]],
    batch,
    end_ns: int | None,
    watch=None,
    crashed: bool = False,
) -> None:
    """Feed a recorded stream of rank 0 to ``oa`` in the order the Lens fed it.

    ``exchanges``: (seq, steps done, ticks covered, disabled ranks) per exchanged batch;
    ``batch(lo, hi, disabled)`` returns the ``on_batch`` arguments for ticks [lo, hi). Marks
    and exchanges are ordered by the steps done when they were recorded, then their ``seq``;
    each comes after the step end it followed. ``watch(oa)`` runs after each step end (a
    benchmark reads the forecast a user would have seen there)."""
    events: list[tuple[int, int, int, object]] = []  # (steps done, seq, kind, payload)
    for m in marks:
        if m.get("kind") in ("schedule", "section"):
            events.append((int(m.get("at_step", m.get("step", 0))), int(m.get("seq", 0)), 0, m))
    lo = 0
    for seq, step, ticks, disabled in exchanges:
        events.append((int(step), int(seq), 1, (lo, int(ticks), int(disabled))))
        lo = int(ticks)
    events.sort(key=lambda e: (e[0], e[1]))
    times = np.asarray(step_t_ns).tolist()
    j = 0
    for s in range(len(times) + 1):
        while j < len(events) and events[j][0] <= s:
            _, _, kind, payload = events[j]
            j += 1
            if kind == 0:
                oa.on_mark(payload)
            else:
                oa.on_batch(*batch(*payload))
        if s < len(times):
            oa.on_step(s, int(times[s]))
            if watch is not None:
                watch(oa)
    if end_ns is not None:
        oa.on_close(int(end_ns), crashed=crashed)


def _fmt(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    if s >= 3600:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    if s >= 60:
        return f"{int(s // 60)}m{s % 60:04.1f}s"
    if s >= 1:
        return f"{s:.2f}s"
    return f"{s * 1e3:.2f}ms"


def _progress(line: str) -> None:
    """Progress goes to the ``ailens`` logger when it is configured to show INFO, else to
    stderr (the user asked for these lines with ``progress_every``)."""
    if log.hasHandlers() and log.isEnabledFor(logging.INFO):
        log.info(line)
    else:
        print(line, file=sys.stderr, flush=True)


def read_json(path: Path) -> dict | None:
    """A JSON object file, or None when it is missing, unreadable or not an object (the
    optional side files of a run: forecast.json, calibration.json)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_json(path: Path, doc: dict, *, indent: int | None = 2, sort_keys: bool = False) -> None:
    """Write JSON atomically (temp file + rename) so readers never see half a file."""
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    data = (json.dumps(doc, indent=indent, sort_keys=sort_keys) + "\n").encode()
    try:
        # 0o644 & ~umask: never world-writable, even at umask 000.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk must not leave half-written temp files
        raise
