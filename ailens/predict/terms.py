"""The term protocol both what-ifs share: a step time is a sum of named terms.

A term is a class with a ``name``, the ``part`` of the step it adds to (``"compute"`` or
``"comm"``) and ``value(context) -> TermValue``: its seconds per step and the assumptions
it rests on. Adding an effect to a model is adding one class to its ``TERMS``
(``cluster.TERMS`` for the cluster what-if, ``whatif.terms.TERMS`` for the run-directory
one); each model says what its context holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import NormalDist
from typing import Protocol

import numpy as np

__all__ = ["Term", "TermValue", "expected_max_normal"]


@dataclass(frozen=True)
class TermValue:
    """One term's seconds per step on a target, the assumptions it rests on and what else
    it wants to show (JSON-ready values)."""

    name: str
    seconds: float
    assumptions: tuple[str, ...] = ()
    detail: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "seconds": self.seconds,
            "assumptions": list(self.assumptions),
            **self.detail,
        }


class Term(Protocol):
    name: str
    part: str  # "compute" or "comm": the side of the step's split it adds to

    def value(self, ctx) -> TermValue: ...


@lru_cache(maxsize=64)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for n = 1): how far the slowest of n
    ranks with independent noise lags the mean."""
    if n <= 1:
        return 0.0
    x = np.linspace(-8, 8, 4001)
    nd = NormalDist()
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    cdf = np.array([nd.cdf(v) for v in x])
    return float(np.trapezoid(x * n * pdf * cdf ** (n - 1), x))
