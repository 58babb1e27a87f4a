"""NeMo 2 (``nemo.lightning``'s progress printer, also BioNeMo): a line per logged step::

    Training epoch 0, iteration 99/499 | lr: 0.0009055 | global_batch_size: 8 | global_step: 99
    | reduced_train_loss: 8.816 | train_step_timing in s: 0.08686 | consumed_samples: 800

``iteration N/M`` counts from 0 to M (M + 1 steps), the total; ``train_step_timing in s`` is
the step's time (its lines have no clock), summed. NeMo's own logger lines between two
iterations (``[NeMo I 2025-09-16 20:08:44 ...]``, whole seconds) time what ran there: a
checkpoint save (``saving model``, ``Checkpoint Save``) or a validation (``Validation:
iteration``) lasts from the first to the last such timestamp of the gap (a lower bound: the
clock has whole seconds). ``Trainer.fit` stopped`` ends the run. NeMo 1's Lightning bar
(``Epoch 0: : 47%|... | 7/15 [06:19<07:13, reduced_train_loss=..., train_step_timing in s=...]``)
is read by the ``lightning`` format.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Section, Timeline
from ._base import (
    TIMESTAMP,
    LogError,
    LogFormat,
    Point,
    lines_like,
    section_mark,
    timeline_from_points,
    timestamp_s,
)
from ._table import whole_lines

__all__ = ["FORMAT", "read_nemo"]

_ITER = re.compile(
    r"Training epoch (?P<e>\d+), iteration (?P<i>\d+)/(?P<m>\d+) \|.*?"
    r"train_step_timing in s: (?P<s>[\d.eE+-]+)"
)
_STAMP = re.compile(r"^\[NeMo [IWE] " + TIMESTAMP.pattern)
_VALIDATION = re.compile(r"^Validation: iteration \d+")
_FIT_DONE = re.compile(r"`Trainer\.fit` stopped")


def read_nemo(path: Path, text: str) -> Timeline:
    points: list[Point] = []
    sections: list[Section] = []
    t = 0.0  # the steps' times summed, and the gaps' timed sections
    gap_stamps: list[float] = []
    gap_name = None
    ended = False
    total = None
    for line in whole_lines(text).replace("\r", "\n").splitlines():
        if m := _ITER.search(line):
            if points and len(gap_stamps) >= 2 and gap_name:
                sections.append(Section(gap_name, t, t + gap_stamps[-1] - gap_stamps[0]))
                t = sections[-1].end_s
            gap_stamps, gap_name = [], None
            t += float(m.group("s"))
            total = int(m.group("m")) + 1
            points.append(Point(step=int(m.group("i")), t_s=t, total=total))
            continue
        if _FIT_DONE.search(line):
            ended = True
        if _STAMP.match(line):
            gap_stamps.append(timestamp_s(TIMESTAMP.search(line)))
        if _VALIDATION.match(line):
            gap_name = gap_name or "eval"
        elif "saving model" in line or "Checkpoint Save" in line:
            gap_name = gap_name or "checkpoint"
        elif gap_name is None and (mark := section_mark(line)):
            gap_name = mark
    if ended and points and len(gap_stamps) >= 2 and gap_name:
        sections.append(Section(gap_name, t, t + gap_stamps[-1] - gap_stamps[0]))
        t = sections[-1].end_s
    if not points:
        raise LogError(
            f"{path}: no NeMo iteration lines ('Training epoch E, iteration N/M | ... | "
            "train_step_timing in s: X'); give the log rank 0 printed"
        )
    return timeline_from_points(
        points,
        path=path,
        source="nemo",
        zero_based=True,
        clock="from_start",
        end_s=t if ended else None,
        sections=sections,
    )


FORMAT = LogFormat(
    name="nemo",
    title="NeMo 2 / BioNeMo (Training epoch E, iteration N/M | ... | train_step_timing in s: X)",
    detect=lines_like(_ITER),
    read=read_nemo,
    example="Training epoch 0, iteration 99/499 | lr: 0.0009055 | global_batch_size: 8 | "
    "global_step: 99 | reduced_train_loss: 8.816 | train_step_timing in s: 0.08686",
)
