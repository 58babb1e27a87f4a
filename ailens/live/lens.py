"""The Lens: the framework-free front every integration drives.

It composes three parts and only wires them:

- the recorder (``record/recorder.py``): the event buffer, whose ``begin``/``end`` are bound
  directly as ``collective_begin``/``collective_end`` (the hot path writes integers into
  preallocated columns), the writer thread, and the run's log of step ends, marks and
  exchanges;
- the exchange session (``record/session.py``): at step ends the per-tick summaries
  (``record/ticks.py``) are summed across ranks through the integration's own collective;
- the run model (``OnlineAnalysis``): phases, forecast and signature, fed the exchanged
  batches, step ends and marks, exactly what the recorder logs, so the offline analysis
  feeds the same class the same data. Its live outputs (progress line, ``forecast.json``,
  the :attr:`Lens.forecast` numbers progress bars read) come from it.

Fail open: any exception inside ailens is logged once, the Lens disables itself on that rank
and training goes on. A disabled Lens still counts ticks and steps and still joins the
exchange (flagged as disabled), so no rank waits on a collective that never comes.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import sys
import time
from collections.abc import Callable

from ..model.online import OnlineAnalysis
from ..record.config import LensConfig
from ..record.counters import Counter, open_counter
from ..record.device import DeviceClock, DeviceTimes
from ..record.exchange import Exchange, Summed
from ..record.node import detect_rank_world
from ..record.recorder import Recorder, WriterFactory, schedule_mark
from ..record.schedule import Schedule, keyword_signature
from ..record.session import ExchangeSession
from ..record.ticks import TickSummary
from ..record.writer import WriterThread
from .failopen import FailOpen
from .output import LiveOutput

log = logging.getLogger("ailens")


class Lens:
    """Records collectives and steps on one rank and condenses them into phases online.

    Use as ``with Lens(run_dir="runs/x") as lens: ...``, or call ``close()``; at interpreter
    exit an unclosed Lens closes itself. ``close()`` is collective when an ``exchange`` is
    given and world size > 1: every rank calls it at the same point.

    Keyword arguments are LensConfig fields, or pass ``config=LensConfig(...)``.
    ``rank``/``world_size`` default to the launcher's environment; ``exchange`` (supplied by
    the integration) sums a small int64 array across ranks. ``meta``: what the integration
    knows of the run (threads per rank, batch size, parameter count), kept in the trace
    header under ``"run"``. ``clock`` (ns), ``counter`` and ``writer`` replace the monotonic
    clock, the work counter and the trace writer (tests inject fakes). Its parts:
    ``recorder`` (None until recording), ``session`` (the exchange) and ``online`` (the run
    model, None until recording).
    """

    def __init__(
        self,
        *,
        config: LensConfig | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        exchange: Exchange | None = None,
        meta: dict | None = None,
        clock: Callable[[], int] | None = None,
        work_counter: Counter | None = None,
        writer: WriterFactory | None = None,
        **settings,
    ) -> None:
        cfg = config or LensConfig()
        self.config = cfg = cfg.replace(**settings) if settings else cfg
        env_rank, env_world = detect_rank_world()
        self.rank = env_rank if rank is None else int(rank)
        self.world_size = env_world if world_size is None else int(world_size)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} does not fit world size {self.world_size}")
        self._clock = clock = clock or time.perf_counter_ns
        self.fail_open = FailOpen(self.rank, self._on_disable)
        self.closed = self._crashed = False
        self._steps = 0
        self._close_hooks: list[Callable[[], None]] = []
        self.recorder: Recorder | None = None
        self.online: OnlineAnalysis | None = None
        self.device: DeviceTimes | None = None  # device time, once an integration attaches a clock
        self._live: LiveOutput | None = None  # rank 0's progress lines, forecast.json
        self.session = ExchangeSession(cfg, self.rank, self.world_size, exchange, clock=clock,
                                       fault=self._fault,
                                       disabled=lambda: self.disabled is not None)  # fmt: skip
        self._buf = self.session.buf  # until the Lens runs, it counts ticks (disabled path)
        # Below these step and tick counts no exchange round is due (the session's, taken
        # again after each round): a step end compares two integers instead of asking.
        self._quiet_until = self.session.quiet_until()
        self._install_disabled_methods()
        if not cfg.enabled:
            self.fail_open.reason = "disabled by configuration"
            return
        self.counter = work_counter if work_counter is not None else open_counter(cfg.counter)
        if self.counter.fallback_reason and self.rank == 0:  # a notice per job, not per rank
            log.info("ailens: counter=%s (%s)", self.counter.kind, self.counter.fallback_reason)
        run_id = self.session.agree_run_id()
        try:
            self._start(cfg, run_id, dict(meta or {}), writer or WriterThread)
        except OSError as e:  # an unwritable, read-only or full run directory
            self._fault(e, disk=True)
        except Exception as e:  # noqa: BLE001
            self._fault(e)

    def _start(self, cfg: LensConfig, run_id: str, run_meta: dict, writer: WriterFactory) -> None:
        self.recorder = rec = Recorder(cfg, rank=self.rank, world_size=self.world_size,
                                       run_id=run_id, run_meta=run_meta, counter=self.counter,
                                       clock=self._clock, summarise=self.session.summarise,
                                       fault=self._fault)  # fmt: skip
        self.run_dir, self.start_wall_ns, self.meta = rec.run_dir, rec.start_wall_ns, rec.meta
        self._buf = self.session.buf = rec.buf
        self.online = OnlineAnalysis(cfg, self.world_size, self.rank, rec.op_names)
        if self.rank == 0:
            self._live = live = LiveOutput.for_run(
                self.online,
                lens_start_wall_ns=self.start_wall_ns,
                process_start_wall_ns=self.meta["process_start_wall_ns"],
            )
            self.fail_open.on_disk_trouble = lambda: setattr(live, "io_failed", True)
            live.on_io_error = self.fail_open.disk_trouble  # one disk warning, whoever meets it
        rec.open(writer, lambda e: self.fail_open.writer_fault(e, rec.writer.path),
                 self.fail_open.disk_trouble)  # fmt: skip
        self._install_live_methods()
        atexit.register(self._atexit)
        if cfg.total_steps or cfg.steps_per_epoch:
            self.set_schedule(total_steps=cfg.total_steps, steps_per_epoch=cfg.steps_per_epoch)

    # ------------------------------------------------------------ hot path

    def collective_begin(self, op: str, nbytes: int) -> int:  # replaced per instance
        """Mark the start of a collective; returns its tick number (pass it to
        collective_end when collectives overlap)."""
        raise NotImplementedError

    def collective_end(self, tick: int | None = None) -> None:  # replaced per instance
        """Mark the end of a collective: the oldest open one, or ``tick`` when given."""
        raise NotImplementedError

    def record_collectives(
        self,
        ops: list[str],
        nbytes: list[int],
        t_begin: list[int],
        t_end: list[int],
        steps: list[int] | None = None,
    ) -> None:  # replaced per instance
        """Record collectives that already ran, in tick order, with their begin and end times
        taken elsewhere (e.g. inside a TF graph) on this Lens's clock (ns), and the step each
        ran in (default: the current one)."""
        raise NotImplementedError

    def step_end(self) -> None:
        """Mark the end of a training step (the same step on every rank)."""
        buf, steps = self._buf, self._steps
        if self.fail_open.reason is None:  # self.disabled, inlined: once per step
            try:
                self.online.on_step(steps, buf.log_step())
                if self.device is not None:
                    self.device.step(steps)
                    self.device.resolve()
            except Exception as e:  # noqa: BLE001
                self._fault(e)
        self._steps = buf.step = steps = steps + 1
        quiet_steps, quiet_ticks = self._quiet_until
        if steps < quiet_steps and buf.ticks < quiet_ticks:
            return
        session = self.session
        due = session.cadence.due(buf.ticks, steps, alone=session.alone)
        if due or session.in_flight:  # a round in flight finishes at the next step end
            self._exchange(evaluate=session.alone, start=due)

    # ------------------------------------------------------------ public state

    @property
    def disabled(self) -> str | None:
        """Why ailens is off on this rank (None while it records)."""
        return self.fail_open.reason

    @property
    def ticks(self) -> int:
        return self._buf.ticks

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def total_steps(self) -> int | None:
        """The run's total steps as known now (schedule, set_total_steps), or None."""
        return None if self.online is None else self.online.total_steps

    @property
    def steps_per_epoch(self) -> int | None:
        """The steps per epoch as known now (the schedule), or None."""
        return self.schedule.steps_per_epoch

    @property
    def schedule(self) -> Schedule:
        """What the run will do as known now (``set_schedule``, the framework's); empty when
        this Lens keeps no model."""
        return Schedule() if self.online is None else self.online.forecaster.schedule

    @property
    def flushed_ticks(self) -> int:
        """Ticks handed to the writer so far: once it has written them, a rank killed with
        SIGKILL keeps at least these in its trace."""
        return self._buf.base

    @property
    def exchanged_ticks(self) -> int:
        """Ticks summed across ranks so far (the online phase table covers these)."""
        return self.session.exchanged_ticks

    def flush(self) -> int:
        """Hand every completed collective, step end and mark to the writer now (it writes
        them off the training thread); returns :attr:`flushed_ticks`."""
        rec = self.recorder
        if self.disabled is None and rec is not None and rec.writer is not None:
            try:
                rec.flush()
            except Exception as e:  # noqa: BLE001
                self._fault(e)
        return self._buf.base

    @property
    def should_stop(self) -> bool:
        """True once early stop is on and every rank agreed the signature is ready."""
        return self.session.stop_agreed

    @property
    def forecast(self):
        """The current forecast (``LiveForecast``: predicted total, interval, ETA), or None
        before the first steps after warm-up. Cheap: read it every step."""
        if self.online is None or self.disabled is not None:
            return None
        return self.online.live_forecast()

    def set_total_steps(self, total_steps: int) -> None:
        """Tell the forecast how many steps the whole run has (integrations call this)."""
        if total_steps and total_steps > 0:
            self._add_mark({"kind": "schedule", "total_steps": int(total_steps)})

    # ------------------------------------------------------------ run structure

    def section_begin(self, name: str) -> None:
        """Time from here to :meth:`section_end` is a part of the run other than training
        steps (``"eval"``, ``"checkpoint"``, ...): the forecast times and schedules it apart."""
        if self.disabled is None:
            self.recorder.section_begin(name, self._steps)

    def section_end(self) -> None:
        """End the section opened by :meth:`section_begin`."""
        if self.recorder is not None:
            mark = self.recorder.section_end(keep=self.disabled is None)
            if mark is not None:
                self._add_mark(mark)

    @contextlib.contextmanager
    def section(self, name: str):
        """``with lens.section("eval"): ...`` — see :meth:`section_begin`."""
        self.section_begin(name)
        try:
            yield self
        finally:
            self.section_end()

    def set_schedule(self, **schedule) -> None:
        """What the run will do, as far as the script or framework knows it: total steps
        (or steps per epoch x epochs), when evaluation comes and how many batches it runs
        (``eval_steps``), how often checkpoints come. The forecast schedules the remaining
        occurrences from it. Keys left None stay unknown.

        The keywords are the fields of :class:`ailens.record.schedule.Schedule` (its
        docstring says what each means; ``help`` lists them in this method's signature).
        Raises ValueError naming a bad value, TypeError naming an unknown keyword."""
        mark = schedule_mark(**schedule)
        if mark is not None:
            self._add_mark(mark)

    def use_device_clock(self, clock: DeviceClock, *, queued: bool = True) -> DeviceTimes | None:
        """Time collectives and steps on a device too (``ailens.record.device``): the
        integration marks each collective's ready and end points on the returned
        :class:`DeviceTimes`; step ends are marked here. ``queued``: the collectives run one
        after another on one stream (NCCL), not side by side (gloo's threads). None when not
        recording."""
        if self.disabled is not None or self.recorder is None:
            return None
        if self.device is None:
            rec = self.recorder
            self.device = DeviceTimes(clock, log=lambda m: rec.log_mark(m, self._steps),
                                      origin_ns=rec.now(), queued=queued)  # fmt: skip
            self._add_mark({"kind": "info", "device_clock": clock.name})
        return self.device

    def describe(self, **info) -> None:
        """Facts about the run learned after the start (batch size, parameter count, threads):
        recorded as an ``info`` mark; JSON-serialisable values."""
        if info:
            self._add_mark({"kind": "info", **info})

    # ------------------------------------------------------------ fail open (public)

    def disable(self, reason: BaseException | str) -> None:
        """Turn ailens off on this rank (one warning; what was recorded is kept). For
        integrations whose own code failed: the Lens keeps counting ticks and steps and keeps
        joining the exchange, so no rank waits on a collective that never comes."""
        exc = reason if isinstance(reason, BaseException) else RuntimeError(str(reason))
        self._fault(exc)

    def add_close_hook(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` at the start of :meth:`close` (also at interpreter exit), before the
        last exchange: an integration ends its last inferred step there."""
        self._close_hooks.append(fn)

    # ------------------------------------------------------------ close

    def close(self) -> None:
        """Exchange what is pending, write results and close the trace. Idempotent."""
        if self.closed:
            return
        hooks, self._close_hooks = self._close_hooks, []
        for fn in hooks:
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                self._fault(e)
        self._exchange(final=True)
        self.closed = True
        try:
            if self.disabled is None:
                if self.device is not None:
                    self.device.resolve(final=True)  # the one wait for the device
                end_ns = self.recorder.now()
                self.online.on_close(end_ns, crashed=self._crashed)
                self.recorder.flush(final=True)
                self.recorder.write_exit(end_ns, self._exit_state())
                if self._live is not None:
                    self._live.finish(self.run_dir)
        except OSError as e:
            # A full or read-only disk is not an internal error; the trace is unaffected.
            self.fail_open.disk_trouble(f"cannot write the online results to {self.run_dir} ({e})")
        except Exception as e:  # noqa: BLE001
            self._fault(e)
        self._shutdown()

    def __enter__(self) -> Lens:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ wiring

    def _install_live_methods(self) -> None:
        # Instance attributes shadow the class methods: a collective costs one call each way.
        self.collective_begin = self._buf.begin
        self.collective_end = self._buf.end
        self.record_collectives = self._buf.record

    def _install_disabled_methods(self) -> None:
        self.collective_begin = self._buf.count
        self.collective_end = self._buf.ignore
        self.record_collectives = self._buf.count_many

    def _add_mark(self, mark: dict) -> None:
        if self.disabled is not None or self.online is None:
            return
        try:
            self.online.on_mark(self.recorder.log_mark(mark, self._steps))
        except Exception as e:  # noqa: BLE001
            self._fault(e)

    def _exchange(self, *, evaluate: bool = False, start: bool = True, final: bool = False) -> None:
        rec = self.recorder
        rest = rec.summarise_rest if rec else None
        try:
            self.session.run(self._steps, vote=self._stop_vote, on_batch=self._on_batch,
                             summarise_rest=rest, evaluate=evaluate, start=start,
                             final=final)  # fmt: skip
        finally:
            self._quiet_until = self.session.quiet_until()

    def _stop_vote(self) -> bool:
        return bool(self.config.early_stop and self.online and self.online.signature_ready)

    def _on_batch(self, summed: Summed, batch: TickSummary, tick_steps, ticks: int) -> None:
        self.recorder.log_exchange(self._steps, ticks, summed)
        self.online.on_batch(summed, batch.key, tick_steps)

    def _exit_state(self) -> dict:
        return {"closed": self.closed, "crashed": self._crashed, "disabled": self.disabled,
                "ticks": self._buf.ticks, "steps": self._steps}  # fmt: skip

    # ------------------------------------------------------------ fail open

    def _fault(self, exc: BaseException, disk: bool = False) -> None:
        self.fail_open.fault(exc, disk)

    def _on_disable(self, thread: str) -> None:
        self._install_disabled_methods()
        self.device = None  # no more device marks: nothing would resolve them
        if thread == "training" and self.recorder is not None:
            self.recorder.keep(self._exit_state())  # what was recorded, with the reason

    def _shutdown(self) -> None:
        if self.recorder is not None and self.recorder.writer is not None:
            self.recorder.writer.stop()
        counter = getattr(self, "counter", None)
        if counter is not None:
            counter.close()

    def _atexit(self) -> None:
        # At interpreter exit frameworks may already be finalised: close locally, no exchange.
        if not self.closed:
            self.session.exchange_fn = None
            self.session.abandon()  # a round in flight: the other ranks may be gone
            # An uncaught exception ends the script: the run did not finish its steps.
            self._crashed = getattr(sys, "last_value", None) is not None
            self.close()
        if self._live is not None and self.disabled is None:
            try:
                self._live.on_exit(time.time_ns())  # the job's end, for its wall time
            except Exception:  # noqa: BLE001 - at exit: nothing left to protect but quiet
                pass


# help(Lens.set_schedule) and editors list the Schedule's fields as its keywords.
Lens.set_schedule.__signature__ = keyword_signature(Lens.set_schedule)
