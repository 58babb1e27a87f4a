"""torchtitan's trainer: a timestamped metrics line every ``log_freq`` steps::

    [rank0]:[titan] 2025-06-04 08:51:48,074 - root - INFO - step:  1  loss: 12.2254  memory:
    27.34GiB(28.78%)  tps: 375  tflops: 21.73  mfu: 2.20%

(any logger prefix before the timestamp: ``[rank0]:``, ezpz's ``[2025-09-11 14:09:46,954][I]``).
``Trainer is initialized with ... total steps N (warmup W)`` (older: ``Training starts at step
1, with local batch size ..., total steps N``) gives the total; a second ``Training starts at
step S`` is a resumed run (a restart); ``Training completed`` ends the run. ``validate step:``
lines are validations (an "eval" section of their interval), checkpoint saves the same.
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
    last_timestamp_s,
    lines_like,
    section_mark,
    timeline_from_points,
    timestamp_s,
)

__all__ = ["FORMAT", "read_torchtitan"]

# "step:  1  loss: 12.2254" (torchtitan's metrics line; "validate step: 10  loss:" is not one)
_STEP = re.compile(r"(?<!validate )\bstep:\s*(\d+)\s+loss:\s*[-+\d.]")
_TOTAL = re.compile(r"\btotal steps (\d+)")
_START = re.compile(r"Training starts at step (\d+)")
_DONE = re.compile(r"\bTraining completed\b")
_VALIDATE = re.compile(r"\bvalidat\w*\s+step:", re.IGNORECASE)


def read_torchtitan(path: Path, text: str) -> Timeline:
    points: list[Point] = []
    total = None
    started = False
    restart = False
    section = None
    end_s = None
    for line in text.replace("\r", "\n").splitlines():
        if m := _TOTAL.search(line):
            total = int(m.group(1))
        if _START.search(line):
            restart = started  # a second start: the run resumed
            started = True
            continue
        ts = TIMESTAMP.search(line)
        if ts and _DONE.search(line):
            end_s = timestamp_s(ts)
            continue
        m = _STEP.search(line)
        if m is None or ts is None or ts.start() > m.start() or _VALIDATE.search(line):
            if _VALIDATE.search(line):
                section = "eval"
            elif mark := section_mark(line):
                section = section or mark
            continue
        points.append(
            Point(
                step=int(m.group(1)),
                t_s=timestamp_s(ts),
                total=total,
                restart=restart,
                section=section,
            )
        )
        restart, section = False, None
    if not points:
        raise LogError(
            f"{path}: no torchtitan metrics lines ('<timestamp> ... step: N  loss: X  memory: "
            "...  tps: ...'); give the log rank 0 printed"
        )
    return timeline_from_points(
        points,
        path=path,
        source="torchtitan",
        log_start_s=first_timestamp_s(text),
        log_end_s=last_timestamp_s(text),
        end_s=end_s,
    )


_DETECT = re.compile(
    TIMESTAMP.pattern + r".{0,80}?\bstep:\s*\d+\s+loss:\s*[-+\d.]+.*\btps:\s*[\d,]+"
)


FORMAT = LogFormat(
    name="torchtitan",
    title="torchtitan trainer ([titan] <timestamp> ... step: N  loss: X  memory: ...  tps: ...)",
    detect=lines_like(_DETECT),
    read=read_torchtitan,
    example="[rank0]:[titan] 2025-06-04 08:51:48,074 - root - INFO - step:  1  loss: 12.2254  "
    "memory: 27.34GiB(28.78%)  tps: 375  tflops: 21.73  mfu: 2.20%",
)
