"""``ailens calibrate``: measure, on the job's own transport and nodes, what the what-if needs.

Launch it the way the job is launched, on the same nodes::

    mpiexec -n 2 python -m ailens calibrate --out RUN_DIR/calibration.json          # mpi4py
    torchrun --nproc-per-node 2 -m ailens calibrate --out RUN_DIR/calibration.json  # DDP, gloo
    horovodrun -np 2 python -m ailens calibrate --out RUN_DIR/calibration.json      # Horovod

The transport follows the launcher (``--transport`` overrides): Horovod's own ops under
horovodrun, torch.distributed gloo under torchrun, MPI otherwise. Every rank times
allreduce, allgather and broadcast over a sweep of message sizes (plus the exact sizes a run
used, with ``--sizes-from RUN_DIR``); a repetition's time is its maximum over ranks, a
size's time the median over repetitions. Rank 0 fits alpha, beta and gamma by non-negative
least squares (``_collectives.fit_cost_params``): the node-local ranks give the intra-node
parameters, the whole job the inter-node ones when it spans hosts (a ring crossing nodes runs
at the pace of its slowest link). Each row also has the CPU time the collective took (the
transport's own threads compete with compute for the cores); each entry the transport's CPU
use while idle (``background_cpu``: Horovod's loop); with torch transports, allreduces of
64 kB and more are timed again while every rank computes (``loaded_seconds``).

The compute probe (``--no-compute`` skips it) times a small training-like kernel of the
job's kind (a convolutional network step with torch, matrix products with numpy) at 1, 2, ...
intra-op threads alone on the node, and with 1, 2, ... ranks of the node computing side by
side: the thread speed-up and the slowdown of sharing a node that the what-if applies. It is
a stand-in for the job's own kernels and is labelled so wherever it is used.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

import numpy as np

from . import __version__
from ._collectives import canonical_op, fit_cost_params
from ._io import write_json

OPS = ("allreduce", "allgather", "broadcast")
TRANSPORTS = ("mpi", "gloo", "horovod")
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


def launcher_transport(env: dict | None = None) -> str:
    """The transport the launcher implies: horovodrun -> horovod, torchrun -> gloo, else mpi."""
    env = os.environ if env is None else env
    if "HOROVOD_RANK" in env or "HOROVOD_HOSTNAME" in env:
        return "horovod"
    if "TORCHELASTIC_RUN_ID" in env or ("MASTER_ADDR" in env and "RANK" in env):
        return "gloo"
    return "mpi"


# --------------------------------------------------------------------------- transports


class _Comm:
    """The few things the sweep needs from a communicator."""

    transport = ""
    rank = 0
    size = 1
    asynchronous = False  # has start_allreduce

    def barrier(self) -> None: ...
    def max(self, x: np.ndarray) -> np.ndarray: ...
    def gather_hosts(self) -> list[str]: ...
    def op(self, op: str, nbytes: int): ...  # returns a zero-argument callable
    def start_allreduce(self, nbytes: int):
        """Begin an allreduce without waiting; returns a ``done() -> bool`` poll, or None
        when the transport has no asynchronous collectives."""
        return None

    def node(self, hosts: list[str]) -> _Comm | None: ...
    def library(self) -> str: ...
    def close(self) -> None: ...


class _MpiComm(_Comm):
    transport = "mpi"

    def __init__(self, comm=None) -> None:
        try:
            from mpi4py import MPI
        except ImportError as e:  # the extra is optional: say how to get it
            raise ImportError("pip install ailens[mpi]") from e
        self.MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.size = self.comm.rank, self.comm.size

    def barrier(self) -> None:
        self.comm.Barrier()

    def max(self, x: np.ndarray) -> np.ndarray:
        out = np.empty_like(x)
        self.comm.Allreduce(x, out, op=self.MPI.MAX)
        return out

    def gather_hosts(self) -> list[str]:
        return self.comm.allgather(self.MPI.Get_processor_name() or socket.gethostname())

    def op(self, op: str, nbytes: int):
        count = max(nbytes // 8, 1)
        send = np.ones(count)
        recv = np.empty(count * self.size) if op == "allgather" else np.empty(count)
        c, MPI = self.comm, self.MPI
        if op == "allreduce":
            return lambda: c.Allreduce(send, recv, op=MPI.SUM)
        if op == "allgather":
            return lambda: c.Allgather(send, recv)
        return lambda: c.Bcast(send, root=0)

    def node(self, hosts: list[str]) -> _Comm | None:
        sub = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED)
        return _MpiComm(sub)

    def library(self) -> str:
        return self.MPI.Get_library_version().splitlines()[0].strip()

    def close(self) -> None:
        if self.comm is not self.MPI.COMM_WORLD:
            self.comm.Free()


class _TorchComm(_Comm):
    """torch.distributed with gloo (as DDP on CPU uses it); ``group`` None = the world."""

    transport = "gloo"
    asynchronous = True

    def __init__(self, group=None) -> None:
        try:
            import torch
            import torch.distributed as dist
        except ImportError as e:
            raise ImportError("pip install ailens[torch]") from e
        self.torch, self.dist = torch, dist
        if not dist.is_initialized():
            dist.init_process_group("gloo")
        self.group = group
        self.rank = dist.get_rank(group) if group is not None else dist.get_rank()
        self.size = dist.get_world_size(group) if group is not None else dist.get_world_size()

    def barrier(self) -> None:
        self.dist.barrier(group=self.group)

    def max(self, x: np.ndarray) -> np.ndarray:
        t = self.torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64).copy())
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX, group=self.group)
        return t.numpy()

    def gather_hosts(self) -> list[str]:
        out = [None] * self.size
        self.dist.all_gather_object(out, socket.gethostname(), group=self.group)
        return [str(h) for h in out]

    def op(self, op: str, nbytes: int):
        torch, dist, g = self.torch, self.dist, self.group
        n = max(nbytes // 4, 1)  # float32, as DDP's gradient buckets
        x = torch.ones(n)
        if op == "allreduce":
            return lambda: dist.all_reduce(x, group=g)
        if op == "allgather":
            out = [torch.empty(n) for _ in range(self.size)]
            return lambda: dist.all_gather(out, x, group=g)
        src = dist.get_global_rank(g, 0) if g is not None else 0
        return lambda: dist.broadcast(x, src=src, group=g)

    def start_allreduce(self, nbytes: int):
        work = self.dist.all_reduce(
            self.torch.ones(max(nbytes // 4, 1)), group=self.group, async_op=True
        )
        return work.is_completed

    def node(self, hosts: list[str]) -> _Comm | None:
        # new_group is collective over the world: every rank creates every node's group.
        mine = None
        for h in sorted(set(hosts)):
            ranks = [r for r, x in enumerate(hosts) if x == h]
            g = self.dist.new_group(ranks)
            if hosts[self.dist.get_rank()] == h:
                mine = g
        return _TorchComm(mine)

    def library(self) -> str:
        return f"torch {self.torch.__version__} gloo"

    def close(self) -> None:
        if self.group is None and self.dist.is_initialized():
            self.dist.destroy_process_group()


class _HorovodComm(_Comm):
    """Horovod's own collectives (background thread, fusion, cycle time included)."""

    transport = "horovod"
    asynchronous = True

    def __init__(self) -> None:
        try:
            import horovod.torch as hvd
            import torch
        except ImportError as e:
            raise ImportError("pip install ailens[horovod] (Horovod built with PyTorch)") from e
        hvd.init()
        self.hvd, self.torch = hvd, torch
        self.rank, self.size = hvd.rank(), hvd.size()
        self._n = 0

    def _name(self) -> str:
        self._n += 1
        return f"ailens.calibrate.{self._n}"

    def barrier(self) -> None:
        self.hvd.allreduce(self.torch.zeros(1), name=self._name())

    def max(self, x: np.ndarray) -> np.ndarray:
        t = self.torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64).copy())
        return self.hvd.allreduce(t, op=self.hvd.Max, name=self._name()).numpy()

    def gather_hosts(self) -> list[str]:
        return [str(h) for h in self.hvd.allgather_object(socket.gethostname())]

    def op(self, op: str, nbytes: int):
        hvd, torch = self.hvd, self.torch
        x = torch.ones(max(nbytes // 4, 1))
        name = f"ailens.calibrate.{op}.{nbytes}"
        if op == "allreduce":
            return lambda: hvd.allreduce(x, op=hvd.Sum, name=name)
        if op == "allgather":
            return lambda: hvd.allgather(x, name=name)
        return lambda: hvd.broadcast(x, root_rank=0, name=name)

    def start_allreduce(self, nbytes: int):
        hvd = self.hvd
        handle = hvd.allreduce_async(self.torch.ones(max(nbytes // 4, 1)), name=self._name())
        done = [False]

        def poll() -> bool:
            if not done[0] and hvd.poll(handle):
                hvd.synchronize(handle)
                done[0] = True
            return done[0]

        return poll

    def node(self, hosts: list[str]) -> _Comm | None:
        # Process sets would have to be declared at init; a single-host job's world is its
        # node, a multi-host job's node-local costs are not measured (said in the output).
        return self if len(set(hosts)) == 1 else None

    def library(self) -> str:
        ctl = "gloo" if self.hvd.gloo_enabled() else "mpi"
        return f"horovod ({ctl} controller)"

    def close(self) -> None:
        self.hvd.shutdown()


def open_comm(transport: str) -> _Comm:
    """The world communicator of ``transport`` (mpi, gloo or horovod)."""
    if transport == "horovod":
        return _HorovodComm()
    if transport == "gloo":
        return _TorchComm()
    if transport == "mpi":
        return _MpiComm()
    raise ValueError(f"unknown transport {transport!r}; choose from {', '.join(TRANSPORTS)}")


# --------------------------------------------------------------------------- the sweep


def _time_op(comm: _Comm, op: str, nbytes: int, reps: int) -> tuple[float, float]:
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


def background_cpu(comm: _Comm, seconds: float = 0.5) -> float:
    """CPU time per second the transport burns while no collective runs (Horovod's
    background loop negotiates every cycle; gloo and MPI sleep), slowest rank."""
    comm.barrier()
    c, t = time.process_time(), time.perf_counter()
    time.sleep(seconds)  # measuring what idles away during this wait is the point
    rate = (time.process_time() - c) / (time.perf_counter() - t)
    return float(comm.max(np.array([rate]))[0])


def sweep(
    comm: _Comm,
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


def loaded_sweep(comm: _Comm, rows: list[dict], kernel, reps: int = 3) -> None:
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
            while not done():
                once()
                iters += 1
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
    from ._trace import load_run

    run = load_run(run_dir)
    pairs = set()
    for t in run.ranks:
        ev = t.events
        for op_id, n in set(zip(ev["op"].tolist(), ev["nbytes"].tolist(), strict=True)):
            kind = canonical_op(t.ops[op_id]) if op_id < len(t.ops) else None
            if kind in OPS and n > 0:
                pairs.add((kind, int(n)))
    return sorted(pairs)[:48]


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


def compute_probe(comm: _Comm, hosts: list[str], kind: str) -> dict | None:
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
    comm: _Comm | None = None,
    *,
    min_bytes: int = 8,
    max_bytes: int = 16 << 20,
    reps: int = 20,
    extra: list[tuple[str, int]] = (),
    compute: bool = True,
    probe_kind: str | None = None,
) -> dict | None:
    """Run the sweep (collective: every rank calls it); rank 0 gets the calibration
    document, other ranks None. ``comm`` defaults to the launcher's transport's world; it is
    closed on return (before the compute probe)."""
    comm = comm or open_comm(launcher_transport())
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


def main(argv: list[str] | None = None) -> int:
    """``ailens calibrate [--out PATH] [--transport T] [--sizes-from RUN_DIR] ...``; run under
    the job's launcher."""
    ap = argparse.ArgumentParser(prog="ailens calibrate", description=__doc__.split("\n\n")[0])
    default_out = Path(os.environ.get("AILENS_RUN_DIR", ".")) / "calibration.json"
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"JSON to write (default {default_out}; platform.json with --from-nccl-tests)",
    )
    ap.add_argument(
        "--transport",
        choices=TRANSPORTS,
        default=None,
        help="collectives to time (default: from the launcher: horovodrun -> horovod, "
        "torchrun -> gloo, otherwise mpi)",
    )
    ap.add_argument("--min-bytes", type=int, default=8)
    ap.add_argument("--max-bytes", type=int, default=16 << 20)
    ap.add_argument(
        "--reps", type=int, default=20, help="repetitions per size (fewer for large messages)"
    )
    ap.add_argument(
        "--sizes-from",
        type=Path,
        default=None,
        metavar="RUN_DIR",
        help="also time the exact (op, bytes) pairs this recorded run used",
    )
    ap.add_argument(
        "--no-compute", action="store_true", help="skip the thread / node-sharing compute probe"
    )
    nt = ap.add_argument_group(
        "from nccl-tests output (no launch: fits a platform description on logs you have)"
    )
    nt.add_argument(
        "--from-nccl-tests",
        nargs="+",
        type=Path,
        default=None,
        metavar="LOG",
        help="fit a platform (ailens/_platforms.py) on these all_reduce_perf outputs: one-node "
        "logs fit the intra-node link, multi-node logs the network; writes the platform JSON "
        "to --out (default platform.json)",
    )
    nt.add_argument(
        "--devices-per-node",
        type=int,
        default=None,
        metavar="N",
        help="devices per node of the platform (default: the base platform's, else the most "
        "ranks one host had in the logs)",
    )
    nt.add_argument(
        "--platform",
        default=None,
        metavar="LABEL|FILE",
        help="platform whose figures a log does not measure are kept (a default label such "
        "as dgx-a100, dgx1-v100, or a platform JSON); default: a generic node",
    )
    nt.add_argument("--name", default=None, help="name of the fitted platform")
    args = ap.parse_args(argv)
    if args.from_nccl_tests:
        return _from_nccl_tests(args)
    args.out = args.out or default_out
    transport = args.transport or launcher_transport()
    comm = open_comm(transport)
    if comm.size < 2:
        if comm.rank == 0:
            print(
                "ailens calibrate: needs 2 or more ranks, launched like the job: "
                "mpiexec -n 2 python -m ailens calibrate --out ... (or torchrun / horovodrun)"
            )
        comm.close()
        return 2
    extra = run_sizes(args.sizes_from) if args.sizes_from else []
    doc = calibrate(
        comm,
        min_bytes=args.min_bytes,
        max_bytes=args.max_bytes,
        reps=args.reps,
        extra=extra,
        compute=not args.no_compute,
    )
    if doc is None:
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json(args.out, doc)
    for kind in ("intra", "inter"):
        d = doc[kind]
        if d:
            print(
                f"ailens calibrate: {doc['transport']} {kind}-node on {d['ranks']} ranks: "
                f"alpha {d['alpha'] * 1e6:.2f} us, "
                f"bandwidth {1 / d['beta'] / 1e9 if d['beta'] else float('inf'):.3g} GB/s, "
                f"gamma {d['gamma'] * 1e9:.3f} ns/B (fit error {100 * d['rel_rmse']:.0f}%)"
            )
    c = doc["compute"]
    if c:
        th = c["threads"]
        co = c["corun"]
        print(
            f"ailens calibrate: compute probe ({c['kernel']}): "
            + ", ".join(f"{k} threads {th['1'] / v:.2f}x" for k, v in th.items())
            + "; "
            + ", ".join(f"{k} ranks side by side {v / co['1']:.2f}x slower" for k, v in co.items())
        )
    print(f"ailens calibrate: wrote {args.out}")
    return 0


def _from_nccl_tests(args) -> int:
    """``ailens calibrate --from-nccl-tests LOG ...``: a platform fitted on the logs."""
    from ._platforms import load_platform, platform_from_nccl_tests, platform_to_dict

    texts = []
    for f in args.from_nccl_tests:
        try:
            texts.append(f.read_text(errors="replace"))
        except OSError as e:
            print(f"ailens calibrate: cannot read {f}: {e}", file=sys.stderr)
            return 2
    try:
        base = load_platform(args.platform) if args.platform else None
        plat = platform_from_nccl_tests(
            texts,
            devices_per_node=args.devices_per_node,
            base=base,
            name=args.name,
            sources=[str(f) for f in args.from_nccl_tests],
        )
    except ValueError as e:
        print(f"ailens calibrate: {e}", file=sys.stderr)
        return 2
    out = args.out or Path("platform.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, platform_to_dict(plat))
    net = plat.network
    print(
        f"ailens calibrate: platform {plat.name}: {plat.devices_per_node} devices per node, "
        f"intra-node {plat.intra.bandwidth_Bps / 1e9:.3g} GB/s bus bandwidth, "
        f"{plat.intra.latency_s * 1e6:.3g} us per ring step; base latency "
        f"{plat.base_latency_s * 1e6:.3g} us"
        + (
            f"; network {plat.nics_per_node} x {net.bandwidth_Bps / 1e9:.3g} GB/s per node, "
            f"{net.latency_s * 1e6:.3g} us per step"
            if net is not None
            else ""
        )
    )
    for note in plat.notes:
        print(f"  {note}")
    print(f"ailens calibrate: wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
