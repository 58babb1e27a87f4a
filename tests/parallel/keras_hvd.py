"""Two Horovod ranks train a tiny tf-keras model with horovod.tensorflow.keras and
LensCallback, and print per rank what ailens recorded. Launched by
tests/test_integration_keras.py under horovodrun (TF_USE_LEGACY_KERAS=1).

argv: RUN_DIR EPOCHS MODE [CONFIG_JSON [FAULT]]   (MODE: lens | nolens; CONFIG_JSON: extra
LensConfig fields; FAULT: RANK:TICK, a fault injected inside ailens). Prints one
``RESULT {json}`` line per rank, with ``python_hooks``: how many times a graph collective
called into Python.
"""

import json
import os
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import horovod.tensorflow.keras as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

run_dir, epochs, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}
fault = sys.argv[5] if len(sys.argv) > 5 else ""
hvd.init()
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
keras = tf.keras
keras.utils.set_random_seed(0)
model = keras.Sequential(
    [keras.layers.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)]
)
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")

rng = np.random.default_rng(1 + hvd.rank())
x = rng.standard_normal((64, 16)).astype(np.float32)
y = rng.standard_normal((64, 4)).astype(np.float32)
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
lens_cb = None
if mode == "lens":
    from ailens.integrations.keras import LensCallback
    from inject_fault import inject

    class InjectFault(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):  # after LensCallback's: its Lens exists
            inject(lens_cb.lens, fault)

    lens_cb = LensCallback(run_dir=run_dir, exchange_ticks=16, **extra)
    callbacks += [lens_cb, InjectFault()]
python_hooks = [0]
if mode == "lens":
    from ailens.integrations import tfgraph

    begin_hook = tfgraph._begin_hook

    def counted_begin_hook(*args):
        python_hooks[0] += 1
        return begin_hook(*args)

    tfgraph._begin_hook = counted_begin_hook
hist = model.fit(x, y, batch_size=8, epochs=epochs, shuffle=False, callbacks=callbacks, verbose=0)

params = np.concatenate([w.ravel() for w in model.get_weights()])
result = {
    "rank": hvd.rank(),
    "checksum": zlib.crc32(params.astype(np.float32).tobytes()),
    "epochs_run": len(hist.history["loss"]),
    "python_hooks": python_hooks[0],
}
if lens_cb is not None:
    lens = lens_cb.lens
    table = lens.online.table().to_dict() if lens.online else None
    import horovod.tensorflow.mpi_ops as mpi_ops

    result.update(
        ticks=lens.ticks,
        steps=lens.steps,
        disabled=lens.disabled,
        table=table,
        total_steps=lens.online.total_steps if lens.online else None,
        framework=lens.config.framework,
        closed=lens.closed,
        should_stop=lens.should_stop,
        restored=not hasattr(mpi_ops._allreduce, "__wrapped__"),
    )
print("RESULT", json.dumps(result), flush=True)
