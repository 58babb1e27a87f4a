"""The report as data: rows, sections, the header, and the cell formats they share.

Each section of the report (Table 2, Table 3, top phases, skew, forecast, what-if) is a
:class:`Section`: title, column headers, rows of cell texts, notes, and the section's keys of
``ailens report --json``. The builders (``ailens.report.sections``) read results
(RunAnalysis, Forecast, what-if rows); they never compute them. The renderers only lay
sections out: ``ailens.report.text`` (the terminal, ``--json``) and
``ailens.report.html.render_html`` (the page). Adding a row or a line to a section is a
change in its builder alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "COUNTER_LABELS",
    "Figure",
    "Header",
    "Report",
    "Row",
    "Section",
    "default_whatif_ranks",
    "predict_dict",
    "whatif_dicts",
]

COUNTER_LABELS = {
    "instructions": "instructions (hardware counter: user-space instructions retired)",
    "cpu-ns": "cpu-ns (CPU time of the process in ns)",
    "gpu-ns": "gpu-ns (device time of the training stream in ns, from CUDA events)",
}

NO_FORECAST = (
    "No forecast: too few steps after the warm-up, or the total number of steps is unknown."
)
NO_TICKS = "no collective was recorded on every rank."


# --------------------------------------------------------------------------- the data


@dataclass(frozen=True)
class Row:
    """One row of a section: its cells as shown, and what the row is."""

    cells: tuple[str, ...]
    kind: str = ""  # "" | "total" (adds up the rows above) | "this" (the run itself)
    phase: int | None = None  # the phase the row is about (the page colours it)


@dataclass(frozen=True)
class Section:
    """One report section as data; every renderer reads this and nothing else of it.

    ``head`` empty means label/value rows (two cells each). ``right`` says which columns
    are right-aligned. Without rows the section shows ``empty`` (nothing when that is
    empty too). ``json`` holds the section's keys of ``ailens report --json``.
    """

    key: str
    title: str
    head: tuple[str, ...] = ()
    right: tuple[bool, ...] = ()
    rows: tuple[Row, ...] = ()
    notes: tuple[str, ...] = ()
    empty: str = ""
    json: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Figure:
    """A headline number: ``value`` (``detail``) ``label``."""

    label: str
    value: str
    detail: str = ""


@dataclass(frozen=True)
class Header:
    """What the run is, how work was counted, its headline numbers and warnings."""

    title: str
    about: tuple[str, ...]  # run id, ranks and hosts, framework, start time
    counter: str
    figures: tuple[Figure, ...]
    warnings: tuple[str, ...]
    json: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    """A whole report: the header, then the sections in order."""

    header: Header
    sections: tuple[Section, ...]


def facts(pairs: Sequence[tuple[str, str]]) -> tuple[Row, ...]:
    return tuple(Row((label, value)) for label, value in pairs)


# --------------------------------------------------------------------------- cell formats


def percent(x: float) -> str:
    return f"{x:.1f}%"


def as_dict(obj: Any) -> dict:
    if obj is None:
        return {}
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    return dict(obj)


def jsonable(x: Any) -> Any:
    """numpy scalars/arrays and tuples to plain JSON types; non-finite floats to None."""
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "tolist"):
        return jsonable(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def default_whatif_ranks(ranks: int) -> list[int]:
    """Rank counts for the what-if summary: 1, 2, 4, 8, 16 for small runs, otherwise powers
    of two from an eighth to four times the run's size, plus the run's own size."""
    lo, hi = max(1, ranks // 8), max(16, 4 * ranks)
    out = {ranks}
    p = 1
    while p <= hi:
        if p >= lo:
            out.add(p)
        p *= 2
    return sorted(out)


# --------------------------------------------------------------------------- machine forms


def predict_dict(a) -> dict:
    """The forecast as JSON (``ailens predict --json``); every key present, None when unknown."""
    d = as_dict(a.forecast)
    keys = ("predicted_total_s", "interval_s", "signature_step", "signature_fraction")
    out = {k: d.get(k) for k in (*keys, "actual_total_s")}
    out |= {"measured_total_s": float(a.total_s), "warnings": list(a.warnings)}
    out["history"] = d.get("history") or []
    out |= {k: v for k, v in d.items() if k not in out}
    return jsonable(out)


def whatif_dicts(rows) -> list[dict]:
    """What-if rows as JSON dicts (ranks, step_time_s, total_time_s, speedup, efficiency,
    comm_pct, ...)."""
    return [jsonable(as_dict(r)) for r in rows or ()]
