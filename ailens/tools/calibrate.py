"""Calibration: measure, on the job's own transport and nodes, what the what-if needs
(``ailens calibrate``, ailens/cli/calibrate.py, launches it the way the job is launched).

``calibrate(transport)`` takes a communicator from the integrations (``Transport``). Every
rank times allreduce, allgather and broadcast over a sweep of message sizes (plus the exact
sizes a run used, ``run_sizes(RUN_DIR)``); a repetition's time is its maximum over ranks, a
size's time the median over repetitions. Rank 0 fits alpha, beta and gamma by non-negative
least squares (``predict.collectives.fit_cost_params``): the node-local ranks give the intra-node
parameters, the whole job the inter-node ones when it spans hosts (a ring crossing nodes runs
at the pace of its slowest link). Each row also has the CPU time the collective took (the
transport's own threads compete with compute for the cores); each entry the transport's CPU
use while idle (``background_cpu``: Horovod's loop); with torch transports, allreduces of
64 kB and more are timed again while every rank computes (``loaded_seconds``).

The compute probe (``compute=False`` skips it) times a small training-like kernel of the
job's kind (a convolutional network step with torch, matrix products with numpy) at 1, 2, ...
intra-op threads alone on the node, and with 1, 2, ... ranks of the node computing side by
side: the thread speed-up and the slowdown of sharing a node that the what-if applies. It is
a stand-in for the job's own kernels and is labelled so wherever it is used.
"""

from __future__ import annotations

import os
import time
from typing import Protocol

import numpy as np

from .._version import __version__
from ..predict.collectives import canonical_op, fit_cost_params

OPS = ("allreduce", "allgather", "broadcast")
_SIZE_SECONDS = 1.5  # time budget per op and size; larger sizes stop once one exceeds it
_PROBE_ROUNDS = 4
_SLOT_SECONDS = 0.3


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Message sizes of the sweep: powers of 4 from ``min_bytes`` (>= 8) up to ``max_bytes``."""
    out, n = [], max(8, int(min_bytes))
    while n <= max_bytes:
        out.append(n)
        n *= 4
    return out


# --------------------------------------------------------------------------- transports


class Transport(Protocol):
    """What the sweep needs from a communicator. The integrations own the implementations
    (``ailens.integrations._transport``: MPI, torch.distributed gloo, Horovod)."""

    transport: str  # its name in the calibration: mpi, gloo or horovod
    rank: int
    size: int
    asynchronous: bool  # has a non-blocking allreduce (start_allreduce)

    def barrier(self) -> None: ...
    def max(self, x: np.ndarray) -> np.ndarray: ...
    def gather_hosts(self) -> list[str]: ...
    def op(self, op: str, nbytes: int): ...  # returns a zero-argument callable
    def start_allreduce(self, nbytes: int):
        """Begin an allreduce without waiting; returns a ``done() -> bool`` poll, or None
        when the transport has no asynchronous collectives."""

    def node(self, hosts: list[str]) -> Transport | None: ...
    def library(self) -> str: ...
    def close(self) -> None: ...


# --------------------------------------------------------------------------- the sweep


def _time_op(comm: Transport, op: str, nbytes: int, reps: int) -> tuple[float, float]:
    """(seconds, CPU seconds) of one collective: medians over repetitions of the slowest
    rank's wall time and of the process CPU time it took (all threads: the transport's
    own threads compete with compute for the cores)."""
    once = comm.op(op, nbytes)
    once()  # warm-up: connection set-up and buffer registration
    times = np.empty(2 * reps)
    for i in range(reps):
        comm.barrier()
        c = time.process_time()
        t = time.perf_counter()
        once()
        times[i] = time.perf_counter() - t
        times[reps + i] = time.process_time() - c
    worst = comm.max(times)
    return float(np.median(worst[:reps])), float(np.median(worst[reps:]))


def background_cpu(comm: Transport, seconds: float = 0.5) -> float:
    """CPU time per second the transport burns while no collective runs (Horovod's
    background loop negotiates every cycle; gloo and MPI sleep), slowest rank."""
    comm.barrier()
    c, t = time.process_time(), time.perf_counter()
    time.sleep(seconds)  # measuring what idles away during this wait is the point
    rate = (time.process_time() - c) / (time.perf_counter() - t)
    return float(comm.max(np.array([rate]))[0])


def sweep(
    comm: Transport,
    *,
    min_bytes: int = 8,
    max_bytes: int = 16 << 20,
    reps: int = 20,
    ops=OPS,
    extra: list[tuple[str, int]] = (),
) -> list[dict]:
    """Time every op at every size on ``comm`` (and the ``extra`` (op, bytes) pairs): rows of
    {op, nbytes, seconds}. Sizes stop growing once one takes longer than ~1.5 s in all."""
    rows = []
    slow = set()
    todo = [(op, n) for n in sizes(min_bytes, max_bytes) for op in ops]
    todo += [(op, int(n)) for op, n in extra if (op, int(n)) not in todo]
    for op, n in sorted(todo, key=lambda x: x[1]):
        if op in slow and (op, n) not in extra:
            continue
        r = reps if n <= 1 << 20 else max(3, reps // 4)
        probe, _ = _time_op(comm, op, n, 1)
        r = int(max(1, min(r, _SIZE_SECONDS / max(probe, 1e-9))))
        # Every rank must take the same decisions: rank 0's numbers decide.
        r = int(comm.max(np.array([float(r if comm.rank == 0 else 0)]))[0])
        seconds, cpu = _time_op(comm, op, n, r)
        rows.append({"op": op, "nbytes": n, "seconds": seconds, "cpu_seconds": cpu, "reps": r})
        if comm.max(np.array([seconds * r]))[0] > _SIZE_SECONDS:
            slow.add(op)
    return rows


def loaded_sweep(comm: Transport, rows: list[dict], kernel, reps: int = 3) -> None:
    """Time the allreduces of ``rows`` (>= 64 kB) again while every rank computes (the
    stand-in kernel, one thread, in a loop on the calling thread, as backward runs while
    DDP's and Horovod's gradient allreduces are in flight): adds ``loaded_seconds`` and
    ``loaded_compute_rate`` (the kernel's speed meanwhile, 1 = alone) to those rows. On a
    node with no spare core both ranks' collective threads then wait for a core."""
    if kernel is None or not comm.asynchronous:
        return
    set_threads, once, _ = kernel
    set_threads(1)
    once()
    alone = _time_kernel(once, 0.2)
    comm.barrier()
    for row in rows:
        if row["op"] != "allreduce" or row["nbytes"] < 1 << 16:
            continue
        walls, rates = [], []
        for _ in range(reps):
            comm.barrier()
            t0 = time.perf_counter()
            done = comm.start_allreduce(row["nbytes"])
            iters = 0
            # At least one kernel call, as backward computes whatever the allreduce does: an
            # allreduce done before the first poll would otherwise read as a rate of 0.
            while True:
                once()
                iters += 1
                if done():
                    break
            wall = time.perf_counter() - t0
            walls.append(wall)
            rates.append(min(iters * alone / wall, 1.0))
        got = comm.max(np.array([np.median(walls), -np.median(rates)]))
        row["loaded_seconds"] = float(got[0])
        row["loaded_compute_rate"] = float(-got[1])


def _fit(rows: list[dict], p: int, source: str, idle_cpu: float = 0.0) -> dict | None:
    if p < 2 or not rows:
        return None
    fit = fit_cost_params(
        [r["op"] for r in rows],
        p,
        [r["nbytes"] for r in rows],
        [r["seconds"] for r in rows],
        source=source,
    )
    if fit.params is None:
        return None
    return {
        **fit.params.to_dict(),
        "ranks": p,
        "rel_rmse": fit.rel_rmse,
        "fitted": list(fit.fitted),
        "note": fit.note,
        "background_cpu": idle_cpu,
        "samples": rows,
    }


def run_sizes(run_dir: str | os.PathLike) -> list[tuple[str, int]]:
    """The (op, bytes) pairs a recorded run's collectives used (ops calibrate can time)."""
    from ..analysis.run_analysis import analyze

    kinds = {(canonical_op(op), n) for op, n in analyze(run_dir).op_sizes}
    return sorted((k, n) for k, n in kinds if k in OPS and n > 0)[:48]


# --------------------------------------------------------------------------- compute probe


def _probe_kernel(kind: str, small: bool = False):
    """(set_threads, one_iteration, label) of the stand-in kernel, or None if unavailable;
    ``small``: a quarter of the work per iteration (finer time steps)."""
    if kind == "torch":
        import torch

        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(2),
            torch.nn.Flatten(),
            torch.nn.Linear(64 * 16 * 16, 10),
        )
        x = torch.randn(2 if small else 8, 3, 32, 32)

        def once() -> None:
            net.zero_grad(set_to_none=True)
            net(x).square().mean().backward()

        return torch.set_num_threads, once, "torch conv-net step, batch 8, 32x32"
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4096 if small else 16384, 32))
    c = rng.standard_normal((32, 32))
    limits = [None]

    def set_threads(n: int) -> None:
        if limits[0] is not None:
            limits[0].unregister()
        limits[0] = threadpool_limits(n)

    def once() -> None:
        d = a @ c.T
        lab = d.argmin(axis=1)
        np.eye(32)[lab].T @ a

    return set_threads, once, "numpy/BLAS matrix products, 16384x32x32"


def _time_kernel(once, seconds: float = 0.15) -> float:
    """Fastest iteration over ``seconds``: other jobs on the node only ever slow a kernel
    down, so the minimum is the kernel's own time."""
    once()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 3:
        t = time.perf_counter()
        once()
        times.append(time.perf_counter() - t)
    return float(np.min(times))


def compute_probe(comm: Transport, hosts: list[str], kind: str) -> dict | None:
    """Thread speed-up and node-sharing slowdown of the stand-in kernel on rank 0's node
    (collective: every rank calls it). Closes ``comm`` first: a transport's threads (Horovod's
    background loop spins) must leave the cores to the kernel, so the ranks follow a
    schedule of time slots agreed beforehand instead of barriers. Rank 0 gets the result."""
    kernel = _probe_kernel(kind)
    ok = comm.max(np.array([0.0 if kernel else 1.0]))[0] == 0
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    cores = int(comm.max(np.array([float(cores if comm.rank == 0 else 0)]))[0])
    start = float(comm.max(np.array([time.time() + 3.0 if comm.rank == 0 else 0.0]))[0])
    comm.close()
    if not ok:
        return None
    set_threads, once, label = kernel
    on_node = [r for r, h in enumerate(hosts) if h == hosts[0]]
    if comm.rank not in on_node:
        return None
    local = on_node.index(comm.rank)
    slots = [("threads", n) for n in range(1, cores + 1)]
    slots += [("corun", u) for u in range(1, len(on_node) + 1)]
    best: dict[tuple[str, int], float] = {}
    once()  # warm-up before the schedule starts
    # Interleaved rounds, fastest of each: a burst of other work on the node spoils one
    # round of one setting, not the ratio between settings.
    for i in range(_PROBE_ROUNDS * len(slots)):
        what, n = slots[i % len(slots)]
        runs = local == 0 if what == "threads" else local < n
        delay = start + i * _SLOT_SECONDS - time.time()
        if delay > 0:
            time.sleep(delay)  # the slot's start on the shared clock of the node
        if not runs:
            continue
        set_threads(n if what == "threads" else 1)
        t = _time_kernel(once, _SLOT_SECONDS * 0.8)
        best[(what, n)] = min(best.get((what, n), t), t)
    set_threads(1)
    if comm.rank != 0:
        return None
    return {
        "kernel": label,
        "threads": {str(n): best[("threads", n)] for n in range(1, cores + 1)},
        "corun": {str(u): best[("corun", u)] for u in range(1, len(on_node) + 1)},
        "cores": cores,
    }


# --------------------------------------------------------------------------- driver


def calibrate(
    comm: Transport,
    *,
    min_bytes: int = 8,
    max_bytes: int = 16 << 20,
    reps: int = 20,
    extra: list[tuple[str, int]] = (),
    compute: bool = True,
    probe_kind: str | None = None,
) -> dict | None:
    """Run the sweep (collective: every rank calls it); rank 0 gets the calibration
    document, other ranks None. ``comm`` (the world of a transport from the integrations) is
    closed on return (before the compute probe)."""
    hosts = comm.gather_hosts()
    t0 = time.perf_counter()
    node = comm.node(hosts)
    multi = len(set(hosts)) > 1
    kw = dict(min_bytes=min_bytes, max_bytes=max_bytes, reps=reps, extra=extra)
    # Node-local sweep on every node at once; rank 0's node speaks for intra-node links.
    kind = probe_kind or ("numpy" if comm.transport == "mpi" else "torch")
    kernel = _probe_kernel(kind, small=True) if compute else None
    intra_rows = sweep(node, **kw) if node is not None and node.size > 1 else []
    intra_idle = background_cpu(node) if intra_rows else 0.0
    if intra_rows:
        loaded_sweep(node, intra_rows, kernel)
    node_size = node.size if node is not None else 0
    inter_rows = sweep(comm, **kw) if multi else []
    inter_idle = background_cpu(comm) if inter_rows else 0.0
    if inter_rows:
        loaded_sweep(comm, inter_rows, kernel)
    if node is not None and node is not comm:
        node.close()
    transport, library, size, rank = comm.transport, comm.library(), comm.size, comm.rank
    probe = None
    if compute:
        probe = compute_probe(comm, hosts, kind)  # closes comm
    else:
        comm.close()
    if rank != 0:
        return None
    per_node = max(hosts.count(h) for h in set(hosts))
    return {
        "version": 2,
        "ailens_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "transport": transport,
        "library": library,
        "ranks": size,
        "hosts": sorted(set(hosts)),
        "ranks_per_node": per_node,
        "seconds": time.perf_counter() - t0,
        "intra": _fit(
            intra_rows, node_size, f"ailens calibrate on {transport}, intra-node", intra_idle
        ),
        "inter": _fit(inter_rows, size, f"ailens calibrate on {transport}, inter-node", inter_idle),
        "compute": probe,
    }
