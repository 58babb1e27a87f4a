"""What every log format shares: the :class:`LogFormat` record a reader registers, the error
it raises, and :func:`timeline_from_points`, which turns the progress points a reader parses
into a :class:`~ailens.model.timeline.Timeline` (the file's text comes from ``_text``).

A reader only finds its lines: for each progress line a :class:`Point` (the log's step counter,
its clock reading or the seconds per step it prints, the total steps it says). The shared
helper does the rest the same way for every format: steps logged every k steps count as k
steps (their ends spread evenly over the interval), a clock that prints equal readings for
several lines (whole seconds) is spread between readings, a counter that goes back or a new
start banner (a restarted or resumed run) becomes one timeline with the lost time as a
``"restart"`` section, a clock that restarts from zero continues where it stopped, and the
steps before the log's first timed interval are left out (``total_steps`` counts the rest).
"""

from __future__ import annotations

import calendar
import itertools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...model.timeline import Section, Timeline

__all__ = [
    "HEAD_BYTES",
    "LogError",
    "LogFormat",
    "Point",
    "config_int",
    "config_text",
    "has_lines",
    "lines_like",
    "first_line",
    "first_timestamp_s",
    "last_timestamp_s",
    "section_mark",
    "timeline_from_points",
    "timestamp_s",
]

# A section inside an interval counts when it took at least this share of the interval's
# steps' time at the usual pace.
_MIN_SECTION_SHARE = 0.25

# Longer than any training run (30 years): a clock that is not seconds, or corrupt numbers.
_MAX_SPAN_S = 1e9

# How much of the file ``detect`` sees.
HEAD_BYTES = 64 * 1024

# The CSV form every log can be converted to (the fix a refused file is told).
CSV_FORM = "a CSV of step,end_s[,section[,begin_s]] rows (end_s: seconds from the start)"


class LogError(ValueError):
    """A file that is not a timeline this reader understands (the message names the file
    and the fix)."""


@dataclass(frozen=True)
class LogFormat:
    """One log format: ``name`` (the ``--format`` value), ``title`` (what the format is, for
    ``--format list`` and messages), ``detect(head)`` (True when the first ``HEAD_BYTES`` of
    the file's text are this format's), ``read(path, text)`` (the whole text -> Timeline,
    raising LogError naming the file) and ``example`` (one line of the format, for the
    message a file no reader reads gets)."""

    name: str
    title: str
    detect: Callable[[str], bool]
    read: Callable[[Path, str], Timeline]
    example: str


@dataclass(frozen=True)
class Point:
    """One progress line of a log.

    ``step``: the log's step counter on that line (the step just ended; None: one more than
    the previous point's). ``t_s``: the line's clock reading in seconds (a timestamp, or the
    cumulative training time a log prints), None where the line has none. ``step_s``: the
    seconds per step over the interval since the previous point, as the line prints it
    (Megatron's elapsed time per iteration), used where there is no clock reading, and to
    place the first interval. ``total``: the total steps the line says (``iter N/M``).
    ``restart``: a new start (a second start banner) just before this line. ``section``: a
    named part of the run ("eval", "checkpoint") ran inside the interval this line ends,
    before its steps: the interval's time beyond its steps at the log's usual pace is that
    section, not steps.
    """

    step: float | None
    t_s: float | None = None
    step_s: float | None = None
    total: int | None = None
    restart: bool = False
    section: str | None = None


# A wall-clock timestamp as loggers print it: 2024-01-01 12:00:00[,.]123 (or with a T).
TIMESTAMP = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?")


def timestamp_s(match: re.Match) -> float:
    """Seconds (on a clock of the log's own time zone) of a ``TIMESTAMP`` match."""
    y, mo, d, h, mi, s, frac = match.groups()
    t = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s), 0, 0, 0))
    return t + (float("0." + frac) if frac else 0.0)


def first_timestamp_s(text: str) -> float | None:
    """The first wall-clock timestamp in ``text`` (the log's first clock reading)."""
    m = TIMESTAMP.search(text)
    return None if m is None else timestamp_s(m)


def last_timestamp_s(text: str) -> float | None:
    """The last wall-clock timestamp in ``text`` (the log's last clock reading)."""
    for line in reversed(text[-65536:].splitlines()):
        m = TIMESTAMP.search(line)
        if m:
            return timestamp_s(m)
    return None


# Lines that say an evaluation or a checkpoint ran (between two progress lines).
_SECTION_MARKS = (
    ("eval", re.compile(r"\b(?:evaluat\w*|validat\w*|begin validation)\b", re.IGNORECASE)),
    (
        "checkpoint",
        re.compile(
            r"\b(?:sav(?:e|es|ing|ed)\b[^|]{0,20}checkpoint|checkpoint saved)", re.IGNORECASE
        ),
    ),
)


def section_mark(line: str) -> str | None:
    """ "eval" or "checkpoint" when ``line`` says one ran (for ``Point.section``), else None."""
    for name, pattern in _SECTION_MARKS:
        if pattern.search(line):
            return name
    return None


_NAME_CHAR = re.compile(r"[\w.]")


def config_text(text: str, key: str) -> str | None:
    """What the configuration a log prints first says of ``key``: ``key=value`` (a Python
    ``Namespace`` or ``dict(...)``), ``'key': value`` (a printed dict), ``key ..... value``
    (Megatron's arguments) or ``key: value`` (YAML); the first, as printed (quotes off), None
    where the log does not say. ``key`` may not be part of a longer name
    (``validate_interval`` is not ``validate_interval_updates``)."""
    # The key as a literal first (a lookbehind before it made the search test every offset:
    # a key the log does not print cost a scan 60 times slower, 0.3 s on an 11 MB log).
    pattern = re.compile(re.escape(key) + r"""['"]?(?:\s*[:=]\s*|\s+\.{2,}\s+)['"]?([^,'"\s)}]*)""")
    m = pattern.search(text)
    while m is not None and m.start() > 0 and _NAME_CHAR.match(text, m.start() - 1):
        m = pattern.search(text, m.start() + 1)  # part of a longer name: look on
    return None if m is None else m.group(1)


def config_int(text: str, key: str) -> int | None:
    """``config_text`` as a whole number; None where it is not one (``None``, a path)."""
    value = config_text(text, key)
    return int(value) if value is not None and re.fullmatch(r"-?\d+", value) else None


def has_lines(pattern: re.Pattern, text: str, n: int) -> bool:
    """Whether ``pattern`` finds at least ``n`` lines of ``text`` (detection: stops at n)."""
    return next(itertools.islice(pattern.finditer(text), n - 1, None), None) is not None


def lines_like(pattern: re.Pattern, n: int = 2) -> Callable[[str], bool]:
    """A format's ``detect``: the head has at least ``n`` lines that ``pattern`` finds."""
    return lambda head: has_lines(pattern, head, n)


def first_line(text: str, width: int = 80) -> str:
    """The first non-empty line, cut to ``width`` characters (for messages)."""
    for line in text.replace("\r", "\n").splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= width else line[: width - 3] + "..."
    return ""


def timeline_from_points(
    points: Iterable[Point],
    *,
    path: Path,
    source: str,
    unit: str = "step",
    zero_based: bool = False,
    clock: str = "absolute",
    log_start_s: float | None = None,
    log_end_s: float | None = None,
    end_s: float | None = None,
    sections: Sequence[Section] = (),
    steps_per_epoch: float | None = None,
    total_steps: int | None = None,
    schedule: dict | None = None,
    info: dict | None = None,
) -> Timeline:
    """The timeline of a log's progress points (see the module doc).

    ``zero_based``: the counter numbers steps from 0 (the line of the first step says 0), so
    a line's steps done are its counter + 1. ``clock``: ``"absolute"`` (timestamps: the
    timeline's 0 is ``log_start_s``, the log's first clock reading, and the time before the
    first timed step is an ``"init"`` section; without it, the start of the first timed
    interval; ``log_end_s``: its last reading, the run's end when the counter reached the
    total) or ``"from_start"`` (readings count from the start of the first step: a
    cumulative training time, a progress bar's elapsed; 0 is that start). ``end_s``: the
    run's end on the points' clock, when the log says it ended; a log whose counter reached
    its total ended then. ``sections``: on the points' clock (shifted with the steps).
    ``total_steps`` overrides the points' totals (both on the log's counter: the steps before
    the timeline's first are taken off); ``steps_per_epoch`` in the log's steps.
    """
    if clock not in ("absolute", "from_start"):
        raise ValueError(f"clock must be 'absolute' or 'from_start', got {clock!r}")
    pts = list(points)
    fix = f"it needs progress lines with a step number and a time; or convert it to {CSV_FORM}"
    # 1. Counters (steps done) and clock readings on one continuing clock.
    # counter, t, restart, step_s, section
    resolved: list[tuple[float, float, bool, float | None, str | None]] = []
    counter = None
    t_prev = None
    shift = 0.0  # added to readings after the clock restarted from zero
    total = None
    typical = _typical_gap(pts, zero_based)
    for p in pts:
        c = (counter + 1 if counter is not None else 1.0) if p.step is None else float(p.step)
        if p.step is not None and zero_based:
            c += 1.0
        if not math.isfinite(c):
            continue
        if p.total:
            total = int(p.total)
        restart = p.restart or (counter is not None and c < counter)
        if counter is not None and c == counter and not restart:
            continue  # the same line again (another rank's copy)
        k = (c - counter) if counter is not None and not restart else None
        if p.t_s is not None and math.isfinite(p.t_s):
            t = p.t_s + shift
            if t_prev is not None and t < t_prev - 1e-9:
                if clock == "from_start" and p.t_s < 0.5 * (t_prev - shift):
                    shift = t_prev  # the clock restarted from zero (a timer reset after warm-up)
                    t = p.t_s + shift
                else:
                    t = t_prev  # a line printed a moment out of order (another rank's clock)
        elif p.step_s is not None and math.isfinite(p.step_s) and p.step_s >= 0:
            if t_prev is None:
                t = (c if c <= 2 * typical else typical) * p.step_s
            else:
                t = t_prev + (k if k is not None else typical) * p.step_s
        else:
            continue  # a line with no time: nothing to place it by
        resolved.append((c, t, restart, p.step_s, p.section))
        counter, t_prev = c, t
    if not resolved:
        raise LogError(f"{path}: no timed progress lines found; {fix}")

    # 2. Where the first timed interval begins, and the timeline's zero.
    c0, t0, _, s0, _ = resolved[0]
    estimated_first = False
    if clock == "from_start":
        before = c0 if c0 <= 2 * typical else typical
        start_counter, start_t, zero = c0 - before, 0.0, 0.0
    elif s0 is not None:
        before = c0 if c0 <= 2 * typical else typical
        start_counter, start_t = c0 - before, t0 - before * s0
        zero = log_start_s if log_start_s is not None and log_start_s <= start_t else start_t
    elif len(resolved) > 1 and resolved[1][0] > c0 and not resolved[1][2]:
        # The first interval's start is not in the log: its steps at the next interval's
        # pace, after the log's first reading (the time before them is "init").
        c1, t1 = resolved[1][0], resolved[1][1]
        before = c0 if c0 <= 2 * typical else typical
        start_counter = c0 - before
        start_t = t0 - before * (t1 - t0) / (c1 - c0)
        if log_start_s is not None and log_start_s <= t0:
            start_t = max(start_t, log_start_s)
        zero = log_start_s if log_start_s is not None and log_start_s <= start_t else start_t
        estimated_first = True
    else:
        start_counter, start_t = c0, t0  # the first line only starts the clock
        zero = log_start_s if log_start_s is not None and log_start_s <= t0 else t0
    out_sections = [Section(s.name, s.begin_s - zero, s.end_s - zero) for s in sections]
    if start_t - zero > 1e-9:
        out_sections.append(Section("init", 0.0, start_t - zero))

    # 3. Pieces of increasing counter; a restart ends one and the next resumes past the
    #    highest counter reached, the time between being lost.
    pieces: list[list[tuple[float, float]]] = [[(start_counter, start_t)]]
    if (c0, t0) != (start_counter, start_t):
        pieces[0].append((c0, t0))
    reached, t_reached = c0, t0
    pending: list[tuple[float, float, float | None]] = []  # a restarted run below `reached`
    lost = 0.0
    restarts = 0
    flagged: dict[float, str] = {}  # counter of a line -> the section inside its interval
    for c, t, restart, step_s, section in resolved[1:]:
        if restart:
            restarts += 1
            pending = []
        if restart or pending or c <= reached:
            if c <= reached:
                pending.append((c, t, step_s))
                continue
            # Past the highest counter again: when the counter passed it, interpolated
            # from the restarted run's previous line, else back from this line's pace.
            if pending and pending[-1][0] < c and not restart:
                pc, pt, _ = pending[-1]
                t_at = pt + (reached - pc) / (c - pc) * (t - pt)
            else:
                pace = step_s if step_s is not None else _pace(pieces)
                t_at = t - (c - reached) * pace
            t_at = min(max(t_at, t_reached), t)
            out_sections.append(Section("restart", t_reached - zero, t_at - zero))
            lost += t_at - t_reached
            pieces.append([(reached, t_at)])
            pending = []
        pieces[-1].append((c, t))
        if section:
            flagged[c] = section
        reached, t_reached = c, t

    # 4. Step ends: each piece's integer counters, spread evenly over the intervals; lines
    #    that share a clock reading (a coarse clock) count as one, at its last counter. An
    #    interval with a section in it: the time beyond its steps at the usual pace first.
    distinct = [list(zip(*_distinct_times(piece), strict=True)) for piece in pieces]
    intervals = [
        (a, b) for piece in distinct for a, b in zip(piece, piece[1:], strict=False) if b[0] > a[0]
    ]

    def inside(a, b) -> str | None:
        return next((n for c, n in flagged.items() if a[0] < c <= b[0]), None)

    plain = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in intervals if not inside(a, b)]
    pace = float(np.median(plain)) if plain else None
    ends: list[float] = []
    reads: list[int] = []  # the steps done at each clock reading
    for a, b in intervals:
        start = a[1]
        name = inside(a, b) if flagged else None
        if name and pace is not None:
            steps_s = (b[0] - a[0]) * pace
            extra = (b[1] - a[1]) - steps_s
            if extra > _MIN_SECTION_SHARE * steps_s:  # else noise: a line about a section
                # that ran elsewhere (an asynchronous evaluation's results)
                out_sections.append(Section(name, a[1] - zero, a[1] + extra - zero))
                start = a[1] + extra
        lo, hi = int(math.floor(a[0] + 1e-9)), int(math.floor(b[0] + 1e-9))
        n = np.arange(lo + 1, hi + 1, dtype=float)
        ends.extend((start + (n - a[0]) / (b[0] - a[0]) * (b[1] - start) - zero).tolist())
        if hi > lo and abs(b[0] - hi) < 1e-9:
            reads.append(len(ends))
    ends = np.maximum.accumulate(np.maximum(np.asarray(ends, dtype=float), 0.0)).tolist()
    if ends and ends[-1] > _MAX_SPAN_S:
        raise LogError(
            f"{path}: its steps span {ends[-1]:.3g} s, more than {_MAX_SPAN_S:.0e} s (30 years): "
            "not seconds of a training run"
        )
    offset = int(round(start_counter))
    if total_steps is None:
        total_steps = total
    if total_steps:
        total_steps = max(int(total_steps) - offset, 0) or None
    run_end = None if end_s is None else end_s + (shift if clock == "from_start" else 0.0) - zero
    if run_end is None and total_steps and len(ends) >= total_steps:
        # The counter reached the total: the run ended with that step, or at the log's last
        # clock reading after it (final evaluation, saving).
        last = ends[-1]
        if log_end_s is not None and clock == "absolute":
            last = max(last, log_end_s - zero)
        run_end = last
    sched = _on_timeline(dict(schedule or {}), offset)
    if total_steps:
        sched["total_steps"] = int(total_steps)
    spe = steps_per_epoch
    if spe and spe >= 2 and spe == int(spe) and offset % int(spe) == 0:
        # The log says where its epochs end, as a script tells a live Lens: the model waits
        # for an epoch end to pass before its signature (what happens there is not seen).
        # Not where the log starts inside an epoch: its ends would be misplaced.
        sched.setdefault("steps_per_epoch", int(spe))
    if "steps_per_epoch" not in sched:
        sched.pop("eval_every_epochs", None)  # epochs the timeline cannot place
    inf = {"file": str(path), "format": source}
    if offset:
        inf["steps_before_log"] = offset
    if estimated_first:
        inf["first_interval"] = "estimated at the next interval's pace"
    if restarts or lost:
        inf["restarts"] = restarts or sum(1 for s in out_sections if s.name == "restart")
        inf["restart_lost_s"] = lost
    inf.update(info or {})
    return Timeline(
        step_end_s=tuple(ends),
        sections=tuple(s for s in out_sections if s.end_s >= s.begin_s >= 0),
        schedule=sched,
        end_s=None if run_end is None else max(run_end, ends[-1] if ends else 0.0),
        name=str(path),
        source=source,
        unit=unit,
        steps_per_epoch=steps_per_epoch,
        info=inf,
        # Lines every k steps: the ends between two readings are spread, not read.
        reading_steps=tuple(reads) if len(reads) < len(ends) else (),
    )


def _on_timeline(schedule: dict, offset: int) -> dict:
    """A schedule a log's configuration states, on the log's own step counter, moved onto
    the timeline, whose steps begin after the ``offset`` steps before the log (a resumed run):
    periodic evaluations keep their positions (the first after the offset); a checkpoint
    period only where the offset is a whole number of periods (it has no start to move)."""
    every = schedule.get("eval_every_steps")
    if offset and every and "eval_start_step" not in schedule:
        schedule["eval_start_step"] = every - offset % every
    ckpt = schedule.get("checkpoint_every_steps")
    if offset and ckpt and offset % ckpt:
        del schedule["checkpoint_every_steps"]
    return schedule


def _typical_gap(pts: Sequence[Point], zero_based: bool) -> float:
    """The log's usual counter step between lines (its logging interval)."""
    c = [float(p.step) for p in pts if p.step is not None and math.isfinite(float(p.step))]
    d = [b - a for a, b in zip(c, c[1:], strict=False) if b > a]
    return float(np.median(d)) if d else 1.0


def _pace(pieces: list[list[tuple[float, float]]]) -> float:
    """Seconds per step so far (median over the intervals), for placing a restart's end."""
    rates = [
        (t2 - t1) / (c2 - c1)
        for piece in pieces
        for (c1, t1), (c2, t2) in zip(piece, piece[1:], strict=False)
        if c2 > c1
    ]
    return float(np.median(rates)) if rates else 0.0


def _distinct_times(piece: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """The piece's (counter, time) with a run of equal readings kept once, at its last
    counter (the steps of the run spread between the readings); times never go back."""
    xs: list[float] = []
    ts: list[float] = []
    for c, t in piece:
        t = max(t, ts[-1]) if ts else t
        if ts and t == ts[-1] and len(ts) > 1:
            xs[-1] = c
            continue
        xs.append(c)
        ts.append(t)
    return xs, ts
