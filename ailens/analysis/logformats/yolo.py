"""Ultralytics YOLO's ``results.csv`` (``runs/<task>/<name>/results.csv``): one row per epoch,
``epoch`` and, from ultralytics 8.1 on, ``time`` (seconds since training began, validation
included), then the losses, metrics and learning rates. The timeline's step is the epoch; the
total is ``epochs`` from the ``args.yaml`` Ultralytics writes beside it. A results.csv
without a ``time`` column (older ultralytics) cannot give times and is refused with that
said. A resumed run's ``time`` starts again from zero; the shared helper continues the
clock."""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Timeline
from ._base import LogError, LogFormat, Point, timeline_from_points
from ._table import header, rows

__all__ = ["FORMAT", "read_yolo_results"]

_EPOCHS = re.compile(r"(?m)^epochs:\s*(\d+)\s*$")


def read_yolo_results(path: Path, text: str) -> Timeline:
    names, table = rows(path, text)
    if "time" not in names:
        raise LogError(
            f"{path}: this Ultralytics results.csv has no time column (ultralytics before 8.1 "
            "wrote none), so it cannot say when epochs ended; give the console log of the "
            "training, or train with ultralytics >= 8.1"
        )
    points = [Point(step=r["epoch"], t_s=r["time"]) for r in table if "epoch" in r and "time" in r]
    if not points:
        raise LogError(f"{path}: no rows with an epoch and a time")
    zero_based = points[0].step == 0  # ultralytics 8.0 numbered epochs from 0
    epochs = _epochs_from_args(path)
    return timeline_from_points(
        points,
        path=path,
        source="yolo-results",
        unit="epoch",
        zero_based=zero_based,
        clock="from_start",
        steps_per_epoch=1.0,
        total_steps=epochs,
        info={"args.yaml epochs": epochs} if epochs else None,
    )


def _epochs_from_args(path: Path) -> int | None:
    """``epochs:`` of the args.yaml Ultralytics saves beside results.csv, when it is there."""
    try:
        text = (path.parent / "args.yaml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = _EPOCHS.search(text)
    return int(m.group(1)) if m else None


def _detect(head: str) -> bool:
    names = header(head)
    return (
        bool(names)
        and names[0] == "epoch"
        and any(n.startswith(("train/box_loss", "train/loss", "metrics/", "lr/pg")) for n in names)
    )


FORMAT = LogFormat(
    name="yolo-results",
    title="Ultralytics YOLO results.csv (epoch,time,train/box_loss,...; time from ultralytics 8.1)",
    detect=_detect,
    read=read_yolo_results,
    example="epoch,time,train/box_loss,train/cls_loss,...\n1,93.2846,1.01057,8.41319,...",
)
