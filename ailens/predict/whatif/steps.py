"""A run's training steps split into compute and exposed communication, per rank.

The collectives of a step form groups (a run of ticks each overlapped by the next, plus the
tick that closes it): a group's exposed time on a rank runs from its last begin to its last
end, the rest of the step is compute. The replay (``replay.py``) moves these groups to the
target; the features (``features.py``) summarise them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..collectives import canonical_op

__all__ = [
    "StepSplit",
    "Steps",
    "measured_step_s",
    "pure_durations",
    "split_steps",
    "training_steps",
]

# Frameworks whose gradient allreduces run asynchronously under the backward pass.
_ASYNC_FRAMEWORKS = ("torch-ddp", "horovod", "keras+horovod")


def training_steps(a, warmup: int) -> np.ndarray:
    """Indices of post-warm-up steps (0-based; step s spans step_end[s-1]..step_end[s]) that
    hold no evaluation/checkpoint section on any rank."""
    n = len(a.step_end_s)
    keep = np.zeros(n, dtype=bool)
    keep[max(warmup, 1) :] = True
    for t in a.run.ranks:
        for m in t.marks:
            if m.get("kind") == "section":
                s = int(m.get("step", -1))
                if 0 <= s < n:
                    keep[s] = False
    return np.flatnonzero(keep)


def measured_step_s(a, warmup: int | None = None) -> float:
    """Mean duration of the post-warm-up training steps on rank 0's clock (steps holding an
    evaluation or checkpoint section left out): what the what-if predicts."""
    warm = a.config.warmup_steps if warmup is None else int(warmup)
    idx = training_steps(a, warm)
    if not len(idx):
        raise ValueError(f"{a.run.path}: no training step after {warm} warm-up steps")
    t = np.asarray(a.run.ranks[0].steps["t_ns"], dtype=np.int64)
    return float(np.mean(t[idx] - t[idx - 1])) / 1e9


def _nonblocking_name(name: str) -> bool:
    """Op names that say the call returned before the collective ended (``Iallreduce``,
    ``allreduce_async``)."""
    n = str(name)
    return n.lower().endswith("async") or (len(n) > 1 and n[0] == "I" and n[1].islower())


def _async_ticks(a, begin: np.ndarray, end: np.ndarray, ops: np.ndarray) -> tuple[np.ndarray, str]:
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
    same_step = a.tick_step[1:] == a.tick_step[:-1]
    if a.ranks > 1:
        flag[:-1] = (np.median(begin[1:] - end[:-1], axis=1) < 0) & same_step
    named = np.array([_nonblocking_name(o) for o in ops])
    flag[:-1] |= named[:-1] & same_step
    fw = str(a.run.meta.get("framework", ""))
    if not fw.startswith(_ASYNC_FRAMEWORKS):
        return flag, ""
    ar = np.array([canonical_op(str(o)) == "allreduce" for o in ops])
    chained = ar[:-1] & ar[1:] & same_step
    flag[:-1] |= chained
    note = (
        f"a step's consecutive allreduces are taken as one asynchronous group ({fw} reduces "
        "gradients under the backward pass): only the wait after the last one is exposed"
    )
    return flag, note if chained.any() else ""


@dataclass(frozen=True)
class Steps:
    """Per training step (rows) the arrays the prediction replays."""

    idx: np.ndarray  # step indices
    wall0: np.ndarray  # rank 0's step duration (s)
    comp_mean: np.ndarray  # mean over ranks of compute (s)
    comp_max: np.ndarray
    groups: list  # per step: list of (tick indices, begin offsets s)


@dataclass(frozen=True)
class StepSplit:
    """The training steps (``steps``), each one's exposed comm per rank (``exposed``: rows =
    steps, columns = ranks), per tick whether it overlapped the next (``async_ticks``) and
    the step it fell in (``tick_step``), the CPU seconds of a step (CPU-time counter only)
    and what the split assumed (``note``)."""

    steps: Steps
    exposed: np.ndarray
    async_ticks: np.ndarray
    note: str
    cpu_s: float | None
    tick_step: np.ndarray


def split_steps(a, warm: int) -> StepSplit:
    """Split every training step into compute and exposed comm, per rank. A run without
    step boundaries counts as one step from the Lens's start to its last collective."""
    n, R = a.n_ticks, len(a.run.ranks)
    begin, end = _tick_times(a, n, R)
    names = np.asarray(a.op_names, dtype=object)
    ops = names[a.tick_op] if n else np.zeros(0, dtype=object)
    flag, note = _async_ticks(a, begin, end, ops)
    nsteps = len(a.step_end_s)
    no_steps = nsteps == 0
    if no_steps:
        nsteps, idx = 1, np.array([0])
        steps_t = end.max(axis=0, keepdims=True) if n else np.zeros((1, R))
        tick_step = np.zeros(n, dtype=np.int64)
    else:
        idx = training_steps(a, warm)
        steps_t = np.zeros((nsteps, R))
        for j, t in enumerate(a.run.ranks):
            st = np.asarray(t.steps["t_ns"][:nsteps], dtype=np.float64) / 1e9
            steps_t[: len(st), j] = st
        tick_step = a.tick_step
    exposed, group_rows = _groups(begin, end, flag, tick_step, nsteps)
    wall = np.zeros((nsteps, R))
    wall[0] = steps_t[0] if no_steps else 0.0
    wall[1:] = np.diff(steps_t, axis=0)
    comp = wall - exposed
    sel = idx[idx < nsteps]
    steps = Steps(
        idx=sel,
        wall0=wall[sel, 0],
        comp_mean=comp[sel].mean(axis=1),
        comp_max=comp[sel].max(axis=1),
        groups=[group_rows.get(int(s), []) for s in sel],
    )
    if no_steps:
        note = "; ".join(
            x for x in (note, "no step boundaries recorded: the whole recording is one step") if x
        )
    cpu = None if no_steps else _cpu_per_step(a, sel, nsteps)
    return StepSplit(steps, exposed[sel], flag, note, cpu, tick_step)


def _tick_times(a, n: int, R: int) -> tuple[np.ndarray, np.ndarray]:
    """(begin, end) of every tick on every rank, seconds (rows = ticks, columns = ranks);
    a collective still open at the end of the recording ends where it began."""
    begin = np.zeros((n, R))
    end = np.zeros((n, R))
    for j, t in enumerate(a.run.ranks):
        b = t.events["t_begin"][:n].astype(np.float64)
        e = t.events["t_end"][:n].astype(np.float64)
        begin[:, j] = b / 1e9
        end[:, j] = np.where(e >= 0, e, b) / 1e9
    return begin, end


def _groups(begin, end, flag, tick_step, nsteps: int) -> tuple[np.ndarray, dict]:
    """Per step and rank the exposed comm of its groups (from a group's last begin to its
    last end), and per step its groups as (tick indices, begin offsets s)."""
    n, R = begin.shape
    # Group = a run of ticks each overlapped by the next, plus the tick that closes it.
    gid = np.concatenate(([0], np.cumsum(~flag[:-1]))) if n else np.zeros(0, dtype=np.int64)
    exposed = np.zeros((nsteps, R))
    group_rows: dict[int, list] = {}
    if not n:
        return exposed, group_rows
    starts = np.flatnonzero(np.concatenate(([True], gid[1:] != gid[:-1])))
    stops = np.concatenate((starts[1:], [n]))
    g_step = tick_step[stops - 1]
    keep = g_step < nsteps
    starts, stops, g_step = starts[keep], stops[keep], g_step[keep]
    lone = stops - starts == 1
    waits = np.empty((len(starts), R))
    waits[lone] = np.maximum(end[starts[lone]] - begin[starts[lone]], 0.0)
    for g in np.flatnonzero(~lone).tolist():
        s0, s1 = int(starts[g]), int(stops[g])
        waits[g] = np.maximum(end[s0:s1].max(axis=0) - begin[s1 - 1], 0.0)
    np.add.at(exposed, g_step, waits)  # in tick order, as a loop adds
    for s0, s1, step in zip(starts.tolist(), stops.tolist(), g_step.tolist(), strict=True):
        offsets = np.zeros(1) if s1 - s0 == 1 else (begin[s0:s1] - begin[s0]).mean(axis=1)
        group_rows.setdefault(step, []).append((np.arange(s0, s1), offsets))
    return exposed, group_rows


def _cpu_per_step(a, sel: np.ndarray, nsteps: int) -> float | None:
    """CPU time per step per rank (counter at step ends), when the counter is CPU time."""
    if a.counter != "cpu-ns" or not len(sel):
        return None
    per = []
    for t in a.run.ranks:
        w = np.asarray(t.steps["work"][:nsteps], dtype=np.float64) / 1e9
        if len(w) == nsteps:
            per.append(w[sel] - w[sel - 1])
    return float(np.mean(per)) if per else None


def pure_durations(a) -> np.ndarray:
    """Per tick: exclusive comm time on the fastest rank (queueing behind an earlier
    collective and waiting for late ranks removed)."""
    return np.asarray(a.comm_min_s, dtype=np.float64)
