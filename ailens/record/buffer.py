"""The event buffer: preallocated columns that ``collective_begin``/``collective_end`` fill.

The hot path writes a few integers into columns (no Python object per event). Completed rows
leave in tick order (``complete_rows`` + ``drop_front``, under ``lock``): the Lens hands them
to the writer and the rows whose collective is still open (overlapping DDP buckets, async
work) stay at the front.

``begin`` and ``end`` are bound directly as the Lens's ``collective_begin``/``collective_end``,
so a recorded collective costs two method calls and four clock reads. A failure calls
``on_fault`` (the Lens disables itself) and the tick still counts.

Two implementations with the same behaviour: the compiled ``ailens/_recorder.c`` (built by
``pip install`` as an optional extension; it reads the default clock and the cpu-ns counter
with ``clock_gettime`` itself) and :class:`PyEventBuffer` here, used when the extension is
missing, stale, or ``AILENS_PURE_PYTHON=1`` is set. ``EventBuffer`` is the one in use and
``IMPLEMENTATION`` says which (``"c"`` or ``"python"``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from array import array
from collections.abc import Callable

import numpy as np

__all__ = ["IMPLEMENTATION", "EventBuffer", "PyEventBuffer"]

log = logging.getLogger("ailens")

_ABI = 3  # RECORDER_ABI in _recorder.c
# The step log goes to the writer (``on_full``) at this many step ends, or when its last
# hand-over is this old (STEP_CAP, STEP_FLUSH_NS in _recorder.c).
STEP_CAP = 1024
STEP_FLUSH_NS = 10_000_000_000
_STEP_COLUMNS = (("step", np.uint32), ("t_ns", np.int64), ("work", np.int64))

# Column name, array typecode, numpy dtype; the order of the trace's EVTS columns.
_COLUMNS = (
    ("op", "H", np.uint16),
    ("step", "I", np.uint32),
    ("nbytes", "q", np.int64),
    ("t_begin", "q", np.int64),
    ("t_end", "q", np.int64),
    ("work", "q", np.int64),
)


class _Batches:
    """``record``/``count_many``, shared by both implementations: collectives timed elsewhere
    (a TF graph's own timestamps) arrive in groups. Built on each one's ``_append_rows``,
    ``_read_work``, ``_new_op``, ``_mark`` and ``_t0``. And ``take_steps``, the step log's
    columns, on ``_take_steps``."""

    def take_steps(self) -> dict[str, np.ndarray] | None:
        """The step ends logged since the last take (``log_step``), as numpy columns
        (``step``, ``t_ns``, ``work``), the log emptied; None when there were none."""
        raw = self._take_steps()
        if raw is None:
            return None
        cols = zip(_STEP_COLUMNS, raw, strict=True)
        return {name: np.frombuffer(b, dt) for (name, dt), b in cols}

    _recorded_end: int  # latest end among the collectives given to record()

    def record(
        self,
        ops: list[str],
        nbytes,
        t_begin,
        t_end,
        steps=None,
    ) -> None:
        """Record collectives that already ran and were timed elsewhere (on this buffer's
        clock, ns), in tick order; ``steps``: the step of each (default: the current one). The
        work counted since the previous event is shared among them in proportion to the time
        before each (its begin minus the latest end before it): one counter read per group."""
        start, n = self.ticks, len(ops)
        try:
            w = self._read_work()
            t_begin, t_end = np.asarray(t_begin, np.int64), np.asarray(t_end, np.int64)
            latest = np.maximum.accumulate(np.concatenate(([self._recorded_end], t_end)))
            gaps = np.maximum(t_begin - latest[:-1], 0)
            total, work = int(gaps.sum()), w - self._mark
            if total:
                shares = np.floor(gaps * (work / total)).astype(np.int64)
            else:
                shares = np.zeros(n, np.int64)
                shares[:1] = work
            ids = self.op_ids
            op_ids = [ids[op] if op in ids else self._new_op(op) for op in ops]
            step = np.full(n, self.step) if steps is None else np.asarray(steps)
            self._append_rows(
                np.asarray(op_ids, np.uint16),
                step.astype(np.uint32),
                np.asarray(nbytes, np.int64),
                t_begin - self._t0,
                t_end - self._t0,
                shares,
            )
            if self.oldest_open == start:
                self.oldest_open = start + n
            self.ticks = start + n
            self._recorded_end = int(latest[-1])
            self._mark = w
        except Exception as e:  # noqa: BLE001 - fail open: every tick still counts
            self._on_fault(e)
            self.ticks = start + n

    def count_many(self, ops: list[str], nbytes, t_begin, t_end, steps=None) -> None:
        """The disabled path of ``record``."""
        self.ticks += len(ops)


class PyEventBuffer(_Batches):
    """Event columns of one rank, in pure Python. ``ticks`` counts every collective begun
    (also after a fault); ``step`` is set by the Lens at each step end."""

    def __init__(
        self,
        cap: int,
        *,
        clock: Callable[[], int],
        read_work: Callable[[], int] | None,
        t0: int,
        work0: int,
        intern: Callable[[str], int],
        on_fault: Callable[[BaseException], None],
    ) -> None:
        self.cap = cap
        self._clock = clock
        self._read_work = read_work or int  # None: no work counter, work is 0 (int() == 0)
        self._t0 = t0
        self._intern = intern
        self._on_fault = on_fault
        self.op_ids: dict[str, int] = {}
        self._c_op, self._c_step, self._c_nbytes, self._c_begin, self._c_end, self._c_work = (
            array(code, bytes(np.dtype(dt).itemsize * cap)) for _, code, dt in _COLUMNS
        )
        self._mark = work0  # counter at the last collective event
        self._work0 = work0
        self._s_step, self._s_t, self._s_work = array("I"), array("q"), array("q")
        self._s_taken = time.monotonic_ns()  # the step log's last hand-over
        self._recorded_end = t0
        self.ticks = 0
        self.step = 0
        self.oldest_open = 0  # lowest tick whose end has not been seen
        self.base = 0  # tick number of row 0
        self.n = 0  # rows in use
        self.on_full: Callable[[], None] | None = None  # the Lens flushes
        self.lock = threading.Lock()  # end() may run on a framework thread

    # ------------------------------------------------------------ hot path

    def begin(self, op: str, nbytes: int) -> int:
        """Record the start of a collective; returns its tick."""
        try:
            t = self._clock()
            w = self._read_work()
            i = self.n
            if i == self.cap:
                if self.on_full is not None:
                    self.on_full()
                i = self.n
            op_id = self.op_ids.get(op)
            if op_id is None:
                op_id = self._new_op(op)
            self._c_op[i] = op_id
            self._c_step[i] = self.step
            self._c_nbytes[i] = nbytes
            self._c_begin[i] = t - self._t0
            self._c_end[i] = -1
            self._c_work[i] = w - self._mark
            self._mark = w
            self.n = i + 1
            tick = self.ticks
            self.ticks = tick + 1
            return tick
        except Exception as e:  # noqa: BLE001 - fail open
            self._on_fault(e)
            return self.count(op, nbytes)

    def end(self, tick: int | None = None) -> None:
        """Record the end of the oldest open collective, or of ``tick``.

        The work counter is read, and the next begin's work counted from here, only when no
        collective stays in flight: while others do, the work goes on beside them (a
        backward pass launching the next gradients) and counts towards the next begin. It
        also spares the counter read (a syscall) at each of the in-order ends of a batch of
        asynchronous collectives, all but the last (Horovod: one per gradient; issue 33)."""
        lock = self.lock
        lock.acquire()  # a flush on the training thread may be moving rows right now
        try:
            t = self._clock()
            if tick is None:
                tick = self.oldest_open
            row = tick - self.base
            if 0 <= row < self.n and self._c_end[row] < 0:
                self._c_end[row] = t - self._t0
                if tick == self.oldest_open:
                    if tick + 1 == self.ticks:  # the common, blocking case
                        self.oldest_open = tick + 1
                    else:
                        self._advance_open()
                if self.oldest_open >= self.ticks:
                    self._mark = self._read_work()
        except Exception as e:  # noqa: BLE001
            lock.release()
            self._on_fault(e)
            return
        except BaseException:  # KeyboardInterrupt from a Python clock: not ours to swallow
            lock.release()
            raise
        lock.release()

    def log_step(self) -> int:
        """A step end now, in the step log as (``step``, its time, the work since the start);
        returns the time (ns since ``t0``). ``on_full`` hands the log over when it holds
        ``STEP_CAP`` step ends or its last hand-over is ``STEP_FLUSH_NS`` old. A failing
        clock raises (the caller faults)."""
        t = self._clock() - self._t0
        self._s_step.append(self.step)
        self._s_t.append(t)
        self._s_work.append(self._read_work() - self._work0)
        if (
            len(self._s_step) >= STEP_CAP or time.monotonic_ns() - self._s_taken > STEP_FLUSH_NS
        ) and self.on_full is not None:
            self.on_full()
        return t

    def _take_steps(self) -> tuple[bytearray, bytearray, bytearray] | None:
        self._s_taken = time.monotonic_ns()
        if not self._s_step:
            return None
        raw = (bytearray(self._s_step), bytearray(self._s_t), bytearray(self._s_work))
        del self._s_step[:], self._s_t[:], self._s_work[:]
        return raw

    def count(self, op: str, nbytes: int) -> int:
        """The disabled path of ``begin``: the tick counts, nothing is recorded."""
        tick = self.ticks
        self.ticks = tick + 1
        return tick

    @staticmethod
    def ignore(tick: int | None = None) -> None:
        """The disabled path of ``end``."""

    # ------------------------------------------------------------ rows

    def _new_op(self, op: str) -> int:
        if not isinstance(op, str) or not op:
            raise TypeError(f"collective op must be a non-empty str, got {op!r}")
        op_id = self._intern(op)
        self.op_ids[op] = op_id
        return op_id

    def _advance_open(self) -> None:
        # Rows past n hold no collective (only a broken tick count gets there): stop at n.
        tick, end, base = self.oldest_open + 1, min(self.ticks, self.base + self.n), self.base
        while tick < end and self._c_end[tick - base] >= 0:
            tick += 1
        self.oldest_open = tick

    def _append_rows(self, *values: np.ndarray) -> None:
        """Complete rows at the end, one array per column; like ``begin``, a full buffer calls
        ``on_full`` first, and rows still open at the front then make it grow to fit."""
        k = len(values[0])
        if self.n + k > self.cap and self.on_full is not None:
            self.on_full()
        i = self.n
        if i + k > self.cap:
            for col in self._all():
                col.extend(array(col.typecode, bytes(col.itemsize * (i + k - self.cap))))
            self.cap = i + k
        for (_, _, dt), col, v in zip(_COLUMNS, self._all(), values, strict=True):
            np.frombuffer(col, dt)[i : i + k] = v
        self.n = i + k

    def columns(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Copies of rows [start, stop) as numpy columns."""
        cols = (self._c_op, self._c_step, self._c_nbytes, self._c_begin, self._c_end, self._c_work)
        return {
            name: np.frombuffer(col, dt, stop)[start:].copy()
            for (name, _, dt), col in zip(_COLUMNS, cols, strict=True)
        }

    def complete_rows(self, final: bool, max_cap: int) -> int:
        """How many front rows may leave now (call with ``lock`` held): the completed prefix,
        or everything when ``final``. A full buffer whose oldest collective never ends grows
        up to ``max_cap`` rows, then lets its rows go as unfinished (their late ends are
        ignored) rather than grow without bound."""
        stop = self.n if final else min(self.n, self.oldest_open - self.base)
        if stop == 0 and self.n == self.cap:
            if self.cap < max_cap:
                for col in self._all():
                    col.extend(col)  # contents past n are don't-care
                self.cap *= 2
                return 0
            stop = self.n
            self.oldest_open = self.base + self.n
        return stop

    def drop_front(self, stop: int) -> None:
        """Forget rows [0, stop) (call with ``lock`` held): later rows move to the front."""
        keep = self.n - stop
        if keep:
            for col in self._all():
                col[:keep] = col[stop : self.n]
        self.base += stop
        self.n = keep

    def _all(self) -> tuple[array, ...]:
        return (self._c_op, self._c_step, self._c_nbytes, self._c_begin, self._c_end, self._c_work)


def _load_native() -> type | None:
    """The compiled buffer class, or None (and why, at INFO) when it cannot be used."""
    if os.environ.get("AILENS_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from .. import _recorder
    except ImportError as e:
        log.info("ailens: compiled hot path unavailable (%s); using the Python one", e)
        return None
    if getattr(_recorder, "ABI", None) != _ABI:
        log.info(
            "ailens: compiled hot path %s is stale (ABI %s, want %s); using the Python one "
            "(rebuild: pip install -e .)",
            _recorder.__file__,
            getattr(_recorder, "ABI", None),
            _ABI,
        )
        return None

    class NativeEventBuffer(_Batches, _recorder.Recorder):
        """:class:`PyEventBuffer` with the hot path and row moves in C (``_recorder.c``)."""

        def __init__(self, cap: int, **kw) -> None:
            super().__init__(cap, **kw)
            self._recorded_end = kw["t0"]

        def columns(self, start: int, stop: int) -> dict[str, np.ndarray]:
            """Copies of rows [start, stop) as numpy columns."""
            raw = self._raw_columns(start, stop)
            cols = zip(_COLUMNS, raw, strict=True)
            return {name: np.frombuffer(b, dt) for (name, _, dt), b in cols}

    return NativeEventBuffer


NativeEventBuffer = _load_native()
EventBuffer = NativeEventBuffer or PyEventBuffer
IMPLEMENTATION = "python" if NativeEventBuffer is None else "c"


def _native_wrappers() -> tuple[type, type] | None:
    """The compiled per-tensor wrappers of an asynchronous call and its wait (``AsyncCall``,
    ``HandleWait`` in ``_recorder.c``), where the compiled buffer is used; else None."""
    if NativeEventBuffer is None:
        return None
    from .. import _recorder

    call, wait = getattr(_recorder, "AsyncCall", None), getattr(_recorder, "HandleWait", None)
    return None if call is None or wait is None else (call, wait)


ASYNC_WRAPPERS = _native_wrappers()


def _native_blocking_call() -> type | None:
    """The compiled wrapper of a blocking collective (``BlockingCall`` in ``_recorder.c``;
    mpi4py's communicator proxy), where the compiled buffer is used; else None."""
    if NativeEventBuffer is None:
        return None
    from .. import _recorder

    return getattr(_recorder, "BlockingCall", None)


BLOCKING_CALL = _native_blocking_call()
