"""The run's forecast: the total time from the first steps on, with an honest interval.

A training run is more than identical steps, so the forecast models it as its parts, each
with a time per occurrence and a schedule of occurrences over the whole run:

- **training steps**: a robust local level of the step time (rank 0's clock). A step far
  from the level (> ``Z_OUT`` robust sd) is left out of it, so a one-off outlier (a GC pause,
  a burst from another process) does not move the forecast; ``CHANGE_RUN`` such steps in a
  row on the same side, or a drift that a CUSUM test catches, start a new regime: a lasting
  change of speed is adopted within a few steps. Steps before ``warmup_steps`` are left out.
- **recurring extras**: steps that stand out on a period (an evaluation or a checkpoint in a
  plain loop makes every N-th step longer). A period is taken from the schedule the
  framework or script gave (steps per epoch, checkpoint every N, the evaluation plan), or
  learned from three occurrences, jittered or not; one spike or a burst of slow steps is no
  period. Outliers that fit no period stay in the level at their rate, or are a one-off.
- **sections** the integration or a log marked (``lens.section("eval")``: Keras validation,
  Lightning validation loops, MLPerf evaluations, ...): their measured time per occurrence
  (the cold first one left out once a later one is seen) and their schedule (from the
  framework, else learned from where they happened); a section announced but not seen yet
  is assumed (``eval_steps`` forward passes, else a prior share of the run); one during
  which steps ended ran beside the training and has no time of its own.

What the run cannot show yet is a stated prior (the step spread, a cold first section, an
unseen evaluation's cost, the step time's wander over the run), replaced by what it measures
as it goes; docs/forecast.md lists each with its figure.

The total and its interval are summed in ``snapshot.py`` (its docstring has the formula).

The signature (PAS2P) is the first evaluation, after ``signature_min_steps`` steps, at which
the run's structure is captured: the steady step level and every recurring part seen and
priced, each known to a stated precision (``policy.py``); the forecast made there is the
run's early forecast, with its honest interval. The progress-bar ETA a user already has
(elapsed + remaining steps x mean step time so far, as tqdm and Keras' progbar compute it) is
computed at every point beside it.

The rooms (their statistics, Student's t and chi-square quantiles, are
``ailens/_stats.py``, shared with the what-if): ``level.py`` (``StepLevel``: the training
steps), ``schedule.py`` (``Schedule``, ``EvalPlan``), ``parts.py`` (``Part``, the one-off),
``extras.py`` (recurring extras), ``sections.py`` (sections), ``snapshot.py`` (the model at
one step and its evaluation: total and interval), ``forecaster.py`` (feeds them and sums
the parts), ``policy.py`` (which forecast is the run's, the signature rule) and
``result.py`` (``Forecast``, the record it makes).
"""

from ..._stats import NORMAL_95, t_quantile
from .forecaster import Forecaster
from .level import StepLevel
from .parts import FIRST_WARM, FIRST_WARM_SD, Part, cold_precision, per_occurrence_precision
from .policy import EARLY_SHARE
from .result import Forecast
from .schedule import EvalPlan, Schedule
from .sections import EVAL_SHARE
from .snapshot import INTERVAL_LEVEL, Component, Prediction, Snapshot, naive_total_s

__all__ = [
    "EARLY_SHARE",
    "EVAL_SHARE",
    "FIRST_WARM",
    "FIRST_WARM_SD",
    "INTERVAL_LEVEL",
    "NORMAL_95",
    "Component",
    "EvalPlan",
    "Forecast",
    "Forecaster",
    "Part",
    "Prediction",
    "Schedule",
    "Snapshot",
    "StepLevel",
    "cold_precision",
    "naive_total_s",
    "per_occurrence_precision",
    "t_quantile",
]
