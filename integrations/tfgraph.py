"""Recording TensorFlow collectives, eagerly and inside ``tf.function`` graphs: used by the
Horovod adapter (``horovod.tensorflow``) and the Keras adapter (``tf.distribute``).

Not an adapter of its own but public for a script that records a TF collective the adapters do
not know (``benchmarks/overhead/_tfgraph_cost.py`` does): ``wrap`` the collective under a key,
``activate(key, attachment)`` (an ``ailens.integrations.Attachment`` on a Lens), with slates
``prepare_slates`` and ``step_ended`` after each step end; ``collect`` reads the slates.

Inside a ``tf.function`` Python runs only while tracing, so what runs at each call is what the
trace adds around each recorded collective. Two ways, chosen per graph while tracing:

Slates (the attachment marks the steps: ``collects_graphs``, e.g. Keras' LensCallback with
Horovod). No Python at run time: the collective gets two ``tf.timestamp()`` ops, one once its
inputs are ready (begin), one once its outputs are (end), and one scatter of (begin, end, the
bytes not known while tracing) into a row of the graph's *slate*, a small float64 variable
made ahead of time (eagerly: tf.function refuses variables made on a retrace) that holds the
last ``SLATE_CALLS`` calls; the graph's first recorded collective also counts the call. The
timestamps are exempt from tf.function's program-order chaining of stateful ops, and no
collective waits for a timestamp or a scatter (tests/test_tfgraph_ops.py checks it on the
real Keras+Horovod training function). One wait remains: tf.function makes the outputs of a
function wait for every stateful op in it, so where the collectives sit in a nested function
(Horovod's gradient all-reduce function) each reduced gradient comes out once every collective
of the call has ended and been written (keras_hvd, ``benchmarks/overhead/_keras_hvd_fn.py
--profile``: 220 vs 154 us from the last collective's end to the call's end; the compute
thread's busy time per call unchanged, 2,583 vs 2,581 us). :func:`step_ended` reads the slates every
``COLLECT_EVERY`` step ends (two eager reads per slate that ran, one otherwise), :func:`collect`
also before an eager collective and at close: each call's collectives become ticks with their
op and bytes, in the step whose end came after their begin, ordered by (step, graph in tracing
order, call) -- the same on every rank -- with the work counted since the last event shared
among them (``Lens.record_collectives``). Calls beyond ``SLATE_CALLS`` between two reads are
not recorded (a warning says so). Collectives in a ``tf.cond`` or loop body, or traced once the
spare slates ran out before a read, take the second way.

Python hooks (otherwise). Two ``tf.numpy_function`` ops: one runs once the inputs are ready
and begins the tick, one runs once the outputs are ready and ends it (one Python call each,
~40 us measured), also exempt from the chaining; so is a ``tf.cond`` whose branch is stateful
only through these hooks (the hooks would make it a stateful op, chained after the previous
one: the collectives in such conds would run one at a time). Collectives of one graph that
become ready together begin in the order the executor runs them, which may differ between
ranks within a step; the tick count is the same on every rank regardless.

A graph traced while an attachment is active records into whichever attachment of its key is
active when it runs (slates: from that attachment's start on); graphs traced before carry no
hooks.

Steps (when the attachment infers them, Python hooks only): a graph traced for such an
attachment also gets a call marker, an op without inputs that numbers each call of the
function; the first collective of each call is the step-inference observation
``"call:<function name>"``, so a custom training loop's steps are its calls of the training
function, whatever order the collectives inside a call begin in. That first hook, where the
previous call has finished on every rank, is also where the vote and the step end run.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ._base import SKIP, Attachment, quiet

__all__ = [
    "COLLECT_EVERY",
    "SLATE_CALLS",
    "activate",
    "collect",
    "prepare_slates",
    "static_nbytes",
    "step_ended",
    "tf_threads",
    "wrap",
]

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
            if tf.executing_eagerly():
                return real(*args, **kwargs)
            graph = tf.compat.v1.get_default_graph()
            first = len(graph.get_operations())
            out = real(*args, **kwargs)
            _exempt_conds(graph, first)
            return out
        return _record(tf, key, att, real, op, got, args, kwargs)

    wrapper.__name__ = getattr(real, "__name__", op)
    wrapper.__doc__ = getattr(real, "__doc__", None)
    wrapper.__wrapped__ = real
    # AutoGraph would otherwise convert the wrapper (and what it calls) while tracing:
    # seconds of extra tracing for code without tensor-dependent Python control flow.
    converted = tf.autograph.experimental.do_not_convert(wrapper)
    converted.__wrapped__ = real  # not ``wrapper``: unwrapping gives the framework's function
    return converted


def _record(tf, key: str, att: Attachment, real, op: str, got, args, kwargs):
    payload, float_size = got
    if tf.executing_eagerly():
        if getattr(att, "collects_graphs", False):
            collect(key, att)  # the graphs' collectives before this one, as they ran
        return att.call(real, op, lambda: static_nbytes(payload, float_size), args, kwargs)
    graph = tf.compat.v1.get_default_graph()
    if getattr(att, "collects_graphs", False) and type(graph).__name__ == "FuncGraph":
        return _record_on_slate(tf, key, att, graph, real, op, payload, float_size, args, kwargs)
    return _record_with_calls(tf, key, att, real, op, payload, float_size, args, kwargs)


def _record_with_calls(tf, key, att, real, op, payload, float_size, args, kwargs):
    """The collective ``real`` in a graph, between two Python hooks that begin and end it."""
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


# ---------------------------------------------------------------- slates: no Python per call

SLATE_ROWS = 32  # collectives per call a slate holds; a graph with more takes more slates
SLATE_CALLS = 128  # calls a slate holds (a ring): up to 4 calls per step between reads
COLLECT_EVERY = 32  # step ends between two reads of the slates
SPARE_SLATES = 8  # made ahead (eagerly) for the graphs traced before the next read


class _Slate:
    """What one traced graph writes at run time, with no Python call. ``calls`` counts the
    graph's calls; call c of the graph's i-th recorded collective writes row ``i * SLATE_CALLS
    + c % SLATE_CALLS``: (begin, end, bytes not known while tracing), the times from
    ``tf.timestamp()`` (s since the epoch, wall clock). :func:`collect` reads it."""

    def __init__(self, tf) -> None:
        # Made eagerly, never while tracing: tf.function refuses variables made on a retrace.
        self.rows = tf.Variable(
            tf.zeros([SLATE_ROWS * SLATE_CALLS, 3], tf.float64), trainable=False, name="ailens"
        )
        self.calls = tf.Variable(tf.zeros([], tf.int64), trainable=False, name="ailens_calls")
        self.graph: Callable[[], Any] = lambda: None  # weak reference to the graph using it
        self.order = (0, 0)  # (graph in tracing order, part of it)
        self.slot: Any = None  # in the graph: this call's place in the ring
        self.ops: list[str] = []
        self.nbytes: list[int] = []  # known while tracing
        self.read = 0  # calls collected so far


class _Collector:
    """Per key: the slates, spares, and the step ends since the last read."""

    def __init__(self) -> None:
        self.slates: list[_Slate] = []  # in use, in tracing order
        self.spare: list[_Slate] = []
        self.graphs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # graph -> slate
        self.graph_numbers = itertools.count()  # tracing order (not len(slates): gc-dependent)
        self.step_ends: list[int] = []  # clock (ns) of the step ends since the last read
        self.warned_missed = False
        self.collected = False  # read since the attachment began


_collectors: dict[str, _Collector] = {}


def prepare_slates(tf, key: str) -> None:
    """Make spare slates for ``key`` and skip the calls not collected yet (a new attachment
    starts from now). Eagerly: call it outside any tf.function."""
    col = _collectors.setdefault(key, _Collector())
    for slate in col.slates:
        slate.read = int(slate.calls.numpy())
    col.step_ends.clear()
    col.collected = False
    while len(col.spare) < SPARE_SLATES:
        col.spare.append(_Slate(tf))


def _stamp(tf, deps) -> Any:
    """``tf.timestamp()`` once ``deps`` are ready, free of the chaining of stateful ops."""
    with tf.control_dependencies(deps):
        t = tf.timestamp()
    _run_independently(tf, t)
    return t


def _record_on_slate(tf, key, att, graph, real, op, payload, float_size, args, kwargs):
    """The collective ``real`` in ``graph``, timed in the graph onto the graph's slate."""
    col = _collectors.get(key)
    try:
        deps, static, dynamic = _inputs(tf, graph, payload, float_size)
        slate = col.graphs.get(graph) if col is not None else None
        if slate is None or len(slate.ops) == SLATE_ROWS:
            if col is None or not col.spare:  # all taken since the last read
                return _record_with_calls(tf, key, att, real, op, payload, float_size, args, kwargs)
            part = slate.order[1] + 1 if slate is not None else 0
            graph_no = slate.order[0] if slate is not None else next(col.graph_numbers)
            slate = col.spare.pop()
            slate.graph, slate.order = weakref.ref(graph), (graph_no, part)
            col.slates.append(slate)
            col.graphs[graph] = slate
            slate.slot = (slate.calls.assign_add(1) - 1) % SLATE_CALLS
        begin = _stamp(tf, deps)
    except Exception as e:  # noqa: BLE001 - deterministic: the same on every rank
        _graph_warn(att, key, e)
        with quiet():
            return real(*args, **kwargs)
    with quiet():
        out = real(*args, **kwargs)
    try:
        end = _stamp(tf, [t for t in tf.nest.flatten(out) if isinstance(t, tf.Tensor)])
        # Bytes not known while tracing; a float64 constant when all are (no cast op).
        if dynamic:
            more = tf.add_n([tf.cast(d, tf.float64) for d in dynamic])
        else:
            more = tf.constant(0.0, tf.float64)
        # Five ops per collective: two timestamps, the row, its index, the write (the first
        # collective of a slate writes at the call's slot itself: no index op).
        offset = len(slate.ops) * SLATE_CALLS
        index = slate.slot + offset if offset else slate.slot
        row = tf.stack([begin, end, more])
        tf.raw_ops.ResourceScatterUpdate(resource=slate.rows.handle, indices=index, updates=row)
        slate.ops.append(op)
        slate.nbytes.append(static)
    except Exception as e:  # noqa: BLE001
        _graph_warn(att, key, e)
    return out


def step_ended(key: str, att: Attachment) -> None:
    """Note a step end (call it right after the Lens's); read the slates every
    ``COLLECT_EVERY`` step ends."""
    col = _collectors.get(key)
    if col is None:
        return
    col.step_ends.append(time.perf_counter_ns())
    if len(col.step_ends) >= COLLECT_EVERY or not col.collected:  # the first step: at once
        collect(key, att)


def collect(key: str, att: Attachment) -> None:
    """Record the collectives the graphs of ``key`` ran since the last read, each in the step
    it ran in (by its time against the step ends), ordered by (step, graph, call) -- the same
    order on every rank. Call it where no graph of ``key`` is running. Never raises: a failure
    after the calls were counted disables ailens and still counts every tick."""
    col = _collectors.get(key)
    if col is None:
        return
    lens = att.lens
    try:
        todo = []  # (slate, first call, calls) with calls not read yet
        for slate in col.slates:
            calls = int(slate.calls.numpy())
            if calls > slate.read:
                todo.append((slate, max(slate.read, calls - SLATE_CALLS), calls))
    except Exception as e:  # noqa: BLE001 - TF itself failed: nothing can be counted
        lens.disable(e)
        return
    count = sum((calls - first) * len(slate.ops) for slate, first, calls in todo)
    try:
        record = _ticks_of(col, att, todo)
    except Exception as e:  # noqa: BLE001
        lens.disable(e)
        record = None
    if record is None and count:
        record = ([""] * count, *([np.zeros(count, np.int64)] * 4))  # counted, not recorded
    if record is not None:
        try:
            lens.record_collectives(*record)
        except Exception as e:  # noqa: BLE001 - fail open; the disabled path counts the ticks
            lens.disable(e)
            lens.record_collectives(*record)


def _ticks_of(col: _Collector, att: Attachment, todo: list) -> tuple | None:
    """(ops, nbytes, t_begin, t_end, steps) of the calls in ``todo``, in tick order."""
    ends = np.asarray(col.step_ends, np.int64)
    first_step = att.lens.steps - len(ends)  # the step of a collective begun before ends[0]
    col.step_ends.clear()
    col.collected = True
    # tf.timestamp() reads the wall clock; the Lens clock is time.perf_counter_ns.
    offset = time.perf_counter_ns() - time.time_ns()
    calls_done, missed = [], 0  # per call: (order key, slate, extra bytes, times, step)
    for slate, first, calls in todo:
        missed += first - slate.read
        slate.read = calls
        n = len(slate.ops)
        if not n:
            continue
        slots = np.arange(first, calls) % SLATE_CALLS
        rows = slate.rows.numpy().reshape(SLATE_ROWS, SLATE_CALLS, 3)
        rows = rows[:n, slots].transpose(1, 0, 2)  # (calls, collectives, 3)
        times = (rows[:, :, :2] * 1e9).astype(np.int64) + offset
        steps = first_step + np.searchsorted(ends, times[:, :, 0].min(axis=1))
        for j, c in enumerate(range(first, calls)):
            order = (int(steps[j]), *slate.order, c)
            calls_done.append((order, slate, rows[j, :, 2], times[j], steps[j]))
    col.slates = [s for s in col.slates if s.graph() is not None]  # gone: read a last time
    while len(col.spare) < SPARE_SLATES:
        import tensorflow as tf

        col.spare.append(_Slate(tf))
    if missed and not col.warned_missed:
        col.warned_missed = True
        att.notice(
            "ailens: %d calls of a TF function were not read in time (over %d calls per %d "
            "steps); their collectives are not counted",
            missed,
            SLATE_CALLS,
            COLLECT_EVERY,
            level=logging.WARNING,
        )
    if not calls_done:
        return None
    calls_done.sort(key=lambda g: g[0])
    ops = [op for g in calls_done for op in g[1].ops]
    nbytes = np.concatenate([np.add(g[1].nbytes, g[2].astype(np.int64)) for g in calls_done])
    times = np.concatenate([g[3] for g in calls_done])
    steps = np.concatenate([np.full(len(g[1].ops), g[4], np.int64) for g in calls_done])
    return ops, nbytes, times[:, 0], times[:, 1], steps


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
    graph = tf.compat.v1.get_default_graph()
    deps, static, dynamic = _inputs(tf, graph, payload, float_size)
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


def _inputs(tf, graph, payload, float_size: int | None) -> tuple[list, int, list]:
    """(tensors to wait for, bytes known while tracing, int64 tensors of the other bytes)."""
    items = []
    for t in payload if isinstance(payload, (list, tuple)) else [payload]:
        # A sparse gradient moves as two allgathers: its values and its indices.
        items += [t.values, t.indices] if isinstance(t, tf.IndexedSlices) else [t]
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
    return deps, static, dynamic


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


def _exempt_conds(graph, first: int) -> None:
    """Exempt the conds made in ``graph`` from its ``first`` op on, that are stateful only
    through ailens's hooks in their branches, from tf.function's chaining of stateful ops.

    A cond whose branch holds a stateful op is itself a stateful op, so each such cond (e.g.
    Horovod's ``tf.cond`` around an allreduce whose branch ailens hooks) would wait for the
    previous one to finish, branch and collective included: collectives that are
    independent without ailens would run one at a time, each in its own negotiation round.
    Exempted, they are as independent as without ailens, and still run before the function
    returns. A branch with a stateful op of its own keeps its chaining, as without ailens.
    """
    manager = getattr(graph, "experimental_acd_manager", None)
    if manager is None:
        return
    try:
        from tensorflow.python.framework import op_def_registry

        for op in graph.get_operations()[first:]:
            if op.type != "If":  # StatelessIf: not chained
                continue
            names = [op.get_attr(b).name for b in ("then_branch", "else_branch")]
            if all(_stateful_only_through_hooks(graph, n, op_def_registry) for n in names):
                manager.run_independently(op)
    except Exception:  # noqa: BLE001 - TF internals moved: keep the chaining, as before
        return


def _stateful_only_through_hooks(graph, fname: str, registry) -> bool:
    """Whether every stateful node of function ``fname`` is one of ailens's hooks."""
    for node in graph._get_function(fname).definition.node_def:
        op_def = registry.get(node.op)
        stateful = op_def is None or op_def.is_stateful  # None: a call of another function
        if stateful and not node.name.rsplit("/", 1)[-1].startswith("ailens_"):
            return False
    return True


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
