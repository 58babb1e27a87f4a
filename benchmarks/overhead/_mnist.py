"""The mnist example's model (examples/mnist/common.py) on MNIST-shaped random data:
a step costs the same whatever the pixel values."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "mnist"))
from common import torch_model as make_model  # noqa: E402, F401 - the example's own model


def make_batch(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(batch, 1, 28, 28, generator=gen), torch.randint(
        0, 10, (batch,), generator=gen
    )
