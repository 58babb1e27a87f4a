"""A whole DDP job as a newcomer writes it (the shape of PyTorch's DDP tutorial), for
``bench_overhead.py --kind job``: a small MLP, ~2 ms steps, one gradient bucket, and with
``--lens`` the documented one line. Launched with ``torchrun --standalone --nproc_per_node=2``;
the benchmark times the launch from start to the last rank's exit.
"""

from __future__ import annotations

import argparse
import gc
import tempfile

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lens", action="store_true", help="with ailens (the documented one line)")
    p.add_argument(
        "--run-dir", default=None, help="ailens run directory (default: a temporary one)"
    )
    args = p.parse_args()

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(),
                                    torch.nn.Linear(128, 128)))  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.lens:
        import ailens.integrations.torch

        run_dir = args.run_dir or tempfile.mkdtemp(prefix="ailens-job-")
        ailens.integrations.torch.attach(model, opt, run_dir=run_dir)
    x = torch.randn(32, 128)
    for _ in range(args.steps):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    del model, opt  # the DDP model goes before destroy_process_group (see examples)
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
