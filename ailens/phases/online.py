"""Online SIMO phases: the same ids and table as ``phase_table(assign(...))``, fed batch by
batch with memory that does not grow with the number of ticks."""

from __future__ import annotations

from typing import Any

import numpy as np

from .detect import _as_int_1d, _check_key, _Matcher
from .table import OpNames, PhaseTable, _build_table, _check_share, _seconds

__all__ = ["OnlinePhases"]


# --------------------------------------------------------------------------- online


class OnlinePhases:
    """Online SIMO phases: feed batches of ticks, read the table at any time.

    Keeps per-phase running sums (count, comm, compute) and the (key, SIMO) -> id memo, so
    memory is O(phases + distinct (key, SIMO) values), independent of the number of ticks.
    Ids and tables equal the offline ``phase_table(assign(...), ...)`` on the concatenated
    ticks, for any split into batches.
    """

    def __init__(self, tolerance: int = 1, min_share: float = 0.01) -> None:
        _check_share(min_share)
        self._matcher = _Matcher(tolerance)
        self.min_share = float(min_share)
        self.n_ticks = 0
        self._count = np.zeros(17, dtype=np.int64)  # index = phase id; slot 0 unused
        self._comm = np.zeros(17)
        self._compute = np.zeros(17)
        self._ops: list[Any] = [None]
        self._reps: list[int] = [0]

    @property
    def tolerance(self) -> int:
        return self._matcher.tolerance

    @property
    def n_phases(self) -> int:
        return self._matcher.n_phases

    def add(
        self,
        simo: Any,
        key: Any = None,
        comm_s: Any = None,
        compute_s: Any = None,
        *,
        op: Any = None,
    ) -> np.ndarray:
        """Add a batch of ticks (1-D arrays, one value per tick); returns their phase ids.

        ``op`` (optional, per tick) labels new phases; it defaults to ``key``.
        """
        s = _as_int_1d(simo, "simo")
        n = len(s)
        k = _check_key(key, n)
        comm = _seconds(comm_s, n, "comm_s")
        compute = _seconds(compute_s, n, "compute_s")
        before = self._matcher.n_phases
        ids = self._matcher.match(s, k)
        after = self._matcher.n_phases
        if after >= len(self._count):
            grow = max(2 * len(self._count), after + 1) - len(self._count)
            self._count = np.concatenate([self._count, np.zeros(grow, dtype=np.int64)])
            self._comm = np.concatenate([self._comm, np.zeros(grow)])
            self._compute = np.concatenate([self._compute, np.zeros(grow)])
        if after > before:
            # A new phase's first tick is in this batch: label it from that tick.
            labels = k if op is None else np.asarray(op)
            _, first = np.unique(ids[ids > before], return_index=True)
            first = np.flatnonzero(ids > before)[first]
            for t in first.tolist():  # new ids are consecutive, in first-appearance order
                self._ops.append(None if labels is None else labels[t].item())
                self._reps.append(int(s[t]))
        size = after + 1
        self._count[:size] += np.bincount(ids, minlength=size)
        self._comm[:size] += np.bincount(ids, weights=comm, minlength=size)
        self._compute[:size] += np.bincount(ids, weights=compute, minlength=size)
        self.n_ticks += n
        return ids

    def counts(self) -> np.ndarray:
        """Occurrences per phase (index i is phase i + 1); a copy, O(phases)."""
        return self._count[1 : self.n_phases + 1].copy()

    def table(self, op_names: OpNames = None) -> PhaseTable:
        """The phase table of all ticks added so far."""
        size = self.n_phases + 1
        return _build_table(
            np.arange(1, size),
            self._count[1:size],
            self._comm[1:size],
            self._compute[1:size],
            self._ops[1:],
            self._reps[1:],
            op_names,
            self.min_share,
            self.n_ticks,
        )
