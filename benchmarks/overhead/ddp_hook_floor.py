"""The floor under ailens' DDP cost, without ailens: the ddp_2ms model A/B, DDP's built-in
reduction against torch's own Python ``allreduce_hook``.

Any comm hook (ailens times each bucket with one) makes DDP copy the gradients into the
bucket and leave the averaging to the hook, a second pass, where DDP's built-in reduction
divides while copying; the hook is also Python, called from the autograd thread. This case
measures that cost alone: its ``ratio`` is what no hook-based recorder can go below on this
model, beside the ``ddp_2ms`` row (the same model with ailens).
"""

from __future__ import annotations

import gc

import torch
import torch.distributed as dist
from _ab import emit, measure
from _torch_ab import parse_args, trainer
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

CASE = {"name": "ddp_hook_floor", "framework": "torch-ddp"}  # the row in bench_overhead.CASES


def main() -> None:
    args = parse_args(__doc__, width=128, layers=2, batch=32)

    def make() -> torch.nn.Module:
        mods: list[torch.nn.Module] = []
        for _ in range(args.layers):
            mods += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
        return torch.nn.Sequential(*mods)

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    builtin = DDP(make())
    torch.manual_seed(0)
    hooked = DDP(make())
    hooked.register_comm_hook(None, allreduce_hook)  # torch's own: no ailens anywhere
    x = torch.randn(args.batch, args.width, generator=torch.Generator().manual_seed(1))

    def loss_fn(out, _):
        return out.square().mean()

    runs = [
        trainer(m, torch.optim.SGD(m.parameters(), lr=1e-3, momentum=0.9), (x, None), loss_fn)
        for m in (builtin, hooked)
    ]

    def share(n: int) -> int:
        t = torch.tensor([n if rank == 0 else 0])
        dist.broadcast(t, 0)
        return int(t[0])

    result = measure(*runs, pairs=args.pairs, block_s=args.block_s, sync=dist.barrier,
                     share=share)  # fmt: skip
    if rank == 0:
        emit(CASE["name"], CASE["framework"], result, ranks=size, threads=args.threads,
             compared="DDP's built-in reduction vs torch's allreduce_hook")  # fmt: skip
    del builtin, hooked, runs  # before destroy_process_group: DDP aborts at exit otherwise
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
