"""Two Horovod ranks train a tiny TensorFlow model with hvd.DistributedGradientTape inside a
tf.function, then issue a few eager collectives, and print per rank what ailens recorded.
Launched by tests/test_integration_horovod.py under horovodrun.

argv: RUN_DIR STEPS MODE [FAULT]   (MODE: lens | nolens | oneline | manual; FAULT: RANK:TICK, a
fault injected inside ailens). ``oneline``: only the attach line, no ``step_end`` and no
``close``: the steps are inferred and the run ends at exit. ``manual``: ``attach(hvd,
steps="manual")`` and ``step_end()`` after each call: the graphs time their collectives
themselves. Prints one ``RESULT {json}`` line per rank, with ``python_hooks``: how many times a
graph collective called into Python.
"""

import json
import os
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

run_dir, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fault = sys.argv[4] if len(sys.argv) > 4 else ""
hvd.init()
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.random.set_seed(0)
w1 = tf.Variable(tf.random.normal([16, 32], seed=1), name="w1")
b1 = tf.Variable(tf.zeros([32]), name="b1")
w2 = tf.Variable(tf.random.normal([32, 4], seed=2), name="w2")
variables = [w1, b1, w2]

lens = None
if mode == "oneline":
    from ailens.integrations import horovod as ailens_hvd

    ailens_hvd.attach(hvd, run_dir=run_dir, exchange_ticks=16)  # the one line
elif mode in ("lens", "manual"):
    from ailens.integrations import horovod as ailens_hvd
    from inject_fault import inject

    steps_how = "manual" if mode == "manual" else None
    lens = ailens_hvd.attach(hvd, run_dir=run_dir, exchange_ticks=16, steps=steps_how)
    inject(lens.lens, fault)
python_hooks = [0]
if mode != "nolens":
    from ailens.integrations import tfgraph

    begin_hook = tfgraph._begin_hook

    def counted_begin_hook(*args):
        python_hooks[0] += 1
        return begin_hook(*args)

    tfgraph._begin_hook = counted_begin_hook

hvd.broadcast_variables(variables, root_rank=0)


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        pred = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2)
        loss = tf.reduce_mean((pred - y) ** 2)
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, variables)
    for v, g in zip(variables, grads, strict=True):
        v.assign_sub(0.05 * g)
    return loss


rng = np.random.default_rng(1 + hvd.rank())
for _ in range(steps):
    x = tf.constant(rng.standard_normal((8, 16)), tf.float32)
    y = tf.constant(rng.standard_normal((8, 4)), tf.float32)
    train_step(x, y)
    if lens is not None:
        lens.step_end()

# Eager collectives the script calls itself.
extra = tf.range(6, dtype=tf.float32)
hvd.allreduce(extra, name="x.sync")
hvd.allgather(tf.ones([3, 2], tf.float64), name="x.gather")
hvd.broadcast(tf.zeros([5], tf.int64), root_rank=0, name="x.bcast")
hvd.grouped_allreduce([extra, extra[:2]], name="x.group")

params = np.concatenate([v.numpy().ravel() for v in variables])
result = {
    "rank": hvd.rank(),
    "checksum": zlib.crc32(params.astype(np.float32).tobytes()),
    "python_hooks": python_hooks[0],
}
if lens is not None:
    lens.close()
    table = lens.lens.online.table().to_dict() if lens.lens.online else None
    result.update(
        ticks=lens.lens.ticks,
        steps=lens.lens.steps,
        disabled=lens.lens.disabled,
        table=table,
        restored=not hasattr(hvd.mpi_ops._allreduce, "__wrapped__")
        and not hasattr(hvd._allreduce, "__wrapped__"),
    )
print("RESULT", json.dumps(result), flush=True)
