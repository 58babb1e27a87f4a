"""Launched by tests/test_integration_lightning.py: a tiny Lightning DDP fit on 2 CPU processes
(gloo) started by Lightning's own launcher (``devices=2``: this script is run again for rank 1).
Every rank prints one ``RESULT {json}`` line; the test reads the trace files too."""

import argparse
import json
import os

import torch
from ailens.integrations.lightning import LensCallback
from inject_fault import inject
from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


class Net(LightningModule):
    def __init__(self, sync_dist: bool) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 64),
            torch.nn.ReLU(),
            torch.nn.Linear(64, 256),
            torch.nn.ReLU(),
            torch.nn.Linear(256, 4),
        )
        self.sync_dist = sync_dist

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        # sync_dist: one all_reduce per validation epoch through torch.distributed.
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=self.sync_dist)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def loader(n: int, seed: int) -> DataLoader:
    g = torch.Generator().manual_seed(seed)
    data = TensorDataset(torch.randn(n, 16, generator=g), torch.randn(n, 4, generator=g))
    return DataLoader(data, batch_size=8)


class InjectFault(Callback):
    """Once the Lens exists, make it fail inside on the rank the spec names."""

    def __init__(self, lens_callback, spec: str) -> None:
        self.lens_callback, self.spec = lens_callback, spec

    def on_train_start(self, trainer, pl_module) -> None:
        inject(self.lens_callback.lens, self.spec)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--samples", type=int, default=160, help="training samples (all ranks)")
    ap.add_argument("--accumulate", type=int, default=1)
    ap.add_argument("--config", default="{}", help="LensCallback keywords as JSON")
    ap.add_argument("--fault", default="", help='"<rank>:<tick>": ailens fails there')
    ap.add_argument("--csv", default="", help="a CSVLogger into this directory")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    callback = LensCallback(run_dir=args.run_dir, **json.loads(args.config))
    bar = TQDMProgressBar(refresh_rate=1)
    trainer = Trainer(
        strategy="ddp",
        accelerator="cpu",
        devices=2,
        max_epochs=args.epochs,
        accumulate_grad_batches=args.accumulate,
        callbacks=[callback, InjectFault(callback, args.fault), bar],
        num_sanity_val_steps=1,
        logger=CSVLogger(args.csv, name="csv") if args.csv else False,
        log_every_n_steps=5,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    net = Net(sync_dist=True)
    trainer.fit(net, loader(args.samples, 1), loader(32, 2))
    lens = callback.lens
    postfix = None
    if trainer.is_global_zero and bar.train_progress_bar is not None:
        postfix = bar.train_progress_bar.postfix
    print(
        "RESULT "
        + json.dumps(
            {
                "rank": trainer.global_rank,
                "world": trainer.world_size,
                "pid": os.getpid(),
                "global_step": trainer.global_step,
                "estimated_steps": trainer.estimated_stepping_batches,
                "param_bytes": sum(p.numel() * p.element_size() for p in net.parameters()),
                "should_stop": bool(trainer.should_stop),
                "lens_steps": lens.steps,
                "lens_should_stop": lens.should_stop,
                "closed": lens.closed,
                "disabled": lens.disabled,
                "postfix": postfix,
                "pbar_metrics": {k: float(v) for k, v in trainer.progress_bar_metrics.items()},
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
