"""PyTorch Lightning's ``CSVLogger`` ``metrics.csv`` (``lightning_logs/version_N/``): a row
per logging call with ``epoch``, ``step`` (the global step, from 0) and whatever the
LightningModule logged. Lightning logs no time of its own, so the file gives times only where
the module logged one: a column named like ``time``, ``epoch_time``, ``train_time``,
``elapsed`` or ``duration``. A column that never decreases and grows well past its first value
is a clock (seconds since the start); else it is a duration per row (an epoch's time logged at
its end), summed. The
steps are the optimizer steps (``step`` + 1 where the time was logged); the steps per epoch
come from the rows of consecutive epochs. A metrics.csv with no such column is refused with
that said. A file that begins with epoch 0 begins with the run: its clock starts at 0 with 0
steps."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...model.timeline import Timeline
from ._base import LogError, LogFormat, Point, timeline_from_points
from ._table import elapsed, header, rows, time_column

__all__ = ["FORMAT", "read_lightning_csv"]


def read_lightning_csv(path: Path, text: str) -> Timeline:
    names, table = rows(path, text)
    col = time_column(names)
    if col is None:
        raise LogError(
            f"{path}: this Lightning metrics.csv cannot give times: it has no time column "
            f"(columns: {', '.join(names)}); Lightning logs no time of its own, so log one "
            "(self.log('time', ...)) or give the console log of the run"
        )
    timed = [r for r in table if col in r and "step" in r]
    if not timed:
        raise LogError(f"{path}: the {col!r} column has no values on rows with a step")
    values, clock = elapsed([r[col] for r in timed])
    points = [Point(step=r["step"], t_s=t) for r, t in zip(timed, values, strict=True)]
    if timed[0].get("epoch") == 0:
        points.insert(0, Point(step=-1, t_s=0.0))  # the file begins with the run: 0 steps at 0 s
    spe = _steps_per_epoch(table)
    return timeline_from_points(
        points,
        path=path,
        source="lightning-csv",
        zero_based=True,
        clock="from_start",
        steps_per_epoch=spe,
        info={"time column": col, "time column is": "a clock" if clock else "durations"},
    )


def _steps_per_epoch(table: list[dict[str, float]]) -> float | None:
    """The median step advance between the last rows of consecutive epochs."""
    last: dict[float, float] = {}
    for r in table:
        if "epoch" in r and "step" in r:
            last[r["epoch"]] = max(last.get(r["epoch"], r["step"]), r["step"])
    ends = [last[e] for e in sorted(last)]
    gaps = np.diff(ends)
    return float(np.median(gaps)) if len(gaps) else None


def _detect(head: str) -> bool:
    names = header(head)
    return "epoch" in names and "step" in names and "end_s" not in names


FORMAT = LogFormat(
    name="lightning-csv",
    title="PyTorch Lightning CSVLogger metrics.csv (epoch, step; a time the module logged)",
    detect=_detect,
    read=read_lightning_csv,
    example="epoch,epoch_time,step,train_loss_step\n0,,49,8.62\n0,155.45,286,",
)
