"""The resnet50 example's model and batch (examples/resnet50: ResNet-50, 64 px, batch 8 per
rank, random ImageNet-shaped data)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "resnet50"))
from resnet import ResNet50  # noqa: E402


def make_batch(batch: int, image_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 3, image_size, image_size, generator=gen)
    return x, torch.randint(0, 1000, (batch,), generator=gen)


__all__ = ["ResNet50", "make_batch"]
