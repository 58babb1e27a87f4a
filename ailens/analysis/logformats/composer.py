"""MosaicML Composer's ``ConsoleLogger``: the metrics logged at a batch, one per line under
the batch's tag::

    [epoch=0][batch=16/625]: wall_clock/train: 17.1607
    [epoch=0][batch=16/625]: wall_clock/val: 10.9666
    [epoch=0][batch=16/625]: wall_clock/total: 28.1273

or, from Composer 0.14, the tag on a line of its own and the metrics indented below it
(``[epoch=1][batch=16/100]:`` then ``\t Train time/total: 0.0078``). The clock is the
cumulative ``wall_clock/total`` (seconds) or ``time/total`` (SpeedMonitor's, in hours by
default) since the fit began, validation included; what the matching ``val`` reading grew
by since the previous batch is an "eval" section at the start of that interval. ``batch=B/N``
is the batch in the epoch of N where the tag has ``epoch=`` (epochs counted from the log's
first), else the run's batch of its total N.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Section, Timeline
from ._base import LogError, LogFormat, Point, has_lines, timeline_from_points
from ._clock import hold
from ._table import whole_lines
from ._tqdm import count_bars

__all__ = ["FORMAT", "read_composer"]

_TAG = re.compile(r"^\[(?:epoch=(?P<e>\d+)\])?\[?batch=(?P<b>\d+)/(?P<n>\d+)\]:")
_METRIC = re.compile(
    r"(?:^|\]:|\bTrain)\s*(?P<k>wall_clock|time)/(?P<what>total|val):\s*(?P<v>[\d.eE+-]+)"
)
_UNIT_S = {"wall_clock": 1.0, "time": 3600.0}


def read_composer(path: Path, text: str) -> Timeline:
    readings: dict[tuple[int | None, int, int], dict[str, float]] = {}
    order: list[tuple[int | None, int, int]] = []
    tag = None
    for line in whole_lines(text).splitlines():
        if t := _TAG.match(line):
            tag = (
                int(t.group("e")) if t.group("e") is not None else None,
                int(t.group("b")),
                int(t.group("n")),
            )
        elif not line.startswith(("\t", " ")):
            tag = None if line.strip() else tag
        m = _METRIC.search(line)
        if tag is None or m is None:
            continue
        if tag not in readings:
            readings[tag] = {}
            order.append(tag)
        readings[tag][m.group("what")] = float(m.group("v")) * _UNIT_S[m.group("k")]
    timed = [(k, readings[k]) for k in order if "total" in readings[k]]
    if not timed:
        raise LogError(
            f"{path}: no Composer console lines with a clock ('[epoch=0][batch=16/625]: "
            "wall_clock/total: 28.1' or 'time/total'); log with SpeedMonitor and ConsoleLogger"
        )
    points: list[Point] = [Point(step=0, t_s=0.0)]
    sections: list[Section] = []
    epoch_form = timed[0][0][0] is not None
    e0 = timed[0][0][0] or 0  # epochs counted from the log's first (0 or 1 by version)
    prev_t, prev_val = 0.0, 0.0
    for (epoch, b, n), r in timed:
        step = (epoch - e0) * n + b if epoch_form else b
        val = r.get("val", prev_val)
        if val > prev_val:
            sections.append(Section("eval", prev_t, prev_t + (val - prev_val)))
            hold(points, prev_t + (val - prev_val))
        points.append(Point(step=step, t_s=r["total"]))
        prev_t, prev_val = r["total"], val
    n = timed[-1][0][2]
    return timeline_from_points(
        points,
        path=path,
        source="composer",
        clock="from_start",
        sections=sections,
        steps_per_epoch=n if epoch_form else None,
        total_steps=None if epoch_form else n,
    )


_DETECT = re.compile(r"^\[(?:epoch=\d+\])?\[?batch=\d+/\d+\]:", re.MULTILINE)


def _detect(head: str) -> bool:
    """Composer's batch tags with a clock; without one (no SpeedMonitor), still Composer's, to
    be refused saying so, unless its progress bar is there for the tqdm reader."""
    if not has_lines(_DETECT, head, 3):
        return False
    return "wall_clock/" in head or "time/" in head or count_bars(head, 1) == 0


FORMAT = LogFormat(
    name="composer",
    title="MosaicML Composer console ([epoch=0][batch=16/625]: wall_clock/total: 28.1)",
    detect=_detect,
    read=read_composer,
    example="[epoch=0][batch=16/625]: wall_clock/total: 28.1273",
)
