"""SIMO phase detection: each rank's work before a collective reduced to its order of
magnitude (:func:`magnitude`), summed over ranks per tick (:func:`simo`), and ticks grouped
into phases within +/- tolerance of a phase's representative (:func:`assign`); the PAS2P
baseline (:func:`pas2p_assign`). See the package doc (``ailens.phases``)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SIZE_KEY_FACTOR", "assign", "magnitude", "pas2p_assign", "phase_key", "simo"]

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
