"""mmengine's logger (MMDetection, MMPretrain, MMSegmentation, MMOCR, ... 2.x/3.x):
``2022/08/22 15:51:56 - mmengine - INFO - Epoch(train) [1][10/1563]  lr: …  eta: …  time:
0.1414  data_time: …`` (or ``08/22 15:51:56`` without the year), ``Iter(train) [50/90000]``
for iteration-based runs, ``Epoch(val) [1][10/313]`` during validation and ``Saving
checkpoint at 1 epochs``. The MMCV 1.x runner before mmengine (MMDetection 2.x, MMSegmentation
0.x, MMClassification 0.x) logs ``2021-10-21 02:48:44,261 - mmcls - INFO - Epoch [1][10/201]
lr: ..., time: 0.533, ...`` (``Iter [50/320000]``), and one ``Epoch(val) [1][51]  accuracy:
...`` (``Iter(val) [4000]``) when a validation has ended: it ran since the last training or
checkpoint line (the console may have the evaluation's progress bar before it on its line).

The timestamps are the clock (whole seconds; lines in the same second are spread by the shared
helper); a line's ``time:`` (seconds per iteration) places the iterations before the first
line. The steps are the iterations: ``(e - 1) x N + i`` for ``Epoch(train) [e][i/N]``, ``i``
for ``Iter(train) [i/M]`` (whose total is M); ``Saving checkpoint at e epochs`` marks the end
of epoch e. A validation block is an "eval" section from the line before its first line to
its last. The total of an epoch-based run is ``max_epochs`` (from the config the log prints
at its start) x N; the iterations after a validation begin when it ends; a run that reached its
total ended at the log's last line. The time before the first progress line (building the model
and the data) is "init".

The MMCV 1.x config the log prints first says where its evaluations and checkpoints come:
``evaluation = dict(interval=N, ...)`` (every N epochs, or iterations under an
``IterBasedRunner``; N is 1 where it is not given, ``EvalHook``'s default) and
``checkpoint_config = dict(interval=N[, by_epoch=False])``; they are the timeline's schedule.
(``tools/train.py --no-validate`` runs none: an evaluation announced that never comes is not
priced once its first position has passed.)"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ...model.timeline import Section, Timeline
from ._base import LogError, LogFormat, Point, config_int, timeline_from_points
from ._clock import StampClock, hold
from ._table import whole_lines

__all__ = ["FORMAT", "read_mmengine"]

# mmengine's "2022/08/22 15:51:56" (or "08/22 15:51:56"), MMCV 1.x's "2021-10-21 02:48:44,261"
_STAMP = (
    r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}|\d{2}/\d{2} \d{2}:\d{2}:\d{2}"
    r"|\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3}"
)
_LINE = re.compile(rf"(?P<ts>{_STAMP}) - [\w.]+ - [A-Z]+ - (?P<msg>.*)$")
# No mode: MMCV 1.x's training line; no "/n": its validation's one line at the end.
_EPOCH = re.compile(
    r"Epoch(?:\((?P<mode>train|val|test)\))?\s*\[(?P<e>\d+)\]\s*\[\s*(?P<i>\d+)(?:/(?P<n>\d+))?\]"
)
_ITER = re.compile(r"Iter(?:\((?P<mode>train|val|test)\))?\s*\[\s*(?P<i>\d+)(?:/(?P<n>\d+))?\]")
_SAVE = re.compile(r"Saving checkpoint at (\d+) (epochs|iterations)")
_MAX_EPOCHS = re.compile(r"max_epochs\s*=\s*(\d+)")
# MMCV 1.x's config: a top-level ``name = dict(...)`` line (its first line: the hook's own
# keywords come first, nested dicts after).
_CFG = re.compile(r"^(evaluation|checkpoint_config|runner) = dict\((.*)$", re.M)
_TIME = re.compile(r"(?<![\w])time:\s*([\d.]+)")


def read_mmengine(path: Path, text: str) -> Timeline:
    text = whole_lines(text)
    points: list[Point] = []
    sections: list[Section] = []
    first_t = None
    prev_t = None  # the previous line's time (where a validation block begins)
    progress_t = None  # the last training or checkpoint line's (where MMCV 1.x's began)
    val_begin = None
    val_end = None
    spe = None
    total = None
    clock = StampClock()
    m_max = _MAX_EPOCHS.search(text)
    max_epochs = int(m_max.group(1)) if m_max else None
    for raw in text.replace("\r", "\n").splitlines():
        m = _LINE.search(raw.strip())
        if not m:
            continue
        t = clock.seconds(m.group("ts"))
        if first_t is None:
            first_t = t
        msg = m.group("msg")
        e = _EPOCH.search(msg)
        it = None if e else _ITER.search(msg)
        mode = ((e or it).group("mode") or "train") if (e or it) else None
        if mode in ("val", "test"):
            if val_begin is None:
                summary = (e or it).group("n") is None  # MMCV 1.x: logged when it ended
                begin = progress_t if summary else prev_t
                val_begin = begin if begin is not None else t
            val_end = t
        else:
            if val_begin is not None and (mode == "train" or _SAVE.search(msg)):
                sections.append(Section("eval", val_begin, max(val_end, val_begin)))
                hold(points, val_end)  # the next iterations begin when validation ends
                val_begin = None
            step_s = float(ts.group(1)) if (ts := _TIME.search(msg)) else None
            if e:
                n = int(e.group("n"))
                spe = n
                step = (int(e.group("e")) - 1) * n + int(e.group("i"))
                points.append(Point(step=step, t_s=t, step_s=step_s))
            elif it:
                total = int(it.group("n"))
                points.append(Point(step=int(it.group("i")), t_s=t, step_s=step_s, total=total))
            elif s := _SAVE.search(msg):
                k = int(s.group(1))
                if s.group(2) == "epochs" and spe:
                    points.append(Point(step=k * spe, t_s=t))
                elif s.group(2) == "iterations":
                    points.append(Point(step=k, t_s=t, total=total))
            if e or it or _SAVE.search(msg):
                progress_t = t
        prev_t = t
    if val_begin is not None:
        sections.append(Section("eval", val_begin, max(val_end, val_begin)))
    if not points:
        raise LogError(
            f"{path}: no mmengine progress lines ('<time> - mmengine - INFO - Epoch(train) "
            "[e][i/N] ...' or 'Iter(train) [i/M]'); give the log the runner wrote"
        )
    # A checkpoint line repeats the step of the epoch's last progress line: keep the later one.
    points = _last_per_step(points)
    if max_epochs and spe and total is None:
        # On the points, so a log resumed at a later epoch counts only the steps it has left.
        points[-1] = replace(points[-1], total=max_epochs * spe)
    return timeline_from_points(
        points,
        path=path,
        source="mmengine",
        clock="absolute",
        log_start_s=first_t,
        log_end_s=prev_t,  # a finished run ended at the log's last line (its last validation)
        sections=sections,
        steps_per_epoch=spe,
        info={"max_epochs": max_epochs} if max_epochs else None,
        schedule=_schedule(text, spe),
    )


def _schedule(text: str, spe: int | None) -> dict:
    """Where the evaluations and checkpoints of an MMCV 1.x config come, in iterations
    (``spe`` per epoch; by epoch where the log gives no iterations per epoch: nothing)."""
    cfg = dict(_CFG.findall(text))
    by_iter = "IterBasedRunner" in cfg.get("runner", "")
    out = {}
    for name, key in (
        ("evaluation", "eval_every_steps"),
        ("checkpoint_config", "checkpoint_every_steps"),
    ):
        if name not in cfg:
            continue
        args = cfg[name]
        every = config_int(args, "interval") or 1
        iters = by_iter if name == "evaluation" else "by_epoch=False" in args
        steps = every if iters else every * spe if spe else None
        if steps:
            out[key] = steps
    return out


def _last_per_step(points: list[Point]) -> list[Point]:
    out: list[Point] = []
    for p in points:
        if out and out[-1].step == p.step:
            out[-1] = p
        else:
            out.append(p)
    return out


_DETECT = re.compile(
    rf"(?:{_STAMP}) - [\w.]+ - [A-Z]+ - (?:Epoch|Iter)(?:\((?:train|val|test)\))?\s*\[\d+\]?"
    r"\s*\[?\s*\d+/\d+\]"
)


def _detect(head: str) -> bool:
    return bool(_DETECT.search(head))


FORMAT = LogFormat(
    name="mmengine",
    title="mmengine / MMDetection logger (Epoch(train) [e][i/N] or Iter(train) [i/M], timestamps; "
    "MMCV 1.x: Epoch [e][i/N], Iter [i/M])",
    detect=_detect,
    read=read_mmengine,
    example="2022/08/22 15:51:56 - mmengine - INFO - Epoch(train) [1][10/1563]  lr: 1.0000e-03  "
    "eta: 0:18:23  time: 0.1414  data_time: 0.0077  memory: 392  loss: 5.3465",
)
