"""The ``MetricLogger`` of torchvision's references and the repositories built on it (DETR,
DeiT, MAE, DINO, LAVIS, ...): ``Epoch: [e]  [ i/N]  eta: 0:10:00  lr: …  loss: …  time:
0.5123  data: 0.0012  max mem: …`` every ``print_freq`` iterations, ``Epoch: [e] Total
time: 0:25:01 (0.4000 s / it)`` at an epoch's end, the same for evaluations (``Test:``,
``Validate:``, ``Eval: …``), ``Start training for K epochs`` (or the ``Namespace(...,
epochs=K, ...)`` of the arguments the scripts print first) and ``Training time h:mm:ss`` at the
end. Any prefix before the header (a timestamp, ``Train: data``) is allowed.

The log has no clock, so the timeline is rebuilt from what it times: the steps are the
iterations (``N`` per epoch, numbered across epochs from the log's first epoch); inside an
epoch each printed line's ``time:`` (seconds per iteration, averaged over the last
iterations) paces the iterations since the previous line; the epoch ends ``N × (s / it)``
after it began (its ``Total time``); an evaluation's ``Total time`` is an "eval" section right
after the epoch it follows, and the next epoch begins when it ends. ``Training time`` ends the
run, as does the end of the last epoch of ``K``. Time the log does not time (checkpoint saving
between epochs) is not in the steps; it is in the run's end."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from ...model.timeline import Section, Timeline
from ._base import LogError, LogFormat, Point, timeline_from_points
from ._clock import DURATION, duration_s
from ._table import whole_lines

__all__ = ["FORMAT", "read_metriclogger"]

# "<header> [ i/N]  eta: ...": the header is "Epoch: [e]", "Train: data epoch: [e]", "Test:".
_LINE = re.compile(
    r"(?P<head>[^\[\]]*?(?:\[(?P<e>\d+)(?:/(?P<E>\d+))?\])?)\s*\[\s*(?P<i>\d+)/(?P<n>\d+)\]\s+eta:"
)
_TIME = re.compile(r"\btime:\s*([\d.]+)")
_TOTAL = re.compile(
    rf"(?P<head>[^\[\]]*?(?:\[(?P<e>\d+)(?:/\d+)?\])?)\s*Total time:\s*(?P<d>{DURATION})"
    r"(?:\s*\((?P<per>[\d.]+) s / it\))?"
)
_EVAL_HEAD = re.compile(r"\b(test|val|valid|validate|validation|eval|evaluate|evaluation)\b", re.I)
_START = re.compile(r"Start training for (\d+) epochs")
# The arguments the references print first: "Namespace(..., epochs=300, ...)".
_ARGS_EPOCHS = re.compile(r"Namespace\(.*?\bepochs=(\d+)")
_END = re.compile(rf"^\s*(?:\[[^\]]*\]\s*)?Training time:?\s*({DURATION})\s*$")


def read_metriclogger(path: Path, text: str) -> Timeline:
    text = whole_lines(text)
    epochs_total = None
    run_end = None
    t = 0.0  # the rebuilt clock: seconds of timed work since the first epoch began
    epoch_start = 0.0
    cur = None  # the training epoch being read: (e, N)
    last_i = -1
    last_t = 0.0
    eval_n = None  # iterations of the evaluation being read
    first_point = 0  # index in points of the epoch's first line
    e0 = None  # the log's first epoch: the steps count from its start
    done = 0  # training epochs ended (their Total time read)
    points: list[Point] = []
    sections: list[Section] = []
    spe = None
    for raw in text.replace("\r", "\n").splitlines():
        if m := _START.search(raw):
            epochs_total = int(m.group(1))
            continue
        if epochs_total is None and (m := _ARGS_EPOCHS.search(raw)):
            epochs_total = int(m.group(1))
            continue
        if m := _END.search(raw):
            run_end = duration_s(m.group(1))
            continue
        if m := _TOTAL.search(raw):
            d = duration_s(m.group("d"))
            per = float(m.group("per")) if m.group("per") else None
            if _EVAL_HEAD.search(m.group("head")):
                n = eval_n
                dur = per * n if per is not None and n else d
                if dur is not None:
                    sections.append(Section("eval", t, t + dur))
                    t += dur
                eval_n = None
            elif cur is not None:
                e, n = cur
                dur = per * n if per is not None else d
                if dur is not None:
                    t = epoch_start + dur
                    _fit_epoch(points, first_point, epoch_start, t, (e - e0 + 1) * n)
                    points.append(Point(step=(e - e0 + 1) * n, t_s=t))
                    done += 1
                else:
                    t = last_t
                cur = None
            continue
        m = _LINE.search(raw)
        if not m:
            continue
        i, n = int(m.group("i")), int(m.group("n"))
        if _EVAL_HEAD.search(m.group("head")) or m.group("e") is None:
            eval_n = n
            continue
        e = int(m.group("e"))
        e0 = e if e0 is None else e0
        if m.group("E"):
            epochs_total = int(m.group("E"))  # DINO's "Epoch: [e/E]"
        if cur != (e, n):
            if cur is not None:  # an epoch that ended without its Total time line
                t = last_t
            cur, last_i, epoch_start = (e, n), -1, t
            last_t = t
            first_point = len(points)
            spe = n
        s = _TIME.search(raw)
        if not s:
            continue
        step_s = float(s.group(1))
        last_t = last_t + (i - last_i) * step_s
        last_i = i
        points.append(Point(step=(e - e0) * n + i + 1, t_s=last_t))
    if not points:
        raise LogError(
            f"{path}: no MetricLogger progress lines ('Epoch: [e]  [ i/N]  eta: ...  time: ...') "
            "with a time; give the log the training script printed"
        )
    if epochs_total and spe:
        # Epochs count from 0 (torchvision, DeiT, DETR, MAE) or 1: a log from epoch 0 or 1 is
        # the whole run; one from a later epoch resumed there (0-based), K - e0 epochs left.
        left = max(epochs_total - (e0 if e0 > 1 else 0), 1)
        points[-1] = replace(points[-1], total=left * spe)
        if done >= left and run_end is None:
            run_end = t  # every epoch ended: the run ended after what followed the last
    return timeline_from_points(
        points,
        path=path,
        source="metriclogger",
        clock="from_start",
        end_s=run_end if run_end is None else max(run_end, t),
        sections=sections,
        steps_per_epoch=spe,
        info={"epochs": epochs_total} if epochs_total else None,
    )


def _fit_epoch(points: list[Point], first: int, start: float, end: float, end_step: float) -> None:
    """Scale the epoch's paced line times so the epoch lasts what its Total time says (the
    paces are windowed averages; the total is measured), and drop a line at the epoch's last
    iteration (the end point replaces it)."""
    lines = points[first:]
    if lines and lines[-1].step == end_step:
        lines.pop()
    if not lines:
        del points[first:]
        return
    paced_end = lines[-1].t_s + (end_step - lines[-1].step) * (
        (lines[-1].t_s - start) / max(lines[-1].step - (lines[0].step - 1), 1)
    )
    k = (end - start) / (paced_end - start) if paced_end > start else 1.0
    points[first:] = [Point(step=p.step, t_s=start + (p.t_s - start) * k) for p in lines]


_DETECT = re.compile(r"\[\s*\d+/\d+\]\s+eta:\s*(?:\d+\s+days?,\s*)?\d+:\d\d:\d\d\s")
_MMENGINE = re.compile(r"(?:Epoch|Iter)\((?:train|val|test)\)")


def _detect(head: str) -> bool:
    return bool(_DETECT.search(head)) and "time:" in head and not _MMENGINE.search(head)


FORMAT = LogFormat(
    name="metriclogger",
    title="torchvision-references MetricLogger (DETR, DeiT, MAE, DINO: Epoch: [e]  [ i/N]  "
    "eta: ...  time: ...)",
    detect=_detect,
    read=read_metriclogger,
    example="Epoch: [0]  [ 10/1251]  eta: 1:26:30  lr: 0.000010  loss: 2.7759 (2.7459)  "
    "time: 4.1824  data: 0.1293  max mem: 58204",
)
