"""The statistics the forecast and the what-if rest on, stdlib only (the core does not use
scipy): Student's t and chi-square quantiles, a binomial tail, and counting steps on a
period."""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

# Degrees of freedom that make Student's t the normal quantile: for stated priors.
NORMAL_DF = 10**6
# The 97.5 % normal quantile: the half-width of a stated spread's 95 % interval.
NORMAL_95 = NormalDist().inv_cdf(0.975)


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

    Closed form for 1 and 2 degrees of freedom; up to 60, Newton's method on the closed-form
    CDF from the Cornish-Fisher expansion, to a step of 1e-12 of it (the bisection it
    replaced stopped at that width; they agree to 5e-13, at a ninth of the cost: each new
    ``df`` of a live run's early evaluations was ~110 us of bisection on the training thread,
    issue 33; q within ~1e-4 of 1 is held by the CDF's own rounding near 1, to ~1e-10);
    beyond 60 the expansion alone (relative error < 1e-8 there). Stdlib only: the core does
    not use scipy.
    """
    if not 0.5 < q < 1:
        raise ValueError(f"q must be in (0.5, 1), got {q}")
    df = int(df)
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df == 1:
        return math.tan(math.pi * (q - 0.5))
    if df == 2:
        return (2 * q - 1) / math.sqrt(2 * q * (1 - q))
    v = float(df)
    t = _cornish_fisher(NormalDist().inv_cdf(q), v)
    if df > 60:
        return t
    # The two-sided CDF rises with t at twice the density: Newton's step.
    target = 2 * q - 1
    density = math.exp(math.lgamma((v + 1) / 2) - math.lgamma(v / 2)) / math.sqrt(v * math.pi)
    for _ in range(20):
        step = (_t_two_sided_cdf(t, df) - target) / (
            2 * density * (1 + t * t / v) ** (-(v + 1) / 2)
        )
        t -= step
        if abs(step) <= 1e-12 * t:
            break
    return t


def _cornish_fisher(z: float, v: float) -> float:
    """Student's t quantile from the normal one ``z``, ``v`` degrees of freedom (Cornish-Fisher,
    terms to v^-4)."""
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


def chi2_quantile(q: float, df: int) -> float:
    """Quantile of chi-square with ``df`` degrees of freedom (Wilson-Hilferty)."""
    z = NormalDist().inv_cdf(q)
    h = 2.0 / (9.0 * df)
    return df * (1 - h + z * math.sqrt(h)) ** 3


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    total = 0.0
    for j in range(k, n + 1):
        total += math.exp(
            math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq
        )
    return min(total, 1.0)


def occurrences(period: int, offset: int, lo: int, hi: int) -> int:
    """How many i in [lo, hi] have i % period == offset."""
    if hi < lo:
        return 0
    first = lo + (offset - lo) % period
    return 0 if first > hi else (hi - first) // period + 1
