"""A/B inside one run, shared by every rank script of ``benchmarks/overhead/``.

A case gives two functions that run ``n`` training steps: ``plain(n)`` without ailens (the raw
communicator, a model without the hook) and ``lensed(n)`` with it. :func:`measure` sizes the
blocks from a few timed steps, runs one discarded warm-up block of each, then ``pairs`` pairs of
blocks in alternating order (plain first, then lensed first, ...), so the drift of a shared
machine cancels. Every block starts behind ``sync()`` (a barrier) and is timed on each rank;
rank 0's times are the figures. :func:`emit` prints the ``OVERHEAD {json}`` line that
``bench_overhead.py`` collects.

Ratio: the mean over pairs of (lensed mean step time / plain mean step time); ``ci95``: the
Student-t 95 % interval of that mean over the pairs.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from ailens.record import IMPLEMENTATION

# Student-t 0.975 quantiles by degrees of freedom (1..30); the normal 1.96 beyond.
# fmt: off
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
# fmt: on


def t975(df: int) -> float:
    """Two-sided 95 % Student-t quantile."""
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96


@dataclass(frozen=True)
class Result:
    """Per-pair mean step times (seconds) of the plain and the lensed blocks."""

    plain: list[float]
    lensed: list[float]
    block_steps: int

    @property
    def ratios(self) -> list[float]:
        return [b / a for a, b in zip(self.plain, self.lensed, strict=True)]

    @property
    def ratio(self) -> float:
        return statistics.fmean(self.ratios)

    @property
    def ci95(self) -> tuple[float, float]:
        r = self.ratios
        if len(r) < 2:
            return (math.nan, math.nan)
        half = t975(len(r) - 1) * statistics.stdev(r) / math.sqrt(len(r))
        return (self.ratio - half, self.ratio + half)

    @property
    def step_ms(self) -> float:
        """Mean step time without ailens."""
        return statistics.fmean(self.plain) * 1e3

    @property
    def added_us(self) -> float:
        """Mean time ailens adds per step (lensed minus plain)."""
        return statistics.fmean(b - a for a, b in zip(self.plain, self.lensed, strict=True)) * 1e6


def measure(
    plain: Callable[[int], None],
    lensed: Callable[[int], None],
    *,
    pairs: int,
    block_s: float,
    sync: Callable[[], None],
    share: Callable[[int], int],
    min_steps: int = 1,
) -> Result:
    """Run the A/B protocol above. ``sync()``: a barrier; ``share(n)``: rank 0's ``n`` on every
    rank (all ranks must run the same number of steps)."""

    def block(fn: Callable[[int], None], n: int) -> float:
        sync()
        t0 = time.perf_counter()
        fn(n)
        return (time.perf_counter() - t0) / n

    # Size the blocks: one untimed step of each (first-call set-up), then a few timed ones.
    plain(1), lensed(1)
    probe = max(1, min_steps)
    step_s = block(plain, probe)
    n = share(max(min_steps, round(block_s / max(step_s, 1e-9))))
    block(plain, n), block(lensed, n)  # warm-up, discarded
    a, b = [], []
    for i in range(pairs):
        if i % 2 == 0:
            a.append(block(plain, n))
            b.append(block(lensed, n))
        else:
            b.append(block(lensed, n))
            a.append(block(plain, n))
    return Result(a, b, n)


def emit(name: str, framework: str, result: Result, *, ranks: int, **extra) -> None:
    """Print the ``OVERHEAD {json}`` line (call on rank 0 only)."""
    lo, hi = result.ci95
    line = {
        "name": name,
        "framework": framework,
        "step_ms": round(result.step_ms, 4),
        "ratio": round(result.ratio, 5),
        "ci95": [round(lo, 5), round(hi, 5)],
        "added_us": round(result.added_us, 2),
        "pairs": len(result.plain),
        "block_steps": result.block_steps,
        "ranks": ranks,
        "loadavg": list(os.getloadavg()),
        "recorder": IMPLEMENTATION,  # the compiled hot path ("c") or the Python one
        "pair_step_ms": [  # per pair: mean step time of the plain block, of the lensed block
            [round(a * 1e3, 4), round(b * 1e3, 4)]
            for a, b in zip(result.plain, result.lensed, strict=True)
        ],
        **extra,
    }
    print_line("OVERHEAD " + json.dumps(line))


def print_line(line: str) -> None:
    """``line`` to stdout in one write: the ranks share one pipe, and a write of up to 4 KiB
    to a pipe is never interleaved with another process's (a buffered print can be split)."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def add_common_args(parser) -> None:
    """The arguments ``bench_overhead.py`` passes to every rank script."""
    parser.add_argument("--pairs", type=int, default=20, help="plain/lensed block pairs")
    parser.add_argument("--block-s", type=float, default=1.0, help="target seconds per block")
    parser.add_argument(
        "--attribution",
        nargs="?",
        const="full",
        choices=("full", "lean"),
        help="also time ailens's parts directly (_attribution.py); every rank prints its "
        "ATTRIBUTION line. lean: no timers of their own inside the adapter's wrappers on the "
        "per-collective path (begin/end, the event buffer)",
    )


class Unpatched:
    """``with unpatched:`` the framework functions ailens replaced (in modules named with one
    of ``prefixes``, e.g. ``"torch.distributed"``, ``"horovod"``) are the originals again, so
    the plain blocks run without any ailens code, not merely through a disabled wrapper.
    Build it after ``attach``."""

    def __init__(self, *prefixes: str) -> None:
        import sys

        self._swaps = []
        for mod_name, mod in list(sys.modules.items()):
            if mod is None or not mod_name.startswith(prefixes):
                continue
            for attr, value in list(vars(mod).items()):
                real = getattr(value, "__wrapped__", None)
                if real is not None and str(getattr(value, "__module__", "")).startswith("ailens."):
                    self._swaps.append((mod, attr, value, real))

    def __len__(self) -> int:
        return len(self._swaps)

    def __enter__(self) -> None:
        for mod, attr, _, real in self._swaps:
            setattr(mod, attr, real)

    def __exit__(self, *exc) -> None:
        for mod, attr, wrapper, _ in self._swaps:
            setattr(mod, attr, wrapper)
