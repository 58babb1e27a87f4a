"""SIMO phase detection: condense a run's collectives ("ticks") into a few phases.

Method of Albert et al., "Modeling Parallel AI Applications for Performance Analysis on
Cloud Environments" (section 3): each rank's work before a collective is reduced to its
order of magnitude; the SIMO of a tick (Sum of Instructions in Magnitude Order) is the sum
of those magnitudes over ranks; ticks whose SIMO lies within +/- tolerance of a phase's
representative (the SIMO of the tick that opened the phase) belong to that phase.

Pipeline::

    ids = assign(simo(work), tolerance=1, key=phase_key(op, nbytes))
    table = phase_table(ids, comm_s, compute_s, op=op, simo=s, op_names=names)
    print(format_table2(table))

``OnlinePhases`` gives the same ids and table batch by batch with memory that does not grow
with the number of ticks. See docs/phases.md for the rules and the paper's slips.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "OnlinePhases",
    "Phase",
    "PhaseTable",
    "SIZE_KEY_FACTOR",
    "TABLE2_HEAD",
    "TABLE3_HEADER",
    "assign",
    "format_table2",
    "format_table3_row",
    "magnitude",
    "pas2p_assign",
    "phase_key",
    "phase_table",
    "simo",
    "table2_rows",
    "table3_cells",
]

# phase_key(op, nbytes, use_size=True) == op * SIZE_KEY_FACTOR + magnitude(nbytes); an int64
# magnitude is at most 18, so 32 keeps (op, size) pairs apart and op == key // 32.
SIZE_KEY_FACTOR = 32

_POW10_I64 = np.array([10**k for k in range(19)], dtype=np.int64)
_POW10_U64 = np.array([10**k for k in range(20)], dtype=np.uint64)
# float("1e{k}") is the correctly rounded double; exact for k <= 22.
_POW10_F64 = np.array([float(f"1e{k}") for k in range(309)], dtype=np.float64)
# magnitude() makes one compare pass per decade the data spans, block by block (64 K values
# stay in cache). On random data that beats np.searchsorted (branchy binary search, ~20 ns a
# value) even across all 19 int64 decades; only floats spanning more use the search.
_CHAIN_MAX_DECADES = 20
_BLOCK = 1 << 16


# --------------------------------------------------------------------------- SIMO


def magnitude(work: Any) -> np.ndarray:
    """Order of magnitude of each work value: ``floor(log10(w))`` for w >= 1, else 0.

    Floor, not round: "order of magnitude" in the paper's Table 1 is the decade a count lies
    in (6 for a count in [1e6, 1e7)). Rounding would move the bucket edges to 10**(k+0.5)
    and split ticks that differ by a few percent around 3.16 * 10**k.

    Integer input is handled exactly (no float log10): 999 -> 2, 1000 -> 3, 10**15 -> 15,
    10**16 - 1 -> 15. Values <= 0 (and floats in (0, 1)) map to 0. Returns int8 for integer
    input and int16 for float input (floats reach 308); same shape as the input.
    """
    a = np.asarray(work)
    if a.dtype.kind == "b":
        a = a.astype(np.int8)
    if a.dtype.kind in "iu":
        table = _POW10_U64 if a.dtype == np.uint64 else _POW10_I64
        out_dtype: type[np.integer] = np.int8
    elif a.dtype.kind == "f":
        a = a.astype(np.float64, copy=False)
        if not np.isfinite(a).all():
            raise ValueError("magnitude: work values must be finite")
        table = _POW10_F64
        out_dtype = np.int16
    else:
        raise TypeError(f"magnitude: expected integer or float work, got dtype {a.dtype}")
    if a.size == 0:
        return np.zeros(a.shape, dtype=out_dtype)
    lo = _scalar_magnitude(table, a.min())
    hi = _scalar_magnitude(table, a.max())
    if hi - lo > _CHAIN_MAX_DECADES:  # only floats span that many decades
        # Counting the powers 10**k (k >= 1) that are <= value gives the magnitude directly.
        return np.searchsorted(table[1:], a, side="right").astype(out_dtype)
    # Every value is >= 10**lo (or lo == 0): start at lo and add one per power of ten passed.
    # Thresholds are <= a.max(), so they fit a's dtype and the compare needs no upcast.
    thresholds = [a.dtype.type(table[k]) for k in range(lo + 1, hi + 1)]
    flat = np.ascontiguousarray(a).reshape(-1)
    out = np.full(flat.shape, lo, dtype=out_dtype)
    hit = np.empty(min(flat.size, _BLOCK), dtype=bool)
    for i in range(0, flat.size, _BLOCK):  # blocks stay in cache across the decade passes
        x, o, h = flat[i : i + _BLOCK], out[i : i + _BLOCK], hit[: min(_BLOCK, flat.size - i)]
        for thr in thresholds:
            np.greater_equal(x, thr, out=h)
            np.add(o, h, out=o)
    return out.reshape(a.shape)


def _scalar_magnitude(table: np.ndarray, x: Any) -> int:
    return max(int(np.searchsorted(table, x, side="right")) - 1, 0)


def simo(work: Any) -> np.ndarray:
    """SIMO per tick: sum over ranks of ``magnitude(work)``; work has shape (ticks, ranks)."""
    a = np.asarray(work)
    if a.ndim != 2:
        raise ValueError(f"simo: work must have shape (ticks, ranks), got {a.shape}")
    # einsum's row reduction is ~3x faster than .sum(axis=1) on narrow (ticks, ranks) rows;
    # int32 cannot overflow (at most 308 per rank).
    return np.einsum("ij->i", magnitude(a).astype(np.int32)).astype(np.int64)


def phase_key(op_ids: Any, nbytes: Any = None, use_size: bool = False) -> np.ndarray:
    """Phase key per tick: the op id, or ``op * 32 + magnitude(nbytes)`` with ``use_size``.

    Ticks only share a phase when their keys are equal. ``op == key // SIZE_KEY_FACTOR``
    when the size is included.
    """
    op = np.asarray(op_ids).astype(np.int64)
    if not use_size:
        return op
    if nbytes is None:
        raise ValueError("phase_key: use_size=True needs nbytes")
    return op * SIZE_KEY_FACTOR + magnitude(np.asarray(nbytes))


# --------------------------------------------------------------------------- matching


def _as_int_1d(x: Any, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.dtype.kind not in "biu" and a.size:  # [] arrives as float64
        raise TypeError(f"{name} must be integers, got dtype {a.dtype}")
    return a.astype(np.int64, copy=False)


def _distinct(s: np.ndarray, k: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (key, simo) pairs: ``(pairs, first, inverse)``.

    ``pairs`` has shape (m, 2) (key, simo), ``first`` the index of each pair's first tick
    and ``inverse`` maps every tick to its row of ``pairs``.
    """
    n = len(s)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return np.zeros((0, 2), dtype=np.int64), z, z
    smin = int(s.min())
    span = int(s.max()) - smin + 1
    if k is None:
        keys, kidx = np.zeros(1, dtype=np.int64), None
    else:
        kmin = int(k.min())
        kspan = int(k.max()) - kmin + 1
        if kspan * span < 2**62:
            keys, kidx = np.arange(kmin, kmin + kspan, dtype=np.int64), k - kmin
        else:  # wide, sparse keys: compress them first so the combined code fits int64
            keys, kidx = np.unique(k, return_inverse=True)
    code = s - smin if kidx is None else kidx * span + (s - smin)
    n_codes = len(keys) * span
    if n_codes <= 4 * n + 1024:
        # Dense code space (SIMO spans a few dozen values): O(n) without sorting.
        first_of = np.full(n_codes, n, dtype=np.int64)
        np.minimum.at(first_of, code, np.arange(n))
        uniq = np.flatnonzero(first_of < n)
        first = first_of[uniq]
        slot = np.empty(n_codes, dtype=np.int64)
        slot[uniq] = np.arange(len(uniq))
        inverse = slot[code]
    else:
        uniq, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    pairs = np.stack([keys[uniq // span], uniq % span + smin], axis=1)
    return pairs, first, inverse


class _Matcher:
    """Phase representatives plus a (key, simo) -> id memo; shared by assign and OnlinePhases.

    A phase id depends only on the (key, simo) value and on the order in which distinct
    values first appear: at its first appearance a value either joins the lowest-id phase
    within tolerance or opens a phase whose representative is itself; phases opened later
    have higher ids, so the choice never changes. Distinct values are therefore resolved
    once, in first-appearance order, and mapped back to ticks.
    """

    def __init__(self, tolerance: int) -> None:
        if int(tolerance) != tolerance or tolerance < 0:
            raise ValueError(f"tolerance must be a non-negative integer, got {tolerance!r}")
        self.tolerance = int(tolerance)
        self.memo: dict[tuple[int, int], int] = {}
        self.reps: dict[int, list[tuple[int, int]]] = {}  # key -> [(representative, id)], id order
        self.n_phases = 0

    def _resolve(self, key: int, s: int) -> int:
        pid = self.memo.get((key, s))
        if pid is not None:
            return pid
        same_key = self.reps.setdefault(key, [])
        # With tolerance 0 an unseen value cannot equal a representative (it would be memoised).
        if self.tolerance:
            pid = next((i for rep, i in same_key if abs(rep - s) <= self.tolerance), None)
        if pid is None:
            self.n_phases += 1
            pid = self.n_phases
            same_key.append((s, pid))
        self.memo[(key, s)] = pid
        return pid

    def match(self, s: np.ndarray, k: np.ndarray | None) -> np.ndarray:
        pairs, first, inverse = _distinct(s, k)
        order = np.argsort(first, kind="stable")
        ids = np.empty(len(pairs), dtype=np.int32)
        for row in order.tolist():
            key, value = pairs[row].tolist()
            ids[row] = self._resolve(key, value)
        return ids[inverse]


def _check_key(key: Any, n: int) -> np.ndarray | None:
    if key is None:
        return None
    k = _as_int_1d(key, "key")
    if len(k) != n:
        raise ValueError(f"key has {len(k)} ticks, simo has {n}")
    return k


def assign(simo: Any, tolerance: int = 1, key: Any = None) -> np.ndarray:
    """Phase id per tick (int32, 1-based, numbered in order of first appearance).

    A tick joins the lowest-id existing phase whose representative (the SIMO of the phase's
    first tick) is within +/- ``tolerance`` of its SIMO and whose key equals its key (e.g.
    the collective op id, see :func:`phase_key`); otherwise it opens a new phase.
    ``tolerance=0`` groups equal (key, SIMO) values only.
    """
    s = _as_int_1d(simo, "simo")
    return _Matcher(tolerance).match(s, _check_key(key, len(s)))


def pas2p_assign(op: Any, nbytes: Any, mags: Any) -> np.ndarray:
    """The previous PAS2P matching, as a baseline: ticks share a phase only when op, nbytes
    and the whole per-rank magnitude vector (``mags``, shape (ticks, ranks)) are equal.

    Ids are 1-based in order of first appearance, like :func:`assign`.
    """
    m = np.asarray(mags)
    if m.ndim != 2:
        raise ValueError(f"mags must have shape (ticks, ranks), got {m.shape}")
    n = m.shape[0]
    rows = np.empty((n, m.shape[1] + 2), dtype=np.int64)
    rows[:, 0] = np.asarray(op)
    rows[:, 1] = np.asarray(nbytes)
    rows[:, 2:] = m
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    # One opaque fixed-size record per tick so np.unique compares whole rows at once.
    records = rows.view(np.dtype((np.void, rows.itemsize * rows.shape[1]))).reshape(-1)
    _, first, inverse = np.unique(records, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int32)
    rank[np.argsort(first, kind="stable")] = np.arange(1, len(first) + 1, dtype=np.int32)
    return rank[inverse.reshape(-1)]


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
