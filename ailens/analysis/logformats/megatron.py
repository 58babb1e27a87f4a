"""Megatron-LM and Megatron-DeepSpeed console logs: rank 0's training line every
``--log-interval`` iterations, with or without a timestamp before it::

     [2025-04-13 23:41:12] iteration       10/    1000 | consumed samples: 160 | elapsed time per
     iteration (ms): 1147.6 | learning rate: ... | lm loss: ... |

The counter is the iterations done (a line every k iterations counts k steps), the total is
after the slash; BigScience's Megatron-DeepSpeed (BLOOM) prints the elapsed time in seconds,
``elapsed time per iteration (s): 105.22``. A line's own timestamp places it; without one, the
iterations' ends follow from the elapsed time per iteration (Megatron's interval timer,
evaluations included) summed from the first iteration's start. An evaluation (``validation
loss at iteration N``) or a checkpoint saved between two lines is a section of the interval it
fell in.

The arguments Megatron prints first say where its evaluations and checkpoints come:
``eval_interval`` (every N iterations, ``eval_iters`` batches each) and ``save_interval``
(with a ``save`` directory); they are the timeline's schedule. An evaluation announced that
never runs (no validation split) is not priced once its first position has passed.
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
    config_int,
    config_text,
    first_timestamp_s,
    last_timestamp_s,
    lines_like,
    section_mark,
    timeline_from_points,
    timestamp_s,
)

__all__ = ["FORMAT", "read_megatron"]

_ITER = re.compile(r"\biteration\s+(\d+)\s*/\s*(\d+|infinity)\s*\|")
_ELAPSED = re.compile(r"elapsed time per iteration \((ms|s)\):\s*([0-9.]+)")
_LINE = re.compile(
    r"\biteration\s+\d+\s*/\s*(?:\d+|infinity)\s*\|.*elapsed time per iteration \((?:ms|s)\)"
)
_SECONDS = {"ms": 1e-3, "s": 1.0}


def read_megatron(path: Path, text: str) -> Timeline:
    points = []
    stamped = False
    mark = None  # an evaluation or checkpoint since the last iteration line
    for line in text.splitlines():
        m = _ITER.search(line)
        e = _ELAPSED.search(line) if m else None
        if e is None:
            if points and mark is None:
                mark = section_mark(line)
            continue
        ts = TIMESTAMP.search(line, 0, m.start())
        stamped = stamped or ts is not None
        total = None if m.group(2) == "infinity" else int(m.group(2))
        points.append(
            Point(
                step=int(m.group(1)),
                t_s=None if ts is None else timestamp_s(ts),
                step_s=float(e.group(2)) * _SECONDS[e.group(1)],
                total=total,
                section=mark,
            )
        )
        mark = None
    if not points:
        raise LogError(
            f"{path}: no Megatron 'iteration N/ M | ... elapsed time per iteration' lines"
        )
    return timeline_from_points(
        points,
        path=path,
        source="megatron",
        unit="iteration",
        clock="absolute" if stamped else "from_start",
        log_start_s=first_timestamp_s(text) if stamped else None,
        log_end_s=last_timestamp_s(text) if stamped else None,
        schedule=_schedule(text),
    )


def _schedule(text: str) -> dict:
    """The evaluation and checkpoint periods Megatron's printed arguments state."""
    out = {}
    every, batches = config_int(text, "eval_interval"), config_int(text, "eval_iters")
    if every and every > 0 and batches and batches > 0:
        out.update(eval_every_steps=every, eval_steps=batches)
    save = config_text(text, "save")
    ckpt = config_int(text, "save_interval")
    if save not in (None, "None") and ckpt and ckpt > 0:
        out["checkpoint_every_steps"] = ckpt
    return out


FORMAT = LogFormat(
    name="megatron",
    title="Megatron-LM / Megatron-DeepSpeed (iteration N/ M | ... elapsed time per iteration "
    "(ms) or (s))",
    detect=lines_like(_LINE),
    read=read_megatron,
    example=" [2025-04-13 23:41:12] iteration   10/ 1000 | consumed samples: 160 | elapsed time "
    "per iteration (ms): 1147.6 | ...",
)
