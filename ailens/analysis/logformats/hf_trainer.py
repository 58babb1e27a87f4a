"""The Hugging Face Trainer's console: its tqdm training bar (``N/M [elapsed<remaining,
rate]``; M is the run's optimizer steps, elapsed counts from the bar's start) with the dicts
it prints (``{'loss': …, 'epoch': …}``, ``{'eval_…', 'eval_runtime': s}``,
``{'train_runtime': s, …}``). Carriage returns count as line ends and a line may carry
several bar states (a file keeps every redraw).

The training bar is the one whose readings span the longest time (evaluation and tokenizer
bars are shorter and have other totals). Each ``eval_runtime`` dict is an "eval" section that
begins at the bar's reading before it; the bar's elapsed time runs on through it, so the steps
after it begin when it ends. Steps per epoch: the bar's step over the ``epoch`` of the latest
``loss`` (or ``train_runtime``) dict, whose step is the bar's redrawn after it (an evaluation's
dict is left out: its step is the one before it). ``train_runtime`` ends the run.
Sentence-transformers, TRL and LLaMA-Factory consoles print the same."""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Section, Timeline
from ._base import LogError, LogFormat, Point, timeline_from_points
from ._clock import DURATION, duration_s, hold

__all__ = ["FORMAT", "read_hf_trainer"]

# tqdm's bar state: "268/536 [01:10<01:00,  4.45it/s" (the "]" may be cut by another write).
_BAR = re.compile(rf"(\d+)/(\d+) \[({DURATION})<(?:{DURATION}|\?),\s*([\d.]+|\?)\s*(it/s|s/it)")
_DICT = re.compile(r"\{'(?:loss|eval_[\w/]+|train_runtime|train_loss)': [^{}]*\}")
_FIELD = r"'{}': '?([-+\d.eE]+)'?"
_EVAL_RUNTIME = re.compile(_FIELD.format(r"eval_(?:[\w/]*_)?runtime"))
_TRAIN_RUNTIME = re.compile(_FIELD.format("train_runtime"))
_EPOCH = re.compile(_FIELD.format("epoch"))


def read_hf_trainer(path: Path, text: str) -> Timeline:
    events = []  # (position, kind, value)
    for m in _BAR.finditer(text):
        t = duration_s(m.group(3))
        if t is not None:
            rate = _rate(m.group(4), m.group(5))
            events.append((m.start(), "bar", (int(m.group(1)), int(m.group(2)), t, rate)))
    for m in _DICT.finditer(text):
        d = m.group(0)
        if "'step': " in d:
            continue  # an entry of the log_history a script printed, not the Trainer's line
        if r := _TRAIN_RUNTIME.search(d):
            events.append((m.start(), "end", float(r.group(1))))
        elif r := _EVAL_RUNTIME.search(d):
            events.append((m.start(), "eval", float(r.group(1))))
            continue  # its epoch is the step's before it, which a trimmed log may not show
        if e := _EPOCH.search(d):
            events.append((m.start(), "epoch", float(e.group(1))))
    events.sort(key=lambda e: e[0])
    bars = [v for _, k, v in events if k == "bar"]
    if not bars:
        raise LogError(
            f"{path}: the Hugging Face Trainer's dicts are here but not its progress bar "
            "(N/M [elapsed<remaining, rate]); tqdm writes to stderr, so capture both "
            "(python train.py > log 2>&1), or give LLaMA-Factory's trainer_log.jsonl"
        )
    total = _training_total(bars)
    first = next(b for b in bars if b[1] == total)

    points: list[Point] = []
    sections: list[Section] = []
    end_s = None
    last = None  # the latest training-bar reading (step, t)
    pending_epoch = None  # a dict's epoch, paired with the bar redrawn after it
    spe = None
    if _fresh_start(first):
        points.append(Point(step=0, t_s=0.0, total=total))
    for _, kind, v in events:
        if kind == "bar":
            n, m, t, _ = v
            if m != total:
                continue  # an evaluation's or the tokenizer's bar
            if pending_epoch and n > 0:
                spe = n / pending_epoch  # the bar redrawn after the dict shows its step
                pending_epoch = None
            held = bool(points) and points[-1].step % 1 > 0
            if held and n <= points[-1].step:
                continue  # the redraw of the step held through an evaluation
            if held and t < points[-1].t_s:
                # the bar's whole seconds can read less than the evaluation's end
                points[-1] = Point(step=points[-1].step, t_s=t)
            points.append(Point(step=n, t_s=t, total=m))
            last = (n, t)
        elif kind == "epoch":
            pending_epoch = v if v > 0 else None
        elif kind == "eval" and last is not None:
            sections.append(Section("eval", last[1], last[1] + v))
            hold(points, last[1] + v)
        elif kind == "end":
            end_s = max(v, last[1] if last else 0.0)
    if pending_epoch and last and last[0] > 0:
        spe = last[0] / pending_epoch
    return timeline_from_points(
        points,
        path=path,
        source="hf-trainer",
        clock="from_start",
        end_s=end_s,
        sections=sections,
        steps_per_epoch=spe,
    )


def _rate(value: str, unit: str) -> float | None:
    """Steps per second of tqdm's rate field ("4.45it/s", "1.06s/it", "?")."""
    try:
        x = float(value)
    except ValueError:
        return None
    if unit == "s/it":
        return 1.0 / x if x > 0 else None
    return x


def _fresh_start(bar: tuple[int, int, float, float | None]) -> bool:
    """The bar's first reading is of a run that began at step 0 (tqdm's elapsed counts from
    step 0), not of a resumed run whose bar jumped to the resumed step: its average pace
    since the start is within 3x of the rate tqdm prints. A log that keeps the bar's
    initial "0/M [00:00<?" reading has the start anyway."""
    n, _, t, rate = bar
    if n == 0:
        return False
    return t > 0 and rate is not None and rate > 0 and n / t <= 3.0 * rate


def _training_total(bars: list[tuple[int, int, float, float | None]]) -> int:
    """The total of the bar whose readings reach the longest elapsed time."""
    longest: dict[int, float] = {}
    for _, m, t, _ in bars:
        longest[m] = max(longest.get(m, 0.0), t)
    return max(longest, key=lambda m: (longest[m], m))


# The Trainer's printed dicts (its "***** Running training *****" banner is also DeepSpeed-Chat's).
_MARK = re.compile(r"\{'(?:loss|train_runtime|eval_loss)': ")


def _detect(head: str) -> bool:
    return bool(_MARK.search(head))


FORMAT = LogFormat(
    name="hf-trainer",
    title="Hugging Face Trainer console (tqdm bar N/M [elapsed<remaining] and {'loss': ...} dicts)",
    detect=_detect,
    read=read_hf_trainer,
    example=" 50%|█████     | 268/536 [01:10<01:00,  4.45it/s]{'loss': 0.08, 'epoch': 1.0}",
)
