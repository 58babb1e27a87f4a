"""The report's sections, each built once from the results (RunAnalysis, Forecast, what-if
rows) as rows of cell texts: :func:`build_report` puts them in order."""

from __future__ import annotations

from collections.abc import Sequence

from .._io import fmt_s
from .._version import __version__
from ..phases import TABLE2_HEAD, table2_rows, table3_cells
from .rows import (
    COUNTER_LABELS,
    NO_FORECAST,
    NO_TICKS,
    Figure,
    Header,
    Report,
    Row,
    Section,
    as_dict,
    facts,
    percent,
    predict_dict,
    whatif_dicts,
)

__all__ = [
    "build_report",
    "device_section",
    "forecast_section",
    "header",
    "parts_section",
    "run_forecast_section",
    "signature_section",
    "skew_section",
    "step_forecast_section",
    "table2_section",
    "table3_section",
    "timeline_head",
    "top_section",
    "whatif_section",
]


def header(a) -> Header:
    """Run identity, counter, headline numbers (the page's cards) and warnings."""
    run, meta, f = a.run, a.run.meta, a.forecast
    hosts = sorted({h or "?" for h in a.hosts})
    backend = f"/{meta['backend']}" if meta.get("backend") else ""
    counter = COUNTER_LABELS.get(a.counter, a.counter)
    if meta.get("counter_fallback"):
        counter += f"; fallback because {meta['counter_fallback']}"
    figures = [
        Figure("wall time", fmt_s(a.total_s)),
        Figure("communication / compute", f"{percent(a.comm_pct)} / {percent(a.compute_pct)}"),
        Figure("phases (SIMO)", f"{a.table.n_phases:,}", f"{a.n_phases_previous:,} PAS2P"),
        Figure("collectives per rank (ticks)", f"{a.n_ticks:,}"),
        Figure("steps", f"{len(a.step_end_s):,}"),
    ]
    if f is not None and f.predicted_total_s is not None and f.basis != "latest":
        figures.append(
            Figure("forecast total", fmt_s(f.predicted_total_s), f"at step {f.made_at_step}")
        )
    json = {
        "ailens_version": __version__,
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
        "counter": a.counter,
        "ranks": int(a.ranks),
        "op_names": list(a.op_names),
        "n_ticks": int(a.n_ticks),
        "steps": int(len(a.step_end_s)),
        "total_s": float(a.total_s),
        "comm_pct": float(a.comm_pct),
        "compute_pct": float(a.compute_pct),
        "warnings": list(a.warnings),
    }
    return Header(
        title=f"ailens report: {run.path}",
        about=(
            f"run {meta.get('run_id')}",
            f"{a.ranks} ranks on {', '.join(hosts)}",
            f"framework {meta.get('framework') or '?'}{backend}",
            f"started {meta.get('start_time', '?')}",
        ),
        counter=counter,
        figures=tuple(figures),
        warnings=tuple(a.warnings),
        json=json,
    )


def table2_section(
    table, *, tolerance: int | None = None, detail: bool = True, share: bool = True
) -> Section:
    """The paper's Table 2 from a PhaseTable (rows: ``ailens.phases.table2_rows``): one row
    per kept phase, the dropped phases summed in one row, and a Total row the time column
    adds up to. ``detail`` adds each phase's op and SIMO representative, ``share`` its share
    of the time."""
    rows = table2_rows(table)
    shown = (True, detail, detail, True, True, True, share)

    def cut(cells: Sequence) -> tuple:
        return tuple(c for c, keep in zip(cells, shown, strict=True) if keep)

    td = table.to_dict()
    return Section(
        key="table2",
        title="Table 2. Phases" + (f" (SIMO ±{tolerance})" if tolerance is not None else ""),
        head=cut(TABLE2_HEAD),
        right=cut((False, False) + (True,) * 5),
        rows=tuple(
            Row(cut(cells), phase=phase, kind="total" if i == len(rows) - 1 else "")
            for i, (cells, phase) in enumerate(rows)
        ),
        notes=(
            "Time per occurrence: the mean over ranks of the communication time plus the "
            "compute gap before the collective; weight: the number of occurrences (ticks).",
        ),
        empty=f"No phases: {NO_TICKS}",
        json={
            "phases": td["phases"],
            "dropped_phases": td["dropped"],
            "dropped_s": td["dropped_s"],
            "phase_total_s": td["total_s"],
            "min_share": td["min_share"],
        },
    )


def table3_section(
    table, previous_phases: int, *, processes: int | None = None, aet_s: float | None = None
) -> Section:
    """The paper's Table 3 row (cells: ``ailens.phases.table3_cells``): processes, previous
    (PAS2P) and current (SIMO) phase counts, execution time (``aet_s``, default the table's
    total) and the comm/compute split."""
    aet = table.total_s if aet_s is None else aet_s
    cells = table3_cells(table, previous_phases, processes=processes, aet_s=aet_s)
    notes = ()
    if table.dropped:
        notes = (
            f"{table.n_phases - table.n_kept} of {table.n_phases} phases are under "
            f"{100 * table.min_share:g}% of the time and left out of Table 2's rows.",
        )
    return Section(
        key="table3",
        title="Table 3. Phase detection and execution time",
        head=(
            "Processes",
            "Previous phases (PAS2P)",
            "Current phases (SIMO)",
            "AET (s)",
            "% Comm.",
            "% Compute",
        ),
        right=(True,) * 6,
        rows=(Row(cells),),
        notes=notes,
        json={
            "table3": {
                "processes": processes,
                "previous_phases": int(previous_phases),
                "current_phases": int(table.n_phases),
                "kept_phases": int(table.n_kept),
                "aet_s": float(aet),
                "comm_pct": float(table.comm_pct),
                "compute_pct": float(table.compute_pct),
            }
        },
    )


def top_section(a, top: int) -> Section:
    """The ``top`` phases by total time, each with its comm/compute split."""
    by_time = sorted(a.table.phases, key=lambda p: p.total_s, reverse=True)
    rows = []
    for p in by_time[:top]:
        per = p.time_per_occurrence_s
        comm = 100 * p.comm_per_occurrence_s / per if per > 0 else 0.0
        rows.append(
            Row(
                (
                    str(p.id),
                    str(p.op),
                    percent(100 * p.share),
                    fmt_s(p.total_s),
                    fmt_s(per),
                    f"{comm:.0f}% / {100 - comm:.0f}%",
                ),
                phase=p.id,
            )
        )
    return Section(
        key="top",
        title=f"Top {len(rows)} phases by time",
        head=("Phase", "Op", "Share", "Total", "Per occurrence", "Comm / compute"),
        right=(True, False, True, True, True, True),
        rows=tuple(rows),
        json={"top_phases": [p.id for p in by_time[:top]]},
    )


def skew_section(a) -> Section:
    """Per kept phase: the slowest rank and the spread of the per-rank compute time."""
    skew = sorted((as_dict(s) for s in a.skew), key=lambda d: d["phase"])
    ops = {p.id: p.op for p in a.table.phases}
    rows = [
        Row(
            (
                str(d["phase"]),
                str(ops[d["phase"]]),
                str(d["slowest_rank"]),
                percent(d["spread_pct"]),
            ),
            phase=d["phase"],
        )
        for d in skew
        if d["phase"] in ops
    ]
    return Section(
        key="skew",
        title="Skew across ranks",
        head=("Phase", "Op", "Slowest rank", "Spread"),
        right=(True, False, True, True),
        rows=tuple(rows),
        notes=(
            "Spread: (max − min) / mean of the per-rank compute time before the phase's "
            "collectives (time inside a collective absorbs the waiting, so it is left out).",
        ),
        json={"skew": skew},
    )


def forecast_section(a) -> Section:
    """The forecast as label/value lines. A new line is one more ``(label, value)`` pair
    appended to ``lines`` where it should show; text, HTML, ``predict`` and ``ailens
    forecast`` all follow (the JSON carries every Forecast field already, see
    :func:`predict_dict`)."""
    f = a.forecast
    json = {"forecast": predict_dict(a) if f is not None else None}
    return run_forecast_section(f, warned=bool(a.warnings), json=json)


def run_forecast_section(f, *, warned: bool = False, json=None) -> Section:
    """The run's forecast ``f`` (a Forecast, or None) as the report's label/value lines."""
    json = {"forecast": None if f is None else f.to_dict()} if json is None else json
    if f is None or f.predicted_total_s is None:
        empty = NO_FORECAST + (" See the warnings." if warned else "")
        return Section(key="forecast", title="Forecast", empty=empty, json=json)
    n = f.total_steps
    at = f"step {f.made_at_step:,}" + (
        f" ({percent(100 * f.made_at_step / n)} of the steps)" if n else ""
    )
    lines: list[tuple[str, str]] = []
    if f.basis == "latest" and f.actual_total_s:
        lines.append(
            (
                "Predicted total time",
                "no early forecast: the total number of steps was not known during the run "
                "(give it: total_steps=N on the attach line, or lens.set_schedule(total_steps=N))",
            )
        )
    else:
        lo, hi = f.interval_s
        interval = f"  ({100 * f.level:.0f}% interval {fmt_s(lo)} – {fmt_s(hi)})"
        lines.append(("Predicted total time", fmt_s(f.predicted_total_s) + interval))
        wide = _widest_text(f.components)
        if wide:
            lines.append(("Interval widest from", wide))
        made = {
            "signature": f"at {at}, where the forecast converged (the signature)",
            "early": f"at {at}: the signature was not reached, so the forecast made at "
            "a tenth of the run stands for it",
            "latest": f"at {at}, the latest (the run has not finished)",
        }[f.basis]
        lines.append(("Made", made))
        if f.naive_total_s is not None:
            naive = fmt_s(f.naive_total_s)
            if f.naive_error_pct is not None:
                naive += f"  (error {f.naive_error_pct:+.1f}%)"
            lines.append(("A progress bar would say", naive + " at the same step"))
    if n:
        lines.append(("Steps", f"{n:,} total, training step {fmt_s(f.step_time_s)}"))
    if f.signature_step is not None:
        frac = f.signature_fraction
        pct = f" = {percent(100 * frac)} of the run" if frac is not None else ""
        lines.append(("Signature ready at", f"step {f.signature_step:,}{pct}"))
        captured = ", ".join(
            f"{c.name} ({c.seen} seen, ±{100 * c.precision:.0f}%)"
            for c in f.signature_parts
            if c.precision is not None
        )
        if captured:
            lines.append(("Signature captured", captured))
        if f.signature_waited_for:
            lines.append(("Not earlier because", "; ".join(f.signature_waited_for[:3])))
    else:
        lacked = "; ".join(f.signature_waited_for[:3])
        why = f"the run's structure was not captured: {lacked}" if lacked else "not converged"
        lines.append(("Signature ready at", f"not reached ({why})"))
    if f.actual_total_s:
        actual = fmt_s(f.actual_total_s)
        if f.error_pct is not None:
            where = "" if f.covered is None else (", inside" if f.covered else ", OUTSIDE")
            actual += (
                f"  (error {f.error_pct:+.1f}%{where} the interval)"
                if where
                else (f"  (error {f.error_pct:+.1f}%)")
            )
        lines.append(("Actual total time", actual))
    else:
        lines.append(("Actual total time", "unknown (the run has not finished)"))
    if f.job_offset_s is not None:
        job = f"{fmt_s(f.job_offset_s)} before ailens attached"
        if f.predicted_job_total_s is not None and f.basis != "latest":
            job += f"; predicted job time {fmt_s(f.predicted_job_total_s)}"
        if f.actual_job_total_s is not None:
            job += f"; actual {fmt_s(f.actual_job_total_s)}"
        lines.append(("From process start", job))
    notes = (
        "Totals run from the moment ailens attached to the end of training (the Lens's "
        "close); 'From process start' adds the time before.",
    )
    return Section(key="forecast", title="Forecast", rows=facts(lines), notes=notes, json=json)


_SOURCES = {"mlperf": "MLPerf log", "csv": "CSV", "ailens": "ailens run"}


def timeline_head(path, tl) -> str:
    """What ``ailens forecast`` read: the kind of log, its unit of steps, how far it is."""
    n = tl.total_steps
    what = _SOURCES.get(tl.source, f"{tl.source} log" if tl.source else "log")
    bench = tl.info.get("submission_benchmark")
    head = f"{path}: {what}" + (f" ({bench})" if bench else "")
    head += f", one step = one {tl.unit}, {tl.steps} steps"
    head += f" of {n}" if n else " (total unknown: give --total-steps or --epochs)"
    return head + (", finished" if tl.finished else ", running")


def step_forecast_section(result, frac: float | None, r) -> Section:
    """The forecasts a user would have read at one point of the run (``r``, a StepForecast
    of ``result``, a TimelineForecast; ``frac``: the share of the steps it is at, None for
    now): ailens's with its interval, the time spent and to come by part, the progress bar
    and Composer beside it, and the error of each once the run ended."""
    tl = result.timeline
    n = tl.total_steps
    where = f"at {100 * frac:g}%" if frac is not None else "now"
    title = (
        f"{where} (step {r.steps_done}{f'/{n}' if n else ''}, "
        f"{fmt_s(r.elapsed_s, 'compact')} elapsed)"
    )
    lines: list[tuple[str, str]] = []
    if r.predicted_total_s is None:
        step = (
            "warming up"
            if r.step_time_s is None
            else f"step time {fmt_s(r.step_time_s, 'compact')}"
        )
        lines.append(("forecast end", f"not yet ({step})"))
    else:
        lo, hi = r.interval_s
        lines.append(
            (
                "forecast end",
                f"{fmt_s(r.predicted_total_s, 'compact')}  95% interval "
                f"[{fmt_s(lo, 'compact')}, {fmt_s(hi, 'compact')}]  "
                f"(still to go {fmt_s(r.eta_s, 'compact')})",
            )
        )
    spent = _spent(tl, r)
    if spent:
        lines.append(("spent", ", ".join(spent)))
    for c in r.components:
        if c.remaining > 0:
            lines.append(
                (
                    "to come",
                    f"{c.name}: {c.remaining} x {fmt_s(c.per_occurrence_s, 'compact')} = "
                    f"{fmt_s(c.remaining_s, 'compact')} ({c.source})",
                )
            )
    wide = _widest_text(r.components)
    if wide:
        lines.append(("widest", wide))
    bar, comp = r.progress_bar_total_s, r.composer_total_s
    init = tl.init_s
    lines.append(
        (
            "beside it",
            "progress bar "
            + (fmt_s(bar, "compact") if bar is not None else "n/a")
            + (f" (from the first step, after {fmt_s(init, 'compact')} of init)" if init else "")
            + ", Composer RuntimeEstimator "
            + (fmt_s(comp, "compact") if comp is not None else "n/a"),
        )
    )
    actual = result.actual_total_s
    if actual:
        errs = [
            f"{name} {100 * (v - actual) / actual:+.2f}%"
            for name, v in (
                ("ailens", r.predicted_total_s),
                ("progress bar", bar),
                ("Composer", comp),
            )
            if v is not None
        ]
        lines.append(("actual end", f"{fmt_s(actual, 'compact')}  (error: {', '.join(errs)})"))
    return Section(key="step_forecast", title=title, rows=facts(lines), json=r.to_dict())


def _widest_text(components) -> str:
    """The part whose uncertainty widens the interval most (its ``spread_s``), its one sd
    and what it rests on: the assumption to measure first; "" when nothing spreads."""
    c = max(components, key=lambda c: c.spread_s, default=None)
    if c is None or c.spread_s <= 0:
        return ""
    return f"{c.name}: ±{fmt_s(c.spread_s, 'compact')} (one sd; {c.source})"


def _spent(tl, r) -> list[str]:
    """Time spent so far by part: training steps and each named section, those ended by
    the time the forecast was made at included (on a run still going, one after its last
    step; none before the first step's end was read)."""
    if not r.steps_done:
        return []
    t = tl.step_end_s[r.steps_done - 1]
    now = max(t, r.elapsed_s or 0.0)
    by: dict[str, list[float]] = {}
    for s in tl.sections:
        if s.end_s <= now:
            by.setdefault(s.name, []).append(s.end_s - s.begin_s)
    sections = sum(s.end_s - s.begin_s for s in tl.sections if s.end_s <= t)
    out = [f"training steps {r.steps_done} in {fmt_s(max(t - sections, 0.0), 'compact')}"]
    for name, v in by.items():
        out.append(f"{name} {len(v)} x {fmt_s(sum(v) / len(v), 'compact')}")
    return out


def signature_section(result) -> Section:
    """Where the forecast's signature was reached, as a share of the steps when known."""
    sig, n = result.signature_step, result.timeline.total_steps
    value = "not reached"
    if sig is not None:
        value = f"step {sig}" + (f" ({100 * sig / n:.1f}% of the steps)" if n else "")
    return Section(key="signature", title="Signature", rows=facts([("signature", value)]), json={})


def parts_section(a) -> Section:
    """The run as the forecast models it: each part, its schedule and what is left of it."""
    f = a.forecast
    if f is None or not f.components:
        return Section(key="forecast_parts", title="Forecast: the run's parts")
    rows = [
        Row(
            (
                c.name,
                c.schedule,
                c.source,
                fmt_s(c.per_occurrence_s),
                f"{c.seen:,}",
                f"{c.remaining:,}",
                fmt_s(c.remaining_s),
                f"±{fmt_s(c.spread_s)}",
            )
        )
        for c in f.components
    ]
    head = ("Part", "Schedule", "Source", "Per occurrence", "Seen", "Left", "Time left", "± 1 sd")
    return Section(
        key="forecast_parts",
        title=f"Forecast: the run's parts (as of step {f.made_at_step:,})",
        head=head,
        right=(False, False, False, True, True, True, True, True),
        rows=tuple(rows),
        notes=(
            "Predicted total = time so far + the time left of every part. Sources: measured "
            "in this run, the schedule the framework or script gave, learned from when the "
            "part recurred, or assumed (said so). ± 1 sd: what each part's uncertainty adds "
            "to the interval above the point; the largest is the assumption to measure first.",
        ),
    )


def whatif_section(rows, *, mode: str = "weak", ranks_now: int | None = None) -> Section:
    """The what-if rows; the run's own rank count is marked with * (kind "this")."""
    links = any(getattr(r, "links", None) for r in rows or ())
    out = []
    for r in rows or ():
        this = ranks_now is not None and r.ranks == ranks_now
        cells = (
            f"{r.ranks}{'*' if this else ''}",
            fmt_s(r.step_time_s),
            fmt_s(r.total_time_s),
            f"{r.speedup:.2f}×",
            f"{100 * r.efficiency:.0f}%",
            f"{r.comm_pct:.1f}",
        )
        cells += (str(getattr(r, "links", "")),) if links else ()
        out.append(Row(cells, kind="this" if this else ""))
    note = f"{mode} scaling, speedup against 1 rank" + ("; * = this run" if ranks_now else "")
    assumed = list(dict.fromkeys(a for r in rows or () for a in getattr(r, "assumptions", ())))
    return Section(
        key="whatif",
        title="What-if: other rank counts",
        head=("Ranks", "Step time", "Total time", "Speedup", "Efficiency", "% Comm.")
        + (("Links",) if links else ()),
        right=(True,) * 6 + (False,) * links,
        rows=tuple(out),
        notes=(note + ".", *(f"Assumption: {x}." for x in assumed)) if out else (),
        empty=f"No what-if: {NO_TICKS}",
        json={"whatif_mode": mode, "whatif": whatif_dicts(rows)},
    )


def device_section(a) -> Section:
    """Device time (GPU runs): the step, each collective and the work between collectives
    as the device timed them, beside the host's view in the sections above."""
    d = a.device
    if d is None:
        return Section(key="device", title="Device time", empty="", json={"device": None})

    def s(x: float | None) -> str:
        return "–" if x is None else fmt_s(x)

    rows = (
        Row(("counter", COUNTER_LABELS.get(d.counter, d.counter))),
        Row(
            (
                "clock",
                f"{d.clock} ({d.ranks} rank(s), {d.steps} steps, "
                f"{d.collectives} collectives resolved)",
            )
        ),  # fmt: skip
        Row(("step (median)", s(d.step_s))),
        Row(("one collective (median)", s(d.collective_s))),
        Row(("in collectives per step (median)", s(d.comm_per_step_s))),
        Row(("gpu-ns before collectives per step (median)", s(d.work_per_step_s))),
    )
    return Section(
        key="device",
        title="Device time",
        rows=rows,
        notes=(
            "A collective's device time runs from when it could start (its input ready and the "
            "previous collective done) to its end; gpu-ns is the training stream's time "
            "between collectives. Timed with events resolved at later step ends, never "
            "synchronising the step.",
        ),
        json={"device": d.to_dict()},
    )


def build_report(a, whatif_rows=None, *, whatif_mode: str = "weak", top: int = 5) -> Report:
    """Every section of the report of analysis ``a`` (a RunAnalysis), in order."""
    return Report(
        header=header(a),
        sections=(
            table2_section(a.table, tolerance=int(a.config.tolerance)),
            table3_section(a.table, a.n_phases_previous, processes=a.ranks, aet_s=a.total_s),
            top_section(a, top),
            skew_section(a),
            forecast_section(a),
            parts_section(a),
            device_section(a),
            whatif_section(whatif_rows, mode=whatif_mode, ranks_now=a.ranks),
        ),
    )
