"""Launched by tests/test_integration_torch.py under torchrun: the shape of PyTorch's DDP
tutorial script (pytorch/examples distributed/ddp-tutorial-series/multigpu.py) with only the
documented line added, ``attach(model, optimizer)``: a ``DistributedSampler`` loader, the
epochs in the script's own ``range``, ``sampler.set_epoch`` and a peek at the first batch
each epoch (in a function of its own, as the tutorial's ``_run_epoch``), and, with
``--eval``, an evaluation loader run after each epoch. Nothing but the loop tells ailens the
run's length; with ``--while`` the epochs are counted in a ``while`` loop, and nothing does.
Every rank prints one ``RESULT {json}`` line.

argv: --run-dir DIR [--epochs E] [--samples N] [--accumulate K] [--eval] [--while]
"""

import argparse
import json
import logging

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--samples", type=int, default=640, help="training samples (all ranks)")
    ap.add_argument("--accumulate", type=int, default=1, help="batches per optimizer step")
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    ap.add_argument("--while", dest="while_loop", action="store_true")
    args = ap.parse_args()
    notices: list[str] = []  # what ailens says (the user's logging shows INFO)
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: notices.append(record.getMessage())
    logging.getLogger("ailens").addHandler(handler)
    logging.getLogger("ailens").setLevel(logging.INFO)

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    data = TensorDataset(
        torch.randn(args.samples, 16, generator=g), torch.randn(args.samples, 4, generator=g)
    )
    train = DataLoader(
        data, batch_size=8, sampler=DistributedSampler(data), num_workers=args.workers
    )
    held = TensorDataset(torch.randn(64, 16, generator=g), torch.randn(64, 4, generator=g))
    test = DataLoader(
        held,
        batch_size=8,
        sampler=DistributedSampler(held, shuffle=False),
        num_workers=args.workers,
    )
    model = DDP(
        torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    from ailens.integrations.torch import attach

    handle = attach(model, optimizer, run_dir=args.run_dir)  # the one line
    lens = handle.lens
    seen: list[dict] = []

    def run_epoch(epoch: int, model: torch.nn.Module) -> int:
        batch_size = len(next(iter(train))[0])  # the tutorial's peek
        train.sampler.set_epoch(epoch)
        for i, (x, y) in enumerate(train):
            loss = torch.nn.functional.mse_loss(model(x), y) / args.accumulate
            loss.backward()
            if (i + 1) % args.accumulate == 0:
                optimizer.step()
                optimizer.zero_grad()
                f = lens.forecast
                seen.append(
                    {
                        "steps": lens.steps,
                        "at": None if f is None else f.step,  # the forecast's own step
                        "epoch": None if f is None or f.epoch is None else f.epoch.epoch,
                        "epoch_end_step": None
                        if f is None or f.epoch is None
                        else f.epoch.epoch_end_step,
                        "step_time": None if f is None else f.step_time_s,
                        "total_steps": lens.total_steps,
                    }
                )
        if args.eval:
            with torch.no_grad():
                for x, y in test:
                    torch.nn.functional.mse_loss(model(x), y)
        return batch_size

    if args.while_loop:
        epoch = 0
        while epoch < args.epochs:
            batch_size = run_epoch(epoch, model)
            epoch += 1
    else:
        for epoch in range(args.epochs):  # the tutorial's loop
            batch_size = run_epoch(epoch, model)
    steps_per_epoch = lens.steps_per_epoch
    handle.close()
    print(
        "RESULT "
        + json.dumps(
            {
                "rank": rank,
                "batch_size": batch_size,
                "batches": len(train),
                "steps": lens.steps,
                "steps_per_epoch": steps_per_epoch,
                "seen": seen,
                "disabled": lens.disabled,
                "notices": notices,
            }
        ),
        flush=True,
    )
    del model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
