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
from ._io import write_text

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
  ailens history add runs/demo                store the run's signature record in a history
  ailens probe -o node.json                   describe this node with micro-benchmarks
  ailens fit --history H.sqlite -o model.json learn step time from the history
  ailens forecast LOG --at 5%,10%             forecast any run from its log (MLPerf, CSV, run dir)
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
        "--scaling",
        dest="mode",
        choices=("weak", "strong"),
        default=None,
        help="weak: per-rank batch stays the same (DDP default); strong: the global batch is "
        "split over more ranks (default weak, or a job description's 'scaling')",
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
        "A partial run (a killed rank) still reports, with a warning saying what is missing. "
        "When RUN_DIR/signature.json (the run's signature record, see `history`) is missing, "
        "report also writes it, once: the run itself never does, so closing costs it nothing.",
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
    p.add_argument(
        "--no-record",
        action="store_true",
        help="do not write RUN_DIR/signature.json when it is missing (its analytic what-if "
        "grid takes a while on long runs)",
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
        help="predicted step and total time at other rank counts (or of a job on GPU platforms)",
        description="Predict step time, total time, speedup, efficiency and % communication "
        "at other rank counts, ranks per node, cores and threads per rank: compute scaled by "
        "the cores each rank's threads get, collectives by an alpha-beta model of the run's "
        "transport (fitted on its own collectives, or measured by `ailens calibrate`). "
        "Every assumption is listed with the result; see docs/whatif.md. A signature.json or a "
        "job description (or a run directory with --cluster) is predicted on GPU platforms "
        "instead: compute at the batch per device, DDP's bucketed allreduces overlapping the "
        "backward pass (NCCL model), the slowest device.",
    )
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR|SIGNATURE.json|JOB.json",
        type=Path,
        help="a run directory, the signature.json a run wrote, or a job description "
        "(JSON, docs/whatif.md: gradient bytes, buckets, measured step at a batch per device)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of rows: ranks, step_time_s, total_time_s, "
        "speedup, efficiency, comm_pct, the target layout and its assumptions "
        "(cluster rows add platform, nodes, batch_per_device, terms)",
    )
    _add_whatif_opts(p, ranks_required=False)
    g = p.add_argument_group(
        "cluster (GPU platforms, docs/whatif.md)",
        "A signature.json or a job description is always predicted on a GPU platform; a run "
        "directory is when --cluster is given.",
    )
    g.add_argument(
        "--cluster",
        default=None,
        metavar="PLATFORM",
        help="target platform: a label (datasheet: dgx1-v100, dgx2-v100, dgx-a100, "
        "azure-nd-a100-v4, dgx-h100, pcie-node; fitted on public nccl-tests data: ndv4-echo, "
        "a100-vtrain, dgx1-v100-vtrain) or a platform JSON (ailens calibrate --from-nccl-tests); "
        "default: the job description's 'platform'. --platform given a label or a file with "
        "'devices_per_node' is taken as --cluster",
    )
    g.add_argument(
        "--global-batch",
        type=_positive_float,
        default=None,
        metavar="N",
        help="strong scaling: the global batch split over the devices (default: the job's "
        "batch per device x its ranks)",
    )
    g = p.add_argument_group("learned model (docs/learned.md)")
    g.add_argument(
        "--model",
        type=Path,
        default=None,
        metavar="MODEL",
        help="also predict with a model from `ailens fit` (shown beside the analytic one; "
        "JSON rows get learned_step_time_s and learned_model)",
    )
    g.add_argument(
        "--platform",
        type=Path,
        default=None,
        metavar="P.json",
        help="target node described by `ailens probe` (its usable cores and CPU quota); a "
        "cluster platform label or JSON (keys devices_per_node, intra) is used as --cluster",
    )
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

    _add_learn_commands(sub)
    _add_forecast_command(sub)
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

    args.mode = args.mode or "weak"
    run = _load(args)
    a = _analyze(args, run)
    rows = _whatif(args, a, args.ranks or default_whatif_ranks(a.ranks), strict=False)
    if args.html is not None:
        from ._html import render_html

        page = render_html(a, rows, whatif_mode=args.mode, top=args.top)
        write_text(args.html, page)
        print(f"ailens: wrote {args.html}", file=sys.stderr)
    if args.json:
        _print(json.dumps(report_dict(a, rows, whatif_mode=args.mode, top=args.top), indent=2))
    else:
        _print(format_report(a, rows, whatif_mode=args.mode, top=args.top))
    if not args.no_record:
        _write_missing_record(args, run, a)
    return 0


def _write_missing_record(args, run, a) -> None:
    """Write RUN_DIR/signature.json when it is missing and the run allows it (see
    ``record_refusal``). The report is already printed: a record that cannot be made is a
    warning, not a failed report."""
    from ._signature_record import RECORD_FILE, record_refusal, signature_record, write_record

    path = args.run_dir / RECORD_FILE
    if path.exists():
        return
    why = record_refusal(run)
    if why is not None:
        print(f"ailens: no {path} ({why})", file=sys.stderr)
        return
    if any(v is not None for v in (args.tolerance, args.min_share, args.phase_key)):
        from ._analysis import analyze

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

    _cluster_platform_flag(args)
    job = _job_input(args)
    if job is not None or args.cluster is not None:
        return _cmd_whatif_cluster(args, job)
    if args.global_batch is not None:
        raise CliError(
            "--global-batch applies to cluster what-ifs (a job description, a "
            "signature.json, or --cluster PLATFORM); use --mode strong here"
        )
    args.mode = args.mode or "weak"
    model, platform = _learned_inputs(args)
    a = _analyze(args, _load(args))
    if not a.n_ticks:
        raise CliError(f"{args.run_dir}: no collective recorded on every rank; nothing to scale")
    rows = _whatif(args, a, args.ranks or default_whatif_ranks(a.ranks))
    learned = _learned(args, a, rows, model, platform) if model is not None else None
    if args.json:
        out = whatif_dicts(rows)
        for d, v in zip(out, learned or (), strict=False):
            d.update(learned_step_time_s=v, learned_model=model["best"])
        _print(json.dumps(out, indent=2))
    else:
        for w in a.warnings:
            print(f"WARNING: {w}", file=sys.stderr)
        _print(format_whatif(rows, mode=args.mode, ranks_now=a.ranks))
        if learned is not None:
            _print(_format_learned(rows, learned, model))
    return 0


def _cluster_platform_flag(args) -> None:
    """--platform given a cluster platform (a default label, or JSON with devices_per_node)
    is --cluster; an `ailens probe` descriptor stays --platform."""
    from ._platforms import platform_labels

    p = args.platform
    if p is None:
        return
    cluster = str(p) in platform_labels()
    if not cluster and p.is_file():
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            doc = None  # reported by the probe reader below
        cluster = isinstance(doc, dict) and "devices_per_node" in doc
    if cluster:
        if args.cluster is not None and args.cluster != str(p):
            raise CliError(f"--platform {p} and --cluster {args.cluster}: give one platform")
        args.cluster, args.platform = str(p), None


def _job_input(args):
    """The job a signature.json or job description names (None for a run directory)."""
    from ._job import JobError, job_from_signature, load_job

    path = args.run_dir
    if path.is_dir():
        return None
    if not path.exists():
        raise CliError(f"{path}: no such run directory, signature.json or job description")
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise CliError(f"{path}: cannot read ({e.strerror})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise CliError(
            f"{path}: not a run directory and not JSON ({e}); give a run directory, "
            "a signature.json or a job description (docs/whatif.md)"
        ) from None
    try:
        if isinstance(doc, dict) and doc.get("format") == "ailens-signature":
            return job_from_signature(doc, str(path))
        return load_job(path)
    except JobError as e:
        raise CliError(str(e)) from None


def _cmd_whatif_cluster(args, job) -> int:
    """The cluster what-if (ailens/_cluster.py) of a job description, a signature, or a run
    directory's features (--cluster)."""
    from ._cluster import predict
    from ._job import JobError, job_from_features
    from ._platforms import load_platform

    for flag, v in (
        ("--threads-per-rank", args.threads_per_rank),
        ("--cores-per-node", args.cores_per_node),
        ("--model", args.model),
        ("--calibration", args.calibration),
        ("--platform", args.platform),
    ):
        if v is not None:
            raise CliError(f"{flag} describes a CPU node of a run-directory what-if; a cluster "
                           "what-if takes --cluster PLATFORM and --ranks-per-node")  # fmt: skip
    if job is None:
        from ._whatif import features

        a = _analyze(args, _load(args))
        try:
            job = job_from_features(features(a), str(args.run_dir))
        except (JobError, ValueError) as e:
            raise CliError(str(e)) from None
    try:
        platform = load_platform(args.cluster) if args.cluster is not None else None
        ranks = args.ranks or sorted({job.ranks, 1, 2, 4, 8, 16, 32, 64})
        rows = predict(job, ranks, platform, ranks_per_node=args.ranks_per_node,
                       scaling=args.mode, global_batch=args.global_batch)  # fmt: skip
    except ValueError as e:
        msg = str(e)
        raise CliError(msg if str(args.run_dir) in msg else f"{args.run_dir}: {msg}") from None
    if args.json:
        _print(json.dumps([r.to_dict() for r in rows], indent=2))
    else:
        _print(_format_cluster(job, rows))
    return 0


def _format_cluster(job, rows) -> str:
    r0 = rows[0]
    b = f"{job.batch_per_device:g}" if job.batch_per_device else "?"
    lines = [
        f"Cluster what-if of {job.name} ({r0.scaling} scaling) on {r0.platform}; measured: "
        f"{job.step_s * 1e3:.4g} ms per step at {job.ranks} device(s), batch {b} per device",
        "ranks  nodes  batch/dev   step ms  compute ms  exposed comm ms  speedup  efficiency",
    ]
    for r in rows:
        bd = f"{r.batch_per_device:g}" if r.batch_per_device else "-"
        lines.append(
            f"{r.ranks:>5}  {r.nodes:>5}  {bd:>9}  {r.step_time_s * 1e3:>8.2f}  "
            f"{r.compute_step_s * 1e3:>10.2f}  {r.comm_step_s * 1e3:>15.3f}  "
            f"{r.speedup:>7.2f}  {r.efficiency:>9.1%}"
        )
    lines.append("Step = " + " + ".join(t.name for t in r0.terms) + ". Assumptions:")
    seen: set = set()
    for r in rows:
        for a in r.assumptions:
            if a not in seen:
                seen.add(a)
                lines.append(f"  - {a}")
    return "\n".join(lines)


def _learned_inputs(args) -> tuple[dict | None, dict | None]:
    """The --model and --platform files, checked; --platform sets the target's cores."""
    from ._learn import LearnError, load_model
    from ._probe import check_platform

    model = platform = None
    if args.model is not None:
        try:
            model = load_model(args.model)
        except LearnError as e:
            raise CliError(str(e)) from None
    if args.platform is not None:
        try:
            platform = check_platform(json.loads(args.platform.read_text()), str(args.platform))
        except OSError as e:
            raise CliError(f"{args.platform}: cannot read platform ({e.strerror})") from None
        except ValueError as e:
            raise CliError(
                str(e) if str(args.platform) in str(e) else f"{args.platform}: {e}"
            ) from None
        if args.cores_per_node is None:
            args.cores_per_node = float(platform["usable_cores"])
    return model, platform


def _learned(args, a, rows, model: dict, platform: dict | None) -> list[float]:
    """The learned model's step time on each what-if row's target."""
    from ._learn import predict, target
    from ._signature_record import signature_record

    src = signature_record(a, mode=args.mode, analytic_grid=False)
    node = (platform or {}).get("node") or {}
    out = []
    for r in rows:
        if platform is not None:
            aff, quota = len(node.get("affinity") or []) or None, node.get("cpu_quota")
        elif args.cores_per_node is not None:  # a node of exactly that many cores
            aff, quota = None, None
        else:  # the run's own node
            aff, quota = src["platform"]["affinity_cores"], src["platform"]["cpu_quota"]
        tgt = target(r.ranks, r.ranks_per_node, r.threads_per_rank, r.cores_per_node,
                     affinity=aff, quota=quota)  # fmt: skip
        out.append(predict(model, src, tgt, r.step_time_s) if r.step_time_s > 0 else 0.0)
    return out


def _format_learned(rows, learned: list[float], model: dict) -> str:
    t = model["trained_on"]
    val = model["validation_mape"]
    lines = [
        "",
        f"Learned model ({model['best']}; validation MAPE {val[model['best']]:.1f} % vs "
        f"analytic {val['analytic']:.1f} %; trained on {t['runs']} runs of "
        f"{len(t['jobs'])} jobs):",
        "ranks  threads  cores  analytic step  learned step",
    ]
    for r, v in zip(rows, learned, strict=True):
        lines.append(f"{r.ranks:>5}  {r.threads_per_rank:>7}  {r.cores_per_node:>5g}  "
                     f"{r.step_time_s * 1e3:>10.2f} ms  {v * 1e3:>9.2f} ms")  # fmt: skip
    return "\n".join(lines)


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


# --------------------------------------------------------------------------- learning from history


def _add_learn_commands(sub) -> None:
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
        h.add_argument("--batch-size", type=_positive_int, default=None, metavar="N",
                       help="per-rank batch size when the run did not record it")  # fmt: skip
        h.add_argument("--platform", default=None, metavar="NAME",
                       help="node type name (default: CPU model, cores, memory)")  # fmt: skip
        h.add_argument(
            "--rebuild",
            action="store_true",
            help="rebuild RUN_DIR/signature.json from the traces and replace a stored run",
        )

    p = sub.add_parser(
        "probe",
        help="describe this node (compute, memory bandwidth, collectives) with micro-benchmarks",
        description="Short micro-benchmarks (numpy compute per core and on all usable cores, "
        "memory bandwidth; collective alpha/beta when launched with ranks) written as a "
        "platform descriptor for `ailens whatif --platform` and `ailens fit`.",
    )
    p.add_argument("-o", "--output", type=Path, default=None, metavar="P.json",
                   help="write the descriptor here (default: print it)")  # fmt: skip
    p.add_argument("--name", default=None, help="platform name (default: CPU model and cores)")
    p.add_argument("--seconds", type=_positive_float, default=0.5, metavar="S",
                   help="seconds per micro-benchmark (default 0.5)")  # fmt: skip

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


def _cmd_history(args) -> int:
    from ._history import History, HistoryError, format_rows

    try:
        with History(args.history) as hist:
            if args.history_command == "list":
                if args.json:
                    _print(json.dumps(hist.records(), indent=1))
                else:
                    _print(format_rows(hist.rows()))
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
    from ._signature_record import (
        RECORD_FILE,
        RecordError,
        read_record,
        signature_record,
        write_record,
    )

    given = any(v is not None for v in (args.job, args.mode, args.batch_size, args.platform))
    try:
        if path.is_file():
            if given or args.rebuild:
                raise CliError(f"{path}: --job/--mode/--batch-size/--platform/--rebuild need "
                               "the run directory, not a record file")  # fmt: skip
            return read_record(path)
        if (path / RECORD_FILE).is_file() and not (given or args.rebuild):
            return read_record(path)
        from ._analysis import analyze
        from ._trace import load_run

        a = analyze(load_run(path))
        rec = signature_record(
            a, job=args.job, mode=args.mode, batch_size=args.batch_size, platform=args.platform
        )
        try:
            write_record(path, rec)
        except OSError as e:  # a read-only run directory: the history still gets the record
            print(f"WARNING: {path}: cannot write {RECORD_FILE} ({e.strerror})", file=sys.stderr)
        return rec
    except (RecordError, ValueError) as e:
        if isinstance(e, CliError):
            raise
        raise CliError(str(e) if str(path) in str(e) else f"{path}: {e}") from None


def _cmd_probe(args) -> int:
    from ._probe import probe

    desc = probe(seconds=args.seconds, name=args.name)
    if desc is None:  # a rank other than 0 of a launched probe
        return 0
    text = json.dumps(desc, indent=1)
    if args.output is None:
        _print(text)
    else:
        write_text(args.output, text + "\n")
        print(f"ailens: wrote {args.output}", file=sys.stderr)
    return 0


def _cmd_fit(args) -> int:
    from ._history import History, HistoryError
    from ._learn import LearnError, fit_model, format_fit, save_model

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
    _print(format_fit(model))
    print(f"ailens: wrote {args.output}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- forecast (any log)


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


def _add_forecast_command(sub) -> None:
    p = sub.add_parser(
        "forecast",
        help="forecast any run from its log: an ailens run dir, an MLPerf log, a CSV",
        description="Forecast the end of a run that ran with or without ailens, from its "
        "timeline: an ailens run directory, an MLPerf/MLCommons log (:::MLLOG, :::MLL; gzip "
        "accepted) or a CSV of step,end_s[,section[,begin_s]] rows (a row with section 'end' "
        "says when the run ended). The forecast is the live Lens's own (ailens."
        "forecast_timeline), shown with its 95%% interval, its parts and the progress-bar "
        "and Composer ETAs beside it. See docs/forecast.md.",
    )
    p.add_argument("log", type=Path, metavar="LOG", help="run directory, MLPerf log or CSV")
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
        type=_positive_int,
        metavar="N",
        help="how many steps the whole run has, where the log does not say (steps as the "
        "log counts them: MLPerf epochs, blocks or evaluation intervals)",
    )
    n.add_argument(
        "--epochs",
        type=_positive_float,
        metavar="N",
        help="how many epochs the whole run has (converted with the steps per epoch read "
        "from the log)",
    )
    p.add_argument(
        "--no-init",
        action="store_true",
        help="MLPerf: count from run_start (what MLPerf scores) instead of init_start",
    )
    p.add_argument("--json", action="store_true", help="print the forecasts as JSON")


def _cmd_forecast(args) -> int:
    from ._logs import LogError, read_timeline
    from .model.timeline import forecast_timeline

    try:
        tl = read_timeline(
            args.log,
            total_steps=args.total_steps,
            epochs=args.epochs,
            include_init=not args.no_init,
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
        _print(json.dumps(doc, indent=2))
        return 0
    _print("\n".join(_forecast_text(args.log, tl, result, rows)))
    return 0


def _forecast_text(path, tl, result, rows) -> list[str]:
    from ._io import fmt_s

    n = tl.total_steps
    what = {"mlperf": "MLPerf log", "csv": "CSV", "ailens": "ailens run"}.get(tl.source, "log")
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
        out.append(
            "  beside it      progress bar "
            + (fmt_s(bar, "compact") if bar is not None else "n/a")
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
    from ._io import fmt_s

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


_COMMANDS = {
    "report": _cmd_report,
    "predict": _cmd_predict,
    "whatif": _cmd_whatif,
    "export": _cmd_export,
    "history": _cmd_history,
    "probe": _cmd_probe,
    "fit": _cmd_fit,
    "forecast": _cmd_forecast,
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
