"""The trace writer thread: compresses and appends a rank's chunks off the training thread.

The Lens hands it event, step, exchange and mark columns; zlib and disk I/O run on a daemon
thread, in order. Chunks the disk refuses (ENOSPC, EDQUOT, EIO) wait in memory, in order, and
are retried before each later chunk and at close. Past BACKLOG_BYTES the trace stops growing
and stays a readable prefix: dropping a chunk mid-file would shift every later tick.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path

from .trace import TraceWriter, encode_events, encode_exchanges, encode_json, encode_steps

log = logging.getLogger("ailens")

BACKLOG_BYTES = 64 << 20

_ENCODERS: dict[str, Callable] = {
    "events": encode_events,
    "steps": encode_steps,
    "ops": lambda names: encode_json(b"OPS ", names),
    "info": lambda info: encode_json(b"INFO", info),
    "marks": lambda marks: encode_json(b"MARK", marks),
    "exchanges": encode_exchanges,
}


class WriterThread:
    """Compresses and appends chunks on a daemon thread, in order.

    Chunks the disk refuses wait in a bounded in-memory backlog and are retried (see
    BACKLOG_BYTES); ``on_disk`` reports the trouble, ``on_error`` a give-up. ``file_wrapper``
    wraps the open trace file (tests put a full disk there).
    """

    def __init__(
        self,
        run_dir: Path,
        rank: int,
        meta: dict,
        on_error,
        on_disk=None,
        *,
        file_wrapper: Callable | None = None,
    ) -> None:
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
        self._writer = TraceWriter(self.path, meta, file_wrapper=file_wrapper)
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

    def put_exchanges(self, cols) -> None:
        self._queue.put(("exchanges", cols))

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
                if self._writer.broken or self.backlog_bytes > BACKLOG_BYTES:
                    raise
                if not self._refused:
                    self._refused = True
                    self._on_disk(
                        f"cannot write the trace {self.path} ({e}); keeping up to "
                        f"{BACKLOG_BYTES >> 20} MiB of it in memory and retrying; "
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
