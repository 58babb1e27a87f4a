"""What both mnist training scripts share: arguments, the model (one per framework, the same
layers) and the step timer. benchmarks/overhead/ trains the same models."""

from __future__ import annotations

import argparse
import hashlib
import os
import time

import numpy as np


def parse_args(framework: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=f"mnist with {framework} (one rank)")
    p.add_argument("--run-dir", default="runs/mnist")
    p.add_argument("--no-lens", action="store_true", help="train without ailens")
    p.add_argument("--early-stop", action="store_true", help="stop once the signature is ready")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by the rank count")
    p.add_argument("--idx-dir", default=None, help="directory with the MNIST IDX files")
    p.add_argument("--progress-every", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the mean step time")
    p.add_argument("--framework", default=framework)
    p.add_argument("--threads", type=int, default=None, help="intra-op threads per rank")
    p.add_argument("--eval-every-epochs", type=int, default=1,
                   help="epochs between evaluations on the held-out split (0: none)")
    p.add_argument("--checkpoint-every", type=int, default=100,
                   help="steps between checkpoints on rank 0 (0: none)")
    return p.parse_args()


def threads_per_rank(size: int) -> int:
    """Ranks share this machine's cores; oversubscribing them would only add noise."""
    return max(1, (os.cpu_count() or 1) // size)


class StepTimer:
    """Wall time between consecutive step ends within an epoch (an epoch's first step and
    the first ``warmup`` steps of the run are left out: they include set-up and tracing)."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.seen = 0
        self.times: list[float] = []
        self._last: float | None = None

    def epoch_begin(self) -> None:
        self._last = None

    def step_end(self) -> None:
        now = time.perf_counter()
        if self._last is not None:
            self.seen += 1
            if self.seen > self.warmup:
                self.times.append(now - self._last)
        self._last = now

    def line(self) -> str:
        mean = sum(self.times) / len(self.times) * 1e3 if self.times else float("nan")
        return f"STEP_TIME mean_ms={mean:.3f} steps={len(self.times)} warmup={self.warmup}"


def params_digest(arrays) -> str:
    """SHA-256 of the trained parameters (float32): identical on every rank, and with or
    without ailens."""
    flat = np.concatenate([np.asarray(a, dtype=np.float32).ravel() for a in arrays])
    return hashlib.sha256(flat.tobytes()).hexdigest()[:16]


def torch_model(side: int = 28):
    """The model, in torch, for ``side`` x ``side`` one-channel images."""
    from torch import nn

    flat = 32 * (((side - 2) // 2 - 2) // 2) ** 2
    return nn.Sequential(
        nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(flat, 64), nn.ReLU(), nn.Linear(64, 10),
    )  # fmt: skip


def keras_model(keras, input_shape=(28, 28, 1)):
    """The same model in Keras (``keras``: the tf-keras module in use)."""
    return keras.Sequential([
        keras.layers.Input(input_shape),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])  # fmt: skip
