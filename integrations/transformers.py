"""Hugging Face ``Trainer``: ``attach(trainer)`` (or ``LensCallback``) records ``trainer.train()``.

::

    from ailens.integrations.transformers import attach
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val)
    attach(trainer, run_dir="runs/x")        # every rank; torchrun --nproc_per_node=2 train.py
    trainer.train()

``attach`` adds a :class:`LensCallback` that knows its trainer. A ``TrainerCallback`` is
handed the unwrapped model, never the ``DistributedDataParallel`` that Accelerate builds
inside ``train()``; the trainer's public ``model_wrapped`` attribute is the only public path
to it, so the gradient buckets need the callback to hold the trainer.
``Trainer(callbacks=[LensCallback()])`` works too, without the buckets (a warning says so).
Keywords are LensConfig fields (``early_stop=True``, ``run_dir=``, ...). Each ``train()``
records a new run into ``run_dir``, replacing the previous one there.

What the callback does, on every rank:

- ``on_train_begin`` (Accelerate has wrapped the model by then) attaches
  :mod:`ailens.integrations.torch` to ``trainer.model_wrapped``: with DDP every gradient
  bucket is recorded through a DDP comm hook (none is registered by the Trainer itself; an
  ``accelerate`` ``DistributedDataParallelKwargs(comm_hook=...)`` one is kept, and its
  buckets are then seen through the ``torch.distributed`` calls it makes), and every
  collective that goes through ``torch.distributed`` (the loss gather for logging, the
  evaluation gathers, your own calls) is recorded as well.
- **Steps**: one per optimizer step (after ``gradient_accumulation_steps`` micro-batches), as
  ``state.global_step`` counts them: the torch adapter ends them at the optimizer's
  ``step()``, which also keeps it from inferring steps from the collectives (without an
  optimizer: at each ``on_step_end``). The schedule from the trainer's state:
  total steps (``state.max_steps``), epochs, evaluation every ``state.eval_steps`` steps or
  every epoch (from ``eval_delay`` on), checkpoints every ``state.save_steps`` steps or every
  epoch, and, with ``attach``, the batches of one evaluation (the evaluation set's size over
  ``eval_batch_size`` x world size, as the evaluation loop splits it), so an evaluation not
  run yet is priced from the step time.
- **Evaluation** during training is a section of its own (``"eval"``): from the step end that
  asked for it (after that step's logging) to ``on_evaluate``.
- **Early stop** (``early_stop=True``): once the signature is ready every rank sets
  ``control.should_training_stop`` at the same step.
- **Logs**: rank 0 adds ``ailens_total_s`` (the predicted total, s from the Lens start),
  ``ailens_eta_s`` (seconds still to go for the whole run, by the ailens forecast) and
  ``ailens_eta_pm_s`` (± half its 95 % interval) to the logs of every ``logging_steps``
  (``on_log``), and to the entry the Trainer stored for them in ``state.log_history``
  (kept in ``trainer_state.json``). ``attach`` moves the printing callback and the reporting
  ones (``report_to``: TensorBoard, W&B, MLflow, ...) after this one so they see them; with
  ``callbacks=[LensCallback()]`` the reporting callbacks run first and miss them.
- ``on_train_end`` closes the Lens (collective on every rank). A run that dies is flushed at
  interpreter exit, without any collective.

Anything failing inside the callback disables ailens on that rank (one warning); training
goes on.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from transformers import TrainerCallback

from ailens import Lens

from ._base import log
from ._callbacks import TorchCallback
from .tqdm import forecast_numbers

__all__ = ["LensCallback", "attach"]


class LensCallback(TrainerCallback, TorchCallback):
    """A ``TrainerCallback`` driving a Lens; ``trainer``: the Trainer it is added to, which
    lets it time the DDP gradient buckets (see :func:`attach`). ``.lens`` is the Lens once
    training began."""

    def __init__(self, trainer: Any = None, **config: Any) -> None:
        self._configure(config)
        self._trainer = trainer
        self._eval_pending = False

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs) -> None:
        wrapped = getattr(self._trainer, "model_wrapped", None) if self._trainer else None
        ddp = wrapped if isinstance(wrapped, torch.nn.parallel.DistributedDataParallel) else None
        # The handler's optimizer is the one given to Trainer(optimizers=...), else None; the
        # trainer's is Accelerate's AcceleratedOptimizer, which steps the torch optimizer it
        # holds only on the micro-batch that syncs (not when a GradScaler skips the step).
        if self._trainer is not None and getattr(self._trainer, "optimizer", None) is not None:
            optimizer = self._trainer.optimizer
        optimizer = getattr(optimizer, "optimizer", optimizer)
        if not isinstance(optimizer, torch.optim.Optimizer):
            optimizer = None
        if not self._attach("transformers", ddp, optimizer):
            return
        lens = self._handle.lens
        if ddp is None and lens.world_size > 1 and lens.rank == 0:
            log.warning(
                "ailens: gradient buckets are not recorded, only torch.distributed calls: %s",
                "a TrainerCallback never sees the DDP model; use ailens.integrations."
                "transformers.attach(trainer) instead of callbacks=[LensCallback()]"
                if self._trainer is None
                else f"the trainer's model is a {type(wrapped).__name__}, not DDP",
            )
        try:
            loader = kwargs.get("train_dataloader")
            lens.set_schedule(**_schedule(args, state, loader, self._trainer))
            lens.describe(
                threads=torch.get_num_threads(),
                batch_size=int(args.per_device_train_batch_size),
                gradient_accumulation_steps=int(args.gradient_accumulation_steps),
                **(
                    {"param_count": sum(p.numel() for p in model.parameters())}
                    if model is not None
                    else {}
                ),
            )
        except Exception as e:  # noqa: BLE001
            lens.disable(e)
        if getattr(args, "eval_on_start", False):
            self._begin_eval(lens)

    def on_step_end(self, args, state, control, **kwargs) -> None:
        lens = self._open
        if lens is None:
            return
        if self._step_ended(lens):
            control.should_training_stop = True
        self._eval_due(lens, control)

    def on_epoch_end(self, args, state, control, **kwargs) -> None:
        if self._open is not None:
            self._eval_due(self._open, control)

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        lens = self._open
        if lens is None:
            return
        if logs is not None and state.is_world_process_zero:
            try:
                _add_forecast(logs, state, forecast_numbers(lens, total=True))
            except Exception as e:  # noqa: BLE001
                lens.disable(e)
        if self._eval_pending:
            self._begin_eval(lens)  # after this step's logging: see _eval_due

    def on_prediction_step(self, args, state, control, **kwargs) -> None:
        # An evaluation this callback did not see coming (asked for by a later callback):
        # its section starts one batch late. A no-op while the section is open.
        if self._open is not None:
            self._begin_eval(self._open)

    def on_evaluate(self, args, state, control, **kwargs) -> None:
        self._end_eval()

    def on_predict(self, args, state, control, **kwargs) -> None:
        self._end_eval()

    def on_train_end(self, args, state, control, **kwargs) -> None:
        if self._open is not None:
            self._end_eval()
            self._handle.close()  # collective: every rank reaches on_train_end

    # ------------------------------------------------------------ evaluation sections

    def _eval_due(self, lens: Lens, control) -> None:
        if not control.should_evaluate:
            return
        # The trainer logs first (a collective gather of the loss), then evaluates: when it
        # logs at this step, the section begins in on_log.
        self._eval_pending = True
        if not control.should_log:
            self._begin_eval(lens)

    def _begin_eval(self, lens: Lens) -> None:
        self._eval_pending = True
        lens.section_begin("eval")  # a no-op while a section is open

    def _end_eval(self) -> None:
        if self._eval_pending and self._open is not None:
            self._open.section_end()
        self._eval_pending = False


def attach(trainer: Any, **config: Any) -> LensCallback:
    """Add a :class:`LensCallback` that knows ``trainer`` (so the DDP gradient buckets are
    recorded) and return it. Call it on every rank before ``trainer.train()``; keywords are
    LensConfig fields."""
    from transformers import trainer as hf_trainer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    callback = LensCallback(trainer, **config)
    # The callbacks that print the logs (in a notebook: its own) and report them (report_to)
    # go after this one, so the printed line and the reports have the forecast.
    printers = [
        ProgressCallback,
        PrinterCallback,
        getattr(hf_trainer, "DEFAULT_PROGRESS_CALLBACK", None),
        *_reporting_callbacks(trainer.args),
    ]
    shown = [c for c in (trainer.pop_callback(p) for p in printers if p) if c is not None]
    trainer.add_callback(callback)
    for c in shown:
        trainer.add_callback(c)
    return callback


def _add_forecast(logs: dict, state, numbers: dict[str, float]) -> None:
    """The forecast into ``logs`` and into the ``log_history`` entry the Trainer stored for
    them just before (``{**logs, "step": global_step}``)."""
    if not numbers:
        return
    entry = state.log_history[-1] if state.log_history else None
    stored = (
        isinstance(entry, dict)
        and entry.get("step") == state.global_step
        and all(entry.get(k) == v for k, v in logs.items())
    )
    logs.update(numbers)
    if stored:
        entry.update(numbers)


def _reporting_callbacks(args) -> list[type]:
    """The classes of the callbacks ``report_to`` added (none when it cannot be read)."""
    try:
        from transformers.integrations import get_reporting_integration_callbacks

        return list(get_reporting_integration_callbacks(args.report_to))
    except Exception:  # noqa: BLE001 - an older or newer transformers: leave them in place
        return []


def _eval_batches(trainer: Any, args) -> int | None:
    """Batches of one evaluation on this rank: each evaluation set's size over
    ``eval_batch_size`` x world size (the evaluation loop shards it across ranks), summed
    over the sets of a dict; None when a size is not known."""
    data = getattr(trainer, "eval_dataset", None)
    if data is None:
        return None
    sets = data.values() if isinstance(data, dict) else [data]
    per = max(int(args.eval_batch_size), 1) * max(int(args.world_size), 1)
    total = 0
    for d in sets:
        try:
            total += -(-len(d) // per)
        except TypeError:  # an iterable dataset: no length
            return None
    return total or None


def _schedule(args, state, train_dataloader, trainer: Any = None) -> dict[str, int]:
    """What the trainer knows of the run ahead, in optimizer steps; unknown keys left out."""
    out: dict[str, int] = {}
    if state.max_steps and state.max_steps > 0:
        out["total_steps"] = int(state.max_steps)
    if state.num_train_epochs and state.num_train_epochs > 0:
        out["epochs"] = int(state.num_train_epochs)
    try:
        batches = len(train_dataloader)  # this rank's batches per epoch
    except TypeError:  # None, or an iterable dataset
        batches = 0
    if batches > 0:
        accumulate = max(int(args.gradient_accumulation_steps), 1)
        out["steps_per_epoch"] = -(-batches // accumulate)  # as the Trainer counts them
    # eval_strategy was evaluation_strategy before transformers 4.41.
    evaluate = _strategy(args, "eval_strategy", "evaluation_strategy")
    delay = getattr(args, "eval_delay", 0) or 0  # no evaluation before (steps or epochs)
    if evaluate == "steps" and state.eval_steps:
        every = int(state.eval_steps)
        out["eval_every_steps"] = every
        if delay > every:
            out["eval_start_step"] = math.ceil(delay / every) * every
    elif evaluate == "epoch":
        out["eval_every_epochs"] = 1
        if delay > 1:
            out["eval_start_epoch"] = math.ceil(delay)
    if evaluate in ("steps", "epoch") and trainer is not None:
        batches = _eval_batches(trainer, args)
        if batches:
            out["eval_steps"] = batches
    save = _strategy(args, "save_strategy")
    if save == "steps" and state.save_steps:
        out["checkpoint_every_steps"] = int(state.save_steps)
    elif save == "epoch" and out.get("steps_per_epoch"):
        out["checkpoint_every_steps"] = out["steps_per_epoch"]
    return out


def _strategy(args, *names: str) -> str:
    """An ``IntervalStrategy`` argument as its string value ("no", "steps", "epoch")."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None:
            return str(getattr(value, "value", value))
    return "no"
