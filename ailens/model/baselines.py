"""The remaining-time estimates a user already has, shown beside every ailens forecast.

- the **progress bar** (tqdm, Keras' progbar): elapsed + remaining steps x mean step time so
  far (``naive_total_s``, the same function the forecast reports as ``naive_total_s``);
- **MosaicML Composer's** ``RuntimeEstimator`` (``composer.callbacks``), the best estimate of a
  mainstream trainer: the training rate leaves the evaluations' wall time out, and each kind of
  evaluation is added back at its mean time (the first call dropped once there are two: it is
  the cold one) times the calls still to come at the frequency measured so far. Written from
  its description; times are the caller's (seconds from the run's start).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .forecast import naive_total_s

__all__ = ["composer_total_s", "naive_total_s"]


def composer_total_s(
    elapsed_s: float,
    steps_done: int,
    total_steps: int | None,
    evaluations: Mapping[str, Sequence[float]] | None = None,
    *,
    train_start_s: float = 0.0,
) -> float | None:
    """Composer's ``RuntimeEstimator`` forecast of the run's total, in seconds from its start.

    ``evaluations``: for each kind of evaluation (Composer: each evaluator), the wall time of
    every call finished so far. ``train_start_s``: when training began (Composer's clock starts
    at fit start, after initialisation)::

        rate      = (elapsed - train_start - sum of evaluation times) / steps done
        remaining = rate x remaining steps
                    + sum over kinds: mean time (first call dropped when >= 2 calls)
                                      x (int(calls / fraction done) - calls)

    None before the first step or without a total.
    """
    if not steps_done or not total_steps or elapsed_s <= train_start_s:
        return None
    evals = {k: list(v) for k, v in (evaluations or {}).items() if len(v)}
    eval_s = sum(sum(v) for v in evals.values())
    rate = max(elapsed_s - train_start_s - eval_s, 0.0) / steps_done
    fraction = steps_done / total_steps
    remaining = rate * max(total_steps - steps_done, 0)
    for times in evals.values():
        warm = times[1:] if len(times) > 1 else times
        calls = len(times)
        remaining += sum(warm) / len(warm) * max(int(calls / fraction) - calls, 0)
    return elapsed_s + remaining
