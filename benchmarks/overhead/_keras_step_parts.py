"""LensCallback's steady per-step cost in a real Keras + Horovod fit, by part, on the thread CPU
clock (a helper to explain ``--kind attribution``, not an A/B). One process (``hvd.init()``
alone: Horovod's collectives run, with one rank), the mnist model, ``--steps`` batches; the
parts are timed after ``--warmup`` batches (inclusive times: a part includes the parts it
calls)::

    PYTHONPATH=. python benchmarks/overhead/_keras_step_parts.py --steps 1300 --warmup 300

Inside a TF process ailens's Python runs cache-cold after each step (TF's own working set
evicts it): the same path costs several times what it costs in a bare loop
(``_step_path_cost.py``)."""

from __future__ import annotations

import argparse
import os
import tempfile
import time

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from _keras_ab import make_dataset, make_model  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1300)
    p.add_argument("--warmup", type=int, default=300)
    args = p.parse_args()

    import horovod.tensorflow as hvd
    import horovod.tensorflow.keras as hvd_keras
    import tensorflow as tf
    from ailens.integrations import horovod as ailens_hvd
    from ailens.integrations import tfgraph
    from ailens.integrations.keras import LensCallback

    from ailens import Lens

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    on, spent = [False], {}

    def timed(owner, attr: str, name: str) -> None:
        fn = getattr(owner, attr)

        def wrapper(*a, **k):
            t = time.thread_time_ns()
            try:
                return fn(*a, **k)
            finally:
                if on[0]:
                    row = spent.setdefault(name, [0, 0])
                    row[0] += time.thread_time_ns() - t
                    row[1] += 1

        setattr(owner, attr, wrapper)

    for owner, attr, name in (
        (LensCallback, "on_train_batch_end", "LensCallback.on_train_batch_end"),
        (ailens_hvd.HorovodLens, "step_end", "HorovodLens.step_end"),
        (tfgraph, "step_ended", "tfgraph.step_ended (slates read)"),
        (Lens, "step_end", "Lens.step_end"),
        (Lens, "_exchange", "Lens._exchange (evaluation)"),
    ):
        timed(owner, attr, name)
    keras = tf.keras

    class Warm(keras.callbacks.Callback):
        """After LensCallback in the list: its Lens's parts exist at train begin."""

        def on_train_begin(self, logs=None):
            lens = lens_cb.lens
            timed(type(lens.recorder.buf), "log_step", "EventBuffer.log_step (the step log)")
            timed(type(lens.online), "on_step", "OnlineAnalysis.on_step")
            timed(type(lens.online), "_catch_up", "OnlineAnalysis._catch_up")
            timed(type(lens._live), "_write_forecast", "LiveOutput._write_forecast")

        def on_train_batch_begin(self, batch, logs=None):
            on[0] = batch >= args.warmup

    model = make_model(keras)
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.02)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))  # fmt: skip
    lens_cb = LensCallback(run_dir=tempfile.mkdtemp(prefix="ailens-parts-"))
    model.fit(make_dataset(tf, 32, 1), steps_per_epoch=args.steps, epochs=1,
              callbacks=[lens_cb, Warm()], verbose=0)  # fmt: skip
    n = args.steps - args.warmup
    print(f"steady steps {n}, load {os.getloadavg()[0]:.2f}: thread CPU, inclusive")
    for name, (ns, calls) in spent.items():
        print(f"  {name:34s} {calls:6d} calls {ns / max(calls, 1) / 1e3:9.1f} us/call "
              f"{ns / n / 1e3:7.1f} us/step")  # fmt: skip


if __name__ == "__main__":
    main()
