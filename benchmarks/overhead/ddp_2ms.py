"""A DDP job with steps of ~2 ms (quiet machine) and one gradient allreduce per step, A/B.

A small MLP whose gradients fit DDP's first bucket: one bucket, one allreduce per step, the
case where a fixed per-collective and per-step cost shows most.
"""

from __future__ import annotations

import torch
from _torch_ab import parse_args, run_ddp

CASE = {"name": "ddp_2ms", "framework": "torch-ddp"}  # the row in bench_overhead.CASES


def main() -> None:
    args = parse_args(__doc__, width=128, layers=2, batch=32)

    def make() -> torch.nn.Module:
        mods: list[torch.nn.Module] = []
        for _ in range(args.layers):
            mods += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
        return torch.nn.Sequential(*mods)

    gen = torch.Generator().manual_seed(1)
    batch = (torch.randn(args.batch, args.width, generator=gen), None)
    run_ddp(CASE, args, make, batch, lambda out, _: out.square().mean())


if __name__ == "__main__":
    main()
