"""The forecast of any run from what it left, at every step with the baselines beside: an
ailens run directory through :func:`~ailens.analysis.run_analysis.analyze` (the run's own
settings and recorded exchanges, so its numbers are those of ``ailens report`` and of the
run's ``forecast.json``), any other log through its timeline (``read_timeline`` ->
``forecast_timeline``). ``ailens forecast`` reads runs through :func:`forecast_path`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..model.timeline import (
    StepForecast,
    Timeline,
    TimelineForecast,
    forecast_timeline,
    timeline_forecast,
)
from ..record.reader import Run, load_run
from .logs import read_timeline, run_timeline
from .run_analysis import analyze

__all__ = ["RunLatest", "forecast_path", "forecast_run", "latest_run", "run_timeline"]


def _total(tl: Timeline, total_steps: int | None, epochs: float | None) -> int | None:
    """The total the caller said (``epochs`` converted with the run's steps per epoch)."""
    if total_steps is None and epochs is None:
        return None
    return tl.with_total(total_steps, epochs).total_steps


def forecast_run(
    run: Run | str | os.PathLike,
    *,
    total_steps: int | None = None,
    epochs: float | None = None,
) -> TimelineForecast:
    """A run directory's forecast at every step, fed by ``analyze`` (the run's settings,
    its recorded exchanges and marks): the same signature and forecast as ``ailens report``
    and ``forecast.json``. ``total_steps`` or ``epochs`` say the run's length where the run
    did not."""
    if not isinstance(run, Run):
        run = load_run(run)
    tl = run_timeline(run)
    total = _total(tl, total_steps, epochs)
    rows: list[tuple] = []
    fed = []

    def watch(oa) -> None:
        rows.append((oa.predict(), oa.total_steps))
        if not fed:
            fed.append(oa)

    a = analyze(run, total_steps=total, watch=watch)
    if total:
        tl = tl.with_total(total)
    if not fed:  # no step recorded: nothing was fed
        return TimelineForecast(
            timeline=tl, steps=(), signature_step=None, forecast=None, actual_total_s=None
        )
    return timeline_forecast(tl, fed[0], rows, a.forecast)


@dataclass(frozen=True)
class RunLatest:
    """What a run directory says now (``ailens forecast RUN_DIR --follow``): its timeline,
    the forecast after its last step with the baselines beside, and the signature step."""

    timeline: Timeline
    latest: StepForecast | None
    signature_step: int | None
    start_wall_s: float | None = None  # rank 0's Lens start (Unix time): the run's time 0


def latest_run(
    run: Run | str | os.PathLike,
    *,
    total_steps: int | None = None,
    epochs: float | None = None,
) -> RunLatest:
    """The forecast after a run directory's last step, fed by ``analyze`` like
    :func:`forecast_run` but read once, at the end (a running job, read again and again)."""
    if not isinstance(run, Run):
        run = load_run(run)
    tl = run_timeline(run)
    total = _total(tl, total_steps, epochs)
    fed = []

    def watch(oa) -> None:
        if not fed:
            fed.append(oa)

    analyze(run, total_steps=total, watch=watch)
    if total:
        tl = tl.with_total(total)
    if not fed:
        return RunLatest(timeline=tl, latest=None, signature_step=None)
    oa = fed[0]
    (latest,) = timeline_forecast(tl, oa, [(oa.predict(), oa.total_steps)], None).steps
    start = run.ranks[0].meta.get("start_wall_ns")
    return RunLatest(
        timeline=tl,
        latest=latest,
        signature_step=oa.signature_step,
        start_wall_s=start / 1e9 if start else None,
    )


def forecast_path(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    total_steps: int | None = None,
    epochs: float | None = None,
    include_init: bool = True,
    **read,
) -> TimelineForecast:
    """The forecast of what ``path`` holds: an ailens run directory through
    :func:`forecast_run`, any other log (or the logs of one run, in order) through
    ``read_timeline`` (``read``: its other keywords, e.g. a format) and
    ``forecast_timeline``."""
    if isinstance(path, str | os.PathLike) and Path(path).is_dir():
        return forecast_run(Path(path), total_steps=total_steps, epochs=epochs)
    tl = read_timeline(
        path, total_steps=total_steps, epochs=epochs, include_init=include_init, **read
    )
    return forecast_timeline(tl)
