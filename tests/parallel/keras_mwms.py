"""One worker of a 2-worker tf.distribute.MultiWorkerMirroredStrategy fit with LensCallback
(tf-keras). Launched twice by tests/test_integration_keras.py with TF_CONFIG set per worker.

argv: RUN_DIR MODE (lens | nolens). Prints one ``RESULT {json}`` line.
"""

import json
import os
import sys
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

run_dir, mode = sys.argv[1], sys.argv[2]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
keras = tf.keras
keras.utils.set_random_seed(0)
with strategy.scope():
    model = keras.Sequential(
        [keras.layers.Input((16,)), keras.layers.Dense(8), keras.layers.Dense(4)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")

from ailens.integrations.keras import LensCallback  # noqa: E402

rng = np.random.default_rng(0)
x = rng.standard_normal((64, 16)).astype(np.float32)
y = rng.standard_normal((64, 4)).astype(np.float32)
cb = LensCallback(run_dir=run_dir, exchange_ticks=16)
callbacks = [cb] if mode == "lens" else []
model.fit(x, y, batch_size=16, epochs=2, shuffle=False, callbacks=callbacks, verbose=0)
params = np.concatenate([w.ravel() for w in model.get_weights()]).astype(np.float32)
checksum = zlib.crc32(params.tobytes())
if mode != "lens":
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    print("RESULT", json.dumps({"rank": task, "checksum": checksum}), flush=True)
    sys.exit(0)
lens = cb.lens
print(
    "RESULT",
    json.dumps(
        {
            "rank": lens.rank,
            "world_size": lens.world_size,
            "framework": lens.config.framework,
            "steps": lens.steps,
            "ticks": lens.ticks,
            "closed": lens.closed,
            "disabled": lens.disabled,
            "run_id": lens.meta["run_id"] if lens.disabled is None else None,
            "checksum": checksum,
        }
    ),
    flush=True,
)
