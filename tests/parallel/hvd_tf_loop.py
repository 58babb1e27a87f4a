"""The shape of Horovod's TensorFlow 2 example (examples/tensorflow2/tensorflow2_mnist.py): a
custom loop over ``dataset.take(n)`` with a ``tf.function`` step and
``hvd.DistributedGradientTape``, with only the attach line added. Nothing tells ailens the
run's length; the steps are inferred. Launched by tests/test_integration_horovod.py under
horovodrun; every rank prints one ``RESULT {json}`` line.

argv: RUN_DIR STEPS
"""

import json
import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

run_dir, steps = sys.argv[1], int(sys.argv[2])
notices: list[str] = []  # what ailens says (the user's logging shows INFO)
handler = logging.Handler(logging.INFO)
handler.emit = lambda record: notices.append(record.getMessage())
logging.getLogger("ailens").addHandler(handler)
logging.getLogger("ailens").setLevel(logging.INFO)

hvd.init()
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
from ailens.integrations import horovod as ailens_hvd  # noqa: E402

handle = ailens_hvd.attach(hvd, run_dir=run_dir)  # the one line
rng = np.random.default_rng(1 + hvd.rank())
data = tf.data.Dataset.from_tensor_slices(
    (
        rng.standard_normal((256, 16)).astype("float32"),
        rng.standard_normal((256, 4)).astype("float32"),
    )
)
dataset = data.repeat().shuffle(256, seed=0).batch(8)
w1 = tf.Variable(tf.random.normal([16, 32], seed=1))
w2 = tf.Variable(tf.random.normal([32, 4], seed=2))
variables = [w1, w2]


@tf.function
def training_step(x, y, first_batch):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2) - y) ** 2)
    tape = hvd.DistributedGradientTape(tape)
    grads = tape.gradient(loss, variables)
    for v, g in zip(variables, grads, strict=True):
        v.assign_sub(0.01 * g)
    if first_batch:
        hvd.broadcast_variables(variables, root_rank=0)
    return loss


lens = handle.lens
seen = []
for batch, (x, y) in enumerate(dataset.take(steps)):
    training_step(x, y, batch == 0)
    f = lens.forecast
    ep = None if f is None else f.epoch
    seen.append(
        [lens.steps, None if f is None else f.step, None if ep is None else ep.epoch_end_step]
    )
handle.close()
print(
    "RESULT "
    + json.dumps(
        {
            "rank": hvd.rank(),
            "steps": lens.steps,
            "steps_per_epoch": lens.steps_per_epoch,
            "total_steps": lens.total_steps,
            "seen": seen,
            "notices": notices,
            "disabled": lens.disabled,
        }
    ),
    flush=True,
)
