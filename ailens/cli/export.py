"""``ailens export``: the run as a Chrome/Perfetto trace."""

from __future__ import annotations

import sys
from pathlib import Path

from ._common import add_analysis_opts, add_run_dir, analyze_args, load_run_dir


def add_export(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write the run as a Chrome/Perfetto trace",
        description="Export a run as Chrome trace event JSON: one process per rank, compute "
        "gaps and collectives as slices (args: bytes, tick, step, phase, SIMO), ranks aligned in "
        "time. Open it "
        "in https://ui.perfetto.dev or chrome://tracing.",
    )
    add_run_dir(p)
    p.add_argument(
        "--format", choices=("chrome",), default="chrome", help="output format (default chrome)"
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help="output file (default RUN_DIR/trace.json)",
    )
    p.add_argument(
        "--no-phases",
        action="store_true",
        help="skip phase detection (faster on huge runs; slices carry no phase/SIMO args)",
    )
    add_analysis_opts(p)


def cmd_export(args) -> int:
    from ..report.export import write_chrome_trace

    run = load_run_dir(args)
    a = None if args.no_phases else analyze_args(args, run)
    out = args.output or args.run_dir / "trace.json"
    n = write_chrome_trace(run, out, a)
    for w in run.warnings:
        print(f"WARNING: {w}", file=sys.stderr)
    print(
        f"ailens: wrote {n:,} events for {len(run.ranks)} ranks to {out} "
        "(open in https://ui.perfetto.dev or chrome://tracing)",
        file=sys.stderr,
    )
    return 0
