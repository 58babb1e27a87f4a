"""ailens: make distributed AI training explain itself.

Attach one line (an integration in ``ailens.integrations``) or drive a :class:`Lens` by hand;
ailens records every collective with the work done before it, condenses the run into SIMO
phases online and forecasts the total time and other rank counts.

Importing ailens imports no framework.
"""

__version__ = "0.1.0"

from ._config import LensConfig  # noqa: E402
from ._lens import Lens, detect_rank_world  # noqa: E402
from ._logs import LogError, read_timeline  # noqa: E402
from ._trace import RankTrace, Run, TraceError, load_run  # noqa: E402
from .model.timeline import (  # noqa: E402
    Section,
    StepForecast,
    Timeline,
    TimelineForecast,
    forecast_timeline,
)

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
