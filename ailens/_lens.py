"""The Lens: the framework-free engine every integration drives.

Hot path: ``collective_begin`` / ``collective_end`` write a few integers into preallocated
``array.array`` columns (no Python object per event). Full columns are handed to a writer
thread that compresses and appends them to this rank's trace file, so zlib and disk I/O stay
off the training thread.

Fail open: any exception inside ailens is logged once, the Lens disables itself on that rank
and training goes on. A disabled Lens still counts ticks and steps and still joins the
cross-rank SIMO exchange (flagged as disabled), so no rank waits on a collective that never
comes.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import secrets
import socket
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np

from . import __version__
from ._config import LensConfig
from ._counters import open_counter
from ._online import OnlineAnalysis
from ._platform import describe_node
from ._trace import TraceWriter, encode_events, encode_json, encode_steps
from .phases import magnitude

log = logging.getLogger("ailens")
_clock = time.perf_counter_ns

Exchange = Callable[[np.ndarray], np.ndarray]
"""Sums an int64 array elementwise across all ranks and returns the sum (every rank)."""

# Exchange payload header: [valid ticks, disabled ranks, stop votes, next interval in steps]
_HEAD = 4
# Exchanges never wait longer than this many steps.
_MAX_EXCHANGE_STEPS = 1000
# Steps buffered before a STEP chunk is written; also flushed on a time basis.
_STEP_CAP = 1024
_FLUSH_SECONDS = 10.0
# Encoded chunks the disk refused (ENOSPC, EDQUOT, EIO) wait in memory, in order, and are
# retried before each later chunk and at close. Past this many bytes the trace stops growing
# and stays a readable prefix: dropping a chunk mid-file would shift every later tick.
_BACKLOG_BYTES = 64 << 20


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


class _Disabled(Exception):
    pass


class Lens:
    """Records collectives and steps on one rank and condenses them into phases online.

    Use as ``with Lens(run_dir="runs/x") as lens: ...``, or call ``close()``; at interpreter
    exit an unclosed Lens flushes what it recorded. ``close()`` is collective when an
    ``exchange`` is given and world size > 1: every rank calls it at the same point.

    Keyword arguments are LensConfig fields, or pass ``config=LensConfig(...)``.
    ``rank``/``world_size`` default to the launcher's environment; ``exchange`` (supplied by
    the integration) sums a small int64 array across ranks. ``meta``: what the integration
    knows of the run (threads per rank, batch size, parameter count), kept in the trace
    header under ``"run"``.
    """

    def __init__(
        self,
        *,
        config: LensConfig | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        exchange: Exchange | None = None,
        meta: dict | None = None,
        **settings,
    ) -> None:
        self.config = cfg = (
            (config or LensConfig()).replace(**settings) if settings else (config or LensConfig())
        )
        env_rank, env_world = detect_rank_world()
        self.rank = env_rank if rank is None else int(rank)
        self.world_size = env_world if world_size is None else int(world_size)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} does not fit world size {self.world_size}")
        self._exchange_fn = exchange if self.world_size > 1 else None
        self.disabled: str | None = None
        self.closed = False
        self._stop_agreed = False
        self._ticks = 0  # collectives begun (counted even when disabled)
        self._steps = 0  # step_end calls (counted even when disabled)
        self._exchanged = 0  # ticks already sent through the exchange
        self._steps_at_exchange = 0
        self._t_at_exchange = time.perf_counter_ns()
        # Steps between exchanges until rank 0 has timed a few steps and proposes its own.
        self._exchange_every = max(1, cfg.signature_window // 2)
        self._lock = threading.Lock()  # collective_end may run on a framework thread
        self._writer: _WriterThread | None = None
        self.online: OnlineAnalysis | None = None
        self._fault_hook_installed = False
        self._disk_warned = False
        self._close_hooks: list[Callable[[], None]] = []
        self._section: tuple[str, int, int] | None = None
        if not cfg.enabled:
            self.disabled = "disabled by configuration"
            self._install_disabled_methods()
            return
        self.counter = open_counter(cfg.counter)
        if self.counter.fallback_reason and self.rank == 0:  # a notice per job, not per rank
            log.info("ailens: counter=%s (%s)", self.counter.kind, self.counter.fallback_reason)
        run_id = self._agree_run_id()
        try:
            self._start(cfg, run_id, dict(meta or {}))
        except OSError as e:  # an unwritable, read-only or full run directory
            self._fault(e, disk=True)
        except Exception as e:  # noqa: BLE001
            self._fault(e)

    def _start(self, cfg: LensConfig, run_id: str, run_meta: dict) -> None:
        self.run_dir = Path(cfg.run_dir)
        self.start_wall_ns = time.time_ns()
        self._t0 = time.perf_counter_ns()
        self._read_work = self.counter.read  # bound once: the hot path skips two lookups
        self._work0 = self._read_work()
        self.meta = {
            "format_version": 1,
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
            "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "config": cfg.to_dict(),
            "node": describe_node(),
            "run": run_meta,
        }
        self._alloc_buffers(cfg.chunk_events)
        self._marks: list[dict] = []
        self._op_ids: dict[str, int] = {}
        self._op_names: list[str] = []
        self._mark = self._work0  # counter value at the last collective event
        self._oldest_open = 0  # lowest tick whose end has not been seen
        self._base = 0  # tick number of buffer row 0
        self._n = 0  # rows used in the buffer
        self._pending = _PendingTicks()  # per-tick summaries not yet exchanged
        self._max_end = 0  # latest t_end seen, for the comm/compute partition
        self._summ_row = 0  # buffer rows [0, _summ_row) are in _pending
        self._last_flush = time.monotonic()
        self.online = OnlineAnalysis(cfg, self.world_size, self.rank, self._op_names)
        self._writer = _WriterThread(
            self.run_dir, self.rank, self.meta, self._fault_from_writer, self._disk_trouble
        )
        self._install_fault_injection()
        atexit.register(self._atexit)

    # ------------------------------------------------------------ hot path

    def collective_begin(self, op: str, nbytes: int) -> int:
        """Mark the start of a collective; returns its tick number (pass it to collective_end
        when collectives overlap)."""
        t = _clock()
        w = self._read_work()
        try:
            i = self._n
            if i == self._cap:
                self._flush_events()
                i = self._n
            op_id = self._op_ids.get(op)
            if op_id is None:
                op_id = self._intern(op)
            self._c_op[i] = op_id
            self._c_step[i] = self._steps
            self._c_nbytes[i] = nbytes
            self._c_begin[i] = t - self._t0
            self._c_end[i] = -1
            self._c_work[i] = w - self._mark
            self._mark = w
            self._n = i + 1
            tick = self._ticks
            self._ticks = tick + 1
            return tick
        except Exception as e:  # noqa: BLE001 - fail open, see module docstring
            self._fault(e)
            return self._disabled_begin(op, nbytes)

    def collective_end(self, tick: int | None = None) -> None:
        """Mark the end of a collective: the oldest open one, or ``tick`` when given."""
        t = _clock()
        w = self._read_work()
        lock = self._lock
        lock.acquire()  # a flush on the training thread may be moving rows right now
        try:
            if tick is None:
                tick = self._oldest_open
            row = tick - self._base
            if 0 <= row < self._n and self._c_end[row] < 0:
                self._c_end[row] = t - self._t0
                self._mark = w
                if tick == self._oldest_open:
                    if tick + 1 == self._ticks:  # the common, blocking case
                        self._oldest_open = tick + 1
                    else:
                        self._advance_open()
        except Exception as e:  # noqa: BLE001
            lock.release()
            self._fault(e)
            return
        lock.release()

    def step_end(self) -> None:
        """Mark the end of a training step (the same step on every rank)."""
        try:
            self._record_step()
        except Exception as e:  # noqa: BLE001
            self._fault(e)
        self._steps += 1
        self._maybe_exchange()

    # ------------------------------------------------------------ public state

    @property
    def ticks(self) -> int:
        return self._ticks

    @property
    def steps(self) -> int:
        return self._steps

    @property
    def should_stop(self) -> bool:
        """True once early stop is on and every rank agreed the signature is ready."""
        return self._stop_agreed

    def set_total_steps(self, total_steps: int) -> None:
        """Tell the forecast how many steps the whole run has (integrations call this)."""
        if self.online is not None and total_steps and total_steps > 0:
            self.online.total_steps = int(total_steps)

    @property
    def forecast(self):
        """The current forecast (``LiveForecast``: predicted total, interval, ETA), or None
        before the first steps after warm-up. Cheap: read it every step."""
        if self.online is None or self.disabled is not None:
            return None
        return self.online.live_forecast()

    # ------------------------------------------------------------ run structure

    def section_begin(self, name: str) -> None:
        """Time from here to :meth:`section_end` is a part of the run other than training
        steps (``"eval"``, ``"checkpoint"``, ...): the forecast times and schedules it apart."""
        if self.disabled is not None or self._section is not None:
            return
        try:
            self._section = (str(name), self._steps, _clock() - self._t0)
        except Exception as e:  # noqa: BLE001
            self._fault(e)

    def section_end(self) -> None:
        """End the section opened by :meth:`section_begin`."""
        sec, self._section = self._section, None
        if sec is None or self.disabled is not None:
            return
        try:
            name, step, t0 = sec
            self._add_mark(
                {
                    "kind": "section",
                    "name": name,
                    "step": step,
                    "t_begin_ns": t0,
                    "t_end_ns": _clock() - self._t0,
                }
            )
        except Exception as e:  # noqa: BLE001
            self._fault(e)

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
        eval_every_epochs: int | None = None,
        eval_every_steps: int | None = None,
        checkpoint_every_steps: int | None = None,
    ) -> None:
        """What the run will do, as far as the script or framework knows it: total steps
        (or steps per epoch x epochs), and how often evaluation and checkpoints come. The
        forecast schedules the remaining occurrences from it. Keys left None stay unknown."""
        if total_steps is None and steps_per_epoch and epochs:
            total_steps = int(steps_per_epoch) * int(epochs)
        if total_steps:
            self.set_total_steps(total_steps)
        sched = {
            k: int(v)
            for k, v in {
                "total_steps": total_steps,
                "steps_per_epoch": steps_per_epoch,
                "epochs": epochs,
                "eval_every_epochs": eval_every_epochs,
                "eval_every_steps": eval_every_steps,
                "checkpoint_every_steps": checkpoint_every_steps,
            }.items()
            if v
        }
        if self.disabled is not None or not sched:
            return
        try:
            self._add_mark({"kind": "schedule", "step": self._steps, **sched})
        except Exception as e:  # noqa: BLE001
            self._fault(e)

    def describe(self, **info) -> None:
        """Facts about the run learned after the start (batch size, parameter count, threads):
        recorded as an ``info`` mark; JSON-serialisable values."""
        if self.disabled is not None or not info:
            return
        try:
            self._add_mark({"kind": "info", "step": self._steps, **info})
        except Exception as e:  # noqa: BLE001
            self._fault(e)

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
                self._flush_events(final=True)
                self._writer.put_info(self._final_info())
                if self.online is not None:
                    self.online.finish(self.run_dir, time.perf_counter_ns() - self._t0)
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

    def _alloc_buffers(self, cap: int) -> None:
        self._cap = cap
        self._c_op = array("H", bytes(2 * cap))
        self._c_step = array("I", bytes(4 * cap))
        self._c_nbytes = array("q", bytes(8 * cap))
        self._c_begin = array("q", bytes(8 * cap))
        self._c_end = array("q", bytes(8 * cap))
        self._c_work = array("q", bytes(8 * cap))
        self._s_step = array("I")
        self._s_t = array("q")
        self._s_work = array("q")

    def _event_cols(self) -> tuple[array, ...]:
        return (self._c_op, self._c_step, self._c_nbytes, self._c_begin, self._c_end, self._c_work)

    def _grow(self) -> None:
        for col in self._event_cols():
            col.extend(col)  # contents past _n are don't-care
        self._cap *= 2

    def _intern(self, op: str) -> int:
        if not isinstance(op, str) or not op:
            raise TypeError(f"collective op must be a non-empty str, got {op!r}")
        op_id = len(self._op_names)
        self._op_ids[op] = op_id
        self._op_names.append(op)
        self._writer.put_ops(list(self._op_names))
        return op_id

    def _advance_open(self) -> None:
        tick, end, base = self._oldest_open + 1, self._ticks, self._base
        while tick < end and self._c_end[tick - base] >= 0:
            tick += 1
        self._oldest_open = tick

    def _columns(self, stop: int) -> dict[str, np.ndarray]:
        """Copies of buffer rows [0, stop) as numpy columns."""
        return {
            "op": np.frombuffer(self._c_op, np.uint16, stop).copy(),
            "step": np.frombuffer(self._c_step, np.uint32, stop).copy(),
            "nbytes": np.frombuffer(self._c_nbytes, np.int64, stop).copy(),
            "t_begin": np.frombuffer(self._c_begin, np.int64, stop).copy(),
            "t_end": np.frombuffer(self._c_end, np.int64, stop).copy(),
            "work": np.frombuffer(self._c_work, np.int64, stop).copy(),
        }

    def _flush_events(self, final: bool = False) -> None:
        """Hand completed rows to the writer and keep still-open rows at the buffer front."""
        with self._lock:
            self._flush_events_locked(final)

    def _flush_events_locked(self, final: bool) -> None:
        n = self._n
        stop = n if final else min(n, self._oldest_open - self._base)
        if stop == 0 and n == self._cap:
            if self._cap < 64 * self.config.chunk_events:
                # A long collective is still open behind completed ones: grow rather than
                # write rows out of tick order.
                self._grow()
                return
            # Ends never reported: write the rows as unfinished rather than grow without
            # bound; their late ends are ignored.
            stop = n
            self._oldest_open = self._base + n
        if stop:
            self._summarise_upto(stop)
            self._writer.put_events(self._columns(stop))
            keep = n - stop
            for col in self._event_cols():
                if keep:
                    col[:keep] = col[stop:n]
            self._base += stop
            self._n = keep
            self._summ_row -= stop
        self._flush_steps()

    def _summarise_upto(self, stop: int) -> None:
        """Per-tick summaries of buffer rows up to ``stop`` for the online exchange:
        work magnitude, phase key, exclusive comm time and compute gap."""
        start = self._summ_row
        if stop <= start:
            return
        self._summ_row = stop
        cols = {k: v[start:] for k, v in self._columns(stop).items()}
        # A tick still open here (rare: a collective spanning a step boundary) counts as
        # ending at its begin; the trace keeps its real end.
        t_end = np.where(cols["t_end"] >= 0, cols["t_end"], cols["t_begin"])
        # Time with no collective in flight before tick k is its compute gap; the rest of
        # its span that no earlier collective already covered is its comm time. The two
        # partition wall time, also when collectives overlap (DDP buckets).
        prev_max = np.maximum.accumulate(np.concatenate(([self._max_end], t_end)))[:-1]
        compute = np.maximum(cols["t_begin"] - prev_max, 0)
        comm = np.maximum(t_end - np.maximum(cols["t_begin"], prev_max), 0)
        self._max_end = int(max(self._max_end, t_end.max()))
        key = cols["op"].astype(np.int64)
        if self.config.phase_key == "op+size":
            key = key * 32 + magnitude(cols["nbytes"])
        self._pending.add(magnitude(cols["work"]), key, comm, compute)

    def _record_step(self) -> None:
        if self.disabled is not None:
            return
        t = time.perf_counter_ns() - self._t0
        self._s_step.append(self._steps)
        self._s_t.append(t)
        self._s_work.append(self.counter.read() - self._work0)
        self.online.on_step(self._steps, t)
        if len(self._s_step) >= _STEP_CAP or time.monotonic() - self._last_flush > _FLUSH_SECONDS:
            self._flush_events()

    def _add_mark(self, mark: dict) -> None:
        self._marks.append(mark)
        if self.online is not None:
            self.online.on_mark(mark)

    def _flush_steps(self) -> None:
        self._last_flush = time.monotonic()
        if self._marks:
            self._writer.put_marks(self._marks)
            self._marks = []
        if not len(self._s_step):
            return
        cols = {
            "step": np.frombuffer(self._s_step, np.uint32).copy(),
            "t_ns": np.frombuffer(self._s_t, np.int64).copy(),
            "work": np.frombuffer(self._s_work, np.int64).copy(),
        }
        self._writer.put_steps(cols)
        del self._s_step[:], self._s_t[:], self._s_work[:]

    # ------------------------------------------------------------ cross-rank exchange

    def _maybe_exchange(self) -> None:
        # Decided from tick and step counts only, which every rank shares, so all ranks
        # enter the exchange at the same step.
        pending = self._ticks - self._exchanged
        if pending >= self.config.exchange_ticks or (
            pending and self._steps - self._steps_at_exchange >= self._exchange_every
        ):
            self._exchange_all()

    def _propose_interval(self) -> int:
        """Rank 0's proposal for the steps between exchanges: exchange_seconds worth."""
        steps = self._steps - self._steps_at_exchange
        if self.rank != 0 or steps <= 0 or self.disabled is not None:
            return 0
        step_s = (time.perf_counter_ns() - self._t_at_exchange) / 1e9 / steps
        want = self.config.exchange_seconds / step_s if step_s > 0 else _MAX_EXCHANGE_STEPS
        return int(min(max(np.ceil(want), 1), _MAX_EXCHANGE_STEPS))

    def _exchange_all(self) -> None:
        """Send every pending tick through the exchange in fixed-size batches.

        All ranks hold the same tick count here, so they make the same number of calls
        with the same payload size.
        """
        # Without a cross-rank exchange no padding is needed: one batch of everything.
        k = (
            self.config.exchange_ticks
            if self._exchange_fn is not None
            else self._ticks - self._exchanged
        )
        while self._exchanged < self._ticks:
            n = min(k, self._ticks - self._exchanged)
            payload = np.zeros(_HEAD + 3 * k, dtype=np.int64)
            batch = None
            if self.disabled is None:
                try:
                    batch = self._take_batch(n)
                    payload[0] = n
                    payload[_HEAD : _HEAD + n] = batch[0]
                    payload[_HEAD + k : _HEAD + k + n] = batch[2]
                    payload[_HEAD + 2 * k : _HEAD + 2 * k + n] = batch[3]
                    payload[2] = int(
                        self.config.early_stop and self.rank == 0 and self.online.signature_ready
                    )
                    payload[3] = self._propose_interval()
                except Exception as e:  # noqa: BLE001
                    self._fault(e)
                    payload[:] = 0
                    batch = None
            if self.disabled is not None:
                payload[1] = 1
            total = self._call_exchange(payload)
            self._exchanged += n
            self._steps_at_exchange = self._steps
            self._t_at_exchange = time.perf_counter_ns()
            if total is not None and total[3] > 0:
                self._exchange_every = int(total[3])
            if total is not None and total[2] > 0:
                # Also on a disabled rank: every rank must stop at the same step, or the
                # ranks that go on wait forever on the framework's next collective.
                self._stop_agreed = True
            if total is None or self.disabled is not None or batch is None:
                continue
            try:
                disabled_ranks = int(total[1])
                live = self.world_size - disabled_ranks
                simo = total[_HEAD : _HEAD + n]
                comm = total[_HEAD + k : _HEAD + k + n] / max(live, 1)
                compute = total[_HEAD + 2 * k : _HEAD + 2 * k + n] / max(live, 1)
                self.online.on_batch(simo, batch[1], comm, compute, disabled_ranks)
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

    def _take_batch(self, n: int):
        if self._pending.size < n:
            self._summarise_upto(self._n)
        return self._pending.take(n)

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
            self._flush_events(final=True)
            self._writer.put_info(self._final_info())
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
        if self.online is not None:
            self.online._io_failed = True  # the live forecast.json would hit the same disk

    def _install_disabled_methods(self) -> None:
        # Instance attributes shadow the class methods: the disabled path costs one call.
        self.collective_begin = self._disabled_begin
        self.collective_end = self._disabled_end

    def _disabled_begin(self, op: str, nbytes: int) -> int:
        tick = self._ticks
        self._ticks = tick + 1
        return tick

    def _disabled_end(self, tick: int | None = None) -> None:
        return None

    def _install_fault_injection(self) -> None:
        """Test hook: AILENS_INJECT_FAULT="<rank>:<tick>" raises inside ailens on that rank."""
        spec = os.environ.get("AILENS_INJECT_FAULT")
        if not spec:
            return
        rank_s, _, tick_s = spec.partition(":")
        if int(rank_s) != self.rank:
            return
        at = int(tick_s or 0)
        real_end = self.collective_end

        def faulty_end(tick: int | None = None) -> None:
            if self._ticks > at:
                try:
                    raise RuntimeError(
                        f"injected fault at tick {self._ticks} (AILENS_INJECT_FAULT)"
                    )
                except RuntimeError as e:
                    self._fault(e)
                return
            real_end(tick)

        self.collective_end = faulty_end

    def _final_info(self) -> dict:
        return {
            "closed": self.closed,
            "disabled": self.disabled,
            "ticks": self._ticks,
            "steps": self._steps,
            "end_ns": time.perf_counter_ns() - self._t0,
            "end_wall_ns": time.time_ns(),
            "work_total": self.counter.read() - self._work0,
        }

    def _shutdown_writer(self) -> None:
        if self._writer is not None:
            self._writer.stop()
        counter = getattr(self, "counter", None)
        if counter is not None:
            counter.close()

    def _atexit(self) -> None:
        # At interpreter exit frameworks may already be finalised: flush locally, no exchange.
        if self.closed:
            return
        self._exchange_fn = None
        self.close()


class _PendingTicks:
    """Per-tick summaries between flush and exchange (bounded by the exchange cadence)."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, ...]] = []
        self.size = 0

    def add(self, *cols: np.ndarray) -> None:
        self.parts.append(cols)
        self.size += len(cols[0])

    def take(self, n: int) -> tuple[np.ndarray, ...]:
        cols = [np.concatenate([p[i] for p in self.parts]) for i in range(4)]
        head, rest = [c[:n] for c in cols], [c[n:] for c in cols]
        self.parts = [tuple(rest)] if len(rest[0]) else []
        self.size = len(rest[0])
        return tuple(head)


_ENCODERS: dict[str, Callable] = {
    "events": encode_events,
    "steps": encode_steps,
    "ops": lambda names: encode_json(b"OPS ", names),
    "info": lambda info: encode_json(b"INFO", info),
    "marks": lambda marks: encode_json(b"MARK", marks),
}


class _WriterThread:
    """Compresses and appends chunks on a daemon thread, in order.

    Chunks the disk refuses wait in a bounded in-memory backlog and are retried (see
    _BACKLOG_BYTES); ``on_disk`` reports the trouble, ``on_error`` a give-up.
    """

    def __init__(self, run_dir: Path, rank: int, meta: dict, on_error, on_disk=None) -> None:
        # 0o755 & ~umask: the run directory is never world-writable, even at umask 000.
        run_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
        self.path = run_dir / f"rank-{rank:05d}.ailens"
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._on_error = on_error
        self._on_disk = on_disk or (lambda message: log.warning("ailens: %s", message))
        self.error: BaseException | None = None
        self._backlog: deque[tuple[str, bytes, object]] = deque()
        self.backlog_bytes = 0
        self._refused = False
        self._writer = TraceWriter(self.path, meta)
        self._thread = threading.Thread(target=self._run, name="ailens-writer", daemon=True)
        self._thread.start()

    def put_events(self, cols) -> None:
        self._queue.put(("events", cols))

    def put_steps(self, cols) -> None:
        self._queue.put(("steps", cols))

    def put_ops(self, names) -> None:
        self._queue.put(("ops", names))

    def put_info(self, info) -> None:
        self._queue.put(("info", info))

    def put_marks(self, marks) -> None:
        self._queue.put(("marks", marks))

    def _run(self) -> None:
        while True:
            kind, item = self._queue.get()
            if kind == "stop":
                break
            if self.error is not None:
                continue
            try:
                data = _ENCODERS[kind](item)
                self._backlog.append((kind, data, item))
                self.backlog_bytes += len(data)
                self._drain()
            except Exception as e:  # noqa: BLE001
                self.error = e
                self._backlog.clear()
                self._on_error(e)
        if self.error is None and self._backlog:
            self._final_drain()
        self._writer.close()

    def _drain(self) -> None:
        """Write the backlog in order; keep what the disk refuses, up to the cap."""
        while self._backlog:
            try:
                self._writer.write_raw(self._backlog[0][1])
            except OSError as e:
                if self._writer.broken or self.backlog_bytes > _BACKLOG_BYTES:
                    raise
                if not self._refused:
                    self._refused = True
                    self._on_disk(
                        f"cannot write the trace {self.path} ({e}); keeping up to "
                        f"{_BACKLOG_BYTES >> 20} MiB of it in memory and retrying; "
                        "training continues"
                    )
                return
            self.backlog_bytes -= len(self._backlog.popleft()[1])
        if self._refused:
            self._refused = False
            log.info("ailens: trace %s written again, nothing lost", self.path)

    def _final_drain(self) -> None:
        try:
            self._drain()
            if not self._backlog:
                return
        except OSError:
            pass
        lost = self.backlog_bytes
        # What was refused is lost now; still try the small closing record (a partly used
        # last block often has room), marked so the reader knows events are missing.
        info = next((item for kind, _, item in self._backlog if kind == "info"), None)
        self._backlog.clear()
        note = f"{lost} bytes of trace not written (disk refused them)"
        if info is not None:
            try:
                self._writer.write_raw(encode_json(b"INFO", {**info, "trace_incomplete": note}))
            except OSError:
                pass
        self._on_disk(f"{self.path}: {note}; the file holds what was written before")

    def stop(self) -> None:
        self._queue.put(("stop", None))
        self._thread.join(timeout=60)
