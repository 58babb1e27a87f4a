"""nanoGPT's ``train.py`` (and its many forks): every ``log_interval`` iterations::

    iter 100: loss 3.4880, time 10538.35ms, mfu 0.01%

``iter`` numbers the iterations from 0; ``time`` is the last iteration's own time, not the
interval's, so an interval of k iterations is that time plus k - 1 iterations at the log's
usual iteration time (the median of the lines that follow no evaluation). An evaluation
(``step N: train loss ..., val loss ...``) runs inside the next logged iteration's time: its
extra over the usual time is an ``"eval"`` section. The log does not say the total
(``max_iters``): give ``--total-steps``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ...model.timeline import Section, Timeline
from ._base import LogError, LogFormat, Point, lines_like, timeline_from_points

__all__ = ["FORMAT", "read_nanogpt"]

_ITER = re.compile(r"^iter (\d+): loss \S+?, time ([0-9.]+)ms", re.MULTILINE)
_EVAL = re.compile(r"^step (\d+): train loss \S+, val loss", re.MULTILINE)


def read_nanogpt(path: Path, text: str) -> Timeline:
    rows: list[tuple[int, float, bool]] = []  # iter, seconds of that iteration, after an eval
    evaluated = False
    for line in text.splitlines():
        if _EVAL.match(line):
            evaluated = True
            continue
        m = _ITER.match(line)
        if m:
            rows.append((int(m.group(1)), float(m.group(2)) / 1e3, evaluated))
            evaluated = False
    if not rows:
        raise LogError(f"{path}: no nanoGPT 'iter N: loss X, time Yms' lines")
    plain = [dt for _, dt, ev in rows[1:] if not ev] or [dt for _, dt, _ in rows]
    usual = float(np.median(plain))
    points, sections = [], []
    t = 0.0
    prev = None
    for it, dt, ev in rows:
        k = 1 if prev is None else it - prev
        if k <= 0:  # a resumed run: its counter starts over
            k = 1
            points.append(Point(step=it, t_s=t + dt, restart=True))
        else:
            points.append(Point(step=it, t_s=t + (k - 1) * usual + dt))
        if ev and dt > usual:
            start = t + (k - 1) * usual
            sections.append(Section("eval", start, start + dt - usual))
        t = points[-1].t_s
        prev = it
    return timeline_from_points(
        points,
        path=path,
        source="nanogpt",
        zero_based=True,
        clock="from_start",
        sections=sections,
    )


FORMAT = LogFormat(
    name="nanogpt",
    title="nanoGPT train.py (iter N: loss X, time Yms, mfu Z%)",
    detect=lines_like(_ITER),
    read=read_nanogpt,
    example="iter 100: loss 3.4880, time 1438.35ms, mfu 12.01%",
)
