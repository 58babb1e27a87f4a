"""What the run will do: the schedule the framework or script gave (``Lens.set_schedule``),
where its evaluations come (``EvalPlan``), and a section's period learned from where it came."""

from __future__ import annotations

import math
from dataclasses import dataclass

# Learned section periods: gaps that agree within a step or this share, over the last
# JITTER_SPAN gaps.
JITTER = 0.05
JITTER_SPAN = 4


@dataclass(frozen=True)
class EvalPlan:
    """Where the announced evaluations come, in steps done (an evaluation "at k" runs after
    the k-th step ends): every ``period`` steps from ``start`` (``period`` may be fractional:
    each lands on the nearest step), and at the listed steps ``at``; the union."""

    period: float | None = None
    start: float = 0.0
    at: tuple[int, ...] = ()

    def _j_range(self, lo: int, hi: int) -> tuple[int, int]:
        # Position j is floor(start + j * period + 0.5): j's whose position is in [lo, hi].
        p, eps = self.period, 1e-9
        j_lo = max(0, math.ceil((lo - 0.5 - self.start) / p - eps))
        j_hi = math.ceil((hi + 0.5 - self.start) / p - eps) - 1
        return j_lo, j_hi

    def periodic_at(self, k: int) -> bool:
        if not self.period:
            return False
        j_lo, j_hi = self._j_range(k, k)
        return j_hi >= j_lo

    def count(self, lo: int, hi: int) -> int:
        """Announced evaluations at steps ``lo..hi`` (inclusive)."""
        if hi < lo:
            return 0
        n = 0
        if self.period:
            j_lo, j_hi = self._j_range(lo, hi)
            n = max(j_hi - j_lo + 1, 0)
        return n + sum(lo <= k <= hi and not self.periodic_at(k) for k in self.at)

    def spacing(self) -> float:
        """Steps between two evaluations, on average."""
        if self.period:
            return self.period
        return self.at[-1] / len(self.at) if self.at and self.at[-1] > 0 else 1.0

    def describe(self) -> str:
        parts = []
        if self.period:
            period = f"{self.period:g}"
            parts.append(
                f"every {period} steps"
                + (f" from step {self.start:g}" if self.start != self.period else "")
            )
        if self.at:
            shown = ", ".join(str(k) for k in self.at[:4]) + (", ..." if len(self.at) > 4 else "")
            parts.append(f"at steps {shown}")
        return " and ".join(parts)


@dataclass
class Schedule:
    """What the framework or script said the run will do (None: unknown). Keys and meaning
    are those of ``Lens.set_schedule``."""

    total_steps: int | None = None
    steps_per_epoch: int | None = None
    epochs: int | None = None
    eval_every_epochs: float | None = None
    eval_every_steps: int | None = None
    eval_steps: int | None = None  # batches per evaluation
    checkpoint_every_steps: int | None = None
    eval_start_step: int | None = None
    eval_start_epoch: float | None = None
    eval_at_steps: tuple[int, ...] = ()
    eval_at_epochs: tuple[float, ...] = ()
    eval_samples: int | None = None  # samples one evaluation runs
    samples_per_step: int | None = None  # training samples per step (the global batch)

    _LISTS = ("eval_at_steps", "eval_at_epochs")
    _STARTS = ("eval_start_step", "eval_start_epoch")  # may be 0
    _FLOATS = ("eval_every_epochs", "eval_start_epoch")

    def update(self, mark: dict) -> None:
        for key in self.__dataclass_fields__:
            value = mark.get(key)
            if value is None or isinstance(value, bool):
                continue
            if key in self._LISTS:
                if isinstance(value, (list, tuple)):
                    setattr(self, key, tuple(sorted(v for v in value if _num(v) and v >= 0)))
            elif _num(value) and (value > 0 or (key in self._STARTS and value == 0)):
                setattr(self, key, float(value) if key in self._FLOATS else int(value))
        if self.steps_per_epoch and self.epochs and not mark.get("total_steps"):
            self.total_steps = self.steps_per_epoch * self.epochs

    def epoch_steps(self) -> int | None:
        """Steps per epoch: as said, or following from the total and the epochs when they
        divide evenly."""
        if self.steps_per_epoch:
            return self.steps_per_epoch
        n, e = self.total_steps, self.epochs
        return n // e if n and e and n % e == 0 and n >= e else None

    def eval_plan(self) -> EvalPlan | None:
        """Where the announced evaluations come, or None when the schedule does not say."""
        spe = self.epoch_steps()
        period = None
        if self.eval_every_steps:
            period = float(self.eval_every_steps)
        elif spe and self.eval_every_epochs:
            period = spe * self.eval_every_epochs
        at = set(self.eval_at_steps)
        if spe:
            at |= {math.floor(e * spe + 0.5) for e in self.eval_at_epochs}
        if period is None and not at:
            return None
        start = period or 0.0
        if self.eval_start_epoch is not None and spe:
            start = self.eval_start_epoch * spe
        elif self.eval_start_step is not None:
            start = float(self.eval_start_step)
        return EvalPlan(period, start, tuple(sorted(at)))

    def eval_period(self) -> int | None:
        """Whole steps between periodic evaluations starting at a multiple of them, when the
        schedule says (the in-step extras' periods)."""
        plan = self.eval_plan()
        if not plan or not plan.period or plan.period != int(plan.period):
            return None
        return int(plan.period)

    def periods(self) -> dict[int, str]:
        """Step periods the schedule names, with what they are."""
        out: dict[int, str] = {}
        if self.checkpoint_every_steps:
            out[self.checkpoint_every_steps] = "checkpoint"
        if self.eval_period():
            out[self.eval_period()] = "evaluation"
        if self.epoch_steps():
            out.setdefault(self.epoch_steps(), "epoch end")
        return out


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def learned_plan(at: list[int], steps_per_epoch: int | None) -> tuple[EvalPlan | None, str]:
    """Where a section comes, from where it came: the recent gaps when they agree within a
    step or ``JITTER`` (a period that is not a whole number of steps, an epoch that ends on
    either side of a step), their mean as the period; one occurrence assumes its own step
    as the period (an epoch when it fell on an epoch end)."""
    recent = at[-(JITTER_SPAN + 1) :]
    gaps = [b - a for a, b in zip(recent, recent[1:], strict=False)]
    if gaps and min(gaps) > 0:
        mid = sorted(gaps)[len(gaps) // 2]
        if max(gaps) - min(gaps) <= max(1.0, JITTER * mid):
            period, last = fit_lattice(recent)
            return EvalPlan(period, last), "learned"
        return None, "learned"
    if len(at) == 1 and at[0] > 0:
        spe = steps_per_epoch
        if spe and at[0] % spe == 0:
            return EvalPlan(float(spe), float(at[0])), "assumed: each epoch"
        return EvalPlan(float(at[0]), float(at[0])), f"assumed: every {at[0]} steps"
    return None, "learned"


def fit_lattice(at: list[int]) -> tuple[float, float]:
    """(period, fitted last position) of occurrences one period apart give or take a step:
    least squares on their index, so the jitter at either end does not set the period."""
    m = len(at)
    xm, ym = (m - 1) / 2, sum(at) / m
    sxx = sum((j - xm) ** 2 for j in range(m))
    period = sum((j - xm) * (k - ym) for j, k in enumerate(at)) / sxx
    return period, ym + period * (m - 1 - xm)
