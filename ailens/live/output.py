"""Rank 0's live outputs of the run model: progress lines (``progress_every``), the live
``forecast.json`` (rewritten at the first forecast and then at steps ``_WRITE_GROWTH`` apart
and at least ``_WRITE_GROWTH_NS``, so a short run has one at its first steps; past that at
most every ``_WRITE_EVERY_STEPS`` steps and ``_WRITE_EVERY_NS``; once the model evaluates, at
its evaluations, with their snapshots; at the signature, at close and at the process's
exit), one line saying how to give the run's length when nothing said
it, and, at close, ``phases-online.json``. A subscriber of ``OnlineAnalysis``: the model
itself writes nothing."""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable
from pathlib import Path

from .._io import fmt_s, write_json
from ..model.forecast import Prediction, Snapshot
from ..model.forecast.epoch import LENGTH_HINT
from ..model.online import OnlineAnalysis

log = logging.getLogger("ailens")

# Live forecast.json: at most every this many steps and seconds (plus progress lines,
# signature and finish), so the file costs the training loop nothing measurable.
_WRITE_EVERY_STEPS = 100
_WRITE_EVERY_NS = 2_000_000_000
# Before that, forecast.json is rewritten at steps this factor apart (from the first forecast
# on): a run of tens of steps has its forecast on disk at its first steps. Those rewrites are
# at least _WRITE_GROWTH_NS apart: on short steps they came every step or two (the k-means
# example, 61 ms steps: 12 rewrites of ~1.5 ms in its first 1.8 s); 0.5 s apart they were
# still 29 us a step of its attribution at steps 60-290 (issue 33): a second apart.
_WRITE_GROWTH = 1.25
_WRITE_GROWTH_NS = 1_000_000_000


class LiveOutput:
    """Progress lines and forecast.json of ``oa`` (rank 0 of a live run), subscribed to it.

    ``job_offset_s`` and ``process_start_wall_ns``: the process start, when known (the
    forecast's job fields); ``io_failed``: a disk problem was seen, forecast.json is off."""

    def __init__(
        self,
        oa: OnlineAnalysis,
        *,
        job_offset_s: float | None = None,
        process_start_wall_ns: int | None = None,
    ) -> None:
        self.oa = oa
        self.cfg = oa.cfg
        self.flush_every = oa.cfg.progress_every
        self.job_offset_s = job_offset_s  # process start -> Lens start
        self.process_start_wall_ns = process_start_wall_ns
        self.exit_wall_ns: int | None = None
        self.io_failed = False
        # Told of a failed write (the Lens routes it to its one disk warning); None: logged here.
        self.on_io_error: Callable[[str], None] | None = None
        self._last_write_step = 0
        self._last_write_ns = 0  # the Lens's clock, like every time here
        self._next_write_step = 1  # the next geometric rewrite of forecast.json
        self._hinted = False  # the length hint was shown
        self._at_evaluations = False  # the model evaluates: rewrites come there
        oa.subscribe(self)

    @classmethod
    def for_run(cls, oa: OnlineAnalysis, *, lens_start_wall_ns: int, process_start_wall_ns):
        """The live outputs of a run whose Lens started at ``lens_start_wall_ns``; the
        process start counts only when known and not after it."""
        proc = process_start_wall_ns
        known = bool(proc and proc <= lens_start_wall_ns)
        return cls(
            oa,
            job_offset_s=(lens_start_wall_ns - proc) / 1e9 if known else None,
            process_start_wall_ns=proc if known else None,
        )

    # ------------------------------------------------------------ events of the model

    def on_step(self, oa: OnlineAnalysis) -> None:
        s = oa.steps
        every = self.flush_every
        line = bool(every) and s % every == 0
        # Once the model evaluates (at each exchange), forecast.json's rewrites come there,
        # with that evaluation's snapshot (see on_evaluation); before, at the step ends.
        due = not self._at_evaluations and self._write_due(oa)
        if not self._hinted and s > self.cfg.warmup_steps and oa.total_steps is None:
            self._hint()
        if not (line or due):
            return
        if line:
            _progress(self.progress_line())
        self._write_forecast(final=False)

    def on_evaluation(self, oa: OnlineAnalysis, snap: Snapshot, p: Prediction) -> None:
        """An evaluation point (an exchange): forecast.json is rewritten here when due, or
        when the signature was reached here, from the evaluation's snapshot. A rewrite at
        the step end before it made a snapshot of its own, of the same state (on ~1 s steps
        nearly every rewrite; issue 33)."""
        self._at_evaluations = True
        if self._write_due(oa) or oa.signature_step == oa.steps != self._last_write_step:
            self._write_forecast(final=False, evaluated=(snap, p))

    def _write_due(self, oa: OnlineAnalysis) -> bool:
        """Whether forecast.json is due for a rewrite at the step fed last: at steps
        ``_WRITE_GROWTH`` apart and ``_WRITE_GROWTH_NS``, or ``_WRITE_EVERY_STEPS`` and
        ``_WRITE_EVERY_NS`` after the last one."""
        s = oa.steps
        since_ns = oa.now_ns - self._last_write_ns
        return (
            s >= self._next_write_step
            and (not self._last_write_step or since_ns >= _WRITE_GROWTH_NS)
        ) or (s - self._last_write_step >= _WRITE_EVERY_STEPS and since_ns >= _WRITE_EVERY_NS)

    def _hint(self) -> None:
        """Once, when the step time is known and nothing said the run's length: the step
        time, the end of the current epoch when the steps per epoch are known, and how to
        give the length."""
        snap = self.oa.snapshot()
        p = self.oa.predict(snap)
        if p.step_time_s is None:
            return
        self._hinted = True
        known = f"step time {fmt_s(p.step_time_s, 'compact')}"
        ep = self.oa.epoch_forecast(snap)
        if ep is not None:
            known += f", epoch {ep.epoch} ends in {fmt_s(ep.eta_s, 'compact')}"
            known += f" (step {ep.epoch_end_step})"
        _progress(f"ailens: {known}; {LENGTH_HINT}")

    def on_signature(self, oa: OnlineAnalysis) -> None:
        n = oa.total_steps
        frac = f" ({100 * oa.steps / n:.1f}% of {n} steps)" if n else ""
        _progress(f"ailens: signature ready at step {oa.steps}{frac}")

    # ------------------------------------------------------------ events of the run

    def finish(self, run_dir: Path) -> None:
        """The run closed: the online phase table and the final forecast to the run
        directory, and the last progress line when the last step was not on one."""
        oa = self.oa
        doc = {
            "source": "online",
            "world_size": oa.world_size,
            "disabled_ranks": oa.disabled_ranks,
            "elapsed_s": None if oa.end_ns is None else oa.end_ns / 1e9,
            "steps": oa.steps,
            "table": oa.table().to_dict(),
            "op_names": list(oa.op_names),
        }
        write_json(Path(run_dir) / "phases-online.json", doc)
        self._write_forecast(final=True)
        every = self.flush_every
        if every and oa.steps % every:
            _progress(self.progress_line())

    def on_exit(self, wall_ns: int) -> None:
        """The process is exiting: the job's wall time is known now (forecast.json is
        rewritten with it)."""
        self.exit_wall_ns = wall_ns
        # Closed: the final document gets the job's end too (unless the run directory has
        # gone meanwhile, e.g. a temporary one: nothing to update then).
        if self.oa.end_ns is not None and Path(self.cfg.run_dir).is_dir():
            self._write_forecast(final=True)

    # ------------------------------------------------------------ outputs

    def progress_line(self) -> str:
        """One line: step, % done, forecast +/- interval, what a progress bar would say,
        signature state."""
        oa = self.oa
        snap = oa.snapshot()
        p = oa.predict(snap)
        s, n = oa.steps, oa.total_steps
        head = f"ailens: step {s}/{n} ({100 * s / n:.1f}%)" if n else f"ailens: step {s}"
        sig = (
            f"signature ready at step {oa.signature_step}"
            if oa.signature_ready
            else "signature pending"
        )
        if p.step_time_s is None:
            return f"{head}  warming up  {sig}"
        if p.predicted_total_s is not None:
            lo, hi = p.interval_s
            body = f"forecast {fmt_s(p.predicted_total_s, 'compact')} ± "
            body += fmt_s((hi - lo) / 2, "compact")
            if p.naive_total_s is not None:
                body += f" (a progress bar would say {fmt_s(p.naive_total_s, 'compact')})"
        else:
            body = f"step time {fmt_s(p.step_time_s, 'compact')} (total steps unknown)"
        ep = oa.epoch_forecast(snap)
        if ep is not None:
            body += f"  epoch {ep.epoch} ends in {fmt_s(ep.eta_s, 'compact')}"
        return f"{head}  {body}  {sig}"

    def forecast_doc(
        self, *, final: bool, evaluated: tuple[Snapshot, Prediction] | None = None
    ) -> dict | None:
        """The forecast.json document now (None before any forecast); ``evaluated``: the
        snapshot of the state now and its evaluation, when the caller has them."""
        oa, cfg = self.oa, self.cfg
        job_end = None
        if self.exit_wall_ns and self.process_start_wall_ns:
            job_end = (self.exit_wall_ns - self.process_start_wall_ns) / 1e9
        # One snapshot for the three views: each costs the extras search.
        snap, latest = evaluated if evaluated is not None else (oa.snapshot(), None)
        f = oa.forecast(
            actual_total_s=oa.actual_total_s if final else None,
            job_offset_s=self.job_offset_s,
            actual_job_total_s=job_end,
            snapshot=snap,
        )
        if f is None:
            return None
        if latest is None:
            latest = oa.predict(snap)
        return {
            "source": "online",
            "final": final,
            "rank": oa.rank,
            "world_size": oa.world_size,
            "steps_done": oa.steps,
            "early_stop": cfg.early_stop,
            "signature_rule": {
                "rel_tol": cfg.signature_rel_tol,
                "part_precision": cfg.signature_part_precision,
                "min_steps": cfg.signature_min_steps,
                "warmup_steps": cfg.warmup_steps,
            },
            **f.to_dict(),
            "latest": {
                "step": latest.steps_done,
                "predicted_total_s": latest.predicted_total_s,
                "interval_s": None if latest.interval_s is None else list(latest.interval_s),
                "naive_total_s": latest.naive_total_s,
                "step_time_s": latest.step_time_s,
            },
            # When the current epoch ends (null until the steps per epoch are known), and,
            # while nothing said the run's length, how to give it.
            "epoch": None if (ep := oa.epoch_forecast(snap)) is None else ep.to_dict(),
            **({"length_hint": LENGTH_HINT} if oa.total_steps is None else {}),
            **({"closed_s": oa.end_ns / 1e9} if final and oa.end_ns is not None else {}),
            **({"exit_wall_ns": self.exit_wall_ns} if self.exit_wall_ns else {}),
        }

    def _write_forecast(
        self, *, final: bool, evaluated: tuple[Snapshot, Prediction] | None = None
    ) -> None:
        if self.io_failed:
            return
        s = self._last_write_step = self.oa.steps
        self._last_write_ns = self.oa.now_ns
        self._next_write_step = max(s + 1, math.ceil(s * _WRITE_GROWTH))
        doc = self.forecast_doc(final=final, evaluated=evaluated)
        if doc is None:
            return
        try:
            # Live rewrites on one line (the C encoder: a third of the indented one's cost,
            # every few seconds on the training thread); the final document indented.
            write_json(Path(self.cfg.run_dir) / "forecast.json", doc, indent=2 if final else None)
        except OSError as e:
            # The forecast file is a convenience: note it once, keep training and tracing.
            self.io_failed = True
            message = f"cannot write forecast.json ({e}); live forecast off, training continues"
            if self.on_io_error is not None:
                self.on_io_error(message)
            else:
                log.warning("ailens: %s", message)


def _progress(line: str) -> None:
    """Progress goes to the ``ailens`` logger when it is configured to show INFO, else to
    stderr (the user asked for these lines with ``progress_every``)."""
    if log.hasHandlers() and log.isEnabledFor(logging.INFO):
        log.info(line)
    else:
        print(line, file=sys.stderr, flush=True)
