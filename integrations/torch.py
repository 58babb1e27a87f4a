"""PyTorch DDP and torch.distributed: one line to attach a Lens.

::

    model = DDP(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    lens = ailens.integrations.torch.attach(model, optimizer, steps_per_epoch=len(loader), epochs=3)
    for epoch in range(3):
        for x, y in loader:
            ...; optimizer.step()
            if lens.should_stop:        # with early_stop=True: the signature is ready
                break
    lens.close()                        # collective: every rank calls it

What is recorded, on every rank (call ``attach`` on every rank, after ``init_process_group``
and after wrapping the model in DDP, before the first backward):

- **DDP gradient buckets**: a comm hook (``DistributedDataParallel.register_comm_hook``)
  opens a tick per bucket as ``allreduce`` with the bucket's bytes and closes it when the
  bucket's future completes (on the backend's thread, so the tick is passed explicitly). The
  hook composes with your own: pass it as ``comm_hook=`` (and ``state=``) instead of
  registering it yourself; without one, the hook averages the bucket with one allreduce, the
  arithmetic of DDP's default and of ``default_hooks.allreduce_hook`` (trained weights are
  bit-identical to a run without ailens).
  DDP accepts one hook only; if the model already has one (seen in ``model._comm_hooks``, a
  private list, as DDP has no public getter) we cannot add ours, so the buckets are recorded
  only through the collectives that hook calls via ``torch.distributed`` (see next point).
  Recorded bytes are the bucket's gradient bytes even when a custom hook compresses them.
- **Collectives the script calls directly** through ``torch.distributed`` (``all_reduce``,
  ``all_gather``, ``all_gather_into_tensor``, ``broadcast``, ``reduce``, ``reduce_scatter``,
  ``reduce_scatter_tensor``, ``all_to_all``, ``all_to_all_single``, ``gather``, ``scatter``,
  ``barrier`` and the ``*_object*`` forms): the module functions are wrapped while attached
  (``detach()``/``close()`` restore them). Bytes are the local input tensor's ``nbytes``
  (for ``all_gather`` the local tensor, for ``reduce_scatter``/``all_to_all`` the local input
  list); object collectives record 0 bytes (the pickled size is not known cheaply).
  ``async_op=True`` returns a proxy of the ``Work`` whose ``wait()`` (or future) ends the
  tick. Functions imported by name before ``attach`` (``from torch.distributed import
  all_reduce``) are not seen.
- **DDP buffer broadcast** (``broadcast_buffers=True`` with buffers, e.g. BatchNorm): DDP
  calls the private ``torch.distributed._broadcast_coalesced`` every forward; it is wrapped
  too (as ``broadcast``, bytes = the buffers' total) because DDP offers no public hook there.
- **Steps** end at ``optimizer.step()`` (``register_step_post_hook``) when an optimizer is
  given; otherwise call ``lens.step_end()``.

The cross-rank phase exchange uses the original ``torch.distributed.all_reduce`` on the
default group (an int64 CPU tensor; not recorded). Anything failing inside this adapter
disables ailens on that rank (``Lens._fault``) and the framework call still runs once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ailens import Lens

log = logging.getLogger("ailens")

__all__ = ["attach", "TorchLens"]


# torch.distributed function -> (op name, local payload bytes from the call's arguments).
# The extractors mirror the functions' parameter names, so positional and keyword calls both
# bind; they return the bytes this rank contributes.
def _t(x: Any) -> int:
    return int(x.nbytes) if isinstance(x, torch.Tensor) else 0


def _ts(xs: Any) -> int:
    return sum(_t(x) for x in xs) if xs is not None else 0


_COLLECTIVES: dict[str, tuple[str, Callable[..., int]]] = {
    "all_reduce": ("allreduce", lambda tensor, *a, **k: _t(tensor)),
    "all_gather": ("allgather", lambda tensor_list, tensor, *a, **k: _t(tensor)),
    "all_gather_into_tensor": (
        "allgather", lambda output_tensor, input_tensor, *a, **k: _t(input_tensor)),
    "all_gather_object": ("allgather", lambda *a, **k: 0),
    "broadcast": ("broadcast", lambda tensor, *a, **k: _t(tensor)),
    "broadcast_object_list": ("broadcast", lambda *a, **k: 0),
    "reduce": ("reduce", lambda tensor, *a, **k: _t(tensor)),
    "reduce_scatter": ("reduce_scatter", lambda output, input_list, *a, **k: _ts(input_list)),
    "reduce_scatter_tensor": ("reduce_scatter", lambda output, input, *a, **k: _t(input)),
    "all_to_all": (
        "alltoall", lambda output_tensor_list, input_tensor_list, *a, **k: _ts(input_tensor_list)),
    "all_to_all_single": ("alltoall", lambda output, input, *a, **k: _t(input)),
    "gather": ("gather", lambda tensor, *a, **k: _t(tensor)),
    "gather_object": ("gather", lambda *a, **k: 0),
    "scatter": ("scatter", lambda tensor, *a, **k: _t(tensor)),
    "scatter_object_list": ("scatter", lambda *a, **k: 0),
    "barrier": ("barrier", lambda *a, **k: 0),
    "monitored_barrier": ("barrier", lambda *a, **k: 0),
    # Private, but DDP's per-forward buffer broadcast has no public hook.
    "_broadcast_coalesced": ("broadcast", lambda process_group, tensors, *a, **k: _ts(tensors)),
}

# Set while ailens itself runs a collective on this thread (a comm hook, the exchange, a
# collective nested in another): the wrappers then pass straight through, so nothing is
# counted twice and the exchange is never recorded.
_busy = threading.local()


def _is_busy() -> bool:
    return getattr(_busy, "on", False)


class _TimedWork:
    """Proxy of an async ``Work``: ``wait()`` (or the future's completion) ends the tick."""

    __slots__ = ("_work", "_end")

    def __init__(self, work: Any, end: Callable[[], None]) -> None:
        self._work = work
        self._end = end

    def wait(self, *args, **kwargs):
        result = self._work.wait(*args, **kwargs)
        self._end()
        return result

    def get_future(self):
        fut = self._work.get_future()
        end = self._end

        def done(f):
            end()
            return f.value()

        try:
            return fut.then(done)
        except Exception:  # noqa: BLE001 - never break the user's future
            return fut

    def __getattr__(self, name: str):
        return getattr(self._work, name)


class TorchLens:
    """What ``attach`` returns: ``.lens`` plus ``should_stop``, ``step_end``, ``close``,
    ``detach``. Usable as a context manager (closes on exit)."""

    def __init__(self, lens: Lens) -> None:
        self.lens = lens
        self._originals: dict[str, Callable] = {}
        self._opt_handle = None
        self._hook_active = False

    # -------------------------------------------------------------- public

    @property
    def should_stop(self) -> bool:
        """True on every rank at the same step once ``early_stop=True`` and the signature is
        ready; check it in your loop and break."""
        return self.lens.should_stop

    def step_end(self) -> None:
        """Mark a step end by hand (when no optimizer was given to ``attach``)."""
        self.lens.step_end()

    def set_total_steps(self, total_steps: int) -> None:
        self.lens.set_total_steps(total_steps)

    def detach(self) -> None:
        """Restore torch.distributed, remove the optimizer hook; the DDP comm hook (which DDP
        cannot unregister) keeps running the inner hook without recording."""
        self._hook_active = False
        if self._opt_handle is not None:
            self._opt_handle.remove()
            self._opt_handle = None
        for name, fn in self._originals.items():
            if getattr(getattr(dist, name, None), "_ailens_owner", None) is self:
                setattr(dist, name, fn)
        self._originals.clear()

    def close(self) -> None:
        """Detach and close the Lens (collective: every rank calls it)."""
        self.detach()
        self.lens.close()

    def __enter__(self) -> TorchLens:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -------------------------------------------------------------- internals

    def _install_collectives(self) -> None:
        for name, (op, nbytes_of) in _COLLECTIVES.items():
            fn = getattr(dist, name, None)
            if fn is None:
                continue
            prev = getattr(fn, "_ailens_owner", None)
            if prev is not None:
                log.warning("ailens: torch.distributed is already instrumented by another "
                            "attach(); the newest one records direct collectives")
                fn = prev._originals.get(name, fn)
            self._originals[name] = fn
            wrapper = self._wrap(fn, op, nbytes_of)
            wrapper._ailens_owner = self
            setattr(dist, name, wrapper)

    def _wrap(self, fn: Callable, op: str, nbytes_of: Callable[..., int]) -> Callable:
        lens = self.lens

        def wrapper(*args, **kwargs):
            if _is_busy() or lens.closed:
                return fn(*args, **kwargs)
            try:
                tick = lens.collective_begin(op, nbytes_of(*args, **kwargs))
            except Exception as e:  # noqa: BLE001 - fail open, the call still runs once
                lens._fault(e)
                return fn(*args, **kwargs)
            _busy.on = True
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                lens.collective_end(tick)
                raise
            finally:
                _busy.on = False
            if result is None or not hasattr(result, "wait"):
                lens.collective_end(tick)
                return result
            try:
                return _TimedWork(result, _once(lens, tick))
            except Exception as e:  # noqa: BLE001
                lens._fault(e)
                return result

        wrapper.__wrapped__ = fn
        wrapper.__name__ = getattr(fn, "__name__", op)
        wrapper.__doc__ = getattr(fn, "__doc__", None)
        return wrapper

    def _register_ddp_hook(self, model: Any, comm_hook: Callable | None, state: Any) -> None:
        if getattr(model, "_comm_hooks", None):
            log.warning("ailens: this DDP model already has a comm hook; pass it to attach("
                        "comm_hook=..., state=...) instead to time each bucket. Recording only "
                        "the torch.distributed calls it makes.")
            return
        lens, owner = self.lens, self
        all_reduce = self._originals.get("all_reduce", dist.all_reduce)
        all_reduce = getattr(all_reduce, "__wrapped__", all_reduce)
        group = getattr(model, "process_group", None) or dist.group.WORLD

        def launch(inner_state, bucket, tick):
            if comm_hook is not None:
                fut = comm_hook(inner_state, bucket)
                if tick is None:
                    return fut

                def done(f):
                    lens.collective_end(tick)
                    return f.value()

                try:
                    return fut.then(done)
                except Exception as e:  # noqa: BLE001
                    lens._fault(e)
                    return fut
            # DDP's default: average the bucket (the arithmetic of default_hooks.allreduce_hook),
            # with the tick's end folded into its one completion callback.
            tensor = bucket.buffer()
            tensor.div_(group.size())
            fut = all_reduce(tensor, group=group, async_op=True).get_future()

            def averaged(f):
                if tick is not None:
                    lens.collective_end(tick)
                return f.value()[0]

            return fut.then(averaged)

        def ailens_comm_hook(state, bucket):
            tick = None
            if owner._hook_active and not lens.closed:
                try:
                    tick = lens.collective_begin("allreduce", int(bucket.buffer().nbytes))
                except Exception as e:  # noqa: BLE001
                    lens._fault(e)
            _busy.on = True
            try:
                return launch(state, bucket, tick)
            finally:
                _busy.on = False

        inner = getattr(comm_hook, "__qualname__", "hook") if comm_hook else "allreduce"
        ailens_comm_hook.__qualname__ = f"ailens({inner})"
        try:
            model.register_comm_hook(state, ailens_comm_hook)
        except RuntimeError as e:  # a built-in (C++) hook is already registered
            log.warning("ailens: cannot add a DDP comm hook (%s); buckets are not recorded", e)
            return
        self._hook_active = True


def _once(lens: Lens, tick: int) -> Callable[[], None]:
    """An end callback that ends ``tick`` at most once (wait() and the future may both fire)."""
    fired = [False]

    def end() -> None:
        if not fired[0]:
            fired[0] = True
            lens.collective_end(tick)

    return end


def _exchange_fn(all_reduce: Callable) -> Callable[[np.ndarray], np.ndarray]:
    def exchange(values: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64).copy())
        _busy.on = True
        try:
            all_reduce(t)  # SUM on the default group; the original function, never recorded
        finally:
            _busy.on = False
        return t.numpy()

    return exchange


def attach(
    model: Any = None,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    comm_hook: Callable | None = None,
    state: Any = None,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    record_collectives: bool = True,
    **config: Any,
) -> TorchLens:
    """Attach ailens to a DDP model and its optimizer; returns a :class:`TorchLens`
    (``.lens`` is the Lens).

    ``model`` may be a ``DistributedDataParallel`` (its buckets are timed), any other module or
    ``None`` (then only direct ``torch.distributed`` collectives are recorded). ``comm_hook`` /
    ``state``: your DDP comm hook, composed under ailens' timing (default: allreduce).
    ``steps_per_epoch`` x ``epochs`` (e.g. ``len(loader)`` x epochs) gives the forecast the
    run's total steps (or pass ``total_steps=``). Other keywords are ``LensConfig`` fields.
    Collective: call it on every rank.
    """
    if comm_hook is not None and not _is_ddp(model):
        raise TypeError("comm_hook= needs a DistributedDataParallel model")
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        exchange = _exchange_fn(dist.all_reduce if not hasattr(dist.all_reduce, "_ailens_owner")
                                else dist.all_reduce.__wrapped__)
        backend = str(dist.get_backend())
    else:
        rank, world, exchange, backend = 0, 1, None, ""
    if steps_per_epoch and epochs and "total_steps" not in config:
        config["total_steps"] = int(steps_per_epoch) * int(epochs)
    config.setdefault("framework", "torch-ddp" if _is_ddp(model) else "torch")
    config.setdefault("backend", backend)
    lens = Lens(rank=rank, world_size=world, exchange=exchange, **config)
    handle = TorchLens(lens)
    try:
        if record_collectives and exchange is not None:
            handle._install_collectives()
        if _is_ddp(model):
            handle._register_ddp_hook(model, comm_hook, state)
        if optimizer is not None:
            handle._opt_handle = optimizer.register_step_post_hook(lambda *_: lens.step_end())
    except Exception as e:  # noqa: BLE001 - fail open: training goes on without ailens
        lens._fault(e)
    return handle


def _is_ddp(model: Any) -> bool:
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)
