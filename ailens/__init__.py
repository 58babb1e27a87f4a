"""ailens: make distributed AI training explain itself.

Attach one line (an integration in ``ailens.integrations``) or drive a :class:`Lens` by hand;
ailens records every collective with the work done before it, condenses the run into SIMO
phases online and forecasts the total time and other rank counts. ``ailens.analyze(run_dir)``
reads a saved run back (phases, per-step table, forecast).

Importing ailens imports no framework.
"""

from ._version import __version__  # first: modules imported below may read it

# isort: split
from . import _lazy
from .live.lens import Lens
from .record.config import LensConfig
from .record.node import detect_rank_world
from .record.trace import TraceError

# What reads runs and logs back is imported on first use: a training script that only records
# does not pay for it at start-up.
_LAZY = {
    "RankTrace": "record.reader",
    "Run": "record.reader",
    "load_run": "record.reader",
    "analyze": "analysis.run_analysis",
    "RunAnalysis": "analysis.run_analysis",
    "StepTable": "analysis.run_analysis",
    "PhaseSkew": "analysis.run_analysis",
    "read_timeline": "analysis.logs",
    "LogError": "analysis.logs",
    "Timeline": "model.timeline",
    "Section": "model.timeline",
    "StepForecast": "model.timeline",
    "TimelineForecast": "model.timeline",
    "TimelineReplay": "model.timeline",
    "forecast_timeline": "model.timeline",
}


__getattr__ = _lazy.lazy_getattr(__name__, _LAZY, globals())


__all__ = [
    "Lens",
    "LensConfig",
    "Run",
    "RankTrace",
    "TraceError",
    "load_run",
    "analyze",
    "RunAnalysis",
    "StepTable",
    "PhaseSkew",
    "Timeline",
    "Section",
    "StepForecast",
    "TimelineForecast",
    "TimelineReplay",
    "forecast_timeline",
    "read_timeline",
    "LogError",
    "lens",
    "detect_rank_world",
    "__version__",
]


def lens(**settings) -> Lens:
    """A Lens for a plain training loop; use it as a context manager::

    with ailens.lens(run_dir="runs/demo") as lens:
        for step in range(steps):
            lens.collective_begin("allreduce", grad.nbytes); allreduce(grad); lens.collective_end()
            lens.step_end()
    """
    return Lens(**settings)
