"""What the ``ailens`` commands share: the expected-error type, argument types and option
groups, loading and analysing a run directory, the what-if rows, printing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._io import read_json_file

EXIT_USAGE = 2


class CliError(Exception):
    """An expected problem: printed as one line, exit code 2."""


def rank_list(text: str) -> list[int]:
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


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 1")
    return v


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = 0.0
    if not v > 0 or v != v or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number > 0")
    return v


def share(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in [0, 1), e.g. 0.01 for 1%")
    return v


def add_run_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        type=Path,
        help="run directory written by a training run (holds rank-NNNNN.ailens files)",
    )


def add_analysis_opts(p: argparse.ArgumentParser) -> None:
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
        type=share,
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


def add_whatif_opts(p: argparse.ArgumentParser, *, ranks_required: bool) -> None:
    g = p.add_argument_group("what-if")
    g.add_argument(
        "--ranks",
        type=rank_list,
        required=ranks_required,
        default=None,
        metavar="LIST",
        help="comma-separated rank counts, e.g. 1,2,4,8,16"
        + ("" if ranks_required else " (default: powers of two around the run's size)"),
    )
    g.add_argument(
        "--mode",
        "--scaling",
        dest="mode",
        choices=("weak", "strong"),
        default=None,
        help="weak: per-rank batch stays the same (DDP default); strong: the global batch is "
        "split over more ranks (default weak, or a job description's 'scaling')",
    )
    g.add_argument(
        "--ranks-per-node",
        type=positive_int,
        default=None,
        metavar="N",
        help="ranks per node; collectives that span nodes use the inter-node cost "
        "(default: as many as the run had per host; one node for a single-host run)",
    )
    g.add_argument(
        "--cores-per-node",
        type=positive_float,
        default=None,
        metavar="N",
        help="cores the ranks of one node may use (default: what the run had: its ranks' "
        "CPU affinity, capped by a cgroup CPU quota)",
    )
    g.add_argument(
        "--threads-per-rank",
        type=positive_int,
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


def load_run_dir(args):
    from ..record.reader import load_run

    run = load_run(args.run_dir)
    if not any(t.n_events or len(t.steps["step"]) for t in run.ranks):
        raise CliError(
            f"{args.run_dir}: the run recorded no collective and no step yet; nothing to report"
        )
    return run


def analyze_args(args, run):
    from ..analysis.run_analysis import analyze

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
    return read_json_file(
        path,
        what="calibration",
        error=CliError,
        fix="write one with `ailens calibrate` (a JSON object with keys intra/inter)",
    )


def whatif_rows(args, a, ranks: list[int], *, strict: bool = True):
    from ..predict.whatif import whatif

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


def emit(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
