"""What ailens adds to one DDP training step, measured A/B inside one run.

    .venv/bin/torchrun --standalone --nproc_per_node=2 examples/resnet50/overhead.py

Two identical models train side by side in the same process group, one attached to ailens
(comm hook per gradient bucket, optimizer step hook, exchange and online analysis), one
plain; blocks of steps alternate between them, so the drift of a shared machine cancels
out. The models are small MLPs cut into as many gradient buckets as ResNet-50 has at DDP's
default 25 MB cap (5), since ailens' cost is per bucket and per step, not per parameter.
Divide by the example's step time for the overhead ratio.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time

import numpy as np
import torch
import torch.distributed as dist
from ailens.integrations.torch import attach
from torch.nn.parallel import DistributedDataParallel as DDP


def make(width: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    mods: list[torch.nn.Module] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--buckets", type=int, default=5)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--block", type=int, default=40, help="steps per block")
    p.add_argument("--pairs", type=int, default=15)
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    layer_mb = (args.width * args.width + args.width) * 4 / 2**20
    kw = dict(bucket_cap_mb=layer_mb * 0.9)  # one Linear per bucket
    plain = DDP(make(args.width, args.buckets), **kw)
    lensed = DDP(make(args.width, args.buckets), **kw)
    opt_plain = torch.optim.SGD(plain.parameters(), lr=1e-3)
    opt_lensed = torch.optim.SGD(lensed.parameters(), lr=1e-3)
    run_dir = [tempfile.mkdtemp(prefix="ailens-overhead-") if rank == 0 else None]
    dist.broadcast_object_list(run_dir)
    handle = attach(lensed, opt_lensed, run_dir=run_dir[0])
    x = torch.randn(16, args.width)

    def block(model, opt) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.block):
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return (time.perf_counter() - t0) / args.block * 1e6

    block(plain, opt_plain), block(lensed, opt_lensed)  # warm-up: bucket rebuild, allocators
    added, base = [], []
    for _ in range(args.pairs):
        t_plain = block(plain, opt_plain)
        added.append(block(lensed, opt_lensed) - t_plain)
        base.append(t_plain)
    handle.close()
    buckets = handle.lens.ticks // max(handle.lens.steps, 1)
    if rank == 0:
        q1, q3 = np.percentile(added, [25, 75])
        print(f"ailens adds {statistics.median(added):.0f} us per DDP step (median; quartiles "
              f"{q1:.0f}..{q3:.0f} us; {buckets} buckets/step, plain step "
              f"{statistics.median(base) / 1e3:.2f} ms; {args.pairs} pairs of {args.block}-step "
              f"blocks, {dist.get_world_size()} ranks)")
    del plain, lensed  # before destroy_process_group: DDP aborts at exit otherwise
    gc.collect()  # DDP holds reference cycles: free its reducer now, not at exit
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
