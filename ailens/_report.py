"""Terminal and JSON reports of an analysed run (they read results, never compute them).

``report_dict(analysis, whatif_rows)`` is the machine form (``ailens report --json``);
``format_report`` the aligned plain-text form a person reads in a terminal. Table 2
has the columns of :func:`ailens.phases.format_table2` plus each phase's share.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from . import __version__

__all__ = [
    "COUNTER_LABELS",
    "default_whatif_ranks",
    "format_forecast",
    "format_report",
    "format_table2_grid",
    "format_whatif",
    "grid",
    "predict_dict",
    "report_dict",
    "whatif_dicts",
]

COUNTER_LABELS = {
    "instructions": "instructions (hardware counter: user-space instructions retired)",
    "cpu-ns": "cpu-ns (CPU time of the process in ns)",
}


# --------------------------------------------------------------------------- helpers


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


def _sig3(x: float) -> str:
    # Three significant digits, trailing zeros kept (1.30, 12.0, 718) so columns read evenly.
    return f"{x:#.3g}".rstrip(".")


def fmt_s(seconds: float | None) -> str:
    """A duration a person reads at a glance: 350 µs, 12.4 ms, 3.21 s, 4 min 05 s, 2 h 03 min."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    s = abs(seconds)
    sign = "-" if seconds < 0 else ""
    if s < 1e-3:
        return f"{sign}{s * 1e6:.0f} µs"
    if s < 1:
        return f"{sign}{_sig3(s * 1e3)} ms"
    if s < 100:
        return f"{sign}{_sig3(s)} s"
    if s < 3600:
        m, sec = divmod(round(s), 60)
        return f"{sign}{m} min {sec:02d} s"
    h, rest = divmod(round(s), 3600)
    return f"{sign}{h} h {rest // 60:02d} min"


def _as_dict(obj: Any) -> dict:
    if obj is None:
        return {}
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    return dict(obj)


def _jsonable(x: Any) -> Any:
    """numpy scalars/arrays and tuples to plain JSON types; non-finite floats to None."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "tolist"):
        return _jsonable(x.tolist())
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


# --------------------------------------------------------------------------- dicts


def _meta(a) -> dict:
    run = a.run
    meta = run.meta
    hosts = sorted({str(t.meta.get("host", "?")) for t in run.ranks})
    return {
        "run_dir": str(run.path),
        "run_id": meta.get("run_id"),
        "framework": meta.get("framework"),
        "backend": meta.get("backend"),
        "hosts": hosts,
        "start_time": meta.get("start_time"),
        "complete": bool(run.complete),
        "missing_ranks": list(run.missing_ranks),
        "counter_unit": meta.get("counter_unit"),
        "counter_fallback": meta.get("counter_fallback"),
        "ailens_version_recorded": meta.get("ailens_version"),
    }


def _skew_by_phase(a) -> dict[int, dict]:
    out = {}
    for s in a.skew:
        d = _as_dict(s)
        pid = d.get("phase", d.get("id"))
        out[int(pid)] = d
    return out


def predict_dict(a) -> dict:
    """The forecast as JSON (``ailens predict --json``); every key present, None when unknown."""
    f = a.forecast
    d = _as_dict(f) if f is not None else {}
    interval = d.get("interval_s")
    return _jsonable(
        {
            "predicted_total_s": d.get("predicted_total_s"),
            "interval_s": list(interval) if interval is not None else None,
            "signature_step": d.get("signature_step"),
            "signature_fraction": d.get("signature_fraction"),
            "actual_total_s": d.get("actual_total_s"),
            "measured_total_s": float(a.total_s),
            "warnings": list(a.warnings),
            "history": [list(h) for h in d.get("history", ()) or ()],
            **{
                k: v
                for k, v in d.items()
                if k
                not in (
                    "predicted_total_s",
                    "interval_s",
                    "signature_step",
                    "signature_fraction",
                    "actual_total_s",
                    "history",
                )
            },
        }
    )


def whatif_dicts(rows) -> list[dict]:
    """What-if rows as JSON dicts (ranks, step_time_s, total_time_s, speedup, efficiency,
    comm_pct, ...)."""
    return [_jsonable(_as_dict(r)) for r in rows or ()]


def report_dict(a, whatif_rows=None, *, whatif_mode: str = "weak", top: int = 5) -> dict:
    """Everything the text report shows, as plain JSON types (``ailens report --json``)."""
    table = a.table
    td = table.to_dict()
    skew = _skew_by_phase(a)
    by_time = sorted(table.phases, key=lambda p: p.total_s, reverse=True)
    return _jsonable(
        {
            "ailens_version": __version__,
            **_meta(a),
            "counter": a.counter,
            "ranks": int(a.ranks),
            "op_names": list(a.op_names),
            "n_ticks": int(a.n_ticks),
            "steps": int(len(a.step_end_s)),
            "total_s": float(a.total_s),
            "comm_pct": float(a.comm_pct),
            "compute_pct": float(a.compute_pct),
            "phases": td["phases"],
            "dropped_phases": td["dropped"],
            "dropped_s": td["dropped_s"],
            "phase_total_s": td["total_s"],
            "min_share": td["min_share"],
            "table3": {
                "processes": int(a.ranks),
                "previous_phases": int(a.n_phases_previous),
                "current_phases": int(table.n_phases),
                "kept_phases": int(table.n_kept),
                "aet_s": float(a.total_s),
                "comm_pct": float(a.comm_pct),
                "compute_pct": float(a.compute_pct),
            },
            "top_phases": [p.id for p in by_time[:top]],
            "skew": [skew[p] for p in sorted(skew)],
            "forecast": predict_dict(a) if a.forecast is not None else None,
            "whatif_mode": whatif_mode,
            "whatif": whatif_dicts(whatif_rows),
            "warnings": list(a.warnings),
        }
    )


# --------------------------------------------------------------------------- text


def _title(text: str) -> str:
    return f"{text}\n{'=' * len(text)}"


NO_FORECAST = (
    "No forecast: too few steps after the warm-up, or the total number of steps is unknown."
)


def format_forecast(a) -> str:
    """A few lines: predicted total, interval, signature step, and the error when known."""
    f = a.forecast
    if f is None or f.predicted_total_s is None:
        return NO_FORECAST + (" See the warnings." if a.warnings else "")
    if f.signature_step is None and f.actual_total_s:
        return _forecast_without_signature(f)
    line = f"Predicted total time  {fmt_s(f.predicted_total_s)}"
    if f.interval_s is not None:
        lo, hi = f.interval_s
        line += f"  ({100 * f.level:.0f}% interval {fmt_s(lo)} – {fmt_s(hi)})"
    lines = [line]
    if f.total_steps:
        lines.append(
            f"Steps                 {f.total_steps:,} total, mean step {fmt_s(f.step_time_s)}"
        )
    if f.signature_step is not None:
        frac = f.signature_fraction
        pct = f" = {100 * frac:.0f}% of the run" if frac is not None else ""
        lines.append(f"Signature ready at    step {f.signature_step}{pct}")
    else:
        lines.append("Signature ready at    not reached (per-step time or phases still moving)")
    if f.actual_total_s:
        err = 100 * (f.predicted_total_s - f.actual_total_s) / f.actual_total_s
        where = ""
        if f.interval_s is not None:
            inside = f.interval_s[0] <= f.actual_total_s <= f.interval_s[1]
            where = f", {'inside' if inside else 'OUTSIDE'} the interval"
        lines.append(f"Actual total time     {fmt_s(f.actual_total_s)}  (error {err:+.1f}%{where})")
    else:
        lines.append("Actual total time     unknown (the run has not finished)")
    return "\n".join(lines)


def _forecast_without_signature(f) -> str:
    """A finished run whose signature never converged: no early forecast to claim; show how
    the live forecast fared at about a tenth of the run instead."""
    lines = [
        "Predicted total time  no early forecast: the signature was not reached",
        "Signature ready at    not reached (per-step time or phases still moving)",
        f"Actual total time     {fmt_s(f.actual_total_s)}",
    ]
    total = f.total_steps or 0
    early = [(st, p) for st, p in (f.history or []) if total and 0.1 * total <= st < total and p]
    if early:
        st, pred = early[0]
        err = 100 * (pred - f.actual_total_s) / f.actual_total_s
        lines.append(
            f"Live forecast         {fmt_s(pred)} at step {st} "
            f"({100 * st / total:.0f}% of the run), error {err:+.1f}%"
        )
    return "\n".join(lines)


def format_whatif(rows, *, mode: str = "weak", ranks_now: int | None = None) -> str:
    """The what-if rows as an aligned table; the run's own rank count is marked with *."""
    if not rows:
        return "No what-if: no collective was recorded on every rank."
    links = any(getattr(r, "links", None) for r in rows)
    head = ["Ranks", "Step time", "Total time", "Speedup", "Efficiency", "% Comm."]
    head += ["Links"] if links else []
    body = []
    for r in rows:
        mark = "*" if ranks_now is not None and r.ranks == ranks_now else ""
        row = [
            f"{r.ranks}{mark}",
            fmt_s(r.step_time_s),
            fmt_s(r.total_time_s),
            f"{r.speedup:.2f}x",
            f"{100 * r.efficiency:.0f}%",
            f"{r.comm_pct:.1f}",
        ]
        body.append(row + ([str(getattr(r, "links", ""))] if links else []))
    note = f"{mode} scaling, speedup against 1 rank" + (
        " (* = this run)" if ranks_now is not None else ""
    )
    from ._whatif import format_assumptions

    text = note + "\n" + grid([head, *body], [True] * 6 + [False] * links)
    extra = format_assumptions(rows)
    return text + ("\n" + extra if extra else "")


def _counter_line(a) -> str:
    meta = a.run.meta
    label = COUNTER_LABELS.get(a.counter, a.counter)
    fallback = meta.get("counter_fallback")
    if fallback:
        return f"Counter: {label}; fallback because {fallback}"
    return f"Counter: {label}"


def format_report(a, whatif_rows=None, *, whatif_mode: str = "weak", top: int = 5) -> str:
    """The full terminal report: header, warnings, Table 2, Table 3, top phases, skew,
    forecast, what-if."""
    run, table = a.run, a.table
    meta = run.meta
    hosts = sorted({str(t.meta.get("host", "?")) for t in run.ranks})
    out = [
        f"ailens report: {run.path}",
        f"Run {meta.get('run_id')}  ·  {a.ranks} ranks on {', '.join(hosts)}  ·  "
        f"framework {meta.get('framework') or '?'}"
        f"{'/' + meta['backend'] if meta.get('backend') else ''}"
        f"  ·  started {meta.get('start_time', '?')}",
        _counter_line(a),
        f"{a.n_ticks:,} collectives per rank (ticks), {len(a.step_end_s):,} steps, "
        f"wall time {fmt_s(a.total_s)}"
        f"  ·  communication {a.comm_pct:.1f}%, compute {a.compute_pct:.1f}%",
    ]
    if a.warnings:
        out.append("")
        out += [f"WARNING: {w}" for w in a.warnings]

    out += [
        "",
        _title(f"Table 2. Phases (SIMO ±{_tolerance(a)}, time per occurrence = mean over ranks)"),
    ]
    if table.phases:
        out.append(format_table2_grid(table))
    else:
        out.append("No phases: no collective was recorded on every rank.")

    out += ["", _title("Table 3. Phase detection and execution time")]
    t3 = [
        [
            "Processes",
            "Previous phases (PAS2P)",
            "Current phases (SIMO)",
            "AET (s)",
            "% Comm.",
            "% Compute",
        ],
        [
            str(a.ranks),
            f"{a.n_phases_previous:,}",
            f"{table.n_phases:,}",
            f"{a.total_s:.2f}",
            f"{a.comm_pct:.2f}",
            f"{a.compute_pct:.2f}",
        ],
    ]
    out.append(grid(t3, [True] * 6))
    if table.dropped:
        out.append(
            f"({table.n_phases - table.n_kept} of {table.n_phases} phases are under "
            f"{100 * table.min_share:g}% of the time and left out of Table 2's rows)"
        )

    by_time = sorted(table.phases, key=lambda p: p.total_s, reverse=True)[:top]
    if by_time:
        out += ["", _title(f"Top {len(by_time)} phases by time")]
        rows = [["#", "Phase", "Op", "Share", "Total", "Per occurrence", "Comm / compute"]]
        for i, p in enumerate(by_time, 1):
            per = p.time_per_occurrence_s
            comm = 100 * p.comm_per_occurrence_s / per if per > 0 else 0.0
            rows.append(
                [
                    f"{i}.",
                    str(p.id),
                    str(p.op),
                    f"{100 * p.share:.1f}%",
                    fmt_s(p.total_s),
                    fmt_s(per),
                    f"{comm:.0f}% / {100 - comm:.0f}%",
                ]
            )
        out.append(grid(rows, [True, True, False, True, True, True, True]))

    skew = _skew_by_phase(a)
    if skew:
        out += [
            "",
            _title(
                "Skew across ranks (per phase: slowest rank, "
                "(max-min)/mean of per-rank compute time)"
            ),
        ]
        rows = [["Phase", "Op", "Slowest rank", "Spread"]]
        ops = {p.id: p.op for p in table.phases}
        for pid in sorted(skew):
            if pid not in ops:
                continue
            d = skew[pid]
            rows.append(
                [
                    str(pid),
                    str(ops[pid]),
                    str(d.get("slowest_rank")),
                    f"{d.get('spread_pct', 0.0):.1f}%",
                ]
            )
        if len(rows) > 1:
            out.append(grid(rows, [True, False, True, True]))

    out += ["", _title("Forecast"), format_forecast(a)]
    out += [
        "",
        _title("What-if: other rank counts"),
        format_whatif(whatif_rows, mode=whatif_mode, ranks_now=a.ranks),
    ]
    return "\n".join(out) + "\n"


def format_table2_grid(table) -> str:
    """Table 2 with the columns of :func:`ailens.phases.format_table2` (detail) plus each phase's
    share, underlined like the other tables of the report."""
    rows = [["Phase", "Op", "SIMO", "Time/occurrence (s)", "Weight", "Time×Weight (s)", "Share"]]
    for p in table.phases:
        rows.append(
            [
                str(p.id),
                str(p.op),
                str(p.simo),
                f"{p.time_per_occurrence_s:.6f}",
                f"{p.weight:,}",
                f"{p.total_s:.6f}",
                f"{100 * p.share:.1f}%",
            ]
        )
    if table.dropped:
        share = 100 * table.dropped_s / table.total_s if table.total_s > 0 else 0.0
        rows.append(
            [
                f"{len(table.dropped)} dropped (<{100 * table.min_share:g}%)",
                "",
                "",
                "",
                "",
                f"{table.dropped_s:.6f}",
                f"{share:.1f}%",
            ]
        )
    rows.append(["Total", "", "", "", f"{table.n_ticks:,}", f"{table.total_s:.6f}", "100%"])
    return grid(rows, [False, False, True, True, True, True, True])


def _tolerance(a) -> int:
    return int(a.config.tolerance)
