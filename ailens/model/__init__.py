"""The run model: phases, the total-time forecast and the signature, fed step ends, marks
and exchanged batches the same way live (the Lens) and in replay (a trace, a timeline).

``online`` (``OnlineAnalysis``: the model, and ``feed_recorded`` for a replay), ``forecast``
(the forecaster: a package with its own ``__all__``), ``timeline`` (the public timeline API,
also at ``ailens.Timeline``...), ``baselines`` (the estimates a user already has:
``naive_total_s``, the progress bar's, and ``composer_total_s``, Composer's). What the Lens
shows and writes from the model while training is ``ailens.live.output``. The names below
are its public API; ``import ailens`` imports these modules already.
"""

from .baselines import composer_total_s, naive_total_s
from .forecast import Forecast, Forecaster
from .online import OnlineAnalysis, feed_recorded

__all__ = [
    "Forecast",
    "Forecaster",
    "OnlineAnalysis",
    "composer_total_s",
    "feed_recorded",
    "naive_total_s",
]
