"""Recording TensorFlow collectives, eagerly and inside ``tf.function`` graphs: used by the
Horovod adapter (``horovod.tensorflow``) and the Keras adapter (``tf.distribute``).

Inside a ``tf.function`` Python runs only while tracing. There each recorded collective gets
two ``tf.numpy_function`` ops: one runs once its inputs are ready and begins the tick, one
runs once its outputs are ready and ends it (one Python call each, ~40 us measured). They
are marked independent of tf.function's program-order chaining of stateful ops (otherwise
each collective would wait for the previous one to finish). A graph traced while an
attachment is active records into whichever attachment of its key is active when it runs;
graphs traced before carry no hooks. Collectives of one graph that become ready together
begin in the order the executor runs them, which may differ between ranks within a step;
the tick count is the same on every rank regardless.

Steps (when the attachment infers them): a graph traced for such an attachment also gets a
call marker, an op without inputs that numbers each call of the function; the first
collective of each call is the step-inference observation ``"call:<function name>"``, so a
custom training loop's steps are its calls of the training function, whatever order the
collectives inside a call begin in. That first hook, where the previous call has finished on
every rank, is also where the vote and the step end run.
"""

from __future__ import annotations

import itertools
import logging
import os
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ._base import SKIP, Attachment, quiet

# The attachment recording each key ("tensorflow": Horovod, "tf.distribute": Keras). Graph
# hooks look it up when they run.
_active: dict[str, Attachment] = {}
_markers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # graph -> (token, marker)
_tokens = itertools.count()
_last_call: dict[int, int] = {}  # marker token -> the call whose first collective was seen
_warned: set[str] = set()

Payload = Callable[[tuple, dict], "tuple[Any, int | None] | None"]


def activate(key: str, att: Attachment) -> None:
    """Make ``att`` the attachment recording ``key``; undone when ``att`` detaches."""
    _active[key] = att
    att.patches.on_restore(lambda: _active.pop(key) if _active.get(key) is att else None)


def tf_threads(tf: Any) -> dict:
    """TF's intra- and inter-op thread settings; 0 (TF's default) means the usable CPUs."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "threads": tf.config.threading.get_intra_op_parallelism_threads() or cpus,
        "interop_threads": tf.config.threading.get_inter_op_parallelism_threads() or cpus,
    }


def wrap(tf: Any, key: str, real: Callable, op: str, payload_of: Payload) -> Callable:
    """A stand-in for the TF collective ``real`` that records each call once as ``op``.
    ``payload_of(args, kwargs)`` gives ``(tensors, float_size)`` -- the local tensors moved
    and, when the collective compresses floats, their bytes per element -- or None to leave
    the call to the collectives it makes in turn."""

    def wrapper(*args, **kwargs):
        att = _active.get(key)
        if att is None or not att.recording:
            return real(*args, **kwargs)
        try:
            got = payload_of(args, kwargs)
        except Exception:  # noqa: BLE001 - an unexpected signature: the same on every rank
            got = None
        if got is None:
            return real(*args, **kwargs)
        return _record(tf, key, att, real, op, got, args, kwargs)

    wrapper.__name__ = getattr(real, "__name__", op)
    wrapper.__doc__ = getattr(real, "__doc__", None)
    wrapper.__wrapped__ = real
    # AutoGraph would otherwise convert the wrapper (and what it calls) while tracing:
    # seconds of extra tracing for code without tensor-dependent Python control flow.
    return tf.autograph.experimental.do_not_convert(wrapper)


def _record(tf, key: str, att: Attachment, real, op: str, got, args, kwargs):
    payload, float_size = got
    if tf.executing_eagerly():
        return att.call(real, op, lambda: static_nbytes(payload, float_size), args, kwargs)
    # Building the hooks is deterministic, so a failure here fails the same way on every
    # rank: then the op runs unhooked everywhere and tick counts still agree.
    try:
        tick = _begin_op(tf, key, att, op, payload, float_size)
    except Exception as e:  # noqa: BLE001
        _graph_warn(att, key, e)
        with quiet():
            return real(*args, **kwargs)
    with tf.control_dependencies([tick]), quiet():
        out = real(*args, **kwargs)
    try:
        outs = [t for t in tf.nest.flatten(out) if isinstance(t, tf.Tensor)]
        with tf.control_dependencies(outs):
            end = tf.numpy_function(
                lambda t: _end_hook(key, t), [tick], tf.int64, stateful=True, name="ailens_end"
            )
        _run_independently(tf, end)
    except Exception as e:  # noqa: BLE001
        _graph_warn(att, key, e)
    return out


def _graph_warn(att: Attachment, key: str, e: BaseException) -> None:
    if key not in _warned:
        _warned.add(key)
        att.notice(
            "ailens: cannot hook a collective in a TF graph (%s: %s); it runs unrecorded",
            type(e).__name__,
            e,
            level=logging.WARNING,
        )


def _itemsize(t, float_size: int | None) -> int:
    dtype = getattr(t, "dtype", None)
    if dtype is None:
        return 0
    return float_size if float_size and dtype.is_floating else int(dtype.size)


def static_nbytes(x, float_size: int | None = None) -> int:
    """Bytes of a tensor, an IndexedSlices or a list of them (their static shapes)."""
    if isinstance(x, (list, tuple)):
        return sum(static_nbytes(t, float_size) for t in x)
    if hasattr(x, "indices") and hasattr(x, "values"):  # tf.IndexedSlices
        return static_nbytes([x.values, x.indices], float_size)
    return int(x.shape.num_elements()) * _itemsize(x, float_size)


def _begin_op(tf, key: str, att: Attachment, op: str, payload, float_size: int | None):
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
        n, size = t.shape.num_elements(), _itemsize(t, float_size)
        if n is not None:
            static += n * size
        else:
            dynamic.append(tf.size(t, out_type=tf.int64) * size)
    inputs = [tf.add_n([tf.constant(static, tf.int64), *dynamic])]
    token, name = None, ""
    if att.infers_steps:  # number the calls of this function: they are the steps
        token, name, marker = _call_marker(tf, graph)
        inputs.append(marker)
    with tf.control_dependencies(deps):
        tick = tf.numpy_function(
            lambda n, *c: _begin_hook(key, op, n, token, name, c),
            inputs,
            tf.int64,
            stateful=True,
            name="ailens_begin",
        )
    _run_independently(tf, tick)
    return tick


def _call_marker(tf, graph):
    """(token, function name, marker tensor in ``graph``) for the function ``graph`` belongs
    to (a tf.cond or while branch belongs to its function): the marker counts its calls."""
    fn_graph = graph
    while type(fn_graph).__name__ in (
        "CondBranchFuncGraph",
        "WhileBodyFuncGraph",
        "WhileCondFuncGraph",
    ):
        fn_graph = fn_graph.outer_graph
    if fn_graph not in _markers:
        calls = itertools.count(1)
        with fn_graph.as_default():
            marker = tf.numpy_function(
                lambda: np.int64(next(calls)), [], tf.int64, stateful=True, name="ailens_call"
            )
            _run_independently(tf, marker)
        _markers[fn_graph] = (next(_tokens), marker)
    token, marker = _markers[fn_graph]
    if graph is not fn_graph:
        marker = graph.capture(marker)
    return token, getattr(fn_graph, "name", "graph"), marker


def _run_independently(tf, tensor) -> None:
    """Exempt a hook from tf.function's program-order chaining of stateful ops.

    tf.function makes every stateful op without resource inputs wait for the previous one. A
    hook is stateful (it must not be pruned or folded), so without this the end hook of one
    collective would hold back the begin hook, hence the start, of the next: collectives,
    stateless and free to overlap and fuse, would run one after another. An independent op
    still runs before the function returns.
    """
    manager = getattr(tf.compat.v1.get_default_graph(), "experimental_acd_manager", None)
    if manager is not None:
        manager.run_independently(tensor.op)


def _begin_hook(key: str, op: str, nbytes, token, name: str, call) -> np.int64:
    att = _active.get(key)
    if att is None:
        return np.int64(-1)
    if token is None:
        return np.int64(att.begin(op, int(nbytes), step_key=SKIP))
    with att.lock:
        first = _last_call.get(token) != int(call[0])
        _last_call[token] = int(call[0])
        step = f"call:{name}"
        return np.int64(att.begin(op, int(nbytes), step_op=step, step_key=step if first else SKIP))


def _end_hook(key: str, tick) -> np.int64:
    att = _active.get(key)
    if att is not None and tick >= 0:
        att.end(int(tick))
    return np.int64(0)
