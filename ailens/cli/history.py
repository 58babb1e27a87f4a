"""``ailens history`` and ``ailens fit``: store runs' signature records, learn step time
from them (docs/learned.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ._common import CliError, emit, positive_int


def add_history(sub) -> None:
    p = sub.add_parser(
        "history",
        help="store runs' signature records in a history database and list them",
        description="`history add RUN_DIR...` writes each run's signature record "
        "(RUN_DIR/signature.json: per-phase work and bytes, layout, platform, step time) when "
        "`ailens report` has not already written it, and "
        "stores it in an SQLite history; `history list` shows the stored runs. See "
        "docs/learned.md.",
    )
    hs = p.add_subparsers(dest="history_command", metavar="ACTION", required=True)
    for name in ("add", "list"):
        h = hs.add_parser(name, help="store runs" if name == "add" else "list stored runs")
        h.add_argument(
            "--history",
            type=Path,
            default=Path("ailens-history.sqlite"),
            metavar="H.sqlite",
            help="history database (default ./ailens-history.sqlite; created when missing)",
        )
        if name == "list":
            h.add_argument("--json", action="store_true", help="print the stored records as JSON")
            continue
        h.add_argument(
            "runs",
            nargs="+",
            type=Path,
            metavar="RUN_DIR",
            help="run directories (or signature.json files) to store",
        )
        h.add_argument("--job", default=None, help="name of what was trained (default: "
                       "framework, parameter count, batch size and collective sizes)")  # fmt: skip
        h.add_argument(
            "--mode",
            choices=("weak", "strong"),
            default=None,
            help="how the job scales with ranks (default weak: per-rank batch fixed)",
        )
        h.add_argument("--batch-size", type=positive_int, default=None, metavar="N",
                       help="per-rank batch size when the run did not record it")  # fmt: skip
        h.add_argument("--platform", default=None, metavar="NAME",
                       help="node type name (default: CPU model, cores, memory); a cluster "
                       "platform's label (dgx1-v100, dgx-a100, ...) names the GPUs it ran on for "
                       "the cluster what-if (its source platform, and device speed between "
                       "two labels' runs of a job)")  # fmt: skip
        h.add_argument(
            "--rebuild",
            action="store_true",
            help="rebuild RUN_DIR/signature.json from the traces and replace a stored run",
        )


def add_fit(sub) -> None:
    p = sub.add_parser(
        "fit",
        help="learn step time across layouts and platforms from a run history",
        description="Fit predictors of a run's step time on another layout or platform from "
        "the runs stored in a history: the analytic what-if (baseline), ridge regression and "
        "gradient-boosted trees on its residual, and an FI-Net-style network (needs torch: "
        "pip install ailens[learn]). "
        "Configurations are split so that none is in both training and validation; the "
        "learner with the lowest validation error is kept, and the model file says which.",
    )
    p.add_argument("--history", type=Path, required=True, metavar="H.sqlite",
                   help="history database from `ailens history add`")  # fmt: skip
    p.add_argument("-o", "--output", type=Path, required=True, metavar="MODEL.json",
                   help="model file to write (JSON)")  # fmt: skip
    p.add_argument(
        "--learners",
        default="ridge,gbt,finet",
        help="comma-separated learners to try besides the analytic baseline "
        "(default ridge,gbt,finet)",
    )
    p.add_argument("--seed", type=int, default=0, help="split and initialisation seed")


def cmd_history(args) -> int:
    from ..tools.history import History, HistoryError, format_rows

    try:
        with History(args.history) as hist:
            if args.history_command == "list":
                if args.json:
                    emit(json.dumps(hist.records(), indent=1))
                else:
                    emit(format_rows(hist.rows()))
                return 0
            added = 0
            for path in args.runs:
                rec = _record_of(path, args)
                if hist.add(rec, replace=args.rebuild):
                    added += 1
                    print(f"ailens: stored {path} as job {rec['job']!r}", file=sys.stderr)
                else:
                    print(f"ailens: {path}: already stored (run {rec['run_id']}); --rebuild "
                          "replaces it", file=sys.stderr)  # fmt: skip
    except HistoryError as e:
        raise CliError(str(e)) from None
    print(f"ailens: {added} runs added to {args.history}", file=sys.stderr)
    return 0


def _record_of(path: Path, args) -> dict:
    """The signature record of a run directory (written when missing, or with --rebuild
    or any of --job/--mode/--batch-size/--platform) or of a signature.json file."""
    from ..tools.signature_record import RECORD_FILE, RecordError, run_record, write_record

    try:
        rec, made = run_record(path, job=args.job, mode=args.mode, batch_size=args.batch_size,
                               platform=args.platform, rebuild=args.rebuild)  # fmt: skip
        if made:
            try:
                write_record(path, rec)
            except OSError as e:  # a read-only run directory: the history still gets the record
                print(f"WARNING: {path}: cannot write {RECORD_FILE} ({e.strerror})",
                      file=sys.stderr)  # fmt: skip
        return rec
    except (RecordError, ValueError) as e:
        raise CliError(str(e) if str(path) in str(e) else f"{path}: {e}") from None


def cmd_fit(args) -> int:
    from ..tools.history import History, HistoryError
    from ..tools.learn import LearnError, fit_model, format_fit, save_model

    if not args.history.is_file():
        raise CliError(f"{args.history}: no such history (make one with `ailens history add`)")
    learners = [x.strip() for x in args.learners.split(",") if x.strip()]
    try:
        with History(args.history) as hist:
            records = hist.records()
        model = fit_model(records, learners=learners, seed=args.seed)
    except (HistoryError, LearnError) as e:
        raise CliError(str(e)) from None
    save_model(model, args.output)
    emit(format_fit(model))
    print(f"ailens: wrote {args.output}", file=sys.stderr)
    return 0
