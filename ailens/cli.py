"""The ``ailens`` command: report, predict, whatif, export and calibrate a saved run.

Every command reads a run directory (the ``rank-NNNNN.ailens`` files a training run wrote).
Expected problems (missing, partial or mismatched run directory, unwritable output, missing
optional dependency) print one line ``ailens: error: ...`` naming the file, and exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import __version__

__all__ = ["main"]

EXIT_USAGE = 2

_DESCRIPTION = """\
Make distributed training explain itself. Point a command at the run directory your
training run wrote (rank-NNNNN.ailens files, default ./ailens-run).

  ailens report runs/demo                     phase tables, comm/compute split, forecast, what-if
  ailens report runs/demo --html report.html  the same as one self-contained web page with plots
  ailens predict runs/demo                    total-time forecast and its interval
  ailens whatif runs/demo --ranks 8,16,32     predicted step/total time at other rank counts
  ailens export runs/demo -o trace.json       Chrome/Perfetto trace (ui.perfetto.dev, chrome://tracing)
  ailens calibrate ...                        measure collective costs for the what-if model
"""


class CliError(Exception):
    """An expected problem: printed as one line, exit code 2."""


# --------------------------------------------------------------------------- arguments


def _rank_list(text: str) -> list[int]:
    try:
        ranks = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of rank counts, e.g. 1,2,4,8"
        ) from None
    if not ranks or any(r < 1 for r in ranks):
        raise argparse.ArgumentTypeError(
            f"{text!r}: rank counts must be integers >= 1, e.g. 1,2,4,8"
        )
    return sorted(set(ranks))


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = 0.0
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0")
    return v


def _share(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in [0, 1), e.g. 0.01 for 1%")
    return v


def _add_run_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=Path,
        help="run directory written by a training run (holds rank-NNNNN.ailens files)",
    )


def _add_analysis_opts(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("phase detection")
    g.add_argument(
        "--tolerance",
        type=int,
        default=None,
        metavar="N",
        help="SIMO tolerance: ticks within ±N of a phase's SIMO join it "
        "(default: the run's setting, 1)",
    )
    g.add_argument(
        "--min-share",
        type=_share,
        default=None,
        metavar="F",
        help="phases under this fraction of the time are dropped from Table 2 (default 0.01)",
    )
    g.add_argument(
        "--phase-key",
        choices=("op", "op+size"),
        default=None,
        help="what ticks must share besides SIMO: the op, or op and payload size magnitude",
    )


def _add_whatif_opts(p: argparse.ArgumentParser, *, ranks_required: bool) -> None:
    g = p.add_argument_group("what-if")
    g.add_argument(
        "--ranks",
        type=_rank_list,
        required=ranks_required,
        default=None,
        metavar="LIST",
        help="comma-separated rank counts, e.g. 1,2,4,8,16"
        + ("" if ranks_required else " (default: powers of two around the run's size)"),
    )
    g.add_argument(
        "--mode",
        choices=("weak", "strong"),
        default="weak",
        help="weak: per-rank batch stays the same (DDP default); strong: the global batch is "
        "split over more ranks (default weak)",
    )
    g.add_argument(
        "--ranks-per-node",
        type=_positive_int,
        default=None,
        metavar="N",
        help="ranks per node; collectives that span nodes use the inter-node cost "
        "(default: as many as the run had per host; one node for a single-host run)",
    )
    g.add_argument(
        "--cores-per-node",
        type=_positive_float,
        default=None,
        metavar="N",
        help="cores the ranks of one node may use (default: what the run had: its ranks' "
        "CPU affinity, capped by a cgroup CPU quota)",
    )
    g.add_argument(
        "--threads-per-rank",
        type=_positive_int,
        default=None,
        metavar="N",
        help="intra-op threads of each rank (default: what the run had)",
    )
    g.add_argument(
        "--calibration",
        type=Path,
        default=None,
        metavar="FILE",
        help="collective cost calibration from `ailens calibrate` "
        "(default: RUN_DIR/calibration.json if present)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``ailens`` command."""
    parser = argparse.ArgumentParser(
        prog="ailens",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ailens {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser(
        "report",
        help="phase tables, comm/compute split, skew, forecast and what-if of a run",
        description="Report a run: the paper's Table 2 (phases) and Table 3 (previous vs "
        "current phases, time, % comm/compute), the top phases by time, skew across ranks, the "
        "forecast and a what-if summary. "
        "A partial run (a killed rank) still reports, with a warning saying what is missing.",
    )
    _add_run_dir(p)
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
        type=_positive_int,
        default=5,
        metavar="N",
        help="phases listed by time (default 5)",
    )
    _add_analysis_opts(p)
    _add_whatif_opts(p, ranks_required=False)

    p = sub.add_parser(
        "predict",
        help="forecast of the total training time with its interval",
        description="Print the total-time forecast of a run: predicted total, interval, the "
        "step at "
        "which the signature was ready, and the actual total when the run finished.",
    )
    _add_run_dir(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="print JSON: predicted_total_s, interval_s, signature_step, "
        "signature_fraction, actual_total_s",
    )
    _add_analysis_opts(p)

    p = sub.add_parser(
        "whatif",
        help="predicted step and total time at other rank counts",
        description="Predict step time, total time, speedup, efficiency and % communication "
        "at other rank counts, ranks per node, cores and threads per rank: compute scaled by "
        "the cores each rank's threads get, collectives by an alpha-beta model of the run's "
        "transport (fitted on its own collectives, or measured by `ailens calibrate`). "
        "Every assumption is listed with the result; see docs/whatif.md.",
    )
    _add_run_dir(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of rows: ranks, step_time_s, total_time_s, "
        "speedup, efficiency, comm_pct, the target layout and its assumptions",
    )
    _add_whatif_opts(p, ranks_required=False)
    _add_analysis_opts(p)

    p = sub.add_parser(
        "export",
        help="write the run as a Chrome/Perfetto trace",
        description="Export a run as Chrome trace event JSON: one process per rank, compute "
        "gaps and collectives as slices (args: bytes, tick, step, phase, SIMO), ranks aligned in "
        "time. Open it "
        "in https://ui.perfetto.dev or chrome://tracing.",
    )
    _add_run_dir(p)
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
    _add_analysis_opts(p)

    sub.add_parser(
        "calibrate",
        add_help=False,
        help="measure collective costs for the what-if model (see `ailens calibrate --help`)",
    )
    return parser


# --------------------------------------------------------------------------- commands


def _load(args):
    from ._trace import load_run

    run = load_run(args.run_dir)
    if not any(t.n_events or len(t.steps["step"]) for t in run.ranks):
        raise CliError(
            f"{args.run_dir}: the run recorded no collective and no step yet; nothing to report"
        )
    return run


def _analyze(args, run):
    from ._analysis import analyze

    # None keeps the run's own setting (its LensConfig), so the replayed forecast is the online one.
    return analyze(
        run, tolerance=args.tolerance, min_share=args.min_share, phase_key=args.phase_key
    )


def _calibration(args) -> dict | None:
    """An explicit --calibration file, checked here so a bad one is a clear error. Without
    it the what-if reads RUN_DIR/calibration.json itself when present."""
    path = args.calibration
    if path is None:
        return None
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise CliError(f"{path}: cannot read calibration ({e.strerror})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CliError(f"{path}: not a calibration JSON file ({e})") from None
    if not isinstance(doc, dict):
        raise CliError(f"{path}: not a calibration JSON object (expected keys intra/inter)")
    return doc


def _whatif(args, a, ranks: list[int], *, strict: bool = True):
    from ._whatif import whatif

    if not a.n_ticks:
        return []
    try:
        return whatif(
            a,
            ranks,
            mode=args.mode,
            ranks_per_node=args.ranks_per_node,
            cores_per_node=args.cores_per_node,
            threads_per_rank=args.threads_per_rank,
            calibration=_calibration(args),
        )
    except ValueError as e:  # too few steps to scale: say so; the rest of a report stands
        if strict:
            raise CliError(str(e)) from None
        print(f"WARNING: no what-if: {e}", file=sys.stderr)
        return []


def _print(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _cmd_report(args) -> int:
    from ._report import default_whatif_ranks, format_report, report_dict

    run = _load(args)
    a = _analyze(args, run)
    rows = _whatif(args, a, args.ranks or default_whatif_ranks(a.ranks), strict=False)
    if args.html is not None:
        from ._html import render_html

        page = render_html(a, rows, whatif_mode=args.mode, top=args.top)
        _write_text(args.html, page)
        print(f"ailens: wrote {args.html}", file=sys.stderr)
    if args.json:
        _print(json.dumps(report_dict(a, rows, whatif_mode=args.mode, top=args.top), indent=2))
    else:
        _print(format_report(a, rows, whatif_mode=args.mode, top=args.top))
    return 0


def _cmd_predict(args) -> int:
    from ._report import format_forecast, predict_dict

    a = _analyze(args, _load(args))
    if args.json:
        _print(json.dumps(predict_dict(a), indent=2))
    else:
        for w in a.warnings:
            print(f"WARNING: {w}", file=sys.stderr)
        _print(format_forecast(a))
    return 0


def _cmd_whatif(args) -> int:
    from ._report import default_whatif_ranks, format_whatif, whatif_dicts

    a = _analyze(args, _load(args))
    if not a.n_ticks:
        raise CliError(f"{args.run_dir}: no collective recorded on every rank; nothing to scale")
    rows = _whatif(args, a, args.ranks or default_whatif_ranks(a.ranks))
    if args.json:
        _print(json.dumps(whatif_dicts(rows), indent=2))
    else:
        for w in a.warnings:
            print(f"WARNING: {w}", file=sys.stderr)
        _print(format_whatif(rows, mode=args.mode, ranks_now=a.ranks))
    return 0


def _cmd_export(args) -> int:
    from ._export import write_chrome_trace

    run = _load(args)
    a = None if args.no_phases else _analyze(args, run)
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


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


_COMMANDS = {
    "report": _cmd_report,
    "predict": _cmd_predict,
    "whatif": _cmd_whatif,
    "export": _cmd_export,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``ailens`` and ``python -m ailens``; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "calibrate":
        # The calibrator owns its arguments (it may run under mpiexec/torchrun).
        try:
            from ._calibrate import main as calibrate_main
        except ImportError as e:
            print(
                f"ailens: error: calibrate is not available in this installation ({e})",
                file=sys.stderr,
            )
            return EXIT_USAGE
        return calibrate_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if getattr(args, "tolerance", None) is not None and args.tolerance < 0:
        parser.error(f"--tolerance {args.tolerance}: must be >= 0")
    from ._html import PlotUnavailable
    from ._trace import TraceError

    try:
        return _COMMANDS[args.command](args)
    except (TraceError, CliError, PlotUnavailable) as e:
        print(f"ailens: error: {e}", file=sys.stderr)
    except BrokenPipeError:
        # Output piped into `head`: the reader left; not an error worth a message.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        where = e.filename if e.filename is not None else getattr(args, "run_dir", "")
        print(f"ailens: error: {where}: {e.strerror or e}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - a bug in ailens: one line, traceback on request
        if os.environ.get("AILENS_DEBUG"):
            raise
        print(
            f"ailens: internal error: {type(e).__name__}: {e} (a bug in ailens {__version__}; "
            "rerun with AILENS_DEBUG=1 for the traceback and report it)",
            file=sys.stderr,
        )
        return 1
    return EXIT_USAGE
