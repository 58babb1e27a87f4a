"""TensorFlow's own training logs: the lines a ``LoggingTensorHook`` prints through
``tf.logging`` / ``absl`` (the Estimator's, ``MonitoredTrainingSession``'s; ``INFO:tensorflow:``
or an absl ``I1212 21:59:05.964472 2814 basic_session_run_hooks.py:260]`` prefix)::

    INFO:tensorflow:loss = 68.5095, step = 101 (1.702 sec)
    INFO:tensorflow:global_step/sec: 61.4317
    INFO:tensorflow:Saving checkpoints for 1000 into /tmp/model/model.ckpt.
    INFO:tensorflow:Loss for final step: 0.0012097486.

A hook line says the global step (``step = N``, ``global_step = N``) and the seconds since the
hook's previous line. The hook reads the step in the same run as the step's increment: at
multiples of its period it says the step before each logged step ran (its first line says 0,
one behind the steps done), now and then the one after. A line printed twice (tf.logging and
absl both) counts once. Where the lines carry absl times those are the clock (an evaluation or
a checkpoint between two lines then takes its real time, a checkpoint's line is a step reading
of its own); otherwise the clock is the sum of the intervals, and:

- a hook that starts again (a line with no ``(N sec)``: ``train_and_evaluate``'s next round,
  after an evaluation) has no time for the steps before that line: the time between the two
  sessions (restoring, building the graph) is not in the log;
- an Estimator evaluation between them (``Starting evaluation at <time>`` ... ``Finished
  evaluation at <time>``) is an ``"eval"`` section of the time its two stamps say;
- a checkpoint saved inside an interval (``Saving checkpoints for N into ...``) is a
  ``"checkpoint"`` section: the interval's time beyond its steps at the log's usual pace.

``Loss for final step: X.`` ends the run (a later ``train()`` call continues it; what runs
after the last, an ``evaluate()``, is not the run's); the steps from the last hook line to the
final checkpoint take the last interval's pace. The RunConfig the Estimator prints (``Using
config: {'_save_checkpoints_steps': 1000, ...}``) gives the checkpoint period. The total is not
printed: give ``--total-steps``, or it is the last step of a finished log.
"""

from __future__ import annotations

import calendar
import re
from pathlib import Path

from ...model.timeline import Section, Timeline
from ._base import LogError, LogFormat, Point, config_int, has_lines, timeline_from_points
from ._clock import StampClock

__all__ = ["FORMAT", "read_tensorflow"]

# What a line carries before its message: tf.logging's "INFO:tensorflow:" and/or absl's
# glog-style prefix (severity, MMDD, time, thread, file:line]).
_PREFIX = re.compile(
    r"^(?:[A-Z]+:(?:tensorflow|absl|root):)?"
    r"(?:[IWEF](\d\d)(\d\d) (\d\d:\d\d:\d\d)(\.\d+)?\s+\d+\s+[^\s\]]+\]\s?)?"
)
# LoggingTensorHook: "loss = 0.5, step = 101 (1.702 sec)" (the hook's first line has no time).
_HOOK = re.compile(r"(?:^|[\s,])(?:global_)?step = (\d+)\b(?:.*\((\d+(?:\.\d+)?) sec\)\s*$)?")
# An evaluation's results ("Saving dict for global step 1000: ..., global_step = 1000"): not
# a training line.
_RESULTS = re.compile(r"^Saving dict for global step|^Evaluation \[")
_EVAL_AT = re.compile(
    r"^(Starting|Finished) evaluation at (\d{4})-(\d\d)-(\d\d)[T-](\d\d):(\d\d):(\d\d)"
)
_CHECKPOINT = re.compile(r"^Saving checkpoints? for (\d+) into ")
_FINAL = re.compile(r"^Loss for final step: ")
_DETECT = re.compile(
    r"^(?:INFO:(?:tensorflow|absl):|[IWEF]\d{4} [\d:.]+\s+\d+\s+[^\s\]]+\]\s?)"
    r".*\bstep = \d+\b.*\(\d+(?:\.\d+)? sec\)\s*$",
    re.MULTILINE,
)


def read_tensorflow(path: Path, text: str) -> Timeline:
    clock = StampClock()
    rows = []  # (absl time or None, message, its hook reading or None)
    for line in text.splitlines():
        m = _PREFIX.match(line)
        msg = line[m.end() :]
        rows.append((_absl_time(clock, m), msg, _hook(msg)))
    # Every message through tf.logging and absl both: where hook lines carry absl times, only
    # the lines with a time count.
    use_stamps = any(t is not None and h for t, _, h in rows)
    if use_stamps:
        rows = [row for row in rows if row[0] is not None]
    zero_based, gap = _counting([h[0] for _, _, h in rows if h is not None])

    points: list[Point] = []
    sections: list[Section] = []
    t = 0.0  # the clock without absl times: the sum of the intervals
    prev: int | None = None  # the last step counter read
    pace = None  # seconds per step over the last interval
    pending: str | None = None  # a section that ran inside the interval the next line ends
    eval_begin: float | None = None
    saved = None  # the counter of the last checkpoint saved past the last hook line
    end_s = None
    for stamp, msg, h in rows:
        if h is not None:
            step, seconds = h
            if step == prev:
                continue  # the same line printed twice (tf.logging and absl)
            end_s = None  # a train() call after the last one ended: the run goes on
            k = step - prev if prev is not None and step > prev else None
            n = k or gap  # the steps of the interval it ends (a first line: the usual gap)
            if seconds is not None and n:
                pace = seconds / n
            if use_stamps:  # the pace places a first line's interval, before the log
                points.append(Point(step=step, t_s=stamp, step_s=pace, section=pending))
            else:
                if seconds is not None and n:
                    t += seconds
                # (a hook's first line has no time: it starts the clock)
                points.append(Point(step=step, t_s=t, section=pending))
            prev, pending = step, None
        elif (m := _CHECKPOINT.match(msg)) is not None:
            # The global step when the save began: the hook's counter is one behind it.
            at = int(m.group(1)) - (1 if zero_based else 0)
            if prev is not None and at > prev:
                if use_stamps:  # a step reading of its own
                    points.append(Point(step=at, t_s=stamp))
                    prev = at
                else:
                    saved = at
            pending = pending or "checkpoint"
        elif (m := _EVAL_AT.match(msg)) is not None:
            at = float(calendar.timegm(tuple(int(x) for x in m.groups()[1:]) + (0, 0, 0)))
            if m.group(1) == "Starting":
                eval_begin = at
            elif eval_begin is not None and not use_stamps:
                sections.append(Section("eval", t, t + max(at - eval_begin, 0.0)))
                t += max(at - eval_begin, 0.0)
                eval_begin, pending = None, None  # the next hook starts after it
            else:
                pending = "eval"
        elif _FINAL.match(msg):
            if saved is not None and prev is not None and saved > prev and pace is not None:
                # The steps after the last hook line, to the final checkpoint: at the last
                # interval's pace (the log has no time for them).
                t += (saved - prev) * pace
                points.append(Point(step=saved, t_s=t))
                prev = saved
            end_s = stamp if use_stamps else t
    if not points:
        raise LogError(f"{path}: no TensorFlow hook lines ('loss = X, step = N (S sec)')")
    if end_s is not None:  # what ran after the training (an evaluate() call) is not the run's
        sections = [s for s in sections if s.begin_s < end_s]
    every = config_int(text, "_save_checkpoints_steps")
    stamps = [s for s, _, _ in rows] if use_stamps else []
    # The log's first reading starts it (init before the first interval) when it is not the
    # first hook line itself, whose interval began before the log.
    first = next((s for s, _, h in rows if h), None) if use_stamps else None
    return timeline_from_points(
        points,
        path=path,
        source="tensorflow",
        zero_based=zero_based,
        clock="absolute" if use_stamps else "from_start",
        log_start_s=stamps[0] if stamps and stamps[0] < first else None,
        log_end_s=stamps[-1] if stamps else None,
        end_s=end_s,
        total_steps=prev + (1 if zero_based else 0) if end_s is not None else None,
        sections=sections,
        schedule={"checkpoint_every_steps": every} if every else {},
    )


def _absl_time(clock: StampClock, m: re.Match) -> float | None:
    """Seconds of a line's absl time; None where it has none (or not a date: C++ logging
    before absl's initialisation prints ``I0000 00:00:1796652008.249888``)."""
    if m.group(1) is None:
        return None
    try:
        return clock.seconds(f"{m[1]}/{m[2]} {m[3]}") + float(m[4] or 0.0)
    except ValueError:
        return None


def _counting(counters: list[int]) -> tuple[bool, int | None]:
    """Whether the hook lines' counters count from 0, and their usual gap (None: one line).
    A hook logs at its first step and every N after: lines at multiples of N say the global
    step before each logged step ran (its first line says 0), one behind the steps done;
    a hook at another offset (a resumed run) is taken to say the steps done."""
    gaps = sorted(b - a for a, b in zip(counters, counters[1:], strict=False) if b > a)
    gap = gaps[len(gaps) // 2] if gaps else None
    return gap is not None and counters[0] % gap == 0, gap


def _hook(msg: str) -> tuple[int, float | None] | None:
    """(global step, seconds since the hook's previous line) of a hook line; None for any
    other line (an evaluation's results say a global step too)."""
    if _RESULTS.match(msg):
        return None
    m = _HOOK.search(msg)
    return None if m is None else (int(m.group(1)), None if m[2] is None else float(m[2]))


FORMAT = LogFormat(
    name="tensorflow",
    title=(
        "TensorFlow's LoggingTensorHook (Estimator, MonitoredTrainingSession: loss = X, "
        "step = N (S sec); tf.logging or absl prefixes)"
    ),
    detect=lambda head: has_lines(_DETECT, head, 2),
    read=read_tensorflow,
    example="INFO:tensorflow:loss = 68.5095, step = 101 (1.702 sec)",
)
