"""Launched by tests/test_integration_transformers.py under torchrun (2 ranks, gloo, CPU): a
Hugging Face Trainer on a tiny GPT-2 built from a config (nothing downloaded), random tokens.
Every rank prints one ``RESULT {json}`` line; the test reads the trace files too."""

import argparse
import json
import logging
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, 64, (n, 16), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Printed(TrainerCallback):
    """Keeps what the progress callback would print (it follows LensCallback after attach)."""

    def __init__(self) -> None:
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--samples", type=int, default=96, help="training samples (all ranks)")
    ap.add_argument("--epochs", type=float, default=2)
    ap.add_argument("--accumulate", type=int, default=1)
    ap.add_argument("--eval-steps", type=int, default=4)
    ap.add_argument("--callback-only", action="store_true", help="callbacks=[LensCallback()]")
    ap.add_argument("--config", default="{}", help="LensCallback keywords as JSON")
    args = ap.parse_args()
    warnings: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warnings.append(record.getMessage())
    logging.getLogger("ailens").addHandler(handler)

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    )
    targs = TrainingArguments(
        output_dir=args.out_dir,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        num_train_epochs=args.epochs,
        gradient_accumulation_steps=args.accumulate,
        eval_strategy="steps",
        eval_steps=args.eval_steps,
        logging_steps=2,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        ddp_backend="gloo",
        dataloader_num_workers=0,
        disable_tqdm=True,
        learning_rate=1e-3,
        ddp_find_unused_parameters=False,
    )
    from ailens.integrations.transformers import LensCallback, attach

    config = {"run_dir": args.run_dir, **json.loads(args.config)}
    printed = Printed()
    if args.callback_only:
        callback = LensCallback(**config)
        callbacks = [callback]
    else:
        callbacks = []
    trainer = Trainer(
        model=model,
        args=targs,
        train_dataset=Tokens(args.samples, 1),
        eval_dataset=Tokens(16, 2),
        callbacks=callbacks,
    )
    if not args.callback_only:
        callback = attach(trainer, **config)
    trainer.add_callback(printed)
    trainer.train()
    lens = callback.lens
    print(
        "RESULT "
        + json.dumps(
            {
                "rank": int(os.environ["RANK"]),
                "global_step": trainer.state.global_step,
                "max_steps": trainer.state.max_steps,
                "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
                "lens_steps": lens.steps,
                "lens_should_stop": lens.should_stop,
                "closed": lens.closed,
                "disabled": lens.disabled,
                "printed": printed.logs,
                "log_history": trainer.state.log_history,
                "warnings": warnings,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
