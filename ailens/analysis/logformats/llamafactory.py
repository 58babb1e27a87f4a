"""LLaMA-Factory's ``trainer_log.jsonl``: one JSON object per logging step, with
``current_steps``, ``total_steps``, ``elapsed_time`` (``h:mm:ss`` since the training began),
``remaining_time`` and ``epoch``. The steps are optimizer steps; ``total_steps`` is the run's
length; the steps per epoch come from ``current_steps / epoch``. A resumed run appends lines
whose elapsed time starts again from zero (the shared helper continues the clock); lines
without ``elapsed_time`` carry no time and are skipped.

An evaluation writes a record of its own (``eval_loss``, ``eval_…``; older versions write
every key, ``null`` where it has no value) after the training record of the step it followed:
its ``elapsed_time`` is when it ended, so the time from that training record to it is an
"eval" section and the steps after it begin when it ended."""

from __future__ import annotations

import json
from pathlib import Path

from ...model.timeline import Timeline
from ._base import LogError, LogFormat, Point, timeline_from_points
from ._clock import duration_s, hold
from ._table import whole_lines

__all__ = ["FORMAT", "read_llamafactory"]


def read_llamafactory(path: Path, text: str) -> Timeline:
    text = whole_lines(text)
    points: list[Point] = []
    spe = None
    for line in text.splitlines():
        doc = _record(line)
        if doc is None:
            continue
        step = _number(doc.get("current_steps"))
        total = _number(doc.get("total_steps"))
        elapsed = doc.get("elapsed_time")
        t = duration_s(elapsed) if isinstance(elapsed, str) else _number(elapsed)
        if step is None or t is None:
            continue
        epoch = _number(doc.get("epoch"))
        if epoch and epoch > 0 and step > 0:
            spe = step / epoch  # the latest (largest) pair is the most precise
        total = int(total) if total else None
        # the step of the previous record (or held through an evaluation after it) again
        again = bool(points) and points[-1].step is not None and 0 <= points[-1].step - step < 1
        if any(k.startswith("eval_") and v is not None for k, v in doc.items()):
            if again:
                hold(points, t, section="eval")  # after its step's training record
            else:
                points.append(Point(step=step, t_s=t, total=total, section="eval"))
        elif not again:
            points.append(Point(step=step, t_s=t, total=total))
    if not points:
        raise LogError(
            f"{path}: no trainer_log.jsonl records with current_steps and elapsed_time; "
            "give LLaMA-Factory's trainer_log.jsonl as the run wrote it"
        )
    return timeline_from_points(
        points,
        path=path,
        source="llamafactory",
        clock="from_start",
        steps_per_epoch=spe,
    )


def _record(line: str) -> dict | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        doc = json.loads(line)
    except ValueError:
        return None  # a line cut by a crash: the others carry on
    return doc if isinstance(doc, dict) else None


def _number(x) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if v == v and abs(v) != float("inf") else None


def _detect(head: str) -> bool:
    """The first non-empty line is a JSON object with current_steps and total_steps."""
    for line in head.splitlines():
        if line.strip():
            doc = _record(line)
            return doc is not None and "current_steps" in doc and "total_steps" in doc
    return False


FORMAT = LogFormat(
    name="llamafactory",
    title="LLaMA-Factory trainer_log.jsonl (current_steps, total_steps, elapsed_time)",
    detect=_detect,
    read=read_llamafactory,
    example='{"current_steps": 10, "total_steps": 8660, "loss": 2.49, "epoch": 0.0046, '
    '"elapsed_time": "0:00:24", "remaining_time": "5:58:33"}',
)
