"""DeepSpeed's own progress lines: the engine's ``[Rank 0] step=N, skipped=S, lr=...`` every
``steps_per_print`` steps, or where those are absent its throughput timer's
``epoch=E/micro_step=M/global_step=N, RunningAvgSamplesPerSec=...`` (older: ``E/N,
RunningAvgSamplesPerSec=...``), each after DeepSpeed's logger timestamp::

    [2023-04-18 01:46:59,142] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=6, ...

``step`` counts optimizer steps (skipped ones included). DeepSpeed-Chat's ``Beginning of Epoch
e/E, Total Micro Batches B`` gives the steps per epoch (B over the gradient accumulation the
timer line shows, micro_step / global_step) and the total (E epochs). An evaluation or a
checkpoint between two step lines (DeepSpeed-Chat's ``***** Evaluating perplexity``) is a
section of the interval it fell in.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Timeline
from ._base import (
    TIMESTAMP,
    LogError,
    LogFormat,
    Point,
    first_timestamp_s,
    has_lines,
    last_timestamp_s,
    section_mark,
    timeline_from_points,
    timestamp_s,
)

__all__ = ["FORMAT", "read_deepspeed"]

_STEP = re.compile(r"\[Rank 0\] step=(\d+), skipped=\d+")
_TIMER = re.compile(r"(?:global_step=|\b\d+/)(\d+),\s*RunningAvgSamplesPerSec=")
# The first epoch's counters give the accumulation (micro_step restarts every epoch).
_ACCUM = re.compile(r"epoch=0/micro_step=(\d+)/global_step=(\d+)")
_EPOCH = re.compile(r"Beginning of Epoch (\d+)/(\d+), Total Micro Batches (\d+)")


def read_deepspeed(path: Path, text: str) -> Timeline:
    lines = text.splitlines()
    pattern = _STEP if any(_STEP.search(x) for x in lines) else _TIMER
    points = []
    accum = None
    epochs = micro = None
    mark = None  # an evaluation or checkpoint since the last step line
    for line in lines:
        a = _ACCUM.search(line)
        if a and int(a.group(2)) > 0:
            accum = int(a.group(1)) / int(a.group(2))
        e = _EPOCH.search(line)
        if e:
            epochs, micro = int(e.group(2)), int(e.group(3))
        m = pattern.search(line)
        if m is None:
            if points and mark is None:
                mark = section_mark(line)
            continue
        ts = TIMESTAMP.search(line, 0, m.start())
        if ts is None:
            continue
        points.append(Point(step=int(m.group(1)), t_s=timestamp_s(ts), section=mark))
        mark = None
    if not points:
        raise LogError(f"{path}: no timestamped DeepSpeed '[Rank 0] step=N' or timer lines")
    spe = micro / (accum or 1.0) if micro else None
    return timeline_from_points(
        points,
        path=path,
        source="deepspeed",
        log_start_s=first_timestamp_s(text),
        log_end_s=last_timestamp_s(text),
        steps_per_epoch=spe,
        total_steps=round(epochs * spe) if spe and epochs else None,
    )


def _detect(head: str) -> bool:
    return has_lines(_STEP, head, 2) or has_lines(_TIMER, head, 2)


FORMAT = LogFormat(
    name="deepspeed",
    title="DeepSpeed engine ([Rank 0] step=N, skipped=S, ...; RunningAvgSamplesPerSec timer)",
    detect=_detect,
    read=read_deepspeed,
    example="[2023-04-18 01:46:59,142] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, "
    "skipped=6, lr=[...]",
)
