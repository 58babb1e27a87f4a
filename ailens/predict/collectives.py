"""Collective cost models of the transports a run uses, and their fit on measured times.

Hockney-style alpha-beta-gamma models per collective algorithm (``collective_time``), linear in
the link parameters, so a non-negative least-squares fit on measured durations
(``fit_cost_params``) gives alpha, beta and gamma: from the run's own collectives or from the
sweep ``ailens calibrate`` runs on the job's own backend. ``transport_of`` names the transport
family a run used, which is what a calibration must have measured to apply to it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..analysis.ops import CANONICAL_OPS, canonical_op

__all__ = [
    "CANONICAL_OPS",
    "DEFAULT_INTER",
    "DEFAULT_INTRA",
    "CostParams",
    "Fit",
    "canonical_op",
    "collective_time",
    "cost_coefficients",
    "fit_cost_params",
    "nonnegative_least_squares",
    "transport_of",
]

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


def cost_coefficients(op: str, p: int, nbytes: float) -> tuple[float, float, float]:
    """The coefficients of alpha, beta and gamma in :func:`collective_time` for one collective
    (the model is linear in them): a row of the least-squares system that fits them."""
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


def nonnegative_least_squares(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x >= 0`` minimising ``|a x - y|`` for a handful of columns: the best feasible solution
    over all supports (the optimum is the unconstrained fit on its own support)."""
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
    a = np.array([cost_coefficients(o, p, n) for o, n in keys])
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
        sol = nonnegative_least_squares(aw[:, [1]], rest)
        x[0], x[1] = alpha_fixed, sol[0]
        if sol[0] == 0:
            x[0] = float(nonnegative_least_squares(aw[:, [0]], yw)[0])
    else:
        x[cols] = nonnegative_least_squares(aw[:, cols], yw)
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


def params_from_dict(d: Any, source: str) -> CostParams | None:
    """CostParams from a calibration entry ({alpha, beta[, gamma]}), None if absent or bad."""
    if not isinstance(d, dict):
        return None
    try:
        a, b, g = float(d["alpha"]), float(d["beta"]), float(d.get("gamma") or 0.0)
    except (KeyError, TypeError, ValueError):
        return None
    if not all(math.isfinite(x) and x >= 0 for x in (a, b, g)):
        return None
    return CostParams(a, b, g, source=source)


def transport_of(framework: str, backend: str) -> str:
    """The transport family whose costs a run's collectives paid: ``"horovod"`` (Horovod's
    own background thread, gloo or MPI controller), ``"gloo"`` (torch.distributed over TCP),
    ``"nccl"``, ``"mpi"`` (mpi4py), ``"tf"`` (tf.distribute) or ``""`` when unknown.

    ``ailens calibrate`` must run on the same family for its figures to apply to the run.
    """
    f, b = str(framework or "").lower(), str(backend or "").lower()
    if "horovod" in f:
        return "horovod"
    if "tf.distribute" in b or "tf.distribute" in f:
        return "tf"
    if b in ("gloo", "nccl", "mpi", "ucc"):
        return "mpi" if b == "mpi" and "torch" not in f else b
    if "mpi" in f or "mpich" in b or "open mpi" in b or "mpi" in b:
        return "mpi"
    return ""
