"""Recording: what one rank does during training, written to its trace.

The lowest layer: it imports nothing from the run model, the analysis or the predictors.
``config`` (settings), ``counters`` (work counters), ``buffer`` (the hot path's event columns,
compiled twin ``ailens._recorder``), ``recorder`` (the rank's recorder), ``writer`` (the writer
thread), ``trace`` (the trace format), ``reader`` (reading traces back), ``ticks`` (per-tick
summaries), ``exchange`` (the cross-rank payload and cadence), ``session`` (the exchange
session), ``steps`` (step ends inferred from collectives), ``node`` (the node descriptor).

The names below are its public API. ``IMPLEMENTATION`` says which event buffer is in use
(``"c"``: the compiled one, ``"python"``); ``NativeEventBuffer`` is None when the compiled
one cannot be used; ``using_event_buffer(cls)`` makes the Lenses of a block use another.
Every module here but ``reader`` is imported by ``import ailens`` already: importing them here
costs nothing; ``reader``'s names are imported on first use (a script that only records does
not read traces back).
"""

from .buffer import IMPLEMENTATION, EventBuffer, NativeEventBuffer, PyEventBuffer
from .config import LensConfig
from .node import describe_node, detect_rank_world
from .recorder import Recorder, using_event_buffer
from .trace import FORMAT_VERSION, TraceError, TraceWriter

_READER = frozenset({"RankTrace", "Run", "load_run", "read_trace"})


def __getattr__(name: str):
    """``reader``'s names, imported on first use (PEP 562)."""
    if name in _READER:
        from . import reader

        value = globals()[name] = getattr(reader, name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FORMAT_VERSION",
    "IMPLEMENTATION",
    "EventBuffer",
    "LensConfig",
    "NativeEventBuffer",
    "PyEventBuffer",
    "RankTrace",
    "Recorder",
    "Run",
    "TraceError",
    "TraceWriter",
    "describe_node",
    "detect_rank_world",
    "load_run",
    "read_trace",
    "using_event_buffer",
]
