"""Bounded resources: trace bytes per event, and the Lens' memory over a long run.

    .venv/bin/python benchmarks/bench_trace_size.py size --events 10000000
    .venv/bin/python benchmarks/bench_trace_size.py memory --ticks 10000000

``size`` writes a realistic synthetic trace the way the Lens does (chunks of
``LensConfig.chunk_events`` events through ``TraceWriter``, plus step chunks and the closing
record) and reports the file's bytes per event. The pattern is a DDP step: one buffer
broadcast, 24 gradient-bucket allreduces overlapping the backward pass and a loss allreduce;
compute gaps and durations jitter log-normally (ns clocks never repeat exactly), work is CPU
ns or instructions. ``--counter instructions`` switches the work column.

``memory`` drives a real single-process ``Lens`` with begin/end pairs (step_end every 100
ticks, the online phase detection and the writer thread running) and samples the process
RSS; it reports the growth after warm-up (first sample at 1e5 ticks) to the end.

``--json`` prints one JSON object instead of the table (tests/test_resources.py uses it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ailens import Lens, LensConfig, load_run
from ailens.record import TraceWriter

PER_STEP = 26  # broadcast + 24 buckets + loss allreduce


def realistic_chunk(
    rng: np.random.Generator, start: int, n: int, t0: int, counter: str
) -> tuple[dict[str, np.ndarray], int]:
    """Columns for ticks [start, start + n) of the DDP-like pattern, absolute times from t0."""
    k = np.arange(start, start + n)
    pos = k % PER_STEP
    op = np.where(pos == 0, 1, 0).astype(np.uint16)  # 0 allreduce, 1 broadcast
    nbytes = np.where(pos == 0, 4096, np.where(pos == PER_STEP - 1, 4, 25 << 20))
    nbytes[pos == PER_STEP - 2] = 7 << 20  # the last, smaller bucket
    # Forward before the first bucket is long; buckets come every ~2 ms during backward.
    gap = np.where(
        pos == 1, rng.lognormal(np.log(40e6), 0.05, n), rng.lognormal(np.log(2e6), 0.15, n)
    )
    dur = rng.lognormal(np.log(3e6), 0.25, n)
    dur[pos == 0] = rng.lognormal(np.log(40e3), 0.3, (pos == 0).sum())
    t_begin = t0 + np.cumsum(gap).astype(np.int64)
    t_end = t_begin + dur.astype(np.int64)  # ends after the next begin: overlap, as in DDP
    ipc = 2.5 if counter == "instructions" else 0.97
    work = (gap * rng.normal(ipc, 0.03 * ipc, n)).astype(np.int64)
    cols = {
        "op": op,
        "step": (k // PER_STEP).astype(np.uint32),
        "nbytes": nbytes.astype(np.int64),
        "t_begin": t_begin,
        "t_end": t_end,
        "work": work,
    }
    return cols, int(t_begin[-1])


def trace_size(events: int, run_dir: Path, counter: str = "cpu-ns", seed: int = 0) -> dict:
    """Write ``events`` realistic events to run_dir/rank-00000.ailens; bytes per event."""
    chunk = LensConfig().chunk_events
    rng = np.random.default_rng(seed)
    path = run_dir / "rank-00000.ailens"
    meta = {
        "format_version": 1,
        "rank": 0,
        "world_size": 1,
        "counter": counter,
        "run_id": "bench",
        "config": LensConfig(run_dir=run_dir).to_dict(),
    }
    t = time.perf_counter()
    w = TraceWriter(path, meta)
    w.write_ops(["allreduce", "broadcast"])
    t0, done, steps_written = 0, 0, 0
    while done < events:
        n = min(chunk, events - done)
        cols, t0 = realistic_chunk(rng, done, n, t0, counter)
        w.write_events(cols)
        done += n
        last_step = int(cols["step"][-1])
        s = np.arange(steps_written, last_step, dtype=np.uint32)
        if len(s):  # step ends, as the Lens flushes them
            back = (last_step - s).astype(np.int64)
            w.write_steps(
                {"step": s, "t_ns": t0 - back * 90_000_000, "work": s.astype(np.int64) * 87_000_000}
            )
            steps_written = last_step
    w.write_info({"closed": True, "disabled": None, "ticks": events})
    w.close()
    write_s = time.perf_counter() - t
    size = path.stat().st_size
    t = time.perf_counter()
    n_read = load_run(path).ranks[0].n_events
    return {
        "events": events,
        "bytes": size,
        "bytes_per_event": size / events,
        "counter": counter,
        "chunk_events": chunk,
        "write_s": write_s,
        "read_s": time.perf_counter() - t,
        "read_events": n_read,
    }


def lens_memory(
    ticks: int, run_dir: Path, every: int = 100, first: int = 100_000, samples: int = 10
) -> dict:
    """Feed a real Lens ``ticks`` begin/end pairs; RSS (MB) at ``first`` ticks and after."""
    import psutil

    proc = psutil.Process()
    marks = sorted({first, *np.linspace(first, ticks, samples, dtype=int).tolist()})
    rss = {}
    lens = Lens(run_dir=run_dir, counter="cpu-ns")
    begin, end, step = lens.collective_begin, lens.collective_end, lens.step_end
    ops = ("allreduce", "broadcast")
    t = time.perf_counter()
    mark_iter = iter(marks)
    next_mark = next(mark_iter)
    for i in range(1, ticks + 1):
        begin(ops[i % 7 == 0], 4096)
        end()
        if i % every == 0:
            step()
        if i == next_mark:
            rss[i] = proc.memory_info().rss / 1e6
            next_mark = next(mark_iter, 0)
    elapsed = time.perf_counter() - t
    lens.close()
    size = (run_dir / "rank-00000.ailens").stat().st_size
    return {
        "ticks": ticks,
        "rss_mb": rss,
        "growth_mb": rss[ticks] - rss[first],
        "per_pair_us": elapsed / ticks * 1e6,
        "trace_bytes_per_event": size / ticks,
        "disabled": lens.disabled,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    s = sub.add_parser("size", help="bytes per event of a realistic trace")
    s.add_argument("--events", type=int, default=10_000_000)
    s.add_argument("--counter", choices=("cpu-ns", "instructions"), default="cpu-ns")
    m = sub.add_parser("memory", help="RSS of a Lens over a long run")
    m.add_argument("--ticks", type=int, default=10_000_000)
    for p in (s, m):
        p.add_argument("--json", action="store_true")
        p.add_argument("--dir", type=Path, default=None, help="where to write (default: temp dir)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ailens-bench-", dir=args.dir) as d:
        if args.what == "size":
            r = trace_size(args.events, Path(d), args.counter)
        else:
            r = lens_memory(args.ticks, Path(d))
    if args.json:
        print(json.dumps(r))
    elif args.what == "size":
        print(
            f"{r['events']:,} events ({r['counter']}): {r['bytes']:,} bytes on disk = "
            f"{r['bytes_per_event']:.2f} bytes/event  (write {r['write_s']:.1f} s, "
            f"read back {r['read_s']:.1f} s)"
        )
    else:
        for k, v in r["rss_mb"].items():
            print(f"  {k:>12,} ticks  RSS {v:8.1f} MB")
        print(
            f"{r['ticks']:,} ticks: RSS growth after {min(r['rss_mb']):,} ticks = "
            f"{r['growth_mb']:+.1f} MB; {r['per_pair_us']:.2f} µs per begin/end pair; "
            f"trace {r['trace_bytes_per_event']:.2f} bytes/event"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
