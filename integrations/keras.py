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
  launcher's environment. The schedule comes from what Keras knows (``lens.set_schedule``:
  steps per epoch, epochs, and ``validation_freq`` when ``fit`` validates); the run facts
  (threads, parameter count, batch size) from TF and the model. ``validation_freq`` and
  ``batch_size`` are read from ``fit``'s arguments when its frame is reachable (Keras does
  not pass them to callbacks).
- ``on_train_batch_end`` marks a step boundary (one per ``train_function`` call, so one per
  ``steps_per_execution`` batches), sets ``model.stop_training`` once ``lens.should_stop``
  (``early_stop=True``): every rank stops at the same step. With ``verbose=1`` it adds the
  forecast to the batch logs, so Keras' own progress bar shows it: ``ailens_total_s``
  (predicted total run time) and ``ailens_eta_s`` (time still to go), once predicted.
- validation during ``fit`` (``on_test_begin``/``on_test_end``) is an ``"eval"`` section.
- ``on_train_end`` closes the Lens (collective on every rank) and detaches Horovod.

Collectives:

- ``horovod.tensorflow.keras``: the callback attaches ``ailens.integrations.horovod``, so every
  allreduce of ``hvd.DistributedOptimizer``, the broadcast of
  ``BroadcastGlobalVariablesCallback`` and the allreduces of ``MetricAverageCallback`` are
  recorded at run time with their bytes. Put the callback in the *first* ``fit``: graphs Keras
  traced before ailens attached carry no recording hooks (a notice says so when the first
  step recorded no collective).
- ``tf.distribute.MultiWorkerMirroredStrategy``: every all-reduce that goes through the
  strategy (``ReplicaContext.all_reduce``, ``extended.batch_reduce_to`` / ``reduce_to``: the
  optimizer's gradient all-reduce, one batched call per step) is recorded as one
  ``allreduce`` with the summed bytes of the local tensors, by the same run-time graph hooks
  (``ailens.integrations._tfhooks``). The callback wraps those three methods on the strategy's
  ``extended`` object (``_replica_ctx_all_reduce`` is private TF API: the funnel
  ``all_reduce`` uses without ``merge_call``) and removes the wrappers at train end. Not
  seen: collectives TF issues without those calls (``SyncOnRead`` variable reads,
  ``tf.raw_ops`` collectives). The ranks exchange through the strategy's own all-reduce.
- plain Keras (one process): steps and step times only.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import numpy as np

from ailens import Lens, LensConfig

from . import _tfhooks
from ._base import Attachment, log, quiet

__all__ = ["LensCallback"]

PROGBAR_KEYS = ("ailens_total_s", "ailens_eta_s")


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
        self._att: Attachment | None = None
        self._hvd = False
        self._progbar = False
        self._in_fit = False
        # tf-keras: logs may stay tensors for us (we only add to them), so this callback
        # does not force a device-to-host sync of the logs after every batch.
        self._supports_tf_logs = True

    def on_train_begin(self, logs=None) -> None:
        self._in_fit = True
        try:
            self._start(sys._getframe(1))
        except Exception as e:  # noqa: BLE001 - never break training
            log.warning(
                "ailens: LensCallback could not start (%s: %s); training goes on without it",
                type(e).__name__,
                e,
            )
            if self.lens is None:
                self._att = Attachment(
                    Lens(rank=0, world_size=1, **{**self._config, "enabled": False})
                )
                self.lens = self._att.lens
            else:
                self.lens.disable(e)

    def on_train_batch_end(self, batch, logs=None) -> None:
        att, lens = self._att, self.lens
        if att is None:
            return
        att.step_end()
        if self._hvd and lens.steps == 1 and lens.ticks == 0:
            att.notice(
                "ailens: the first step recorded no Horovod collective; was the model "
                "trained before LensCallback attached? Its graph has no hooks.",
                level=logging.WARNING,
            )
        if self._progbar and logs is not None:
            f = lens.forecast
            if f is not None and f.predicted_total_s is not None:
                logs[PROGBAR_KEYS[0]] = round(f.predicted_total_s, 1)
                logs[PROGBAR_KEYS[1]] = round(f.eta_s, 1)
        if lens.should_stop:
            self.model.stop_training = True

    def on_test_begin(self, logs=None) -> None:
        if self._in_fit and self.lens is not None:
            self.lens.section_begin("eval")

    def on_test_end(self, logs=None) -> None:
        if self._in_fit and self.lens is not None:
            self.lens.section_end()

    def on_train_end(self, logs=None) -> None:
        self._in_fit = False
        if self._att is not None:
            self._att.close()

    # ------------------------------------------------------------ setup

    def _start(self, caller) -> None:
        config, params = dict(self._config), self.params or {}
        fit = _fit_arguments(caller)
        meta = _run_facts(self.model, fit.get("batch_size"))
        hvd = _horovod_tensorflow()
        strategy, rank, world = _multi_worker(self.model)
        if hvd is not None:
            from . import horovod as ailens_hvd

            config.setdefault("framework", "keras+horovod")
            self._att = ailens_hvd.attach(hvd, steps="manual", meta=meta, **config)
            self._hvd = True
        elif strategy is not None:
            config.setdefault("framework", "keras+tf.distribute")
            config.setdefault("backend", "tf.distribute")
            self._att = _StrategyAttachment(strategy, rank, world, meta, config)
        else:
            config.setdefault("framework", "keras")
            self._att = Attachment(Lens(meta=meta, **config))
        self.lens = lens = self._att.lens
        freq = fit.get("validation_freq") if fit.get("validates") else None
        lens.set_schedule(
            total_steps=config.get("total_steps"),
            steps_per_epoch=params.get("steps"),
            epochs=params.get("epochs"),
            eval_every_epochs=freq if isinstance(freq, int) else None,
        )
        self._progbar = params.get("verbose") == 1 and _progbar_shows_values(caller)


def _fit_arguments(caller) -> dict:
    """``validation_freq``, whether ``fit`` validates, and ``batch_size``, from the arguments of
    the ``Model.fit`` call that is running (its frame is a few above ``on_train_begin``)."""
    frame = caller
    for _ in range(6):
        if frame is None:
            break
        args = frame.f_locals
        if frame.f_code.co_name == "fit" and "validation_freq" in args:
            split = args.get("validation_split") or 0
            batch = args.get("batch_size")
            return {
                "validation_freq": args.get("validation_freq"),
                "validates": args.get("validation_data") is not None or split > 0,
                "batch_size": batch if isinstance(batch, int) else None,
            }
        frame = frame.f_back
    return {}


def _progbar_shows_values(caller) -> bool:
    """Whether Keras' progress bar shows our logs as they are. Keras 3's shows every value
    as is; tf-keras' averages all but its "stateful metrics", so ours join that set (on the
    ProgbarLogger of the CallbackList calling us). Otherwise we add nothing to the logs."""
    progbar = getattr(caller.f_locals.get("self"), "_progbar", None)
    if progbar is None:
        return False
    if not hasattr(progbar, "stateful_metrics"):
        return True  # Keras 3
    progbar.stateful_metrics = set(progbar.stateful_metrics) | set(PROGBAR_KEYS)
    return True


def _run_facts(model, batch_size: int | None) -> dict:
    import tensorflow as tf

    base = _callback_base().__module__.split(".")[0]
    facts: dict[str, Any] = {
        "framework_version": f"{base} {sys.modules[base].__version__}, tensorflow {tf.__version__}",
        **_tfhooks.tf_threads(tf),
    }
    if batch_size:
        facts["batch_size"] = batch_size
    try:
        facts["param_count"] = int(model.count_params())
    except Exception:  # noqa: BLE001 - a model not built yet: unknown
        pass
    return facts


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


class _StrategyAttachment(Attachment):
    """Records the all-reduces of one tf.distribute strategy and exchanges through it."""

    # The methods of strategy.extended every strategy all-reduce goes through; the value
    # reduced is their second argument.
    FUNNELS = ("_replica_ctx_all_reduce", "batch_reduce_to", "reduce_to")

    def __init__(self, strategy, rank: int, world: int, meta: dict, config: dict) -> None:
        import tensorflow as tf

        self.strategy = strategy
        lens = Lens(rank=rank, world_size=world, exchange=self._exchange, meta=meta, **config)
        super().__init__(lens)
        if not lens.config.enabled:
            return
        try:
            ext = strategy.extended
            for name in self.FUNNELS:
                real = getattr(ext, name, None)
                if real is not None:
                    payload = lambda a, k, name=name: (self._local_tensors(tf, name, a, k), None)  # noqa: E731
                    self.patches.set(
                        ext, name, _tfhooks.wrap(tf, "tf.distribute", real, "allreduce", payload)
                    )
            _tfhooks.activate("tf.distribute", self)
        except Exception as e:  # noqa: BLE001
            self.patches.restore()
            lens.disable(e)

    def _local_tensors(self, tf, name: str, args, kwargs) -> list:
        """This worker's part of the value being reduced, as a list of tensors."""
        if name == "batch_reduce_to":
            pairs = args[1] if len(args) > 1 else kwargs["value_destination_pairs"]
            values = [v for v, _ in pairs]
        else:  # (reduce_op, value, ...)
            values = [args[1] if len(args) > 1 else kwargs["value"]]
        out = []
        for v in tf.nest.flatten(values, expand_composites=False):
            local = self.strategy.experimental_local_results(v)[0]
            out += [local.values, local.indices] if isinstance(local, tf.IndexedSlices) else [local]
        return out

    def _exchange(self, a):
        """Cross-worker elementwise SUM through the strategy's own all-reduce (not recorded):
        each worker's first local replica contributes the array, the others zeros."""
        import tensorflow as tf

        strategy = self.strategy
        local = max(len(getattr(strategy.extended, "worker_devices", ())), 1)
        value = tf.constant(np.asarray(a, dtype=np.int64))

        def contribute():
            ctx = tf.distribute.get_replica_context()
            return value if ctx.replica_id_in_sync_group % local == 0 else tf.zeros_like(value)

        with quiet():
            per_replica = strategy.run(contribute)
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None).numpy()
