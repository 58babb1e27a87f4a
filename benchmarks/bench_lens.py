"""Hot-path cost of the Lens, against the clock reads it cannot avoid, in one process.

    .venv/bin/python benchmarks/bench_lens.py                  # ~20 s
    .venv/bin/python benchmarks/bench_lens.py --rounds 30 --json lens.json

Every benchmark runs ``--loops`` iterations of the same loop shape (two calls per iteration),
once per round, in a shuffled order each round, so the drift of a shared machine hits all of
them alike; the figure is the median over rounds in ns per iteration, and each ratio the
median over rounds of the per-round ratio (with its min..max).

- ``reads/2x process_time_ns``: the two CPU-time reads a recorded collective needs (the floor
  of the cpu-ns path: ``CLOCK_PROCESS_CPUTIME_ID`` is a real syscall, no vDSO);
- ``reads/2x perf_counter_ns``: two wall-clock reads (vDSO);
- ``lens/pair cpu-ns``: ``collective_begin`` + ``collective_end`` on a Lens with the cpu-ns
  counter, including its amortised flush every ``chunk_events`` collectives (per-tick
  summary, hand-off to the writer thread, which compresses concurrently); ``[c]`` with the
  compiled buffer, ``[python]`` with the pure-Python one;
- ``buffer/pair cpu-ns``: the event buffer alone (its flush only moves rows);
- ``buffer/pair wall-only``: the buffer with no work counter (``read_work=None``): what a pair
  costs when only the wall clock is read;
- ``lens/step_end + pair``: a step end with one pair in the step, on a fresh Lens each round
  (at most 2000 steps: a step end's cost depends on the run's history, the online forecast);
- ``lens/pair disabled``: the pair on a disabled Lens.

The goal (issue 14): ``lens/pair cpu-ns [c]`` within 1.25x of ``reads/2x process_time_ns``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import _harness as harness

from ailens import Lens
from ailens.record import IMPLEMENTATION, NativeEventBuffer, PyEventBuffer, using_event_buffer


def loop_pair(n: int, begin: Callable, end: Callable) -> None:
    for _ in range(n):
        begin("allreduce", 4096)
        end()


def loop_two(n: int, f: Callable, g: Callable) -> None:
    for _ in range(n):
        f()
        g()


def lens_with(impl: type, run_dir: str, **kw) -> Lens:
    """A Lens whose event buffer is ``impl`` (ailens picks one at import; choose here)."""
    with using_event_buffer(impl):
        return Lens(run_dir=run_dir, **kw)


def buffer_with(impl: type, read_work: Callable[[], int] | None):
    buf = impl(
        4096,
        clock=time.perf_counter_ns,
        read_work=read_work,
        t0=time.perf_counter_ns(),
        work0=read_work() if read_work else 0,
        intern=lambda op: 0,
        on_fault=print,
    )

    def flush() -> None:
        with buf.lock:
            buf.drop_front(buf.complete_rows(False, 1 << 20))

    buf.on_full = flush
    return buf


def step_end_pairs(run_dir: str, n: int) -> float:
    """ns per step of ``n`` (at most 2000) steps of one pair each, on a fresh Lens."""
    lens = Lens(run_dir=tempfile.mkdtemp(dir=run_dir), counter="cpu-ns")
    begin, end, step_end = lens.collective_begin, lens.collective_end, lens.step_end
    n = min(n, 2000)
    t0 = time.perf_counter_ns()
    for _ in range(n):
        begin("allreduce", 4096)
        end()
        step_end()
    dt = time.perf_counter_ns() - t0
    lens.close()
    return dt / n


def make_benches(run_dir: str) -> tuple[dict[str, Callable[[int], float | None]], list[Lens]]:
    """The benchmarks by name (each runs ``n`` iterations; returns None or its own ns per
    iteration) and the Lenses they use (close them after)."""
    impls = {"python": PyEventBuffer}
    if NativeEventBuffer is not None:
        impls["c"] = NativeEventBuffer
    pt, pc = time.process_time_ns, time.perf_counter_ns
    benches: dict[str, Callable[[int], float | None]] = {
        "reads/2x process_time_ns": lambda n: loop_two(n, pt, pt),
        "reads/2x perf_counter_ns": lambda n: loop_two(n, pc, pc),
    }
    lenses = []
    for name, impl in impls.items():
        lens = lens_with(impl, os.path.join(run_dir, name), counter="cpu-ns")
        lenses.append(lens)
        benches[f"lens/pair cpu-ns [{name}]"] = lambda n, lens=lens: loop_pair(
            n, lens.collective_begin, lens.collective_end
        )
        for what, read_work in (("cpu-ns", pt), ("wall-only", None)):
            buf = buffer_with(impl, read_work)
            benches[f"buffer/pair {what} [{name}]"] = lambda n, b=buf: loop_pair(n, b.begin, b.end)
    off = Lens(run_dir=run_dir, enabled=False)
    lenses.append(off)
    benches["lens/step_end + pair"] = lambda n: step_end_pairs(run_dir, n)
    benches["lens/pair disabled"] = lambda n: loop_pair(n, off.collective_begin, off.collective_end)
    return benches, lenses


def sample(benches: dict, rounds: int, loops: int) -> dict[str, list[float]]:
    """ns per iteration of each benchmark, once per round, in a shuffled order each round
    (after a warm-up)."""
    for fn in benches.values():  # warm-up: first-call set-up, op interning, caches
        fn(loops // 10 + 1)
    samples: dict[str, list[float]] = {name: [] for name in benches}
    order = list(benches)
    rng = random.Random(0)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter_ns()
            ns = benches[name](loops)  # None, or its own ns per iteration
            samples[name].append(ns or (time.perf_counter_ns() - t0) / loops)
    return samples


def figures(samples: dict[str, list[float]]) -> list[dict]:
    """Per benchmark: the median ns and the ratio to the two CPU-time reads, round by round."""
    ref = samples["reads/2x process_time_ns"]
    rows = []
    for name, ns in samples.items():
        ratios = [a / b for a, b in zip(ns, ref, strict=True)]
        rows.append(
            {
                "name": name,
                "ns": round(statistics.median(ns), 1),
                "ratio_to_2_cpu_reads": round(statistics.median(ratios), 3),
                "ratio_min": round(min(ratios), 3),
                "ratio_max": round(max(ratios), 3),
            }
        )
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--loops", type=int, default=20000, help="iterations per benchmark and round")
    p.add_argument("--json", metavar="OUT", help="write the figures to this JSON file")
    args = p.parse_args()

    run_dir = tempfile.mkdtemp(prefix="ailens-bench-")
    benches, lenses = make_benches(run_dir)
    samples = sample(benches, args.rounds, args.loops)
    for lens in lenses:
        lens.close()
    shutil.rmtree(run_dir, ignore_errors=True)

    rows = figures(samples)
    load = harness.loadavg()
    print(f"{'benchmark':<32} {'ns/iter':>8} {'/ 2 cpu reads':>14} {'(min..max)':>14}")
    for r in rows:
        print(f"{r['name']:<32} {r['ns']:>8.1f} {r['ratio_to_2_cpu_reads']:>14.3f} "
              f"{r['ratio_min']:>6.3f}..{r['ratio_max']:<6.3f}")  # fmt: skip
    print(f"compiled hot path: {'in use' if IMPLEMENTATION == 'c' else 'NOT BUILT'}; "
          f"{args.rounds} rounds x {args.loops} iterations; load average {load[0]:.2f} "
          f"{load[1]:.2f} {load[2]:.2f}")  # fmt: skip
    if args.json:
        doc = {"rows": rows, "loadavg": load, "rounds": args.rounds, "loops": args.loops,
               "implementation": IMPLEMENTATION, "python": sys.version}  # fmt: skip
        harness.write_json(args.json, doc, newline=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
