"""One rank of the mnist example: tf-keras + horovod.tensorflow.keras + LensCallback.
Launched by ./run (horovodrun --gloo); see examples/README.md."""

import os
import sys
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # horovod.tensorflow.keras needs tf-keras
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import horovod.tensorflow.keras as hvd  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import StepTimer, params_digest, parse_args, threads_per_rank  # noqa: E402
from mnist_data import load, shard  # noqa: E402

args = parse_args("keras")
hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(threads_per_rank(hvd.size()))
tf.config.threading.set_inter_op_parallelism_threads(1)
keras = tf.keras
keras.utils.set_random_seed(0)

x_train, y_train, x_test, y_test = load(args.idx_dir)
x_train, y_train = shard(x_train, y_train, hvd.rank(), hvd.size())

model = keras.Sequential([
    keras.layers.Input(x_train.shape[1:]),
    keras.layers.Conv2D(16, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Conv2D(32, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dense(64, activation="relu"),
    keras.layers.Dense(10),
])
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9))
model.compile(optimizer=opt, metrics=["accuracy"],
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Timer(keras.callbacks.Callback):
    def __init__(self, timer: StepTimer) -> None:
        super().__init__()
        self.timer = timer

    def on_epoch_begin(self, epoch, logs=None):
        self.timer.epoch_begin()

    def on_train_batch_end(self, batch, logs=None):
        self.timer.step_end()


timer = StepTimer(args.warmup)
callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
             hvd.callbacks.MetricAverageCallback(), Timer(timer)]
if not args.no_lens:
    from ailens.integrations.keras import LensCallback

    callbacks.append(LensCallback(run_dir=args.run_dir, early_stop=args.early_stop,
                                  progress_every=args.progress_every))  # the one line
model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, callbacks=callbacks,
          verbose=2 if hvd.rank() == 0 else 0)

_, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
print(f"PARAMS rank {hvd.rank()} sha256 {params_digest(model.get_weights())}", flush=True)
if hvd.rank() == 0:
    print(timer.line(), flush=True)
    print(f"ACCURACY test={accuracy:.4f}", flush=True)
