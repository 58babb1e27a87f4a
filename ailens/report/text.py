"""The report as text (the terminal) and JSON (``ailens report --json``): layouts of the
sections, nothing computed here."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from . import sections
from .rows import Report, Section, jsonable

__all__ = [
    "format_forecast",
    "format_report",
    "format_whatif",
    "grid",
    "render_json",
    "render_text",
    "report_dict",
    "section_text",
    "table_text",
]


def grid(rows: Sequence[Sequence[str]], right: Sequence[bool], *, rule: bool = True) -> str:
    """Rows of cells as aligned columns (first row = header, underlined when ``rule``)."""
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]

    def line(row: Sequence[str]) -> str:
        cells = (
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True)
        )
        return "  ".join(cells).rstrip()

    out = [line(rows[0])]
    if rule:
        out.append("  ".join("-" * w for w in widths))
    out += [line(r) for r in rows[1:]]
    return "\n".join(out)


def table_text(s: Section, *, rule: bool = True) -> str:
    """A section's rows as an aligned grid: under its column headers, or label/value lines."""
    rows = [r.cells for r in s.rows]
    if s.head:
        return grid([s.head, *rows], s.right, rule=rule)
    return grid(rows, [False, False], rule=False)


def section_text(s: Section, *, title: bool = True) -> str:
    """One section as plain text: title, table (or its empty message), notes; "" when the
    section has nothing to show."""
    if not s.rows and not s.empty:
        return ""
    out = [s.title, "=" * len(s.title)] if title else []
    out.append(table_text(s) if s.rows else s.empty)
    out += [textwrap.fill(n, 100) for n in s.notes]
    return "\n".join(out)


def _wrap_joined(parts: Sequence[str], sep: str = "  ·  ", width: int = 100) -> list[str]:
    lines: list[str] = []
    for part in parts:
        if lines and len(lines[-1]) + len(sep) + len(part) <= width:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return lines


def render_text(report: Report) -> str:
    """The whole report as the terminal shows it."""
    h = report.header
    figures = [f"{f.label} {f.value}" + (f" ({f.detail})" if f.detail else "") for f in h.figures]
    out = [h.title, "  ·  ".join(h.about), f"Counter: {h.counter}", *_wrap_joined(figures)]
    if h.warnings:
        out += ["", *(f"WARNING: {w}" for w in h.warnings)]
    for s in report.sections:
        text = section_text(s)
        if text:
            out += ["", text]
    return "\n".join(out) + "\n"


def render_json(report: Report) -> dict:
    """The whole report as plain JSON types: the header's keys, then each section's."""
    d: dict[str, Any] = dict(report.header.json)
    for s in report.sections:
        d.update(s.json)
    return jsonable(d)


# --------------------------------------------------------------------------- entry points


def format_report(a, whatif_rows=None, *, whatif_mode: str = "weak", top: int = 5) -> str:
    """The terminal report (``ailens report``)."""
    return render_text(sections.build_report(a, whatif_rows, whatif_mode=whatif_mode, top=top))


def report_dict(a, whatif_rows=None, *, whatif_mode: str = "weak", top: int = 5) -> dict:
    """Everything the text report shows, as plain JSON types (``ailens report --json``)."""
    return render_json(sections.build_report(a, whatif_rows, whatif_mode=whatif_mode, top=top))


def format_forecast(a) -> str:
    """The forecast lines (``ailens predict``)."""
    return section_text(sections.forecast_section(a), title=False)


def format_whatif(rows, *, mode: str = "weak", ranks_now: int | None = None) -> str:
    """The what-if table (``ailens whatif``); the run's own rank count is marked with *."""
    return section_text(sections.whatif_section(rows, mode=mode, ranks_now=ranks_now), title=False)
