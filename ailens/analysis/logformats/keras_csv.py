"""Keras's ``CSVLogger`` file: a row per epoch, ``epoch`` (from 0) then the ``logs`` of the
epoch (``loss``, ``val_loss``, metrics, ``learning_rate``). Keras puts no time in it, so it
gives times only where a callback added one to the logs (a column named like ``time``,
``epoch_time``, ``elapsed``: a clock, or a duration per epoch, summed). The timeline's step is
the epoch. A CSVLogger file without such a column is refused with that said (fit()'s console
has the times)."""

from __future__ import annotations

from pathlib import Path

from ...model.timeline import Timeline
from ._base import LogError, LogFormat, Point, timeline_from_points
from ._table import elapsed, header, rows, time_column

__all__ = ["FORMAT", "read_keras_csv"]


def read_keras_csv(path: Path, text: str) -> Timeline:
    names, table = rows(path, text)
    col = time_column(names)
    if col is None:
        raise LogError(
            f"{path}: this Keras CSVLogger file cannot give times: it has no time column "
            f"(columns: {', '.join(names)}); Keras writes none, so give fit()'s console output "
            "(Epoch k/K ... 12s 25ms/step), or add the epoch's time to the logs in a callback"
        )
    timed = [r for r in table if col in r and "epoch" in r]
    if not timed:
        raise LogError(f"{path}: the {col!r} column has no values on rows with an epoch")
    values, clock = elapsed([r[col] for r in timed])
    points = [Point(step=r["epoch"], t_s=t) for r, t in zip(timed, values, strict=True)]
    if timed[0]["epoch"] == 0 and not clock:
        points.insert(0, Point(step=-1, t_s=0.0))  # durations from the first epoch: 0 at 0 s
    return timeline_from_points(
        points,
        path=path,
        source="keras-csv",
        unit="epoch",
        zero_based=True,
        clock="from_start",
        steps_per_epoch=1.0,
        info={"time column": col, "time column is": "a clock" if clock else "durations"},
    )


_KERAS_LOGS = ("loss", "val_loss", "accuracy", "acc", "val_accuracy", "mae", "mse")


def _detect(head: str) -> bool:
    """A header that begins with epoch, names Keras's logs, and has no step column (Lightning
    writes one) or Ultralytics' train/ columns."""
    names = header(head)
    return (
        bool(names)
        and names[0] == "epoch"
        and "step" not in names
        and any(n in _KERAS_LOGS for n in names)
        and not any("/" in n for n in names)
    )


FORMAT = LogFormat(
    name="keras-csv",
    title="Keras CSVLogger file (epoch,loss,...; times only where a callback logged one)",
    detect=_detect,
    read=read_keras_csv,
    example="epoch,accuracy,loss,val_accuracy,val_loss\n0,0.316,1.843,0.539,1.328",
)
