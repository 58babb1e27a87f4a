"""mpi4py: wrap a communicator so ailens records its collectives.

::

    from mpi4py import MPI
    from ailens.integrations.mpi import wrap

    comm = wrap(MPI.COMM_WORLD, run_dir="runs/kmeans", total_steps=iterations)
    for it in range(iterations):
        ...                                       # local work
        comm.Allreduce(local_sums, sums)          # recorded (op, bytes, time, work before it)
        if comm.lens.should_stop:                 # with early_stop=True
            break
    comm.close()                                  # collective: every rank calls it

``wrap(comm)`` returns a :class:`LensComm`, a proxy that forwards every attribute to the real
communicator (``.comm``) and records, once per call on every rank:

- lowercase (pickle) collectives: ``allreduce, allgather, bcast, reduce, gather, scatter,
  alltoall, scan, exscan, barrier``. Bytes recorded: a numpy array's ``nbytes``, a
  bytes-like object's length, a list/tuple of those summed (the per-rank items of
  ``scatter``/``alltoall``); anything else is recorded as 0 bytes, because its pickled size is
  only known by pickling it a second time. Non-root ranks of ``bcast``/``scatter`` record 0.
- buffer collectives: ``Allreduce, Allgather(v), Alltoall(v/w), Bcast, Reduce, Gather(v),
  Scatter(v), Reduce_scatter(_block), Scan, Exscan, Barrier``. Bytes from the buffer spec:
  ``arr`` (``.nbytes``), ``[buf, datatype]``, ``[buf, count, datatype]``, ``[buf, (count,
  displ), datatype]``, ``[buf, counts, displs, datatype]``. The local payload is the send
  buffer (the receive buffer for ``Scatter``); with ``MPI.IN_PLACE`` the receive buffer
  (divided by the communicator size for the gather family).
- non-blocking collectives (``Iallreduce, Ibcast, Ibarrier, ...``): the tick lasts until the
  request completes. They return a :class:`TimedRequest` (a real ``MPI.Request`` subclass
  sharing the handle) whose ``Wait/wait/Test/test`` end the tick. ``MPI.Request.Waitall``
  and friends work on them too; the tick then ends when this communicator next records
  something (the next collective, step end or close), a little late.

Persistent (``*_init``) and point-to-point operations are not recorded.

Step boundaries (``steps=``):

- ``"infer"`` (default): a plain mpi4py loop has no step boundary, so the adapter looks for
  the repeating (op, bytes) sequence of the collectives. Every 4 collectives until it is
  found, the ranks agree through one small ``Allreduce`` on the real communicator (not
  recorded) on the shortest period repeated at least 3 times over >= 12 collectives, and
  commit once two checks in a row agree. From then on ``lens.step_end()`` is called every
  period. Iterations before the commit merge into the first step (``steps_merged`` says how
  many; a ``total_steps`` given is reduced by it). Assumes every iteration issues the same
  collectives; if none repeats within 1024 collectives it gives up (call
  ``comm.lens.step_end()`` yourself).
- ``"manual"``: no inference; call ``comm.lens.step_end()`` at the end of each iteration.

The cross-rank phase exchange uses the real communicator's ``Allreduce`` (int64, SUM; not
recorded). An exception inside this adapter disables ailens on that rank (``Lens._fault``)
and the MPI call still runs exactly once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from ailens import Lens

log = logging.getLogger("ailens")

__all__ = ["wrap", "LensComm", "TimedRequest"]

_IN_PLACE = MPI.IN_PLACE


# --------------------------------------------------------------------------- bytes


def buffer_nbytes(spec: Any) -> int | None:
    """Bytes described by an mpi4py buffer spec; None for ``MPI.IN_PLACE`` / ``None``."""
    if spec is None or spec is _IN_PLACE or spec is MPI.BOTTOM:
        return None
    if isinstance(spec, (list, tuple)):
        buf, rest = spec[0], spec[1:]
        dtype = rest[-1] if rest and isinstance(rest[-1], MPI.Datatype) else None
        counts = [x for x in rest if not isinstance(x, MPI.Datatype)]
        if dtype is not None and counts:
            count = counts[0]
            if isinstance(count, tuple):      # [buf, (count, displ), datatype]
                count = count[0]
            if isinstance(count, (list, np.ndarray)):  # [buf, counts, displs, datatype]
                count = int(np.sum(count))
            if isinstance(count, (int, np.integer)):
                return int(count) * dtype.Get_extent()[1]
        return buffer_nbytes(buf)
    nbytes = getattr(spec, "nbytes", None)
    if isinstance(nbytes, (int, np.integer)):
        return int(nbytes)
    return memoryview(spec).nbytes


def object_nbytes(obj: Any) -> int:
    """Payload bytes of a pickled collective's object when cheaply known, else 0."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    if isinstance(obj, memoryview):
        return obj.nbytes
    if isinstance(obj, (list, tuple)):
        return sum(object_nbytes(x) for x in obj if isinstance(x, (np.ndarray, bytes, bytearray)))
    return 0


def _arg(args: tuple, kwargs: dict, i: int, name: str) -> Any:
    return args[i] if len(args) > i else kwargs.get(name)


def _send(comm, args, kwargs) -> int:
    """Send buffer bytes; with IN_PLACE the receive buffer's."""
    n = buffer_nbytes(_arg(args, kwargs, 0, "sendbuf"))
    return n if n is not None else (buffer_nbytes(_arg(args, kwargs, 1, "recvbuf")) or 0)


def _send_gathered(comm, args, kwargs) -> int:
    """Gather family: the local contribution; with IN_PLACE one rank's share of recvbuf."""
    n = buffer_nbytes(_arg(args, kwargs, 0, "sendbuf"))
    if n is None:
        n = (buffer_nbytes(_arg(args, kwargs, 1, "recvbuf")) or 0) // comm.Get_size()
    return n


def _recv_scattered(comm, args, kwargs) -> int:
    """Scatter family: what this rank receives; with IN_PLACE (root) its share of sendbuf."""
    n = buffer_nbytes(_arg(args, kwargs, 1, "recvbuf"))
    if n is None:
        n = (buffer_nbytes(_arg(args, kwargs, 0, "sendbuf")) or 0) // comm.Get_size()
    return n


def _bcast_buf(comm, args, kwargs) -> int:
    return buffer_nbytes(_arg(args, kwargs, 0, "buf")) or 0


def _obj(name: str) -> Callable:
    return lambda comm, args, kwargs: object_nbytes(_arg(args, kwargs, 0, name))


def _zero(comm, args, kwargs) -> int:
    return 0


# method -> (op name, local payload bytes); each buffer op's I-variant is added when it exists
_BUFFER_OPS: dict[str, tuple[str, Callable]] = {
    "Allreduce": ("allreduce", _send),
    "Reduce": ("reduce", _send),
    "Allgather": ("allgather", _send_gathered),
    "Allgatherv": ("allgather", _send_gathered),
    "Gather": ("gather", _send_gathered),
    "Gatherv": ("gather", _send_gathered),
    "Scatter": ("scatter", _recv_scattered),
    "Scatterv": ("scatter", _recv_scattered),
    "Alltoall": ("alltoall", _send),
    "Alltoallv": ("alltoall", _send),
    "Alltoallw": ("alltoall", _send),
    "Reduce_scatter": ("reduce_scatter", _send),
    "Reduce_scatter_block": ("reduce_scatter", _send),
    "Scan": ("scan", _send),
    "Exscan": ("exscan", _send),
    "Bcast": ("broadcast", _bcast_buf),
    "Barrier": ("barrier", _zero),
}
_OBJECT_OPS: dict[str, tuple[str, Callable]] = {
    "allreduce": ("allreduce", _obj("sendobj")),
    "reduce": ("reduce", _obj("sendobj")),
    "allgather": ("allgather", _obj("sendobj")),
    "gather": ("gather", _obj("sendobj")),
    "scatter": ("scatter", _obj("sendobj")),
    "alltoall": ("alltoall", _obj("sendobj")),
    "scan": ("scan", _obj("sendobj")),
    "exscan": ("exscan", _obj("sendobj")),
    "bcast": ("broadcast", _obj("obj")),
    "barrier": ("barrier", _zero),
}


# --------------------------------------------------------------------------- requests


class TimedRequest(MPI.Request):
    """An ``MPI.Request`` sharing the handle of a non-blocking collective's request; its
    completion ends the collective's tick. Built by :class:`LensComm`, not by users."""

    def _ailens_end(self) -> None:
        owner = self.__dict__.pop("_ailens_owner", None)
        if owner is not None:
            owner._end_request(self)

    def Wait(self, status: MPI.Status | None = None) -> bool:  # noqa: N802 - mpi4py's name
        result = super().Wait(status)
        self._ailens_end()
        return result

    def wait(self, status: MPI.Status | None = None) -> Any:
        result = super().wait(status)
        self._ailens_end()
        return result

    def Test(self, status: MPI.Status | None = None) -> bool:  # noqa: N802
        flag = super().Test(status)
        if flag:
            self._ailens_end()
        return flag

    def test(self, status: MPI.Status | None = None) -> tuple[bool, Any]:
        flag, msg = super().test(status)
        if flag:
            self._ailens_end()
        return flag, msg


# --------------------------------------------------------------------------- step inference


class _StepInference:
    """Finds the period of the collective sequence, agreed on by all ranks (see module doc)."""

    CHECK_EVERY = 4
    MIN_REPS = 3
    MIN_TICKS = 12
    MAX_HISTORY = 1024

    def __init__(self, real_comm) -> None:
        self.comm = real_comm
        self.keys: list[tuple[str, int]] = []
        self.period = 0
        self.start = 0
        self.active = True       # still looking
        self.broken = False      # local failure: vote to give up so no rank waits
        self._last: tuple[int, int] | None = None
        self.merged = 0

    def find(self) -> tuple[int, int]:
        """(period, start) of the shortest repeating suffix, or (0, 0)."""
        keys, n = self.keys, len(self.keys)
        for p in range(1, n // self.MIN_REPS + 1):
            if keys[n - 3 * p : n - p] == keys[n - 2 * p : n]:
                s = n - 3 * p
                while s > 0 and keys[s - 1] == keys[s - 1 + p]:
                    s -= 1
                if n - s >= self.MIN_TICKS:
                    return (p, s)
        return (0, 0)

    def check(self, tick: int) -> bool:
        """Collective (same ticks on every rank): agree on a period; True once committed."""
        try:
            p, s = (0, 0) if self.broken else self.find()
        except Exception:  # noqa: BLE001 - still join the vote below
            p, s, self.broken = 0, 0, True
        give_up = self.broken or len(self.keys) >= self.MAX_HISTORY
        mine = np.array([p, s, -p, -s, int(give_up)], dtype=np.int64)
        agreed = np.empty_like(mine)
        self.comm.Allreduce(mine, agreed, op=MPI.MAX)
        same = agreed[0] == -agreed[2] and agreed[1] == -agreed[3]
        cand = (int(agreed[0]), int(agreed[1])) if same and agreed[0] > 0 else None
        if cand is not None and cand == self._last:
            self.period, self.start = cand
            self.active = False
            self.keys = []
            return True
        self._last = cand
        if agreed[4]:
            self.active = False
            self.keys = []
            log.info("ailens: no repeating collective sequence found in the first %d "
                     "collectives; call lens.step_end() to mark iterations", tick)
        return False


# --------------------------------------------------------------------------- communicator


class LensComm:
    """An mpi4py communicator proxy that records collectives; ``.lens`` is the Lens and
    ``.comm`` the real communicator. Everything not listed in the module docstring is
    forwarded unchanged."""

    def __init__(self, comm, lens: Lens, steps: str) -> None:
        self.comm = comm
        self.lens = lens
        self._open: list[TimedRequest] = []
        self._infer = _StepInference(comm) if steps == "infer" else None

    # ---- public

    @property
    def should_stop(self) -> bool:
        """True on every rank at the same iteration once ``early_stop=True`` and the
        signature is ready; check it in your loop and break."""
        return self.lens.should_stop

    @property
    def steps_merged(self) -> int:
        """Iterations that ran before the period was inferred (counted in the first step)."""
        return self._infer.merged if self._infer is not None else 0

    def close(self) -> None:
        """End the last inferred step, then close the Lens (collective: every rank calls it)."""
        lens = self.lens
        if lens.closed:
            return
        try:
            self._sweep()
        except Exception as e:  # noqa: BLE001
            lens._fault(e)
        inf = self._infer
        if inf is not None and inf.period and lens.ticks > inf.start and (
            (lens.ticks - inf.start) % inf.period == 0
        ):
            lens.step_end()  # the last iteration's end (step_end never raises)
        lens.close()

    def __enter__(self) -> LensComm:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.comm, name)

    def __repr__(self) -> str:
        return f"<ailens LensComm of {self.comm!r}>"

    # ---- internals

    def _before(self, op: str, nbytes: int) -> None:
        """Runs before every recorded collective: late request ends, inferred step ends."""
        if self._open:
            try:
                self._sweep()
            except Exception as e:  # noqa: BLE001 - must not skip the inference below
                self.lens._fault(e)
        # Step inference runs on every rank even with ailens disabled there: its agreement
        # Allreduce and the step ends (which drive the Lens exchange) are collective.
        inf = self._infer
        if inf is None:
            return
        tick = self.lens.ticks
        if inf.period:
            if tick > inf.start and (tick - inf.start) % inf.period == 0:
                self.lens.step_end()
            return
        if not inf.active:
            return
        if tick and tick % inf.CHECK_EVERY == 0 and inf.check(tick):
            self._committed(tick)
            if tick > inf.start and (tick - inf.start) % inf.period == 0:
                self.lens.step_end()
            return
        if inf.active:
            inf.keys.append((op, nbytes))

    def _committed(self, tick: int) -> None:
        inf = self._infer
        inf.merged = max(0, (tick - inf.start - 1) // inf.period)
        total = self.lens.config.total_steps
        if total and inf.merged:
            self.lens.set_total_steps(max(1, total - inf.merged))
        log.info("ailens: one iteration = %d collectives (found at collective %d)",
                 inf.period, tick)

    def _record(self, name: str, op: str, nbytes_of: Callable, nonblocking: bool, args, kwargs):
        real = getattr(self.comm, name)
        lens = self.lens
        if lens.closed:
            return real(*args, **kwargs)
        try:
            try:
                nbytes = int(nbytes_of(self.comm, args, kwargs))
            except Exception:  # noqa: BLE001 - an odd buffer spec: bytes unknown, not a fault
                nbytes = 0
            self._before(op, nbytes)
            tick = lens.collective_begin(op, nbytes)
        except Exception as e:  # noqa: BLE001 - fail open: the call still runs once
            lens._fault(e)
            return real(*args, **kwargs)
        try:
            result = real(*args, **kwargs)
        except BaseException:
            lens.collective_end(tick)
            raise
        if nonblocking:
            try:
                req = TimedRequest(result)
                req._ailens_owner = self
                req._ailens_tick = tick
                self._open.append(req)
                return req
            except Exception as e:  # noqa: BLE001
                lens._fault(e)
                return result
        lens.collective_end(tick)
        return result

    def _end_request(self, req: TimedRequest) -> None:
        # By identity: MPI.Request's == compares handles, and completed ones are all null.
        self._open = [r for r in self._open if r is not req]
        self.lens.collective_end(req._ailens_tick)

    def _sweep(self) -> None:
        """Requests completed behind our back (MPI.Request.Waitall...) now have a null
        handle: end their ticks now."""
        for req in [r for r in self._open if not r]:
            req._ailens_end()


def _method(name: str, op: str, nbytes_of: Callable, nonblocking: bool) -> Callable:
    def method(self, *args, **kwargs):
        return self._record(name, op, nbytes_of, nonblocking, args, kwargs)

    method.__name__ = name
    method.__doc__ = f"``{name}`` of the real communicator, recorded by ailens as {op!r}."
    return method


for _name, (_op, _nb) in {**_BUFFER_OPS, **_OBJECT_OPS}.items():
    setattr(LensComm, _name, _method(_name, _op, _nb, False))
    _iname = "I" + _name[0].lower() + _name[1:]  # Allreduce -> Iallreduce
    if _name[0].isupper() and hasattr(MPI.Intracomm, _iname):
        setattr(LensComm, _iname, _method(_iname, _op, _nb, True))
del _name, _op, _nb, _iname


def wrap(comm: Any = None, *, steps: str = "infer", **config: Any) -> LensComm:
    """Wrap an mpi4py communicator (default ``MPI.COMM_WORLD``); returns a :class:`LensComm`
    whose ``.lens`` is the Lens. ``steps``: ``"infer"`` or ``"manual"`` (module docstring).
    Other keywords are ``LensConfig`` fields. Collective: call it on every rank."""
    if steps not in ("infer", "manual"):
        raise ValueError(f"steps={steps!r}: choose 'infer' or 'manual'")
    comm = MPI.COMM_WORLD if comm is None else comm
    if isinstance(comm, LensComm):
        raise TypeError("this communicator is already wrapped by ailens")

    def exchange(values: np.ndarray) -> np.ndarray:
        send = np.ascontiguousarray(values, dtype=np.int64)
        out = np.empty_like(send)
        comm.Allreduce(send, out, op=MPI.SUM)  # the real comm: never recorded
        return out

    config.setdefault("framework", "mpi4py")
    vendor, version = MPI.get_vendor()
    config.setdefault("backend", f"{vendor} {'.'.join(map(str, version))}")
    lens = Lens(rank=comm.Get_rank(), world_size=comm.Get_size(), exchange=exchange, **config)
    return LensComm(comm, lens, steps)
