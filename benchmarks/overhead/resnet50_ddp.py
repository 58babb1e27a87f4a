"""The resnet50 example with PyTorch DDP (ResNet-50, 64 px, batch 8 per rank), A/B: plain vs
``attach``. BatchNorm buffers: DDP broadcasts them every forward (recorded by ailens)."""

from __future__ import annotations

import torch.nn.functional as F
from _resnet import ResNet50, make_batch
from _torch_ab import parse_args, run_ddp

CASE = {"name": "resnet50_ddp", "framework": "torch-ddp"}  # the row in bench_overhead.CASES

if __name__ == "__main__":
    args = parse_args(__doc__, batch=8, image_size=64)
    run_ddp(CASE, args, ResNet50, make_batch(args.batch, args.image_size, 1), F.cross_entropy)
