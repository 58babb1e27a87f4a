"""The per-step table of a run: per step and rank, the step's wall time split into compute
and exposed communication, the communication hidden under compute, and the evaluation or
checkpoint sections inside it.

Exposed communication follows the collectives' grouping: a collective the caller did not wait
for (the next one began before it ended, its op name says non-blocking, or the framework
reduces gradients under the backward pass) joins the next one's group, and a group's wait on
a rank runs from its last begin to its last end. Computed once per run by
``ailens.analyze``; the what-if, the signature record and the HTML report read it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ops import canonical_op, nonblocking_name

__all__ = ["ASYNC_FRAMEWORKS", "StepTable", "step_table"]

# Frameworks that reduce gradients asynchronously under the backward pass.
ASYNC_FRAMEWORKS = ("torch-ddp", "horovod", "keras+horovod")


@dataclass(frozen=True, eq=False)
class StepTable:
    """Rows are steps (step ``s`` spans step end ``s - 1`` to step end ``s`` on each rank's
    clock; step 0 starts when the rank's Lens started), columns the ranks present. A run
    without step boundaries is one row: the whole recording, up to its last collective."""

    end_ns: np.ndarray  # (steps, ranks) int64 step ends (0 past a rank's last recorded one)
    wall_s: np.ndarray  # (steps, ranks) the step's duration
    exposed_s: np.ndarray  # (steps, ranks) waiting on collectives
    compute_s: np.ndarray  # (steps, ranks) wall - exposed
    comm_s: np.ndarray  # (steps, ranks) collectives in flight (sum of their durations)
    overlap_s: np.ndarray  # (steps, ranks) comm - exposed: communication hidden under compute
    sections_s: np.ndarray  # (steps, ranks) evaluation/checkpoint sections inside the step
    sectioned: np.ndarray  # (steps,) bool: a section began in this step on some rank
    cpu_s: np.ndarray | None  # (steps, ranks) CPU seconds (counter "cpu-ns"); NaN where unknown
    section_total_s: tuple[float, ...]  # per rank, every section of the recording
    whole_recording: bool  # no step boundary recorded: the one row is the whole recording
    # Per tick (the logical trace) on every rank present.
    tick_begin_s: np.ndarray  # (ticks, ranks)
    tick_end_s: np.ndarray  # (ticks, ranks) a tick still open ends at its begin
    tick_row: np.ndarray  # (ticks,) the row the tick began in (may be past the last row)
    tick_async: np.ndarray  # (ticks,) bool: the caller went on while it was in flight
    tick_group: np.ndarray  # (ticks,) group id: a run of async ticks and the one closing it
    async_note: str  # why ticks were taken as asynchronous groups ("" when not by framework)

    @property
    def n_steps(self) -> int:
        return self.wall_s.shape[0]

    def training_steps(self, warmup: int) -> np.ndarray:
        """Rows of the post-warm-up training steps: past ``warmup`` (and step 0, which holds
        the start-up), holding no section on any rank. The whole-recording row counts."""
        if self.whole_recording:
            return np.array([0])
        keep = np.zeros(self.n_steps, dtype=bool)
        keep[max(warmup, 1) :] = True
        keep &= ~self.sectioned
        return np.flatnonzero(keep)


def _tick_times(traces, n: int) -> tuple[np.ndarray, np.ndarray]:
    begin = np.zeros((n, len(traces)))
    end = np.zeros((n, len(traces)))
    for j, t in enumerate(traces):
        b = t.events["t_begin"][:n].astype(np.float64)
        e = t.events["t_end"][:n].astype(np.float64)
        begin[:, j] = b / 1e9
        end[:, j] = np.where(e >= 0, e, b) / 1e9
    return begin, end


def _async_ticks(
    begin: np.ndarray, end: np.ndarray, ops: np.ndarray, tick_step, world_size: int, fw: str
) -> tuple[np.ndarray, str]:
    """Per tick: True when the caller went on computing while it was in flight, so the wait
    for it happens at a later tick of its group. Seen in the trace when the next collective
    began before it ended (on the median rank), or said by a non-blocking op name; for
    frameworks that reduce gradients asynchronously under the backward pass (DDP, Horovod),
    a step's consecutive allreduces form one group whatever their timing (a bucket that
    finishes before the next one is ready was still hidden under backward)."""
    n = begin.shape[0]
    flag = np.zeros(n, dtype=bool)
    if n < 2:
        return flag, ""
    same_step = tick_step[1:] == tick_step[:-1]
    if world_size > 1:
        flag[:-1] = (np.median(begin[1:] - end[:-1], axis=1) < 0) & same_step
    named = np.array([nonblocking_name(o) for o in ops])
    flag[:-1] |= named[:-1] & same_step
    if not fw.startswith(ASYNC_FRAMEWORKS):
        return flag, ""
    ar = np.array([canonical_op(str(o)) == "allreduce" for o in ops])
    chained = ar[:-1] & ar[1:] & same_step
    flag[:-1] |= chained
    note = (
        f"a step's consecutive allreduces are taken as one asynchronous group ({fw} reduces "
        "gradients under the backward pass): only the wait after the last one is exposed"
    )
    return flag, note if chained.any() else ""


def _exposed(begin, end, gid, tick_row, rows: int) -> np.ndarray:
    """Per row and rank, the waits of the groups that end in that row, added in tick order."""
    n, ranks = begin.shape
    exposed = np.zeros((rows, ranks))
    if not n:
        return exposed
    starts = np.flatnonzero(np.concatenate(([True], gid[1:] != gid[:-1])))
    stops = np.concatenate((starts[1:], [n]))
    g_row = tick_row[stops - 1]
    keep = g_row < rows
    starts, stops, g_row = starts[keep], stops[keep], g_row[keep]
    lone = stops - starts == 1
    waits = np.empty((len(starts), ranks))
    waits[lone] = np.maximum(end[starts[lone]] - begin[starts[lone]], 0.0)
    for g in np.flatnonzero(~lone).tolist():
        s0, s1 = int(starts[g]), int(stops[g])
        waits[g] = np.maximum(end[s0:s1].max(axis=0) - begin[s1 - 1], 0.0)
    np.add.at(exposed, g_row, waits)  # in tick order, as a loop adds
    return exposed


def _sections(traces, rows: int) -> tuple[np.ndarray, np.ndarray, tuple[float, ...]]:
    per = np.zeros((rows, len(traces)))
    sectioned = np.zeros(rows, dtype=bool)
    totals = []
    for j, t in enumerate(traces):
        total = 0
        for m in t.marks:
            if m.get("kind") != "section":
                continue
            ns = max(int(m.get("t_end_ns", 0)) - int(m.get("t_begin_ns", 0)), 0)
            total += ns
            s = int(m.get("step", -1))
            if 0 <= s < rows:
                sectioned[s] = True
                per[s, j] += ns / 1e9
        totals.append(total / 1e9)
    return per, sectioned, tuple(totals)


def _cpu(traces, rows: int) -> np.ndarray:
    """CPU seconds per step from the counter at each step end (NaN for step 0, which has no
    reading before it, and for a rank that recorded another number of steps)."""
    cpu = np.full((rows, len(traces)), np.nan)
    for j, t in enumerate(traces):
        w = np.asarray(t.steps["work"][:rows], dtype=np.float64) / 1e9
        if len(w) == rows:
            cpu[1:, j] = w[1:] - w[:-1]
    return cpu


def step_table(
    traces, n: int, tick_step: np.ndarray, ops: np.ndarray, *, world_size: int, fw: str, counter
) -> StepTable:
    """The table of the first ``n`` ticks of ``traces`` (the ranks present); ``tick_step``
    and ``ops`` (op name per tick) are the logical trace's."""
    begin, end = _tick_times(traces, n)
    flag, note = _async_ticks(begin, end, ops, tick_step, world_size, fw)
    gid = np.concatenate(([0], np.cumsum(~flag[:-1]))) if n else np.zeros(0, dtype=np.int64)
    rows = len(traces[0].steps["t_ns"]) if traces else 0
    whole = rows == 0
    end_ns = np.zeros((max(rows, 1), len(traces)), dtype=np.int64)
    if whole:
        rows, tick_row = 1, np.zeros(n, dtype=np.int64)
        ends = end.max(axis=0, keepdims=True) if n else np.zeros((1, len(traces)))
    else:
        tick_row = tick_step
        for j, t in enumerate(traces):
            st = np.asarray(t.steps["t_ns"][:rows], dtype=np.int64)
            end_ns[: len(st), j] = st
        ends = end_ns.astype(np.float64) / 1e9
    exposed = _exposed(begin, end, gid, tick_row, rows)
    wall = np.zeros((rows, len(traces)))
    wall[0] = ends[0]
    wall[1:] = np.diff(ends, axis=0)
    comm = np.zeros((rows, len(traces)))
    inside = tick_row < rows
    np.add.at(comm, tick_row[inside], np.maximum(end - begin, 0.0)[inside])
    sections, sectioned, totals = _sections(traces, rows)
    if whole:
        note = "; ".join(
            x for x in (note, "no step boundaries recorded: the whole recording is one step") if x
        )
    return StepTable(
        end_ns=end_ns,
        wall_s=wall,
        exposed_s=exposed,
        compute_s=wall - exposed,
        comm_s=comm,
        overlap_s=np.maximum(comm - exposed, 0.0),
        sections_s=sections,
        sectioned=sectioned,
        cpu_s=_cpu(traces, rows) if counter == "cpu-ns" and not whole else None,
        section_total_s=totals,
        whole_recording=whole,
        tick_begin_s=begin,
        tick_end_s=end,
        tick_row=tick_row,
        tick_async=flag,
        tick_group=gid,
        async_note=note,
    )
