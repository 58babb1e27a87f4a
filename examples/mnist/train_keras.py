"""One rank of the mnist example: tf-keras + horovod.tensorflow.keras + LensCallback
(``--framework keras``, launched by ./run with horovodrun --gloo), or plain Keras in one
process (``--framework keras-plain``); see examples/README.md.

Like a real job it validates on the held-out split at each epoch end (``validation_data``)
and rank 0 checkpoints the weights every ``--checkpoint-every`` steps (ModelCheckpoint)."""

import os
import sys
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # horovod.tensorflow.keras needs tf-keras
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tensorflow as tf  # noqa: E402
from common import (  # noqa: E402
    StepTimer,
    keras_model,
    params_digest,
    parse_args,
    threads_per_rank,
)
from mnist_data import load, shard  # noqa: E402

args = parse_args("keras")
if args.framework == "keras-plain":
    hvd, rank, size = None, 0, 1
else:
    import horovod.tensorflow.keras as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
tf.config.threading.set_intra_op_parallelism_threads(args.threads or threads_per_rank(size))
tf.config.threading.set_inter_op_parallelism_threads(1)
keras = tf.keras
keras.utils.set_random_seed(0)

x_train, y_train, x_test, y_test = load(args.idx_dir)
x_train, y_train = shard(x_train, y_train, rank, size)
x_test, y_test = shard(x_test, y_test, rank, size)

model = keras_model(keras, x_train.shape[1:])
opt = keras.optimizers.SGD(args.lr * size, momentum=0.9)
if hvd is not None:
    opt = hvd.DistributedOptimizer(opt)
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
callbacks = [Timer(timer)]
if hvd is not None:
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                 hvd.callbacks.MetricAverageCallback(), *callbacks]
if args.checkpoint_every and rank == 0:
    callbacks.append(keras.callbacks.ModelCheckpoint(
        str(Path(args.run_dir) / "checkpoint.weights.h5"), save_weights_only=True,
        save_freq=args.checkpoint_every))
if not args.no_lens:
    from ailens.integrations.keras import LensCallback

    callbacks.append(LensCallback(run_dir=args.run_dir, early_stop=args.early_stop,
                                  progress_every=args.progress_every))  # the one line
validation = {}
if args.eval_every_epochs:
    validation = dict(validation_data=(x_test, y_test), validation_freq=args.eval_every_epochs)
model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs, callbacks=callbacks,
          verbose=2 if rank == 0 else 0, **validation)

_, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
print(f"PARAMS rank {rank} sha256 {params_digest(model.get_weights())}", flush=True)
if rank == 0:
    print(timer.line(), flush=True)
    print(f"ACCURACY test={accuracy:.4f}", flush=True)
