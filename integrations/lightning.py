"""PyTorch Lightning: ``LensCallback`` records a ``Trainer.fit`` run on every rank.

::

    from ailens.integrations.lightning import LensCallback
    trainer = Trainer(strategy="ddp", devices=2, callbacks=[LensCallback(run_dir="runs/x")])
    trainer.fit(model, train_loader, val_loader)

Keywords are LensConfig fields (``early_stop=True``, ``run_dir=``, ...) plus
``progress_bar=False`` to keep the forecast out of the progress bar. The base class is
``lightning.pytorch.Callback``, or ``pytorch_lightning.Callback`` when only that package is
imported (import this module after your Lightning). ``.lens`` is the Lens of the last
``fit``; each ``fit`` records a new run into ``run_dir``, replacing the previous one there.

What the callback does:

- ``on_fit_start`` (the strategy has wrapped the model by then) attaches
  :mod:`ailens.integrations.torch` to ``trainer.strategy.model``: with a DDP strategy every
  gradient bucket is recorded through a DDP comm hook, and every collective that goes through
  ``torch.distributed`` (the strategy's ``barrier`` and ``broadcast``, ``self.log(...,
  sync_dist=True)``, your own calls) is recorded as well. A strategy that registered its own
  comm hook (``DDPStrategy(ddp_comm_hook=...)``, on GPU) keeps it, and the buckets are then
  seen only through the ``torch.distributed`` calls that hook makes. Other strategies (FSDP,
  DeepSpeed) are recorded through their ``torch.distributed`` calls only.
- **Steps**: one per optimizer step, as ``trainer.global_step`` and
  ``trainer.estimated_stepping_batches`` count them (``accumulate_grad_batches=4``: one step
  per 4 batches). The torch adapter ends them at ``optimizer.step()`` of the first optimizer
  in ``trainer.optimizers``, which also keeps it from inferring steps from the collectives;
  without an optimizer, a step ends at each training batch after which
  ``trainer.global_step`` advanced.
- ``on_train_start``: the schedule the trainer knows: total steps
  (``estimated_stepping_batches``), steps per epoch, epochs, how often validation runs
  (``check_val_every_n_epoch``, or ``val_check_interval`` in steps; a time-based interval
  stays unknown) and its batches (``num_val_batches``, after ``limit_val_batches``), so a
  validation not run yet is priced from the step time; how often the trainer's
  ``ModelCheckpoint`` saves (``every_n_train_steps``, or ``every_n_epochs``: by default each
  epoch), a clock-based one left unknown. The torch adapter learns what a checkpoint writes
  after the first optimizer step.
- **Validation** is a section of its own: ``"eval"`` (the sanity check before training:
  ``"sanity_check"``), which the forecast times and schedules apart from the steps.
- **Early stop** (``early_stop=True``): once the signature is ready every rank sets
  ``trainer.should_stop`` at the same step (Lightning still honours ``min_epochs`` /
  ``min_steps``, and runs a due validation first).
- **Progress bar**: rank 0 logs ``ailens_eta_s`` (seconds still to go for the whole run, by the
  ailens forecast) and ``ailens_eta_pm_s`` (± half its 95 % interval) with
  ``pl_module.log(..., prog_bar=True, logger=False)``, about once a second, so they appear in
  the postfix of Lightning's progress bar (TQDM or Rich) beside its own time for the epoch
  (see :func:`ailens.integrations.tqdm.forecast_numbers`).
- **Loggers**: rank 0 hands ``ailens_total_s`` (the predicted total, s from the Lens
  start), ``ailens_eta_s`` and ``ailens_eta_pm_s`` to every logger of the trainer
  (``trainer.loggers``: CSV, TensorBoard, W&B, MLflow, as configured) with
  ``log_metrics(..., step=trainer.global_step)``, at the trainer's own logging cadence
  (``log_every_n_steps``) and only when the forecast changed since the last values.
- ``on_fit_end`` closes the Lens (collective on every rank). After an exception the hooks are
  detached and the trace is flushed at interpreter exit, without any collective.

Anything failing inside the callback disables ailens on that rank (one warning); training
goes on.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

import torch

from ailens import Lens

from ._callbacks import TorchCallback
from .tqdm import forecast_metrics, forecast_numbers

__all__ = ["LensCallback"]

# Seconds between two progress-bar updates (pl_module.log costs far more than the forecast).
_BAR_EVERY_S = 1.0


def _callback_base() -> type:
    if "pytorch_lightning" in sys.modules and "lightning.pytorch" not in sys.modules:
        import pytorch_lightning

        return pytorch_lightning.Callback
    try:
        import lightning.pytorch

        return lightning.pytorch.Callback
    except ImportError:
        import pytorch_lightning

        return pytorch_lightning.Callback


class LensCallback(_callback_base(), TorchCallback):
    """A Lightning callback driving a Lens; keywords are LensConfig fields. ``.lens`` is the
    Lens of the last ``fit`` (closed once it ended), else None."""

    def __init__(self, *, progress_bar: bool = True, **config: Any) -> None:
        super().__init__()
        self._configure(config)
        self._progress_bar = progress_bar
        self._global_step = 0
        self._bar_at = -math.inf
        self._logged_step = -1  # the step of the forecast last handed to the loggers

    # ------------------------------------------------------------ fit

    def on_fit_start(self, trainer, pl_module) -> None:
        optimizer = trainer.optimizers[0] if trainer.optimizers else None
        if self._attach("lightning", trainer.strategy.model, optimizer):
            self._global_step = trainer.global_step

    def on_train_start(self, trainer, pl_module) -> None:
        lens = self._open
        if lens is None:
            return
        try:
            lens.set_schedule(**_schedule(trainer))
            batch_size = getattr(trainer.train_dataloader, "batch_size", None)
            lens.describe(
                threads=torch.get_num_threads(),
                param_count=sum(p.numel() for p in pl_module.parameters()),
                accumulate_grad_batches=int(trainer.accumulate_grad_batches),
                **({"batch_size": int(batch_size)} if batch_size else {}),
            )
        except Exception as e:  # noqa: BLE001
            lens.disable(e)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        lens = self._open
        if lens is None:
            return
        step = trainer.global_step
        if step == self._global_step:  # accumulating gradients: no optimizer step yet
            return
        self._global_step = step
        if self._step_ended(lens):
            trainer.should_stop = True
        if trainer.is_global_zero:
            if self._progress_bar:
                self._show_forecast(pl_module, lens)
            every = trainer.log_every_n_steps
            if trainer.loggers and every and step % every == 0:
                self._log_forecast(trainer, lens)

    def on_sanity_check_start(self, trainer, pl_module) -> None:
        if self._open is not None:
            self._open.section_begin("sanity_check")

    def on_sanity_check_end(self, trainer, pl_module) -> None:
        if self._open is not None:
            self._open.section_end()

    def on_validation_start(self, trainer, pl_module) -> None:
        # Validation outside fit (trainer.validate) finds no open Lens.
        if self._open is not None and not trainer.sanity_checking:
            self._open.section_begin("eval")

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._open is not None and not trainer.sanity_checking:
            self._open.section_end()

    def on_fit_end(self, trainer, pl_module) -> None:
        if self._open is not None:
            self._handle.close()  # collective: every rank reaches on_fit_end

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        # Not every rank may be here: no collective. The trace is flushed at exit.
        if self._handle is not None:
            self._handle.detach()

    # ------------------------------------------------------------ progress bar

    def _show_forecast(self, pl_module, lens: Lens) -> None:
        now = time.monotonic()
        if now - self._bar_at < _BAR_EVERY_S:
            return
        try:
            items = forecast_numbers(lens)
            if not items:
                return
            self._bar_at = now
            for name, value in items.items():
                pl_module.log(
                    name, value, prog_bar=True, logger=False, on_step=True, on_epoch=False
                )
        except Exception as e:  # noqa: BLE001
            lens.disable(e)

    def _log_forecast(self, trainer, lens: Lens) -> None:
        try:
            f = lens.forecast
            if f is None or f.step == self._logged_step:
                return
            metrics = forecast_metrics(f)
            if not metrics:
                return
            self._logged_step = f.step
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
        except Exception as e:  # noqa: BLE001
            lens.disable(e)


def _schedule(trainer) -> dict[str, int]:
    """What the trainer knows of the run ahead, in optimizer steps; unknown keys left out."""
    out: dict[str, int] = {}
    total = trainer.estimated_stepping_batches
    if _finite(total) and total > 0:
        out["total_steps"] = int(total)
    accumulate = max(int(trainer.accumulate_grad_batches), 1)
    batches = trainer.num_training_batches
    if _finite(batches) and batches > 0:
        out["steps_per_epoch"] = math.ceil(batches / accumulate)
        if trainer.max_epochs is not None and trainer.max_epochs > 0:
            out["epochs"] = int(trainer.max_epochs)
    every = _checkpoint_every(trainer, out.get("steps_per_epoch"))
    if every:
        out["checkpoint_every_steps"] = every
    if not trainer.enable_validation:
        return out
    val = [n for n in (trainer.num_val_batches or []) if _finite(n) and n > 0]
    if val:  # each validation dataloader's batches, after limit_val_batches
        out["eval_steps"] = int(sum(val))
    every_epochs = trainer.check_val_every_n_epoch
    val_batch = trainer.val_check_batch
    if getattr(trainer, "_val_check_time_interval", None) is not None or not _finite(val_batch):
        return out  # time-based or once per epoch of unknown length
    if every_epochs is None:  # every val_check_interval batches, across epochs
        out["eval_every_steps"] = max(int(val_batch) // accumulate, 1)
    elif _finite(batches) and val_batch >= batches:
        out["eval_every_epochs"] = int(every_epochs)
    elif every_epochs == 1:
        out["eval_every_steps"] = max(int(val_batch) // accumulate, 1)
    return out


def _checkpoint_every(trainer, steps_per_epoch: int | None) -> int | None:
    """Optimizer steps between the saves of the trainer's one ``ModelCheckpoint`` (Lightning
    counts its ``every_n_train_steps`` in them), when it saves on a count of steps or epochs;
    None for a clock-based one, none that saves, or several."""
    callbacks = list(getattr(trainer, "checkpoint_callbacks", None) or [])
    if len(callbacks) != 1:
        return None
    cb = callbacks[0]
    # Its periods have no public getters: the attributes its __init__ sets, 0 when absent.
    if getattr(cb, "_train_time_interval", None) is not None or cb.save_top_k == 0:
        return None
    steps = int(getattr(cb, "_every_n_train_steps", 0) or 0)
    epochs = int(getattr(cb, "_every_n_epochs", 0) or 0)
    if steps > 0:
        return steps
    return epochs * steps_per_epoch if epochs > 0 and steps_per_epoch else None


def _finite(x: Any) -> bool:
    return x is not None and not (isinstance(x, float) and not math.isfinite(x))
