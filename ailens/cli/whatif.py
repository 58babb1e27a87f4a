"""``ailens whatif``: step and total time at other layouts, on the run's own node model or on
GPU platforms (cluster), beside a learned model when one is given."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

from .._io import read_json, read_json_file
from ._common import (
    CliError,
    add_analysis_opts,
    add_whatif_opts,
    analyze_args,
    emit,
    load_run_dir,
    positive_float,
    whatif_rows,
)


def add_whatif(sub) -> None:
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
        "backward pass (NCCL model), the slowest device. Several measured scales of the job "
        "(more inputs, or a run history) are fitted together: the effective network and the "
        "costs beyond the model that they pin down; each row carries its interval.",
    )
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR|SIGNATURE.json|JOB.json",
        type=Path,
        help="a run directory, the signature.json a run wrote, a job description "
        "(JSON, docs/whatif.md: gradient bytes, buckets, measured step at a batch per device), "
        "or a run-history database (ailens history; --job names the job)",
    )
    p.add_argument(
        "more_runs",
        metavar="MORE",
        type=Path,
        nargs="*",
        help="the same job measured at other scales (run directories with --cluster, "
        "signature.json files or job descriptions): the what-if fits what they pin down "
        "(effective network, costs beyond the model) and predicts from all of them",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON list of rows: ranks, step_time_s, total_time_s, "
        "speedup, efficiency, comm_pct, the target layout and its assumptions "
        "(cluster rows add platform, nodes, batch_per_device, terms)",
    )
    add_whatif_opts(p, ranks_required=False)
    g = p.add_argument_group(
        "cluster (GPU platforms, docs/whatif.md)",
        "A signature.json or a job description is always predicted on a GPU platform; a run "
        "directory is when --cluster is given.",
    )
    g.add_argument(
        "--job",
        default=None,
        metavar="NAME",
        help="with a run-history database (ailens history) as input: the job whose records "
        "(every measured scale) the what-if fits (default: the database's only job)",
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
        "--history",
        type=Path,
        default=None,
        metavar="H.sqlite",
        help="a run history (ailens history) whose jobs measured on two device types (GPU "
        "runs that recorded their accelerator, or runs stored under cluster platforms' labels: "
        "history add --platform LABEL) move the device speed from the job's device to "
        "--cluster (default: the input, when it is a history)",
    )
    g.add_argument(
        "--global-batch",
        type=positive_float,
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
    add_analysis_opts(p)


def cmd_whatif(args) -> int:
    from ..report.rows import default_whatif_ranks, whatif_dicts
    from ..report.text import format_whatif

    _cluster_platform_flag(args)
    if args.more_runs or _is_history(args.run_dir):
        return cmd_whatif_measured(args)
    if args.job is not None:
        raise CliError("--job names a job of a run-history database; give the database as input")
    job = _job_input(args)
    if job is not None or args.cluster is not None:
        return cmd_whatif_cluster(args, job)
    if args.global_batch is not None:
        raise CliError(
            "--global-batch applies to cluster what-ifs (a job description, a "
            "signature.json, or --cluster PLATFORM); use --mode strong here"
        )
    if args.history is not None:
        raise CliError(
            "--history moves the device speed of a cluster what-if (a job description, a "
            "signature.json, or --cluster PLATFORM); a run-directory what-if keeps its device"
        )
    args.mode = args.mode or "weak"
    model, platform = _learned_inputs(args)
    a = analyze_args(args, load_run_dir(args))
    if not a.n_ticks:
        raise CliError(f"{args.run_dir}: no collective recorded on every rank; nothing to scale")
    rows = whatif_rows(args, a, args.ranks or default_whatif_ranks(a.ranks))
    learned = None
    if model is not None:
        from ..tools.learn import learned_step_times

        learned = learned_step_times(model, a, rows, platform, mode=args.mode,
                                     cores_per_node=args.cores_per_node)  # fmt: skip
    if args.json:
        out = whatif_dicts(rows)
        for d, v in zip(out, learned or (), strict=False):
            d.update(learned_step_time_s=v, learned_model=model["best"])
        emit(json.dumps(out, indent=2))
    else:
        for w in a.warnings:
            print(f"WARNING: {w}", file=sys.stderr)
        emit(format_whatif(rows, mode=args.mode, ranks_now=a.ranks))
        if learned is not None:
            emit(_format_learned(rows, learned, model))
    return 0


def _cluster_platform_flag(args) -> None:
    """--platform given a cluster platform (a default label, or JSON with devices_per_node)
    is --cluster; an `ailens probe` descriptor stays --platform."""
    from ..predict.platforms import platform_labels

    p = args.platform
    if p is None:
        return
    cluster = str(p) in platform_labels()
    if not cluster and p.is_file():
        doc = read_json(p)  # None when bad: reported by the probe reader below
        cluster = doc is not None and "devices_per_node" in doc
    if cluster:
        if args.cluster is not None and args.cluster != str(p):
            raise CliError(f"--platform {p} and --cluster {args.cluster}: give one platform")
        args.cluster, args.platform = str(p), None


def _job_input(args, path: Path | None = None):
    """The job a signature.json or job description names (None for a run directory)."""
    from ..predict.job import JobError, job_from_signature, load_job

    path = args.run_dir if path is None else path
    if path.is_dir():
        return None
    if not path.exists():
        raise CliError(f"{path}: no such run directory, signature.json or job description")
    doc = read_json_file(
        path,
        what="run directory, signature.json or job description",
        error=CliError,
        fix="give a run directory, a signature.json or a job description (docs/whatif.md)",
    )
    try:
        if doc.get("format") == "ailens-signature":
            return job_from_signature(doc, str(path))
        return load_job(path)
    except JobError as e:
        raise CliError(str(e)) from None


def cmd_whatif_cluster(args, job) -> int:
    """The cluster what-if (ailens/predict/cluster.py) of a job description, a signature, or a run
    directory's features (--cluster)."""
    from ..predict.cluster import predict
    from ..predict.job import JobError, job_from_features
    from ..predict.platforms import load_platform

    _refuse_cpu_flags(args)
    if job is None:
        from ..predict.whatif import features

        a = analyze_args(args, load_run_dir(args))
        try:
            job = job_from_features(features(a), str(args.run_dir))
        except (JobError, ValueError) as e:
            raise CliError(str(e)) from None
    try:
        platform = load_platform(args.cluster) if args.cluster is not None else None
        ranks = args.ranks or sorted({job.ranks, 1, 2, 4, 8, 16, 32, 64})
        rows = predict(job, ranks, platform, ranks_per_node=args.ranks_per_node,
                       scaling=args.mode, global_batch=args.global_batch,
                       device_speed=_device_speed(args.history, job))  # fmt: skip
    except ValueError as e:
        msg = str(e)
        raise CliError(msg if str(args.run_dir) in msg else f"{args.run_dir}: {msg}") from None
    if args.json:
        emit(json.dumps([r.to_dict() for r in rows], indent=2))
    else:
        emit(_format_cluster(job, rows))
    return 0


def cmd_whatif_measured(args) -> int:
    """The cluster what-if of one job measured at several scales
    (ailens/predict/measured.py): every input a job description, a signature.json or a run
    directory (with --cluster)."""
    from ..predict.cluster import predict
    from ..predict.job import JobError, job_from_features
    from ..predict.measured import predict_measured
    from ..predict.platforms import load_platform
    from ..predict.whatif import features

    _refuse_cpu_flags(args)
    jobs = []
    for path in [args.run_dir, *args.more_runs]:
        if _is_history(path):
            jobs += _history_jobs(path, args.job, args.cluster)
            args.history = args.history or path
            continue
        job = _job_input(args, path)
        if job is None:
            if args.cluster is None:
                raise CliError(
                    f"{path}: a run directory among several measured scales is predicted on "
                    "GPU platforms: give --cluster PLATFORM"
                )
            one = argparse.Namespace(**{**vars(args), "run_dir": path})
            a = analyze_args(one, load_run_dir(one))
            try:
                job = job_from_features(features(a), str(path))
            except (JobError, ValueError) as e:
                raise CliError(str(e)) from None
        jobs.append(job)
    names = ", ".join(str(p) for p in [args.run_dir, *args.more_runs])
    try:
        platform = load_platform(args.cluster) if args.cluster is not None else None
        ranks = args.ranks or sorted({*(j.ranks for j in jobs), 1, 2, 4, 8, 16, 32, 64})
        if len(jobs) == 1:
            rows = predict(jobs[0], ranks, platform, ranks_per_node=args.ranks_per_node,
                           scaling=args.mode, global_batch=args.global_batch,
                           device_speed=_device_speed(args.history, jobs[0]))  # fmt: skip
        else:
            rows = predict_measured(jobs, ranks, platform, ranks_per_node=args.ranks_per_node,
                                    scaling=args.mode, global_batch=args.global_batch)  # fmt: skip
    except ValueError as e:
        raise CliError(f"{names}: {e}") from None
    if args.json:
        emit(json.dumps([r.to_dict() for r in rows], indent=2))
    else:
        base = min(jobs, key=lambda j: j.ranks)
        emit(_format_cluster(base, rows, measured=sorted((j.ranks, j.step_s) for j in jobs)))
    return 0


def _is_history(path: Path) -> bool:
    """Whether ``path`` is a run-history database (an SQLite file)."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def _device_speed(history: Path | None, job):
    """The device-speed model, moved by the jobs of ``history`` measured on two device
    types (None: the shipped model)."""
    if history is None:
        return None
    from ..predict import load_device_speed
    from ..tools.history import measured_ratios

    if not _is_history(history):
        raise CliError(f"{history}: not a run history; make one with `ailens history add`")
    records = _history_records(history)
    return load_device_speed().with_history(measured_ratios(records, job.precision))


def _history_records(path: Path) -> list[dict]:
    """Every record of a run-history database (its errors as the command's)."""
    from ..tools.history import History, HistoryError

    try:
        with History(path) as h:
            return h.records()
    except HistoryError as e:
        raise CliError(str(e)) from None


def _history_jobs(path: Path, name: str | None, target: str | None = None) -> list:
    """The job's records in a run-history database, one per layout (the latest added). Where
    its records name several cluster platforms, those on ``target`` (else on the platform
    with the most): one platform's scales are fitted together; the others' measure the
    device speed (``_device_speed``)."""
    from ..predict.job import JobError, job_from_signature

    records = _history_records(path)
    names = sorted({str(r.get("job")) for r in records})
    if name is None:
        if len(names) != 1:
            raise CliError(
                f"{path}: {len(names)} jobs in the history ({', '.join(names) or 'none'}): "
                "name one with --job"
            )
        name = names[0]
    mine = [r for r in records if str(r.get("job")) == name]
    if not mine:
        raise CliError(f"{path}: no job {name!r} in the history ({', '.join(names)}); see "
                       "ailens history list")  # fmt: skip
    try:
        jobs = [job_from_signature(r, f"{path}:{r.get('run_dir')}") for r in mine]
    except JobError as e:
        raise CliError(str(e)) from None
    on = Counter(j.platform or j.device for j in jobs)  # where each run was measured
    if len(on) > 1:
        keep = target if target in on else on.most_common(1)[0][0]
        others = ", ".join(sorted(str(p) for p in on if p != keep))
        note = (f"the job's runs on {keep} are its measured scales (its runs on {others} "
                "measure the device speed, not its scales)")  # fmt: skip
        jobs = [replace(j, assumptions=(*j.assumptions, note))
                for j in jobs if (j.platform or j.device) == keep]  # fmt: skip
    by_layout = {(j.ranks, j.ranks_per_node): j for j in jobs}  # the latest added
    return list(by_layout.values())


def _refuse_cpu_flags(args) -> None:
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


def _format_cluster(job, rows, measured=None) -> str:
    from ..predict.cluster import TERM_NAMES

    r0 = rows[0]
    b = f"{job.batch_per_device:g}" if job.batch_per_device else "?"
    measured = measured or [(job.ranks, job.step_s)]
    at = ", ".join(f"{s * 1e3:.4g} ms at {q}" for q, s in measured)
    lines = [
        f"Cluster what-if of {job.name} ({r0.scaling} scaling) on {r0.platform}; measured: "
        f"{at} device(s), batch {b} per device",
        "ranks  nodes  batch/dev   step ms  interval ms        compute ms  exposed comm ms  "
        "speedup  efficiency",
    ]
    for r in rows:
        bd = f"{r.batch_per_device:g}" if r.batch_per_device else "-"
        lo = r.step_low_s if r.step_low_s is not None else r.step_time_s
        hi = r.step_high_s if r.step_high_s is not None else r.step_time_s
        span = f"{lo * 1e3:.2f}-{hi * 1e3:.2f}" if hi > lo else "-"
        lines.append(
            f"{r.ranks:>5}  {r.nodes:>5}  {bd:>9}  {r.step_time_s * 1e3:>8.2f}  {span:>17}  "
            f"{r.compute_step_s * 1e3:>10.2f}  {r.comm_step_s * 1e3:>15.3f}  "
            f"{r.speedup:>7.2f}  {r.efficiency:>9.1%}"
        )
    wide = [r for r in rows if r.wide_term]
    if wide:
        r = max(wide, key=lambda r: (r.step_high_s - r.step_low_s) / r.step_time_s)
        lines.append(
            f"Widest interval at {r.ranks} devices: {TERM_NAMES.get(r.wide_term, r.wide_term)} "
            "(assumed); to narrow it, "
            f"measure {r.narrow_by}."
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
    from ..tools.learn import LearnError, load_model
    from ..tools.probe import check_platform

    model = platform = None
    if args.model is not None:
        try:
            model = load_model(args.model)
        except LearnError as e:
            raise CliError(str(e)) from None
    if args.platform is not None:
        doc = read_json_file(
            args.platform,
            what="platform descriptor",
            error=CliError,
            fix=f"write one with `ailens probe -o {args.platform}`",
        )
        try:
            platform = check_platform(doc, str(args.platform))
        except ValueError as e:
            raise CliError(
                str(e) if str(args.platform) in str(e) else f"{args.platform}: {e}"
            ) from None
        if args.cores_per_node is None:
            args.cores_per_node = float(platform["usable_cores"])
    return model, platform


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
