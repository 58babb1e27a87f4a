"""MLPerf/MLCommons Training logs (``mlperf_logging``): ``:::MLLOG {json}`` lines (v0.7 on),
``:::MLL <time> key: {json}`` (v0.6), ``:::MLPv0.5.0 <benchmark> <time> (file:line) key:
value`` (v0.5) and a v0.6 submitter's own ``MLPerf: <benchmark> [mm/dd/yy HH:MM:SS], key:
value`` (the v0.5 keys, to the second), with any prefix a launcher puts before them; gzip or
plain text. The timeline's step is the finest unit of training progress the log has: per-iteration
``tracked_stats`` events whose ``step`` advances regularly (unit "logged step"), when there are
at least 20 and twice as many as epochs; else ``epoch_stop`` (unit "epoch"), ``block_stop`` (a
block of ``epoch_count`` epochs), the training between evaluations (a log with more
``eval_start``, or only ``eval_accuracy``, than epoch or block starts: unit "eval interval"),
or the gaps between successive ``epoch_start``/``block_start``. Sections: ``eval_start`` ->
``eval_stop`` ("eval"), ``init_start`` -> ``init_stop`` ("init") and ``run_start`` -> the first
``epoch_start``/``block_start`` when it comes later ("start-up": no training time of the first
step). The origin is
``init_start`` (``include_init``, what a user waits for) or ``run_start`` (what MLPerf scores);
the end is ``run_stop``.
"""

from __future__ import annotations

import bisect
import calendar
import json
import math
import re
from pathlib import Path

import numpy as np

from ...model.timeline import Section, Timeline
from ._base import LogError, LogFormat
from ._text import read_text

__all__ = ["FORMAT", "parse_mlperf", "read_mlperf"]

_MLLOG = re.compile(r":::MLLOG\s+(\{.*\})\s*$")
_MLL = re.compile(r":::MLL\s+([0-9.]+)\s+(\w+):\s*(.*?)\s*$")
_MLP05 = re.compile(r":::MLPv0\.5\.0\s+\S+\s+([0-9.]+)\s+\([^)]*\)\s+(\w+)(?::\s*(.*?))?\s*$")
# A v0.6 submitter's own form of the v0.5 keys, to the second (Alibaba's ResNet):
# "MLPerf: resnet [06/13/19 00:30:58], train_epoch:0".
_MLPLAIN = re.compile(
    r"^MLPerf: \w+ \[(\d\d)/(\d\d)/(\d\d) (\d\d):(\d\d):(\d\d)\], (\w+)(?::\s*(.*?))?\s*$",
    re.MULTILINE,
)
# v0.5 keys that mean the v0.6+ ones.
_V05_KEYS = {"train_epoch": "epoch_start", "run_final": "run_stop", "train_loop": "run_start"}
_EPOCH_KEYS = ("epoch_num", "first_epoch_num")
# The same event logged by several ranks lands within this many seconds.
_SAME_EVENT_S = 2.0
# Per-iteration progress is used when it is regular (this share of its gaps equal) and gives
# at least this many steps (and twice the epochs' or blocks').
_REGULAR_SHARE = 0.9
_MIN_FINE_STEPS = 20
# The job's own progress lines are the steps only when the last comes this close (share of
# the run) to the run's end.
_TAIL_SHARE = 0.02


def parse_mlperf(text: str) -> list[tuple[float, str, object, dict]]:
    """The log's events as (time in seconds, key, value, metadata), in time order."""
    out = []
    for line in text.splitlines():
        if ":::ML" not in line and not line.startswith("MLPerf: "):
            continue
        m = _MLLOG.search(line)
        if m:
            try:
                doc = json.loads(m.group(1))
                out.append(
                    (
                        float(doc["time_ms"]) / 1e3,
                        str(doc["key"]),
                        doc.get("value"),
                        doc.get("metadata") or {},
                    )
                )
            except (ValueError, KeyError, TypeError):
                pass  # a line cut by another rank's output: the next ones carry on
            continue
        m = _MLL.search(line)
        if m:
            try:
                doc = json.loads(m.group(3)) if m.group(3) else {}
            except ValueError:
                doc = {}
            doc = doc if isinstance(doc, dict) else {"value": doc}
            out.append((float(m.group(1)), m.group(2), doc.get("value"), doc.get("metadata") or {}))
            continue
        m = _MLP05.search(line)
        if m:
            out.append(_v05_event(float(m.group(1)), m.group(2), m.group(3)))
            continue
        m = _MLPLAIN.match(line)
        if m:
            out.append(_v05_event(_plain_time(m), m.group(7), m.group(8)))
    out.sort(key=lambda e: e[0])
    return out


def _plain_time(m: re.Match) -> float:
    """Seconds of a ``_MLPLAIN`` line's ``[mm/dd/yy HH:MM:SS]``."""
    mo, d, y, h, mi, sec = (int(x) for x in m.groups()[:6])
    return float(calendar.timegm((2000 + y, mo, d, h, mi, sec, 0, 0, 0)))


def _v05_event(t: float, key: str, raw: str | None) -> tuple[float, str, object, dict]:
    """An event of the v0.5 keys (as v0.6+ names them), its value parsed where it is JSON."""
    key = _V05_KEYS.get(key, key)
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        value = raw
    meta = {"epoch_num": value} if key == "epoch_start" and _num(value) else {}
    return t, key, value, meta


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _dedupe(events: list, key: str) -> list:
    """Events of ``key`` in time order, each once: several ranks log the same event (same
    epoch, moments apart); the same epoch number seconds apart is another event (BERT logs
    every evaluation as epoch 1)."""
    last: dict = {}
    out = []
    for e in events:
        if e[1] != key:
            continue
        ident = next((e[3][k] for k in _EPOCH_KEYS if k in e[3]), None)
        if ident is not None and e[0] - last.get(ident, -math.inf) < _SAME_EVENT_S:
            continue
        last[ident] = e[0]
        out.append(e)
    return out


def _regular_progress(events: list) -> tuple[list[float], float] | None:
    """Times of the ``tracked_stats`` events whose numeric ``step`` advances by the same amount
    each time (at least ``_REGULAR_SHARE`` of the gaps), one per step value; None when the log
    has no such cadence."""
    times, steps = [], []
    for t, key, _, meta in events:
        v = meta.get("step")
        if key != "tracked_stats" or not _num(v):
            continue
        if steps and v <= steps[-1]:
            continue  # another rank's copy, or a restart of the counter
        times.append(t)
        steps.append(float(v))
    if len(steps) < 3:
        return None
    gaps = np.diff(steps)
    gap = float(np.median(gaps))
    if gap <= 0 or np.mean(np.isclose(gaps, gap)) < _REGULAR_SHARE:
        return None
    return times, gap


_HUGECTR = re.compile(r"\bIter: (\d+) Time\((\d+) iters\): ([0-9.]+)s")


def _line_time(line: str) -> float | None:
    """The time (s) of an MLPerf log line, None for other lines."""
    m = _MLLOG.search(line)
    if m:
        t = re.search(r'"time_ms":\s*([0-9.]+)', m.group(1))
        return float(t.group(1)) / 1e3 if t else None
    m = _MLL.search(line) or _MLP05.search(line)
    if m:
        return float(m.group(1))
    m = _MLPLAIN.match(line)
    return None if m is None else _plain_time(m)


def _framework_progress(text: str, start: float, end: float) -> tuple[list[float], float] | None:
    """The times (on the MLPerf clock) of the job's own progress lines between the MLPerf
    lines, and their counter's step, when they come at a regular cadence: timestamped logger
    lines with a step number (maskrcnn-benchmark ``iter: N``, DLLogger ``epoch e | iter i/M``)
    or HugeCTR's ``Iter: N Time(K iters): Xs``. Their own clock (a local timestamp, or the
    intervals summed) is moved onto the MLPerf one by the offset every line agrees with: each
    comes after the MLPerf line before it and before the one after it. None when there are
    fewer than 20 such lines, no regular cadence, or no offset fits."""
    lines = text.splitlines()
    ml_at, ml_t = [], []
    for i, line in enumerate(lines):
        if ":::ML" in line:
            t = _line_time(line)
            if t is not None:
                ml_at.append(i)
                ml_t.append(t)
    if len(ml_at) < 2:
        return None
    from .pylogging import counted, step_lines

    plain = [("" if ":::ML" in x else x) for x in lines]
    stamped = [(i, t, n) for i, t, n, _ in counted(step_lines(plain))[0]]
    hugectr, clock = [], 0.0
    for i, line in enumerate(plain):
        m = _HUGECTR.search(line)
        if m:
            clock += float(m.group(3))
            hugectr.append((i, clock, int(m.group(1))))
    rows = max(stamped, hugectr, key=len)
    # One line per counter value (ranks print the same line), in order.
    seen, uniq = set(), []
    for r in rows:
        if r[2] not in seen and (not uniq or r[2] > uniq[-1][2]):
            seen.add(r[2])
            uniq.append(r)
    if len(uniq) < _MIN_FINE_STEPS:
        return None
    gaps = np.diff([r[2] for r in uniq])
    gap = float(np.median(gaps))
    if gap <= 0 or np.mean(np.isclose(gaps, gap)) < _REGULAR_SHARE:
        return None
    lo, hi = -math.inf, math.inf
    for i, own, _ in uniq:
        k = bisect.bisect_right(ml_at, i)
        if k > 0:
            lo = max(lo, ml_t[k - 1] - own)
        if k < len(ml_at):
            hi = min(hi, ml_t[k] - own)
    if not math.isfinite(lo) or lo > hi + _SAME_EVENT_S:
        return None
    times = [own + lo for _, own, _ in uniq]
    times = [t for t in times if start <= t <= end]
    if len(times) < _MIN_FINE_STEPS:
        return None
    # Lines that stop well before the run's end (the job stopped printing them) would make
    # the run's total too few steps.
    if math.isfinite(end):
        tail = end - _SAME_EVENT_S - times[-1]
        if tail > _TAIL_SHARE * (end - start) + 3 * float(np.median(np.diff(times))):
            return None
    return times, gap


def read_mlperf(
    path: str | Path, *, text: str | None = None, include_init: bool = True
) -> Timeline:
    """The timeline of an MLPerf Training log (see the module doc for the rules)."""
    p = Path(path)
    text = read_text(p) if text is None else text
    ev = parse_mlperf(text)
    fix = (
        "it needs :::MLLOG (or :::MLL) lines with run_start and epoch_stop, block_stop or "
        "eval events (mlperf_logging format)"
    )
    if not ev:
        raise LogError(f"{p}: no MLPerf log lines found; {fix}")
    first = {}
    last = {}
    for t, key, _, _ in ev:
        first.setdefault(key, t)
        last[key] = t
    if "run_start" not in first:
        raise LogError(f"{p}: no run_start event; {fix}")
    run_start = first["run_start"]
    init = first.get("init_start")
    origin = init if include_init and init is not None and init <= run_start else run_start
    run_stop = last.get("run_stop")
    if run_stop is not None and run_stop < run_start:
        run_stop = None

    def inside(events):
        # Events logged just after run_stop (a block_stop after it) belong to the run.
        end = math.inf if run_stop is None else run_stop + _SAME_EVENT_S
        return [
            (min(e[0], end - _SAME_EVENT_S), *e[1:]) for e in events if run_start <= e[0] <= end
        ]

    named = {key: inside(_dedupe(ev, key)) for key in _PROGRESS_KEYS}
    progress = _progress(named, run_stop)
    # The job's own per-iteration lines, placed on the MLPerf clock (see _framework_progress).
    end = math.inf if run_stop is None else run_stop + _SAME_EVENT_S
    framework = _framework_progress(text, run_start, end)
    if progress is None and framework is not None:
        progress = ("logged step", framework[0], None)
    if progress is None:
        raise LogError(f"{p}: too few progress events (epochs, blocks or evaluations); {fix}")
    unit, step_t, epochs_per_step = progress

    # Per-iteration progress where the log has it: ``tracked_stats`` at a regular step
    # cadence (Mask R-CNN every 50 iterations, GPT-3 every step), finer than the epochs; else
    # the framework's own iteration lines.
    fine = _regular_progress(inside(ev))
    if fine is not None and len(fine[0]) >= max(2 * len(step_t), _MIN_FINE_STEPS):
        epochs = len(step_t) * epochs_per_step if epochs_per_step else None
        step_t, gap = fine
        unit = f"logged step (+{gap:g} on the log's step counter)"
        epochs_per_step = epochs / len(step_t) if epochs else None
    elif framework is not None and (
        unit == "logged step" or len(framework[0]) >= max(2 * len(step_t), _MIN_FINE_STEPS)
    ):
        epochs = (
            len(step_t) * epochs_per_step if epochs_per_step and unit != "logged step" else None
        )
        step_t, gap = framework
        unit = f"logged step (+{gap:g} iterations, the job's own progress lines)"
        epochs_per_step = epochs / len(step_t) if epochs else None

    pairs = _eval_pairs([e[0] for e in named["eval_start"]], [e[0] for e in named["eval_stop"]])
    sections = [Section("eval", a - origin, b - origin) for a, b in pairs]
    if include_init and init is not None and "init_stop" in first and origin == init:
        sections.append(Section("init", 0.0, max(first["init_stop"] - origin, 0.0)))
    startup = _startup(named, run_start, step_t[0], [a for a, _ in pairs])
    if startup is not None:
        sections.append(Section("start-up", run_start - origin, startup - origin))

    steps = [t - origin for t in step_t]
    schedule: dict = {}
    if run_stop is not None:
        status = next((e[3].get("status") for e in ev if e[1] == "run_stop"), None)
        schedule["total_steps"] = len(steps)
    else:
        status = None
    schedule.update(_eval_schedule(unit, steps, sections))
    info = {"file": str(p), "unit": unit, "run_status": status}
    for _, key, value, _ in ev:
        if key in _META_KEYS and key not in info and value is not None:
            info[key] = value
    return Timeline(
        step_end_s=tuple(steps),
        sections=tuple(sections),
        schedule=schedule,
        end_s=None if run_stop is None else run_stop - origin,
        name=str(p),
        source="mlperf",
        unit=unit,
        steps_per_epoch=None if not epochs_per_step else 1.0 / epochs_per_step,
        info=info,
    )


_PROGRESS_KEYS = (
    "epoch_stop",
    "block_stop",
    "block_start",
    "epoch_start",
    "eval_start",
    "eval_stop",
    "eval_accuracy",
)
_META_KEYS = ("submission_benchmark", "submission_org", "submission_platform", "global_batch_size")


def _progress(named: dict, run_stop) -> tuple[str, list, float | None] | None:
    """What counts as a step: (unit, step end times, epochs per step), or None when the log
    has too few progress events. Epoch ends first, then block ends, evaluations, and block or
    epoch starts (each start ends the previous step)."""
    epoch_stop, block_stop = named["epoch_stop"], named["block_stop"]
    block_start, epoch_start = named["block_start"], named["epoch_start"]
    eval_start, eval_acc = named["eval_start"], named["eval_accuracy"]
    epochs_per_step = None
    if len(epoch_stop) >= 2:
        unit, step_t = "epoch", [e[0] for e in epoch_stop]
        epochs_per_step = 1.0
    elif len(block_stop) >= 2 and len(block_stop) >= len(block_start) - 1:
        unit, step_t = "block", [e[0] for e in block_stop]
        counts = [e[3].get("epoch_count") for e in block_start if _num(e[3].get("epoch_count"))]
        epochs_per_step = float(np.median(counts)) if counts else None
    elif (len(eval_start) >= 2 or len(eval_acc) >= 2) and max(
        len(block_start), len(epoch_start)
    ) < max(len(eval_start), len(eval_acc)):
        unit = "eval interval"
        marks = eval_start if len(eval_start) >= 2 else eval_acc
        step_t = [e[0] for e in marks]
        pos = [e[3].get("epoch_num") for e in marks]
        if all(_num(x) for x in pos):
            gaps = np.diff([0.0, *[float(x) for x in pos]])
            epochs_per_step = float(np.median(gaps)) if len(gaps) and np.median(gaps) > 0 else None
    elif len(block_start) >= 2 or len(epoch_start) >= 2:
        starts = block_start if len(block_start) >= 2 else epoch_start
        unit = "block" if starts is block_start else "epoch"
        step_t = [e[0] for e in starts[1:]]
        if run_stop is not None:
            step_t.append(run_stop)
        if unit == "epoch":
            epochs_per_step = 1.0
        else:
            counts = [e[3].get("epoch_count") for e in starts if _num(e[3].get("epoch_count"))]
            epochs_per_step = float(np.median(counts)) if counts else None
    else:
        return None
    return unit, step_t, epochs_per_step


def _startup(named: dict, run_start: float, first_end: float, evals: list[float]) -> float | None:
    """Where the training begins, when the log says it (its first ``epoch_start`` or
    ``block_start``) after ``run_start`` and before the first step ends: the time before it
    is the run's start-up (data loading, compilation), not training time of the first unit
    (an evaluation that comes first ends it)."""
    starts = [e[0] for key in ("epoch_start", "block_start") for e in named[key]]
    begin = min((t for t in starts if t >= run_start), default=None)
    if begin is None or begin >= first_end:
        return None
    begin = min([begin, *(t for t in evals if t > run_start)])
    return begin if begin > run_start else None


def _eval_pairs(starts: list[float], stops: list[float]) -> list[tuple[float, float]]:
    """Evaluations pair by order when starts and stops match one to one; else each ends at
    the first eval_stop after its start and before the next start (logs disagree on the
    epoch numbers of a pair, and a TPU's evaluations can overlap)."""
    if len(starts) == len(stops) and all(b >= a for a, b in zip(starts, stops, strict=True)):
        return list(zip(starts, stops, strict=True))
    pairs = []
    for i, t0 in enumerate(starts):
        nxt = starts[i + 1] if i + 1 < len(starts) else math.inf
        j = bisect.bisect_left(stops, t0)
        if j < len(stops) and stops[j] <= nxt:
            pairs.append((t0, stops[j]))
    return pairs


def _eval_schedule(unit: str, steps: list[float], sections: list[Section]) -> dict:
    """The evaluation schedule the script had, in steps: its period and first evaluation
    when the evaluations came regularly, else where each came (an epoch that is not a whole
    number of logged steps)."""
    if unit == "eval interval":
        return {"eval_every_steps": 1}
    at = sorted(
        {int(np.searchsorted(steps, s.begin_s, side="right")) for s in sections if s.name == "eval"}
    )
    at = [a for a in at if a > 0]
    gaps = set(np.diff(at).tolist())
    if len(gaps) == 1 and min(gaps) > 0:
        return {"eval_every_steps": int(gaps.pop()), "eval_start_step": at[0]}
    if len(at) >= 2:
        return {"eval_at_steps": at}
    return {}


def _detect(head: str) -> bool:
    return ":::MLL" in head or ":::MLPv0.5.0" in head or _MLPLAIN.search(head) is not None


FORMAT = LogFormat(
    name="mlperf",
    title="MLPerf/MLCommons Training log (:::MLLOG, :::MLL, :::MLPv0.5.0 lines)",
    detect=_detect,
    read=lambda path, text: read_mlperf(path, text=text),
    example=':::MLLOG {"namespace": "", "time_ms": 1700000000000, "key": "epoch_stop", ...}',
)
