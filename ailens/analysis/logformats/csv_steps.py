"""ailens's own CSV form, the one every log converts to: ``step,end_s[,section[,begin_s]]``
rows, seconds from the run's start; a header line is optional. A row with no section: the
log's step counter ``step`` reached at ``end_s`` (rows written every k steps, ``10,…``,
``20,…``, are k steps each, their ends spread evenly; a counter that starts at 0 numbers the
steps from 0). A row with a section name: that section ended at ``end_s`` and began at
``begin_s`` (default: the previous row's ``end_s``). A row with section ``end`` says when the
run ended: the run is then finished, and its steps are its total."""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

from ...model.timeline import Section, Timeline
from ._base import CSV_FORM, LogError, LogFormat, Point, timeline_from_points
from ._text import read_text

__all__ = ["FORMAT", "read_csv"]


def read_csv(path: str | Path, *, text: str | None = None) -> Timeline:
    """The timeline of a CSV of ``step,end_s[,section[,begin_s]]`` rows (see the module)."""
    p = Path(path)
    text = read_text(p) if text is None else text
    points: list[Point] = []
    sections: list[Section] = []
    end_s = None
    prev = 0.0
    fix = "each row must be step,end_s[,section[,begin_s]] with end_s in seconds from the start"
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as e:
        raise LogError(f"{p}: not a CSV ({e}); {fix}") from None
    for lineno, row in enumerate(rows, 1):
        row = [c.strip() for c in row]
        if not row or not any(row) or row[0].startswith("#"):
            continue
        if lineno == 1 and not _is_number(row[0]):
            continue  # header
        if len(row) < 2:
            raise LogError(f"{p}:{lineno}: {len(row)} column(s); {fix}")
        try:
            t = float(row[1])
            begin = float(row[3]) if len(row) > 3 and row[3] else prev
        except ValueError:
            raise LogError(f"{p}:{lineno}: {row[1]!r} is not a number; {fix}") from None
        name = row[2] if len(row) > 2 else ""
        if not math.isfinite(t):
            raise LogError(f"{p}:{lineno}: end_s {row[1]} is not a finite number; {fix}")
        if t < 0 or t < prev - 1e-9 and not (name and len(row) > 3):
            raise LogError(
                f"{p}:{lineno}: end_s {row[1]} is before the previous row's {prev}; rows must "
                "come in time order, in seconds >= 0 from the start"
            )
        if not name:
            step = float(row[0]) if _is_number(row[0]) else None
            points.append(Point(step=step if step is None or math.isfinite(step) else None, t_s=t))
        elif name.lower() == "end":
            end_s = t
        else:
            if not (0 <= begin <= t) or not math.isfinite(begin):
                raise LogError(
                    f"{p}:{lineno}: section {name!r} begins after it ends ({begin} > {t})"
                )
            sections.append(Section(name, begin, t))
        prev = max(prev, t)
    if not points:
        raise LogError(f"{p}: no step rows found; {fix} (e.g. '1,1.25')")
    zero_based = points[0].step == 0
    tl = timeline_from_points(
        points,
        path=p,
        source="csv",
        zero_based=zero_based,
        clock="from_start",
        end_s=end_s,
        sections=sections,
    )
    if end_s is not None:
        tl = tl.with_total(total_steps=max(tl.steps, 1))
    return tl


def _is_number(x: str) -> bool:
    try:
        float(x)
    except ValueError:
        return False
    return True


_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_ROW = re.compile(rf"^\s*{_NUM}\s*,")


def _detect(head: str) -> bool:
    """The first row that is not a comment starts with a number and a comma, or is a header
    naming end_s."""
    for line in head.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if "end_s" in s.lower() and "," in s:
            return True
        return bool(_ROW.match(s))
    return False


FORMAT = LogFormat(
    name="csv",
    title=f"ailens CSV: {CSV_FORM}",
    detect=_detect,
    read=lambda path, text: read_csv(path, text=text),
    example="step,end_s,section\n10,5.2,\n20,10.1,",
)
