"""``ailens forecast``: the forecast of any run from its log (run dir, or a training log in any
format of ``ailens.analysis.logformats``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ._common import CliError, emit, positive_float, positive_int


def _fractions(text: str) -> list[float]:
    out = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            v = float(part.rstrip("%")) / 100
        except ValueError:
            v = -1.0
        if not 0 < v <= 1:
            raise argparse.ArgumentTypeError(
                f"{part!r} is not a percentage of the steps in (0, 100], e.g. 5%,10%"
            )
        out.append(v)
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r}: give percentages, e.g. 5%,10%")
    return out


def add_forecast(sub) -> None:
    p = sub.add_parser(
        "forecast",
        help="forecast any run from its log: an ailens run dir, a training log, a CSV",
        description="Forecast the end of a run that ran with or without ailens, from its "
        "timeline: an ailens run directory, or a training log as the job printed it, its "
        "format detected from its content (Megatron-LM/DeepSpeed, DeepSpeed, nanoGPT, "
        "modded-nanogpt, MLPerf/MLCommons :::MLLOG, ...: `--format list` names them all; "
        "gzip accepted), or a CSV of step,end_s[,section[,begin_s]] rows (a row with section "
        "'end' says when the run ended). The forecast is the live Lens's own (ailens."
        "forecast_timeline), shown with its 95% interval, its parts and the progress-bar "
        "and Composer ETAs beside it. See docs/forecast.md.",
    )
    p.add_argument(
        "log", type=Path, metavar="LOG", nargs="?", help="run directory, training log or CSV"
    )
    p.add_argument(
        "--format",
        metavar="NAME",
        help="read LOG in this format instead of the one its content shows; "
        "`--format list` prints the formats",
    )
    p.add_argument(
        "--at",
        type=_fractions,
        default=None,
        metavar="P%,...",
        help="forecast as made at these percentages of the steps (default: now, the last step "
        "in the log; for a finished run 5%%,10%%,20%%,50%%)",
    )
    n = p.add_mutually_exclusive_group()
    n.add_argument(
        "--total-steps",
        type=positive_int,
        metavar="N",
        help="how many steps the whole run has, where the log does not say (steps as the "
        "log counts them: iterations, updates; MLPerf: epochs, blocks, evaluation intervals "
        "or logged steps)",
    )
    n.add_argument(
        "--epochs",
        type=positive_float,
        metavar="N",
        help="how many epochs the whole run has (converted with the steps per epoch read "
        "from the log)",
    )
    p.add_argument(
        "--no-init",
        action="store_true",
        help="count from the end of the initialisation (MLPerf: run_start, what MLPerf "
        "scores) instead of the log's first reading (MLPerf: init_start)",
    )
    p.add_argument("--json", action="store_true", help="print the forecasts as JSON")


def cmd_forecast(args) -> int:
    from ..analysis.logformats import FORMATS
    from ..analysis.logs import LogError, read_timeline
    from ..model.timeline import forecast_timeline

    if args.format == "list":
        emit("\n".join(f"{f.name:<16} {f.title}" for f in FORMATS))
        return 0
    if args.log is None:
        raise CliError("give the LOG to forecast (a run directory, a training log or a CSV)")
    try:
        tl = read_timeline(
            args.log,
            total_steps=args.total_steps,
            epochs=args.epochs,
            include_init=not args.no_init,
            fmt=args.format,
        )
    except (LogError, ValueError) as e:
        raise CliError(str(e)) from None
    if not tl.steps:
        raise CliError(f"{args.log}: no steps in the log yet; nothing to forecast from")
    result = forecast_timeline(tl)
    if args.at is not None:
        fractions = args.at
    elif tl.finished:
        fractions = [0.05, 0.10, 0.20, 0.50]
    else:
        fractions = None
    if fractions is not None and not tl.total_steps:
        raise CliError(
            f"{args.log}: the log does not say how many steps the run has; give --total-steps "
            "N or --epochs N for forecasts at percentages of it"
        )
    rows = (
        [(f, result.at_fraction(f)) for f in fractions]
        if fractions is not None
        else [(None, result.latest)]
    )
    if args.json:
        doc = result.to_dict(fractions=fractions if fractions is not None else ())
        if fractions is None:
            doc["at"] = [result.latest.to_dict()]
        emit(json.dumps(doc, indent=2))
        return 0
    emit("\n".join(_forecast_text(args.log, tl, result, rows)))
    return 0


def _forecast_text(path, tl, result, rows) -> list[str]:
    from .._io import fmt_s

    n = tl.total_steps
    what = {"mlperf": "MLPerf log", "csv": "CSV", "ailens": "ailens run"}.get(
        tl.source, f"{tl.source} log"
    )
    bench = tl.info.get("submission_benchmark")
    head = f"{path}: {what}" + (f" ({bench})" if bench else "")
    head += f", one step = one {tl.unit}, {tl.steps} steps"
    head += f" of {n}" if n else " (total unknown: give --total-steps or --epochs)"
    head += ", finished" if tl.finished else ", running"
    out = [head]
    actual = result.actual_total_s
    for frac, r in rows:
        if r is None:
            continue
        where = f"at {100 * frac:g}% " if frac is not None else "now "
        out.append(
            f"\n{where}(step {r.steps_done}{f'/{n}' if n else ''}, "
            f"{fmt_s(r.elapsed_s, 'compact')} elapsed):"
        )
        if r.predicted_total_s is None:
            step = (
                "warming up"
                if r.step_time_s is None
                else f"step time {fmt_s(r.step_time_s, 'compact')}"
            )
            out.append(f"  forecast end   not yet ({step})")
        else:
            lo, hi = r.interval_s
            out.append(
                f"  forecast end   {fmt_s(r.predicted_total_s, 'compact')}  "
                f"95% interval [{fmt_s(lo, 'compact')}, "
                f"{fmt_s(hi, 'compact')}]  (still to go {fmt_s(r.eta_s, 'compact')})"
            )
        spent = _spent(tl, r)
        if spent:
            out.append("  spent          " + ", ".join(spent))
        for c in r.components:
            if c.remaining <= 0:
                continue
            out.append(
                f"  to come        {c.name}: {c.remaining} x "
                f"{fmt_s(c.per_occurrence_s, 'compact')} = "
                f"{fmt_s(c.remaining_s, 'compact')} ({c.source})"
            )
        bar, comp = r.progress_bar_total_s, r.composer_total_s
        init = tl.init_s
        out.append(
            "  beside it      progress bar "
            + (fmt_s(bar, "compact") if bar is not None else "n/a")
            + (f" (from the first step, after {fmt_s(init, 'compact')} of init)" if init else "")
            + ", Composer RuntimeEstimator "
            + (fmt_s(comp, "compact") if comp is not None else "n/a")
        )
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
            out.append(f"  actual end     {fmt_s(actual, 'compact')}  (error: {', '.join(errs)})")
    sig = result.signature_step
    if sig is not None:
        out.append(
            f"\nsignature: step {sig}" + (f" ({100 * sig / n:.1f}% of the steps)" if n else "")
        )
    else:
        out.append("\nsignature: not reached")
    return out


def _spent(tl, r) -> list[str]:
    """Time spent so far by part: training steps and each named section."""
    from .._io import fmt_s

    t = tl.step_end_s[r.steps_done - 1]
    by: dict[str, list[float]] = {}
    for s in tl.sections:
        if s.end_s <= t:
            by.setdefault(s.name, []).append(s.end_s - s.begin_s)
    sections = sum(sum(v) for v in by.values())
    out = [f"training steps {r.steps_done} in {fmt_s(max(t - sections, 0.0), 'compact')}"]
    for name, v in by.items():
        out.append(f"{name} {len(v)} x {fmt_s(sum(v) / len(v), 'compact')}")
    return out
