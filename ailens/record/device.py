"""Device time: collectives and steps timed on an accelerator, resolved later.

On a GPU the CPU's view is wrong in kind: a collective's host call returns when the work is
*enqueued*, and the host's CPU time says nothing about the kernels between two collectives.
So an integration that runs on a device hands the Lens a :class:`DeviceClock` (for CUDA:
timing events recorded on a stream; ``ailens.integrations.torch``) and marks three points:

- a collective's **ready** point: an event on the stream that produced its input, recorded
  just before the collective is launched (the collective cannot start before it);
- its **end**: an event recorded on a stream made to wait for the collective's completion
  (for torch, inside the collective future's callback, whose current stream waits on it);
- each **step end**: an event on the training stream after the optimizer's kernels.

Nothing synchronises on the hot path: marks are kept pending and resolved at later step ends
by asking whether each event has completed (``done``, non-blocking), oldest first; only
``close`` waits for the device. Resolved rows go into the trace as ``device`` marks (times in
ns from an origin event recorded when the clock was attached) and the analysis reads them
(``ailens.analysis.device``): per collective its time on the device, per step the device step
time, and between collectives the device time of the work, the counter ``gpu-ns``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["DeviceClock", "DeviceTimes", "DEVICE_COUNTER"]

# The counter name of device time between collectives, as reports and traces spell it.
DEVICE_COUNTER = "gpu-ns"
# Resolved rows are written as one mark once this many are waiting (and at close).
_ROWS_PER_MARK = 512


class DeviceClock(Protocol):
    """What an integration supplies: timing events on its device."""

    name: str  # e.g. "cuda-events"

    def mark(self) -> Any:
        """Record a timing event on the current stream now; return it."""

    def done(self, event: Any) -> bool:
        """Whether the device has passed ``event`` (never blocks)."""

    def elapsed_ns(self, start: Any, end: Any) -> int:
        """Device nanoseconds from ``start`` to ``end`` (both done)."""

    def wait(self) -> None:
        """Block until the device has done everything enqueued (close only)."""


class DeviceTimes:
    """The pending device marks of one rank and their resolution into trace rows.

    ``log(mark)`` receives each ``device`` mark (the Lens logs it into the trace). The
    collective methods may be called from the framework's threads (a comm future's callback):
    a pending collective is a small list whose end slot is filled there.
    """

    def __init__(
        self, clock: DeviceClock, *, log: Callable[[dict], None], origin_ns: int, queued: bool
    ) -> None:
        self.clock, self._log = clock, log
        # Whether the collectives run one after another on one stream (NCCL), so each waits
        # for the previous one, or side by side (gloo's worker threads).
        self.queued = queued
        self.origin = clock.mark()
        self.origin_ns = origin_ns  # the host clock when the origin was recorded
        self._collectives: deque[list] = deque()  # [tick, ready_event, end_event | None]
        self._steps: deque[tuple[int, Any]] = deque()
        self._rows: dict[str, list[int]] = _empty_rows()
        self.resolved_collectives = self.resolved_steps = 0

    # ------------------------------------------------------------ marking (hot path)

    def collective_ready(self, tick: int) -> list:
        """Before launching collective ``tick``: its ready event; returns the pending entry."""
        entry = [tick, self.clock.mark(), None]
        self._collectives.append(entry)
        return entry

    def collective_done(self, entry: list) -> None:
        """Where the current stream waits for the collective's completion: its end event."""
        entry[2] = self.clock.mark()

    def step(self, step: int) -> None:
        """Step ``step`` ended on the host: its event on the training stream."""
        self._steps.append((step, self.clock.mark()))

    # ------------------------------------------------------------ resolution

    def resolve(self, *, final: bool = False) -> None:
        """Move every completed mark (oldest first, stopping at the first still running) into
        rows; log them as a mark when enough wait, or all of them when ``final`` (which first
        waits for the device: close only)."""
        if final:
            self.clock.wait()
        # Only the training thread resolves (step ends, close); the framework's threads only
        # fill a pending entry's end slot, which is read here once set.
        self._resolve_collectives()
        self._resolve_steps()
        waiting = len(self._rows["tick"]) + len(self._rows["step"])
        if waiting and (final or waiting >= _ROWS_PER_MARK):
            rows, self._rows = self._rows, _empty_rows()
            self._log(
                {
                    "kind": "device",
                    "clock": self.clock.name,
                    "counter": DEVICE_COUNTER,
                    "queued": self.queued,
                    "origin_ns": self.origin_ns,
                    **rows,
                }
            )

    def _resolve_collectives(self) -> None:
        clock, pending, rows = self.clock, self._collectives, self._rows
        while pending:
            tick, ready, end = pending[0]
            if end is None or not clock.done(end):
                break
            pending.popleft()
            rows["tick"].append(int(tick))
            rows["ready_ns"].append(clock.elapsed_ns(self.origin, ready))
            rows["end_ns"].append(clock.elapsed_ns(self.origin, end))
            self.resolved_collectives += 1

    def _resolve_steps(self) -> None:
        clock, pending, rows = self.clock, self._steps, self._rows
        while pending and clock.done(pending[0][1]):
            step, event = pending.popleft()
            rows["step"].append(int(step))
            rows["step_end_ns"].append(clock.elapsed_ns(self.origin, event))
            self.resolved_steps += 1

    @property
    def pending(self) -> int:
        """Marks not resolved yet."""
        return len(self._collectives) + len(self._steps)


def _empty_rows() -> dict[str, list[int]]:
    return {"tick": [], "ready_ns": [], "end_ns": [], "step": [], "step_end_ns": []}
