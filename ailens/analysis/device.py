"""Device time read back from a trace: what ``ailens.record.device`` resolved on each rank.

Per collective (tick) the device gives two points, in ns from the rank's device origin:
``ready`` (its input was produced on the training stream) and ``end`` (it completed). The
collectives of a rank either queue on one communication stream (NCCL: ``queued``), so one
runs on the device from ``max(ready, previous end)`` to ``end``, or run side by side (gloo's
worker threads), from ``ready`` to ``end``: that span is its device time (``comm_ns``),
comparable to the communication's time in a profiler (the NCCL kernel; with gloo, the copy
of the bucket to the host through the copy back). The work
before a collective, the ``gpu-ns`` counter, is the training stream's time from the previous
collective's ready point (or the previous step's end) to this one's ready point. Step times
are the differences of the step-end events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..record.device import DEVICE_COUNTER

__all__ = ["DeviceRank", "DeviceSummary", "device_rank", "device_summary"]


@dataclass(frozen=True)
class DeviceRank:
    """One rank's resolved device rows (ns from its device origin)."""

    rank: int
    clock: str
    queued: bool  # collectives one after another on one stream (NCCL), else side by side
    tick: np.ndarray
    ready_ns: np.ndarray
    end_ns: np.ndarray
    step: np.ndarray
    step_end_ns: np.ndarray

    @property
    def comm_ns(self) -> np.ndarray:
        """Each collective's time on the device: from when it could start to its end. Queued
        collectives (NCCL: one stream) start once their input is ready and the previous one
        ended; side by side (gloo's threads), once their input is ready."""
        if not self.queued or not len(self.tick):
            return self.end_ns - self.ready_ns
        prev_end = np.maximum.accumulate(np.concatenate(([self.ready_ns[0]], self.end_ns[:-1])))
        return self.end_ns - np.maximum(self.ready_ns, prev_end)

    @property
    def step_ns(self) -> np.ndarray:
        """Device step times (the first step has no start and is left out)."""
        return np.diff(self.step_end_ns)

    def work_ns(self) -> np.ndarray:
        """The ``gpu-ns`` counter: device time of the training stream before each collective,
        from the previous collective's ready point or the previous step's end, whichever
        came later."""
        if not len(self.tick):
            return np.zeros(0, dtype=np.int64)
        starts = np.concatenate(([0], self.ready_ns[:-1]))
        if len(self.step_end_ns):
            i = np.searchsorted(self.step_end_ns, self.ready_ns, side="right") - 1
            after_step = np.where(i >= 0, self.step_end_ns[np.maximum(i, 0)], 0)
            starts = np.maximum(starts, after_step)
        return np.maximum(self.ready_ns - starts, 0)


@dataclass(frozen=True)
class DeviceSummary:
    """The device figures a report shows (medians over the resolved steps and collectives of
    every rank)."""

    clock: str
    counter: str
    ranks: int
    steps: int
    collectives: int
    step_s: float | None  # median device step time
    collective_s: float | None  # median device time of one collective
    comm_per_step_s: float | None  # device time in collectives per step (median)
    work_per_step_s: float | None  # gpu-ns before collectives per step (median)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def device_rank(rank: int, marks, *, backend: str = "") -> DeviceRank | None:
    """The device rows among a rank's trace marks (None when it recorded none). ``backend``
    (the trace's) decides ``queued`` for rows written before marks carried it."""
    rows = [m for m in marks if m.get("kind") == "device"]
    if not rows:
        return None

    def col(name: str) -> np.ndarray:
        return np.asarray([v for m in rows for v in m.get(name, ())], dtype=np.int64)

    tick, step = col("tick"), col("step")
    order, step_order = np.argsort(tick, kind="stable"), np.argsort(step, kind="stable")
    return DeviceRank(
        rank=rank,
        clock=str(rows[0].get("clock", "")),
        queued=bool(rows[0].get("queued", backend != "gloo")),
        tick=tick[order],
        ready_ns=col("ready_ns")[order],
        end_ns=col("end_ns")[order],
        step=step[step_order],
        step_end_ns=col("step_end_ns")[step_order],
    )


def device_summary(ranks: list[DeviceRank]) -> DeviceSummary | None:
    """Medians over the ranks' device rows; None without any."""
    if not ranks:
        return None
    step_ns = np.concatenate([r.step_ns for r in ranks])
    comm_ns = np.concatenate([r.comm_ns for r in ranks])
    per_step_comm, per_step_work = [], []
    for r in ranks:
        if not len(r.tick) or len(r.step_end_ns) < 2:
            continue
        # the step a collective belongs to: the first step end at or after its ready point
        at = np.searchsorted(r.step_end_ns, r.ready_ns, side="left")
        inside = (at > 0) & (at < len(r.step_end_ns))  # whole steps only
        n = len(r.step_end_ns)
        per_step_comm.append(np.bincount(at[inside], r.comm_ns[inside], minlength=n)[1:])
        per_step_work.append(np.bincount(at[inside], r.work_ns()[inside], minlength=n)[1:])

    def med(a) -> float | None:
        a = np.concatenate(a) if isinstance(a, list) and a else np.asarray(a)
        return float(np.median(a)) / 1e9 if len(a) else None

    return DeviceSummary(
        clock=ranks[0].clock,
        counter=DEVICE_COUNTER,
        ranks=len(ranks),
        steps=int(sum(len(r.step_end_ns) for r in ranks)),
        collectives=int(sum(len(r.tick) for r in ranks)),
        step_s=med(step_ns),
        collective_s=med(comm_ns),
        comm_per_step_s=med(per_step_comm),
        work_per_step_s=med(per_step_work),
    )
