"""Scaling what-if: a run's step time on another layout of ranks, threads, cores and links.

The model (docs/whatif.md has the derivation and the measured accuracy), per step::

    step' = f * k' * (outside + lag(q)) + span' + comm'
    f     = work_scale * speed(source layout) / speed(target layout)
    speed = S(cores one rank's threads get) / I(cores busy on the node)

* ``RunFeatures`` (``features(a)``) is everything the model reads from one run: its
  ``Layout`` (ranks, ranks per node, threads per rank, usable cores per node, and where each
  came from), the per-step compute / exposed-comm split, the CPU-time parallelism, the
  collective groups and the link fit. It is also the feature record the learned predictor
  (issue 16) trains on: ``to_dict()`` is flat JSON.
* Compute: the time a rank is not waiting on a collective, so comm hidden under backward
  (DDP buckets, Horovod's background allreduces) stays compute at 1 rank. ``S`` is the
  thread speed-up, ``I`` the slowdown of sharing a node: measured by ``ailens calibrate``'s
  probe, else from the run or assumed, each labelled. ``k'``: the transport's idle CPU
  (Horovod's loop) taking cores from the compute.
* Collectives: each one's pure duration (exclusive, fastest rank) moves to the target by
  the cost model of the run's transport, ``d' = d + T(q, link') - T(p, link)``, the run's
  own overhead kept. Groups of overlapped collectives are replayed through one queue
  against the compute that overlaps them, the rank's cores shared between its compute and
  its transport's threads (``span'``: compute inside groups, ``comm'``: the waits).
* Every input not measured is an entry of ``assumptions``.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist

import numpy as np

from ._collectives import (
    DEFAULT_INTER,
    DEFAULT_INTRA,
    CostParams,
    Fit,
    canonical_op,
    collective_time,
    fit_cost_params,
    params_from_dict,
    transport_of,
)
from ._io import read_json

__all__ = [
    "Layout",
    "CommGroup",
    "ComputeModel",
    "RunFeatures",
    "ScalingModel",
    "WhatIfRow",
    "features",
    "measured_step_s",
    "merge_calibrations",
    "scaling_model",
    "whatif",
]

# Frameworks whose gradient allreduces run asynchronously under the backward pass.
_ASYNC_FRAMEWORKS = ("torch-ddp", "horovod", "keras+horovod")


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class Layout:
    """Where the ranks of a run sit: the what-if's inputs for one configuration.

    ``cores_per_node``: cores the ranks of one node may use (affinity and CPU quota).
    """

    ranks: int
    ranks_per_node: int
    threads_per_rank: int
    cores_per_node: float

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.ranks_per_node < 1 or self.threads_per_rank < 1:
            raise ValueError(f"{self}: ranks, ranks per node and threads must be >= 1")
        if not self.cores_per_node > 0:
            raise ValueError(f"{self}: cores per node must be > 0")

    @property
    def nodes(self) -> int:
        return -(-self.ranks // self.ranks_per_node)

    @property
    def ranks_on_node(self) -> int:
        """Ranks computing side by side on one (full) node."""
        return min(self.ranks, self.ranks_per_node)

    @property
    def cores_per_rank(self) -> float:
        """Cores one rank's threads get: its threads, or its share when they do not fit."""
        return min(float(self.threads_per_rank), self.cores_per_node / self.ranks_on_node)

    @property
    def busy_cores(self) -> float:
        """Cores of a node computing at once."""
        return min(float(self.ranks_on_node * self.threads_per_rank), self.cores_per_node)

    @property
    def oversubscribed(self) -> bool:
        return self.ranks_on_node * self.threads_per_rank > self.cores_per_node + 1e-9

    @property
    def links(self) -> str:
        """What the collectives cross: "none" (1 rank), "intra" or "inter" node."""
        if self.ranks == 1:
            return "none"
        return "inter" if self.nodes > 1 else "intra"

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            nodes=self.nodes,
            cores_per_rank=self.cores_per_rank,
            busy_cores=self.busy_cores,
            oversubscribed=self.oversubscribed,
            links=self.links,
        )
        return d


# --------------------------------------------------------------------------- features


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


def _node_cores(traces) -> tuple[float | None, str]:
    """Usable cores of the busiest node: the union of its ranks' affinity, capped by the
    CPU quota."""
    by_host: dict[str, set] = {}
    quota: dict[str, float] = {}
    for t in traces:
        node = t.meta.get("node") or {}
        host = str(t.meta.get("host", ""))
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
    host = max(by_host, key=lambda h: sum(1 for t in traces if str(t.meta.get("host")) == h))
    cores = float(len(by_host[host]))
    if host in quota and quota[host] < cores:
        return quota[host], "CPU quota of the node's cgroup"
    return cores, "affinity of the ranks"


def _training_steps(a, warmup: int) -> np.ndarray:
    """Indices of post-warm-up steps (0-based; step s spans step_end[s-1]..step_end[s]) that
    hold no evaluation/checkpoint section on any rank."""
    n = len(a.step_end_s)
    keep = np.zeros(n, dtype=bool)
    keep[max(warmup, 1) :] = True
    for t in a.run.ranks:
        for m in t.marks:
            if m.get("kind") == "section":
                s = int(m.get("step", -1))
                if 0 <= s < n:
                    keep[s] = False
    return np.flatnonzero(keep)


def measured_step_s(a, warmup: int | None = None) -> float:
    """Mean duration of the post-warm-up training steps on rank 0's clock (steps holding an
    evaluation or checkpoint section left out): what the what-if predicts."""
    warm = a.config.warmup_steps if warmup is None else int(warmup)
    idx = _training_steps(a, warm)
    if not len(idx):
        raise ValueError(f"{a.run.path}: no training step after {warm} warm-up steps")
    t = np.asarray(a.run.ranks[0].steps["t_ns"], dtype=np.int64)
    return float(np.mean(t[idx] - t[idx - 1])) / 1e9


def _nonblocking_name(name: str) -> bool:
    """Op names that say the call returned before the collective ended (``Iallreduce``,
    ``allreduce_async``)."""
    n = str(name)
    return n.lower().endswith("async") or (len(n) > 1 and n[0] == "I" and n[1].islower())


def _async_ticks(a, begin: np.ndarray, end: np.ndarray, ops: np.ndarray) -> tuple[np.ndarray, str]:
    """Per tick: True when the caller went on computing while it was in flight, so the wait
    for it happens at a later tick of its group. Seen in the trace when the next collective
    began before it ended (on the median rank), or said by a non-blocking op name; for
    frameworks that reduce gradients asynchronously under the backward pass (DDP, Horovod),
    a step's consecutive allreduces form one group whatever their timing (a bucket that
    finishes before the next one is ready was still hidden under backward)."""
    n = begin.shape[0]
    flag = np.zeros(n, dtype=bool)
    if n < 2:
        return flag, ""
    same_step = a.tick_step[1:] == a.tick_step[:-1]
    if a.ranks > 1:
        flag[:-1] = (np.median(begin[1:] - end[:-1], axis=1) < 0) & same_step
    named = np.array([_nonblocking_name(o) for o in ops])
    flag[:-1] |= named[:-1] & same_step
    fw = str(a.run.meta.get("framework", ""))
    if not fw.startswith(_ASYNC_FRAMEWORKS):
        return flag, ""
    ar = np.array([canonical_op(str(o)) == "allreduce" for o in ops])
    chained = ar[:-1] & ar[1:] & same_step
    flag[:-1] |= chained
    note = (
        f"a step's consecutive allreduces are taken as one asynchronous group ({fw} reduces "
        "gradients under the backward pass): only the wait after the last one is exposed"
    )
    return flag, note if chained.any() else ""


@dataclass(frozen=True)
class _Steps:
    """Per training step (rows) the arrays the prediction replays."""

    idx: np.ndarray  # step indices
    wall0: np.ndarray  # rank 0's step duration (s)
    comp_mean: np.ndarray  # mean over ranks of compute (s)
    comp_max: np.ndarray
    groups: list  # per step: list of (tick indices, begin offsets s)


def _per_step(a, warm: int):
    """Split every training step into compute and exposed comm, per rank. A run without
    step boundaries counts as one step from the Lens's start to its last collective."""
    traces = a.run.ranks
    n = a.n_ticks
    R = len(traces)
    begin = np.zeros((n, R))
    end = np.zeros((n, R))
    for j, t in enumerate(traces):
        b = t.events["t_begin"][:n].astype(np.float64)
        e = t.events["t_end"][:n].astype(np.float64)
        begin[:, j] = b / 1e9
        end[:, j] = np.where(e >= 0, e, b) / 1e9
    names = np.asarray(a.op_names, dtype=object)
    ops = names[a.tick_op] if n else np.zeros(0, dtype=object)
    flag, note = _async_ticks(a, begin, end, ops)
    # Group = a run of ticks each overlapped by the next, plus the tick that closes it.
    gid = np.concatenate(([0], np.cumsum(~flag[:-1]))) if n else np.zeros(0, dtype=np.int64)
    nsteps = len(a.step_end_s)
    no_steps = nsteps == 0
    if no_steps:
        nsteps, idx = 1, np.array([0])
        steps_t = end.max(axis=0, keepdims=True) if n else np.zeros((1, R))
        tick_step = np.zeros(n, dtype=np.int64)
    else:
        idx = _training_steps(a, warm)
        steps_t = np.zeros((nsteps, R))
        for j, t in enumerate(traces):
            st = np.asarray(t.steps["t_ns"][:nsteps], dtype=np.float64) / 1e9
            steps_t[: len(st), j] = st
        tick_step = a.tick_step
    # Exposed comm of a group on a rank: from its last begin to its last end.
    exposed = np.zeros((nsteps, R))
    group_rows: dict[int, list] = {}
    if n:
        starts = np.flatnonzero(np.concatenate(([True], gid[1:] != gid[:-1])))
        stops = np.concatenate((starts[1:], [n]))
        g_step = tick_step[stops - 1]
        keep = g_step < nsteps
        starts, stops, g_step = starts[keep], stops[keep], g_step[keep]
        lone = stops - starts == 1
        waits = np.empty((len(starts), R))
        waits[lone] = np.maximum(end[starts[lone]] - begin[starts[lone]], 0.0)
        for g in np.flatnonzero(~lone).tolist():
            s0, s1 = int(starts[g]), int(stops[g])
            waits[g] = np.maximum(end[s0:s1].max(axis=0) - begin[s1 - 1], 0.0)
        np.add.at(exposed, g_step, waits)  # in tick order, as a loop adds
        for s0, s1, step in zip(starts.tolist(), stops.tolist(), g_step.tolist(), strict=True):
            offsets = np.zeros(1) if s1 - s0 == 1 else (begin[s0:s1] - begin[s0]).mean(axis=1)
            group_rows.setdefault(step, []).append((np.arange(s0, s1), offsets))
    wall = np.zeros((nsteps, R))
    wall[0] = steps_t[0] if no_steps else 0.0
    wall[1:] = np.diff(steps_t, axis=0)
    comp = wall - exposed
    sel = idx[idx < nsteps]
    steps = _Steps(
        idx=sel,
        wall0=wall[sel, 0],
        comp_mean=comp[sel].mean(axis=1),
        comp_max=comp[sel].max(axis=1),
        groups=[group_rows.get(int(s), []) for s in sel],
    )
    if no_steps:
        note = "; ".join(
            x for x in (note, "no step boundaries recorded: the whole recording is one step") if x
        )
    # CPU time per step per rank (counter at step ends), when the counter is CPU time.
    cpu = None
    if a.counter == "cpu-ns" and not no_steps and len(sel):
        per = []
        for t in traces:
            w = np.asarray(t.steps["work"][:nsteps], dtype=np.float64) / 1e9
            if len(w) == nsteps:
                per.append(w[sel] - w[sel - 1])
        cpu = float(np.mean(per)) if per else None
    return steps, exposed[sel], flag, note, cpu, tick_step


def _pure_durations(a) -> np.ndarray:
    """Per tick: exclusive comm time on the fastest rank (queueing behind an earlier
    collective and waiting for late ranks removed)."""
    return np.asarray(a.comm_min_s, dtype=np.float64)


def features(a, *, warmup: int | None = None) -> RunFeatures:
    """Everything the what-if reads from a ``RunAnalysis`` (see :class:`RunFeatures`)."""
    feats, _ = _features(a, warmup)
    return feats


def prepare(a, *, warmup: int | None = None) -> tuple[RunFeatures, dict]:
    """The run's features and the per-step arrays the what-if replays, extracted once:
    ``whatif(a, ..., prepared=prepare(a))`` for many targets of one run."""
    return _features(a, warmup)


def _features(a, warmup: int | None):
    warm = a.config.warmup_steps if warmup is None else int(warmup)
    meta = a.run.meta
    run_meta = meta.get("run") or {}
    framework = str(meta.get("framework", ""))
    backend = str(meta.get("backend", ""))
    notes: list[str] = []
    hosts = tuple(a.hosts)
    named = [h for h in hosts if h]
    rpn = max(named.count(h) for h in set(named)) if named else a.ranks
    sources = {"ranks": "the run", "ranks_per_node": "hostnames of the ranks"}
    threads, t_src = _threads(meta, run_meta, framework)
    cores, c_src = _node_cores(a.run.ranks)
    if cores is None:
        cores, c_src = float(os.cpu_count() or 1), "assumed: this machine's cores (not recorded)"
        notes.append(f"cores per node not recorded: assumed {cores:g} (this machine)")
    if threads is None:
        threads = max(1, int(cores // max(rpn, 1)))
        t_src = "assumed: the node's cores divided among its ranks (not recorded)"
        notes.append(f"threads per rank not recorded: assumed {threads} (cores / ranks per node)")
    sources.update(threads_per_rank=t_src, cores_per_node=c_src)
    layout = Layout(a.ranks, max(rpn, 1), int(threads), float(cores))

    steps, exposed, flag, async_note, cpu, tick_step = _per_step(a, warm)
    if async_note:
        notes.append(async_note)
    if not len(steps.idx):
        raise ValueError(
            f"{a.run.path}: no training step after the {warm} warm-up steps; nothing to scale"
        )
    pure = _pure_durations(a)
    names = np.asarray(a.op_names, dtype=object)
    ops = names[a.tick_op]
    steady = np.isin(tick_step, steps.idx)
    groups = []
    per = len(steps.idx)
    for key in sorted(set(zip(ops[steady].tolist(), a.tick_nbytes[steady].tolist(), strict=True))):
        m = steady & (ops == key[0]) & (a.tick_nbytes == key[1])
        groups.append(
            CommGroup(
                op=str(key[0]),
                nbytes=int(key[1]),
                per_step=float(m.sum()) / per,
                seconds=float(np.median(pure[m])),
                overlapped=bool(flag[m].mean() > 0.5),
            )
        )
    fit = fit_cost_params(
        ops[steady],
        a.ranks,
        a.tick_nbytes[steady],
        pure[steady],
        source="fit on this run's collectives",
    )
    comm = float(exposed.min(axis=1).mean()) if exposed.size else 0.0
    compute = float(steps.comp_mean.mean())
    overlap = 0.0
    for gl in steps.groups:
        for _, off in gl:
            overlap += float(off[-1]) if len(off) else 0.0
    overlap /= per
    par = cpu / compute if cpu is not None and compute > 0 else None
    sections = _sections_per_step(a)
    # The model on the run itself: the slowest rank's compute plus the replayed comm.
    plain = _unstretch(steps, pure, np.zeros((len(pure), 2)), _Cpu(math.inf, 1, 0.0))
    replayed = float(np.mean(steps.comp_max + plain.exposed))
    step_s = float(steps.wall0.mean())
    feats = RunFeatures(
        layout=layout,
        layout_sources=sources,
        framework=framework,
        backend=backend,
        transport=transport_of(framework, backend),
        counter=a.counter,
        hosts=hosts,
        cpu_model=str((meta.get("node") or {}).get("cpu_model", "")),
        mem_total_bytes=(meta.get("node") or {}).get("mem_total_bytes"),
        steps=per,
        warmup_steps=warm,
        step_s=step_s,
        step_sd_s=float(steps.wall0.std(ddof=1)) if per > 1 else 0.0,
        compute_s=compute,
        compute_sd_s=_robust_sd(steps.comp_mean),
        imbalance_s=float((steps.comp_max - steps.comp_mean).mean()),
        comm_s=comm,
        overlap_s=overlap,
        cpu_s=cpu,
        parallelism=par,
        groups=tuple(groups),
        link_fit=fit,
        model_error_pct=100.0 * (replayed - step_s) / step_s if step_s > 0 else 0.0,
        batch_size=_int_or_none(run_meta.get("batch_size")),
        param_count=_int_or_none(run_meta.get("param_count")),
        framework_version=run_meta.get("framework_version"),
        sections_s=sections,
    )
    ctx = {"steps": steps, "notes": notes, "pure": pure, "ops": ops, "nbytes": a.tick_nbytes}
    _add_unrecorded_gradients(a, feats, ctx)
    return feats, ctx


def _add_unrecorded_gradients(a, feats: RunFeatures, ctx: dict) -> None:
    """Horovod skips its gradient allreduces on 1 rank, so the trace has none to scale. With
    the parameter count the integration recorded, add the one it would run per step on more
    ranks: a fused allreduce of the float32 gradients, waited for at the optimizer step."""
    if a.ranks != 1 or not feats.framework.startswith(("horovod", "keras+horovod")):
        return
    steps: _Steps = ctx["steps"]
    ops = ctx["ops"]
    steady = np.isin(a.tick_step, steps.idx)
    if any(canonical_op(str(o)) == "allreduce" for o in ops[steady]):
        return
    if not feats.param_count:
        ctx["notes"].append(
            "1-rank Horovod run: no gradient allreduce recorded and no parameter count: the "
            "gradients' collectives on more ranks are not modelled"
        )
        return
    n = len(ops)
    k = len(steps.idx)
    nbytes = 4 * int(feats.param_count)
    ctx["ops"] = np.concatenate((ops, np.full(k, "allreduce", dtype=object)))
    ctx["nbytes"] = np.concatenate((ctx["nbytes"], np.full(k, nbytes, dtype=np.int64)))
    ctx["pure"] = np.concatenate((ctx["pure"], np.zeros(k)))
    for i, gl in enumerate(steps.groups):
        gl.append((np.array([n + i]), np.zeros(1)))
    ctx["notes"].append(
        f"1-rank Horovod run records no gradient allreduce: one fused allreduce of "
        f"{feats.param_count:,} float32 parameters ({nbytes:,} bytes) per step assumed, "
        "waited for at the optimizer step"
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
    t = a.run.ranks[0]
    total = sum(
        max(int(m.get("t_end_ns", 0)) - int(m.get("t_begin_ns", 0)), 0)
        for m in t.marks
        if m.get("kind") == "section"
    )
    n = max(len(a.step_end_s), 1)
    return total / 1e9 / n


@lru_cache(maxsize=64)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normals] (0 for n = 1): how far the slowest of n
    ranks with independent noise lags the mean."""
    if n <= 1:
        return 0.0
    x = np.linspace(-8, 8, 4001)
    nd = NormalDist()
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    cdf = np.array([nd.cdf(v) for v in x])
    return float(np.trapezoid(x * n * pdf * cdf ** (n - 1), x))


# --------------------------------------------------------------------------- compute


@dataclass(frozen=True)
class ComputeModel:
    """How one rank's compute speed depends on its cores and its node's load.

    ``speedup``: cores -> speed-up of the intra-op threads over 1 core (measured points,
    interpolated; Amdahl with ``serial`` beyond). ``corun``: busy cores of the node ->
    slowdown of each core (1 at one busy core).
    """

    speedup: tuple[tuple[float, float], ...] = ((1.0, 1.0),)
    serial: float = 0.0
    corun: tuple[tuple[float, float], ...] = ((1.0, 1.0),)
    threads_source: str = ""
    corun_source: str = ""

    def S(self, cores: float) -> float:
        if cores <= 1:
            return max(cores, 1e-6)
        xs = [c for c, _ in self.speedup]
        ys = [s for _, s in self.speedup]
        if cores <= xs[-1] and len(xs) > 1:
            return float(np.interp(cores, xs, ys))
        top_c, top_s = xs[-1], ys[-1]
        s = self.serial
        amdahl = lambda c: 1.0 / (s + (1.0 - s) / c)  # noqa: E731
        return top_s * amdahl(cores) / amdahl(top_c)

    def I(self, busy: float) -> float:  # noqa: E743 - the model's name for it
        xs = [c for c, _ in self.corun]
        ys = [s for _, s in self.corun]
        if len(xs) == 1:
            return 1.0
        return float(np.interp(busy, xs, ys))

    def speed(self, layout: Layout) -> float:
        """Work per second of one rank relative to one thread alone on the node."""
        return self.S(layout.cores_per_rank) / self.I(layout.busy_cores)


def _compute_model(feats: RunFeatures, cal: dict | None) -> tuple[ComputeModel, list[str]]:
    notes = []
    probe = (cal or {}).get("compute") if isinstance(cal, dict) else None
    speedup, corun, t_src, c_src, serial = None, None, "", "", 0.0
    if isinstance(probe, dict):
        try:
            th = {float(k): float(v) for k, v in (probe.get("threads") or {}).items()}
            co = {float(k): float(v) for k, v in (probe.get("corun") or {}).items()}
        except (TypeError, ValueError):
            th, co = {}, {}
        kernel = probe.get("kernel", "a probe kernel")
        if 1.0 in th and len(th) > 1 and all(v > 0 for v in th.values()):
            speedup = tuple(sorted((c, th[1.0] / v) for c, v in th.items()))
            t_src = f"measured by ailens calibrate ({kernel}, not this job's own kernels)"
            c_top, s_top = speedup[-1]
            serial = _amdahl_serial(s_top, c_top)
        if 1.0 in co and len(co) > 1 and all(v > 0 for v in co.values()):
            # Sharing a node never speeds a core up: a ratio under 1 is noise of the probe.
            corun = tuple(sorted((c, max(v / co[1.0], 1.0)) for c, v in co.items()))
            c_src = f"measured by ailens calibrate ({kernel}, ranks computing side by side)"
    lay = feats.layout
    if speedup is None:
        eff = lay.cores_per_rank
        if feats.parallelism is not None and eff > 1.05:
            p = min(feats.parallelism, eff)
            serial = _amdahl_serial(p, eff)
            speedup = ((1.0, 1.0), (eff, p))
            t_src = (
                f"from this run's CPU-time parallelism {feats.parallelism:.2f} on "
                f"{eff:g} cores (an upper bound when idle threads spin)"
            )
        else:
            speedup = ((1.0, 1.0),)
            t_src = "assumed: intra-op threads scale perfectly up to the cores (not measured)"
    if corun is None:
        corun = ((1.0, 1.0),)
        c_src = "not modelled: memory bandwidth and caches shared by ranks on a node (not measured)"
    notes.append(f"thread speed-up: {t_src}")
    notes.append(f"ranks sharing a node: {c_src}")
    return ComputeModel(speedup, serial, corun, t_src, c_src), notes


def _amdahl_serial(speedup: float, cores: float) -> float:
    """Serial fraction s with 1 / (s + (1 - s) / cores) = speedup (clipped to [0, 1])."""
    if cores <= 1 or speedup <= 0:
        return 0.0
    return float(min(max((cores / speedup - 1) / (cores - 1), 0.0), 1.0))


# --------------------------------------------------------------------------- links


@dataclass(frozen=True)
class ScalingModel:
    """The link parameters the what-if uses and where each came from."""

    ranks: int
    run_fit: Fit  # fit on this run's own collectives (None params at 1 rank)
    intra: CostParams
    inter: CostParams
    run_links: str  # "none", "intra" or "inter": what this run's collectives crossed
    ranks_per_node: int | None  # None: every rank count fits on one node
    transport: str = ""
    calibration_transport: str | None = None
    # Calibration measurements per link kind: (ranks, {op: (sizes, seconds)}), looked up
    # (log-log interpolation) for the rank count they were measured at.
    samples: dict = field(default_factory=dict)
    cpu_samples: dict = field(default_factory=dict)  # the same for the CPU time they took
    # ... for their time while the ranks compute beside them
    loaded_samples: dict = field(default_factory=dict)
    background_cpu: dict = field(default_factory=dict)  # links -> idle CPU s per s

    def params(self, links: str) -> CostParams:
        return self.inter if links == "inter" else self.intra

    def time(self, op: str, q: int, nbytes: float, links: str) -> float:
        """Seconds of one collective on ``q`` ranks over ``links``: the calibration's own
        measurement at that size when it was taken on ``q`` ranks, else the cost model."""
        if q <= 1:
            return 0.0
        got = self.samples.get(links)
        if got is not None and got[0] == q:
            t = _interp_samples(got[1], op, nbytes)
            if t is not None:
                return t
        return collective_time(op, q, nbytes, self.params(links))

    def loaded(self, op: str, q: int, nbytes: float, links: str) -> float | None:
        """Speed of a collective (1 = as if alone) while the ranks compute beside it on no
        spare core, as ailens calibrate measured it; None when not measured. (The stand-in
        kernel's own slowdown meanwhile is recorded too, but a job's kernels suffer
        differently: the compute side uses the fair-share model.)"""
        got = self.loaded_samples.get(links)
        if q <= 1 or got is None or got[0] != q:
            return None
        slow = _interp_samples(got[1], op, nbytes)
        if slow is None:
            return None
        return min(self.time(op, q, nbytes, links) / slow, 1.0)

    def background(self, q: int, links: str) -> float:
        """CPU seconds per second the transport burns on each rank while idle."""
        got = self.background_cpu.get(links)
        return float(got[1]) if got is not None and q > 1 else 0.0

    def cpu(self, op: str, q: int, nbytes: float, links: str) -> float:
        """CPU seconds a rank spends on one collective (its transport's threads included),
        as calibrated on ``q`` ranks over ``links``; 0 when not measured."""
        got = self.cpu_samples.get(links)
        if q <= 1 or got is None or got[0] != q:
            return 0.0
        sizes_ok = _interp_samples(got[1], op, nbytes)
        if sizes_ok is not None:
            return sizes_ok
        table = got[1].get(canonical_op(op) or "allreduce")
        if table is None:
            return 0.0
        # Outside the measured sizes: the CPU share of the nearest measured size.
        i = 0 if nbytes < table[0][0] else -1
        t = self.time(op, q, nbytes, links)
        ref = self.time(op, q, float(table[0][i]), links)
        return float(table[1][i]) * (t / ref if ref > 0 else 1.0)

    def to_dict(self) -> dict:
        return {
            "ranks": self.ranks,
            "run_fit": self.run_fit.to_dict(),
            "intra": self.intra.to_dict(),
            "inter": self.inter.to_dict(),
            "run_links": self.run_links,
            "ranks_per_node": self.ranks_per_node,
            "transport": self.transport,
            "calibration_transport": self.calibration_transport,
        }


def load_calibration(path: str | os.PathLike) -> dict | None:
    """A calibration.json (``ailens calibrate``), or None when absent or unreadable."""
    f = Path(path)
    return read_json(f / "calibration.json" if f.is_dir() else f)


def scaling_model(
    a,
    *,
    calibration: dict | None = None,
    ranks_per_node: int | None = None,
    feats: RunFeatures | None = None,
) -> ScalingModel:
    """Link parameters for the what-if: ``calibration`` (or the run directory's
    calibration.json) when it measured the run's transport, then the fit on this run's
    collectives, then labelled defaults."""
    feats = feats or features(a)
    multi = feats.layout.nodes > 1
    run_links = "none" if a.ranks == 1 else ("inter" if multi else "intra")
    if ranks_per_node is None and multi:
        ranks_per_node = feats.layout.ranks_per_node
    cal = calibration if calibration is not None else load_calibration(a.run.path)
    cal_transport = None
    cal_intra = cal_inter = None
    samples: dict = {}
    cpu_samples: dict = {}
    loaded: dict = {}
    background: dict = {}
    if isinstance(cal, dict):
        cal_transport = str(cal.get("transport") or "mpi")  # version 1 files were MPI only
        what = f"ailens calibrate on {cal_transport}"
        if feats.transport and cal_transport != feats.transport:
            what += f" (the run used {feats.transport}: figures of another transport)"
        cal_intra = params_from_dict(cal.get("intra"), f"{what}, intra-node")
        cal_inter = params_from_dict(cal.get("inter"), f"{what}, inter-node")
        for kind, got in (("intra", cal_intra), ("inter", cal_inter)):
            table = _sample_table(cal.get(kind)) if got is not None else None
            if table:
                samples[kind] = (int(cal[kind].get("ranks") or 0), table)
            ranks_cal = int(cal[kind].get("ranks") or 0) if got is not None else 0
            for key, dest in (("cpu_seconds", cpu_samples), ("loaded_seconds", loaded)):
                table = _sample_table(cal.get(kind), key) if got is not None else None
                if table:
                    dest[kind] = (ranks_cal, table)
            try:
                bg = float((cal.get(kind) or {}).get("background_cpu") or 0.0)
            except (TypeError, ValueError, AttributeError):
                bg = 0.0
            if got is not None and bg > 0:
                background[kind] = (int(cal[kind].get("ranks") or 0), bg)
    fit = feats.link_fit
    fitted = (
        fit.params
        if fit.params is not None and (fit.params.alpha > 0 or fit.params.beta > 0)
        else None
    )
    intra = cal_intra or (fitted if run_links == "intra" else None) or DEFAULT_INTRA
    inter = cal_inter or (fitted if multi else None)
    if inter is None:
        inter = CostParams(
            max(intra.alpha, DEFAULT_INTER.alpha),
            max(intra.beta, DEFAULT_INTER.beta),
            intra.gamma,
            source=f"{DEFAULT_INTER.source} (inter-node not measured)",
        )
    if multi and cal_intra is None:
        intra = replace(inter, source=f"{inter.source}; intra-node assumed equal")
    return ScalingModel(
        a.ranks,
        fit,
        intra,
        inter,
        run_links,
        ranks_per_node,
        feats.transport,
        cal_transport,
        samples,
        cpu_samples,
        loaded,
        background,
    )


def _sample_table(entry, key: str = "seconds") -> dict:
    """{canonical op: (sizes, values)} of a calibration entry's measurements of ``key``
    (``seconds`` or ``cpu_seconds``)."""
    rows = entry.get("samples") if isinstance(entry, dict) else None
    out: dict = {}
    for r in rows or ():
        try:
            op, n, v = canonical_op(str(r["op"])) or "allreduce", float(r["nbytes"]), float(r[key])
        except (KeyError, TypeError, ValueError):
            continue
        if n > 0 and v > 0:
            out.setdefault(op, {})[n] = v
    return {op: (np.array(sorted(d)), np.array([d[k] for k in sorted(d)])) for op, d in out.items()}


def _interp_samples(table: dict, op: str, nbytes: float) -> float | None:
    """Measured seconds at ``nbytes`` (log-log interpolation between the measured sizes),
    None outside them."""
    got = table.get(canonical_op(op) or "allreduce")
    if got is None or nbytes <= 0:
        return None
    sizes, secs = got
    if nbytes < sizes[0] or nbytes > sizes[-1]:
        return None
    return float(np.exp(np.interp(np.log(nbytes), np.log(sizes), np.log(secs))))


def merge_calibrations(docs: list[dict | None]) -> dict | None:
    """One calibration from several (e.g. one run on a single host for the intra-node
    figures, one across hosts for the inter-node ones): per part, the first that has it."""
    docs = [d for d in docs if isinstance(d, dict)]
    if not docs:
        return None
    out = dict(docs[0])
    for key in ("intra", "inter", "compute"):
        out[key] = next((d[key] for d in docs if d.get(key)), None)
    return out


# --------------------------------------------------------------------------- prediction


@dataclass(frozen=True)
class WhatIfRow:
    """Predicted step and total time on one target layout; ``to_dict()`` is one row of
    ``ailens whatif --json``. ``speedup``/``efficiency`` are against the model's own 1-rank
    prediction (efficiency = speedup / ranks)."""

    ranks: int
    step_time_s: float
    total_time_s: float
    speedup: float
    efficiency: float
    comm_pct: float
    steps: float
    compute_step_s: float
    comm_step_s: float
    links: str  # "none" (1 rank), "intra" or "inter" node
    measured: bool = False  # the run's own layout
    phases: tuple[tuple[int, float, float], ...] = field(default=())
    ranks_per_node: int = 1
    threads_per_rank: int = 1
    cores_per_node: float = 1.0
    # Work per rank and speed of its cores, target over source (strong scaling's p/q, the
    # thread speed-up and node sharing); the transport's CPU contention comes on top.
    compute_factor: float = 1.0
    assumptions: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["phases"] = [{"id": i, "compute_step_s": c, "comm_step_s": m} for i, c, m in self.phases]
        d["assumptions"] = list(self.assumptions)
        return d


def _target_durations(
    feats: RunFeatures, model: ScalingModel, ops, nbytes, pure, q: int, links: str, keys=None
) -> np.ndarray:
    """Per tick: pure collective duration on the target, ``d + T(q, links) - T(p, run)``
    (the run's own overhead above its cost model kept); nothing at 1 rank. ``keys``:
    :func:`_tick_keys` of the ticks, when the caller has them."""
    if q == 1:
        return np.zeros(len(pure))
    p = feats.layout.ranks
    out = np.array(pure, dtype=np.float64)
    if q == p and links == model.run_links:
        return out
    uniq, inv = keys if keys is not None else _tick_keys(ops, nbytes)
    added = np.array(
        [
            model.time(o, q, n, links) - (model.time(o, p, n, model.run_links) if p > 1 else 0.0)
            for o, n in uniq
        ]
    )
    return np.maximum(out + added[inv], 0.0) if len(out) else out


@dataclass(frozen=True)
class _Cpu:
    """How one rank's cores are shared between its compute threads and its transport's
    threads (the scheduler shares a core fairly between the threads that want it)."""

    cores: float  # cores the rank has (its share of the node)
    threads: int  # compute threads, each wanting a core
    background: float  # CPU s per s the transport burns even while idle

    def rates(self, demand: float) -> tuple[float, float]:
        """(compute speed, collective speed), 1 = as if alone, while a collective wants
        ``demand`` cores: max-min fair shares of the rank's cores."""
        items = [1.0] * self.threads + [demand, self.background]
        got = _waterfill(self.cores, items)
        alone = min(float(self.threads), self.cores)
        compute = sum(got[: self.threads]) / alone if alone > 0 else 1.0
        comm = got[self.threads] / demand if demand > 0 else 1.0
        return min(compute, 1.0), min(comm, 1.0)

    def rate(self, demand: float) -> float:
        return self.rates(demand)[0]


def _waterfill(capacity: float, demands: list[float]) -> list[float]:
    """Max-min fair allocation of ``capacity`` to ``demands``."""
    order = sorted(range(len(demands)), key=lambda i: demands[i])
    out = [0.0] * len(demands)
    left, n = capacity, len(demands)
    for k, i in enumerate(order):
        out[i] = min(demands[i], left / (n - k)) if n > k else 0.0
        left -= out[i]
    return out


def _cpu_of(layout: Layout, background: float) -> _Cpu:
    return _Cpu(layout.cores_per_node / layout.ranks_on_node, layout.threads_per_rank, background)


def _group(off: np.ndarray, dur: np.ndarray, cpu: np.ndarray, share: _Cpu) -> tuple[float, float]:
    """One group of collectives against the compute that overlaps it: they run one at a
    time in one queue, each entering when the compute reaches its begin offset. While one
    runs beside the compute, it wants ``cpu[:, 0] / dur`` cores and the rank's cores are
    shared fairly between it and the compute threads (``share``); on a rank with no spare
    core the collective goes at the speed ailens calibrate measured beside computing ranks
    (``cpu[:, 1]``) when known. Returns (wall time at which
    the compute reached the last offset, wall time at which the queue emptied), from the
    group's first begin."""
    n = len(off)
    last = float(off[-1])
    cpu, lspeed = cpu[:, 0], cpu[:, 1]
    # Measured with the ranks computing on every core: applies when this rank has no spare.
    measured = share.cores <= share.threads + 1e-9
    plain = not cpu.any() and not (measured and np.isfinite(lspeed).any())
    if plain and share.rate(0.0) == 1.0:  # no contention: a plain queue
        free = 0.0
        for o, d in zip(off.tolist(), dur.tolist(), strict=True):
            free = max(free, o) + d
        return last, free
    tau = x = 0.0  # wall time, compute progress
    done = None if last > 0 else 0.0  # wall time the compute reached the last offset
    nxt = 0  # next collective to enter the queue
    queue: list[int] = []
    active, left = -1, 0.0
    while True:
        while nxt < n and off[nxt] <= x + 1e-15:
            queue.append(nxt)
            nxt += 1
        if active < 0 and queue:
            active = queue.pop(0)
            left = float(dur[active])
        if active < 0 and done is not None and nxt >= n:
            return done, max(tau, done)
        demand = float(cpu[active] / dur[active]) if active >= 0 and dur[active] > 0 else 0.0
        if done is None and active >= 0 and measured and np.isfinite(lspeed[active]):
            rate, speed = share.rates(demand)[0], float(lspeed[active])
        elif done is None:
            rate, speed = share.rates(demand)
        else:  # the caller waits: the collective has the cores to itself
            rate, speed = 0.0, replace(share, threads=0).rates(demand)[1]
        dt = (float(off[nxt]) if nxt < n else last) - x
        dt = dt / rate if done is None and rate > 0 else math.inf
        if active >= 0 and speed > 0:
            dt = min(dt, left / speed)
        if not math.isfinite(dt):
            return (done if done is not None else tau), tau
        tau += dt
        x += rate * dt
        if active >= 0:
            left -= speed * dt
            if left <= 1e-15:
                active = -1
        if done is None and x >= last - 1e-15:
            x, done = last, tau


@dataclass(frozen=True)
class _Flat:
    """Every step's collective groups, one row each in replay order: the step it belongs
    to, its first tick, whether it is a lone collective (those are replayed all at once by
    :func:`_lone_queue`), and the others as (row, ticks, offsets) for :func:`_group`."""

    step: np.ndarray
    tick: np.ndarray
    single: np.ndarray
    multi: tuple


def _flatten(groups: list) -> _Flat:
    step, tick, single, multi = [], [], [], []
    for k, gl in enumerate(groups):
        for ticks, off in gl:
            if len(ticks) != 1:
                multi.append((len(step), ticks, off))
            step.append(k)
            tick.append(int(ticks[0]))
            single.append(len(ticks) == 1)
    return _Flat(
        np.array(step, dtype=np.int64),
        np.array(tick, dtype=np.int64),
        np.array(single, dtype=bool),
        tuple(multi),
    )


@dataclass
class _Replay:
    """The source's collective groups with their compute offsets as they would be without
    the contention the source had, and what the model says the source waited."""

    flat: _Flat  # the groups (multi-collective ones with their uncontended offsets)
    span_meas: np.ndarray  # per step: measured compute inside group spans
    span_pure: np.ndarray
    exposed: np.ndarray  # per step: modelled exposed comm at the source


def _lone_queue(dur: np.ndarray, cpu: np.ndarray, share: _Cpu) -> np.ndarray:
    """When each queue emptied, for many one-collective groups at once: :func:`_group` with
    a single offset 0 (the compute reaches it at once, so the collective has the rank's
    cores to itself with the transport's idle threads). The same floating-point operations
    as :func:`_group`, so the same figures; NaN where it cannot tell (replay with it)."""
    d = np.asarray(dur, dtype=np.float64)
    measured = share.cores <= share.threads + 1e-9
    plain = not cpu.any() and not (measured and np.isfinite(cpu[:, 1]).any())
    if plain and share.rate(0.0) == 1.0:
        return 0.0 + d
    # _waterfill of the rank's cores between the collective's demand and the background.
    c, bg = share.cores, share.background
    with np.errstate(divide="ignore", invalid="ignore"):
        demand = np.where(d > 0, cpu[:, 0] / d, 0.0)
        got = np.where(
            demand <= bg, np.minimum(demand, c / 2), np.minimum(demand, c - min(bg, c / 2))
        )
        speed = np.minimum(np.where(demand > 0, got / demand, 1.0), 1.0)
        dt = d / speed
        done = d - speed * dt <= 1e-15  # one pass of _group's event loop finishes it
        w = np.where(speed > 0, np.maximum(0.0 + dt, 0.0), 0.0)
    w[(speed > 0) & ~done | np.isnan(speed) | ~(d >= 0)] = np.nan
    return w


def _queues(fl: _Flat, dur: np.ndarray, cpu: np.ndarray, share: _Cpu, f: float = 1.0):
    """(compute reached the last offset, queue emptied) of every group of ``fl`` with its
    offsets x ``f`` (see :func:`_group`)."""
    xs = np.zeros(len(fl.step))
    ws = np.zeros(len(fl.step))
    t = fl.tick[fl.single]
    ws[fl.single] = _lone_queue(dur[t], cpu[t], share)
    for i in np.flatnonzero(np.isnan(ws)).tolist():
        ticks = fl.tick[i : i + 1]
        xs[i], ws[i] = _group(np.zeros(1) * f, dur[ticks], cpu[ticks], share)
    for i, ticks, off in fl.multi:
        xs[i], ws[i] = _group(off * f, dur[ticks], cpu[ticks], share)
    return xs, ws


def _per_step_sum(fl: _Flat, per: int, values: np.ndarray) -> np.ndarray:
    """Per step, the sum of its groups' values, added in replay order (as a loop adds)."""
    out = np.zeros(per)
    np.add.at(out, fl.step, values)
    return out


def _unstretch(steps: _Steps, dur: np.ndarray, cpu: np.ndarray, share: _Cpu) -> _Replay:
    """Find each group's uncontended offsets (a scale such that the contended replay ends
    the compute where the run did) and the modelled exposed comm of the source."""
    per = len(steps.idx)
    fl = _flatten(steps.groups)
    # A lone collective's offset is 0: nothing to scale. The others one by one.
    xs, ws = _queues(replace(fl, multi=()), dur, cpu, share)
    last = np.zeros(len(fl.step))
    lam = np.ones(len(fl.step))
    multi = []
    for i, ticks, off in fl.multi:
        last[i] = float(off[-1])
        d, u = dur[ticks], cpu[ticks]
        x, w = _group(off, d, u, share)
        for _ in range(6):
            if last[i] <= 0 or x <= 0 or abs(x - last[i]) <= 1e-4 * last[i]:
                break
            lam[i] *= last[i] / x
            x, w = _group(off * lam[i], d, u, share)
        xs[i], ws[i] = x, w
        multi.append((i, ticks, off * lam[i]))
    return _Replay(
        replace(fl, multi=tuple(multi)),
        _per_step_sum(fl, per, last),
        _per_step_sum(fl, per, last * lam),
        _per_step_sum(fl, per, np.maximum(ws - xs, 0.0)),
    )


def _replay(rep: _Replay, dur: np.ndarray, cpu: np.ndarray, f: float, share: _Cpu):
    """Per step (compute inside group spans, exposed comm) on the target."""
    per = len(rep.span_meas)
    xs, ws = _queues(rep.flat, dur, cpu, share, f)
    return _per_step_sum(rep.flat, per, xs), _per_step_sum(rep.flat, per, np.maximum(ws - xs, 0.0))


# Steps the what-if replays at most (a run with more replays this many, evenly spaced).
REPLAY_STEPS = 4000


def replay_sample(steps: int, cap: int | None = None) -> np.ndarray | None:
    """Which of a run's ``steps`` training steps the what-if replays against each target:
    None (all of them) up to ``cap`` (default :data:`REPLAY_STEPS`), else ``cap`` evenly
    spaced ones, first and last included. The replay gives each step's modelled comm and
    compute inside collective groups; the prediction takes their mean over the sample (the
    measured compute and comm are still means over every step). Every step has the same
    chance to be in the sample whatever its value, so the sample's mean estimates the
    mean over all steps without bias (unless the steps' times repeat with a period that
    is a multiple of the spacing), within about sd / sqrt(cap) of it: the cost of the
    replay stays bounded however long the run was."""
    cap = REPLAY_STEPS if cap is None else int(cap)
    if steps <= cap:
        return None
    return np.unique(np.round(np.linspace(0, steps - 1, cap)).astype(np.int64))


def _steps_at(steps: _Steps, rows: np.ndarray) -> _Steps:
    return _Steps(
        idx=steps.idx[rows],
        wall0=steps.wall0[rows],
        comp_mean=steps.comp_mean[rows],
        comp_max=steps.comp_max[rows],
        groups=[steps.groups[i] for i in rows.tolist()],
    )


def _span_meas(steps: _Steps) -> np.ndarray:
    """Per step: the measured compute inside its collective groups (as :func:`_unstretch`
    adds it up)."""
    out = np.zeros(len(steps.idx))
    for k, gl in enumerate(steps.groups):
        for _, off in gl:
            out[k] += float(off[-1])
    return out


def _tick_keys(ops, nbytes) -> tuple[list, np.ndarray]:
    """The distinct (op, bytes) of the ticks and each tick's index among them."""
    index: dict = {}
    inv = np.fromiter(
        (index.setdefault((o, int(n)), len(index)) for o, n in zip(ops, nbytes, strict=True)),
        dtype=np.int64,
        count=len(ops),
    )
    return list(index), inv


def _tick_cpu(model: ScalingModel, ops, nbytes, q: int, links: str, keys=None) -> np.ndarray:
    """Per tick on ``q`` ranks (calibrated): columns CPU seconds a rank spends on the
    collective, and its speed while the ranks compute on no spare core (NaN: not measured)."""
    out = np.zeros((len(ops), 2))
    out[:, 1] = np.nan
    if q <= 1:
        return out
    uniq, inv = keys if keys is not None else _tick_keys(ops, nbytes)
    table = np.zeros((len(uniq), 2))
    for j, (o, n) in enumerate(uniq):
        loaded = model.loaded(o, q, n, links)
        table[j] = (model.cpu(o, q, n, links), np.nan if loaded is None else loaded)
    return table[inv] if len(ops) else out


def whatif(
    a,
    ranks: list[int],
    *,
    mode: str = "weak",
    ranks_per_node: int | None = None,
    cores_per_node: float | None = None,
    threads_per_rank: int | None = None,
    calibration: dict | None = None,
    fixed_dataset: bool = True,
    warmup: int | None = None,
    prepared=None,
) -> list[WhatIfRow]:
    """Predicted step time, total time, speedup, efficiency and comm % on each target.

    ``mode="weak"``: per-rank batch fixed (per-rank compute unchanged), and with
    ``fixed_dataset`` the steps scale by p/p'. ``mode="strong"``: global batch fixed,
    per-rank compute x p/p', steps unchanged. ``ranks_per_node``, ``cores_per_node``,
    ``threads_per_rank`` describe the target nodes (default: what the run had; ranks per
    node defaults to "all on one node" for a single-host run). ``prepared``: what
    :func:`prepare` extracted from ``a`` (with the same ``warmup``), to evaluate many
    targets of one run without extracting its features again.
    """
    if mode not in ("weak", "strong"):
        raise ValueError(f"mode={mode!r}: choose weak or strong")
    if not ranks or any(int(r) < 1 for r in ranks):
        raise ValueError("ranks must be positive integers")
    for name, v in (
        ("ranks_per_node", ranks_per_node),
        ("cores_per_node", cores_per_node),
        ("threads_per_rank", threads_per_rank),
    ):
        if v is not None and not v > 0:
            raise ValueError(f"{name} must be > 0, got {v}")
    feats, ctx = prepared if prepared is not None else _features(a, warmup)
    steps: _Steps = ctx["steps"]
    cal = calibration if calibration is not None else load_calibration(a.run.path)
    model = scaling_model(a, calibration=cal, ranks_per_node=ranks_per_node, feats=feats)
    cm, cm_notes = _compute_model(feats, cal)
    src = feats.layout
    p = src.ranks
    base_notes = list(ctx["notes"]) + cm_notes
    base_notes.append(
        "time outside the training steps (start-up, evaluation, checkpoints) kept as measured"
    )

    def target_layout(q: int) -> Layout:
        rpn = ranks_per_node or (
            model.ranks_per_node if model.ranks_per_node else max(q, src.ranks_per_node)
        )
        return Layout(
            q,
            int(rpn),
            int(threads_per_rank or src.threads_per_rank),
            float(cores_per_node or src.cores_per_node),
        )

    ops, pure, nbytes = ctx["ops"], ctx["pure"], ctx["nbytes"]
    per = len(steps.idx)
    total_steps, fixed = _totals(a, feats)
    g_src = expected_max_normal(p)
    # The source as the model sees it: its transport's CPU competing with its compute.
    share_src = _cpu_of(src, model.background(p, model.run_links))
    # What does not depend on the target is computed once per run (``prepared`` keeps it
    # between calls): the ticks' distinct collectives and the source's replay.
    keys = ctx.get("keys")
    if keys is None:
        keys = ctx["keys"] = _tick_keys(ops, nbytes)
    cpu_src = _tick_cpu(model, ops, nbytes, p, model.run_links, keys)
    # A long run replays REPLAY_STEPS of its steps, evenly spaced (see replay_sample).
    sample = replay_sample(per)
    replays = ctx.setdefault("replays", {})
    key = (share_src, cpu_src.tobytes(), None if sample is None else len(sample))
    rep = replays.get(key)
    if rep is None:
        sub = steps if sample is None else _steps_at(steps, sample)
        rep = replays[key] = _unstretch(sub, pure, cpu_src, share_src)
    if sample is None:
        span_meas = rep.span_meas
    elif "span_meas" in replays:
        span_meas = replays["span_meas"]
    else:
        span_meas = replays["span_meas"] = _span_meas(steps)
    k_src = 1.0 / share_src.rate(0.0)  # compute slowdown by the idle transport alone
    outside = (steps.comp_mean - span_meas) / k_src  # compute outside group spans
    lag_src = (steps.comp_max - steps.comp_mean) / k_src
    exposed_src = steps.wall0 - steps.comp_max  # what the slowest rank did not compute
    if model.cpu_samples or model.background_cpu:
        base_notes.append(
            "the transport's own CPU time (measured by ailens calibrate) takes cores from "
            "the compute when the rank has none spare"
        )
    else:
        base_notes.append(
            "the CPU the collectives themselves use is not measured (run ailens calibrate): "
            "their competition with compute for the cores is not modelled"
        )

    def predict(q: int) -> tuple[float, float, float, float, float, Layout, list[str]]:
        tgt = target_layout(q)
        notes = []
        work_scale = p / q if mode == "strong" else 1.0
        f = work_scale * cm.speed(src) / cm.speed(tgt)
        if tgt.oversubscribed and not src.oversubscribed:
            notes.append(
                f"{tgt.ranks_on_node} ranks x {tgt.threads_per_rank} threads on "
                f"{tgt.cores_per_node:g} cores: threads time-share the cores; the cost of "
                "switching between them is not modelled"
            )
        links = tgt.links
        share = _cpu_of(tgt, model.background(q, links) if q > 1 else 0.0)
        k = 1.0 / share.rate(0.0)
        # Compute: the mean rank, plus the lag of the slowest of q ranks.
        if p > 1:
            lag = lag_src * (expected_max_normal(q) / g_src if g_src else 0.0)
        else:
            lag = np.full(per, feats.compute_sd_s * expected_max_normal(q))
            if q > 1:
                notes.append(
                    "1-rank run: the slowest of the ranks lags by the step-to-step noise of "
                    "this rank (assumed independent across ranks)"
                )
        if q == 1:
            span, exposed = f * rep.span_pure, rep.exposed
        else:
            dur = _target_durations(feats, model, ops, nbytes, pure, q, links, keys)
            cpu = _tick_cpu(model, ops, nbytes, q, links, keys)
            span, exposed = _replay(rep, dur, cpu, f, share)
            # The change the model predicts, added to what the run measured: what the
            # slowest rank did not compute keeps the part the replay does not explain.
            # (Per step this difference is noisy, rank 0's step against the slowest rank's
            # compute: only its mean is clipped.)
        outside_step = f * k * (outside + lag)
        if sample is None:
            comm = exposed_src + exposed - rep.exposed if q > 1 else np.zeros(per)
            comm_step = max(float(np.mean(comm)), 0.0)
            step = float(np.mean(outside_step + span)) + comm_step
        else:  # the measured parts over every step, the replayed ones over the sample
            comm_step = 0.0
            if q > 1:
                comm_step = max(float(np.mean(exposed_src) + np.mean(exposed - rep.exposed)), 0.0)
            step = float(np.mean(outside_step) + np.mean(span)) + comm_step
        if q > 1 and (q != p or links != model.run_links):
            notes.append(f"{links}-node collectives: {model.params(links).source}")
        n_steps = total_steps * p / q if mode == "weak" and fixed_dataset else float(total_steps)
        total = fixed + n_steps * step
        return step, comm_step, n_steps, total, f, tgt, notes

    base_total = predict(1)[3]
    rows = []
    for q in sorted({int(r) for r in ranks}):
        step, comm_step, n_steps, total, f, tgt, notes = predict(q)
        speedup = base_total / total if total > 0 else float("nan")
        rows.append(
            WhatIfRow(
                ranks=q,
                step_time_s=step,
                total_time_s=float(total),
                speedup=float(speedup),
                efficiency=float(speedup / q),
                comm_pct=float(100.0 * comm_step / step) if step > 0 else 0.0,
                steps=float(n_steps),
                compute_step_s=float(step - comm_step),
                comm_step_s=comm_step,
                links=tgt.links,
                measured=q == p and tgt == replace(src, ranks_per_node=tgt.ranks_per_node),
                phases=_phase_split(a, steps, f, q),
                ranks_per_node=tgt.ranks_per_node,
                threads_per_rank=tgt.threads_per_rank,
                cores_per_node=tgt.cores_per_node,
                compute_factor=float(f),
                assumptions=tuple(base_notes + notes),
            )
        )
    return rows


def _totals(a, feats: RunFeatures) -> tuple[int, float]:
    """Total steps of the run and its time outside the steps (start-up, sections), which the
    total-time prediction keeps (sections scaled like compute)."""
    fc = a.forecast
    n_steps = len(a.step_end_s)
    total_steps = fc.total_steps if fc is not None and fc.total_steps else max(n_steps, 1)
    if fc is not None:
        measured = fc.actual_total_s if fc.actual_total_s is not None else fc.predicted_total_s
    else:
        measured = float(a.step_end_s[-1]) if n_steps else a.total_s
    fixed = max(float(measured or 0.0) - total_steps * feats.step_s, 0.0)
    return int(total_steps), fixed


def _steady(a, steps: _Steps) -> np.ndarray:
    """Which ticks are in the training steps the what-if replays (kept on ``steps``)."""
    got = getattr(steps, "_steady", None)
    if got is None:
        got = np.isin(a.tick_step, steps.idx)
        object.__setattr__(steps, "_steady", got)
    return got


def _phase_split(a, steps: _Steps, f: float, q: int) -> tuple[tuple[int, float, float], ...]:
    """(phase id, compute s, comm s) per step on the target: the run's per-phase split with
    compute scaled by ``f`` and collectives removed at 1 rank (the table the report shows)."""
    steady = _steady(a, steps)
    ids = a.phase_ids[steady]
    if not len(ids):
        return ()
    per = max(len(steps.idx), 1)
    size = int(ids.max()) + 1
    pc = np.bincount(ids, weights=a.compute_s[steady] * f, minlength=size) / per
    comm = a.comm_s[steady] if q > 1 else np.zeros(int(steady.sum()))
    pm = np.bincount(ids, weights=comm, minlength=size) / per
    return tuple(
        (ph.id, float(pc[ph.id]), float(pm[ph.id])) for ph in a.table.phases if ph.id < size
    )
