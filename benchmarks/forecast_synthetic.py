"""Synthetic runs with known answers (``bench_forecast.py corpus``): a real Lens driven by a
fake clock through a scripted run: steady, noisy, evaluation marked or not, checkpoints,
changes of speed, one-off pauses, drift."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import ailens


class FakeClock:
    def __init__(self) -> None:
        self.now = 10**9

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(round(seconds * 1e9))


class FakeCounter:
    kind, unit, fallback_reason = "cpu-ns", "ns", None

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def read(self) -> int:
        return self.clock.now  # one busy core: work = time

    def close(self) -> None:
        pass


def synthetic(name: str, run_dir: Path, seed: int = 0) -> list[str]:
    """Drive a real Lens through a scripted run with a fake clock; returns its structure."""
    rng = np.random.default_rng(seed)
    n, m = 2000, 0.1
    d = rng.normal(m, 0.05 * m, n)
    structure: list[str] = []
    sections: dict[int, tuple[str, float]] = {}
    schedule: dict = {}
    if name == "steady-cv2":
        d = rng.normal(m, 0.02 * m, n)
    elif name == "steady-cv10":
        d = rng.normal(m, 0.10 * m, n)
    elif name == "noisy-machine":  # 4 % of the steps 2-4x slower: another job's bursts
        slow = rng.random(n) < 0.04
        d[slow] *= rng.uniform(2, 4, slow.sum())
        structure.append("noise")
    elif name == "eval-marked":  # an evaluation section after each epoch, schedule known
        schedule = {"steps_per_epoch": 100, "eval_every_epochs": 1, "eval_steps": 30}
        sections = {k: ("eval", rng.normal(1.0, 0.05)) for k in range(100, n + 1, 100)}
        structure.append("eval")
    elif name == "eval-in-steps":  # a plain loop: the evaluation makes an epoch's first step long
        schedule = {"steps_per_epoch": 50}
        d[50::50] += 0.5
        structure.append("eval")
    elif name == "eval-and-checkpoint-unknown":  # nothing said: both learned from the steps
        d[24::25] += 0.5
        d[99::100] += 1.0
        structure += ["eval", "checkpoint"]
    elif name == "slowdown":  # another job takes the cores at 3 % of the steps and stays
        d[60:] *= 1.3
        structure.append("slowdown")
    elif name == "burst":  # another job from 2 to 4 % of the steps
        d[40:80] *= 1.5
        structure.append("slowdown")
    elif name == "long-warmup":
        d[:30] *= np.linspace(4, 1, 30)
        structure.append("warm-up")
    elif name == "gc-pauses":  # three one-off pauses, far apart
        d[[120, 900, 1600]] += 2.0
        structure.append("one-offs")
    elif name == "drift":  # thermal throttling: 20 % slower by the end
        d *= np.linspace(1, 1.2, n)
        structure.append("slowdown")
    else:
        raise ValueError(name)
    d = np.clip(d, 0.2 * m, None)
    clock = FakeClock()
    lens = ailens.Lens(
        run_dir=run_dir,
        clock=clock,
        work_counter=FakeCounter(clock),
        total_steps=n,
        framework="synthetic",
    )
    if schedule:
        lens.set_schedule(**schedule)
    clock.advance(0.5)  # start-up before the first step
    for i, x in enumerate(d):
        clock.advance(0.8 * x)
        lens.collective_begin("allreduce", 4 << 20)
        clock.advance(0.2 * x)
        lens.collective_end()
        lens.step_end()
        if i + 1 in sections:
            what, secs = sections[i + 1]
            lens.section_begin(what)
            clock.advance(secs)
            lens.section_end()
    lens.close()
    return structure


SYNTHETIC = (
    "steady-cv2",
    "steady-cv10",
    "noisy-machine",
    "eval-marked",
    "eval-in-steps",
    "eval-and-checkpoint-unknown",
    "slowdown",
    "burst",
    "long-warmup",
    "gc-pauses",
    "drift",
)
