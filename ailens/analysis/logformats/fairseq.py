"""fairseq's training progress, in any of its ``--log-format``s: json (``train_inner |
{"epoch": 1, ..., "num_updates": "100", ..., "wall": "45"}``), simple (``epoch 001: 100 /
1234 loss=..., num_updates=100, ..., wall=45``) and the legacy ``| epoch 001 | ... |
num_updates 3726 | ... | wall 32`` lines. ``num_updates`` counts the optimizer updates, ``wall``
the seconds since training began (whole seconds: the helper spreads equal readings);
``N / M`` in the simple format gives the updates per epoch. The total is ``max_update`` where
the log says it (the configuration it prints, or ``Stopping training due to num_updates``),
and the run's end ``done training in X seconds``.

A log whose ``wall`` never advances (``wall=0`` on every line: fairseq 0.10 resumed from a
checkpoint) is timed by its lines' timestamps (``2023-06-13 17:31:54 | INFO | train_inner |
...``) instead, the run's end by the ``done training`` line's.

The configuration fairseq prints first (``Namespace(...)`` or the ``{'checkpoint': {...},
'dataset': {...}}`` dict) says where its validations and checkpoints come: at the end of
every ``validate_interval``-th / ``save_interval``-th epoch, and every
``validate_interval_updates`` / ``save_interval_updates`` updates (0: not by updates), unless
``disable_validation`` / ``no_save``; they are the timeline's schedule.
"""

from __future__ import annotations

import re
from dataclasses import replace
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
    lines_like,
    section_mark,
    timeline_from_points,
    timestamp_s,
)

__all__ = ["FORMAT", "read_fairseq"]

_UPDATES = re.compile(r"""\bnum_updates["']?\s*[:=]?\s*["']?(\d+)""")
_WALL = re.compile(r"""\bwall["']?\s*[:=]?\s*["']?([0-9.]+)""")
_PER_EPOCH = re.compile(r"\bepoch \d+:\s+\d+ / (\d+)\b")
_MAX_UPDATE = re.compile(r"""\bmax_update["']?\s*[:=]\s*["']?(\d+)""")
_DONE = re.compile(r"done training in ([0-9.]+) seconds")


def read_fairseq(path: Path, text: str) -> Timeline:
    points = []
    stamps = []  # each progress line's timestamp, where it has one
    spe = None
    mark = None  # a validation or checkpoint since the last progress line
    for line in text.splitlines():
        u = _UPDATES.search(line)
        w = _WALL.search(line) if u else None
        if w is None:
            if points and mark is None:
                mark = section_mark(line)
            continue
        e = _PER_EPOCH.search(line)
        if e:
            spe = int(e.group(1))
        points.append(Point(step=int(u.group(1)), t_s=float(w.group(1)), section=mark))
        ts = TIMESTAMP.search(line)
        stamps.append(timestamp_s(ts) if ts else None)
        mark = None
    if not points:
        raise LogError(f"{path}: no fairseq progress lines (num_updates with wall)")
    totals = [int(m.group(1)) for m in _MAX_UPDATE.finditer(text) if int(m.group(1)) > 0]
    done = _DONE.search(text)
    end_s = float(done.group(1)) if done else None
    clock, log_start_s = "from_start", None
    stuck = len(points) > 1 and len({p.t_s for p in points}) == 1
    if stuck and None not in stamps:
        # wall=0 on every line: the timestamps are the clock.
        points = [replace(p, t_s=t) for p, t in zip(points, stamps, strict=True)]
        clock, log_start_s = "absolute", first_timestamp_s(text)
        # the run's end: the timestamp on the "done training" line
        end = TIMESTAMP.search(text, text.rfind("\n", 0, done.start()) + 1) if done else None
        end_s = timestamp_s(end) if end and end.start() < done.start() else None
    return timeline_from_points(
        points,
        path=path,
        source="fairseq",
        unit="update",
        clock=clock,
        log_start_s=log_start_s,
        total_steps=totals[0] if totals else None,
        end_s=end_s,
        steps_per_epoch=spe,
        schedule=_schedule(text, spe),
    )


def _schedule(text: str, spe: int | None) -> dict:
    """The validation and checkpoint periods fairseq's printed configuration states; those in
    epochs where the log gives ``spe``, the updates per epoch (the helper drops them where
    the log starts inside an epoch)."""
    out: dict = {}
    if config_text(text, "disable_validation") not in ("True", "true"):
        if (every := config_int(text, "validate_interval_updates")) and every > 0:
            out["eval_every_steps"] = every
        elif (epochs := config_int(text, "validate_interval")) and epochs > 0:
            out["eval_every_epochs"] = epochs
    if config_text(text, "no_save") not in ("True", "true"):
        if (every := config_int(text, "save_interval_updates")) and every > 0:
            out["checkpoint_every_steps"] = every
        elif spe and (epochs := config_int(text, "save_interval")) and epochs > 0:
            out["checkpoint_every_steps"] = epochs * spe
    return out


_LINE = re.compile(r"""\bnum_updates["']?\s*[:=]?\s*["']?\d+.*\bwall["']?\s*[:=]?\s*["']?\d""")


FORMAT = LogFormat(
    name="fairseq",
    title="fairseq (train_inner json, simple or legacy lines with num_updates and wall)",
    detect=lines_like(_LINE),
    read=read_fairseq,
    example='2021-03-08 12:32:33 | INFO | train_inner | {"epoch": 1, ..., "num_updates": "2", '
    '..., "wall": "161"}',
)
