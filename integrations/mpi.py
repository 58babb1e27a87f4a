"""mpi4py: wrap a communicator so ailens records its collectives.

::

    from mpi4py import MPI
    from ailens.integrations.mpi import wrap

    comm = wrap(MPI.COMM_WORLD, run_dir="runs/kmeans", total_steps=iterations)
    for it in range(iterations):
        ...                                       # local work
        comm.Allreduce(local_sums, sums)          # recorded (op, bytes, time, work before it)
        if comm.should_stop:                      # with early_stop=True
            break
    comm.close()            # optional (else at exit); collective: every rank calls it

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
  something (the next collective, or close), a little late.

Persistent (``*_init``) and point-to-point operations are not recorded.

Step boundaries (``steps=``):

- ``"infer"`` (default): a plain mpi4py loop has no step boundary, so steps are inferred from
  the repeating collectives (``ailens.record.steps``), keyed by op, bytes and the calling line: the
  loop body is found at its second iteration, so even a 4-iteration loop records its 4
  steps, and the last one is ended when the run ends. Until found, the ranks vote through a
  small ``Allreduce`` on the real communicator (not recorded). Iterations that ran before a
  late commit go into the first step (``steps_merged``; a ``total_steps`` given is reduced by
  it). Calling ``comm.step_end()`` (or ``comm.lens.step_end()``) stops the inference.
- ``"manual"``: no inference; call ``comm.step_end()`` at the end of each iteration.

``comm.close()`` (collective) ends the run; without it the Lens closes at interpreter exit
(without the last cross-rank exchange) and still ends the last inferred step. The cross-rank
exchange uses the real communicator's ``Allreduce`` (int64, SUM; not recorded), its periodic
rounds ``Iallreduce``: started at one step end, waited for at the next.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import mpi4py
import numpy as np
from mpi4py import MPI

from ailens import Lens
from ailens.record.buffer import BLOCKING_CALL

from ._base import Attachment, open_lens
from ._base import _local as _base_local

__all__ = ["wrap", "LensComm", "TimedRequest"]

_IN_PLACE = MPI.IN_PLACE


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
            if isinstance(count, tuple):  # [buf, (count, displ), datatype]
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
# Buffer collectives whose local count MPI requires to be the same on every rank.
_EQUAL_COUNTS = frozenset(
    "Allreduce Iallreduce Bcast Ibcast Allgather Iallgather Alltoall Ialltoall Reduce Ireduce "
    "Reduce_scatter_block Scan Exscan Barrier".split()
)
_OBJECT_OPS: dict[str, tuple[str, Callable]] = {
    name: (name, _obj("sendobj"))
    for name in ("allreduce", "reduce", "allgather", "gather", "scatter", "alltoall", "scan")
}
_OBJECT_OPS.update(
    exscan=("exscan", _obj("sendobj")), bcast=("broadcast", _obj("obj")), barrier=("barrier", _zero)
)


# Objects of a pickled collective whose payload is recorded as 0 bytes (``object_nbytes``).
_NO_PAYLOAD = frozenset({float, int, bool, complex, str, dict, type(None)})
# Where a compiled wrapper finds a call's payload: its first argument, or none.
_SIZE_FIRST, _SIZE_ZERO = 1, 2


class TimedRequest(MPI.Request):
    """An ``MPI.Request`` sharing the handle of a non-blocking collective's request; its
    completion ends the collective's tick. Built by :class:`LensComm`, not by users."""

    def _ailens_end(self) -> None:
        done = self.__dict__.pop("_ailens_done", None)
        if done is not None:
            done()

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


class LensComm(Attachment):
    """An mpi4py communicator proxy that records collectives; ``.lens`` is the Lens and
    ``.comm`` the real communicator. Everything not listed in the module docstring is
    forwarded unchanged."""

    def __init__(self, comm, lens: Lens, steps: str, exchange) -> None:
        self.comm = comm
        self._open: list[TimedRequest] = []
        super().__init__(lens, infer_steps=steps == "infer", agree=exchange)
        if BLOCKING_CALL is not None:
            self._compile_blocking()

    def _compile_blocking(self) -> None:
        """Each blocking collective whose payload is its first argument (or that has none)
        becomes, on this proxy, a compiled wrapper (``BlockingCall``): the common case of
        its Python method (``_blocking_method``) in C, that method its fallback. With the
        steps marked, or followed by op (step inference's observation made in C, a step end
        then the Lens's), a collective costs ailens no Python frame of the wrapper's; the
        search, a broken iteration and the rest go through the method. At tens of
        milliseconds a step the Python path, run in caches the step's own work emptied, was
        most of ailens's cost (issue 33)."""
        for name, (op, nbytes_of) in {**_BUFFER_OPS, **_OBJECT_OPS}.items():
            if nbytes_of is _zero:
                how = _SIZE_ZERO
            elif _first_sized(name, nbytes_of):
                how = _SIZE_FIRST  # an array's bytes; a plain value's 0 (object_nbytes)
            else:
                continue  # the scatter family: the payload is the receive buffer
            real = getattr(self.comm, name, None)
            if real is None:
                continue
            vars(self)[name] = BLOCKING_CALL(
                real=real,
                owner=self,
                local=_base_local,
                op=op,
                name=name,
                array_type=np.ndarray,
                no_payload=_NO_PAYLOAD if name in _OBJECT_OPS else None,
                sizing=how,
                equal_counts=name in _EQUAL_COUNTS,
                fallback=getattr(LensComm, name).__get__(self),
            )

    @property
    def steps_merged(self) -> int:
        """Iterations that ran before the period was inferred (counted in the first step)."""
        return self._merged

    def __getattr__(self, name: str) -> Any:
        if name == "comm":  # not set yet: no recursion through the proxy
            raise AttributeError(name)
        return getattr(self.comm, name)

    def __repr__(self) -> str:
        return f"<ailens LensComm of {self.comm!r}>"

    def _record(self, name: str, op: str, nbytes_of: Callable, nonblocking: bool, args, kwargs):
        real = getattr(self.comm, name)
        if not self.recording:
            return real(*args, **kwargs)
        if self._open:
            self._before_close()  # end the ticks of requests completed behind our back
        nbytes = _nbytes(nbytes_of, self.comm, args, kwargs)
        key = step_op = None
        if self.infers_steps:
            # Step ends are followed by op alone, without a vote, so that op must be the same
            # on every rank: the method name, and the bytes where MPI requires equal counts
            # (an evaluation's scalar allreduce then does not pass for the loop's first one).
            step_op = f"{name}:{nbytes}" if name in _EQUAL_COUNTS else name
            if self.wants_step_keys:  # the script's line tells equal collectives apart
                caller = sys._getframe(2)
                key = (op, nbytes, caller.f_code.co_filename, caller.f_lineno)
        pending = self._timed if nonblocking else None
        return self.call(
            real, op, nbytes, args, kwargs, step_key=key, step_op=step_op, pending=pending
        )

    def _timed(self, request, end: Callable[[], None]) -> TimedRequest:
        req = TimedRequest(request)

        def done() -> None:
            # By identity: MPI.Request's == compares handles, and completed ones are all null.
            self._open = [r for r in self._open if r is not req]
            end()

        req._ailens_done = done
        self._open.append(req)
        return req

    def _before_close(self) -> None:
        """Requests completed behind our back (MPI.Request.Waitall...) now have a null
        handle: end their ticks now (a little late)."""
        for req in [r for r in self._open if not r]:
            req._ailens_end()


def _method(name: str, op: str, nbytes_of: Callable, nonblocking: bool) -> Callable:
    if nonblocking:

        def method(self, *args, **kwargs):
            return self._record(name, op, nbytes_of, True, args, kwargs)

    else:
        method = _blocking_method(name, op, nbytes_of)
    method.__name__ = name
    method.__doc__ = f"``{name}`` of the real communicator, recorded by ailens as {op!r}."
    return method


def _nbytes(nbytes_of: Callable, comm, args: tuple, kwargs: dict) -> int:
    """The payload's bytes by ``nbytes_of``; 0 when the arguments cannot be sized."""
    try:
        return int(nbytes_of(comm, args, kwargs))
    except Exception:  # noqa: BLE001 - an odd buffer spec: bytes unknown, not a fault
        return 0


def _first_sized(name: str, nbytes_of: Callable) -> bool:
    """Whether a collective's payload is its first argument (unless it is MPI.IN_PLACE: not
    an array), where a fast path reads its bytes itself."""
    return nbytes_of in (_send, _send_gathered, _bcast_buf) or (
        name in _OBJECT_OPS and nbytes_of is not _zero
    )


def _blocking_method(name: str, op: str, nbytes_of: Callable) -> Callable:
    """A blocking collective: the common case (recording, no request open, steps marked or
    followed by op alone) is ``LensComm._record`` and ``Attachment.call`` inlined into this
    one frame, the bytes of a first argument that is a numpy array (or a plain number for a
    pickled collective) read here; the rest goes through ``_record``. Every Python call and
    lookup is paid per collective, and after the script's own work in cold caches: where
    the buffer is compiled, the common case is in C (``LensComm._compile_blocking``) and
    this method its fallback."""
    equal_counts = name in _EQUAL_COUNTS
    first_sized = _first_sized(name, nbytes_of)
    no_payload = _NO_PAYLOAD if name in _OBJECT_OPS else frozenset()
    local, ndarray = _base_local, np.ndarray

    def method(self, *args, **kwargs):
        finder = self._finder
        if (
            not self.attached
            or local.depth
            or self._open
            or (finder is not None and finder.needs_keys)
        ):
            return self._record(name, op, nbytes_of, False, args, kwargs)
        comm = self.comm
        real = getattr(comm, name)
        if first_sized and args:
            first = args[0]
            kind = type(first)
            if kind is ndarray:
                nbytes = first.nbytes
            elif kind in no_payload:
                nbytes = 0
            else:
                nbytes = _nbytes(nbytes_of, comm, args, kwargs)
        else:
            nbytes = _nbytes(nbytes_of, comm, args, kwargs)
        lens = self.lens
        if finder is None:  # steps marked (or not inferred): no lock, one call into the buffer
            try:
                tick = lens.collective_begin(op, nbytes)
            except Exception as e:  # noqa: BLE001 - Attachment._begin_tick
                lens.disable(e)
                tick = lens.collective_begin(op, nbytes)
        else:
            step_op = f"{name}:{nbytes}" if equal_counts else name  # see _record
            with self.lock:  # Attachment.begin: the observation and the tick in one order
                if self._finder is not None:
                    self._observe(step_op, (op, nbytes))
                tick = self._begin_tick(op, nbytes)
        local.depth = 1  # the framework's own calls inside are not recorded
        try:
            result = real(*args, **kwargs)
        except BaseException:
            self.end(tick)
            raise
        finally:
            local.depth = 0
        try:  # looked up now: a Lens disabled meanwhile counts only
            lens.collective_end(tick)
        except Exception as e:  # noqa: BLE001
            lens.disable(e)
        return result

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

    def start(values: np.ndarray) -> Callable[[], np.ndarray]:
        # Non-blocking: it progresses inside the next step's own collectives.
        send = np.array(values, dtype=np.int64)  # a copy, alive until the request completes
        out = np.empty_like(send)
        request = comm.Iallreduce(send, out, op=MPI.SUM)

        def finish() -> np.ndarray:
            request.Wait()
            return out

        return finish

    exchange.start = start

    config.setdefault("framework", "mpi4py")
    vendor, version = MPI.get_vendor()
    config.setdefault("backend", f"{vendor} {'.'.join(map(str, version))}")
    rank, world = comm.Get_rank(), comm.Get_size()
    lens = open_lens(rank=rank, world_size=world, exchange=exchange, meta=_run_facts(), **config)
    return LensComm(comm, lens, steps, exchange)


def _run_facts() -> dict:
    """mpi4py's version and, when threadpoolctl is installed, numpy's BLAS threads."""
    facts: dict[str, Any] = {"framework_version": f"mpi4py {mpi4py.__version__}"}
    try:
        from threadpoolctl import threadpool_info

        blas = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
        if blas:
            facts["threads"] = max(blas)
    except Exception:  # noqa: BLE001 - optional: unknown without it
        pass
    return facts
