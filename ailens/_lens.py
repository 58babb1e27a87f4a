"""The Lens: the framework-free engine every integration drives.

It ties four parts together:

- the event buffer (``_buffer.py``): ``collective_begin``/``collective_end`` are its methods,
  bound directly, so the hot path writes integers into preallocated columns;
- the writer thread (``_writer.py``): completed rows, step ends, exchanges and marks go to
  this rank's trace file off the training thread;
- the cross-rank exchange (``_exchange.py``): at step ends the per-tick summaries
  (``_ticks.py``) are summed across ranks through the integration's own collective;
- the online analysis (``model/online.py``): phases, forecast and signature, fed the exchanged
  batches, step ends and marks — exactly what the trace records, so the offline analysis
  feeds the same class the same data.

Fail open: any exception inside ailens is logged once, the Lens disables itself on that rank
and training goes on. A disabled Lens still counts ticks and steps and still joins the
exchange (flagged as disabled), so no rank waits on a collective that never comes.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import os
import secrets
import socket
import sys
import time
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from . import __version__
from ._buffer import EventBuffer
from ._config import LensConfig
from ._counters import Counter, open_counter
from ._exchange import Cadence, Exchange, decode, encode
from ._platform import describe_node
from ._ticks import TickSummary, summarise
from ._trace import FORMAT_VERSION
from ._writer import WriterThread
from .model.live import LiveOutput
from .model.online import OnlineAnalysis

log = logging.getLogger("ailens")

# Steps buffered before a STEP chunk is written; also flushed on a time basis.
_STEP_CAP = 1024
_FLUSH_SECONDS = 10.0
# A buffer whose oldest collective never ends grows to this many chunks before giving up.
_MAX_GROWTH = 64

WriterFactory = Callable[..., WriterThread]
"""``(run_dir, rank, meta, on_error, on_disk) -> writer`` with put_events/steps/ops/info/marks/
exchanges and stop(); the default is the trace writer thread."""


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def detect_rank_world() -> tuple[int, int]:
    """Rank and world size from the launcher's environment (torchrun, MPI, Horovod), else (0, 1)."""
    rank = _env_int("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
    world = _env_int("WORLD_SIZE", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    return (rank or 0, world or 1)


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
    clock, the work counter and the trace writer (tests inject fakes).
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
        self._exchange_fn = exchange if self.world_size > 1 else None
        self._clock = clock or time.perf_counter_ns
        self.disabled: str | None = None
        self.closed = False
        self._stop_agreed = False
        self._steps = 0
        self._close_hooks: list[Callable[[], None]] = []
        self._crashed = False
        self._section: tuple[str, int, int] | None = None
        self._writer: WriterThread | None = None
        self.online: OnlineAnalysis | None = None
        self._live: LiveOutput | None = None  # rank 0's progress lines, forecast.json
        self._disk_warned = False
        # Until the Lens runs, a placeholder buffer counts ticks (disabled path).
        self._buf = EventBuffer(
            1,
            clock=self._clock,
            read_work=lambda: 0,
            t0=0,
            work0=0,
            intern=lambda op: 0,
            on_fault=self._fault,
        )
        self._install_disabled_methods()
        # The exchange cadence exists even when this rank is disabled: it still joins.
        self._cadence = Cadence(
            cfg.exchange_ticks if self._exchange_fn is not None else 1 << 62,
            cfg.exchange_seconds,
            cfg.signature_window // 2,
        )
        self._cadence.t_at = self._clock()
        if not cfg.enabled:
            self.disabled = "disabled by configuration"
            return
        self.counter = work_counter if work_counter is not None else open_counter(cfg.counter)
        if self.counter.fallback_reason and self.rank == 0:  # a notice per job, not per rank
            log.info("ailens: counter=%s (%s)", self.counter.kind, self.counter.fallback_reason)
        run_id = self._agree_run_id()
        try:
            self._start(cfg, run_id, dict(meta or {}), writer or WriterThread)
        except OSError as e:  # an unwritable, read-only or full run directory
            self._fault(e, disk=True)
        except Exception as e:  # noqa: BLE001
            self._fault(e)

    def _start(self, cfg: LensConfig, run_id: str, run_meta: dict, writer: WriterFactory) -> None:
        self.run_dir = Path(cfg.run_dir)
        self.start_wall_ns = time.time_ns()
        self._t0 = self._clock()
        read_work = self.counter.read
        self._work0 = read_work()
        self.meta = {
            "format_version": FORMAT_VERSION,
            "ailens_version": __version__,
            "run_id": run_id,
            "rank": self.rank,
            "world_size": self.world_size,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "framework": cfg.framework,
            "backend": cfg.backend,
            "counter": self.counter.kind,
            "counter_unit": self.counter.unit,
            "counter_fallback": self.counter.fallback_reason,
            "start_wall_ns": self.start_wall_ns,
            "process_start_wall_ns": _process_start_wall_ns(),
            "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "config": cfg.to_dict(),
            "node": describe_node(),
            "run": run_meta,
        }
        self._op_names: list[str] = []
        self._buf = EventBuffer(
            cfg.chunk_events,
            clock=self._clock,
            read_work=read_work,
            t0=self._t0,
            work0=self._work0,
            intern=self._intern,
            on_fault=self._fault,
        )
        self._buf.on_full = self._flush
        self._prev_end = 0  # latest collective end summarised so far
        self._summarised = 0  # ticks summarised (tick number of the next one)
        self._pending: list[tuple[TickSummary, np.ndarray]] = []  # summaries not yet exchanged
        self._pending_n = 0
        self._seq = 0  # orders marks and exchanges in the trace
        self._marks: list[dict] = []
        self._s_step, self._s_t, self._s_work = array("I"), array("q"), array("q")
        self._x_rows: list[tuple[int, ...]] = []
        self._last_flush = time.monotonic()
        self.online = OnlineAnalysis(cfg, self.world_size, self.rank, self._op_names)
        if self.rank == 0:
            proc = self.meta["process_start_wall_ns"]
            known = bool(proc and proc <= self.start_wall_ns)
            self._live = LiveOutput(
                self.online,
                job_offset_s=(self.start_wall_ns - proc) / 1e9 if known else None,
                process_start_wall_ns=proc if known else None,
            )
        self._writer = writer(
            self.run_dir, self.rank, self.meta, self._fault_from_writer, self._disk_trouble
        )
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
        if self.disabled is None:
            try:
                self._record_step()
            except Exception as e:  # noqa: BLE001
                self._fault(e)
        self._steps += 1
        self._buf.step = self._steps
        if self._exchange_due():
            self._exchange_all(evaluate=self._exchange_fn is None)

    # ------------------------------------------------------------ public state

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
    def flushed_ticks(self) -> int:
        """Ticks handed to the writer so far: once it has written them, a rank killed with
        SIGKILL keeps at least these in its trace."""
        return self._buf.base

    @property
    def exchanged_ticks(self) -> int:
        """Ticks summed across ranks so far (the online phase table covers these)."""
        return self._cadence.ticks_done

    def flush(self) -> int:
        """Hand every completed collective, step end and mark to the writer now (it writes
        them off the training thread); returns :attr:`flushed_ticks`."""
        if self.disabled is None and self._writer is not None:
            try:
                self._flush()
            except Exception as e:  # noqa: BLE001
                self._fault(e)
        return self._buf.base

    @property
    def should_stop(self) -> bool:
        """True once early stop is on and every rank agreed the signature is ready."""
        return self._stop_agreed

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
        if self.disabled is None and self._section is None:
            self._section = (str(name), self._steps, self._clock() - self._t0)

    def section_end(self) -> None:
        """End the section opened by :meth:`section_begin`."""
        sec, self._section = self._section, None
        if sec is not None and self.disabled is None:
            name, step, t0 = sec
            end = self._clock() - self._t0
            self._add_mark(
                {"kind": "section", "name": name, "step": step, "t_begin_ns": t0, "t_end_ns": end}
            )

    @contextlib.contextmanager
    def section(self, name: str):
        """``with lens.section("eval"): ...`` — see :meth:`section_begin`."""
        self.section_begin(name)
        try:
            yield self
        finally:
            self.section_end()

    def set_schedule(
        self,
        *,
        total_steps: int | None = None,
        steps_per_epoch: int | None = None,
        epochs: int | None = None,
        eval_every_epochs: float | None = None,
        eval_every_steps: int | None = None,
        eval_steps: int | None = None,
        checkpoint_every_steps: int | None = None,
        eval_start_step: int | None = None,
        eval_start_epoch: float | None = None,
        eval_at_steps: Sequence[int] | None = None,
        eval_at_epochs: Sequence[float] | None = None,
    ) -> None:
        """What the run will do, as far as the script or framework knows it: total steps
        (or steps per epoch x epochs), when evaluation comes and how many batches it runs
        (``eval_steps``), how often checkpoints come. The forecast schedules the remaining
        occurrences from it. Keys left None stay unknown.

        Evaluation positions count steps done: an evaluation "at step k" runs after the k-th
        step ends; "at epoch e" after ``e x steps_per_epoch`` steps. Periodic evaluations
        come every ``eval_every_steps`` steps or ``eval_every_epochs`` epochs (a float: a
        period that is not a whole number of steps lands on the nearest step), from
        ``eval_start_step`` / ``eval_start_epoch`` (default: one period in); listed ones at
        ``eval_at_steps`` / ``eval_at_epochs``. Both may be given: the union is scheduled."""
        if total_steps is None and steps_per_epoch and epochs:
            total_steps = int(steps_per_epoch) * int(epochs)
        counts = {
            "total_steps": total_steps,
            "steps_per_epoch": steps_per_epoch,
            "epochs": epochs,
            "eval_every_steps": eval_every_steps,
            "eval_steps": eval_steps,
            "checkpoint_every_steps": checkpoint_every_steps,
        }
        sched: dict = {k: int(v) for k, v in counts.items() if v}
        if eval_every_epochs:
            sched["eval_every_epochs"] = _number("eval_every_epochs", eval_every_epochs)
        for key, value in (
            ("eval_start_step", eval_start_step),
            ("eval_start_epoch", eval_start_epoch),
        ):
            if value is not None:
                sched[key] = _number(key, value, whole=key.endswith("step"))
        for key, values in (("eval_at_steps", eval_at_steps), ("eval_at_epochs", eval_at_epochs)):
            if values is not None:
                whole = key.endswith("steps")
                sched[key] = sorted({_number(key, v, whole=whole) for v in values})
        if sched:
            self._add_mark({"kind": "schedule", **sched})

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
        self._exchange_all()
        self.closed = True
        try:
            if self.disabled is None:
                end_ns = self._clock() - self._t0
                self.online.on_close(end_ns, crashed=self._crashed)
                self._flush(final=True)
                self._writer.put_info(self._final_info(end_ns))
                if self._live is not None:
                    self._live.finish(self.run_dir)
        except OSError as e:
            # A full or read-only disk is not an internal error; the trace is unaffected.
            self._disk_trouble(f"cannot write the online results to {self.run_dir} ({e})")
        except Exception as e:  # noqa: BLE001
            self._fault(e)
        self._shutdown_writer()

    def __enter__(self) -> Lens:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ internals

    def _install_live_methods(self) -> None:
        # Instance attributes shadow the class methods: a collective costs one call each way.
        self.collective_begin = self._buf.begin
        self.collective_end = self._buf.end
        self.record_collectives = self._buf.record

    def _install_disabled_methods(self) -> None:
        self.collective_begin = self._buf.count
        self.collective_end = self._buf.ignore
        self.record_collectives = self._buf.count_many

    def _intern(self, op: str) -> int:
        op_id = len(self._op_names)
        self._op_names.append(op)
        self._writer.put_ops(list(self._op_names))
        return op_id

    def _add_mark(self, mark: dict) -> None:
        if self.disabled is not None or self.online is None:
            return
        try:
            mark = {
                **mark,
                "seq": self._next_seq(),
                "step": mark.get("step", self._steps),
                "at_step": self._steps,  # where it comes among the step ends (offline order)
            }
            self._marks.append(mark)
            self.online.on_mark(mark)
        except Exception as e:  # noqa: BLE001
            self._fault(e)

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _record_step(self) -> None:
        t = self._clock() - self._t0
        self._s_step.append(self._steps)
        self._s_t.append(t)
        self._s_work.append(self.counter.read() - self._work0)
        self.online.on_step(self._steps, t)
        if len(self._s_step) >= _STEP_CAP or time.monotonic() - self._last_flush > _FLUSH_SECONDS:
            self._flush()

    def _flush(self, final: bool = False) -> None:
        """Hand completed rows, step ends, exchanges and marks to the writer."""
        buf = self._buf
        with buf.lock:
            stop = buf.complete_rows(final, _MAX_GROWTH * self.config.chunk_events)
            if stop:
                self._summarise(stop)
                self._writer.put_events(buf.columns(0, stop))
                buf.drop_front(stop)
        self._last_flush = time.monotonic()
        if len(self._s_step):
            self._writer.put_steps(
                {
                    "step": np.frombuffer(self._s_step, np.uint32).copy(),
                    "t_ns": np.frombuffer(self._s_t, np.int64).copy(),
                    "work": np.frombuffer(self._s_work, np.int64).copy(),
                }
            )
            del self._s_step[:], self._s_t[:], self._s_work[:]
        if self._x_rows:
            cols = np.array(self._x_rows, dtype=np.int64).T
            names = ("seq", "step", "ticks", "live", "disabled", "stop", "t_ns")
            self._writer.put_exchanges(dict(zip(names, cols, strict=True)))
            self._x_rows = []
        if self._marks:
            self._writer.put_marks(self._marks)
            self._marks = []

    def _summarise(self, stop: int) -> None:
        """Per-tick summaries of buffer rows [already summarised, stop) for the exchange."""
        buf = self._buf
        start = self._summarised - buf.base
        if stop <= start:
            return
        cols = buf.columns(start, stop)
        open_rows = np.flatnonzero(cols["t_end"] < 0)
        if len(open_rows):
            # Summarised as ending at their begin (see _ticks.py); the offline side must know.
            ticks = (open_rows + self._summarised).tolist()
            self._marks.append({"kind": "open_at_summary", "seq": self._next_seq(), "ticks": ticks})
        summary, self._prev_end = summarise(
            cols["op"],
            cols["nbytes"],
            cols["t_begin"],
            cols["t_end"],
            cols["work"],
            by_size=self.config.phase_key == "op+size",
            prev_end=self._prev_end,
        )
        self._pending.append((summary, cols["step"].astype(np.int64)))
        self._pending_n += len(summary)
        self._summarised += len(summary)

    def _take(self, n: int) -> tuple[TickSummary, np.ndarray]:
        if n == 0:
            empty = np.zeros(0, dtype=np.int64)
            return TickSummary(empty.astype(np.int8), empty, empty, empty), empty
        if self._pending_n < n:
            with self._buf.lock:
                self._summarise(self._buf.n)
        parts = self._pending
        fields = TickSummary.__dataclass_fields__
        cat = [np.concatenate([getattr(p[0], f) for p in parts]) for f in fields]
        steps = np.concatenate([p[1] for p in parts])
        rest = TickSummary(*(c[n:] for c in cat))
        self._pending = [(rest, steps[n:])] if len(rest) else []
        self._pending_n = len(rest)
        return TickSummary(*(c[:n] for c in cat)), steps[:n]

    # ------------------------------------------------------------ cross-rank exchange

    def _exchange_due(self) -> bool:
        return self._cadence.due(self._buf.ticks, self._steps, alone=self._exchange_fn is None)

    def _exchange_all(self, *, evaluate: bool = False) -> None:
        """Send every pending tick through the exchange in batches of ``exchange_ticks``;
        with ``evaluate``, at least one (possibly empty) batch: an evaluation point of the
        online analysis even in a run without collectives.

        All ranks hold the same tick count here, so they make the same number of calls with
        the same payload size."""
        cadence, world = self._cadence, self.world_size
        k = self.config.exchange_ticks if self._exchange_fn is not None else None
        rounds = 0
        while cadence.ticks_done < self._buf.ticks or (evaluate and rounds == 0):
            rounds += 1
            n = min(k or self._buf.ticks, self._buf.ticks - cadence.ticks_done)
            width = k or max(n, 1)
            batch, steps, interval = None, None, 0
            if self.disabled is None:
                try:
                    batch, steps = self._take(n)
                    if self.rank == 0:
                        interval = cadence.propose(self._steps, self._clock())
                except Exception as e:  # noqa: BLE001
                    self._fault(e)
                    batch = None
            vote = bool(self.config.early_stop and self.online and self.online.signature_ready)
            payload = encode(width, batch, rank=self.rank, stop_vote=vote, interval=interval)
            total = self._call_exchange(payload)
            summed = None if total is None else decode(total, n, width, world)
            ticks = cadence.ticks_done + n
            cadence.done(ticks, self._steps, self._clock(), summed.interval if summed else 0)
            if summed is not None and summed.stop:
                # Also on a disabled rank: every rank must stop at the same step, or the
                # ranks that go on wait forever on the framework's next collective.
                self._stop_agreed = True
            if summed is None or self.disabled is not None or batch is None:
                continue
            try:
                self._x_rows.append(
                    (
                        self._next_seq(),
                        self._steps,
                        ticks,
                        1,
                        summed.disabled_ranks,
                        int(summed.stop),
                        self._clock() - self._t0,
                    )
                )
                self.online.on_batch(summed, batch.key, steps)
            except Exception as e:  # noqa: BLE001
                self._fault(e)

    def _call_exchange(self, payload: np.ndarray) -> np.ndarray | None:
        if self._exchange_fn is None:
            return payload
        try:
            return np.asarray(self._exchange_fn(payload), dtype=np.int64)
        except Exception as e:  # noqa: BLE001
            # The framework's own collective failed: nothing more we can do in sync, so stop
            # exchanging on this rank (the framework will report its own error).
            self._fault(e)
            self._exchange_fn = None
            return None

    def _agree_run_id(self) -> str:
        mine = secrets.randbits(52) if self.rank == 0 else 0
        if self._exchange_fn is None:
            env_id = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("AILENS_RUN_ID")
            return env_id or f"{mine:013x}"
        total = self._exchange_fn(np.array([mine], dtype=np.int64))
        return f"{int(np.asarray(total)[0]):013x}"

    # ------------------------------------------------------------ fail open

    def _fault(self, exc: BaseException, disk: bool = False) -> None:
        if self.disabled is not None:
            return
        self.disabled = f"{type(exc).__name__}: {exc}"
        # An unusable run directory is not a bug in ailens: say so, without a traceback.
        log.warning(
            "ailens: %s on rank %d, instrumentation disabled on this rank; training continues (%s)",
            "cannot write to the run directory" if disk else "internal error",
            self.rank,
            self.disabled,
            exc_info=None if disk else exc,
        )
        self._install_disabled_methods()
        if self._writer is None:
            return
        try:
            # Keep what was recorded: completed rows go to disk with the reason.
            self._flush(final=True)
            self._writer.put_info(self._final_info(self._clock() - self._t0))
        except Exception:  # noqa: BLE001
            pass

    def _fault_from_writer(self, exc: BaseException) -> None:
        # Runs on the writer thread: only mark disabled; the training thread owns the buffers.
        if self.disabled is None:
            self.disabled = f"trace file {self._writer.path}: {type(exc).__name__}: {exc}"
            log.warning(
                "ailens: cannot write the trace on rank %d, instrumentation disabled on "
                "this rank; training continues (%s)",
                self.rank,
                self.disabled,
            )
            self._install_disabled_methods()

    def _disk_trouble(self, message: str) -> None:
        # The first disk problem on this rank is a warning, later ones (the same full disk
        # seen by another file) only info: one clear warning, not one per chunk.
        level = logging.INFO if self._disk_warned else logging.WARNING
        self._disk_warned = True
        log.log(level, "ailens: rank %d: %s", self.rank, message)
        if self._live is not None:
            self._live.io_failed = True  # the live forecast.json would hit the same disk

    def _final_info(self, end_ns: int) -> dict:
        try:
            work = self.counter.read() - self._work0
        except Exception:  # noqa: BLE001 - a broken counter may be why we are closing
            work = None
        return {
            "closed": self.closed,
            "crashed": self._crashed,
            "disabled": self.disabled,
            "ticks": self._buf.ticks,
            "steps": self._steps,
            "end_ns": end_ns,
            "end_wall_ns": time.time_ns(),
            "work_total": work,
        }

    def _shutdown_writer(self) -> None:
        if self._writer is not None:
            self._writer.stop()
        counter = getattr(self, "counter", None)
        if counter is not None:
            counter.close()

    def _atexit(self) -> None:
        # At interpreter exit frameworks may already be finalised: close locally, no exchange.
        if not self.closed:
            self._exchange_fn = None
            # An uncaught exception ends the script: the run did not finish its steps.
            self._crashed = getattr(sys, "last_value", None) is not None
            self.close()
        if self._live is not None and self.disabled is None:
            try:
                self._live.on_exit(time.time_ns())  # the job's end, for its wall time
            except Exception:  # noqa: BLE001 - at exit: nothing left to protect but quiet
                pass


def _process_start_wall_ns() -> int | None:
    """When this process started (wall clock), so the forecast can count the time before
    the Lens started as well."""
    try:
        import psutil

        return int(psutil.Process().create_time() * 1e9)
    except Exception:  # noqa: BLE001 - psutil missing or /proc unreadable: unknown
        return None


def _number(key: str, value, *, whole: bool = False) -> int | float:
    """A schedule value: a finite number >= 0 (a whole one for step counts), as JSON keeps it."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if not math.isfinite(x) or x < 0 or (whole and x != int(x)):
        kind = "a whole number" if whole else "a number"
        raise ValueError(f"set_schedule: {key} must be {kind} >= 0, got {value!r}")
    return int(x) if whole or x == int(x) else x
