"""llm.c (``train_gpt2.c`` / ``train_gpt2.cu``): one line per step with the step's time, in
the forms its versions printed::

    step 0: train loss 5.356189 (took 1452.121000 ms)
    step    1/74: train loss 4.367631 norm 1.2345 lr 1.00e-04 (80.639749 ms, 203161 tok/s)
    step    1/19560 | train loss 11.010252 | norm 15.1374 | lr 8.57e-07 | 4688.25 ms | ...
    step    1/19560 | loss 11.010252 (+nanz)| norm 15.1374 (+nanz)| lr 8.57e-07 | 4688.25 ms
    | 28.8% bf16 MFU | 111830 tok/s

The log has no clock: each line's milliseconds are that step's, summed. Counters with a total
(``N/T``) count from 1, the older ones without it from 0. ``val loss``, HellaSwag and sampling
run between steps and are not timed by the log (the timeline leaves them out).
``total average iteration time`` ends the run.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Timeline
from ._base import LogError, LogFormat, Point, lines_like, timeline_from_points
from ._table import whole_lines

__all__ = ["FORMAT", "read_llmc"]

_LINE = re.compile(
    r"^step\s+(?P<n>\d+)(?:/(?P<total>\d+))?\s*[:|]\s*(?:train )?loss\s+\S+"
    r".*?(?P<ms>\d+(?:\.\d+)?)\s*ms\b",
    re.MULTILINE,
)
_END = re.compile(r"^total average iteration time:", re.MULTILINE)


def read_llmc(path: Path, text: str) -> Timeline:
    text = whole_lines(text)
    points: list[Point] = []
    zero_based = None
    for m in _LINE.finditer(text):
        total = int(m.group("total")) if m.group("total") else None
        if zero_based is None:
            zero_based = total is None
        points.append(Point(step=int(m.group("n")), step_s=float(m.group("ms")) / 1e3, total=total))
    if not points:
        raise LogError(
            f"{path}: no llm.c step lines ('step N/T | loss X ... | Y ms | ...' or 'step N: "
            "train loss X (took Y ms)'); give the log train_gpt2 printed"
        )
    ended = _END.search(text) is not None
    return timeline_from_points(
        points,
        path=path,
        source="llm.c",
        zero_based=bool(zero_based),
        clock="from_start",
        end_s=_summed(points, bool(zero_based)) if ended else None,
    )


def _summed(points: list[Point], zero_based: bool) -> float:
    """The steps' milliseconds summed over the counter (a line every k steps stands for k
    steps at its time): where the last step ended on the log's clock."""
    t, prev = 0.0, -1 if zero_based else 0
    for p in points:
        if p.step > prev:
            t += (p.step - prev) * p.step_s
            prev = p.step
    return t


FORMAT = LogFormat(
    name="llm.c",
    title="llm.c train_gpt2 (step N/T | loss X | norm Y | lr Z | T ms | K tok/s)",
    detect=lines_like(_LINE),
    read=read_llmc,
    example="step    1/19560 | loss 11.010252 (+nanz)| norm 15.1374 (+nanz)| lr 8.57e-07 | "
    "4688.25 ms | 28.8% bf16 MFU | 111830 tok/s",
)
