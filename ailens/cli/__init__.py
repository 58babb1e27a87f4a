"""The ``ailens`` command: report, predict, whatif, export and calibrate a saved run.

Every command reads a run directory (the ``rank-NNNNN.ailens`` files a training run wrote).
Expected problems (missing, partial or mismatched run directory, unwritable output, missing
optional dependency) print one line ``ailens: error: ...`` naming the file, and exit 2.
One module per command group (``report``, ``whatif``, ``export``, ``history``, ``probe``,
``forecast``, ``calibrate``); this one builds the parser and dispatches.
"""

from __future__ import annotations

import argparse
import os
import sys

from .._version import __version__
from . import export, forecast, history, probe, report, whatif
from ._common import EXIT_USAGE, CliError

__all__ = ["main"]

_DESCRIPTION = """\
Make distributed training explain itself. Point a command at the run directory your
training run wrote (rank-NNNNN.ailens files, default ./ailens-run).

  ailens report runs/demo                     phase tables, comm/compute split, forecast, what-if
  ailens report runs/demo --html report.html  the same as one self-contained web page with plots
  ailens predict runs/demo                    total-time forecast and its interval
  ailens whatif runs/demo --ranks 8,16,32     predicted step/total time at other rank counts
  ailens export runs/demo -o trace.json       Chrome/Perfetto trace (ui.perfetto.dev, chrome://tracing)
  ailens calibrate ...                        measure collective costs for the what-if model
  ailens history add runs/demo                store the run's signature record in a history
  ailens probe -o node.json                   describe this node with micro-benchmarks
  ailens fit --history H.sqlite -o model.json learn step time from the history
  ailens forecast LOG --at 5%,10%             forecast any run from its log (Megatron, DeepSpeed,
                                              nanoGPT, MLPerf, ...: --format list; CSV, run dir)
  ailens forecast LOG --follow                follow a running job's log: one live forecast line
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``ailens`` command."""
    parser = argparse.ArgumentParser(
        prog="ailens",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"ailens {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    report.add_report(sub)
    report.add_predict(sub)
    whatif.add_whatif(sub)
    export.add_export(sub)
    history.add_history(sub)
    probe.add_probe(sub)
    history.add_fit(sub)
    forecast.add_forecast(sub)
    sub.add_parser(
        "calibrate",
        add_help=False,
        help="measure collective costs for the what-if model (see `ailens calibrate --help`)",
    )
    return parser


_COMMANDS = {
    "report": report.cmd_report,
    "predict": report.cmd_predict,
    "whatif": whatif.cmd_whatif,
    "export": export.cmd_export,
    "history": history.cmd_history,
    "probe": probe.cmd_probe,
    "fit": history.cmd_fit,
    "forecast": forecast.cmd_forecast,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``ailens`` and ``python -m ailens``; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "calibrate":
        # The calibrator owns its arguments (it may run under mpiexec/torchrun).
        try:
            from .calibrate import main as calibrate_main
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
    from ..record.trace import TraceError
    from ..report.html import PlotUnavailable

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
