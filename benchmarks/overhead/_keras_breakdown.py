"""Where ailens' time goes in the keras_hvd case, per training step (not an A/B: a helper to
explain ``added_us``). Two ranks fit the mnist model with ``LensCallback`` for ``--steps``
batches (``--no-lens``: without it, for the step time); after ``--warmup`` batches, wall
time inside ailens' Python entry points is summed,
and rank 0 prints one ``BREAKDOWN {json}`` line of microseconds per step::

    horovodrun --gloo -np 2 -H localhost:2 python benchmarks/overhead/_keras_breakdown.py

``callback``: all of ``LensCallback.on_train_batch_end``; inside it ``lens_step_end``
(``Lens.step_end``, which includes ``exchange``: the cross-rank exchange through Horovod,
waiting for the other rank included) and ``collect`` (reading the graphs' slates and recording
their collectives). In-graph costs (timestamps, slate writes) are not seen here: the A/B shows
them in the step time.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from _keras_ab import make_dataset, make_model  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--lens-config", type=json.loads, default={})
    p.add_argument("--no-lens", action="store_true", help="the same fit without LensCallback")
    args = p.parse_args()

    import horovod.tensorflow as hvd
    import horovod.tensorflow.keras as hvd_keras
    import tensorflow as tf
    from ailens.integrations import tfgraph
    from ailens.integrations.horovod import HorovodLens
    from ailens.integrations.keras import LensCallback

    from ailens import Lens

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras = tf.keras
    spent: dict[str, int] = {}
    on = [False]

    def timed(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                if on[0]:
                    spent[name] = spent.get(name, 0) + time.perf_counter_ns() - t

        return wrapper

    tfgraph.collect = timed("collect", tfgraph.collect)
    Lens.step_end = timed("lens_step_end", Lens.step_end)
    HorovodLens._exchange = timed("exchange", HorovodLens._exchange)
    LensCallback.on_train_batch_end = timed("callback", LensCallback.on_train_batch_end)

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == args.warmup - 1:
                on[0], self.t0 = True, time.perf_counter()

        def on_train_end(self, logs=None):  # before LensCallback's (it closes the Lens)
            on[0], self.seconds = False, time.perf_counter() - self.t0

    run_dir = hvd.broadcast_object(tempfile.mkdtemp() if hvd.rank() == 0 else None, 0)
    model = make_model(keras)
    model.compile(
        optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.02)),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    clock = Clock()
    lens_cb = LensCallback(run_dir=run_dir, **args.lens_config)
    callbacks = [hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0), clock]
    callbacks += [] if args.no_lens else [lens_cb]
    model.fit(make_dataset(tf, 32, 1 + hvd.rank()), steps_per_epoch=args.steps, epochs=1,
              callbacks=callbacks, verbose=0)  # fmt: skip
    steps = args.steps - args.warmup
    if hvd.rank() == 0:
        line = {k: round(v / steps / 1e3, 1) for k, v in sorted(spent.items())}
        line.update(step_ms=round(clock.seconds / steps * 1e3, 3), steps=steps,
                    ticks_per_step=round(lens_cb.lens.ticks / lens_cb.lens.steps, 2)
                    if lens_cb.lens else None, no_lens=args.no_lens,
                    lens_config=args.lens_config, loadavg=list(os.getloadavg()))  # fmt: skip
        print("BREAKDOWN " + json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
