"""The recorder of one rank: the trace in the making.

It owns the event buffer (whose ``begin``/``end`` the Lens binds as its hot path, and whose
``log_step`` logs the step ends), the writer thread, and the run's log of marks, sections and
exchange rounds, handed to the writer in chunks off the training thread. It records; it never
analyses: what the Lens feeds the run model is exactly what this log writes.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .._version import __version__
from .buffer import EventBuffer
from .config import LensConfig
from .counters import Counter
from .exchange import Summed
from .node import describe_node
from .schedule import Schedule
from .trace import FORMAT_VERSION
from .writer import WriterThread

__all__ = ["Recorder", "WriterFactory", "schedule_mark", "using_event_buffer"]

# A buffer whose oldest collective never ends grows to this many chunks before giving up.
_MAX_GROWTH = 64
_EXCHANGE_COLUMNS = ("seq", "step", "ticks", "live", "disabled", "stop", "t_ns")

WriterFactory = Callable[..., WriterThread]
"""``(run_dir, rank, meta, on_error, on_disk) -> writer`` with put_events/steps/ops/info/marks/
exchanges and stop(); the default is the trace writer thread."""


@contextmanager
def using_event_buffer(impl: type) -> Iterator[None]:
    """Recorders (so Lenses) made inside the block use the event buffer class ``impl``
    (``PyEventBuffer`` or ``NativeEventBuffer``) instead of ``EventBuffer``, the one picked at
    import: both compared in one process (``benchmarks/bench_lens.py``)."""
    global EventBuffer
    chosen, EventBuffer = EventBuffer, impl
    try:
        yield
    finally:
        EventBuffer = chosen


class Recorder:
    """Starts this rank's trace in ``cfg.run_dir`` and logs into it.

    ``summarise(stop)``: called under the buffer's lock before rows [.., stop) leave the
    buffer (the exchange session's summaries); returns the ticks still open then. ``fault``:
    the Lens's fail-open, told of trouble here. The trace file opens with :meth:`open`."""

    def __init__(
        self,
        cfg: LensConfig,
        *,
        rank: int,
        world_size: int,
        run_id: str,
        run_meta: dict,
        counter: Counter,
        clock: Callable[[], int],
        summarise: Callable[[int], list[int]],
        fault: Callable[[BaseException], None],
    ) -> None:
        self.cfg, self.counter, self._clock, self._summarise_rows = cfg, counter, clock, summarise
        self.rank, self.run_dir = rank, Path(cfg.run_dir)
        self.start_wall_ns = time.time_ns()
        self.t0 = clock()
        self.work0 = counter.read()
        self.meta = {
            "format_version": FORMAT_VERSION,
            "ailens_version": __version__,
            "run_id": run_id,
            "rank": rank,
            "world_size": world_size,
            "host": platform.node(),
            "pid": os.getpid(),
            "framework": cfg.framework,
            "backend": cfg.backend,
            "counter": counter.kind,
            "counter_unit": counter.unit,
            "counter_fallback": counter.fallback_reason,
            "start_wall_ns": self.start_wall_ns,
            "process_start_wall_ns": _process_start_wall_ns(),
            "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "config": cfg.to_dict(),
            "node": describe_node(),
            "run": run_meta,
        }
        self.op_names: list[str] = []
        self.writer: WriterThread | None = None
        self.buf = EventBuffer(
            cfg.chunk_events,
            clock=clock,
            read_work=counter.read,
            t0=self.t0,
            work0=self.work0,
            intern=self._intern,
            on_fault=fault,
        )
        self.buf.on_full = self.flush
        self._seq = 0  # orders marks and exchanges in the trace
        self._marks: list[dict] = []
        self._x_rows: list[tuple[int, ...]] = []
        self._section: tuple[str, int, int] | None = None

    def open(
        self,
        writer: WriterFactory,
        writer_fault: Callable[[BaseException], None],
        disk: Callable[[str], None],
    ) -> None:
        """Start the writer thread on this rank's trace file (``writer_fault``: called on the
        writer thread when the file fails; ``disk``: a disk problem worth a message)."""
        self.writer = writer(self.run_dir, self.rank, self.meta, writer_fault, disk)

    def _intern(self, op: str) -> int:
        op_id = len(self.op_names)
        self.op_names.append(op)
        self.writer.put_ops(list(self.op_names))
        return op_id

    def now(self) -> int:
        """Nanoseconds since the recording started, on the Lens's clock."""
        return self._clock() - self.t0

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    # ------------------------------------------------------------ the run's log

    def log_mark(self, mark: dict, steps: int) -> dict:
        """Log a mark (schedule, section, info) at ``steps`` steps done; returns it as logged."""
        mark = {
            **mark,
            "seq": self._next_seq(),
            "step": mark.get("step", steps),
            "at_step": steps,  # where it comes among the step ends (offline order)
        }
        self._marks.append(mark)
        return mark

    def log_exchange(self, steps: int, ticks: int, summed: Summed) -> None:
        """Log an exchange round that summed ``ticks`` ticks so far."""
        row = (self._next_seq(), steps, ticks, 1, summed.disabled_ranks, int(summed.stop))
        self._x_rows.append((*row, self._clock() - self.t0))

    def section_begin(self, name: str, steps: int) -> None:
        if self._section is None:
            self._section = (str(name), steps, self._clock() - self.t0)

    def section_end(self, keep: bool) -> dict | None:
        """The mark of the section that ends now (not logged yet); None when none is open
        or not ``keep``."""
        sec, self._section = self._section, None
        if sec is None or not keep:
            return None
        name, step, t0 = sec
        end = self._clock() - self.t0
        return {"kind": "section", "name": name, "step": step, "t_begin_ns": t0, "t_end_ns": end}

    # ------------------------------------------------------------ to the writer

    def summarise_rest(self) -> None:
        """Summarise every row still in the buffer (the exchange takes more than is flushed)."""
        with self.buf.lock:
            self._summarise(self.buf.n)

    def _summarise(self, stop: int) -> None:
        open_ticks = self._summarise_rows(stop)
        if open_ticks:
            mark = {"kind": "open_at_summary", "seq": self._next_seq(), "ticks": open_ticks}
            self._marks.append(mark)

    def flush(self, final: bool = False) -> None:
        """Hand completed rows, step ends, exchanges and marks to the writer."""
        buf = self.buf
        with buf.lock:
            stop = buf.complete_rows(final, _MAX_GROWTH * self.cfg.chunk_events)
            if stop:
                self._summarise(stop)
                self.writer.put_events(buf.columns(0, stop))
                buf.drop_front(stop)
            steps = buf.take_steps()
        if steps is not None:
            self.writer.put_steps(steps)
        if self._x_rows:
            cols = np.array(self._x_rows, dtype=np.int64).T
            self.writer.put_exchanges(dict(zip(_EXCHANGE_COLUMNS, cols, strict=True)))
            self._x_rows = []
        if self._marks:
            self.writer.put_marks(self._marks)
            self._marks = []

    def keep(self, state: dict) -> None:
        """After a fault: completed rows and the exit record (``state``) go to disk."""
        if self.writer is None:
            return
        try:
            self.flush(final=True)
            self.write_exit(self.now(), state)
        except Exception:  # noqa: BLE001 - already failing: keep what can be kept
            pass

    def write_exit(self, end_ns: int, state: dict) -> None:
        """The exit record: ``state`` (closed, crashed, disabled, ticks, steps) and the end."""
        try:
            work = self.counter.read() - self.work0
        except Exception:  # noqa: BLE001 - a broken counter may be why we are closing
            work = None
        info = {**state, "end_ns": end_ns, "end_wall_ns": time.time_ns(), "work_total": work}
        self.writer.put_info(info)


def _process_start_wall_ns() -> int | None:
    """When this process started (wall clock), so the forecast can count the time before
    the Lens started as well. On Linux from /proc, as psutil reads it (importing psutil cost
    the Lens's start ~5-14 ms); elsewhere from psutil."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # Field 22, clock ticks after boot; the name before it, in parentheses, may hold spaces.
        ticks = int(stat[stat.rindex(b")") + 2 :].split()[19])
        with open("/proc/stat", "rb") as f:
            boot_s = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
        return int((boot_s + ticks / os.sysconf("SC_CLK_TCK")) * 1e9)
    except (OSError, ValueError, IndexError, StopIteration):
        pass
    try:
        import psutil

        return int(psutil.Process().create_time() * 1e9)
    except Exception:  # noqa: BLE001 - psutil missing or /proc unreadable: unknown
        return None


def schedule_mark(**keys) -> dict | None:
    """The schedule mark of :meth:`ailens.Lens.set_schedule` (None when every key is None);
    ``keys`` are the fields of :class:`~ailens.record.schedule.Schedule`. Raises ValueError
    naming a bad value, TypeError naming an unknown key."""
    return Schedule.of(**keys).mark()
