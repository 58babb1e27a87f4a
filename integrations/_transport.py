"""The collectives ``ailens calibrate`` times, on each framework's own transport.

The core's ``ailens.tools.calibrate.calibrate`` takes one of these (its ``Transport``
protocol says what it needs); ``ailens calibrate`` picks it from the launcher: Horovod's own
ops under horovodrun, torch.distributed gloo under torchrun, MPI otherwise. Each imports its
framework only when opened, with an install hint when it is missing.
"""

from __future__ import annotations

import os
import socket

import numpy as np

TRANSPORTS = ("mpi", "gloo", "horovod")


def launcher_transport(env: dict | None = None) -> str:
    """The transport the launcher implies: horovodrun -> horovod, torchrun -> gloo, else mpi."""
    env = os.environ if env is None else env
    if "HOROVOD_RANK" in env or "HOROVOD_HOSTNAME" in env:
        return "horovod"
    if "TORCHELASTIC_RUN_ID" in env or ("MASTER_ADDR" in env and "RANK" in env):
        return "gloo"
    return "mpi"


def open_transport(transport: str) -> MpiTransport | TorchTransport | HorovodTransport:
    """The world communicator of ``transport`` (mpi, gloo or horovod)."""
    if transport == "horovod":
        return HorovodTransport()
    if transport == "gloo":
        return TorchTransport()
    if transport == "mpi":
        return MpiTransport()
    raise ValueError(f"unknown transport {transport!r}; choose from {', '.join(TRANSPORTS)}")


class MpiTransport:
    """mpi4py; ``comm`` None = COMM_WORLD."""

    transport = "mpi"
    asynchronous = False

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

    def start_allreduce(self, nbytes: int):
        return None  # blocking collectives only: the loaded sweep is skipped

    def node(self, hosts: list[str]) -> MpiTransport:
        sub = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED)
        return MpiTransport(sub)

    def library(self) -> str:
        return self.MPI.Get_library_version().splitlines()[0].strip()

    def close(self) -> None:
        if self.comm is not self.MPI.COMM_WORLD:
            self.comm.Free()


class TorchTransport:
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

    def node(self, hosts: list[str]) -> TorchTransport:
        # new_group is collective over the world: every rank creates every node's group.
        mine = None
        for h in sorted(set(hosts)):
            ranks = [r for r, x in enumerate(hosts) if x == h]
            g = self.dist.new_group(ranks)
            if hosts[self.dist.get_rank()] == h:
                mine = g
        return TorchTransport(mine)

    def library(self) -> str:
        return f"torch {self.torch.__version__} gloo"

    def close(self) -> None:
        if self.group is None and self.dist.is_initialized():
            self.dist.destroy_process_group()


class HorovodTransport:
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

    def node(self, hosts: list[str]) -> HorovodTransport | None:
        # Process sets would have to be declared at init; a single-host job's world is its
        # node, a multi-host job's node-local costs are not measured (said in the output).
        return self if len(set(hosts)) == 1 else None

    def library(self) -> str:
        ctl = "gloo" if self.hvd.gloo_enabled() else "mpi"
        return f"horovod ({ctl} controller)"

    def close(self) -> None:
        self.hvd.shutdown()
