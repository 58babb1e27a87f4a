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
  steps per epoch, epochs, ``validation_freq`` when ``fit`` validates, and the validation's
  batches: ``validation_steps``, else the validation data's size over its batch size, so an
  evaluation not run yet is priced from the step time); the run facts (threads, parameter
  count, batch size) from TF and the model. ``validation_freq``, ``validation_steps``, the
  validation data and ``batch_size`` are read from ``fit``'s arguments when its frame is
  reachable (Keras does not pass them to callbacks).
- ``on_train_batch_end`` marks a step boundary (one per ``train_function`` call, so one per
  ``steps_per_execution`` batches), sets ``model.stop_training`` once ``lens.should_stop``
  (``early_stop=True``): every rank stops at the same step. With ``verbose=1`` it adds the
  forecast to the batch logs, so Keras' own progress bar shows it: ``ailens_total_s``
  (predicted total run time, s) and ``ailens_eta_s`` (time still to go, s), once predicted,
  read at every step end (``lens.forecast`` recomputes at most every 1 s or a quarter
  more steps).
- ``on_epoch_end`` adds ``ailens_total_s``, ``ailens_eta_s`` and ``ailens_eta_pm_s`` (± half
  the 95 % interval) to the epoch's logs, once predicted: ``History.history`` keeps them,
  and so do the callbacks after this one (``TensorBoard``, ``CSVLogger``, W&B, MLflow): put
  ``LensCallback`` first in ``callbacks``.
- validation during ``fit`` (``on_test_begin``/``on_test_end``) is an ``"eval"`` section.
- ``on_train_end`` closes the Lens (collective on every rank) and detaches Horovod.

Collectives:

- ``horovod.tensorflow.keras``: the callback attaches ``ailens.integrations.horovod``, so every
  allreduce of ``hvd.DistributedOptimizer``, the broadcast of
  ``BroadcastGlobalVariablesCallback`` and the allreduces of ``MetricAverageCallback`` are
  recorded at run time with their bytes. Inside Keras' graphs each collective is timed by the
  graph itself (``tf.timestamp``, no Python call per collective) and read every 32 batches
  (``ailens.integrations.tfgraph``). Put the callback in the *first* ``fit``: graphs Keras
  traced before ailens attached carry no recording hooks (a notice says so when the first
  step recorded no collective).
- ``tf.distribute.MultiWorkerMirroredStrategy``: every all-reduce that goes through the
  strategy (the optimizer's gradient all-reduce: one batched call per step) is recorded as
  one ``allreduce`` with the summed bytes of the local tensors, by the same run-time graph
  hooks (see ``ailens.integrations._tfdistribute``); the wrappers go at train end. The ranks
  exchange through the strategy's own all-reduce.
- plain Keras (one process): steps and step times only.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from ailens import Lens, LensConfig

from . import _tfdistribute, tfgraph
from ._base import Attachment, disabled_lens, goes_on_without, open_lens

__all__ = ["LensCallback"]

PROGBAR_KEYS = ("ailens_total_s", "ailens_eta_s")
# In the epoch logs (History, TensorBoard, ...): the progress bar's and the interval's half.
EPOCH_KEYS = (*PROGBAR_KEYS, "ailens_eta_pm_s")


def _callback_base() -> type:
    legacy = os.environ.get("TF_USE_LEGACY_KERAS", "").strip().lower() in ("1", "true", "yes")
    if not legacy and "tf_keras" not in sys.modules:
        try:
            import keras

            return keras.callbacks.Callback
        except ImportError:
            pass
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
        self._shown: dict[str, float] = {}
        self._in_fit = False
        # tf-keras: logs may stay tensors for us (we only add to them), so this callback
        # does not force a device-to-host sync of the logs after every batch.
        self._supports_tf_logs = True

    def on_train_begin(self, logs=None) -> None:
        self._in_fit = True
        try:
            self._start(sys._getframe(1))
        except Exception as e:  # noqa: BLE001 - never break training
            goes_on_without("LensCallback could not start", e)
            if self.lens is None:
                self._att = Attachment(disabled_lens(self._config))
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
            self._show_forecast(logs)
        if lens.should_stop:
            self.model.stop_training = True

    def _show_forecast(self, logs: dict) -> None:
        # Every step end, as the other adapters: lens.forecast is the cache (it recomputes
        # at most every 1 s or after a quarter more steps).
        f = self.lens.forecast
        if f is not None and f.predicted_total_s is not None:
            self._shown = {PROGBAR_KEYS[0]: f.predicted_total_s, PROGBAR_KEYS[1]: f.eta_s}
        logs.update(self._shown)

    def on_epoch_end(self, epoch, logs=None) -> None:
        lens = self.lens
        if logs is None or lens is None or lens.disabled is not None or lens.rank != 0:
            return
        try:
            f = lens.forecast
            if f is None or f.predicted_total_s is None:
                return
            lo, hi = f.interval_s
            logs.update(zip(EPOCH_KEYS, (f.predicted_total_s, f.eta_s, (hi - lo) / 2), strict=True))
        except Exception as e:  # noqa: BLE001 - never break training
            lens.disable(e)

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
        strategy, rank, world = _tfdistribute.multi_worker(self.model)
        if hvd is not None:
            from . import horovod as ailens_hvd

            config.setdefault("framework", "keras+horovod")
            self._att = ailens_hvd.attach(hvd, steps="manual", meta=meta, **config)
            self._hvd = True
        elif strategy is not None:
            config.setdefault("framework", "keras+tf.distribute")
            config.setdefault("backend", "tf.distribute")
            self._att = _tfdistribute.StrategyAttachment(strategy, rank, world, meta, config)
        else:
            config.setdefault("framework", "keras")
            self._att = Attachment(open_lens(meta=meta, **config))
        self.lens = lens = self._att.lens
        validates = fit.get("validates")
        freq = fit.get("validation_freq") if validates else None
        lens.set_schedule(
            total_steps=config.get("total_steps"),
            steps_per_epoch=params.get("steps"),
            epochs=params.get("epochs"),
            eval_every_epochs=freq if isinstance(freq, int) else None,
            # tf-keras: a list of the epochs after which to validate (1-based).
            eval_at_epochs=list(freq) if isinstance(freq, (list, tuple)) else None,
            eval_steps=fit.get("validation_batches") if validates else None,
        )
        self._progbar = params.get("verbose") == 1 and _progbar_shows_values(caller)


def _fit_arguments(frame) -> dict:
    """``validation_freq``, whether ``fit`` validates, and ``batch_size``, from the arguments of
    the ``Model.fit`` call that is running (its frame is a few above ``on_train_begin``)."""
    for _ in range(6):
        if frame is None:
            break
        args = frame.f_locals
        if frame.f_code.co_name == "fit" and "validation_freq" in args:
            split = args.get("validation_split") or 0
            batch = args.get("batch_size")
            batch = batch if isinstance(batch, int) else None
            return {
                "validation_freq": args.get("validation_freq"),
                "validates": args.get("validation_data") is not None or split > 0,
                "batch_size": batch,
                "validation_batches": _validation_batches(args, batch),
            }
        frame = frame.f_back
    return {}


def _validation_batches(args: dict, batch_size: int | None) -> int | None:
    """Batches of one validation: ``validation_steps``, else a ``tf.data`` dataset's
    cardinality or a ``PyDataset``'s length, else the arrays' samples over the validation
    batch size (Keras' default 32). By the time callbacks start, ``fit`` has already split
    ``validation_split`` off into ``validation_data``. None when not known."""
    steps = args.get("validation_steps")
    if isinstance(steps, int) and steps > 0:
        return steps
    data = args.get("validation_data")
    if data is None:
        return None
    card = getattr(data, "cardinality", None)
    if callable(card):  # tf.data: -1 infinite, -2 unknown
        n = int(card())
        return n if n > 0 else None
    if not isinstance(data, (tuple, list)):
        try:
            return len(data) or None  # keras.utils.PyDataset, Sequence: batches
        except TypeError:
            return None
    first = data[0] if data else None
    while isinstance(first, (tuple, list, dict)) and first:  # several inputs
        first = next(iter(first.values())) if isinstance(first, dict) else first[0]
    samples = getattr(first, "shape", None)
    if not samples:
        return None
    per = args.get("validation_batch_size") or batch_size or 32
    return -(-int(samples[0]) // int(per))


def _progbar_shows_values(caller) -> bool:
    """Whether Keras' progress bar shows our logs as they are. Keras 3's shows every value
    as is; tf-keras' averages all but its "stateful metrics", so ours join that set (on the
    ProgbarLogger of the CallbackList calling us). Otherwise we add nothing to the logs."""
    progbar = getattr(caller.f_locals.get("self"), "_progbar", None)
    if hasattr(progbar, "stateful_metrics"):  # tf-keras (Keras 3's has none)
        progbar.stateful_metrics = set(progbar.stateful_metrics) | set(PROGBAR_KEYS)
    return progbar is not None


def _run_facts(model, batch_size: int | None) -> dict:
    import tensorflow as tf

    base = _callback_base().__module__.split(".")[0]
    facts: dict[str, Any] = {
        "framework_version": f"{base} {sys.modules[base].__version__}, tensorflow {tf.__version__}",
        **tfgraph.tf_threads(tf),
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
