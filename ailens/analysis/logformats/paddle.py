"""PaddleDetection's trainer (``ppdet``): its logger's ``[MM/DD HH:MM:SS] name LEVEL: msg``
lines, a progress line every ``log_iter`` steps::

    [07/15 10:19:42] ppdet.engine INFO: Epoch: [0] [20/87] learning_rate: 0.000047 ...
        loss: 13.317031 eta: 5:29:28 batch_cost: 5.5608 data_cost: 0.0002 ips: 1.4386 images/s

The timestamps (whole seconds, no year) are the clock. A line counts epochs from 0 and the
epoch's steps from 0: ``[i/N]`` in epoch ``e`` is step ``e x N + i + 1`` done, N the steps
per epoch. The trainer's ETA is the steps left at its average step time, so ``eta /
batch_cost`` steps are left: the total is the whole number of epochs that rounds to (the
median over the lines). What runs between two progress lines is a section of the interval
it fell in: an evaluation (``Eval iter:``, ``Total sample number``, ``Best test``, the
``metrics`` loggers' lines) and a checkpoint (``Save checkpoint``).
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from ...model.timeline import Timeline
from ._base import LogError, LogFormat, Point, has_lines, timeline_from_points
from ._clock import DURATION, StampClock, duration_s

__all__ = ["FORMAT", "read_paddle"]

_LINE = re.compile(
    r"^\[(?P<ts>\d\d/\d\d \d\d:\d\d:\d\d)\] (?P<name>ppdet(?:\.[\w.]+)?) [A-Z]+: (?P<msg>.*)$"
)
_PROGRESS = re.compile(
    rf"^Epoch: \[(?P<e>\d+)\] \[\s*(?P<i>\d+)/(?P<n>\d+)\].*?eta: (?P<eta>{DURATION}) "
    r"batch_cost: (?P<cost>[0-9.]+)"
)
_EVAL = re.compile(r"^(?:Eval iter|Total sample number|Best test)")
_CHECKPOINT = re.compile(r"^Save checkpoint")
_DETECT = re.compile(
    r"^\[\d\d/\d\d \d\d:\d\d:\d\d\] ppdet(?:\.[\w.]+)? INFO: "
    r"Epoch: \[\d+\] \[\s*\d+/\d+\].*batch_cost:",
    re.MULTILINE,
)


def read_paddle(path: Path, text: str) -> Timeline:
    clock = StampClock()
    points: list[Point] = []
    totals: list[float] = []  # the run's steps, from each line's eta
    per_epoch = None
    pending = None  # a section that ran inside the interval the next progress line ends
    first = last = None
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if m is None:
            continue
        t = clock.seconds(m["ts"])
        first = t if first is None else first
        last = t
        msg = m["msg"]
        p = _PROGRESS.match(msg)
        if p is None:
            if _EVAL.match(msg) or ".metrics" in m["name"]:
                pending = "eval"
            elif _CHECKPOINT.match(msg):
                pending = pending or "checkpoint"
            continue
        per_epoch = int(p["n"])
        done = int(p["e"]) * per_epoch + int(p["i"]) + 1
        cost, eta = float(p["cost"]), duration_s(p["eta"])
        if cost > 0 and eta is not None:
            totals.append(done + eta / cost)
        points.append(Point(step=done, t_s=t, section=pending))
        pending = None
    if not points:
        raise LogError(
            f"{path}: no PaddleDetection 'Epoch: [e] [i/N] ... eta: ... batch_cost: ...' lines"
        )
    total = None
    if per_epoch and totals:
        # The trainer's ETA counts the steps left: the run's epochs, whole.
        total = per_epoch * max(round(statistics.median(totals) / per_epoch), 1)
    return timeline_from_points(
        points,
        path=path,
        source="paddle",
        log_start_s=first,
        log_end_s=last,
        steps_per_epoch=per_epoch,
        total_steps=total,
    )


FORMAT = LogFormat(
    name="paddle",
    title="PaddleDetection trainer ([07/15 10:19:42] ppdet.engine INFO: Epoch: [e] [i/N] ... "
    "eta: ... batch_cost: ...)",
    detect=lambda head: has_lines(_DETECT, head, 2),
    read=read_paddle,
    example="[07/15 10:19:42] ppdet.engine INFO: Epoch: [0] [20/87] learning_rate: 0.000047 "
    "loss: 13.317031 eta: 5:29:28 batch_cost: 5.5608 data_cost: 0.0002 ips: 1.4386 images/s",
)
