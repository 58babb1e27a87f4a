"""The mnist example with Horovod (PyTorch, gloo; batch 32 per rank), A/B: plain vs
``attach(hvd, optimizer=...)``."""

from __future__ import annotations

import torch.nn.functional as F
from _mnist import make_batch, make_model
from _torch_ab import parse_args, run_hvd

CASE = {"name": "mnist_hvd", "framework": "horovod-torch"}  # the row in bench_overhead.CASES

if __name__ == "__main__":
    args = parse_args(__doc__, batch=32)
    run_hvd(CASE, args, make_model, make_batch(args.batch, 1), F.cross_entropy)
