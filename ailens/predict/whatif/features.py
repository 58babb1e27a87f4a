"""What the what-if reads from one run, extracted once per run.

``prepare(a)`` measures the run (its layout, the per-step compute / exposed-comm split, the
collective groups, the link fit) and returns its ``RunFeatures`` with the ``MeasuredRun``
the replay needs: ``whatif(a, ..., prepared=prepare(a))`` then evaluates any number of
targets from that one extraction. ``RunFeatures.to_dict()`` is also the learned predictor's
feature record (flat JSON).
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

import numpy as np

from ..collectives import Fit, canonical_op, fit_cost_params, transport_of
from .layout import Layout
from .replay import Cpu, measured_spans, replay_sample, unstretch
from .steps import Steps, split_steps

__all__ = ["CommGroup", "MeasuredRun", "Prepared", "RunFeatures", "features", "prepare"]


@dataclass(frozen=True)
class CommGroup:
    """One kind of collective of the training steps: op, bytes, how often per step, its
    pure duration (median over occurrences of the exclusive time on the fastest rank), and
    whether it overlaps compute (began while the next computation went on)."""

    op: str
    nbytes: int
    per_step: float
    seconds: float
    overlapped: bool


@dataclass(frozen=True)
class RunFeatures:
    """What the what-if reads from one run (and the learned predictor's features).

    Times are seconds per training step (post-warm-up steps without evaluation or
    checkpoint sections); ``compute_s`` is the mean over ranks of the time a rank is not
    waiting on a collective, ``imbalance_s`` the slowest rank's excess over that mean,
    ``comm_s`` the exposed collective time of the fastest rank, ``overlap_s`` compute that
    ran while a collective was in flight. ``parallelism`` = CPU time / compute wall time.
    """

    layout: Layout
    layout_sources: dict
    framework: str
    backend: str
    transport: str
    counter: str
    hosts: tuple[str, ...]
    cpu_model: str
    mem_total_bytes: int | None
    steps: int
    warmup_steps: int
    step_s: float
    step_sd_s: float
    compute_s: float
    compute_sd_s: float
    imbalance_s: float
    comm_s: float
    overlap_s: float
    cpu_s: float | None
    parallelism: float | None
    groups: tuple[CommGroup, ...]
    link_fit: Fit
    # The collectives replayed on the run itself (pure durations through the comm queue)
    # against its measured step: how much of the exposed comm the replay explains.
    model_error_pct: float
    batch_size: int | None = None
    param_count: int | None = None
    framework_version: str | None = None
    sections_s: float = 0.0  # evaluation/checkpoint time per step (mean over the run)
    accelerator: str | None = None  # the GPU a CUDA run recorded (its integration's)

    def to_dict(self) -> dict:
        """Flat JSON-ready dict (the learned predictor's feature record)."""
        d = asdict(self)
        d["layout"] = self.layout.to_dict()
        d["hosts"] = list(self.hosts)
        d["groups"] = [asdict(g) for g in self.groups]
        d["link_fit"] = self.link_fit.to_dict()
        return d


def _threads(meta: dict, run_meta: dict, framework: str) -> tuple[int | None, str]:
    """Intra-op threads per rank and where the figure came from."""
    t = run_meta.get("threads")
    if isinstance(t, int) and t >= 1:
        return t, "recorded by the integration"
    env = (meta.get("node") or {}).get("thread_env") or {}
    keys = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"]
    if "keras" in framework or "tensorflow" in framework:
        keys.insert(0, "TF_NUM_INTRAOP_THREADS")
    for k in keys:
        try:
            v = int(str(env.get(k, "")).split(",")[0])
        except ValueError:
            continue
        if v >= 1:
            return v, f"from {k} (not recorded by the integration)"
    return None, ""


def _node_cores(a) -> tuple[float | None, str]:
    """Usable cores of the busiest node: the union of its ranks' affinity, capped by the
    CPU quota."""
    by_host: dict[str, set] = {}
    quota: dict[str, float] = {}
    for host, node in zip(a.hosts, a.nodes, strict=True):
        aff = node.get("affinity")
        cpus = (
            set(aff) if isinstance(aff, list) and aff else set(range(int(node.get("cores") or 0)))
        )
        by_host.setdefault(host, set()).update(cpus)
        q = node.get("cpu_quota")
        if isinstance(q, (int, float)) and q > 0:
            quota[host] = min(quota.get(host, math.inf), float(q))
    if not any(by_host.values()):
        return None, ""
    host = max(by_host, key=a.hosts.count)
    cores = float(len(by_host[host]))
    if host in quota and quota[host] < cores:
        return quota[host], "CPU quota of the node's cgroup"
    return cores, "affinity of the ranks"


@dataclass(frozen=True, kw_only=True)
class MeasuredRun:
    """The per-step arrays the what-if replays, measured once (``prepare``): every target and
    calibration reads them, none writes them."""

    steps: Steps
    notes: tuple[str, ...]
    pure: np.ndarray  # per tick: pure duration (exclusive, fastest rank), s
    ops: np.ndarray  # per tick: op name
    nbytes: np.ndarray  # per tick: bytes
    keys: tuple  # (distinct (op, bytes), each tick's index among them): tick_keys
    steady_ticks: np.ndarray  # per recorded tick: in a training step the what-if replays
    sample: np.ndarray | None  # the replayed steps (replay_sample; None: all of them)
    sampled_span_meas: np.ndarray | None  # with a sample: every step's measured group spans


def tick_keys(ops, nbytes) -> tuple[list, np.ndarray]:
    """The distinct (op, bytes) of the ticks and each tick's index among them."""
    index: dict = {}
    inv = np.fromiter(
        (index.setdefault((o, int(n)), len(index)) for o, n in zip(ops, nbytes, strict=True)),
        dtype=np.int64,
        count=len(ops),
    )
    return list(index), inv


class Prepared(NamedTuple):
    """A run's features and its measured steps, extracted once (``prepare``)."""

    features: RunFeatures
    measured: MeasuredRun


def features(a, *, warmup: int | None = None) -> RunFeatures:
    """Everything the what-if reads from a ``RunAnalysis`` (see :class:`RunFeatures`)."""
    return prepare(a, warmup=warmup).features


def prepare(a, *, warmup: int | None = None) -> Prepared:
    """The run's features and the per-step arrays the what-if replays, extracted once:
    ``whatif(a, ..., prepared=prepare(a))`` for many targets of one run."""
    warm = a.config.warmup_steps if warmup is None else int(warmup)
    meta = a.run.meta
    run_meta = a.run.run_info
    framework = str(meta.get("framework", ""))
    layout, sources, notes = _layout(a, meta, run_meta, framework)
    split = split_steps(a, warm)
    steps = split.steps
    if split.note:
        notes.append(split.note)
    if not len(steps.idx):
        raise ValueError(
            f"{a.run.path}: no training step after the {warm} warm-up steps; nothing to scale"
        )
    pure = np.asarray(a.comm_min_s, dtype=np.float64)  # exclusive comm, fastest rank
    names = np.asarray(a.op_names, dtype=object)
    ops = names[a.tick_op]
    steady = np.isin(split.tick_step, steps.idx)
    per = len(steps.idx)
    fit = fit_cost_params(
        ops[steady],
        a.ranks,
        a.tick_nbytes[steady],
        pure[steady],
        source="fit on this run's collectives",
    )
    compute = float(steps.comp_mean.mean())
    step_s = float(steps.wall0.mean())
    node = meta.get("node") or {}
    feats = RunFeatures(
        layout=layout,
        layout_sources=sources,
        framework=framework,
        backend=str(meta.get("backend", "")),
        transport=transport_of(framework, str(meta.get("backend", ""))),
        counter=a.counter,
        hosts=tuple(a.hosts),
        cpu_model=str(node.get("cpu_model", "")),
        mem_total_bytes=node.get("mem_total_bytes"),
        steps=per,
        warmup_steps=warm,
        step_s=step_s,
        step_sd_s=float(steps.wall0.std(ddof=1)) if per > 1 else 0.0,
        compute_s=compute,
        compute_sd_s=_robust_sd(steps.comp_mean),
        imbalance_s=float((steps.comp_max - steps.comp_mean).mean()),
        comm_s=float(split.exposed.min(axis=1).mean()) if split.exposed.size else 0.0,
        overlap_s=_overlap(steps),
        cpu_s=split.cpu_s,
        parallelism=split.cpu_s / compute if split.cpu_s is not None and compute > 0 else None,
        groups=_comm_groups(ops, a.tick_nbytes, pure, split.async_ticks, steady, per),
        link_fit=fit,
        model_error_pct=_model_error_pct(steps, pure, step_s),
        batch_size=_int_or_none(run_meta.get("batch_size")),
        param_count=_int_or_none(run_meta.get("param_count")),
        framework_version=run_meta.get("framework_version"),
        sections_s=_sections_per_step(a),
        accelerator=run_meta.get("accelerator") or None,
    )
    steps, ops, nbytes, pure = _with_unrecorded_gradients(
        a, feats, steps, ops, a.tick_nbytes, pure, notes
    )
    sample = replay_sample(len(steps.idx))
    run = MeasuredRun(
        steps=steps,
        notes=tuple(notes),
        pure=pure,
        ops=ops,
        nbytes=nbytes,
        keys=tick_keys(ops, nbytes),
        steady_ticks=np.isin(a.tick_step, steps.idx),
        sample=sample,
        sampled_span_meas=None if sample is None else measured_spans(steps),
    )
    return Prepared(feats, run)


def _layout(a, meta: dict, run_meta: dict, framework: str) -> tuple[Layout, dict, list[str]]:
    """The run's layout, where each figure came from, and what was assumed."""
    notes: list[str] = []
    named = [h for h in a.hosts if h]
    rpn = max(named.count(h) for h in set(named)) if named else a.ranks
    sources = {"ranks": "the run", "ranks_per_node": "hostnames of the ranks"}
    threads, t_src = _threads(meta, run_meta, framework)
    cores, c_src = _node_cores(a)
    if cores is None:
        cores, c_src = float(os.cpu_count() or 1), "assumed: this machine's cores (not recorded)"
        notes.append(f"cores per node not recorded: assumed {cores:g} (this machine)")
    if threads is None:
        threads = max(1, int(cores // max(rpn, 1)))
        t_src = "assumed: the node's cores divided among its ranks (not recorded)"
        notes.append(f"threads per rank not recorded: assumed {threads} (cores / ranks per node)")
    sources.update(threads_per_rank=t_src, cores_per_node=c_src)
    return Layout(a.ranks, max(rpn, 1), int(threads), float(cores)), sources, notes


def _comm_groups(ops, nbytes, pure, flag, steady, per: int) -> tuple[CommGroup, ...]:
    """The training steps' collectives by (op, bytes)."""
    groups = []
    for key in sorted(set(zip(ops[steady].tolist(), nbytes[steady].tolist(), strict=True))):
        m = steady & (ops == key[0]) & (nbytes == key[1])
        groups.append(
            CommGroup(
                op=str(key[0]),
                nbytes=int(key[1]),
                per_step=float(m.sum()) / per,
                seconds=float(np.median(pure[m])),
                overlapped=bool(flag[m].mean() > 0.5),
            )
        )
    return tuple(groups)


def _overlap(steps: Steps) -> float:
    """Compute per step that ran while a collective was in flight."""
    overlap = 0.0
    for gl in steps.groups:
        for _, off in gl:
            overlap += float(off[-1]) if len(off) else 0.0
    return overlap / len(steps.idx)


def _model_error_pct(steps: Steps, pure: np.ndarray, step_s: float) -> float:
    """The model on the run itself: the slowest rank's compute plus the replayed comm,
    against the measured step."""
    plain = unstretch(steps, pure, np.zeros((len(pure), 2)), Cpu(math.inf, 1, 0.0))
    replayed = float(np.mean(steps.comp_max + plain.exposed))
    return 100.0 * (replayed - step_s) / step_s if step_s > 0 else 0.0


def _with_unrecorded_gradients(a, feats: RunFeatures, steps, ops, nbytes, pure, notes: list):
    """Horovod skips its gradient allreduces on 1 rank, so the trace has none to scale. With
    the parameter count the integration recorded, the steps, ops, bytes and pure durations
    with the one it would run per step on more ranks: a fused allreduce of the float32
    gradients, waited for at the optimizer step (``notes`` says so)."""
    if a.ranks != 1 or not feats.framework.startswith(("horovod", "keras+horovod")):
        return steps, ops, nbytes, pure
    steady = np.isin(a.tick_step, steps.idx)
    if any(canonical_op(str(o)) == "allreduce" for o in ops[steady]):
        return steps, ops, nbytes, pure
    if not feats.param_count:
        notes.append(
            "1-rank Horovod run: no gradient allreduce recorded and no parameter count: the "
            "gradients' collectives on more ranks are not modelled"
        )
        return steps, ops, nbytes, pure
    n = len(ops)
    k = len(steps.idx)
    size = 4 * int(feats.param_count)
    groups = [[*gl, (np.array([n + i]), np.zeros(1))] for i, gl in enumerate(steps.groups)]
    notes.append(
        f"1-rank Horovod run records no gradient allreduce: one fused allreduce of "
        f"{feats.param_count:,} float32 parameters ({size:,} bytes) per step assumed, "
        "waited for at the optimizer step"
    )
    return (
        replace(steps, groups=groups),
        np.concatenate((ops, np.full(k, "allreduce", dtype=object))),
        np.concatenate((nbytes, np.full(k, size, dtype=np.int64))),
        np.concatenate((pure, np.zeros(k))),
    )


def _int_or_none(v) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _robust_sd(x: np.ndarray) -> float:
    """Step-to-step spread of independent noise: from successive differences (slow drift
    does not count), median-based so one slow step does not dominate."""
    if len(x) < 3:
        return 0.0
    d = np.abs(np.diff(x))
    return float(np.median(d) / 0.6745 / math.sqrt(2))


def _sections_per_step(a) -> float:
    """Evaluation/checkpoint seconds per step over the whole recording (rank 0)."""
    return a.steps.section_total_s[0] / max(len(a.step_end_s), 1)
