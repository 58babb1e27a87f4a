"""Keras's ``fit`` console: ``Epoch k/K`` then the progress bar, whose final line for the
epoch says how long it took: ``N/N [==============================] - 12s 25ms/step - loss:
…`` (Keras 2), ``N/N ━━━━━━━━━━━━━━━━━━━━ 12s 25ms/step - …`` (Keras 3), ``N/N - 12s -
25ms/step - …`` or ``N/N - 12s - loss: … - 12s/epoch - 25ms/step`` (``verbose=2``), and
Keras 1's and Keras 2.0-2.2's ``verbose=2`` line, which has no N: ``224s - loss: …`` or `` -
224s - loss: …`` (a step is then an epoch). Carriage returns and backspaces (the bar redrawn
in a file) count as line ends.

The log has no clock: each epoch lasts the seconds its final line prints (the whole epoch,
validation included), or N x the time per step where that is longer and more precise (the
seconds are rounded to whole seconds; a time per step rounded to 3 ms over 48000 samples, as
old Keras counted, is not); the epochs follow each other. The steps are the batches, N per epoch
(logged once an epoch); the total is K x N. Lines before the epoch's end (``ETA: 7s``, or
Keras 3's ``56/625 ━━━ 11s 20ms/step``, whose seconds are the time left) carry no elapsed time
and are skipped. A final line that follows an epoch's own (``model.evaluate`` or
``predict`` after ``fit``) is an "eval" section after that epoch. The run has ended when its
last epoch is ``K/K``, or at ``Epoch k: early stopping`` (EarlyStopping), which makes its
total the steps done. A log of several ``fit()`` calls is one run: a fit that numbers its
epochs again (from 1: another model; or from ``initial_epoch`` with another K: fine-tuning
after training a head) follows the earlier fits' steps, and the total is the steps before the
last fit plus its epochs x N. The same epoch announced again with the same K is not a new fit
(another rank's copy)."""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Section, Timeline
from ._base import LogError, LogFormat, Point, timeline_from_points
from ._clock import unit_s
from ._table import whole_lines

__all__ = ["FORMAT", "read_keras"]

_EPOCH = re.compile(r"^\s*Epoch (\d+)/(\d+)\s*$")
# "422/422 [====] - 13s", " 625/625 ━━━━ 5s", "5000/5000 - 12s", "128/128 - 5s - loss"
_FINAL = re.compile(
    r"^\s*(?P<i>\d+)/(?P<n>\d+)\s*(?:\[[=>.]*\]|━+)?\s*-?\s*"
    r"(?P<s>\d+(?:\.\d+)?)(?P<su>us|ms|s)\b(?!/)"
)
# Keras 1's and Keras 2.0-2.2's verbose=2 epoch line: "224s - loss: …", " - 224s - loss: …"
_EPOCH_END = re.compile(r"^\s*(?:- )?(?P<s>\d+)s - \w+: ")
_PER_STEP = re.compile(r"(\d+(?:\.\d+)?)(us|ms|s)/step")
_EARLY_STOP = re.compile(r"^\s*Epoch \d+: early stopping")


def read_keras(path: Path, text: str) -> Timeline:
    text = whole_lines(text)
    points: list[Point] = []
    sections: list[Section] = []
    t = 0.0
    epoch = None  # the "Epoch k/K" being read, until its final line
    epochs_total = None
    spe = None
    last_epoch = None
    stopped = False
    before = 0  # the steps of the earlier fit() calls
    first = 1  # the number of the current fit's first epoch (the first fit: counted from 1)
    unit = "step"
    for line in re.split(r"[\r\n\x08]+", text):
        if _EARLY_STOP.match(line):
            stopped = True
            continue
        if m := _EPOCH.match(line):
            k, epochs = int(m.group(1)), int(m.group(2))
            if last_epoch is not None and k <= last_epoch and (k == 1 or epochs != epochs_total):
                # the epochs numbered again: another fit() call, after the steps so far
                before, first, last_epoch, stopped = int(points[-1].step), k, None, False
            epoch, epochs_total = k, epochs
            continue
        m = _FINAL.match(line)
        if m and "ETA" not in line:
            i, n = int(m.group("i")), int(m.group("n"))
            if i < n:
                continue  # the bar before the epoch's end: its seconds are the time left
            dur = unit_s(m.group("s"), m.group("su"))
            if (p := _PER_STEP.search(line)) and n * _half_unit(p.group(1), p.group(2)) < 0.5:
                dur = max(dur, n * unit_s(p.group(1), p.group(2)))
        elif epoch is not None and (m := _EPOCH_END.match(line)):
            n, dur, unit = 1, float(m.group("s")), "epoch"  # no N: the step is the epoch
        else:
            continue
        if epoch is None:
            if points:  # evaluate()/predict() after the last epoch
                sections.append(Section("eval", t, t + dur))
                t += dur
            continue
        t += dur
        spe = n
        if not points and epoch == 1:
            points.append(Point(step=0, t_s=0.0))  # fit() began with this epoch: 0 steps at 0 s
        points.append(Point(step=before + (epoch - first + 1) * n, t_s=t))
        last_epoch, epoch = epoch, None
    if not points:
        raise LogError(
            f"{path}: no finished Keras epochs ('Epoch k/K' then 'N/N [====] - 12s "
            "25ms/step'); the log needs fit()'s console with verbose=1 or 2"
        )
    total = before + (epochs_total - first + 1) * spe if epochs_total and spe else None
    finished = stopped or (last_epoch is not None and last_epoch == epochs_total)
    if stopped and spe and last_epoch:
        total = before + (last_epoch - first + 1) * spe  # EarlyStopping ended the run there
    return timeline_from_points(
        points,
        path=path,
        source="keras",
        unit=unit,
        clock="from_start",
        end_s=t if finished else None,
        sections=sections,
        steps_per_epoch=spe,
        total_steps=total,
        info={"epochs": epochs_total} if epochs_total else None,
    )


def _half_unit(value: str, unit: str) -> float:
    """Half the last printed digit of a time per step, in seconds: its rounding error."""
    decimals = len(value.partition(".")[2])
    return unit_s("0.5", unit) * 10.0**-decimals


_EPOCH_LINE = re.compile(r"(?m)^\s*Epoch \d+/\d+\s*$")
_BAR_LINE = re.compile(
    r"(?m)^\s*(?:\d+/\d+ (?:\[[=>.]+\]|━+| - \d+(?:us|ms|s)\b)|(?:- )?\d+s - \w+: )"
)


def _detect(head: str) -> bool:
    return bool(_EPOCH_LINE.search(head)) and bool(_BAR_LINE.search(head))


FORMAT = LogFormat(
    name="keras",
    title="Keras fit() console (Epoch k/K, N/N [====] - 12s 25ms/step; Keras 3's ━━━ bar)",
    detect=_detect,
    read=read_keras,
    example="Epoch 1/15\n422/422 [==============================] - 13s 29ms/step - loss: 0.7840",
)
