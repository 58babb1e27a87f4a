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

Call ``attach`` on every rank, after ``init_process_group`` and after wrapping the model in
DDP, before the first backward. ``lens.close()`` (collective) ends the run; without it the run
ends at ``destroy_process_group()`` or, without the last cross-rank exchange, at exit.

What is recorded, on every rank:

- **DDP gradient buckets**: a comm hook (``DistributedDataParallel.register_comm_hook``)
  opens a tick per bucket as ``allreduce`` with the bucket's bytes and closes it when the
  bucket's future completes (on the backend's thread). The hook composes with your own: pass
  it as ``comm_hook=`` (and ``state=``) instead of registering it yourself; without one, the
  hook averages the bucket with one allreduce, the arithmetic of DDP's built-in reduction
  (a multiplication by 1 / world size: trained weights are bit-identical to a run without
  ailens at any world size). DDP accepts one hook only; if the model already has one (seen in
  ``model._comm_hooks``, a private list: DDP has no public getter) the buckets are recorded
  only through the collectives that hook calls via ``torch.distributed``. Recorded bytes are
  the bucket's gradient bytes even when a custom hook compresses them.
- **Collectives the script calls** through ``torch.distributed`` (``all_reduce``,
  ``all_gather``, ``all_gather_into_tensor``, ``broadcast``, ``reduce``, ``reduce_scatter``,
  ``reduce_scatter_tensor``, ``all_to_all``, ``all_to_all_single``, ``gather``, ``scatter``,
  ``barrier`` and the ``*_object*`` forms): the module functions are wrapped while attached
  (``detach()``/``close()`` restore them). Bytes are the local input's ``nbytes``; object
  collectives record 0 bytes. ``async_op=True`` returns a proxy of the ``Work`` whose
  ``wait()`` (or future) ends the tick. Functions imported by name before ``attach`` are not
  seen.
- **DDP buffer broadcast** (``broadcast_buffers=True`` with buffers, e.g. BatchNorm): DDP
  calls the private ``torch.distributed._broadcast_coalesced`` every forward; it is wrapped
  too (as ``broadcast``, bytes = the buffers' total): DDP offers no public hook there.
- **Steps** end at ``optimizer.step()`` (``register_step_post_hook``) when an optimizer is
  given; otherwise they are inferred from the repeating collectives (``ailens.record.steps``)
  until the script calls ``lens.step_end()`` itself.
- **Run facts**: threads, parameter count, and the batch size of the model's first forward.
- **A checkpoint's bytes**, when an optimizer is given and the script did not say them
  (``set_schedule(checkpoint_bytes=)``): after the first ``optimizer.step()``, the model's
  parameters and buffers and the optimizer's state tensors; the forecast prices a checkpoint
  the schedule announces and the run has not reached yet from them.
- **Steps per epoch**, when not given: from the ``DataLoader`` that trains (its ``len()``,
  corrected at the first epoch boundary; see ``ailens.integrations._epochs``), so the
  forecast shows when the current epoch ends, and the run's total once ``epochs=`` is known.

- **On a CUDA device** (the model's parameters on a GPU), device time as well
  (``ailens.record.device``): each bucket's ready point is a CUDA timing event on the stream
  that produced its gradients, recorded just before the allreduce is launched (after the
  averaging, which DDP's own reduction does while copying; with your ``comm_hook=``, before
  it: what it computes counts as the collective); its end is an
  event recorded in the bucket future's callback, whose current stream waits for the
  collective (NCCL's stream, or gloo's copy back with CUDA tensors); each step end is an event
  after ``optimizer.step()``. The events are resolved at later step ends with
  ``Event.query()`` and written to the trace as ``device`` marks: nothing synchronises the
  step (``close()`` waits for the device once). The host timestamps of the ticks stay what
  they are: the launch.

The cross-rank exchange uses the original ``torch.distributed.all_reduce`` on the default
group (an int64 CPU tensor; not recorded), or, where that group is NCCL only, on a gloo group of
the same ranks made at ``attach``; its periodic rounds run in the background
(``async_op=True``), started at one step end and waited for at the next.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ._base import Attachment, open_lens, quiet
from ._epochs import EpochWatch

__all__ = ["attach", "TorchLens"]


# torch.distributed function -> (op name, where the local payload is: its position and name
# in the function's parameters, the tensor or tensor list whose bytes are recorded; None:
# 0 bytes, for barriers and the *_object* forms, whose pickled size is not known cheaply).
_COLLECTIVES: dict[str, tuple[str, int | None, str | None]] = {
    "all_reduce": ("allreduce", 0, "tensor"),
    "all_gather": ("allgather", 1, "tensor"),
    "all_gather_into_tensor": ("allgather", 1, "input_tensor"),
    "all_gather_object": ("allgather", None, None),
    "broadcast": ("broadcast", 0, "tensor"),
    "broadcast_object_list": ("broadcast", None, None),
    "reduce": ("reduce", 0, "tensor"),
    "reduce_scatter": ("reduce_scatter", 1, "input_list"),
    "reduce_scatter_tensor": ("reduce_scatter", 1, "input"),
    "all_to_all": ("alltoall", 1, "input_tensor_list"),
    "all_to_all_single": ("alltoall", 1, "input"),
    "gather": ("gather", 0, "tensor"),
    "gather_object": ("gather", None, None),
    "scatter": ("scatter", 0, "tensor"),
    "scatter_object_list": ("scatter", None, None),
    "barrier": ("barrier", None, None),
    "monitored_barrier": ("barrier", None, None),
    # Private, but DDP's per-forward buffer broadcast has no public hook.
    "_broadcast_coalesced": ("broadcast", 1, "tensors"),
}


def _nbytes(x: Any) -> int:
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return int(x.nbytes) if isinstance(x, torch.Tensor) else 0


def _payload_nbytes(pos: int, arg: str) -> Callable[[tuple, dict], int]:
    return lambda args, kwargs: _nbytes(args[pos] if len(args) > pos else kwargs.get(arg))


class _TimedWork:
    """Proxy of an async ``Work``: ``wait()`` (or the future's completion) ends the tick."""

    __slots__ = ("_work", "_end")

    def __init__(self, work: Any, end: Callable[[], None]) -> None:
        self._work, self._end = work, end

    def wait(self, *args, **kwargs):
        result = self._work.wait(*args, **kwargs)
        self._end()
        return result

    def get_future(self):
        fut, end = self._work.get_future(), self._end

        def done(f):
            end()
            return f.value()

        try:
            return fut.then(done)
        except Exception:  # noqa: BLE001 - never break the user's future
            return fut

    def __getattr__(self, name: str):
        return getattr(self._work, name)


class CudaClock:
    """CUDA timing events on the current stream (``ailens.record.device.DeviceClock``)."""

    name = "cuda-events"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._event = torch.cuda.Event

    def mark(self) -> torch.cuda.Event:
        event = self._event(enable_timing=True)
        event.record()
        return event

    def done(self, event: torch.cuda.Event) -> bool:
        return event.query()

    def elapsed_ns(self, start: torch.cuda.Event, end: torch.cuda.Event) -> int:
        return int(round(start.elapsed_time(end) * 1e6))

    def wait(self) -> None:
        torch.cuda.synchronize(self.device)


def _cuda_device(model: Any, optimizer: Any = None) -> torch.device | None:
    """The CUDA device the model (or, without a module, the optimizer's parameters) trains
    on, if any."""
    if isinstance(model, torch.nn.Module):
        params = model.parameters()
    elif optimizer is not None:
        params = (p for g in optimizer.param_groups for p in g["params"])
    else:
        return None
    p = next(params, None)
    return p.device if p is not None and p.is_cuda else None


def accelerator(model: Any, optimizer: Any = None) -> str | None:
    """The name of the GPU the model (or the optimizer's parameters) trains on: the device
    type the run's compute is measured on (the cluster what-if's source); None on the CPU."""
    cuda = _cuda_device(model, optimizer)
    return None if cuda is None else torch.cuda.get_device_name(cuda)


def _whole_world(group=None, *args, **kwargs) -> bool:
    """Whether ``destroy_process_group`` ends the run: the default group, not a subgroup."""
    return group is None or group is dist.group.WORLD


def _timed(result: Any, end: Callable[[], None]) -> _TimedWork | None:
    return _TimedWork(result, end) if result is not None and hasattr(result, "wait") else None


class TorchLens(EpochWatch, Attachment):
    """What ``attach`` returns: ``.lens`` plus ``should_stop``, ``step_end``, ``close``,
    ``detach``. Usable as a context manager (closes on exit). The DDP comm hook, which DDP
    cannot unregister, stays after ``detach()`` and runs the inner hook without recording."""

    def _install(self) -> None:
        for name, (op, pos, arg) in _COLLECTIVES.items():
            fn = getattr(dist, name, None)
            if fn is not None:
                nbytes_of = None if pos is None else _payload_nbytes(pos, arg)
                wrapper = self.recorder(fn, op, nbytes_of, pending=_timed)
                wrapper._ailens_owner = self
                self.patches.set(dist, name, wrapper)
        teardown = self.teardown(dist.destroy_process_group, _whole_world)
        self.patches.set(dist, "destroy_process_group", teardown)

    def _register_ddp_hook(self, model, comm_hook, state) -> None:
        if getattr(model, "_comm_hooks", None):
            self.notice(
                "ailens: the DDP model has a comm hook: pass it as attach(comm_hook=) "
                "to time each bucket",
                level=logging.WARNING,
            )
            return
        group = getattr(model, "process_group", None) or dist.group.WORLD

        def average(_state, bucket, ready=None):
            # DDP's built-in arithmetic: it multiplies by 1 / world size while copying into
            # the bucket (Reducer::copy_grad_to_bucket, at::mul_out); a division (what
            # allreduce_hook does) differs in the last bit at world sizes that are not powers
            # of two. The process group is called directly, as DDP's C++ hook does: not
            # through dist.all_reduce's Python checks.
            tensor = bucket.buffer()
            tensor.mul_(1.0 / group.size())
            if ready is not None:  # on a device: the collective's input is ready now
                ready()
            return group.allreduce([tensor]).get_future()

        def composed(inner_state, bucket, ready=None):
            if ready is not None:  # the user's hook (compression, ...) counts as the collective
                ready()
            with quiet():  # what the user's hook calls is inside this bucket's tick
                return comm_hook(inner_state, bucket)

        launch = average if comm_hook is None else composed
        value = (lambda f: f.value()[0]) if comm_hook is None else (lambda f: f.value())
        lens = self.lens

        def ailens_comm_hook(state, bucket):
            if not self.recording:
                fut = launch(state, bucket)
                return fut.then(value) if comm_hook is None else fut
            tick = self.begin("allreduce", bucket.buffer().nbytes)
            device = lens.device  # set on a CUDA device; None again if the Lens disables itself
            if device is None:
                fut = launch(state, bucket)

                def done(f):  # the tick's end folded into the one completion callback
                    self.end(tick)
                    return value(f)

                return fut.then(done)
            on_device = []  # the device's pending entry, made where the input is ready
            fut = launch(state, bucket, lambda: on_device.append(device.collective_ready(tick)))

            def done_on_device(f):  # this callback's current stream waits for the collective
                if on_device:
                    device.collective_done(on_device[0])
                self.end(tick)
                return value(f)

            return fut.then(done_on_device)

        inner = getattr(comm_hook, "__qualname__", "hook") if comm_hook else "allreduce"
        ailens_comm_hook.__qualname__ = f"ailens({inner})"
        try:
            model.register_comm_hook(state, ailens_comm_hook)
        except RuntimeError as e:  # a built-in (C++) hook is already registered
            self.notice("ailens: buckets not recorded: %s", e, level=logging.WARNING)

    def device_times(self, model: Any, optimizer: Any = None):
        """The Lens's device timing when the model (or the optimizer's parameters) is on a
        CUDA device; else None."""
        cuda = _cuda_device(model, optimizer)
        if cuda is None or not torch.cuda.is_available():
            return None
        # NCCL runs a group's collectives one after another on its stream; gloo side by side
        queued = self.lens.config.backend == "nccl"
        with torch.cuda.device(cuda):
            return self.lens.use_device_clock(CudaClock(cuda), queued=queued)

    def _learn_batch_size(self, model: torch.nn.Module) -> None:
        def first_forward(module, args):
            handle.remove()
            x = next((a for a in args if isinstance(a, torch.Tensor) and a.dim()), None)
            if x is not None:
                self.lens.describe(batch_size=int(x.shape[0]))

        handle = model.register_forward_pre_hook(first_forward)
        self.patches.on_restore(handle.remove)


def _exchange_group(backend: str):
    """The group ailens's exchange (int64 CPU tensors) runs on: the default one, unless its
    backend reduces no CPU tensors (``init_process_group("nccl")``): then a gloo group of the
    same ranks, made here on every rank (``attach`` is collective). Never touching the GPU,
    the exchange cannot synchronise the device."""
    if "gloo" in backend or "mpi" in backend or "nccl" not in backend:
        return None
    return dist.new_group(backend="gloo")


def _exchange_fn(all_reduce: Callable, group=None) -> Callable[[np.ndarray], np.ndarray]:
    def exchange(values: np.ndarray) -> np.ndarray:
        t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64).copy())
        with quiet():
            all_reduce(t, group=group)  # SUM; the original function, never recorded
        return t.numpy()

    def start(values: np.ndarray) -> Callable[[], np.ndarray]:
        # In the background: the backend runs it beside the next step's gradient buckets.
        t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.int64).copy())
        with quiet():
            work = all_reduce(t, group=group, async_op=True)

        def finish() -> np.ndarray:
            work.wait()
            return t.numpy()

        return finish

    exchange.start = start
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
    ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
    if comm_hook is not None and not ddp:
        raise TypeError("comm_hook= needs a DistributedDataParallel model")
    previous = getattr(dist.all_reduce, "_ailens_owner", None)
    if previous is not None:
        previous.notice("ailens: a second attach() replaces the first", level=logging.WARNING)
        previous.detach()
    rank, world, exchange, backend = 0, 1, None, ""
    all_reduce = dist.all_reduce  # the original: ailens's own collectives are never recorded
    if dist.is_available() and dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        backend = str(dist.get_backend())
        exchange = _exchange_fn(all_reduce, _exchange_group(backend))
    if steps_per_epoch and epochs and "total_steps" not in config:
        config["total_steps"] = int(steps_per_epoch) * int(epochs)
    config.setdefault("framework", "torch-ddp" if ddp else "torch")
    config.setdefault("backend", backend)
    lens = open_lens(
        rank=rank, world_size=world, exchange=exchange, meta=_run_facts(model, optimizer), **config
    )
    handle = TorchLens(lens, infer_steps=optimizer is None, agree=exchange)
    lens.set_schedule(steps_per_epoch=steps_per_epoch, epochs=epochs)
    if not lens.config.enabled:
        return handle
    try:
        if record_collectives and exchange is not None:
            handle._install()
        handle.device_times(model, optimizer)  # step ends (and buckets) timed on the device too
        if ddp:
            handle._register_ddp_hook(model, comm_hook, state)
        if isinstance(model, torch.nn.Module):
            handle._learn_batch_size(model)
        handle.watch_torch_loaders()
        if optimizer is not None:
            hook = optimizer.register_step_post_hook(
                lambda *_: handle._step_end() if handle.attached else None
            )
            handle.patches.on_restore(hook.remove)
            learn_checkpoint_bytes(handle, model, optimizer)
    except Exception as e:  # noqa: BLE001 - fail open: training goes on without ailens
        lens.disable(e)
    return handle


def learn_checkpoint_bytes(handle: Attachment, model: Any, optimizer: Any) -> None:
    """After the first step (the optimizer's state exists then), ``handle``'s schedule learns
    the bytes a checkpoint of the model and optimizer writes (``_state_nbytes``), unless the
    script said them: the forecast prices a checkpoint it has not seen yet from them."""

    def learn() -> None:
        if handle.attached and handle.lens.schedule.checkpoint_bytes is None:
            handle.lens.set_schedule(checkpoint_bytes=_state_nbytes(model, optimizer))

    handle.after_step_end(learn)


def _state_nbytes(model: Any, optimizer: torch.optim.Optimizer) -> int:
    """The bytes a checkpoint of ``model`` and ``optimizer`` writes: the model's parameters
    and buffers (without a model, the optimizer's parameters) and every tensor of the
    optimizer's state (moments, step counts)."""
    if isinstance(model, torch.nn.Module):
        tensors = [*model.parameters(), *model.buffers()]
    else:
        tensors = [p for group in optimizer.param_groups for p in group["params"]]
    tensors += [v for st in optimizer.state.values() for v in st.values() if torch.is_tensor(v)]
    return sum(t.nbytes for t in tensors)


def _run_facts(model: Any, optimizer: Any) -> dict:
    facts = {"threads": torch.get_num_threads(), "framework_version": f"torch {torch.__version__}"}
    facts["interop_threads"] = torch.get_num_interop_threads()
    if isinstance(model, torch.nn.Module):
        facts["param_count"] = sum(p.numel() for p in model.parameters())
    elif optimizer is not None:
        facts["param_count"] = sum(p.numel() for g in optimizer.param_groups for p in g["params"])
    gpu = accelerator(model, optimizer)
    return facts if gpu is None else {**facts, "accelerator": gpu}
