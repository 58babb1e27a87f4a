"""Signature, total-time forecast and the collective cost models behind the scaling what-if.

Plain functions on numbers and arrays, shared by the online path (``_online.py``, inside the
Lens) and the offline analysis (``_analysis.py``). See docs/forecast.md for the rules.

Signature rule (evaluated after each cross-rank phase exchange, at ``s`` steps done)::

    ready(s) = s >= signature_min_steps
               and n >= 2 * W               (two full windows of steps in the current regime)
               and |mean(last W step times) - mean(previous W step times)|
                       <= signature_rel_tol * mean(previous W step times)
               and the 95 % confidence half-width of the mean step time of the regime
                   <= signature_rel_tol * that mean                   (precise enough)

The step-time statistics ("the regime") start after ``warmup_steps`` and restart from the
last W steps whenever those differ from the regime's older steps by more than
signature_rel_tol and significantly (Welch's t, 95 %): a longer warm-up or a lasting change
of speed.
               and no phase first seen in the last W steps holds >= min_phase_share of the
                   time of those W steps                          (no new significant phase)

Forecast at ``s`` steps done, with ``N`` total steps and ``R = N - s`` remaining::

    predicted_total = elapsed(s) + sum_phases(time_per_occurrence * occurrences_per_step * R)
                      + outside_per_step * R                        (= elapsed + R * m)
    interval        = predicted_total +/- t(0.975, df) * sd * sqrt(R + R**2 / n)

where ``m`` is the mean of the ``n`` step times of the regime (rank 0's clock), ``sd``
their spread (step-to-step, or from batch means of W steps when that is larger: slow
swings), and ``outside_per_step`` the part of ``m`` that no tick covers.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import Any

import numpy as np

__all__ = [
    "CostParams",
    "Fit",
    "Forecast",
    "canonical_op",
    "collective_time",
    "fit_cost_params",
    "forecast_total",
    "StepStats",
    "new_significant_phases",
    "step_time_changed",
    "step_time_precise",
    "step_time_stable",
    "t_quantile",
]

INTERVAL_LEVEL = 0.95

# --------------------------------------------------------------------------- statistics


def _t_two_sided_cdf(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer ``df`` (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    s = math.sin(theta)
    if df % 2:  # odd
        if df == 1:
            return 2 * theta / math.pi
        term, acc = 1.0, 1.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            acc += term
        return 2 / math.pi * (theta + s * math.cos(theta) * acc)
    term, acc = 1.0, 1.0
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        acc += term
    return s * acc


@lru_cache(maxsize=512)
def t_quantile(q: float, df: int) -> float:
    """Quantile ``q`` (0.5 < q < 1) of Student's t with ``df`` degrees of freedom.

    Exact (bisection on the closed-form CDF) up to 60 degrees of freedom, the Cornish-Fisher
    expansion beyond (relative error < 1e-8 there). Stdlib only: the core does not use scipy.
    """
    if not 0.5 < q < 1:
        raise ValueError(f"q must be in (0.5, 1), got {q}")
    df = int(df)
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    z = NormalDist().inv_cdf(q)
    if df > 60:
        v = float(df)
        return (
            z
            + (z**3 + z) / (4 * v)
            + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
            + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
        )
    target = 2 * q - 1
    lo, hi = z, max(z, 1.0)
    while _t_two_sided_cdf(hi, df) < target:
        hi *= 2
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _t_two_sided_cdf(mid, df) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * hi:
            break
    return 0.5 * (lo + hi)


# --------------------------------------------------------------------------- signature rule


def step_time_stable(durations: Any, window: int, rel_tol: float) -> bool:
    """The step-time half of the signature rule: the mean of the last ``window`` step times
    is within ``rel_tol`` (relative) of the mean of the ``window`` before them.

    ``durations`` holds at least ``2 * window`` values (older first); integers stay exact.
    """
    d = list(durations)[-2 * window :]
    if len(d) < 2 * window:
        return False
    old, new = sum(d[:window]), sum(d[window:])
    if old <= 0:
        return False
    return abs(new - old) <= rel_tol * old


def step_time_changed(older: StepStats, last: Any, rel_tol: float, level: float = 0.95) -> bool:
    """A change of regime: the mean of the ``last`` step times differs from the mean of the
    regime's ``older`` ones by more than ``rel_tol`` AND significantly (Welch's t at
    ``level``, two-sided, with the smaller side's degrees of freedom).

    Testing against the whole older part (not just the window before) also catches a change
    that happened between two evaluations far apart. Noise alone rarely passes; a longer
    warm-up than configured, a new input-pipeline phase or another job taking the cores does.
    """
    last = [int(x) for x in last]
    w, n = len(last), older.n
    if w < 2 or n < 2 or older.sum_ns <= 0:
        return False
    sb = sum(last)
    mean_a, mean_b = older.sum_ns / n, sb / w
    if abs(mean_b - mean_a) <= rel_tol * mean_a:
        return False
    va = max((n * older.sum2_ns - older.sum_ns**2) / (n * (n - 1)), 0)
    vb = max((w * sum(x * x for x in last) - sb * sb) / (w * (w - 1)), 0)
    se = math.sqrt(va / n + vb / w)
    if se == 0:
        return True
    return abs(mean_b - mean_a) / se > t_quantile(0.5 + level / 2, min(n, w) - 1)


def new_significant_phases(
    time_now: Any, time_then: Any, n_phases_then: int, min_share: float
) -> list[int]:
    """Phase ids (1-based) first seen after a reference point that hold at least ``min_share``
    of the time spent since it.

    ``time_now``/``time_then``: cumulative time per phase (index i is phase i + 1) now and at
    the reference point, when ``n_phases_then`` phases existed. Ids grow in order of first
    appearance, so the new phases are exactly the ids above ``n_phases_then``.
    """
    now = np.asarray(time_now, dtype=np.float64)
    then = np.zeros(len(now))
    then[: len(time_then)] = np.asarray(time_then, dtype=np.float64)[: len(now)]
    window = now - then
    total = float(window.sum())
    if total <= 0:
        return []
    new = np.arange(n_phases_then, len(now))
    return [int(i) + 1 for i in new if window[i] >= min_share * total]


# --------------------------------------------------------------------------- forecast


@dataclass(frozen=True)
class Forecast:
    """A total-time forecast and how it was made; ``to_dict()`` is ``ailens predict --json``.

    ``predicted_total_s``/``interval_s`` is the forecast made at the signature step when the
    signature was reached (``made_at_step``), else the latest one; ``history`` holds every
    forecast made, as (steps done, predicted total seconds). Totals are seconds from the
    Lens's start on rank 0 to the end of step ``total_steps``.
    """

    predicted_total_s: float | None
    interval_s: tuple[float, float] | None
    signature_step: int | None
    signature_fraction: float | None  # signature_step / total_steps
    actual_total_s: float | None
    history: tuple[tuple[int, float], ...]
    made_at_step: int
    elapsed_s: float  # rank 0's time at made_at_step
    total_steps: int | None
    step_time_s: float  # mean step time after warm-up
    step_time_interval_s: tuple[float, float]  # confidence interval of that mean
    step_time_sd_s: float  # spread of one step time (see spread_method)
    spread_method: str  # "step-to-step" or "batch means of W steps" (slow swings)
    steps_used: int  # step times behind the estimate (the current regime)
    regime_start_step: int  # first of them (1-based; after warm-up and any change of speed)
    remaining_by_phase_s: tuple[tuple[int, float], ...] = ()  # (phase id, seconds still to come)
    remaining_other_phases_s: float = 0.0  # phases under min_share
    remaining_outside_s: float = 0.0  # time no collective tick covers
    signature_elapsed_s: float | None = None
    steps_done: int = 0  # steps recorded by the end of the data
    level: float = INTERVAL_LEVEL
    note: str = ""

    @property
    def error_pct(self) -> float | None:
        """Signed error of the forecast against the actual total, in percent."""
        if self.actual_total_s is None or self.predicted_total_s is None or not self.actual_total_s:
            return None
        return 100.0 * (self.predicted_total_s - self.actual_total_s) / self.actual_total_s

    def to_dict(self) -> dict:
        """JSON-ready dict (plain Python types)."""
        d = asdict(self)
        d["interval_s"] = None if self.interval_s is None else list(self.interval_s)
        d["step_time_interval_s"] = list(self.step_time_interval_s)
        d["history"] = [[int(s), float(v)] for s, v in self.history]
        d["remaining_by_phase_s"] = [[int(i), float(v)] for i, v in self.remaining_by_phase_s]
        d["error_pct"] = self.error_pct
        return d


@dataclass(frozen=True)
class StepStats:
    """Post-warm-up step times as exact integer sums (ns), kept in O(1) memory.

    ``blocks`` consecutive blocks of ``block_len`` steps (the signature window) give a
    batch-means estimate of the spread that also covers slow swings (other jobs, thermal
    throttling) the step-to-step spread misses; the larger estimate is used once
    ``MIN_BLOCKS`` blocks exist.
    """

    n: int
    sum_ns: int
    sum2_ns: int
    blocks: int = 0
    block_sum_ns: int = 0
    block_sum2_ns: int = 0
    block_len: int = 1

    MIN_BLOCKS = 5

    @property
    def mean_s(self) -> float:
        return self.sum_ns / self.n / 1e9

    def spread(self) -> tuple[float, int, str]:
        """(standard deviation of one step time in s, degrees of freedom, method)."""
        n = self.n
        var = max((n * self.sum2_ns - self.sum_ns * self.sum_ns) / (n * (n - 1)), 0)
        sd, df, method = math.sqrt(var) / 1e9, n - 1, "step-to-step"
        k = self.blocks
        if k >= self.MIN_BLOCKS:
            vb = max((k * self.block_sum2_ns - self.block_sum_ns**2) / (k * (k - 1)), 0)
            sd_b = math.sqrt(vb / self.block_len) / 1e9
            if sd_b > sd:
                sd, df, method = sd_b, k - 1, f"batch means of {self.block_len} steps"
        return sd, df, method

    def mean_half_width_s(self, level: float = INTERVAL_LEVEL) -> float:
        """Half-width of the ``level`` confidence interval of the mean step time."""
        sd, df, _ = self.spread()
        return t_quantile(0.5 + level / 2, df) * sd / math.sqrt(self.n)


def step_time_precise(stats: StepStats, rel_tol: float, level: float = INTERVAL_LEVEL) -> bool:
    """The precision half of the signature rule: the confidence interval of the mean step
    time is within +/- ``rel_tol`` of it."""
    if stats.n < 2 or stats.sum_ns <= 0:
        return False
    return stats.mean_half_width_s(level) <= rel_tol * stats.mean_s


def forecast_total(
    *,
    elapsed_s: float,
    steps_done: int,
    total_steps: int | None,
    stats: StepStats,
    phase_step_s: Any = None,
    kept: Any = None,
    level: float = INTERVAL_LEVEL,
    regime_start_step: int = 1,
) -> dict:
    """Forecast arithmetic from the post-warm-up step-time statistics.

    ``phase_step_s``: seconds per step of each phase (index i is phase i + 1) with ``kept``
    the ids of the significant ones; whatever part of the mean step time they do not cover
    is "outside collectives". Returns a dict of the Forecast fields (predicted total and
    interval are None without ``total_steps``).
    """
    n = stats.n
    if n < 2:
        raise ValueError("a forecast needs at least two step times after the warm-up")
    m = stats.mean_s
    sd_s, df, method = stats.spread()
    tq = t_quantile(0.5 + level / 2, df)
    half_mean = tq * sd_s / math.sqrt(n)
    out = {
        "elapsed_s": float(elapsed_s),
        "made_at_step": int(steps_done),
        "total_steps": total_steps,
        "step_time_s": m,
        "step_time_interval_s": (m - half_mean, m + half_mean),
        "step_time_sd_s": sd_s,
        "spread_method": method,
        "steps_used": int(n),
        "regime_start_step": int(regime_start_step),
        "predicted_total_s": None,
        "interval_s": None,
        "remaining_by_phase_s": (),
        "remaining_other_phases_s": 0.0,
        "remaining_outside_s": 0.0,
        "level": level,
    }
    if total_steps is None:
        out["note"] = "total_steps unknown: per-step time only (set total_steps for a total)"
        return out
    r = max(int(total_steps) - int(steps_done), 0)
    per_phase = np.zeros(0) if phase_step_s is None else np.asarray(phase_step_s, dtype=np.float64)
    keep = set() if kept is None else {int(k) for k in kept}
    by_phase = tuple((i + 1, float(v) * r) for i, v in enumerate(per_phase) if i + 1 in keep)
    other = float(sum(v for i, v in enumerate(per_phase) if i + 1 not in keep)) * r
    phases_s = sum(v for _, v in by_phase) + other
    # Outside collectives: the rest of the measured step time (optimizer tail, data loading,
    # evaluation and checkpoints seen so far), so the parts add up to elapsed + R * m.
    outside = m * r - phases_s
    predicted = float(elapsed_s) + phases_s + outside
    half = tq * sd_s * math.sqrt(r + r * r / n)
    out.update(
        predicted_total_s=predicted,
        interval_s=(predicted - half, predicted + half),
        remaining_by_phase_s=by_phase,
        remaining_other_phases_s=other,
        remaining_outside_s=outside,
        note="" if r else "run complete: nothing left to forecast",
    )
    return out


# --------------------------------------------------------------------------- cost models


@dataclass(frozen=True)
class CostParams:
    """Hockney-style link parameters: latency ``alpha`` (s per message), inverse bandwidth
    ``beta`` (s per byte) and reduction cost ``gamma`` (s per byte reduced)."""

    alpha: float
    beta: float
    gamma: float = 0.0
    source: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


# Used only when nothing was measured (a 1-rank run without `ailens calibrate`), labelled so.
DEFAULT_INTRA = CostParams(
    alpha=5e-6, beta=1 / 5e9, gamma=1 / 20e9, source="assumed: shared memory 5 GB/s, 5 us"
)
# Inter-node links when only intra-node ones were measured: 10 Gb/s Ethernet.
DEFAULT_INTER = CostParams(
    alpha=25e-6, beta=1 / 1.1e9, gamma=1 / 20e9, source="assumed: 10 Gb/s Ethernet, 25 us"
)

# MPICH's default switch from binomial to scatter+allgather broadcast.
BCAST_SHORT_BYTES = 12288
BCAST_MIN_PROCS_LONG = 8

CANONICAL_OPS = (
    "allreduce",
    "allgather",
    "broadcast",
    "reduce_scatter",
    "alltoall",
    "reduce",
    "gather",
    "scatter",
    "barrier",
)
_ALIASES = {
    "allreduce": "allreduce",
    "allgather": "allgather",
    "allgatherv": "allgather",
    "allgatherobject": "allgather",
    "broadcast": "broadcast",
    "bcast": "broadcast",
    "broadcastobject": "broadcast",
    "reducescatter": "reduce_scatter",
    "reducescattertensor": "reduce_scatter",
    "alltoall": "alltoall",
    "alltoallv": "alltoall",
    "alltoallsingle": "alltoall",
    "reduce": "reduce",
    "gather": "gather",
    "gatherv": "gather",
    "scatter": "scatter",
    "scatterv": "scatter",
    "barrier": "barrier",
    "join": "barrier",
}


@lru_cache(maxsize=256)
def canonical_op(name: str) -> str | None:
    """Canonical collective for an op name as integrations record it ("MPI_Allreduce",
    "all_reduce", "grouped_allreduce", "iallreduce", "allreduce_async", ...), or None."""
    s = re.sub(r"[^a-z]", "", str(name).lower())
    for prefix in ("mpi", "hvd", "dist", "torch", "grouped", "nccl", "gloo"):
        s = s.removeprefix(prefix)
    for suffix in ("async", "inplace", "coalesced", "tensor", "into", "base"):
        s = s.removesuffix(suffix)
    if s in _ALIASES:
        return _ALIASES[s]
    if s.startswith("i") and s[1:] in _ALIASES:  # nonblocking MPI_I*
        return _ALIASES[s[1:]]
    return None


def _log2ceil(p: int) -> int:
    return max(int(p) - 1, 0).bit_length()


def collective_time(
    op: str, p: int, nbytes: float, params: CostParams, *, algorithm: str = "auto"
) -> float:
    """Modelled seconds of one collective on ``p`` ranks; ``nbytes`` is the local payload
    (what the trace records). 0 at ``p == 1``.

    ring allreduce        2(p-1)a + 2(p-1)/p n b + (p-1)/p n g
    ring allgather        (p-1)a + (p-1)/p N b             N = p * nbytes (the gathered total)
    broadcast, binomial   ceil(log2 p)(a + n b)            n < 12 KiB or p < 8 ("auto")
    broadcast, scatter+allgather   (ceil(log2 p) + p - 1)a + 2(p-1)/p n b
    ring reduce_scatter   (p-1)a + (p-1)/p n b + (p-1)/p n g
    pairwise alltoall     (p-1)a + (p-1)/p n b
    binomial reduce       ceil(log2 p)(a + n b + n g)
    binomial gather/scatter   ceil(log2 p)a + (p-1)/p N b
    dissemination barrier ceil(log2 p) a

    An op with no model (see :func:`canonical_op`) is costed as an allreduce.
    """
    p = int(p)
    if p <= 1:
        return 0.0
    a, b, g = params.alpha, params.beta, params.gamma
    n = float(nbytes)
    f = (p - 1) / p
    lg = _log2ceil(p)
    kind = canonical_op(op) or "allreduce"
    if kind == "allreduce":
        return 2 * (p - 1) * a + 2 * f * n * b + f * n * g
    if kind == "allgather":
        return (p - 1) * a + f * (p * n) * b
    if kind == "broadcast":
        alg = algorithm
        if alg == "auto":
            alg = (
                "binomial"
                if n < BCAST_SHORT_BYTES or p < BCAST_MIN_PROCS_LONG
                else "scatter_allgather"
            )
        if alg == "binomial":
            return lg * (a + n * b)
        return (lg + p - 1) * a + 2 * f * n * b
    if kind == "reduce_scatter":
        return (p - 1) * a + f * n * b + f * n * g
    if kind == "alltoall":
        return (p - 1) * a + f * n * b
    if kind == "reduce":
        return lg * (a + n * b + n * g)
    if kind in ("gather", "scatter"):
        return lg * a + f * (p * n) * b
    return lg * a  # barrier


def _coefficients(op: str, p: int, nbytes: float) -> tuple[float, float, float]:
    """(alpha, beta, gamma) coefficients of the model: it is linear in the parameters."""
    unit = [
        collective_time(op, p, nbytes, CostParams(*e)) for e in ((1, 0, 0), (0, 1, 0), (0, 0, 1))
    ]
    return unit[0], unit[1], unit[2]


@dataclass(frozen=True)
class Fit:
    """Least-squares link parameters and how well they explain the measurements."""

    params: CostParams | None
    rows: int  # (op, size) groups used
    samples: int  # measurements behind them
    rel_rmse: float | None  # relative RMS error of the model over the groups
    fitted: tuple[str, ...]  # which of alpha, beta, gamma the data determined
    note: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["params"] = None if self.params is None else self.params.to_dict()
        d["fitted"] = list(self.fitted)
        return d


def _nnls_small(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a handful of columns: the best feasible solution over
    all supports (the optimum is the unconstrained fit on its own support)."""
    k = a.shape[1]
    best, best_res = np.zeros(k), float(y @ y)
    for mask in range(1, 1 << k):
        cols = [j for j in range(k) if mask >> j & 1]
        x, *_ = np.linalg.lstsq(a[:, cols], y, rcond=None)
        if (x < 0).any():
            continue
        res = float(np.sum((a[:, cols] @ x - y) ** 2))
        if res < best_res - 1e-15 * max(best_res, 1e-300):
            best, best_res = np.zeros(k), res
            best[cols] = x
    return best


def fit_cost_params(
    ops: Any,
    p: int,
    nbytes: Any,
    seconds: Any,
    *,
    prior: CostParams | None = None,
    source: str = "fit",
) -> Fit:
    """Fit alpha, beta (and gamma when separable) to measured collective durations on ``p``
    ranks: non-negative least squares on relative error over the median duration of each
    (op, nbytes) group, so one slow outlier or one huge message does not dominate.

    gamma is only separable from beta when ops with different beta:gamma ratios were
    measured (e.g. allgather beside allreduce); otherwise it is folded into beta (gamma = 0).
    With a single message size alpha and beta cannot be told apart: alpha is then taken
    from ``prior`` (default: the shared-memory default) and beta fitted.
    """
    ops = [str(o) for o in ops]
    nb = np.asarray(nbytes, dtype=np.float64)
    sec = np.asarray(seconds, dtype=np.float64)
    if not (len(ops) == len(nb) == len(sec)):
        raise ValueError("ops, nbytes and seconds must have the same length")
    if int(p) < 2:
        return Fit(None, 0, 0, None, (), "one rank: collectives move no data, nothing to fit")
    groups: dict[tuple[str, float], list[float]] = {}
    for o, n, s in zip(ops, nb, sec, strict=True):
        if s > 0 and math.isfinite(s):
            groups.setdefault((canonical_op(o) or "allreduce", n), []).append(float(s))
    if not groups:
        return Fit(None, 0, 0, None, (), "no collective with a positive duration")
    keys = sorted(groups)
    y = np.array([float(np.median(groups[k])) for k in keys])
    a = np.array([_coefficients(o, p, n) for o, n in keys])
    w = 1.0 / y  # relative error: each group counts the same whatever its size
    aw, yw = a * w[:, None], y * w
    names = ["alpha", "beta", "gamma"]
    cols = [0, 1, 2]
    notes = []

    def independent(c: list[int]) -> bool:
        sub = aw[:, c]
        norm = np.linalg.norm(sub, axis=0)
        if (norm == 0).any():
            return False
        return np.linalg.matrix_rank(sub / norm, tol=1e-9) == len(c)

    if not independent(cols):
        cols = [0, 1]
        notes.append("gamma not separable from beta here: folded into beta")
    alpha_fixed = None
    if not independent(cols):
        prior = prior or DEFAULT_INTRA
        alpha_fixed = prior.alpha
        cols = [1]
        notes.append(
            f"one message size: alpha taken from {prior.source or 'the prior'} "
            f"({prior.alpha:.3g} s)"
        )
    x = np.zeros(3)
    if alpha_fixed is not None:
        # Fit beta to what alpha leaves; if alpha alone overshoots, scale alpha down instead.
        rest = yw - aw[:, 0] * alpha_fixed
        sol = _nnls_small(aw[:, [1]], rest)
        x[0], x[1] = alpha_fixed, sol[0]
        if sol[0] == 0:
            x[0] = float(_nnls_small(aw[:, [0]], yw)[0])
    else:
        x[cols] = _nnls_small(aw[:, cols], yw)
    pred = a @ x
    rel = float(np.sqrt(np.mean(((pred - y) / y) ** 2)))
    params = CostParams(float(x[0]), float(x[1]), float(x[2]), source=source)
    return Fit(
        params,
        rows=len(keys),
        samples=int(sum(len(v) for v in groups.values())),
        rel_rmse=rel,
        fitted=tuple(names[c] for c in cols),
        note="; ".join(notes),
    )


# --------------------------------------------------------------------------- what-if


@dataclass(frozen=True)
class WhatIfRow:
    """Predicted step and total time at ``ranks`` ranks; ``to_dict()`` is one row of
    ``ailens whatif --json``. ``speedup`` and ``efficiency`` are against the model's own
    1-rank prediction (efficiency = speedup / ranks)."""

    ranks: int
    step_time_s: float
    total_time_s: float
    speedup: float
    efficiency: float
    comm_pct: float
    steps: float
    compute_step_s: float
    comm_step_s: float
    links: str  # "none" (1 rank), "intra" or "inter" node
    measured: bool = False  # the run's own rank count
    phases: tuple[tuple[int, float, float], ...] = field(
        default=()
    )  # (id, compute_s, comm_s) per step

    def to_dict(self) -> dict:
        d = asdict(self)
        d["phases"] = [{"id": i, "compute_step_s": c, "comm_step_s": m} for i, c, m in self.phases]
        return d
