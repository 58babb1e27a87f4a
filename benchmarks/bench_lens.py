"""Hot-path cost of the Lens, measured with pyperf.

    .venv/bin/python benchmarks/bench_lens.py --fast        # quick look
    .venv/bin/python benchmarks/bench_lens.py -o lens.json  # full run, saved

Benchmarks (µs per call, median of pyperf's values):
- pair/cpu-ns: one collective_begin + collective_end with the cpu-ns counter read at both;
- step_end: one step_end (steps in between exchanges);
- clock reads: time.perf_counter_ns and time.process_time_ns alone, to show where the time goes;
- pair/disabled: the same pair on a disabled Lens (the floor: two Python calls).
"""

import tempfile
import time

import pyperf

from ailens import Lens


def bench_pair(loops: int, lens: Lens) -> float:
    begin, end = lens.collective_begin, lens.collective_end
    t0 = time.perf_counter()
    for _ in range(loops):
        begin("allreduce", 4096)
        end()
    return time.perf_counter() - t0


def bench_step(loops: int, lens: Lens) -> float:
    step = lens.step_end
    t0 = time.perf_counter()
    for _ in range(loops):
        step()
    return time.perf_counter() - t0


def bench_call(loops: int, fn) -> float:
    t0 = time.perf_counter()
    for _ in range(loops):
        fn()
    return time.perf_counter() - t0


def main() -> None:
    runner = pyperf.Runner()
    runner.metadata["description"] = "ailens Lens hot path"
    run_dir = tempfile.mkdtemp(prefix="ailens-bench-")
    lens = Lens(run_dir=run_dir, counter="cpu-ns")
    runner.bench_time_func("pair/cpu-ns", bench_pair, lens)
    runner.bench_time_func("step_end", bench_step, lens)
    runner.bench_time_func("clock/perf_counter_ns", bench_call, time.perf_counter_ns)
    runner.bench_time_func("clock/process_time_ns", bench_call, time.process_time_ns)
    off = Lens(run_dir=run_dir, enabled=False)
    runner.bench_time_func("pair/disabled", bench_pair, off)


if __name__ == "__main__":
    main()
