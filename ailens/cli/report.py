"""``ailens report`` and ``ailens predict``: a run's tables, forecast and what-if summary."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .._io import write_text
from ._common import (
    add_analysis_opts,
    add_run_dir,
    add_whatif_opts,
    analyze_args,
    emit,
    load_run_dir,
    positive_int,
    whatif_rows,
)


def add_report(sub) -> None:
    p = sub.add_parser(
        "report",
        help="phase tables, comm/compute split, skew, forecast and what-if of a run",
        description="Report a run: the paper's Table 2 (phases) and Table 3 (previous vs "
        "current phases, time, % comm/compute), the top phases by time, skew across ranks, the "
        "forecast and a what-if summary. "
        "A partial run (a killed rank) still reports, with a warning saying what is missing. "
        "When RUN_DIR/signature.json (the run's signature record, see `history`) is missing, "
        "report also writes it, once: the run itself never does, so closing costs it nothing.",
    )
    add_run_dir(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    p.add_argument(
        "--html",
        type=Path,
        metavar="OUT.html",
        help="also write one self-contained HTML page with plots "
        "(needs matplotlib: pip install ailens[plot])",
    )
    p.add_argument(
        "--top",
        type=positive_int,
        default=5,
        metavar="N",
        help="phases listed by time (default 5)",
    )
    p.add_argument(
        "--no-record",
        action="store_true",
        help="do not write RUN_DIR/signature.json when it is missing (its analytic what-if "
        "grid takes a while on long runs)",
    )
    add_analysis_opts(p)
    add_whatif_opts(p, ranks_required=False)


def add_predict(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="forecast of the total training time with its interval",
        description="Print the total-time forecast of a run: predicted total, interval, the "
        "step at "
        "which the signature was ready, and the actual total when the run finished.",
    )
    add_run_dir(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="print JSON: predicted_total_s, interval_s, signature_step, "
        "signature_fraction, actual_total_s",
    )
    add_analysis_opts(p)


def cmd_report(args) -> int:
    from ..report.rows import default_whatif_ranks
    from ..report.text import format_report, report_dict

    args.mode = args.mode or "weak"
    run = load_run_dir(args)
    a = analyze_args(args, run)
    rows = whatif_rows(args, a, args.ranks or default_whatif_ranks(a.ranks), strict=False)
    if args.html is not None:
        from ..report.html import render_html

        page = render_html(a, rows, whatif_mode=args.mode, top=args.top)
        write_text(args.html, page)
        print(f"ailens: wrote {args.html}", file=sys.stderr)
    if args.json:
        emit(json.dumps(report_dict(a, rows, whatif_mode=args.mode, top=args.top), indent=2))
    else:
        emit(format_report(a, rows, whatif_mode=args.mode, top=args.top))
    if not args.no_record:
        _write_missing_record(args, run, a)
    return 0


def _write_missing_record(args, run, a) -> None:
    """Write RUN_DIR/signature.json when it is missing and the run allows it (see
    ``record_refusal``). The report is already printed: a record that cannot be made is a
    warning, not a failed report."""
    from ..tools.signature_record import RECORD_FILE, record_refusal, signature_record, write_record

    path = args.run_dir / RECORD_FILE
    if path.exists():
        return
    why = record_refusal(run)
    if why is not None:
        print(f"ailens: no {path} ({why})", file=sys.stderr)
        return
    if any(v is not None for v in (args.tolerance, args.min_share, args.phase_key)):
        from ..analysis.run_analysis import analyze

        a = analyze(run)  # the record is of the run's own settings, as `history add` makes it
    # The record analyses every rank's trace and replays up to 4000 steps per what-if
    # target: seconds on a long run. Say so before the wait.
    print(f"ailens: writing {path} (the run's signature record, {len(a.step_end_s):,} steps; "
          "--no-record skips it)", file=sys.stderr)  # fmt: skip
    try:
        write_record(args.run_dir, signature_record(a))
    except OSError as e:
        print(f"WARNING: cannot write {path} ({e.strerror})", file=sys.stderr)
    except ValueError as e:
        print(f"WARNING: no {path}: {e}", file=sys.stderr)
    else:
        print(f"ailens: wrote {path} (the run's signature record)", file=sys.stderr)


def cmd_predict(args) -> int:
    from ..report.rows import predict_dict
    from ..report.text import format_forecast

    a = analyze_args(args, load_run_dir(args))
    if args.json:
        emit(json.dumps(predict_dict(a), indent=2))
    else:
        for w in a.warnings:
            print(f"WARNING: {w}", file=sys.stderr)
        emit(format_forecast(a))
    return 0
