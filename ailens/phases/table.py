"""Phase tables: per phase its weight, time per occurrence, comm/compute split and share
(:func:`phase_table`), and the cells of the paper's Tables 2 and 3 with their plain text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .detect import _as_int_1d

__all__ = [
    "Phase",
    "PhaseTable",
    "TABLE2_HEAD",
    "TABLE3_HEADER",
    "format_table2",
    "format_table3_row",
    "phase_table",
    "table2_rows",
    "table3_cells",
]


# --------------------------------------------------------------------------- phase tables


@dataclass(frozen=True)
class Phase:
    """One phase: its representative and how much of the run it accounts for."""

    id: int
    op: str | int | None  # op (name if op_names given) of the phase's first tick
    simo: int | None  # representative: SIMO of the phase's first tick
    weight: int  # occurrences (ticks)
    time_per_occurrence_s: float  # mean comm + compute per tick
    comm_per_occurrence_s: float
    compute_per_occurrence_s: float
    total_s: float  # time_per_occurrence_s * weight
    share: float  # total_s / whole time of the run


@dataclass(frozen=True)
class PhaseTable:
    """Phases kept (share >= min_share, sorted by id), ids dropped, and run totals.

    ``n_phases`` counts every detected phase (kept + dropped), which is what the paper's
    Table 3 "current number of phases" reports; the percentages cover all ticks.
    """

    phases: tuple[Phase, ...]
    dropped: tuple[int, ...]
    total_s: float
    comm_s: float
    compute_s: float
    comm_pct: float
    compute_pct: float
    n_phases: int
    n_ticks: int
    min_share: float
    dropped_s: float

    @property
    def n_kept(self) -> int:
        return len(self.phases)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (plain Python types only)."""
        return {
            "phases": [asdict(p) for p in self.phases],
            "dropped": list(self.dropped),
            "total_s": self.total_s,
            "comm_s": self.comm_s,
            "compute_s": self.compute_s,
            "comm_pct": self.comm_pct,
            "compute_pct": self.compute_pct,
            "n_phases": self.n_phases,
            "n_kept": self.n_kept,
            "n_ticks": self.n_ticks,
            "min_share": self.min_share,
            "dropped_s": self.dropped_s,
        }


OpNames = Sequence[str] | Mapping[int, str] | None


def _op_label(op: Any, op_names: OpNames) -> str | int | None:
    if op is None:
        return None
    op = int(op)
    if op_names is not None:
        try:
            return op_names[op]
        except (IndexError, KeyError):
            pass
    return op


def _check_share(min_share: float) -> None:
    if not 0 <= min_share <= 1:
        raise ValueError(f"min_share must be in [0, 1], got {min_share}")


def _build_table(
    ids: np.ndarray,
    count: np.ndarray,
    comm: np.ndarray,
    compute: np.ndarray,
    ops: Sequence[Any],
    reps: Sequence[Any],
    op_names: OpNames,
    min_share: float,
    n_ticks: int,
) -> PhaseTable:
    """Table from per-phase sums (arrays aligned with ``ids``, all counts > 0)."""
    _check_share(min_share)
    total = comm + compute
    comm_all, compute_all = float(comm.sum()), float(compute.sum())
    whole = comm_all + compute_all
    kept: list[Phase] = []
    dropped: list[int] = []
    dropped_s = 0.0
    for i in range(len(ids)):
        share = float(total[i]) / whole if whole > 0 else 0.0
        if share < min_share:  # PAS2P discards phases under 1% of the whole time
            dropped.append(int(ids[i]))
            dropped_s += float(total[i])
            continue
        w = int(count[i])
        kept.append(
            Phase(
                id=int(ids[i]),
                op=_op_label(ops[i], op_names),
                simo=None if reps[i] is None else int(reps[i]),
                weight=w,
                time_per_occurrence_s=float(total[i]) / w,
                comm_per_occurrence_s=float(comm[i]) / w,
                compute_per_occurrence_s=float(compute[i]) / w,
                # The sum itself rather than mean * weight: equal, without a rounding step.
                total_s=float(total[i]),
                share=share,
            )
        )
    return PhaseTable(
        phases=tuple(kept),
        dropped=tuple(dropped),
        total_s=whole,
        comm_s=comm_all,
        compute_s=compute_all,
        comm_pct=100.0 * comm_all / whole if whole > 0 else 0.0,
        compute_pct=100.0 * compute_all / whole if whole > 0 else 0.0,
        n_phases=len(ids),
        n_ticks=n_ticks,
        min_share=float(min_share),
        dropped_s=dropped_s,
    )


def _seconds(x: Any, n: int, name: str) -> np.ndarray:
    if x is None:
        return np.zeros(n)
    a = np.asarray(x, dtype=np.float64)
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {a.shape}")
    return a


def phase_table(
    ids: Any,
    comm_s: Any,
    compute_s: Any,
    *,
    op: Any = None,
    simo: Any = None,
    op_names: OpNames = None,
    min_share: float = 0.01,
) -> PhaseTable:
    """Per-phase weight and time from per-tick phase ids and per-tick comm/compute seconds.

    ``op`` and ``simo`` (per tick, optional) label each phase with the values of its first
    tick; ``op_names`` maps op ids to names. Phases whose total time is under ``min_share``
    of the whole run are listed in ``dropped`` (set 0 to keep all).
    """
    i = _as_int_1d(ids, "ids")
    n = len(i)
    comm = _seconds(comm_s, n, "comm_s")
    compute = _seconds(compute_s, n, "compute_s")
    if n == 0:
        z = np.zeros(0)
        return _build_table(z, z, z, z, [], [], op_names, min_share, 0)
    if i.min() < 1:
        raise ValueError("phase ids must be >= 1")
    size = int(i.max()) + 1
    count = np.bincount(i, minlength=size)
    present = np.flatnonzero(count)
    first_of = np.full(size, n, dtype=np.int64)
    np.minimum.at(first_of, i, np.arange(n))
    first = first_of[present]
    ops = [None] * len(present) if op is None else np.asarray(op)[first].tolist()
    reps = [None] * len(present) if simo is None else np.asarray(simo)[first].tolist()
    return _build_table(
        present,
        count[present],
        np.bincount(i, weights=comm, minlength=size)[present],
        np.bincount(i, weights=compute, minlength=size)[present],
        ops,
        reps,
        op_names,
        min_share,
        n,
    )


# --------------------------------------------------------------------------- the paper's tables
# The cells of Tables 2 and 3 belong to the phase table; ailens.report lays them out in its
# sections (with titles, notes and JSON), format_table2 / format_table3_row as plain text.

TABLE2_HEAD = ("Phase", "Op", "SIMO", "Time/occurrence (s)", "Weight", "Time×Weight (s)", "Share")
TABLE3_HEADER = (
    "Application | Processes | Previous phases | Current phases | AET (s) | % Comm. | % Compute"
)


def _pct(x: float) -> str:
    return f"{x:.1f}%"


def table2_rows(table: PhaseTable) -> list[tuple[tuple[str, ...], int | None]]:
    """Table 2's rows (cells under :data:`TABLE2_HEAD`, with their phase id): one per kept
    phase, the dropped phases summed in one row (id None), and a Total row (id None, the
    last) that the time column adds up to; no rows when there are no phases."""
    rows: list[tuple[tuple[str, ...], int | None]] = [
        (
            (
                str(p.id),
                str(p.op),
                str(p.simo),
                f"{p.time_per_occurrence_s:.6f}",
                f"{p.weight:,}",
                f"{p.total_s:.6f}",
                _pct(100 * p.share),
            ),
            p.id,
        )
        for p in table.phases
    ]
    if table.dropped:
        label = f"{len(table.dropped)} dropped (<{100 * table.min_share:g}%)"
        share_s = _pct(100 * table.dropped_s / table.total_s) if table.total_s > 0 else ""
        rows.append(((label, "", "", "", "", f"{table.dropped_s:.6f}", share_s), None))
    if rows:
        total = ("Total", "", "", "", f"{table.n_ticks:,}", f"{table.total_s:.6f}", "100%")
        rows.append((total, None))
    return rows


def table3_cells(
    table: PhaseTable,
    previous_phases: int,
    *,
    processes: int | None = None,
    aet_s: float | None = None,
) -> tuple[str, ...]:
    """Table 3's cells after the application: processes, previous (PAS2P) and current
    (SIMO) phase counts, execution time (``aet_s``, default the table's total), % comm and
    % compute."""
    aet = table.total_s if aet_s is None else aet_s
    return (
        "" if processes is None else str(processes),
        f"{previous_phases:,}",
        f"{table.n_phases:,}",
        f"{aet:.2f}",
        f"{table.comm_pct:.2f}",
        f"{table.compute_pct:.2f}",
    )


def format_table2(table: PhaseTable, detail: bool = False) -> str:
    """The paper's Table 2: Phase | Time/occurrence (s) | Weight | Time×Weight (s).

    Dropped phases are summed in one row so the last column adds up to the final Total row.
    ``detail`` adds each phase's op and SIMO representative. The rows are those of the
    report's Table 2 (``ailens report``), without its Share column.
    """
    shown = (True, detail, detail, True, True, True, False)

    def cut(cells: Sequence) -> tuple:
        return tuple(c for c, keep in zip(cells, shown, strict=True) if keep)

    lines = [cut(TABLE2_HEAD), *(cut(cells) for cells, _ in table2_rows(table))]
    right = cut((False, False) + (True,) * 5)
    widths = [max(len(line[c]) for line in lines) for c in range(len(right))]
    return "\n".join(
        "  ".join(
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(line, widths, right, strict=True)
        ).rstrip()
        for line in lines
    )


def format_table3_row(
    table: PhaseTable,
    previous_phases: int,
    *,
    application: str = "",
    processes: int | None = None,
) -> str:
    """One row of the paper's Table 3 (columns as in :data:`TABLE3_HEADER`).

    ``previous_phases`` is the PAS2P baseline count (``pas2p_assign(...).max()``); the current
    count is ``table.n_phases``; time and percentages are the table's whole-run totals. The
    cells are those of the report's Table 3 (``ailens report``).
    """
    cells = table3_cells(table, previous_phases, processes=processes)
    return " | ".join((application, *cells))
