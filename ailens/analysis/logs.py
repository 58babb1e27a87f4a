"""Timelines from what runs leave behind: an ailens run directory, or a training log in one
of the formats of ``ailens.analysis.logformats`` (MLPerf, the CSV form, the common training
frameworks' console logs). ``read_timeline`` picks the reader from the path's content, or
takes the format named.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..model.timeline import Section, Timeline
from ..record.reader import Run, load_run
from ..record.schedule import Schedule
from .logformats import LogError, format_names, read_log, read_text
from .logformats.csv_steps import read_csv
from .logformats.mlperf import parse_mlperf, read_mlperf

__all__ = [
    "LogError",
    "format_names",
    "parse_mlperf",
    "read_csv",
    "read_mlperf",
    "read_run_dir",
    "read_timeline",
]


def read_timeline(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    total_steps: int | None = None,
    epochs: float | None = None,
    include_init: bool = True,
    fmt: str | None = None,
) -> Timeline:
    """The timeline of a run: ``path`` is an ailens run directory or a training log (an
    MLPerf log, a CSV of ``step,end_s[,section]``, a Megatron, nanoGPT, tqdm, ... console log:
    ``format_names()``; gzip, bzip2 or xz accepted), in the format its content is or ``fmt``;
    or the logs of one run in order (a job resubmitted after a time limit or a failure: one
    log per job), read as one log, so a resumed run is one timeline with its restarts.
    ``total_steps`` or ``epochs`` say how long the run is where the file does not (epochs are
    converted with the steps per epoch read from the log). ``include_init``: count from the
    log's first reading (before initialisation, what a user waits for); False: from the end
    of the initialisation (MLPerf: run_start, what MLPerf scores)."""
    paths = [Path(x) for x in ([path] if isinstance(path, str | os.PathLike) else path)]
    if not paths:
        raise LogError("no log given: give a run directory, a training log or the logs of one run")
    p = paths[0]
    if len(paths) > 1 and any(x.is_dir() for x in paths):
        raise LogError(
            f"{', '.join(map(str, paths))}: several logs are the logs of one run in order; a "
            "run directory is read alone"
        )
    if p.is_dir():
        tl = read_run_dir(p)
    else:
        text = "\n".join(read_text(x) for x in paths)
        if fmt == "mlperf" or (fmt is None and not include_init and _is_mlperf(text)):
            tl = read_mlperf(p, text=text, include_init=include_init)
        else:
            tl = read_log(p, text, fmt)
            if not include_init:
                tl = _from_init_end(tl)
    try:
        return tl.with_total(total_steps, epochs)
    except ValueError as e:
        raise LogError(f"{p}: {e}") from None


def _is_mlperf(text: str) -> bool:
    from .logformats import detect_format

    f = detect_format(text)
    return f is not None and f.name == "mlperf"


def _from_init_end(tl: Timeline) -> Timeline:
    """The timeline counted from the end of its ``init`` section (the one from its start)."""
    init = next((s for s in tl.sections if s.name == "init" and s.begin_s <= 0), None)
    if init is None:
        return tl
    d = init.end_s

    def shift(x: float) -> float:
        return max(x - d, 0.0)

    return replace(
        tl,
        step_end_s=tuple(shift(x) for x in tl.step_end_s),
        sections=tuple(
            Section(s.name, shift(s.begin_s), shift(s.end_s)) for s in tl.sections if s is not init
        ),
        end_s=None if tl.end_s is None else shift(tl.end_s),
    )


# --------------------------------------------------------------------------- ailens run dir


def read_run_dir(path: str | Path) -> Timeline:
    """Rank 0's step ends, sections and schedule from an ailens run directory (seconds from
    its Lens's start); the run's end when every rank closed. Its forecast is
    ``analysis.run_forecast.forecast_run`` (through ``analyze``, as the run recorded it)."""
    return run_timeline(load_run(path))


def run_timeline(run: Run) -> Timeline:
    """Rank 0's step ends, sections and schedule as a timeline (seconds from its Lens's
    start); the run's end when every rank closed (then, for a run that ended normally, its
    steps are its total when the schedule did not say)."""
    first = run.ranks[0]
    step_s = first.steps["t_ns"].astype(np.int64) / 1e9
    sections, schedule = [], Schedule()
    for m in first.marks:
        if m.get("kind") == "section":
            sections.append(Section(str(m["name"]), m["t_begin_ns"] / 1e9, m["t_end_ns"] / 1e9))
        elif m.get("kind") == "schedule":
            schedule = schedule.merged(m)
    sched = schedule.to_dict()
    end = first.info.get("end_ns") if run.complete else None
    if end is not None and not first.info.get("crashed") and not sched.get("total_steps"):
        sched["total_steps"] = len(step_s)  # a run that ended normally ran all its steps
    spe = sched.get("steps_per_epoch")
    return Timeline(
        step_end_s=tuple(step_s.tolist()),
        sections=tuple(sections),
        schedule=sched,
        end_s=None if end is None else end / 1e9,
        name=str(run.path),
        source="ailens",
        unit="step",
        steps_per_epoch=float(spe) if spe else None,
        info={"file": str(run.path), "ranks": run.world_size},
    )
