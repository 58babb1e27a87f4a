"""The graph ailens's slates add to Keras' training function under Horovod, beside the same
model's graph without ailens (issue 33): tf-keras, ``hvd.DistributedOptimizer``; run by
tests/test_tfgraph_ops.py in one process (size 1: ailens hooks the allreduce inside Horovod's
``tf.cond`` branch, as with ``HOROVOD_ELASTIC`` or a custom compression) and under horovodrun
with two ranks (it times the ``tf.cond`` as a whole, on a slate). argv: RUN_DIR. Rank 0
prints one ``RESULT {json}`` line: per arm (``plain``, ``lensed``), facts of the function
holding the collectives (Horovod's gradient all-reduce function, nested in the training
function):

- ``collectives``: the nodes whose branch (Horovod's ``tf.cond``) runs a Horovod op;
- ``ordered``: pairs (a, b) of collectives with a path (data or control edges) from a to b;
- ``before_collective``: ailens's nodes (types the plain function has not) on a path into a
  collective;
- ``stamps``: per ``Timestamp`` node, whether it is exempt from the chaining of stateful ops
  (``_independent_side_effects``) and which of ailens's nodes it waits for.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import horovod.tensorflow.keras as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

hvd.init()
keras = tf.keras
from ailens.integrations.keras import LensCallback  # noqa: E402 - after tf-keras is chosen


def train_graph(arm: str):
    """The GraphDef (with its function library) of a model's traced training function."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.layers.Input((16,)),
        keras.layers.Dense(32, activation="relu"),
        keras.layers.Dense(16, activation="relu"),
        keras.layers.Dense(4),
    ])  # fmt: skip
    # Its own name per arm: Horovod caches its all-reduce function by these arguments.
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05), name=f"Distributed_{arm}")
    model.compile(optimizer=opt, loss="mse")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((16, 16)).astype(np.float32)
    y = rng.standard_normal((16, 4)).astype(np.float32)
    callbacks = [LensCallback(run_dir=sys.argv[1])] if arm == "lensed" else []
    model.fit(x, y, batch_size=8, epochs=1, callbacks=callbacks, verbose=0)
    concrete = model.train_function._list_all_concrete_functions()[0]
    return concrete.graph.as_graph_def()


def collective_function(graph_def):
    """(the FunctionDef calling Horovod's collectives, names of its collective nodes)."""
    lib = {f.signature.name: f for f in graph_def.library.function}
    horovod = {n for n, f in lib.items() if any("Horovod" in d.op for d in f.node_def)}
    for f in lib.values():
        found = []
        for node in f.node_def:
            branches = [node.attr[a].func.name for a in ("then_branch", "else_branch")]
            if node.op in ("If", "StatelessIf") and horovod & set(branches):
                found.append(node.name)
        if found:
            return f, found
    raise SystemExit("no Horovod collective found in the training function")


def ancestors(preds: dict, name: str) -> set:
    seen, todo = set(), [name]
    while todo:
        for p in preds.get(todo.pop(), ()):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def facts(fdef, collectives: list, ours: set) -> dict:
    nodes = {n.name: n for n in fdef.node_def}
    preds = {n: {i.lstrip("^").split(":")[0] for i in d.input} for n, d in nodes.items()}
    anc = {c: ancestors(preds, c) for c in collectives}
    mine = {n for n, d in nodes.items() if d.op in ours}
    stamps = {}
    for n, d in nodes.items():
        if d.op == "Timestamp":
            independent = d.attr["_independent_side_effects"].b
            stamps[n] = {
                "independent": independent,
                "waits_for": sorted(ancestors(preds, n) & mine),
            }
    return {
        "collectives": collectives,
        "ordered": [[a, b] for a in collectives for b in collectives if a in anc[b]],
        "before_collective": sorted(set().union(*anc.values()) & mine),
        "stamps": stamps,
        "op_types": sorted({d.op for d in nodes.values()}),
    }


plain_fn, plain_collectives = collective_function(train_graph("plain"))
lensed_fn, lensed_collectives = collective_function(train_graph("lensed"))
ours = {d.op for d in lensed_fn.node_def} - {d.op for d in plain_fn.node_def}
if hvd.rank() == 0:
    print(
        "RESULT "
        + json.dumps(
            {
                "plain": facts(plain_fn, plain_collectives, ours),
                "lensed": facts(lensed_fn, lensed_collectives, ours),
                "ailens_op_types": sorted(ours),
            }
        ),  # fmt: skip
        flush=True,
    )
hvd.shutdown()
sys.exit(0)
