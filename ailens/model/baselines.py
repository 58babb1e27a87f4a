"""The remaining-time estimates a user already has, shown beside every ailens forecast.

- the **progress bar** (tqdm, Keras' progbar): elapsed + remaining steps x mean step time so
  far (``naive_total_s``, the same function the forecast reports as ``naive_total_s``);
- **MosaicML Composer's** ``RuntimeEstimator`` (``composer.callbacks``), the estimate of a
  mainstream trainer, as its source computes it (``composer/callbacks/runtime_estimator.py``,
  default ``skip_batches=1``): the clock starts after the first batch, the training rate leaves
  the evaluations' wall time out, and each kind of evaluation is added back at its mean time
  (the first call dropped once there are two: it is the cold one) times the calls still to come
  at the frequency measured at its last call. Times are the caller's (seconds from the run's
  start).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .forecast import naive_total_s

__all__ = ["composer_total_s", "naive_total_s"]


def composer_total_s(
    elapsed_s: float,
    steps_done: int,
    total_steps: int | None,
    evaluations: Mapping[str, Sequence[tuple[int, float]]] | None = None,
    *,
    clock_start_s: float,
    skip_steps: int = 1,
) -> float | None:
    """Composer's ``RuntimeEstimator`` forecast of the run's total, in seconds from its start.

    ``clock_start_s``: when the estimator's clock started, the end of step ``skip_steps``
    (Composer's ``skip_batches``, default 1: the first batch is slow). ``evaluations``: for each
    kind of evaluation (Composer: each evaluator label), (steps done when it ended, wall
    seconds) of every call finished so far; calls that ended before the clock started are
    ignored, as Composer ignores them. With fractions of the run ``f = steps / total``::

        rate      = (elapsed - clock start - evaluation time since) / (f_now - f_start)
        remaining = rate x (1 - f_now)
                    + sum over kinds: mean time (first call dropped when >= 2 calls)
                                      x (calls x (1 - f_start) / (f_last call - f_start) - calls)

    None until a step after the clock's start is done (Composer logs nothing before) or
    without a total. A kind whose calls all ended at the clock's start has no frequency yet
    (Composer would divide by zero there) and adds nothing.
    """
    if not total_steps or steps_done <= skip_steps:
        return None
    start = skip_steps / total_steps
    now = steps_done / total_steps
    evals = {
        k: [(int(at), float(s)) for at, s in v if at >= skip_steps]
        for k, v in (evaluations or {}).items()
    }
    evals = {k: v for k, v in evals.items() if v}
    busy = sum(s for v in evals.values() for _, s in v)
    remaining = (elapsed_s - clock_start_s - busy) / (now - start) * (1 - now)
    for calls in evals.values():
        times = [s for _, s in calls]
        warm = times[1:] if len(times) > 1 else times
        at = calls[-1][0] / total_steps - start
        if at <= 0:
            continue
        remaining += sum(warm) / len(warm) * (len(times) / at * (1 - start) - len(times))
    return elapsed_s + remaining
