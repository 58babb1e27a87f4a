"""Timestamped logger lines that say a step number: Python ``logging`` (``%(asctime)s``),
torchtitan, maskrcnn-benchmark, DLLogger and the like::

    2019-05-23 01:59:50,123 maskrcnn_benchmark.trainer INFO: eta: 0:59:01  iter: 20  loss: ...
    [rank0]:[titan] 2025-01-01 12:00:00,123 - root - INFO - step: 20  loss: 3.2  tps: 40,890

The first ``step``/``iter``/``iteration``/``global_step``/``update`` number on a line whose
timestamp comes first (after a short prefix) is its counter; ``N/M`` gives the total, or, on
lines that also say an ``epoch`` whose counter starts over every epoch, the steps per epoch
(the steps then count on across epochs). Lines about evaluation, validation or tests are not
training steps; an evaluation or a checkpoint between two step lines is a section of the
interval it fell in. Every rank's copy of a line counts once. The generic fallback: specific
formats come before it in the registry.

A log with no step number but an epoch counter with its total (``... - INFO - Epoch [3/30],
Train Loss: 0.17, ...``, ``... - INFO - Epoch 2/10``) is read one step per epoch, the total
its ``/K``: a line that reports values (``loss: 0.17``) ends its epoch (the last such line of
an epoch counts), a bare one begins it (the previous epoch ended there; ``Training
completed``/``finished`` ends the last one).
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
    first_timestamp_s,
    has_lines,
    last_timestamp_s,
    section_mark,
    timeline_from_points,
    timestamp_s,
)

__all__ = ["FORMAT", "counted", "read_pylogging", "step_lines"]

_STEP = re.compile(
    r"\b(?:global[_ ]step|iteration|iter|step|update)s?\b\s*[:=#]?\s*(\d+)(?:\s*/\s*(\d+))?",
    re.IGNORECASE,
)
_EPOCH = re.compile(r"\bepoch\b\s*[:=#\[]?\s*(\d+)", re.IGNORECASE)
_NOT_TRAINING = re.compile(r"\b(?:eval\w*|valid\w*|test\w*|val)\b", re.IGNORECASE)
# The timestamp starts the line, after at most a short prefix ("[rank0]:[titan] ", "DLL ").
_STAMPED = re.compile(r"^.{0,40}?" + TIMESTAMP.pattern, re.MULTILINE)
# "Epoch [3/30]", "Epoch: 3/30", "epoch 3 of 30": an epoch counter with its total.
_EPOCH_OF = re.compile(r"\bepoch\b\s*[:=#\[]?\s*(\d+)\s*(?:/|of)\s*(\d+)", re.IGNORECASE)
# A value reported on the line ("Train Loss: 0.17", "acc=0.9"): the epoch's report, at its end.
_REPORTS = re.compile(r"[A-Za-z]\w*\s*[:=]\s*-?\d")
_COMPLETED = re.compile(r"\btraining (?:is )?(?:completed?|finished|done)\b", re.IGNORECASE)
_DETECT_EPOCHS = re.compile(
    r"^.{0,40}?" + TIMESTAMP.pattern + r".*\bepoch\b\s*[:=#\[]?\s*\d+\s*(?:/|of)\s*\d+",
    re.MULTILINE | re.IGNORECASE,
)
_DETECT = re.compile(
    r"^.{0,40}?" + TIMESTAMP.pattern + r".*\b(?:global[_ ]step|iteration|iter|step|update)\b"
    r"\s*[:=#]?\s*\d",
    re.MULTILINE | re.IGNORECASE,
)


def step_lines(lines: list[str]) -> list[tuple[int, float, int, int | None, int | None]]:
    """The timestamped lines with a training step number: (line index, seconds, counter, the
    M of N/M, epoch)."""
    rows = []
    for i, line in enumerate(lines):
        ts = _STAMPED.match(line)
        if ts is None:
            continue
        rest = line[ts.end() :]
        m = _STEP.search(rest)
        if m is None or _NOT_TRAINING.search(rest, 0, m.start()):
            continue
        if section_mark(rest[: m.start()]) == "checkpoint":
            continue  # "Saving checkpoint at step N": not a step's end
        e = _EPOCH.search(rest)
        rows.append(
            (
                i,
                timestamp_s(TIMESTAMP.search(line, ts.start())),
                int(m.group(1)),
                int(m.group(2)) if m.group(2) else None,
                int(e.group(1)) if e else None,
            )
        )
    return rows


def counted(rows) -> tuple[list[tuple[int, float, int, int | None]], int | None]:
    """``step_lines`` rows as (line index, seconds, steps done, total), a counter that starts
    over with each epoch counting on across them; and the steps per epoch that says."""
    per_epoch = _restarts_with_epochs(rows)
    out = []
    offset = 0
    spe = None
    prev_epoch, prev_max = None, 0
    for i, t, n, m, epoch in rows:
        if per_epoch and epoch is not None and prev_epoch is not None and epoch > prev_epoch:
            offset += m or prev_max
            prev_max = 0
        if per_epoch and m:
            spe = m
        prev_epoch = epoch if epoch is not None else prev_epoch
        prev_max = max(prev_max, n)
        out.append((i, t, offset + n, None if per_epoch else m))
    return out, spe


def read_pylogging(path: Path, text: str) -> Timeline:
    lines = text.splitlines()
    rows = step_lines(lines)
    if not rows:
        return _read_epochs(path, text, lines)
    steps, spe = counted(rows)
    # An evaluation or checkpoint between two step lines is a section of that interval.
    marks = []
    for (i, *_), (j, *_) in zip(steps, steps[1:], strict=False):
        marks.append(next((m for x in lines[i + 1 : j] if (m := section_mark(x))), None))
    return timeline_from_points(
        [
            Point(step=n, t_s=t, total=m, section=mark)
            for (_, t, n, m), mark in zip(steps, [None, *marks], strict=True)
        ],
        path=path,
        source="pylogging",
        log_start_s=first_timestamp_s(text),
        log_end_s=last_timestamp_s(text),
        steps_per_epoch=spe,
    )


def _restarts_with_epochs(rows) -> bool:
    """The counter goes back exactly when the epoch goes up (a per-epoch counter)."""
    backs = [
        (a[2] > b[2], a[4] is not None and b[4] is not None and b[4] > a[4])
        for a, b in zip(rows, rows[1:], strict=False)
    ]
    went_back = [e for back, e in backs if back]
    return bool(went_back) and all(went_back)


def _read_epochs(path: Path, text: str, lines: list[str]) -> Timeline:
    """One step per epoch, from the timestamped lines that say "epoch k/K" (see the module
    doc)."""
    marks = []  # (seconds, epoch, total, reports)
    completed = None
    for line in lines:
        ts = _STAMPED.match(line)
        if ts is None:
            continue
        rest = line[ts.end() :]
        t = timestamp_s(TIMESTAMP.search(line, ts.start()))
        m = _EPOCH_OF.search(rest)
        if m is None or _NOT_TRAINING.search(rest, 0, m.start()):
            if marks and _COMPLETED.search(rest):
                completed = t
            continue
        marks.append((t, int(m.group(1)), int(m.group(2)), bool(_REPORTS.search(rest, m.end()))))
    if not marks:
        raise LogError(f"{path}: no timestamped lines with a step or an epoch number (k/K)")
    first = marks[0][1]  # epochs count from 0 or 1
    reports = any(r for *_, r in marks)
    ends: dict[int, float] = {}  # epochs done -> when
    for t, k, _, r in marks:
        if reports and r:
            ends[k + 1 - first] = t  # the last report of an epoch counts
        elif not reports:
            ends.setdefault(k - first, t)  # epoch k began: the one before it ended
    # From 1: K - (first - 1) epochs from the log's first; from 0 ("0/9" or "0/10"?) unclear.
    total = marks[-1][2] - (first - 1) if first >= 1 else None
    if not reports and completed is not None:
        ends[marks[-1][1] + 1 - first] = completed
    # A log that begins with the first epoch's report has no reading of its start.
    start = first_timestamp_s(text)
    return timeline_from_points(
        [Point(step=n, t_s=t, total=total) for n, t in sorted(ends.items())],
        path=path,
        source="pylogging",
        unit="epoch",
        log_start_s=start if start is not None and start < min(ends.values()) else None,
        log_end_s=last_timestamp_s(text),
        steps_per_epoch=1.0,
    )


def _detect(head: str) -> bool:
    return has_lines(_DETECT, head, 3) or has_lines(_DETECT_EPOCHS, head, 2)


FORMAT = LogFormat(
    name="pylogging",
    title="timestamped logger lines with a step (or epoch k/K) number (Python logging, ...)",
    detect=_detect,
    read=read_pylogging,
    example="2024-01-01 12:00:00,123 - INFO - step 100 loss 2.31",
)
