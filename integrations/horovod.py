"""Horovod adapter: one line records every Horovod collective on every rank.

PyTorch::

    import horovod.torch as hvd
    from ailens.integrations import horovod as ailens_hvd

    hvd.init()
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    lens = ailens_hvd.attach(hvd, optimizer=optimizer, run_dir="runs/x")  # the one line
    for x, y in loader:
        ...; optimizer.step()            # each optimizer.step() marks a step boundary
        if lens.should_stop:             # only with early_stop=True; True on all ranks at once
            break

TensorFlow (custom loop with ``hvd.DistributedGradientTape``): ``lens = attach(hvd)`` before
the training function is first traced; nothing else. Each call of the training function is a
step; each graph collective costs two Python calls per run (~40 us each). For short steps,
``attach(hvd, steps="manual")`` and ``lens.step_end()`` after each call: the graphs then time
their collectives themselves, with no Python call, and ailens reads them every 32 step ends
(see ``ailens.integrations.tfgraph``). With Keras use
``ailens.integrations.keras.LensCallback``, which attaches this adapter that way itself.

``attach`` is collective (the ranks agree on a run id through Horovod): call it on every rank
after ``hvd.init()``. ``lens.close()`` (collective) ends the run; without it the run ends at
``hvd.shutdown()`` or, without the last cross-rank exchange, at interpreter exit.

Steps: ``optimizer=`` (torch): each ``optimizer.step()`` call on that object. Otherwise they
are inferred from the repeating collectives (``ailens.record.steps``; TensorFlow graphs: the
calls of the function) until the script calls ``lens.step_end()`` itself.

A checkpoint's bytes (torch, ``optimizer=``), when the script did not say them: after the
optimizer's first step, its parameters and state tensors (``ailens.integrations.torch``).

Steps per epoch, when not given: from the data that trains (the torch ``DataLoader``'s
``len()``, the ``tf.data`` dataset's cardinality, e.g. ``dataset.take(n)``), corrected at the
first epoch boundary (``ailens.integrations._epochs``): the forecast shows when the current
epoch (a single pass: the run) ends though nothing said the run's length.

What is recorded, once per call, on every rank:

- every allreduce, allgather, broadcast, alltoall and reducescatter, sync or async, plain or
  grouped, including those ``hvd.DistributedOptimizer``, ``DistributedGradientTape``,
  ``broadcast_parameters``/``broadcast_variables`` and Horovod's Keras callbacks issue, and the
  backward pass of Horovod's autograd functions (torch ``barrier`` is recorded with 0 bytes);
- bytes = the local payload handed to Horovod (after compression): the tensor's
  ``numel * element size``; the sum over the tensors of a grouped call (one grouped call is one
  collective, as Horovod fuses it); for allgather/alltoall/reducescatter the local input. A
  sparse allreduce is two allgathers (values, indices), as Horovod issues it.

How: every public Horovod op of a framework funnels into a few functions (torch, in
``mpi_ops``: ``_allreduce_async`` and siblings, each returning a handle that ``synchronize``
or ``poll`` completes; TensorFlow: ``_allreduce``, ``_grouped_allreduce``, ``allgather``,
``broadcast``, ... and ``_allreduce_cond``/``_grouped_allreduce_cond``, through which the
distributed optimizers and tapes call them). ``attach`` replaces those functions, and
``synchronize``/``poll``/``shutdown``, in every loaded ``horovod.*`` module that holds them
(``horovod/torch/optimizer.py`` imports ``synchronize`` by name). Wrapping the funnel records
a collective exactly once whichever public form called it. With torch these wrappers run
once per gradient: where ailens's compiled buffer is built they are compiled too
(``ailens.record.buffer.ASYNC_WRAPPERS``), no Python frame of ailens's per tensor; the Python
ones below stay their fallback. ``detach()`` (also done by
``close()``) restores the originals. A name imported from Horovod *before* ``attach`` keeps
the original: its collective is recorded, but its end is not seen (written as unfinished).

TensorFlow graphs: the optimizers' gradients are hooked around Horovod's ``tf.cond`` rather
than inside its branch (a branch's hooks are Python calls, where the cond as a whole can be
timed on a slate). With a custom compression or ``HOROVOD_ELASTIC`` the branch is hooked
instead: two Python calls per collective (``benchmarks/overhead/_keras_hvd_fn.py
--compression custom``: +1.0 ms a call of keras_hvd's 9.3 ms training function, 8
collectives). The hooks make such a cond a stateful op, which tf.function would chain after
the previous one, each collective waiting for the one before to end (+21.9 ms a call, same
command, before issue 33's fix); ``tfgraph`` exempts these conds from the chaining.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from ailens import detect_rank_world
from ailens.record.buffer import ASYNC_WRAPPERS

from . import tfgraph
from ._base import Attachment, log, named_like, open_lens, quiet
from ._base import _local as _base_local
from ._epochs import EpochWatch

__all__ = ["HorovodLens", "attach"]

# The funnel functions of horovod.<framework>.mpi_ops; the op recorded is the name without
# "_", "grouped_", "_async", "_cond" (``_grouped_allreduce_async`` is an "allreduce").
_FUNNELS = {
    "torch": "_allreduce_async _grouped_allreduce_async _allgather_async "
    "_grouped_allgather_async _broadcast_async _alltoall_async _reducescatter_async "
    "_grouped_reducescatter_async".split(),
    # _allreduce_cond: what DistributedOptimizer / DistributedGradientTape call.
    "tensorflow": "_allreduce_cond _grouped_allreduce_cond _allreduce _grouped_allreduce "
    "allgather grouped_allgather broadcast broadcast_ alltoall _reducescatter "
    "_grouped_reducescatter".split(),
}
_attached: dict[str, HorovodLens] = {}


def _op(funnel: str) -> str:
    name = funnel.strip("_").removeprefix("grouped_")
    return name.removesuffix("_async").removesuffix("_cond")


def attach(
    hvd: Any,
    *,
    optimizer: Any = None,
    steps: str | None = None,
    meta: dict | None = None,
    **config: Any,
) -> HorovodLens:
    """Record every collective of ``hvd`` (``horovod.torch`` or ``horovod.tensorflow``);
    returns a :class:`HorovodLens` (``.lens`` is the Lens). ``optimizer`` (torch): its
    ``step()`` calls mark the steps. ``steps="manual"``: no inference (call ``step_end()``).
    ``meta``: facts for the trace header; other keywords are LensConfig fields. Collective:
    call on every rank after ``hvd.init()``."""
    name = getattr(hvd, "__name__", "")
    kind = "torch" if "torch" in name else "tensorflow" if "tensorflow" in name else None
    kind = "tensorflow" if kind is None and "keras" in name else kind
    if kind is None:
        raise TypeError(
            f"attach(hvd): expected horovod.torch or horovod.tensorflow, got {name or repr(hvd)}"
        )
    attached = _attached.get(kind)
    if attached is not None:
        msg = "ailens: horovod.%s is already attached; returning that attachment"
        attached.notice(msg, kind, level=logging.WARNING)
        return attached
    return HorovodLens(kind, optimizer, steps, meta, config)


class HorovodLens(EpochWatch, Attachment):
    """A Lens attached to Horovod: ``.lens``, ``step_end()``, ``should_stop``, ``close()``,
    ``detach()``; also a context manager that closes on exit."""

    def __init__(self, kind: str, optimizer: Any, steps: str | None, meta, config) -> None:
        self.kind = kind
        self.hvd = hvd = importlib.import_module(f"horovod.{kind}")
        self._handles: dict[int, int] = {}  # torch async handle -> its tick
        settings = {"framework": f"horovod.{kind}", **config}
        if not hvd.is_initialized():
            if detect_rank_world()[0] == 0:  # once per job
                log.warning("ailens: call hvd.init() before attach(); ailens is off")
            settings["enabled"] = False
        else:
            settings.setdefault("backend", "gloo" if hvd.gloo_enabled() else "mpi")
            settings.update(rank=hvd.rank(), world_size=hvd.size(), exchange=self._exchanger())
        meta = {**_run_facts(kind, optimizer), **(meta or {})}
        lens = open_lens(meta=meta, **settings)
        infer = steps != "manual" and optimizer is None
        super().__init__(lens, infer_steps=infer, agree=self._exchange)
        # TF graphs: the script marks each step, so the graphs' collectives can be timed
        # inside the graph and read at the step end (no Python call per collective).
        self.collects_graphs = kind == "tensorflow" and steps == "manual"
        if not lens.config.enabled:
            return
        try:
            self._install()
            if optimizer is not None:
                self._count_steps(optimizer)
            if kind == "torch":
                self.watch_torch_loaders()
                if optimizer is not None:
                    from .torch import learn_checkpoint_bytes

                    learn_checkpoint_bytes(self, None, optimizer)
            else:
                self.watch_tf_datasets()
        except Exception as e:  # noqa: BLE001 - never break training; uninstall what went in
            self.patches.restore()
            lens.disable(e)

    def step_end(self) -> None:
        """Mark the end of a training step; from then on steps are not inferred."""
        super().step_end()
        if self.collects_graphs:
            tfgraph.step_ended("tensorflow", self)

    def _before_close(self) -> None:
        if self.collects_graphs:
            tfgraph.collect("tensorflow", self)

    def _exchanger(self) -> Callable[[np.ndarray], np.ndarray]:
        """The Lens's exchange: :meth:`_exchange`; with torch also in the background
        (``start``: ``allreduce_async``, finished by ``synchronize`` at the next step end,
        so Horovod negotiates it with that step's gradients instead of in a cycle of its
        own)."""

        def exchange(a: np.ndarray) -> np.ndarray:
            return self._exchange(a)

        if self.kind == "torch":
            exchange.start = self._start_exchange
        return exchange

    def _start_exchange(self, a: np.ndarray) -> Callable[[], np.ndarray]:
        import torch

        a = np.ascontiguousarray(a, dtype=np.int64)
        name = f"ailens.exchange.{a.size}"
        with quiet():
            handle = self.hvd.allreduce_async(torch.from_numpy(a.copy()), op=self.hvd.Sum,
                                              name=name)  # fmt: skip

        def finish() -> np.ndarray:
            with quiet():
                return self.hvd.synchronize(handle).numpy()

        return finish

    def _exchange(self, a: np.ndarray) -> np.ndarray:
        """Elementwise SUM across ranks with Horovod itself; not recorded."""
        a = np.ascontiguousarray(a, dtype=np.int64)
        name = f"ailens.exchange.{a.size}"  # fixed per payload size: same name, same shape
        with quiet():
            if self.kind == "torch":
                import torch

                out = self.hvd.allreduce(torch.from_numpy(a.copy()), op=self.hvd.Sum, name=name)
                return out.numpy()
            import tensorflow as tf

            return self.hvd.allreduce(tf.constant(a), op=self.hvd.Sum, name=name).numpy()

    def _install(self) -> None:
        ops = importlib.import_module(f"{self.hvd.__name__}.mpi_ops")
        wrappers: dict[int, tuple[Any, Any]] = {}
        for name in _FUNNELS[self.kind]:
            real = getattr(ops, name, None) or getattr(self.hvd, name, None)
            if real is None:  # another Horovod version: record what exists
                self.notice("ailens: horovod.%s has no %s; not recorded", self.kind, name)
                continue
            wrappers[id(real)] = (real, self._wrap(real, _op(name)))
        barrier = functools.partial(self.recorder, op="barrier")
        for name, wrap in (("synchronize", self._wrap_synchronize), ("poll", self._wrap_poll),
                           ("barrier", barrier), ("shutdown", self.teardown)):  # fmt: skip
            real = getattr(ops, name, None) or getattr(self.hvd, name, None)
            if real is not None and (self.kind == "torch" or name == "shutdown"):
                wrappers[id(real)] = (real, wrap(real))
        self.patches.set_in_package("horovod", wrappers)  # where they are looked up
        _attached[self.kind] = self
        self.patches.on_restore(lambda: _attached.pop(self.kind, None))
        if self.kind == "tensorflow":
            tfgraph.activate("tensorflow", self)
            if self.collects_graphs:
                import tensorflow as tf

                tfgraph.prepare_slates(tf, "tensorflow")

    def _count_steps(self, optimizer) -> None:
        """Each ``optimizer.step()`` call on this object ends a step. Not torch's step hooks:
        they also fire for the inner optimizer's step hvd.DistributedOptimizer calls, and for
        the state-creating step of ``hvd.broadcast_optimizer_state``. If something wraps ours
        later (an LR scheduler), ours stays in its chain and only passes calls through."""
        prev = optimizer.__dict__.get("step")

        def step(opt, *args, **kwargs):
            out = (
                prev(*args, **kwargs) if prev is not None else type(opt).step(opt, *args, **kwargs)
            )
            if self.attached:
                self._step_end()
            return out

        self.patches.set(optimizer, "step", types.MethodType(step, optimizer))

    # torch: funnel functions return a handle; synchronize/poll complete it.

    def _wrap(self, real, op: str):
        if self.kind == "tensorflow":
            import tensorflow as tf

            return tfgraph.wrap(tf, "tensorflow", real, op, _tf_payload(real))

        # One call per tensor (DistributedOptimizer: one per gradient), so the path is
        # Attachment.call inlined: no closure per call, the tick kept by handle. With the
        # compiled buffer, the same path in C (``AsyncCall``): no Python frame of ours per
        # tensor; this function is then its fallback (steps inferred, payload by keyword).
        handles, local = self._handles, _base_local

        def funnel(*args, **kwargs):
            if not self.attached or local.depth:  # self.recording, inlined
                return real(*args, **kwargs)
            try:
                nbytes = _torch_nbytes(args[0] if args else _payload(args, kwargs))
            except Exception:  # noqa: BLE001 - an argument we cannot size: 0 bytes, no fault
                nbytes = 0
            tick = self.begin(op, nbytes)
            depth = local.depth
            local.depth = depth + 1  # what Horovod calls inside is this collective's
            try:
                handle = real(*args, **kwargs)
            except BaseException:
                self.end(tick)
                raise
            finally:
                local.depth = depth
            try:
                handles[handle] = tick  # synchronize/poll end the tick
            except Exception as e:  # noqa: BLE001 - fail open: hand back the real handle
                self.lens.disable(e)
            return handle

        funnel = named_like(funnel, real)
        if ASYNC_WRAPPERS is None:
            return funnel
        native = ASYNC_WRAPPERS[0](real=real, owner=self, local=local, op=op, handles=handles,
                                   fallback=funnel)  # fmt: skip
        return _dressed(native, real)

    def _wrap_synchronize(self, real):
        handles = self._handles

        def synchronize(handle):
            tick = handles.pop(handle, None) if handles else None
            try:
                return real(handle)
            finally:
                if tick is not None:
                    self.end(tick)

        synchronize = named_like(synchronize, real)
        if ASYNC_WRAPPERS is None:
            return synchronize
        native = ASYNC_WRAPPERS[1](real=real, owner=self, handles=handles, fallback=synchronize)
        return _dressed(native, real)

    def _wrap_poll(self, real):
        handles = self._handles

        def poll(handle):
            done = real(handle)
            if done and handle in handles:
                self.end(handles.pop(handle))
            return done

        return named_like(poll, real)


def _dressed(native, real):
    """A compiled wrapper dressed as ``real``, from this module like the Python ones."""
    native.__module__ = __name__
    return named_like(native, real)


def _run_facts(kind: str, optimizer: Any) -> dict:
    import horovod

    fw = importlib.import_module("torch" if kind == "torch" else "tensorflow")
    facts = {"framework_version": f"horovod {horovod.__version__}, {kind} {fw.__version__}"}
    if kind == "tensorflow":
        return {**facts, **tfgraph.tf_threads(fw)}
    facts.update(threads=fw.get_num_threads(), interop_threads=fw.get_num_interop_threads())
    if optimizer is not None:
        from .torch import accelerator

        facts["param_count"] = sum(p.numel() for g in optimizer.param_groups for p in g["params"])
        gpu = accelerator(None, optimizer)
        if gpu is not None:
            facts["accelerator"] = gpu
    return facts


def _payload(args: tuple, kwargs: dict):
    """The tensor (or list of tensors) a funnel function gets first."""
    if args:
        return args[0]
    for key in ("tensor", "tensors", "variables"):
        if key in kwargs:
            return kwargs[key]
    raise TypeError("no tensor argument")


def _tf_payload(real) -> Callable:
    """(payload, float bytes) of a TF funnel call; None leaves a ``_cond`` to the ops inside."""
    is_cond = real.__name__.endswith("_cond")

    def payload_of(args, kwargs):
        float_size = None
        if is_cond:
            ok, float_size = _record_at_cond(kwargs)
            if not ok:
                return None
        return _payload(args, kwargs), float_size

    return payload_of


def _record_at_cond(kwargs: dict) -> tuple[bool, int | None]:
    """Whether to record Horovod's ``_allreduce_cond`` as a whole, and the bytes per element
    of floating tensors it moves (None: their own). Only when its allreduce branch surely runs
    (known while tracing outside elastic mode) and the compression is a built-in one."""
    from horovod.tensorflow import global_process_set
    from horovod.tensorflow.compression import Compression

    compression = kwargs.get("compression", Compression.none)
    if compression is not Compression.none and compression is not Compression.fp16:
        return False, None
    if os.environ.get("HOROVOD_ELASTIC", "0") not in ("", "0"):
        return False, None
    ps = kwargs.get("process_set", global_process_set)
    return bool(ps.included() and ps.size() > 1), 2 if compression is Compression.fp16 else None


def _torch_nbytes(x) -> int:
    if isinstance(x, (list, tuple)):
        return sum(_torch_nbytes(t) for t in x)
    return int(x.nbytes)
