"""Op names as the integrations record them, mapped to the canonical collective."""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["CANONICAL_OPS", "canonical_op", "nonblocking_name"]

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


def nonblocking_name(name: str) -> bool:
    """Op names that say the call returned before the collective ended (``Iallreduce``,
    ``allreduce_async``)."""
    n = str(name)
    return n.lower().endswith("async") or (len(n) > 1 and n[0] == "I" and n[1].islower())
