"""The Keras cases' shared body: two identical MNIST-sized models train side by side in one job,
each in its own ``model.fit`` on its own thread, one plain, one with ailens' one line
(``callbacks=[LensCallback(...)]``), in alternating blocks of batches (``_ab.measure``).

Only one fit runs at a time: a gate callback (last in each fit's list) parks its fit after
every block and wakes it for the next. So each block is the real ``fit`` loop, callbacks
included, and the Lens lives across all lensed blocks (one ``on_train_begin``, one
``on_train_end``), as in a real run. The gate overrides ``on_train_batch_end`` in both fits:
Keras dispatches the batch hooks in the plain blocks too, so a plain fit with no batch-level
callback at all (Keras then skips that dispatch) is not what the plain blocks measure.

With Horovod the plain blocks run with the original Horovod functions (``_ab.Unpatched``), and
each model has its own ``hvd.DistributedOptimizer`` name: Horovod caches its gradient
all-reduce function by those arguments, and the two models must not share a traced graph.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
from pathlib import Path

os.environ["TF_USE_LEGACY_KERAS"] = "1"  # horovod.tensorflow.keras needs tf-keras

import _attribution  # noqa: E402
from _ab import Unpatched, add_common_args, emit, measure  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "mnist"))
from common import keras_model as make_model  # noqa: E402 - the example's own model

WAIT_S = 600  # a block that takes longer than this means a fit thread died


def parse_args(doc: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_common_args(p)
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    p.add_argument("--batch", type=int, default=32, help="batch per rank")
    p.add_argument("--lens-config", type=json.loads, default={}, help="LensConfig fields, JSON")
    return p.parse_args()


def make_dataset(tf, batch: int, seed: int):
    """MNIST-shaped random batches, repeated: a step costs the same whatever the pixels."""
    rng = tf.random.Generator.from_seed(seed)
    x = rng.uniform((batch * 16, 28, 28, 1))
    y = rng.uniform((batch * 16,), maxval=10, dtype=tf.int64)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat()


class FitThread:
    """``model.fit`` on its own thread, run ``n`` batches at a time by :meth:`run`."""

    def __init__(self, keras, model, dataset, callbacks: list) -> None:
        self._go, self._done = threading.Semaphore(0), threading.Semaphore(0)
        self._left, self._stop, self.error = 0, False, None
        gate = self._gate(keras)
        self._thread = threading.Thread(
            target=self._fit, args=(model, dataset, [*callbacks, gate]), daemon=True
        )
        self._thread.start()
        self._wait_done()  # parked in on_train_begin: every callback before the gate has begun

    def _gate(self, keras):
        outer = self

        class Gate(keras.callbacks.Callback):
            def __init__(self) -> None:
                super().__init__()
                self._supports_tf_logs = True  # no device-to-host copy of the logs per batch

            def on_train_begin(self, logs=None) -> None:
                outer._park(self.model)

            def on_train_batch_end(self, batch, logs=None) -> None:
                outer._left -= 1
                if outer._left == 0:
                    outer._park(self.model)

        return Gate()

    def _fit(self, model, dataset, callbacks) -> None:
        try:
            model.fit(dataset, steps_per_epoch=10**9, epochs=1, callbacks=callbacks, verbose=0)
        except BaseException as e:  # noqa: BLE001 - reported by the thread waiting on us
            self.error = e
        finally:
            self._done.release()

    def _park(self, model) -> None:
        self._done.release()
        self._go.acquire()
        if self._stop:
            model.stop_training = True

    def _wait_done(self) -> None:
        if not self._done.acquire(timeout=WAIT_S) or self.error is not None:
            raise RuntimeError(f"the fit thread failed: {self.error!r}")

    def run(self, n: int) -> None:
        """Let the fit run ``n`` more batches; returns when they are done."""
        self._left = n
        self._go.release()
        self._wait_done()

    def finish(self) -> None:
        """End the fit (its last batch, then ``on_train_end``) and wait for it."""
        self._stop = True
        self._left = 1
        self._go.release()
        self._thread.join(WAIT_S)
        if self.error is not None:
            raise RuntimeError(f"the fit thread failed: {self.error!r}")


def run_case(case: dict, args, *, horovod: bool) -> None:
    """Measure ``fit`` with and without ``LensCallback``; rank 0 prints the OVERHEAD line."""
    import tensorflow as tf

    hvd = hvd_keras = None
    if horovod:
        import horovod.tensorflow as hvd
        import horovod.tensorflow.keras as hvd_keras

        hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    keras = tf.keras
    from ailens.integrations.keras import LensCallback

    rank, size = (hvd.rank(), hvd.size()) if hvd else (0, 1)
    run_dir = tempfile.mkdtemp(prefix="ailens-overhead-") if rank == 0 else None
    if hvd:
        run_dir = hvd.broadcast_object(run_dir, root_rank=0)
    fits: dict[str, FitThread] = {}
    lens_cb = LensCallback(run_dir=run_dir, **args.lens_config)  # the one line
    for arm in ("plain", "lensed"):
        keras.utils.set_random_seed(0)
        model = make_model(keras)
        opt = keras.optimizers.SGD(0.02 * size, momentum=0.9)
        callbacks = []
        if hvd:
            opt = hvd_keras.DistributedOptimizer(opt, name=f"Distributed_{arm}")
            callbacks.append(hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0))
        model.compile(
            optimizer=opt,
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        if arm == "lensed":
            callbacks.append(lens_cb)
        fits[arm] = FitThread(keras, model, make_dataset(tf, args.batch, 1 + rank), callbacks)
    profiler = _attribution.profiler_for(args)  # after attach, before the Unpatched of its wrappers
    if profiler is not None:
        profiler.attach_handle(lens_cb._att, ("horovod",) if hvd else ())
        profiler.patch(lens_cb, "on_train_batch_end", "hooks")  # the callback's batch hook
        profiler.time_tf_reads(tf)
    unpatched = Unpatched("horovod")  # after attach (LensCallback.on_train_begin)

    def plain(n: int) -> None:
        with unpatched:
            fits["plain"].run(n)

    def sync() -> None:
        if hvd:
            with unpatched:
                hvd.allreduce(tf.constant(0.0), name="bench.sync")

    def share(n: int) -> int:
        if not hvd:
            return n
        with unpatched:
            return int(hvd.broadcast_object(n, root_rank=0))

    lensed = fits["lensed"].run
    if profiler is not None:
        lensed = profiler.count_steps(lensed)
    result = measure(plain, lensed, pairs=args.pairs, block_s=args.block_s,
                     sync=sync, share=share)  # fmt: skip
    steps = lens_cb.lens.steps
    if profiler is not None:
        profiler.read_threads()
        profiler.restore()
    with unpatched:
        fits["plain"].finish()
    fits["lensed"].finish()  # LensCallback.on_train_end closes the Lens (collective)
    lens = lens_cb.lens
    if rank == 0:
        per_step = round(lens.ticks / max(lens.steps, 1), 2)
        emit(
            case["name"],
            case["framework"],
            result,
            ranks=size,
            collectives_per_step=per_step,
            threads=args.threads,
            unpatched=len(unpatched),
            ailens_disabled=lens.disabled,
            lens_config=args.lens_config,
        )
    if profiler is not None:
        _attribution.emit(profiler, steps, rank=rank, name=case["name"],
                          added_us=round(result.added_us, 2))  # fmt: skip
    if hvd:
        hvd.shutdown()
