"""ailens's own Python per step, on the thread CPU clock, without a framework (a helper to
explain ``--kind attribution``, not an A/B): one rank, a Lens on a simulated clock (``--step-ms``
steps, ``--outliers`` of them 2.5x slower, ``--collectives`` per step), read the way progress
bars read it (``lens.forecast`` every step, ``--no-reads`` for without). The clock is the
Lens's own (injected), so the exchanges, forecast.json rewrites and forecast refreshes come
at the cadence a real run of that step time has; what is timed is this thread's CPU::

    PYTHONPATH=. python benchmarks/overhead/_step_path_cost.py --steps 20000

Prints one ``STEP_PATH {json}`` line: µs of CPU per step, over the steps after the first
``--warmup`` (the forecast's first steps, geometric forecast.json writes)."""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time

from ailens import Lens


class Clock:
    now = 10**9

    def __call__(self) -> int:
        return self.now


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20_000)
    p.add_argument("--warmup", type=int, default=2_000)
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--outliers", type=float, default=0.02, help="share of 2.5x steps")
    p.add_argument("--collectives", type=int, default=8)
    p.add_argument("--no-reads", action="store_true", help="no lens.forecast per step")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--pollute-mb", type=float, default=0.0,
                   help="MB of memory written between steps (untimed), so ailens runs on cold "
                        "caches as after a training step's work")  # fmt: skip
    p.add_argument("--elapsed-share", type=float, default=None,
                   help="exchange_elapsed_share: rounds' spacing as a share of the elapsed "
                        "time (default: the Lens's; 0: a round a second, as before)")  # fmt: skip
    args = p.parse_args()
    clock = Clock()

    class Work:
        kind, unit, fallback_reason = "cpu-ns", "ns", None

        def read(self) -> int:
            return clock.now

        def close(self) -> None:
            pass

    rng = random.Random(args.seed)
    step_ns = int(args.step_ms * 1e6)
    share = {} if args.elapsed_share is None else {"exchange_elapsed_share": args.elapsed_share}
    lens = Lens(run_dir=tempfile.mkdtemp(prefix="ailens-steppath-"), clock=clock,
                work_counter=Work(), total_steps=10 * args.steps, **share)  # fmt: skip
    reads = not args.no_reads
    spent = 0
    junk = bytearray(int(args.pollute_mb * 2**20))
    zeros = bytes(len(junk))  # made once: only the write is wanted between steps
    for i in range(args.steps):
        if junk:
            junk[:] = zeros  # untimed: evicts what the last step's ailens touched
        slow = rng.random() < args.outliers
        dt = int(step_ns * (2.5 if slow else 1 + rng.gauss(0, 0.01)))
        c0 = time.thread_time_ns()
        for _ in range(args.collectives):
            lens.collective_begin("allreduce", 1 << 20)
            lens.collective_end()
        clock.now += dt
        lens.step_end()
        if reads:
            lens.forecast  # noqa: B018 - read as a progress bar does
        if i >= args.warmup:
            spent += time.thread_time_ns() - c0
    n = args.steps - args.warmup
    lens.close()
    print("STEP_PATH " + json.dumps({
        "cpu_us_per_step": round(spent / n / 1e3, 2), "steps": n, "step_ms": args.step_ms,
        "outliers": args.outliers, "collectives": args.collectives, "reads": reads,
        "spikes": len(lens.online.forecaster.level.spikes), "pollute_mb": args.pollute_mb,
        "elapsed_share": lens.config.exchange_elapsed_share,
        "loadavg": list(os.getloadavg()),
    }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
