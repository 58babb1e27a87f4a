"""The parts of a run besides the training-step level, as the forecast schedules them:
recurring extras inside steps (``extras.py``), sections (``sections.py``) and one-offs.
``Part`` is what each of them gives the forecast; ``split_spikes`` sets the one-off apart."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..._stats import NORMAL_95, occurrences, t_quantile
from .schedule import EvalPlan

# The spread of a part's occurrences before they show it: 10 %, worth 2 occurrences.
SECTION_CV = 0.1
SECTION_PRIOR = 2
# A recurring part's first occurrence, while it is the only one: a later one is taken as
# this share of it, +/- this much of it. First occurrences are cold (compilation, caches,
# data loading): on the development corpus (50 MLPerf runs with 3 or more evaluations) the
# later evaluations' mean is a median 0.76 of the first (quartiles 0.63 and 0.90, 2.5-97.5 %:
# 0.29-1.0).
FIRST_WARM = 0.75
FIRST_WARM_SD = 0.25
# A checkpoint's first occurrence says less, and not which way: the first write may go to
# the page cache and later ones wait for its write-back, or the first sets up what later
# ones reuse. Later ones over the first in the development data: 0.35 (NeMo 2's sample log),
# 1.55 and 2.03 (the corpus's GPU recordings, torch.save), 0.60 and 1.78 (torch.save of 1.5
# and 0.3 GB on the development machine): a later one is taken as the first, +/- this much.
FIRST_CHECKPOINT_SD = 0.5


def first_occurrence(what: str = "") -> tuple[float, float]:
    """(share, spread) of a recurring part's lone first occurrence that a later one of
    ``what`` ("checkpoint", "eval", ...) is taken as: ``FIRST_WARM`` +/- ``FIRST_WARM_SD``
    (a cold first), for a checkpoint 1 +/- ``FIRST_CHECKPOINT_SD``."""
    if what == "checkpoint":
        return 1.0, FIRST_CHECKPOINT_SD
    return FIRST_WARM, FIRST_WARM_SD


def cold_precision(what: str = "") -> float:
    """The precision of a part priced from its first occurrence alone (normal quantile: a
    stated prior)."""
    share, sd = first_occurrence(what)
    return NORMAL_95 * sd / share


def per_occurrence_precision(mean: float, sd_seen: float, m: int) -> float | None:
    """The 95 % half-width of a part's mean time per occurrence, relative to it, from ``m``
    occurrences with spread ``sd_seen`` pooled with the prior one (``SECTION_CV`` worth
    ``SECTION_PRIOR`` occurrences): a few equal occurrences do not make a certainty."""
    if m < 1 or mean <= 0:
        return None
    k0 = SECTION_PRIOR
    sd = math.sqrt((k0 * (SECTION_CV * mean) ** 2 + (m - 1) * sd_seen**2) / (k0 + m - 1))
    return t_quantile(0.975, m - 1 + k0) * sd / math.sqrt(m) / mean


@dataclass(frozen=True)
class Part:
    """A part of the run besides the training-step level, as the forecast schedules it.

    ``kind``: "in-step" (extra time inside step intervals ``i`` with ``i % period ==
    offset``; ``due_now``: one whose position passed is under way, its units not ended),
    "section" (after step ends ``k`` with ``k % period == offset``; ``due_now``: the
    current step end is one and its section has not begun), "rate" (irregular: ``rate`` per
    remaining step) or "one-off" (already spent).
    """

    name: str
    schedule: str
    source: str
    per_occurrence_s: float
    sd_s: float
    seen: int
    kind: str
    period: int = 0
    offset: int = 0
    rate: float = 0.0
    due_now: bool = False
    plan: EvalPlan | None = None  # a section's occurrences (replaces period and offset)
    count_unknown: bool = False  # seen once: how many more come is anyone's guess
    # How well its time per occurrence is known: the 95 % half-width of that time, relative
    # to it (None: not known yet: assumed, or only a cold first occurrence seen).
    precision: float | None = None
    # An in-step part that is a section on ``plan`` (one that ran beside the steps inside the
    # unit it fell in): its occurrence after the last step still runs before the run's end.
    after_last: bool = False
    # What the one under way (``due_now``, in-step) took so far: spent, not to come again.
    spent_s: float = 0.0
    # A skewed prior's spread below the point (``sd_s`` is the one above): an assumed cost
    # that cannot be much less than its point but may be many times more. None: symmetric.
    sd_lo_s: float | None = None

    def _under_way(self) -> float:
        """The share of an in-step occurrence under way still to come."""
        if not self.due_now:
            return 0.0
        if self.per_occurrence_s <= 0:
            return 1.0
        return max(1.0 - self.spent_s / self.per_occurrence_s, 0.0)

    def remaining(self, s: int, n: int) -> float:
        if self.kind == "in-step":
            if self.plan is not None:
                return self.plan.count(s, n if self.after_last else n - 1) + self._under_way()
            return occurrences(self.period, self.offset, s, n - 1)
        if self.kind == "section":
            if self.plan is not None:
                return self.plan.count(s + 1, n) + int(self.due_now)
            return occurrences(self.period, self.offset, s + 1, n) + int(self.due_now)
        if self.kind == "rate":
            return self.rate * max(n - s, 0)
        return 0


def split_spikes(
    spikes: dict[int, float], regime_start: int | None, explained: set[int]
) -> tuple[float, list[float], float]:
    """The current regime's spikes (seconds over the level, by step) as (the time the recurring
    extras explain, the loose ones by size, the one-off). The largest loose spike is a
    one-off when it stands alone (the only one, or 3x the next): its time is spent, not a
    rate. Outliers that keep coming (a noisy machine) stay loose, in the level at their rate."""
    start = regime_start or 0
    regime = {k: v for k, v in spikes.items() if k >= start}
    taken = sum(v for k, v in regime.items() if k in explained)
    loose = sorted((v for k, v in regime.items() if k not in explained), key=abs)
    one_off = 0.0
    if loose and (len(loose) == 1 or abs(loose[-1]) > 3 * abs(loose[-2])):
        one_off = loose.pop()
    return taken, loose, one_off
