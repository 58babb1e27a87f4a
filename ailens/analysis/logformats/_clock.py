"""Clock readings the framework logs print, as seconds: ``h:mm:ss`` / ``mm:ss`` durations
(tqdm, LLaMA-Factory, MetricLogger's ``Total time``, with ``1 day, h:mm:ss`` above a day) and
``12s`` / ``25ms/step`` style amounts (Keras); ``StampClock``, the timestamps of loggers that
print no year (mmengine, Detectron2); and ``hold``, a step counter held through an
evaluation."""

from __future__ import annotations

import re
from datetime import datetime

from ._base import Point

__all__ = ["DURATION", "StampClock", "duration_s", "hold", "unit_s"]

_YEAR_S = 366 * 86400.0

# How far past its counter a held point sits (a fraction of a step no counter reaches).
_HELD = 1e-6

# "5:39:46", "02:28", "1 day, 16:54:00", "2 days, 3:04:05", "0:00:04.43"
DURATION = r"(?:\d+\s+days?,\s*)?\d+(?::\d{1,2}){1,2}(?:\.\d+)?"
_DURATION = re.compile(r"^\s*(?:(\d+)\s+days?,\s*)?(\d+(?::\d{1,2}){1,2}(?:\.\d+)?)\s*$")
_UNITS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def duration_s(text: str) -> float | None:
    """Seconds of an ``[d day(s), ][h:]mm:ss[.f]`` reading; None when it is not one."""
    m = _DURATION.match(text)
    if not m:
        return None
    parts = [float(x) for x in m.group(2).split(":")]
    s = 0.0
    for x in parts:
        s = s * 60.0 + x
    return s + 86400.0 * int(m.group(1) or 0)


def unit_s(value: str, unit: str) -> float:
    """Seconds of ``value`` in ``unit`` (us, ms, s, m, h)."""
    return float(value) * _UNITS[unit]


def hold(points: list[Point], t_end: float, section: str | None = None) -> None:
    """The counter of the last point held until ``t_end`` (an evaluation between two steps):
    a point a hair past that counter at ``t_end``, so the steps after it are spread from the
    evaluation's end, not over it; ``section`` names what ran then (the shared helper makes
    it a section, on the clock it continues through a restart). A reading of the same
    counter after it must be dropped by the reader (it would read as the counter going
    back)."""
    if points and points[-1].step is not None and points[-1].t_s is not None:
        if t_end > points[-1].t_s:
            points.append(Point(step=points[-1].step + _HELD, t_s=t_end, section=section))


class StampClock:
    """Seconds of a log's timestamps (``2021-10-21 02:48:44,261``, ``2022/08/22 15:51:56``, or
    ``08/22 15:51:56`` without the year: one continues across New Year)."""

    def __init__(self) -> None:
        self.shift = 0.0
        self.last = None

    def seconds(self, ts: str) -> float:
        if "," in ts:
            return datetime.strptime(ts, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if len(ts) > 14:
            return datetime.strptime(ts, "%Y/%m/%d %H:%M:%S").timestamp()
        t = datetime.strptime("2000/" + ts, "%Y/%m/%d %H:%M:%S").timestamp() + self.shift
        if self.last is not None and t < self.last - _YEAR_S / 2:
            self.shift += _YEAR_S  # December -> January
            t += _YEAR_S
        self.last = t
        return t
