"""The signature record: one small self-describing JSON file per run (``signature.json`` in
the run directory) with what the learned predictor needs, so a team's history of runs can
be kept without their traces.

It is derived from ``analyze(load_run(dir))`` and ``predict.whatif.features`` (the same code the
report and the what-if use), never from a re-simulation: per-phase work, bytes, op and
occurrences per step, the per-step compute/comm split, the layout (ranks, ranks per node,
threads per rank, cores), the platform (CPU model, cores, CPU quota, memory, link
parameters), framework, batch size and parameter count when the run recorded them, the
measured step time, and the analytic what-if's predictions on a grid of target layouts
(the learned model's baseline, so it needs no trace).

It is made downstream, never by the run itself (closing a run costs milliseconds): by
``ailens report RUN_DIR`` when the file is missing, and by ``ailens history add RUN_DIR``.

Version history: 1 (first).
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from .._io import read_json_file, write_json

__all__ = [
    "RECORD_FILE",
    "RECORD_VERSION",
    "GRID_RANKS",
    "GRID_THREADS",
    "GRID_CORES",
    "signature_record",
    "write_record",
    "read_record",
    "check_record",
    "record_refusal",
    "run_record",
    "RecordError",
]

RECORD_FILE = "signature.json"
RECORD_FORMAT = "ailens-signature"
RECORD_VERSION = 1
# Target layouts of the stored analytic what-if (the learned model's baseline).
GRID_RANKS = (1, 2, 4, 8)
GRID_THREADS = (1, 2, 4)
GRID_CORES = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0)


class RecordError(ValueError):
    """A signature record that is missing, unreadable or inconsistent (message names the
    file and the fix)."""


def _finite(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def _phases(a) -> list[dict]:
    """Per phase of the run: op, SIMO, occurrences per step, time/compute/comm per
    occurrence, mean work before its collective (counter units, mean over ranks) and its
    mean payload bytes."""
    steps = max(len(a.step_end_s), 1)
    out = []
    for ph in a.table.phases:
        m = a.phase_ids == ph.id
        out.append(
            {
                "id": int(ph.id),
                "op": str(ph.op),
                "simo": int(ph.simo),
                "occurrences": int(ph.weight),
                "per_step": float(ph.weight) / steps,
                "time_per_occurrence_s": float(ph.time_per_occurrence_s),
                "compute_per_occurrence_s": float(ph.compute_per_occurrence_s),
                "comm_per_occurrence_s": float(ph.comm_per_occurrence_s),
                "work_per_occurrence": float(a.work_mean[m].mean()) if m.any() else 0.0,
                "bytes_per_occurrence": float(a.tick_nbytes[m].mean()) if m.any() else 0.0,
                "share": float(ph.share),
            }
        )
    return out


def _analytic_grid(a, prepared) -> dict:
    """The analytic what-if's step time on every grid layout, both scaling modes:
    ``{mode: [[ranks, threads, cores_per_node, step_s], ...]}`` (one node). The run's
    features are extracted once (``prepared``), its collective groups replayed once
    (``whatif_source``) and every target evaluated from them."""
    from ..predict.whatif import whatif, whatif_source

    shared = whatif_source(a, prepared=prepared)

    grid: dict = {"weak": [], "strong": []}
    for mode in grid:
        for th in GRID_THREADS:
            for c in GRID_CORES:
                rows = whatif(
                    a,
                    list(GRID_RANKS),
                    mode=mode,
                    threads_per_rank=th,
                    cores_per_node=c,
                    source=shared,
                )
                for r in rows:
                    grid[mode].append([r.ranks, th, c, r.step_time_s])
    return grid


def _platform(f, node: dict, name: str, accelerator: str | None) -> dict:
    """The record's node: its name, accelerator (a GPU run's, as its integration recorded
    it), CPU, cores and quota, memory, hosts and link fit."""
    lay, link = f.layout, f.link_fit.params
    return {
        "name": name,
        "accelerator": accelerator,
        "cpu_model": f.cpu_model,
        "cores": node.get("cores"),
        "affinity_cores": len(node.get("affinity") or []) or None,
        "cpu_quota": node.get("cpu_quota"),
        "usable_cores": lay.cores_per_node,
        "mem_total_bytes": f.mem_total_bytes,
        "hosts": sorted(set(f.hosts)),
        "link": {
            "alpha_s": link.alpha if link else None,
            "beta_s_per_byte": link.beta if link else None,
            "gamma_s_per_byte": link.gamma if link else None,
            "source": link.source if link else "one rank: no collective moved data",
        },
    }


def _step(f) -> dict:
    """The record's measured step: time, its split, sections and bytes moved."""
    comm_bytes = sum(g.nbytes * g.per_step for g in f.groups)
    return {
        "step_s": f.step_s,
        "step_sd_s": f.step_sd_s,
        "compute_s": f.compute_s,
        "comm_s": f.comm_s,
        "imbalance_s": f.imbalance_s,
        "overlap_s": f.overlap_s,
        "cpu_s": _finite(f.cpu_s),
        "parallelism": _finite(f.parallelism),
        "sections_s": f.sections_s,
        "steps": f.steps,
        "warmup_steps": f.warmup_steps,
        "comm_pct": 100.0 * f.comm_s / f.step_s if f.step_s > 0 else 0.0,
        "comm_bytes": comm_bytes,
    }


def signature_record(
    a,
    *,
    job: str | None = None,
    mode: str | None = None,
    batch_size: int | None = None,
    platform: str | None = None,
    analytic_grid: bool = True,
) -> dict:
    """The signature record of an analysed run (``analyze(load_run(dir))``).

    ``job`` names what was trained (runs of the same job at other layouts or platforms are
    the learned model's training pairs; default: framework, parameter count, batch size and
    the collective sizes); ``mode`` is how the job scales with ranks (``weak``: per-rank
    batch fixed, ``strong``: global work split); ``platform`` names the node it ran on
    (default: CPU model, usable cores and memory, after the accelerator a GPU run recorded).
    ``analytic_grid=False`` leaves out the
    stored what-if grid (when the caller computes the what-if itself)."""
    from ..predict.whatif import prepare

    prepared = prepare(a)
    f = prepared[0]
    meta = a.run.meta
    node = meta.get("node") or {}
    lay = f.layout
    bs = batch_size if batch_size is not None else f.batch_size
    if mode is not None and mode not in ("weak", "strong"):
        raise ValueError(f"mode={mode!r}: choose weak or strong")
    if job is None:
        sizes = ",".join(f"{g.op}:{g.nbytes}" for g in f.groups)
        job = f"{f.framework}|params={f.param_count}|batch={bs}|{sizes}"
    accelerator = f.accelerator
    if platform is None:
        mem = node.get("mem_total_bytes")
        platform = f"{node.get('cpu_model', '?')} x{lay.cores_per_node:g} cores" + (
            f" {mem / 2**30:.0f} GiB" if isinstance(mem, (int, float)) else ""
        )
        if accelerator:
            platform = f"{accelerator} x{lay.ranks_per_node} / {platform}"
    return {
        "format": RECORD_FORMAT,
        "version": RECORD_VERSION,
        "run_id": str(meta.get("run_id", "")),
        "run_dir": str(Path(a.run.path).resolve()),
        "start_time": meta.get("start_time"),
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "ailens_version": meta.get("ailens_version"),
        "job": job,
        "mode": mode or "weak",
        "framework": f.framework,
        "framework_version": f.framework_version,
        "backend": f.backend,
        "transport": f.transport,
        "counter": f.counter,
        "batch_size": bs,
        "param_count": f.param_count,
        "layout": lay.to_dict(),
        "layout_sources": dict(f.layout_sources),
        "platform": _platform(f, node, platform, accelerator),
        "step": _step(f),
        "collectives": [
            {
                "op": g.op,
                "nbytes": g.nbytes,
                "per_step": g.per_step,
                "seconds": g.seconds,
                "overlapped": g.overlapped,
            }
            for g in f.groups
        ],  # fmt: skip
        "phases": _phases(a),
        "analytic": _analytic_grid(a, prepared) if analytic_grid else None,
    }


def check_record(rec: dict, where: str) -> None:
    """Raise RecordError naming ``where`` when the record's key metadata do not hold
    together (a hand-edited or foreign file, a mixed-up run directory)."""
    if not isinstance(rec, dict) or rec.get("format") != RECORD_FORMAT:
        raise RecordError(f"{where}: not an ailens signature record")
    if rec.get("version") != RECORD_VERSION:
        raise RecordError(
            f"{where}: signature record version {rec.get('version')!r}, this ailens reads "
            f"{RECORD_VERSION}; rebuild it with `ailens history add RUN_DIR --rebuild`"
        )
    try:
        lay = rec["layout"]
        ranks, rpn, threads = (
            int(lay["ranks"]),
            int(lay["ranks_per_node"]),
            int(lay["threads_per_rank"]),
        )
        cores = float(lay["cores_per_node"])
        step = float(rec["step"]["step_s"])
        compute = float(rec["step"]["compute_s"])
        hosts = rec["platform"]["hosts"]
        job = rec["job"]
    except (KeyError, TypeError, ValueError) as e:
        raise RecordError(f"{where}: signature record lacks {e}; rebuild with --rebuild") from None
    problems = []
    if ranks < 1 or threads < 1 or not 1 <= rpn <= ranks:
        problems.append(f"layout {ranks} ranks, {rpn} per node, {threads} threads")
    if not cores > 0:
        problems.append(f"{cores} cores per node")
    if not (step > 0 and math.isfinite(step)):
        problems.append(f"step time {step} s")
    if compute > step * 1.5 + 1e-3:
        problems.append(f"compute {compute:.4g} s per step above the step time {step:.4g} s")
    if len(hosts) > ranks or -(-ranks // rpn) != max(len(hosts), 1):
        problems.append(f"{len(hosts)} hosts for {ranks} ranks at {rpn} per node")
    if not isinstance(job, str) or not job:
        problems.append("no job name")
    if problems:
        raise RecordError(
            f"{where}: inconsistent signature record ({'; '.join(problems)}); rebuild it "
            "from the run directory with `ailens history add RUN_DIR --rebuild`"
        )


def write_record(run_dir: str | os.PathLike, rec: dict) -> Path:
    """Write ``rec`` as RUN_DIR/signature.json (atomically)."""
    path = Path(run_dir) / RECORD_FILE
    write_json(path, rec, indent=1, sort_keys=True)
    return path


def record_refusal(run) -> str | None:
    """Why ``ailens report`` does not write RUN_DIR/signature.json for this loaded run (None:
    it does). A record describes a run that ended normally on every rank, whose Lens allowed
    downstream tools to write it (``LensConfig.signature_record``)."""
    if not run.complete:
        return "the run is partial (a rank was killed or is still running)"
    if any(t.info.get("crashed") or t.info.get("disabled") for t in run.ranks):
        return "a rank crashed or had ailens disabled"
    if (run.meta.get("config") or {}).get("signature_record") is False:
        return "the run set signature_record=False"
    return None


def run_record(
    path: Path,
    *,
    job: str | None = None,
    mode: str | None = None,
    batch_size: int | None = None,
    platform: str | None = None,
    rebuild: bool = False,
) -> tuple[dict, bool]:
    """The signature record of a run directory or of a signature.json file (``ailens history
    add``): (record, made). RUN_DIR/signature.json is read when present, unless ``rebuild``
    or any of job/mode/batch_size/platform asks for a new one; a made record is built from
    the traces and not yet written (``write_record``)."""
    given = any(v is not None for v in (job, mode, batch_size, platform))
    if path.is_file():
        if given or rebuild:
            raise RecordError(f"{path}: --job/--mode/--batch-size/--platform/--rebuild need "
                              "the run directory, not a record file")  # fmt: skip
        return read_record(path), False
    if (path / RECORD_FILE).is_file() and not (given or rebuild):
        return read_record(path), False
    from ..analysis.run_analysis import analyze
    from ..record.reader import load_run

    a = analyze(load_run(path))
    rec = signature_record(a, job=job, mode=mode, batch_size=batch_size, platform=platform)
    return rec, True


def read_record(path: str | os.PathLike) -> dict:
    """A signature record from a file or a run directory, checked."""
    p = Path(path)
    p = p / RECORD_FILE if p.is_dir() else p
    rec = read_json_file(
        p,
        what="signature record",
        error=RecordError,
        fix="make it from the run directory with `ailens history add RUN_DIR --rebuild`",
    )
    check_record(rec, str(p))
    return rec
