"""ResNet-50 on synthetic ImageNet-shaped data, one rank; launched by ``examples/resnet50/run``.

Like Horovod's ``pytorch_synthetic_benchmark.py``: one fixed random batch per rank (seeded),
1000 classes, SGD with momentum, the learning rate scaled by the rank count. Data-parallel with
Horovod (``--framework horovod``) or PyTorch DDP (``--framework ddp``); ailens is one line in
either case. Like a real job it evaluates at each epoch end (forward passes over held-out
batches, the accuracy averaged across ranks) and rank 0 checkpoints the weights every
``--checkpoint-every`` steps.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet import ResNet50  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="ResNet-50, one rank")
    p.add_argument("--framework", choices=("horovod", "ddp"), default="horovod")
    p.add_argument("--run-dir", default="runs/resnet50")
    p.add_argument("--no-lens", action="store_true")
    p.add_argument("--early-stop", action="store_true")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=8, help="per rank")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.0125, help="per rank; scaled by the rank count")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--progress-every", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3, help="steps left out of the mean step time")
    p.add_argument("--steps-per-epoch", type=int, default=25)
    p.add_argument("--eval-batches", type=int, default=2,
                   help="held-out batches evaluated at each epoch end (0: no evaluation)")
    p.add_argument("--checkpoint-every", type=int, default=50,
                   help="steps between checkpoints on rank 0 (0: none)")
    p.add_argument("--threads", type=int, default=None,
                   help="intra-op threads per rank (default: the cores divided among the ranks)")
    return p.parse_args()


def setup(args: argparse.Namespace):
    """Initialise the framework; returns (rank, size, model, optimizer, lens handle or None,
    finish) where finish() tears the framework down."""
    lens_config = dict(run_dir=args.run_dir, total_steps=args.steps,
                       steps_per_epoch=args.steps_per_epoch,
                       progress_every=args.progress_every, early_stop=args.early_stop)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = ResNet50()
    if args.framework == "ddp":
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("gloo")
        rank, size = dist.get_rank(), dist.get_world_size()
        model = DDP(model)
        opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
        lens = None
        if not args.no_lens:
            from ailens.integrations.torch import attach

            lens = attach(model, opt, **lens_config)  # the one line

        def finish():
            nonlocal model
            del model  # before destroy_process_group: DDP aborts at exit otherwise
            gc.collect()  # DDP holds reference cycles: free its reducer now, not at exit
            dist.destroy_process_group()

        def average(x: torch.Tensor) -> torch.Tensor:
            dist.all_reduce(x)
            return x / size

        return rank, size, model, opt, lens, finish, average

    import horovod.torch as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    lens = None
    if not args.no_lens:
        from ailens.integrations.horovod import attach

        lens = attach(hvd, optimizer=opt, **lens_config)  # the one line
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    return rank, size, model, opt, lens, hvd.shutdown, hvd.allreduce  # allreduce averages


def evaluate(model, held, average) -> float:
    """Accuracy over the held-out batches, averaged across ranks."""
    model.eval()
    with torch.no_grad():
        correct = sum(float((model(x).argmax(1) == y).float().mean()) for x, y in held)
    model.train()
    return float(average(torch.tensor([correct / len(held)]))[0])


def main() -> int:
    args = parse_args()
    size_hint = int(os.environ.get("WORLD_SIZE") or os.environ.get("HOROVOD_SIZE") or 1)
    # Ranks share the machine's cores: oversubscribing them only adds noise.
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // size_hint))
    rank, size, model, opt, lens, finish, average = setup(args)

    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=gen)
    target = torch.randint(0, 1000, (args.batch_size,), generator=gen)
    held = [
        (torch.randn(args.batch_size, 3, args.image_size, args.image_size, generator=gen),
         torch.randint(0, 1000, (args.batch_size,), generator=gen))
        for _ in range(args.eval_batches)
    ]
    checkpoint = Path(args.run_dir) / "checkpoint.pt"
    model.train()
    times: list[float] = []
    done = 0
    for step in range(args.steps):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(data), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        done = step + 1
        if held and done % args.steps_per_epoch == 0:
            accuracy = evaluate(model, held, average)
            if rank == 0 and args.progress_every:
                print(f"epoch {done // args.steps_per_epoch}: held-out accuracy "
                      f"{accuracy:.4f}", flush=True)
        if args.checkpoint_every and done % args.checkpoint_every == 0 and rank == 0:
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), checkpoint)
        times.append(time.perf_counter() - t0)
        if rank == 0 and args.progress_every and done % args.progress_every == 0:
            print(f"step {done}/{args.steps}: loss {loss.item():.4f}, {times[-1] * 1e3:.0f} ms, "
                  f"{args.batch_size * size / times[-1]:.1f} img/s", flush=True)
        if lens is not None and lens.should_stop:
            if rank == 0:
                print(f"ailens: signature ready, stopping after {done} steps", flush=True)
            break
    if lens is not None:
        lens.close()

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    print(f"rank {rank}: steps={done} loss={loss.item():.6f} "
          f"params_sha256={digest.hexdigest()[:16]}", flush=True)
    kept = times[args.warmup:]
    mean = sum(kept) / len(kept) * 1e3 if kept else float("nan")
    if rank == 0:
        print(f"STEP_TIME mean_ms={mean:.3f} steps={len(kept)} warmup={args.warmup}", flush=True)
    del model, opt
    finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
