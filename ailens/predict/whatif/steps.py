"""A run's training steps as the what-if replays them, read from the analysis's per-step
table (``RunAnalysis.steps``: compute and exposed communication per step and rank, each
tick's group).

A group is a run of ticks each overlapped by the next, plus the tick that closes it; its
exposed time on a rank runs from its last begin to its last end (``analysis.steps``). The
replay (``replay.py``) moves a step's groups to the target; the features (``features.py``)
summarise them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["StepSplit", "Steps", "measured_step_s", "split_steps"]


def measured_step_s(a, warmup: int | None = None) -> float:
    """Mean duration of the post-warm-up training steps on rank 0's clock (steps holding an
    evaluation or checkpoint section left out): what the what-if predicts."""
    warm = a.config.warmup_steps if warmup is None else int(warmup)
    table = a.steps
    idx = np.zeros(0, dtype=np.int64) if table.whole_recording else table.training_steps(warm)
    if not len(idx):
        raise ValueError(f"{a.run.path}: no training step after {warm} warm-up steps")
    t = table.end_ns[:, 0]
    return float(np.mean(t[idx] - t[idx - 1])) / 1e9


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
    """The training steps of ``a`` (a ``RunAnalysis``) after ``warm`` warm-up steps. A run
    without step boundaries counts as one step from the Lens's start to its last
    collective."""
    table = a.steps
    sel = table.training_steps(warm)
    steps = Steps(
        idx=sel,
        wall0=table.wall_s[sel, 0],
        comp_mean=table.compute_s[sel].mean(axis=1),
        comp_max=table.compute_s[sel].max(axis=1),
        groups=_step_groups(table, sel),
    )
    return StepSplit(
        steps, table.exposed_s[sel], table.tick_async, table.async_note, _cpu(table, sel),
        table.tick_row,
    )  # fmt: skip


def _step_groups(table, sel: np.ndarray) -> list:
    """Per selected step its groups as (tick indices, begin offsets in s from the group's
    first begin, mean over ranks)."""
    gid, n = table.tick_group, len(table.tick_group)
    rows: dict[int, list] = {}
    if n:
        starts = np.flatnonzero(np.concatenate(([True], gid[1:] != gid[:-1])))
        stops = np.concatenate((starts[1:], [n]))
        begin = table.tick_begin_s
        for s0, s1 in zip(starts.tolist(), stops.tolist(), strict=True):
            step = int(table.tick_row[s1 - 1])
            if step >= table.n_steps:
                continue
            offsets = np.zeros(1) if s1 - s0 == 1 else (begin[s0:s1] - begin[s0]).mean(axis=1)
            rows.setdefault(step, []).append((np.arange(s0, s1), offsets))
    return [rows.get(int(s), []) for s in sel]


def _cpu(table, sel: np.ndarray) -> float | None:
    """CPU seconds of a training step, mean over the ranks that recorded every step."""
    if table.cpu_s is None or not len(sel):
        return None
    cpu = table.cpu_s[sel]
    full = ~np.isnan(table.cpu_s[1:]).any(axis=0)
    if not full.any():
        return None
    return float(np.mean(np.ascontiguousarray(cpu[:, full].T)))
