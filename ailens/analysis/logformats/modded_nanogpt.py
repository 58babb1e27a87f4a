"""modded-nanogpt's speedrun logs (the ``records/*.txt`` files: the script, then its output)::

    step:11/1385 train_time:126ms step_avg:nanms

``train_time`` is the cumulative training time in ms; the clock stops during validation
(``step:N/T val_loss:...`` lines, whose time the log does not give) and restarts from zero
after the warm-up steps (at step 10 in many records): the timeline continues it from where it
stopped. ``T`` is the total.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Timeline
from ._base import LogError, LogFormat, Point, lines_like, timeline_from_points

__all__ = ["FORMAT", "read_modded_nanogpt"]

_STEP = re.compile(r"^step:(\d+)/(\d+) (?:train_loss:\S+ )?train_time:([0-9.]+)ms", re.MULTILINE)


def read_modded_nanogpt(path: Path, text: str) -> Timeline:
    points = [
        Point(step=int(m.group(1)), t_s=float(m.group(3)) / 1e3, total=int(m.group(2)))
        for m in _STEP.finditer(text)
    ]
    if not points:
        raise LogError(f"{path}: no modded-nanogpt 'step:N/T train_time:Xms' lines")
    return timeline_from_points(points, path=path, source="modded-nanogpt", clock="from_start")


FORMAT = LogFormat(
    name="modded-nanogpt",
    title="modded-nanogpt speedrun (step:N/T train_time:Xms step_avg:Yms)",
    detect=lines_like(_STEP),
    read=read_modded_nanogpt,
    example="step:126/1385 train_time:14311ms step_avg:123.37ms",
)
