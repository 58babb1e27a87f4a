"""ailens: make distributed AI training explain itself.

Attach one line (an integration in ``ailens.integrations``) or drive a :class:`Lens` by hand;
ailens records every collective with the work done before it, condenses the run into SIMO
phases online and forecasts the total time and other rank counts.

Importing ailens imports no framework.
"""

from ._version import __version__  # first: modules imported below may read it

# isort: split
from ._logs import LogError, read_timeline
from ._timeline import (
    Section,
    StepForecast,
    Timeline,
    TimelineForecast,
    forecast_timeline,
)
from .live.lens import Lens
from .record.config import LensConfig
from .record.node import detect_rank_world
from .record.reader import RankTrace, Run, load_run
from .record.trace import TraceError

__all__ = [
    "Lens",
    "LensConfig",
    "Run",
    "RankTrace",
    "TraceError",
    "load_run",
    "Timeline",
    "Section",
    "StepForecast",
    "TimelineForecast",
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
