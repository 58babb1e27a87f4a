"""The mnist example's model (examples/mnist/train_torch.py) on MNIST-shaped random data:
a step costs the same whatever the pixel values."""

from __future__ import annotations

import torch
from torch import nn


def make_model() -> nn.Module:
    flat = 32 * (((28 - 2) // 2 - 2) // 2) ** 2
    return nn.Sequential(
        nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(flat, 64), nn.ReLU(), nn.Linear(64, 10),
    )  # fmt: skip


def make_batch(batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(batch, 1, 28, 28, generator=gen), torch.randint(
        0, 10, (batch,), generator=gen
    )
