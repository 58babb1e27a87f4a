"""The per-tick summary: what one rank contributes to the logical trace at tick k.

One definition, used by the Lens before each cross-rank exchange, by the offline analysis
for every rank of a saved run, by the Chrome export and by the synthetic test runs:

- **compute gap**: the time before the collective during which no earlier collective of this
  rank was still in flight;
- **comm**: the part of the collective's own span that no earlier collective already
  covered. Compute and comm partition the rank's wall time even when collectives overlap
  (DDP buckets), so they add up to the time the rank spent;
- **magnitude**: ``floor(log10(work))`` of the work counter since the previous event;
- **phase key**: what ticks must share besides SIMO to share a phase (the op, or the op and
  the magnitude of the payload size).

A tick still open when it is summarised (its end not seen yet) counts as ending at its begin;
the Lens records which ticks that happened to, so the offline side applies the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..phases import magnitude, phase_key

__all__ = ["TickSummary", "partition", "summarise"]


def partition(
    t_begin: np.ndarray, t_end: np.ndarray, prev_end: int = 0
) -> tuple[np.ndarray, np.ndarray, int]:
    """(comm_ns, compute_ns, latest end) per tick from begin/end times in ns.

    ``prev_end``: the latest end of the ticks before these (0 at the start). An end < 0 (never
    seen) counts as the begin.
    """
    t_begin = np.asarray(t_begin, dtype=np.int64)
    t_end = np.asarray(t_end, dtype=np.int64)
    t_end = np.where(t_end >= 0, t_end, t_begin)
    if not len(t_begin):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), int(prev_end)
    covered = np.maximum.accumulate(np.concatenate(([prev_end], t_end)))
    before = covered[:-1]  # latest end among the earlier ticks
    compute = np.maximum(t_begin - before, 0)
    comm = np.maximum(t_end - np.maximum(t_begin, before), 0)
    return comm, compute, int(covered[-1])


@dataclass(frozen=True)
class TickSummary:
    """Per-tick columns one rank contributes: magnitude of its work, phase key, comm and
    compute-gap nanoseconds."""

    mag: np.ndarray  # int8
    key: np.ndarray  # int64
    comm_ns: np.ndarray  # int64
    compute_ns: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.mag)


def summarise(
    op: np.ndarray,
    nbytes: np.ndarray,
    t_begin: np.ndarray,
    t_end: np.ndarray,
    work: np.ndarray,
    *,
    by_size: bool = False,
    prev_end: int = 0,
) -> tuple[TickSummary, int]:
    """The summary of consecutive ticks of one rank, and the latest end for the next call."""
    comm, compute, last = partition(t_begin, t_end, prev_end)
    key = phase_key(np.asarray(op, dtype=np.int64), np.asarray(nbytes), use_size=by_size)
    return TickSummary(magnitude(np.asarray(work, dtype=np.int64)), key, comm, compute), last
