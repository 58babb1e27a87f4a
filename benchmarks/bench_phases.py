"""Benchmarks for ailens.phases, plus the phase-key study (does the payload size help?).

    python benchmarks/bench_phases.py            # full run (about a minute on 2 cores)
    python benchmarks/bench_phases.py --quick    # smaller sizes, for a smoke test

Measures, each as the median of --repeats runs (time.perf_counter):

* offline ``simo`` + ``assign`` throughput on (ticks, 8) int64 work (goal >= 5 M ticks/s);
* online ``OnlinePhases.add`` amortized cost per tick in batches of 256 (goal <= 2 us/tick);
* online memory: RSS after 1 M and 10 M ticks (goal: flat).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

try:
    import ailens.phases as ph
except ImportError:  # running from a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import ailens.phases as ph

RANKS = 8
BATCH = 256
# One training step: four collectives with different work before them (instructions).
STEP_WORK = np.array([3e7, 2e7, 5e5, 8e6])
STEP_OPS = np.array([0, 0, 1, 0])


def synthetic_work(ticks: int, ranks: int = RANKS, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(work, op): per-step pattern, log-normal step jitter and per-rank imbalance."""
    rng = np.random.default_rng(seed)
    reps = -(-ticks // len(STEP_WORK))
    base = np.tile(STEP_WORK, reps)[:ticks]
    op = np.tile(STEP_OPS, reps)[:ticks]
    step_jitter = rng.lognormal(0.0, 0.1, ticks)[:, None]
    rank_imbalance = rng.lognormal(0.0, 0.3, (ticks, ranks))
    return (base[:, None] * step_jitter * rank_imbalance).astype(np.int64), op


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_offline(ticks: int, repeats: int) -> dict[str, float]:
    work, op = synthetic_work(ticks)
    s = ph.simo(work)
    t_simo = median_time(lambda: ph.simo(work), repeats)
    t_assign = median_time(lambda: ph.assign(s, 1, key=op), repeats)
    t_both = median_time(lambda: ph.assign(ph.simo(work), 1, key=op), repeats)
    # Worst case for magnitude(): work spanning 12 decades takes the binary-search path.
    wide = (10 ** np.random.default_rng(9).uniform(0, 12, work.shape)).astype(np.int64)
    t_wide = median_time(lambda: ph.assign(ph.simo(wide), 1, key=op), repeats)
    return {
        "wide_ticks_per_s": ticks / t_wide,
        "ticks": ticks,
        "simo_ticks_per_s": ticks / t_simo,
        "assign_ticks_per_s": ticks / t_assign,
        "ticks_per_s": ticks / t_both,
        "phases": int(ph.assign(s, 1, key=op).max()),
    }


def online_inputs(ticks: int, seed: int = 1):
    work, op = synthetic_work(ticks, seed=seed)
    rng = np.random.default_rng(seed)
    comm = rng.lognormal(-8, 0.5, ticks)
    compute = rng.lognormal(-9, 0.5, ticks)
    return ph.simo(work), op, comm, compute


def bench_online(ticks: int, repeats: int) -> dict[str, float]:
    s, op, comm, compute = online_inputs(ticks)
    starts = range(0, ticks, BATCH)

    def run() -> None:
        online = ph.OnlinePhases(tolerance=1)
        for a in starts:
            b = a + BATCH
            online.add(s[a:b], op[a:b], comm[a:b], compute[a:b])

    t = median_time(run, repeats)
    return {"ticks": ticks, "us_per_tick": 1e6 * t / ticks, "us_per_batch": 1e6 * t / len(starts)}


def bench_memory(total_ticks: int) -> dict[str, float]:
    import psutil

    pool = 1_000_000  # inputs are a reused pool so RSS measures the detector, not the data
    s, op, comm, compute = online_inputs(pool, seed=2)
    proc = psutil.Process()
    online = ph.OnlinePhases(tolerance=1)
    rss = {}
    checkpoints = {1_000_000, total_ticks}
    t0 = time.perf_counter()
    done = 0
    while done < total_ticks:
        a = done % pool
        b = min(a + BATCH, pool, a + total_ticks - done)
        online.add(s[a:b], op[a:b], comm[a:b], compute[a:b])
        done += b - a
        if done in checkpoints:
            rss[done] = proc.memory_info().rss
    elapsed = time.perf_counter() - t0
    table = online.table()
    first = rss.get(1_000_000, rss[total_ticks])
    return {
        "ticks": total_ticks,
        "rss_1m_mb": first / 2**20,
        "rss_end_mb": rss[total_ticks] / 2**20,
        "growth_kb": (rss[total_ticks] - first) / 2**10,
        "phases": online.n_phases,
        "memo": len(online._matcher.memo),
        "seconds": elapsed,
        "table_ticks": table.n_ticks,
    }


# --------------------------------------------------------------------------- key study


def key_study(steps: int = 20_000, seed: int = 3) -> list[dict[str, object]]:
    """Does adding the payload's magnitude to the key help? Two synthetic cases.

    A. Two allreduces per step after the same work (same SIMO) but 4 KB vs 64 MB payloads
       (e.g. a small bias bucket and a large gradient bucket): comm time differs ~1000x.
    B. One allgather whose payload jitters 800..1250 bytes, straddling 10**3, with one
       behaviour (same work, same comm time distribution).

    Reports phases and the time-weighted within-phase coefficient of variation of per-tick
    time (how well "phase mean x weight" describes the ticks; lower is better).
    """
    rng = np.random.default_rng(seed)
    cases = {}
    n = 2 * steps
    op = np.zeros(n, dtype=np.int64)
    nbytes = np.tile([4096, 64 * 2**20], steps)
    comm = 20e-6 + nbytes / 10e9 * rng.lognormal(0, 0.1, n)
    cases["A: 4 KB vs 64 MB allreduce"] = (op, nbytes, comm)
    n = steps
    nbytes = rng.integers(800, 1251, n)
    comm = 30e-6 * rng.lognormal(0, 0.1, n)
    cases["B: allgather 800-1250 B"] = (np.ones(n, dtype=np.int64), nbytes, comm)
    rows = []
    for name, (op, nbytes, comm) in cases.items():
        work = (2e7 * rng.lognormal(0, 0.3, (len(op), RANKS))).astype(np.int64)
        s = ph.simo(work)
        for use_size in (False, True):
            ids = ph.assign(s, 1, key=ph.phase_key(op, nbytes, use_size=use_size))
            rows.append(
                {
                    "case": name,
                    "key": "op+size" if use_size else "op",
                    "phases": int(ids.max()),
                    "cv": within_phase_cv(ids, comm),
                }
            )
    return rows


def within_phase_cv(ids: np.ndarray, t: np.ndarray) -> float:
    """Time-weighted mean over phases of std/mean of per-tick time."""
    total, acc = 0.0, 0.0
    for pid in np.unique(ids):
        x = t[ids == pid]
        acc += x.sum() * (x.std() / x.mean())
        total += x.sum()
    return acc / total


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    repeats = 3 if args.quick else args.repeats

    off = bench_offline(1_000_000 // scale, repeats)
    on = bench_online(1_000_000 // scale, max(3, repeats // 2))
    mem = bench_memory(10_000_000 // scale)
    study = key_study(steps=20_000 // scale)

    print(f"ailens.phases benchmarks (numpy {np.__version__}, {RANKS} ranks, median of {repeats})")
    print(f"{'measure':<44}{'value':>16}  goal")
    rows = [
        (
            f"offline simo+assign, {off['ticks']:,} ticks",
            f"{off['ticks_per_s'] / 1e6:.1f} M ticks/s",
            ">= 5",
        ),
        ("  same, work spanning 12 decades", f"{off['wide_ticks_per_s'] / 1e6:.1f} M ticks/s", ""),
        ("  simo only", f"{off['simo_ticks_per_s'] / 1e6:.1f} M ticks/s", ""),
        ("  assign only", f"{off['assign_ticks_per_s'] / 1e6:.1f} M ticks/s", ""),
        (f"online add, batches of {BATCH}", f"{on['us_per_tick']:.3f} us/tick", "<= 2"),
        ("  per batch", f"{on['us_per_batch']:.1f} us", ""),
        ("online RSS after 1 M ticks", f"{mem['rss_1m_mb']:.1f} MB", ""),
        (f"online RSS after {mem['ticks'] / 1e6:g} M ticks", f"{mem['rss_end_mb']:.1f} MB", "flat"),
        ("  RSS growth", f"{mem['growth_kb']:.0f} KB", ""),
        ("  phases / memo entries", f"{mem['phases']} / {mem['memo']}", ""),
    ]
    for name, value, goal in rows:
        print(f"{name:<44}{value:>16}  {goal}")
    print()
    print("phase-key study (tolerance 1)")
    print(f"{'case':<30}{'key':<9}{'phases':>7}{'within-phase CV':>17}")
    for r in study:
        print(f"{r['case']:<30}{r['key']:<9}{r['phases']:>7}{r['cv']:>17.3f}")


if __name__ == "__main__":
    main()
