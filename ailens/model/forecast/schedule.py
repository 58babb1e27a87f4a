"""What the run will do: the schedule the framework or script gave (``Schedule``, the one
type of ``record.schedule``: ``Lens.set_schedule``'s keywords), where its evaluations come
(``EvalPlan``), and a section's period learned from where it came."""

from __future__ import annotations

from ...record.schedule import EvalPlan, Schedule

__all__ = ["JITTER", "JITTER_SPAN", "EvalPlan", "Schedule", "fit_lattice", "learned_plan"]

# Learned section periods: gaps that agree within a step or this share, over the last
# JITTER_SPAN gaps.
JITTER = 0.05
JITTER_SPAN = 4


def learned_plan(
    at: list[int], steps_per_epoch: int | None, steps_done: int | None = None
) -> tuple[EvalPlan | None, str]:
    """Where a section comes, from where it came: the recent gaps when they agree within a
    step or ``JITTER`` (a period that is not a whole number of steps, an epoch that ends on
    either side of a step), their mean as the period; one occurrence assumes its own step
    as the period (an epoch when it fell on an epoch end) until ``steps_done`` passed the
    second's place by more than the jitter with none: then it was a one-off (a check before
    the first step would otherwise stay "every step" to the run's end)."""
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
        on_epoch = bool(spe) and at[0] % spe == 0
        period = spe if on_epoch else at[0]
        if steps_done is not None and steps_done - at[0] > period + max(1, JITTER * period):
            return None, f"learned: once, at step {at[0]}, not again in {steps_done - at[0]}"
        if on_epoch:
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
