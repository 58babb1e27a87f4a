"""``ailens forecast``: the forecast of any run from its log (run dir, or a training log in any
format of ``ailens.analysis.logformats``)."""

from __future__ import annotations

import argparse
import dataclasses
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
        "gzip, bzip2 or xz accepted; a launcher's rank prefixes and colour codes taken off), "
        "or a CSV of step,end_s[,section[,begin_s]] rows (a row with section 'end' says "
        "when the run ended). The forecast is the live Lens's own "
        "(ailens.forecast_timeline), shown with its 95% interval, its parts and the "
        "progress-bar and Composer ETAs beside it. An ailens run directory goes through the "
        "run's own analysis (its settings and recorded exchanges), so its numbers are those "
        "of `ailens report` and the run's forecast.json. --follow follows a running job's "
        "log. See docs/forecast.md.",
    )
    p.add_argument(
        "log",
        type=Path,
        metavar="LOG",
        nargs="*",
        help="run directory, training log or CSV; or the logs of one run in order (a job "
        "resubmitted after a time limit or a failure: one log per job), read as one",
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
        "in the log; for a finished run 5%%,10%%,20%%,50%%); between two of the log's lines, "
        "as made at the last one",
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
    f = p.add_argument_group("a running job")
    f.add_argument(
        "--follow",
        action="store_true",
        help="follow the log as the job writes it (a rotated or truncated log is read anew): "
        "one live line on a terminal (forecast end, its interval, time to go, the progress "
        "bar's ETA, steps seen), a plain line per update otherwise; until the log says the "
        "run ended, or Ctrl-C. The job is not touched",
    )
    f.add_argument(
        "--json-lines",
        action="store_true",
        help="with --follow: one JSON object per update instead of the live line (keys in "
        "docs/forecast.md)",
    )
    f.add_argument(
        "--tensorboard",
        type=Path,
        metavar="DIR",
        help="with --follow: also write each update as TensorBoard scalars (ailens/"
        "forecast_total_s, ...) into DIR (needs the tensorboard package)",
    )


def _read_options(args) -> dict:
    """The reading options ``ailens forecast`` passes to ``read_timeline`` (one place: a
    reader option such as a forced format is added here and reaches --follow too)."""
    return {
        "total_steps": args.total_steps,
        "epochs": args.epochs,
        "include_init": not args.no_init,
        "fmt": args.format,
    }


def cmd_forecast(args) -> int:
    from ..analysis.logformats import FORMATS
    from ..analysis.logs import LogError
    from ..analysis.run_forecast import forecast_path

    if args.format == "list":
        emit("\n".join(f"{f.name:<16} {f.title}" for f in FORMATS))
        return 0
    if not args.log:
        raise CliError("give the LOG to forecast (a run directory, a training log or a CSV)")
    if args.json_lines or args.tensorboard is not None:
        if not args.follow:
            raise CliError("--json-lines and --tensorboard go with --follow")
    if args.follow:
        if args.at is not None or args.json:
            raise CliError("--follow shows the forecast now; --at and --json do not go with it")
        from .follow import follow

        return follow(args, _read_options(args))
    logs = args.log if len(args.log) > 1 else args.log[0]
    named = " + ".join(map(str, args.log))
    try:
        result = forecast_path(logs, **_read_options(args))
    except (LogError, ValueError) as e:
        raise CliError(str(e)) from None
    tl = result.timeline
    if not tl.steps:
        raise CliError(f"{named}: no steps in the log yet; nothing to forecast from")
    if args.at is not None:
        fractions = args.at
    elif tl.finished:
        fractions = [0.05, 0.10, 0.20, 0.50]
    else:
        fractions = None
    if fractions is not None and not tl.total_steps:
        raise CliError(
            f"{named}: the log does not say how many steps the run has; give --total-steps "
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
    emit(_forecast_text(named, result, rows))
    return 0


def _forecast_text(path, result, rows) -> str:
    """The report's sections of ``ailens forecast``: one per point of the run, the
    signature, and the run's forecast as ``ailens report`` shows it."""
    from ..report.sections import (
        run_forecast_section,
        signature_section,
        step_forecast_section,
        timeline_head,
    )
    from ..report.text import section_text

    out = [timeline_head(path, result.timeline)]
    for frac, r in rows:
        if r is not None:
            out += ["", section_text(step_forecast_section(result, frac, r))]
    out += ["", section_text(signature_section(result), title=False)]
    f = result.forecast
    if f is not None and f.predicted_total_s is not None:
        section = run_forecast_section(f)
        if result.timeline.source != "ailens":  # its note is about where ailens attached
            section = dataclasses.replace(section, notes=())
        out += ["", section_text(section)]
    return "\n".join(out)
