"""tqdm progress bars in a log (``desc: 45%|████▌     | 45/100 [00:10<00:12, 4.50it/s,
postfix]``, and Ultralytics 8.3's ``100% ━━━━━━━━━━━━ 221/221 4.5it/s 49.5s``), shared by the
readers of consoles that print them (generic tqdm, Lightning, NeMo 1, Ultralytics): every bar
state in the text (a file keeps every redraw; carriage returns and other output may sit
between them), grouped into bar instances, and the timeline of the training bar.

A bar instance is one bar from its creation to its close: states of one description (its
text with the numbers taken out) and total whose count and elapsed time never go back (a
bar shown again at its full count is a new one when its description's first number, the
epoch, changed). The training bar is the description and total whose instances took the
longest in all; each of its instances is an epoch (its count starts again from 0, its elapsed
time counts from the epoch's start), the epochs follow each other, and another bar that ran
between two epochs (a validation) is an "eval" section between them lasting its elapsed time.
A bar that ran while an epoch's bar was open (Lightning's validation inside the epoch) is an
"eval" section at the epoch bar's reading before it; the epoch's own elapsed time already
counts it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ...model.timeline import Section, Timeline
from ._base import LogError, Point, timeline_from_points
from ._clock import DURATION, duration_s, hold

__all__ = ["BAR", "Bar", "bar_states", "bars_timeline", "count_bars"]

# "45/100 [00:10<00:12, 4.50it/s" / "7/15 [06:19<07:13, reduced_train_loss=" (NeMo 1 has no
# rate) / "1/? [00:20<00:00,": the count, the total, the elapsed time.
BAR = re.compile(
    rf"(?<![\d.])(?P<n>\d+)/(?P<m>\d+|\?) \[(?P<el>{DURATION})<(?:{DURATION}|\?)"
    r"(?:,\s*(?P<rate>[\d.]+|\?)\s*(?P<unit>it/s|s/it))?"
)
# Ultralytics 8.3's own bar: "640: 100% ━━━━━━━━━━━━ 221/221 4.5it/s 49.5s" (rate, then
# elapsed: "49.5s", "1:02", "1:02:03"; "<remaining" while it runs).
BAR_RATE_FIRST = re.compile(
    rf"(?<![\d.])(?P<n>\d+)/(?P<m>\d+) (?P<rate>[\d.]+)(?P<unit>it/s|s/it) "
    rf"(?P<el>\d+(?:\.\d+)?s|{DURATION})(?![\w/])"
)
_NOT_DESC = re.compile(r"[\d.%|:/-]+|[\u2500-\u259f#]+|\x1b\[[\d;]*[A-Za-z]")


@dataclass(frozen=True)
class State:
    pos: int
    key: str  # the description without its numbers
    tag: str | None  # the description's first number (an epoch counter: "Epoch 3", " 3/50")
    n: int
    m: int | None
    t: float
    rate: float | None


@dataclass
class Bar:
    """One bar instance: its states in order."""

    key: str
    m: int | None
    states: list[State] = field(default_factory=list)

    @property
    def elapsed(self) -> float:
        return self.states[-1].t


def bar_states(text: str) -> list[State]:
    out = []
    matches = sorted([*BAR.finditer(text), *BAR_RATE_FIRST.finditer(text)], key=lambda m: m.start())
    for m in matches:
        el = m.group("el")
        t = float(el[:-1]) if el.endswith("s") else duration_s(el)
        if t is None:
            continue
        start = max(text.rfind("\n", 0, m.start()), text.rfind("\r", 0, m.start())) + 1
        raw = text[start : m.start()]
        desc = _NOT_DESC.sub(" ", raw)
        tag = re.search(r"\d+", raw.split("%")[0].split("|")[0])
        rate = None
        if m.group("rate") not in (None, "?"):
            x = float(m.group("rate"))
            rate = x if m.group("unit") == "it/s" else (1.0 / x if x > 0 else None)
        total = None if m.group("m") == "?" else int(m.group("m"))
        out.append(
            State(
                m.start(),
                " ".join(desc.split()),
                tag.group(0) if tag else None,
                int(m.group("n")),
                total,
                t,
                rate,
            )
        )
    return out


def count_bars(text: str, enough: int) -> int:
    n = 0
    for pattern in (BAR, BAR_RATE_FIRST):
        for _ in pattern.finditer(text):
            n += 1
            if n >= enough:
                return n
    return n


def instances(states: list[State]) -> list[Bar]:
    """The bar instances, in the order they began."""
    bars: list[Bar] = []
    open_: dict[tuple[str, int | None], Bar] = {}
    since: dict[tuple[str, int | None], dict[tuple[str, int | None], float]] = {}
    for s in states:
        key = (s.key, s.m)
        b = open_.get(key)
        if b is None or s.n < b.states[-1].n or s.t < b.states[-1].t or _again(b, s, since[key]):
            b = Bar(s.key, s.m)
            bars.append(b)
            open_[key] = b
        b.states.append(s)
        since[key] = {}
        for other, seen in since.items():
            if other != key:
                seen[key] = s.t  # the latest elapsed of this bar since that one's last state
    return bars


def _again(b: Bar, s: State, between: dict) -> bool:
    """A completed bar's count shown again: a new instance (a log that keeps each bar's
    final state only) when its description's counter changed (the next epoch's bar), or
    when other bars ran since and its elapsed time did not grow by theirs (a validation's bar
    printed once per epoch at 4/4); else the same bar redrawn (Lightning's epoch bar after
    the validation that ran while it was open)."""
    last = b.states[-1]
    if last.m is None or last.n < last.m:
        return False
    if s.tag != last.tag:
        return True
    return bool(between) and s.t < last.t + sum(between.values()) - 0.5


def bars_timeline(
    path: Path,
    text: str,
    *,
    source: str,
    train_key: re.Pattern | None = None,
    epochs: int | None = None,
    ended: bool = False,
    what: str,
    schedule: dict | None = None,
) -> Timeline:
    """The timeline of the training bar (see the module doc). ``train_key``: the
    description the training bar has (Lightning's ``Epoch k``), else the bar that took
    longest; ``epochs``: the run's epochs where the log says it (the total is epochs x the
    bar's total); ``ended``: the log says the run ended (at the last epoch's end, its
    sections after it included); ``schedule``: what the log's printed arguments state."""
    bars = instances(bar_states(text))
    candidates = [b for b in bars if train_key is None or train_key.search(b.key)]
    if not candidates:
        raise LogError(f"{path}: no {what}; give the log the training printed")
    took: dict[tuple[str, int | None], float] = {}
    for b in candidates:
        took[(b.key, b.m)] = took.get((b.key, b.m), 0.0) + b.elapsed
    train = max(took, key=lambda k: took[k])
    epochs_bars = [b for b in candidates if (b.key, b.m) == train]
    others = [b for b in bars if (b.key, b.m) != train and not _untimed(b)]

    points: list[Point] = []
    sections: list[Section] = []
    cursor = 0.0  # where the next epoch begins
    offset = 0  # steps of the epochs before
    spe = None
    for k, ep in enumerate(epochs_bars):
        first, last = ep.states[0], ep.states[-1]
        if k == 0 and _fresh(first):
            points.append(Point(step=0, t_s=0.0))
        elif k > 0:
            # the bars that ran between the previous epoch and this one: validations
            prev_end = epochs_bars[k - 1].states[-1].pos
            for o in others:
                if prev_end < o.states[0].pos < first.pos:
                    sections.append(Section("eval", cursor, cursor + o.elapsed))
                    cursor += o.elapsed
            hold(points, cursor)
        base = cursor
        done = offset if k > 0 or _fresh(first) else None
        for s, nxt in zip(ep.states, [*ep.states[1:], None], strict=True):
            if done is None or offset + s.n > done:
                points.append(Point(step=offset + s.n, t_s=base + s.t))
                done = offset + s.n
            # a bar that ran while this one was open, before its next state
            end_pos = nxt.pos if nxt is not None else None
            for o in others:
                p0 = o.states[0].pos
                if p0 > s.pos and (end_pos is None or p0 < end_pos) and nxt is not None:
                    sections.append(Section("eval", base + s.t, base + s.t + o.elapsed))
        if ep.m:
            spe = ep.m
        offset += last.n
        cursor = base + last.t
    if ended:
        last_pos = epochs_bars[-1].states[-1].pos
        for o in others:
            if o.states[0].pos > last_pos:
                sections.append(Section("eval", cursor, cursor + o.elapsed))
                cursor += o.elapsed
    total = epochs * spe if epochs and spe else None
    if total is None and len(epochs_bars) == 1 and spe:
        total = spe  # one bar over the whole run
    return timeline_from_points(
        points,
        path=path,
        source=source,
        clock="from_start",
        end_s=cursor if ended else None,
        sections=sections,
        steps_per_epoch=spe if len(epochs_bars) > 1 or epochs else None,
        total_steps=total,
        schedule=schedule,
        info={"epochs": epochs} if epochs else None,
    )


def _untimed(b: Bar) -> bool:
    """A bar with no elapsed time (a data scan's ``[00:00<?``): not a section."""
    return b.elapsed <= 0


def _fresh(s: State) -> bool:
    """The bar's first state is of a bar that began at count 0 (not one resumed at a later
    count with ``initial=``): its pace since its start is within 3x the rate it prints, or
    it has no steps yet."""
    if s.n == 0 or s.t == 0:
        return True
    return s.rate is None or s.n / s.t <= 3.0 * s.rate
