"""One process fits the same tiny Keras model twice from the same seed, without and with
LensCallback, and prints what ailens recorded. Run by tests/test_integration_keras.py.

argv: RUN_DIR FLAVOUR STOP_AT [VERBOSE]   (FLAVOUR: legacy = tf-keras, keras3; STOP_AT: 0 or
the step at which the test forces the Lens's stop vote, to check the callback stops training;
VERBOSE: fit's verbose for the run with the callback, default 0). Both fits validate after
every 2nd epoch. Prints one ``RESULT {json}`` line (after the progress bar, if any).
"""

import json
import os
import sys
import zlib

run_dir, flavour, stop_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
verbose = int(sys.argv[4]) if len(sys.argv) > 4 else 0
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if flavour == "legacy":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np  # noqa: E402

if flavour == "legacy":
    import tf_keras as keras
else:
    import keras

from ailens.integrations.keras import LensCallback  # noqa: E402

rng = np.random.default_rng(0)
x = rng.standard_normal((64, 16)).astype(np.float32)
y = rng.standard_normal((64, 4)).astype(np.float32)


def fit(callbacks, verbose=0):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.layers.Input((16,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(4),
        ]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    hist = model.fit(
        x,
        y,
        batch_size=8,
        epochs=3,
        shuffle=False,
        callbacks=callbacks,
        verbose=verbose,
        validation_data=(x[:16], y[:16]),
        validation_freq=2,
    )
    params = np.concatenate([w.ravel() for w in model.get_weights()]).astype(np.float32)
    global history
    history = {k: [float(v) for v in vs] for k, vs in hist.history.items()}
    return zlib.crc32(params.tobytes()), len(hist.history["loss"])


class Watch(keras.callbacks.Callback):
    """After LensCallback: what the batch logs show against the Lens's forecast then."""

    def __init__(self, lens_cb):
        super().__init__()
        self.lens_cb, self.seen = lens_cb, []

    def on_train_batch_end(self, batch, logs=None):
        f = self.lens_cb.lens.forecast
        shown = (logs or {}).get("ailens_total_s")
        self.seen.append(
            [
                self.lens_cb.lens.steps,
                None if shown is None else float(shown),
                None if f is None else f.predicted_total_s,
            ]
        )


class ForceStop(keras.callbacks.Callback):
    """Stands in for an agreed early-stop vote (the signature needs a long run)."""

    def __init__(self, lens_cb):
        super().__init__()
        self.lens_cb = lens_cb

    def on_train_batch_begin(self, batch, logs=None):
        lens = self.lens_cb.lens
        if stop_at and lens.steps >= stop_at:
            lens.session.stop_agreed = True


plain, _ = fit([])
cb = LensCallback(run_dir=run_dir)
watch = Watch(cb)
callbacks = [ForceStop(cb), cb] if stop_at else [cb, watch]
lensed, epochs_run = fit(callbacks, verbose)
lens = cb.lens
print(
    "RESULT",
    json.dumps(
        {
            "base": type(cb).__mro__[1].__module__,
            "plain": plain,
            "lensed": lensed,
            "steps": lens.steps,
            "ticks": lens.ticks,
            "total_steps": lens.online.total_steps,
            "closed": lens.closed,
            "disabled": lens.disabled,
            "framework": lens.config.framework,
            "world_size": lens.world_size,
            "epochs_run": epochs_run,
            "history": history,
            "watched": watch.seen,
        }
    ),
    flush=True,
)
