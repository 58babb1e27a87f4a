"""timm's ``train.py``: ``Train: e [ i/N ( p%)]  Loss: …  Time: 0.320s,  400.32/s  (0.470s,
272.39/s)  LR: …  Data: …`` every ``log_interval`` batches and on the last, ``Test: [ i/n]
Time: 3.856 (0.732)  Loss: …`` during validation (n is the last index: n + 1 batches),
``Scheduled epochs: K`` at the start and ``*** Best metric: …`` at the end.

The log has no clock; the seconds in parentheses are the average per batch since the epoch
began, so batch i of an epoch ends ``(i + 1) x average`` after it began, and the epoch
``N x average`` (the last line's) once the log goes on past it (a validation, the next
epoch, the end). A validation lasts ``(n + 1) x`` its average and is an "eval"
section after its epoch; the next epoch begins when it ends. The steps are the batches,
numbered across epochs from the log's first (epochs count from 0: a log that starts at epoch
e0 resumed there); the total is (K - e0) x N. ``*** Best metric`` ends the run."""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Section, Timeline
from ._base import LogError, LogFormat, Point, timeline_from_points
from ._table import whole_lines

__all__ = ["FORMAT", "read_timm"]

_TRAIN = re.compile(r"Train: (?P<e>\d+) \[\s*(?P<i>\d+)/(?P<n>\d+)(?: \(\s*\d+%\))?\]")
_TEST = re.compile(r"Test(?: \([^)]*\))?: \[\s*(?P<i>\d+)/(?P<n>\d+)\]")
# "Time: 0.320s,  400.32/s  (0.470s,  272.39/s)" / "Time: 3.856 (0.732)": value (average)
_TIME = re.compile(r"Time:\s*(?P<val>[\d.]+)s?,?(?:\s+[\d.]+/s)?\s+\((?P<avg>[\d.]+)s?")
_SCHEDULED = re.compile(r"Scheduled epochs: (\d+)")
_BEST = re.compile(r"\*\*\* Best metric: ")


def read_timm(path: Path, text: str) -> Timeline:
    text = whole_lines(text)
    points: list[Point] = []
    sections: list[Section] = []
    t = 0.0  # the rebuilt clock: the end of the last epoch or validation
    cur = None  # (epoch, N, average of its last line)
    val = None  # (batches, average) of the validation being read
    epochs_total = None
    spe = None
    ended = False
    e0 = None  # the log's first epoch (a resumed run's start_epoch): the steps count from it

    def close_epoch() -> None:
        nonlocal t, cur
        if cur is not None:
            e, n, avg = cur
            t += n * avg
            points.append(Point(step=(e - e0 + 1) * n, t_s=t))
            cur = None

    def close_val() -> None:
        nonlocal t, val
        if val is not None:
            sections.append(Section("eval", t, t + val[0] * val[1]))
            t += val[0] * val[1]
            val = None

    for line in text.replace("\r", "\n").splitlines():
        if m := _SCHEDULED.search(line):
            epochs_total = int(m.group(1))
            continue
        if _BEST.search(line):
            ended = True
            continue
        tm = _TIME.search(line)
        if (m := _TRAIN.search(line)) and tm:
            close_val()
            e, i, n = int(m.group("e")), int(m.group("i")), int(m.group("n"))
            e0 = e if e0 is None else e0
            if cur is not None and cur[0] != e:
                close_epoch()
            avg = float(tm.group("avg"))
            if i + 1 < n:
                points.append(Point(step=(e - e0) * n + i + 1, t_s=t + (i + 1) * avg))
            cur, spe = (e, n, avg), n
        elif (m := _TEST.search(line)) and tm:
            close_epoch()
            val = (int(m.group("n")) + 1, float(tm.group("avg")))
    if ended:
        close_epoch()
    close_val()  # an epoch still running at the end of the file is not extrapolated
    if not points:
        raise LogError(
            f"{path}: no timm progress lines ('Train: e [ i/N (p%)]  ...  Time: 0.320s, ... "
            "(0.470s, ...)'); give the log timm's train.py printed"
        )
    return timeline_from_points(
        points,
        path=path,
        source="timm",
        clock="from_start",
        end_s=t if ended else None,
        sections=sections,
        steps_per_epoch=spe,
        total_steps=max(epochs_total - e0, 1) * spe if epochs_total and spe else None,
        info={"epochs": epochs_total} if epochs_total else None,
    )


_DETECT = re.compile(r"Train: \d+ \[\s*\d+/\d+ \(\s*\d+%\)\]")


def _detect(head: str) -> bool:
    return bool(_DETECT.search(head)) and "Time:" in head


FORMAT = LogFormat(
    name="timm",
    title="timm train.py (Train: e [ i/N ( p%)]  Loss: ...  Time: 0.320s, ... (0.470s, ...))",
    detect=_detect,
    read=read_timm,
    example="Train: 0 [  50/73 ( 70%)]  Loss: 6.77 (6.83)  Time: 0.320s,  400.32/s  (0.470s,  "
    "272.39/s)  LR: 1.000e-05  Data: 0.217 (0.047)",
)
