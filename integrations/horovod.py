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
    lens.close()                         # collective: every rank calls it

TensorFlow (custom loop with ``hvd.DistributedGradientTape``): ``lens = attach(hvd)`` and call
``lens.step_end()`` after each training step, outside ``tf.function``. With Keras use
``ailens.integrations.keras.LensCallback``, which attaches this adapter itself.

``attach`` is collective (the ranks agree on a run id through Horovod): call it on every rank
after ``hvd.init()`` and before the first training step. For TensorFlow, call it before the
training function is first traced (see below).

What is recorded, once per call, on every rank:

- every allreduce, allgather, broadcast, alltoall and reducescatter, sync or async, plain or
  grouped, including those ``hvd.DistributedOptimizer``, ``DistributedGradientTape``,
  ``broadcast_parameters``/``broadcast_variables`` and Horovod's Keras callbacks issue, and the
  backward pass of Horovod's autograd functions (torch ``barrier`` is recorded with 0 bytes);
- bytes = the local payload handed to Horovod (after compression): the tensor's
  ``numel * element size``; the sum over the tensors of a grouped call (one grouped call is one
  collective, as Horovod fuses it); for allgather/alltoall/reducescatter the local input. A
  sparse torch allreduce is two allgathers (values, indices), as Horovod issues it.

How: every public Horovod op of a framework funnels into a few functions (torch, in
``mpi_ops``: ``_allreduce_async`` and siblings, each returning a handle that ``synchronize``
or ``poll`` completes; TensorFlow: ``_allreduce``, ``_grouped_allreduce``, ``allgather``,
``broadcast``, ... in ``mpi_ops`` and ``_allreduce_cond``/``_grouped_allreduce_cond``, through
which the distributed optimizers and tapes call them). ``attach`` replaces those functions, and
``synchronize``/``poll``, in every loaded ``horovod.*`` module that holds them
(``horovod/torch/optimizer.py`` imports ``synchronize`` by name, so it is patched there too).
Wrapping the funnel rather than each public name records a collective exactly once whichever
public form called it; a wrapped call inside another records nothing more. ``detach()`` (also
done by ``close()``) restores the originals. A name a script imported from Horovod *before*
``attach`` (``from horovod.torch import synchronize``) keeps the original: the collective is
still recorded, but its end is not seen (it is written as unfinished).

TensorFlow graphs: inside ``tf.function`` (Keras ``fit``; ``DistributedGradientTape``, which
Horovod always wraps in a ``tf.function``) Python runs only while tracing. There the adapter adds
two ``tf.numpy_function`` ops per collective: one runs once its inputs are ready and begins the
tick, one runs once its outputs are ready and ends it; one Python call each (~40 us of
Python measured). Two details keep them from slowing training: they are marked independent of
tf.function's program-order chaining of stateful ops (otherwise each collective would wait
for the previous one to finish), and for the optimizers' gradients they sit around Horovod's
``tf.cond`` rather than inside its branch (a branch with a stateful op turns the cond itself
into a chained stateful op). With a custom compression or ``HOROVOD_ELASTIC`` the branch is
hooked instead, which is slower. Functions traced before ``attach`` carry no hooks; functions
traced while attached record into whichever attachment is active when they run. Collectives
of one graph that become ready together begin in the order the executor runs them, which may
differ between ranks within a step; the tick count and the phase tables (``phase_key="op"``)
are the same on every rank regardless.

Fail open: a fault in this adapter disables ailens on that rank (``lens._fault``), the Horovod
call still happens exactly once, and every collective still counts as a tick so the ranks keep
issuing the same exchanges.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from ailens import Lens, LensConfig

log = logging.getLogger("ailens")

__all__ = ["HorovodLens", "attach"]

# Funnel functions of horovod.<framework>.mpi_ops -> the op name recorded.
_TORCH_OPS = {
    "_allreduce_async": "allreduce",
    "_grouped_allreduce_async": "allreduce",
    "_allgather_async": "allgather",
    "_grouped_allgather_async": "allgather",
    "_broadcast_async": "broadcast",
    "_alltoall_async": "alltoall",
    "_reducescatter_async": "reducescatter",
    "_grouped_reducescatter_async": "reducescatter",
}
_TF_OPS = {
    # What DistributedOptimizer / DistributedGradientTape call. Hooks around the tf.cond these
    # build, not inside its branch: a branch holding a stateful op makes the cond itself
    # stateful, and tf.function runs stateful ops in program order (collectives serialised).
    "_allreduce_cond": "allreduce",
    "_grouped_allreduce_cond": "allreduce",
    "_allreduce": "allreduce",
    "_grouped_allreduce": "allreduce",
    "allgather": "allgather",
    "grouped_allgather": "allgather",
    "broadcast": "broadcast",
    "broadcast_": "broadcast",
    "alltoall": "alltoall",
    "_reducescatter": "reducescatter",
    "_grouped_reducescatter": "reducescatter",
}

# The recorder currently attached, by key ("torch", "tensorflow", "tf.distribute"). TF graph
# hooks look it up when they run, so a graph traced under one attachment records into the next.
_active: dict[str, _Recorder] = {}


def attach(hvd: Any, *, optimizer: Any = None, **config: Any) -> HorovodLens:
    """Record every collective of ``hvd`` (``horovod.torch`` or ``horovod.tensorflow``).

    ``optimizer`` (torch): each ``optimizer.step()`` marks a step boundary; otherwise call
    ``step_end()`` on the result after each step. ``config`` are LensConfig fields. Collective:
    call on every rank after ``hvd.init()``. Returns a :class:`HorovodLens` (``.lens`` is the Lens).
    """
    kind = _framework_of(hvd)
    current = _active.get(kind)
    if current is not None:
        log.warning("ailens: horovod.%s is already attached; returning that attachment", kind)
        return current
    return HorovodLens(hvd, kind, optimizer, config)


def _framework_of(hvd: Any) -> str:
    name = getattr(hvd, "__name__", "")
    if "torch" in name:
        return "torch"
    if "tensorflow" in name or "keras" in name:
        return "tensorflow"
    got = name or repr(hvd)
    raise TypeError(f"attach(hvd): expected horovod.torch or horovod.tensorflow, got {got}")


class _Recorder:
    """Begins and ends ticks on a Lens from any thread, eagerly or from TF graph hooks.
    Shared by the Horovod adapter and the Keras adapter's tf.distribute recorder."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.lens: Lens | None = None
        self._lock = threading.Lock()  # TF graph hooks run on executor threads
        self._bypass = False  # set while the Lens exchanges (that collective is not recorded)
        self._graph_failed = False
        self._local = threading.local()  # depth > 0: inside a recorded call (record it once)

    def _begin(self, op: str, nbytes_of: Callable[[], int]) -> int:
        """Begin a tick. Never raises; a tick is always counted so ranks stay in step."""
        lens = self.lens
        try:
            nbytes = nbytes_of()
        except Exception as e:  # noqa: BLE001
            lens._fault(e)
            nbytes = 0
        with self._lock:
            try:
                return lens.collective_begin(op, nbytes)
            except Exception as e:  # noqa: BLE001
                lens._fault(e)
                return lens.collective_begin(op, nbytes)  # now the disabled path: counts only

    def _end(self, tick: int) -> None:
        with self._lock:
            try:
                self.lens.collective_end(tick)
            except Exception as e:  # noqa: BLE001
                self.lens._fault(e)

    def _tf_call(self, tf, real, op: str, payload, args, kwargs, float_size: int | None = None):
        """Call a TF collective once, recorded: directly when eager, by graph hooks when
        traced inside tf.function. ``float_size``: bytes per element moved for floating
        tensors when the collective compresses them (fp16)."""
        if tf.executing_eagerly():
            tick = self._begin(op, lambda: _tf_static_nbytes(payload, float_size))
            try:
                return real(*args, **kwargs)
            finally:
                self._end(tick)
        # Building the hooks is deterministic, so a failure here fails the same way on every
        # rank: then the op runs unhooked everywhere and tick counts still agree.
        try:
            tick = _tf_begin_op(tf, self.key, op, payload, float_size)
        except Exception as e:  # noqa: BLE001
            self._graph_warn(e)
            return real(*args, **kwargs)
        with tf.control_dependencies([tick]):
            out = real(*args, **kwargs)
        try:
            outs = [t for t in tf.nest.flatten(out) if isinstance(t, tf.Tensor)]
            with tf.control_dependencies(outs):
                end = tf.numpy_function(lambda t, _key=self.key: _tf_end_hook(_key, t), [tick],
                                        tf.int64, stateful=True, name="ailens_end")
            _run_independently(tf, end)
        except Exception as e:  # noqa: BLE001
            self._graph_warn(e)
        return out

    def _graph_warn(self, e: BaseException) -> None:
        if not self._graph_failed:
            self._graph_failed = True
            log.warning("ailens: cannot hook a collective in a TF graph (%s: %s); it runs "
                        "unrecorded", type(e).__name__, e)


class HorovodLens(_Recorder):
    """A Lens attached to Horovod: ``.lens``, ``step_end()``, ``should_stop``, ``close()``,
    ``detach()``; also a context manager that closes on exit."""

    def __init__(self, hvd: Any, kind: str, optimizer: Any, config: dict) -> None:
        super().__init__(kind)
        self.kind = kind
        if kind == "torch":
            import horovod.torch as mod
            import horovod.torch.mpi_ops as ops
        else:
            import horovod.tensorflow as mod
            import horovod.tensorflow.mpi_ops as ops
        self.hvd = mod
        self._ops = ops
        self._handles: dict[int, int] = {}  # torch async handle -> tick
        self._patched: list[tuple[Any, str, Any, Any]] = []
        self._optimizer = None
        self._prev_step = self._bound_step = None
        self.lens = self._make_lens(config)
        if not self.lens.config.enabled:
            return
        try:
            self._install()
            if optimizer is not None:
                self._count_steps(optimizer)
        except Exception as e:  # noqa: BLE001 - never break training; uninstall what went in
            self._uninstall()
            self.lens._fault(e)

    # ------------------------------------------------------------ public

    @property
    def should_stop(self) -> bool:
        """True on every rank at the same step once the signature is ready (early_stop=True)."""
        return self.lens.should_stop

    def step_end(self) -> None:
        """Mark the end of a training step (done by ``optimizer.step()`` when one was given)."""
        try:
            self.lens.step_end()
        except Exception as e:  # noqa: BLE001
            self.lens._fault(e)

    def close(self) -> None:
        """Collective: write the results, close the trace and restore Horovod."""
        try:
            self.lens.close()
        except Exception as e:  # noqa: BLE001
            self.lens._fault(e)
        self.detach()

    def detach(self) -> None:
        """Restore Horovod's own functions and the optimizer's ``step``. Idempotent."""
        self._uninstall()
        opt, self._optimizer = self._optimizer, None
        if opt is not None and opt.__dict__.get("step") is self._bound_step:
            del opt.step  # ours is the outermost wrapper: what was below shows through again
            if self._prev_step is not None:
                opt.step = self._prev_step
        # Otherwise something wrapped ours later (an LR scheduler): ours stays in its chain and
        # only passes the call through from now on.

    def __enter__(self) -> HorovodLens:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _count_steps(self, optimizer) -> None:
        """Make each ``optimizer.step()`` call on this object a step boundary.

        Not torch's step hooks: they also fire for the wrapped optimizer's step that
        hvd.DistributedOptimizer calls inside its own, and for the state-creating step
        ``hvd.broadcast_optimizer_state`` runs, neither a training step. A bound method on the
        instance sees only calls made through the object; LR schedulers wrap it in turn.
        """
        prev = optimizer.__dict__.get("step")  # e.g. an LR scheduler's wrapper

        def step(opt, *args, **kwargs):
            if prev is not None:
                out = prev(*args, **kwargs)
            else:
                out = type(opt).step(opt, *args, **kwargs)
            if self._optimizer is opt:
                self.step_end()
            return out

        self._prev_step = prev
        self._bound_step = optimizer.step = types.MethodType(step, optimizer)
        self._optimizer = optimizer

    # ------------------------------------------------------------ setup

    def _make_lens(self, config: dict) -> Lens:
        hvd = self.hvd
        try:
            rank, size = hvd.rank(), hvd.size()
        except ValueError as e:  # "Horovod has not been initialized"
            log.warning("ailens: %s; call hvd.init() before attach(). ailens is off.", e)
            return Lens(rank=0, world_size=1, **{**config, "enabled": False})
        backend = "gloo" if hvd.gloo_enabled() else "mpi" if hvd.mpi_enabled() else ""
        settings = {"framework": f"horovod.{self.kind}", "backend": backend, **config}
        LensConfig(**settings)  # a misspelt or invalid setting fails here, at the user's line
        try:
            return Lens(rank=rank, world_size=size, exchange=self._exchange, **settings)
        except Exception as e:  # noqa: BLE001 - never break training
            log.warning("ailens: could not start on rank %d (%s: %s); ailens is off", rank,
                        type(e).__name__, e)
            return Lens(rank=rank, world_size=size, **{**settings, "enabled": False})

    def _exchange(self, a: np.ndarray) -> np.ndarray:
        """Elementwise SUM across ranks with Horovod itself; not recorded as a collective."""
        a = np.ascontiguousarray(a, dtype=np.int64)
        name = f"ailens.exchange.{a.size}"  # fixed per payload size: same name, same shape
        self._bypass = True
        try:
            if self.kind == "torch":
                import torch

                out = self.hvd.allreduce(torch.from_numpy(a.copy()), op=self.hvd.Sum, name=name)
                return out.numpy()
            import tensorflow as tf

            return self.hvd.allreduce(tf.constant(a), op=self.hvd.Sum, name=name).numpy()
        finally:
            self._bypass = False

    def _install(self) -> None:
        ops = self._ops
        table = _TORCH_OPS if self.kind == "torch" else _TF_OPS
        wrappers: dict[int, tuple[Any, Any]] = {}
        for name, op in table.items():
            real = getattr(ops, name, None) or getattr(self.hvd, name, None)
            if real is None:  # another Horovod version: record what exists
                log.info("ailens: horovod.%s has no %s; not recorded", self.kind, name)
                continue
            wrap = self._wrap_async(real, op) if self.kind == "torch" else self._wrap_tf(real, op)
            wrappers[id(real)] = (real, wrap)
        if self.kind == "torch":
            for name, make in (("synchronize", self._wrap_sync), ("poll", self._wrap_poll),
                               ("barrier", self._wrap_barrier)):
                real = getattr(ops, name, None)
                if real is not None:
                    wrappers[id(real)] = (real, make(real))
        # Patch every horovod module that holds one of the originals (looked up there).
        for mod_name, mod in list(sys.modules.items()):
            if mod is None or not (mod_name == "horovod" or mod_name.startswith("horovod.")):
                continue
            for attr, value in list(vars(mod).items()):
                hit = wrappers.get(id(value))
                if hit is not None and hit[0] is value:
                    setattr(mod, attr, hit[1])
                    self._patched.append((mod, attr, value, hit[1]))
        _active[self.kind] = self

    def _uninstall(self) -> None:
        for mod, attr, real, wrap in reversed(self._patched):
            if getattr(mod, attr, None) is wrap:
                setattr(mod, attr, real)
        self._patched.clear()
        if _active.get(self.kind) is self:
            del _active[self.kind]

    # ------------------------------------------------------------ hot path

    # torch: funnel functions return a handle; synchronize/poll complete it.

    def _wrap_async(self, real, op: str):
        def wrapper(*args, **kwargs):
            if self._bypass:
                return real(*args, **kwargs)
            tick = self._begin(op, lambda: _torch_nbytes(_payload(args, kwargs)))
            try:
                handle = real(*args, **kwargs)
            except BaseException:
                self._end(tick)
                raise
            self._handles[handle] = tick
            return handle

        return _named_like(wrapper, real)

    def _wrap_sync(self, real):
        def synchronize(handle):
            tick = self._handles.pop(handle, None) if self._handles else None
            try:
                return real(handle)
            finally:
                if tick is not None:
                    self._end(tick)

        return _named_like(synchronize, real)

    def _wrap_poll(self, real):
        def poll(handle):
            done = real(handle)
            if done and handle in self._handles:
                self._end(self._handles.pop(handle))
            return done

        return _named_like(poll, real)

    def _wrap_barrier(self, real):
        def barrier(*args, **kwargs):
            if self._bypass:
                return real(*args, **kwargs)
            tick = self._begin("barrier", lambda: 0)
            try:
                return real(*args, **kwargs)
            finally:
                self._end(tick)

        return _named_like(barrier, real)

    # tensorflow: eager calls are synchronous; graph calls get run-time hooks.

    def _wrap_tf(self, real, op: str):
        import tensorflow as tf

        def wrapper(*args, **kwargs):
            nested = getattr(self._local, "depth", 0)
            if self._bypass or nested or _active.get(self.key) is not self:
                return real(*args, **kwargs)
            try:
                payload = _payload(args, kwargs)
                float_size = None
                if real.__name__.endswith("_cond"):
                    ok, float_size = _record_at_cond(kwargs)
                    if not ok:
                        return real(*args, **kwargs)  # the ops inside record themselves, if run
            except Exception:  # noqa: BLE001 - an unexpected signature: the same on every rank
                return real(*args, **kwargs)
            self._local.depth = 1
            try:
                return self._tf_call(tf, real, op, payload, args, kwargs, float_size)
            finally:
                self._local.depth = 0

        # AutoGraph would otherwise convert the wrapper (and what it calls) while tracing:
        # seconds of extra tracing for code that has no tensor-dependent Python control flow.
        return tf.autograph.experimental.do_not_convert(_named_like(wrapper, real))


# ---------------------------------------------------------------- helpers


def _named_like(wrapper, real):
    wrapper.__name__ = getattr(real, "__name__", wrapper.__name__)
    wrapper.__doc__ = getattr(real, "__doc__", None)
    wrapper.__wrapped__ = real
    return wrapper


def _payload(args: tuple, kwargs: dict):
    """The tensor (or list of tensors) a funnel function gets first."""
    if args:
        return args[0]
    for key in ("tensor", "tensors", "variables"):
        if key in kwargs:
            return kwargs[key]
    raise TypeError("no tensor argument")


def _record_at_cond(kwargs: dict) -> tuple[bool, int | None]:
    """Whether to record Horovod's ``_allreduce_cond`` as a whole, and the bytes per element
    of floating tensors it moves (None: their own). Only when its allreduce branch surely runs
    (known while tracing outside elastic mode) and the compression is a built-in one; otherwise
    the ops in the branch record themselves when they run (hooks inside a tf.cond branch make
    TF run those conds in program order, so this is the slower path)."""
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
    return int(x.numel()) * int(x.element_size())


def _tf_itemsize(t, float_size: int | None) -> int:
    dtype = getattr(t, "dtype", None)
    if dtype is None:
        return 0
    return float_size if float_size and dtype.is_floating else int(dtype.size)


def _tf_static_nbytes(x, float_size: int | None = None) -> int:
    if isinstance(x, (list, tuple)):
        return sum(_tf_static_nbytes(t, float_size) for t in x)
    if hasattr(x, "indices") and hasattr(x, "values"):  # tf.IndexedSlices
        return _tf_static_nbytes([x.values, x.indices], float_size)
    return int(x.shape.num_elements()) * _tf_itemsize(x, float_size)


def _tf_begin_op(tf, key: str, op: str, payload, float_size: int | None = None):
    """A numpy_function op that begins the tick once every input tensor is ready."""
    items = []
    for t in payload if isinstance(payload, (list, tuple)) else [payload]:
        # A sparse gradient moves as two allgathers: its values and its indices.
        items += [t.values, t.indices] if isinstance(t, tf.IndexedSlices) else [t]
    graph = tf.compat.v1.get_default_graph()
    deps, static, dynamic = [], 0, []
    for t in items:
        if isinstance(t, tf.Tensor):
            # An outer tensor (e.g. inside a tf.cond branch) must be captured into this
            # graph; a control dependency on it would otherwise be dropped.
            if t.graph is not graph and hasattr(graph, "capture"):
                t = graph.capture(t)
            deps.append(t)
        n, size = t.shape.num_elements(), _tf_itemsize(t, float_size)
        if n is not None:
            static += n * size
        else:
            dynamic.append(tf.size(t, out_type=tf.int64) * size)
    nbytes = tf.add_n([tf.constant(static, tf.int64), *dynamic])
    with tf.control_dependencies(deps):
        tick = tf.numpy_function(lambda n, _key=key, _op=op: _tf_begin_hook(_key, _op, n),
                                 [nbytes], tf.int64, stateful=True, name="ailens_begin")
    _run_independently(tf, tick)
    return tick


def _run_independently(tf, tensor) -> None:
    """Exempt a hook from tf.function's program-order chaining of stateful ops.

    tf.function makes every stateful op without resource inputs wait for the previous one. A
    hook is stateful (it must not be pruned or folded), so without this the end hook of one
    collective would hold back the begin hook, hence the start, of the next: Horovod's
    collectives, stateless and free to overlap and fuse, would run one after another. An
    independent op still runs before the function returns.
    """
    manager = getattr(tf.compat.v1.get_default_graph(), "experimental_acd_manager", None)
    if manager is not None:
        manager.run_independently(tensor.op)


def _tf_begin_hook(key: str, op: str, nbytes) -> np.int64:
    rec = _active.get(key)
    if rec is None:
        return np.int64(-1)
    return np.int64(rec._begin(op, lambda: int(nbytes)))


def _tf_end_hook(key: str, tick) -> np.int64:
    rec = _active.get(key)
    if rec is not None and tick >= 0:
        rec._end(int(tick))
    return np.int64(0)
