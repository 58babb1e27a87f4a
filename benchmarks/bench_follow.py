"""What one update of ``ailens forecast LOG --follow`` costs on a long log: a CSV of 100,000
steps (0.5 s each, seeded) is read and fed whole once, as the first read does (in pieces of
2,000 steps here), then grows by 10 rows at a time: each update parses the file again and
feeds the model only the rows it added (``ailens.TimelineReplay``). Feeding from scratch at
every update would cost the first read each time.

    .venv/bin/python benchmarks/bench_follow.py [--steps 100000] [--updates 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

import ailens


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--updates", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    ends = np.cumsum(rng.normal(0.5, 0.02, args.steps + 10 * args.updates))
    rows = [f"{i},{t:.4f}\n" for i, t in enumerate(ends)]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "steps.csv"
        log.write_text("".join(rows[: args.steps]))
        total = 2 * args.steps
        t0 = time.perf_counter()
        tl = ailens.read_timeline(log, total_steps=total)
        t1 = time.perf_counter()
        replay = ailens.TimelineReplay()
        for m in range(2000, tl.steps, 2000):
            replay.feed(tl.head(m))
        replay.feed(tl)
        replay.latest()
        t2 = time.perf_counter()
        print(f"first read of {tl.steps:,} steps: parse {t1 - t0:.2f} s, feed {t2 - t1:.1f} s")
        done = args.steps
        for _ in range(args.updates):
            with log.open("a") as f:
                f.write("".join(rows[done : done + 10]))
            done += 10
            t0 = time.perf_counter()
            tl = ailens.read_timeline(log, total_steps=total)
            t1 = time.perf_counter()
            assert replay.extends(tl)
            replay.feed(tl)
            replay.latest()
            t2 = time.perf_counter()
            print(
                f"update (+10 rows, {tl.steps:,} steps): parse {t1 - t0:.3f} s, "
                f"feed {1e3 * (t2 - t1):.1f} ms, total {t2 - t0:.3f} s"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
