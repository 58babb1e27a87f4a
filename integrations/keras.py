"""Keras adapter: ``LensCallback`` records the steps (and, with Horovod, every collective).

::

    from ailens.integrations.keras import LensCallback
    model.fit(x, y, epochs=3, callbacks=[LensCallback(run_dir="runs/x")])

Works with tf-keras (``TF_USE_LEGACY_KERAS=1``, which ``horovod.tensorflow.keras`` needs) and
with Keras 3. The base class is tf-keras' ``Callback`` when ``TF_USE_LEGACY_KERAS`` is set or
``tf_keras`` is already imported (Keras 3 accepts such a callback too), else Keras 3's: import
this module after your Keras.

What the callback does:

- ``on_train_begin`` builds the Lens: rank and world size from ``horovod.tensorflow`` when it
  is imported and initialised, else from the model's ``tf.distribute`` strategy, else from the
  launcher's environment; total steps = epochs x steps per epoch when Keras knows them.
- ``on_train_batch_end`` marks a step boundary (one per ``train_function`` call, so one per
  ``steps_per_execution`` batches) and sets ``model.stop_training`` once ``lens.should_stop``
  (``early_stop=True``): every rank stops at the same step.
- ``on_train_end`` closes the Lens (collective on every rank) and detaches Horovod.

Collectives:

- ``horovod.tensorflow.keras``: the callback attaches ``ailens.integrations.horovod``, so every
  allreduce of ``hvd.DistributedOptimizer``, the broadcast of
  ``BroadcastGlobalVariablesCallback`` and the allreduces of ``MetricAverageCallback`` are
  recorded at run time with their bytes (see that module). Put the callback in the *first*
  ``fit``: graphs Keras traced before ailens attached carry no recording hooks (a warning
  says so when the first step recorded no collective).
- ``tf.distribute.MultiWorkerMirroredStrategy``: every all-reduce that goes through the
  strategy (``ReplicaContext.all_reduce``, ``extended.batch_reduce_to`` / ``reduce_to``: the
  optimizer's gradient all-reduce, one batched call per step) is recorded as one
  ``allreduce`` with the summed bytes of the local tensors, by the same run-time graph hooks
  as for Horovod. The callback wraps those three methods on the strategy's ``extended``
  object (``_replica_ctx_all_reduce`` is private TF API: the funnel ``all_reduce`` uses without
  ``merge_call``) and removes the wrappers at train end. Not seen: collectives TF issues
  without those calls (``SyncOnRead`` variable reads, ``tf.raw_ops`` collectives), and how
  TF splits one batched all-reduce into packs. The ranks exchange through the strategy's own
  all-reduce (not recorded).
- plain Keras (one process): steps and step times only.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from ailens import Lens, LensConfig

from .horovod import _active, _Recorder

log = logging.getLogger("ailens")

__all__ = ["LensCallback"]


def _callback_base() -> type:
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")
    if legacy or "tf_keras" in sys.modules:
        import tf_keras

        return tf_keras.callbacks.Callback
    try:
        import keras

        return keras.callbacks.Callback
    except ImportError:
        import tf_keras

        return tf_keras.callbacks.Callback


class LensCallback(_callback_base()):
    """A Keras callback driving a Lens; ``config`` are LensConfig fields. ``.lens`` is the
    Lens once training began (None before)."""

    def __init__(self, **config: Any) -> None:
        super().__init__()
        LensConfig(**config)  # a misspelt or invalid setting fails here, at the user's line
        self._config = config
        self.lens: Lens | None = None
        self._horovod = None
        self._strategy_rec: _StrategyRecorder | None = None
        # tf-keras: logs may stay tensors for us (we never read them), so this callback does
        # not force a device-to-host sync of the logs after every batch.
        self._supports_tf_logs = True

    def on_train_begin(self, logs=None) -> None:
        try:
            self._start()
        except Exception as e:  # noqa: BLE001 - never break training
            log.warning("ailens: LensCallback could not start (%s: %s); training goes on "
                        "without it", type(e).__name__, e)
            if self.lens is None:
                self.lens = Lens(rank=0, world_size=1, **{**self._config, "enabled": False})
            else:
                self.lens._fault(e)

    def on_train_batch_end(self, batch, logs=None) -> None:
        lens = self.lens
        if lens is None:
            return
        try:
            lens.step_end()
            if lens.steps == 1 and self._horovod is not None and lens.ticks == 0:
                log.warning("ailens: the first step recorded no Horovod collective; was the model "
                            "trained before LensCallback attached? Its graph has no hooks.")
        except Exception as e:  # noqa: BLE001
            lens._fault(e)
        if lens.should_stop:
            self.model.stop_training = True

    def on_train_end(self, logs=None) -> None:
        if self.lens is None:
            return
        try:
            if self._horovod is not None:
                self._horovod.close()
            else:
                self.lens.close()
        except Exception as e:  # noqa: BLE001
            self.lens._fault(e)
        if self._strategy_rec is not None:
            self._strategy_rec.detach()

    # ------------------------------------------------------------ setup

    def _start(self) -> None:
        config = dict(self._config)
        params = self.params or {}
        if params.get("epochs") and params.get("steps") and "total_steps" not in config:
            config["total_steps"] = int(params["epochs"]) * int(params["steps"])
        hvd = _horovod_tensorflow()
        if hvd is not None:
            from . import horovod as ailens_hvd

            config.setdefault("framework", "keras+horovod")
            self._horovod = ailens_hvd.attach(hvd, **config)
            self.lens = self._horovod.lens
            return
        strategy, rank, world = _multi_worker(self.model)
        if strategy is None:
            config.setdefault("framework", "keras")
            self.lens = Lens(**config)
            return
        config.setdefault("framework", "keras+tf.distribute")
        config.setdefault("backend", "tf.distribute")
        rec = _StrategyRecorder(strategy)
        self.lens = rec.lens = Lens(rank=rank, world_size=world, exchange=rec.exchange, **config)
        if self.lens.config.enabled:
            rec.attach()
            self._strategy_rec = rec


def _horovod_tensorflow():
    """horovod.tensorflow when the script imported and initialised it, else None."""
    hvd = sys.modules.get("horovod.tensorflow")
    try:
        return hvd if hvd is not None and hvd.is_initialized() else None
    except Exception:  # noqa: BLE001 - an old Horovod without is_initialized
        return None


def _multi_worker(model) -> tuple[Any, int | None, int | None]:
    """(strategy, rank, world) for a multi-worker tf.distribute strategy, else (None, None,
    None): rank and world then come from the launcher's environment."""
    strategy = getattr(model, "distribute_strategy", None)
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or "tensorflow" not in sys.modules:
        return None, None, None
    spec = resolver.cluster_spec().as_dict()
    tasks = [(t, i) for t in ("chief", "worker") for i in range(len(spec.get(t, [])))]
    if len(tasks) <= 1 or (resolver.task_type, resolver.task_id) not in tasks:
        return None, None, None
    return strategy, tasks.index((resolver.task_type, resolver.task_id)), len(tasks)


class _StrategyRecorder(_Recorder):
    """Records the all-reduces of one tf.distribute strategy and exchanges through it."""

    # The methods of strategy.extended every strategy all-reduce goes through; the value
    # reduced is their second argument.
    _FUNNELS = ("_replica_ctx_all_reduce", "batch_reduce_to", "reduce_to")

    def __init__(self, strategy) -> None:
        super().__init__("tf.distribute")
        self.strategy = strategy
        self._ext = strategy.extended
        self._patched: list[str] = []

    def attach(self) -> None:
        import tensorflow as tf

        try:
            for name in self._FUNNELS:
                real = getattr(self._ext, name, None)
                if real is not None:
                    setattr(self._ext, name, self._wrap(tf, name, real))
                    self._patched.append(name)
            _active[self.key] = self
        except Exception as e:  # noqa: BLE001
            self.detach()
            self.lens._fault(e)

    def detach(self) -> None:
        for name in self._patched:
            if name in vars(self._ext):
                delattr(self._ext, name)  # the class's own method shows through again
        self._patched = []
        if _active.get(self.key) is self:
            del _active[self.key]

    def _wrap(self, tf, name: str, real):
        def wrapper(*args, **kwargs):
            nested = getattr(self._local, "depth", 0)
            if self._bypass or nested or _active.get(self.key) is not self:
                return real(*args, **kwargs)
            try:
                payload = self._local_tensors(tf, name, args, kwargs)
            except Exception:  # noqa: BLE001 - an unexpected signature: the same on every rank
                return real(*args, **kwargs)
            self._local.depth = 1
            try:
                return self._tf_call(tf, real, "allreduce", payload, args, kwargs)
            finally:
                self._local.depth = 0

        return tf.autograph.experimental.do_not_convert(wrapper)

    def _local_tensors(self, tf, name: str, args, kwargs) -> list:
        """This worker's part of the value being reduced, as a list of tensors."""
        if name == "batch_reduce_to":
            pairs = args[1] if len(args) > 1 else kwargs["value_destination_pairs"]
            values = [v for v, _ in pairs]
        else:
            values = [args[1] if len(args) > 1 else kwargs["value"]]
        out = []
        for v in tf.nest.flatten(values, expand_composites=False):
            local = self.strategy.experimental_local_results(v)[0]
            if isinstance(local, tf.IndexedSlices):
                out += [local.values, local.indices]
            else:
                out.append(local)
        return out

    def exchange(self, a):
        """Cross-worker elementwise SUM through the strategy's own all-reduce (not recorded):
        each worker's first local replica contributes the array, the others zeros."""
        import numpy as np
        import tensorflow as tf

        strategy = self.strategy
        local = max(len(getattr(strategy.extended, "worker_devices", ())), 1)
        value = tf.constant(np.asarray(a, dtype=np.int64))

        def contribute():
            ctx = tf.distribute.get_replica_context()
            first = ctx.replica_id_in_sync_group % local == 0
            return value if first else tf.zeros_like(value)

        self._bypass = True
        try:
            per_replica = strategy.run(contribute)
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None).numpy()
        finally:
            self._bypass = False
