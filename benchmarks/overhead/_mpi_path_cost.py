"""ailens's Python per collective on the mpi4py path, on the thread CPU clock (a helper to
explain ``--kind attribution``'s ``hooks`` row for ``kmeans_mpi``, not an A/B of step times).

The k-means example's three collectives a step (``Allreduce`` of a 32x32 float64 sum and of
32 counts, ``allreduce`` of a float), in a tight loop, through the raw communicator and
through the ``wrap``-ed one, in alternating blocks (``--pairs`` of them, a ``Barrier``
before each). Each collective call is timed alone with ``time.thread_time_ns``; a pair's
figure is the wrapped block's CPU per collective less the raw block's, and the line reports
the median over pairs.

- ``--work-kb N``: N KiB of numpy work (one read-modify-write pass over an array; on 2 ranks
  then a ``Barrier``, so that the collective does not time the peer's work) before every
  collective, untimed, as the k-means step does between its collectives: the cold-cache
  cost. 32768 and more reach beyond the last-level cache, as k-means's 50 MB shard does.
- ``--steps infer`` (the example's default): the step ends that inference makes inside the
  collectives are in the per-collective figure. ``--steps manual``: ``step_end()`` after
  each iteration, timed apart (``step_end_us``, per step).

Run it on 2 ranks as ``kmeans_mpi`` runs, or on one (no peer to wait for: the cleanest
figure); with ``PYTHONPATH`` at another checkout to compare its ailens::

    mpiexec -n 2 python benchmarks/overhead/_mpi_path_cost.py --steps infer
    python benchmarks/overhead/_mpi_path_cost.py --steps manual --work-kb 65536 --iters 100

Thread CPU includes MPI's busy polling while a rank waits for its peer, so on a loaded
machine the 2-rank figures are noisier: compare runs made side by side. Rank 0 prints one
``MPI_PATH {json}`` line with every rank's median (``us_per_collective``) and its pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import numpy as np
from mpi4py import MPI


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", choices=("infer", "manual"), default="infer")
    p.add_argument("--work-kb", type=int, default=0, help="numpy work before each collective")
    p.add_argument("--iters", type=int, default=2000, help="iterations (3 collectives) a block")
    p.add_argument("--pairs", type=int, default=7)
    p.add_argument("--warmup", type=int, default=300, help="wrapped iterations before timing")
    args = p.parse_args()

    from ailens.integrations.mpi import wrap

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    run_dir = world.bcast(tempfile.mkdtemp(prefix="ailens-mpipath-") if rank == 0 else None)
    lensed = wrap(world, run_dir=run_dir, steps=args.steps)
    local_sums, sums = np.full((32, 32), rank + 1.0), np.empty((32, 32))
    local_counts, counts = np.full(32, rank + 1.0), np.empty(32)
    work = np.ones(max(args.work_kb * 1024 // 8, 1)) if args.work_kb else None
    clock = time.thread_time_ns

    sync = world.Barrier if world.Get_size() > 1 else None

    def cool() -> None:
        """The untimed work, then (2 ranks) a Barrier so the timed collective does not wait
        for the peer's work."""
        if work is not None:
            np.multiply(work, 1.0, out=work)
            if sync is not None:
                sync()

    def block(comm, n: int, manual: bool) -> tuple[int, int]:
        """CPU ns in the collectives and in step_end over ``n`` iterations."""
        spent = ends = 0
        for _ in range(n):
            cool()
            c0 = clock()
            comm.Allreduce(local_sums, sums, op=MPI.SUM)
            c1 = clock()
            cool()
            c2 = clock()
            comm.Allreduce(local_counts, counts, op=MPI.SUM)
            c3 = clock()
            cool()
            c4 = clock()
            comm.allreduce(float(rank), op=MPI.SUM)
            c5 = clock()
            spent += (c1 - c0) + (c3 - c2) + (c5 - c4)
            if manual:
                c6 = clock()
                comm.step_end()
                ends += clock() - c6
        return spent, ends

    manual = args.steps == "manual"
    block(lensed, args.warmup, manual)  # inference commits; caches and the Lens warm up
    diffs, raw_us, ends_us = [], [], []
    per_block = 3 * args.iters
    for _ in range(args.pairs):
        world.Barrier()
        raw, _ = block(world, args.iters, False)
        world.Barrier()
        wrapped, ends = block(lensed, args.iters, manual)
        diffs.append((wrapped - raw) / per_block / 1e3)
        raw_us.append(raw / per_block / 1e3)
        ends_us.append(ends / args.iters / 1e3)
    lens = lensed.lens
    mine = {
        "us_per_collective": round(statistics.median(diffs), 2),
        "raw_us_per_collective": round(statistics.median(raw_us), 2),
        "step_end_us": round(statistics.median(ends_us), 2) if manual else None,
        "pairs_us": [round(d, 2) for d in diffs],
        "ticks": lens.ticks,
        "steps": lens.steps,
        "disabled": lens.disabled,
    }
    everyone = world.gather(mine, root=0)
    lensed.close()
    if rank == 0:
        line = {"steps": args.steps, "work_kb": args.work_kb, "ranks": world.Get_size(),
                "iters": args.iters, "pairs": args.pairs, "loadavg": list(os.getloadavg()),
                "ranks_results": everyone}  # fmt: skip
        print("MPI_PATH " + json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
