"""Detectron2's logger, and the projects built on its trainer (Detic, Mask2Former, OneFormer,
ViTDet, ...): the file log ``OUTPUT_DIR/log.txt``, ``[11/18 14:31:34] d2.utils.events INFO:
eta: 20:50:22  iter: 979  total_loss: ...  time: 0.6832  data_time: ...  lr: ...`` every 20
iterations (``iter`` counts from 0), and the console's ``[11/18 14:31:34 d2.utils.events]:
eta: ...`` (colour codes stripped, as for every log). The timestamps (no year, whole
seconds) are the clock; the steps are the iterations, ``iter + 1`` done.

A checkpoint (``Saving checkpoint to .../model_0000999.pth``) and an evaluation (the
``d2.evaluation`` loggers' lines, ``Start inference on N batches`` ... ``copypaste: ...``) run
inside a hook after an iteration, before the line that reports it: the iterations before them
end where the first of their lines begins, the next iterations begin when the last ends. The
checkpoint's file name says after which iteration it ran; an evaluation runs where
``TEST.EVAL_PERIOD`` puts it (else after the iteration the next line reports).

The config the trainer prints (``Running with full config:``, again at each restart) gives
the total, ``SOLVER.MAX_ITER``, and the schedule: ``TEST.EVAL_PERIOD`` and
``SOLVER.CHECKPOINT_PERIOD`` (0: none). A log without it (a notebook's ``DefaultTrainer``)
has its total where its last line's ``eta`` is ``0:00:00``: the trainer's ETA counts the
iterations left. ``Starting training from iteration N`` after the first is a restart (a
resumed run); the run ended at the log's last line once the iterations reached the total
(the final evaluation runs after ``Total training time``).
"""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Timeline
from ._base import LogError, LogFormat, Point, timeline_from_points
from ._clock import DURATION, StampClock, duration_s, hold

__all__ = ["FORMAT", "read_detectron2"]

# "[11/18 14:31:34] d2.utils.events INFO: msg" (log.txt) or "[11/18 14:31:34 d2.utils.events]:
# msg" (the console, "WARNING " before a warning's).
_LINE = re.compile(
    r"^(?:[A-Z]+ )?\[(?P<ts>\d\d/\d\d \d\d:\d\d:\d\d)(?:\] (?P<name>[\w.]+) [A-Z]+:|"
    r" (?P<cname>[\w.]+)\]:) ?(?P<msg>.*)$"
)
_PROGRESS = re.compile(rf"^\s*(?:eta:\s*(?P<eta>{DURATION})\s+)?iter:\s*(?P<i>\d+)\s")
_CHECKPOINT = re.compile(r"Saving checkpoint to \S*?(?:model_(\d+)\.pth)?\s*$")
_START = re.compile(r"Starting training from iteration (\d+)")
# The loggers of what runs in a hook between iterations: checkpoints (fvcore's, d2's), the
# evaluation and the test set it loads.
_PART_LOGGER = re.compile(r"(?:^|\.)(?:checkpoint|evaluation|data)(?:\.|$)")
_CONFIG = re.compile(r"^\s+(MAX_ITER|EVAL_PERIOD|CHECKPOINT_PERIOD):\s*(\d+)\s*$")


def read_detectron2(path: Path, text: str) -> Timeline:
    clock = StampClock()
    points: list[Point] = []
    cfg: dict[str, int] = {}
    starts = 0
    restart = False
    first_t = last_t = None  # the first and the last timestamped line's time
    extra = None  # a checkpoint or evaluation since the last progress line: [name, begin, after]
    for bare in text.replace("\r", "\n").splitlines():
        if c := _CONFIG.match(bare):
            cfg[c.group(1)] = int(c.group(2))
            continue
        m = _LINE.match(bare.strip())
        if not m:
            continue
        t = clock.seconds(m.group("ts"))
        first_t = t if first_t is None else first_t
        msg, name = m.group("msg"), m.group("name") or m.group("cname")
        if _START.search(msg):
            starts += 1
            restart = starts > 1
            extra = None
            last_t = t
            continue
        p = _PROGRESS.match(msg) if name.endswith("utils.events") else None
        if p is None:
            extra = _extra(extra, name, msg, t)
            last_t = t
            continue
        done = int(p.group("i")) + 1
        total = cfg.get("MAX_ITER")
        if extra is not None:
            what, begin, after = extra
            if after is None:
                every = cfg.get("EVAL_PERIOD") or 0
                after = done - done % every if what == "eval" and every else done
            if points and after > points[-1].step:
                points.append(Point(step=after, t_s=begin, total=total, restart=restart))
                restart = False
            if points and points[-1].step == after:
                hold(points, t if after == done else last_t, section=what)
            extra = None
        if not points or done > points[-1].step or restart:
            eta = duration_s(p.group("eta")) if p.group("eta") else None
            if total is None and eta == 0.0:
                total = done  # the trainer's ETA counts the iterations left: none
            points.append(Point(step=done, t_s=t, total=total, restart=restart))
            restart = False
        last_t = t
    if not points:
        raise LogError(
            f"{path}: no Detectron2 progress lines ('[11/18 14:31:34] d2.utils.events INFO:  "
            "eta: ...  iter: N  ...'); give the trainer's log.txt or its console output"
        )
    return timeline_from_points(
        points,
        path=path,
        source="detectron2",
        unit="iteration",
        clock="absolute",
        log_start_s=first_t,
        log_end_s=last_t,
        schedule=_schedule(cfg),
    )


def _extra(extra, name: str, msg: str, t: float):
    """A checkpoint or evaluation line between two progress lines (the loggers of
    checkpoints, evaluations and the test set's loading): ``[name, begin, after]``, begun at
    the first such line (``after``: the iterations done then, where the checkpoint's file name
    says; an evaluation's name wins over a checkpoint's, the longer part)."""
    if not _PART_LOGGER.search(name):
        return extra
    what, begin, after = extra or ("checkpoint", t, None)
    if c := _CHECKPOINT.search(msg):
        after = after or (int(c.group(1)) + 1 if c.group(1) else None)
    elif ".evaluation" in name or ".data" in name:
        what = "eval"
    return [what, begin, after]


def _schedule(cfg: dict[str, int]) -> dict:
    out = {}
    if cfg.get("EVAL_PERIOD", 0) > 0:
        out["eval_every_steps"] = cfg["EVAL_PERIOD"]
    if cfg.get("CHECKPOINT_PERIOD", 0) > 0:
        out["checkpoint_every_steps"] = cfg["CHECKPOINT_PERIOD"]
    return out


_DETECT = re.compile(
    r"^\[\d\d/\d\d \d\d:\d\d:\d\d(?:\] (?:d2|detectron2)[\w.]* [A-Z]+:| "
    r"(?:d2|detectron2)[\w.]*\]:)",
    re.M,
)


def _detect(head: str) -> bool:
    return len(_DETECT.findall(head, 0, len(head))[:3]) >= 3


FORMAT = LogFormat(
    name="detectron2",
    title="Detectron2 trainer (log.txt: [11/18 14:31:34] d2.utils.events INFO:  eta: ...  "
    "iter: N  ...  time: ...; the console's [11/18 14:31:34 d2.utils.events]:)",
    detect=_detect,
    read=read_detectron2,
    example="[11/18 14:31:34] d2.utils.events INFO:  eta: 20:50:22  iter: 979  total_loss: "
    "0.1776  loss_cls: 0.07874  time: 0.6832  data_time: 0.0075  lr: 0.02  max_mem: 11811M",
)
