"""What ailens adds to one k-means iteration, measured A/B inside one run.

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/kmeans/overhead.py

Alternates blocks of iterations that issue the k-means collectives (Allreduce of the
per-cluster sums and counts, allreduce of the inertia) through the raw communicator and
through the ailens-wrapped one, with no compute in between, so the difference is the cost of
the instrumentation (hot path, step inference, cross-rank exchange and online analysis) per
iteration. Alternating blocks cancels the drift of a shared machine that end-to-end runs
suffer from; divide by the example's iteration time for the overhead ratio.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
from ailens.integrations.mpi import wrap
from mpi4py import MPI


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clusters", type=int, default=32)
    p.add_argument("--dims", type=int, default=32)
    p.add_argument("--block", type=int, default=300, help="iterations per block")
    p.add_argument("--pairs", type=int, default=20, help="raw/wrapped block pairs")
    args = p.parse_args()

    world = MPI.COMM_WORLD
    run_dir = world.bcast(tempfile.mkdtemp(prefix="ailens-overhead-") if world.rank == 0 else None)
    lens_comm = wrap(world, run_dir=run_dir)
    sums = np.ones((args.clusters, args.dims))
    counts = np.ones(args.clusters)
    out_s, out_c = np.empty_like(sums), np.empty_like(counts)

    def block(comm) -> float:
        world.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.block):
            comm.Allreduce(sums, out_s, op=MPI.SUM)
            comm.Allreduce(counts, out_c, op=MPI.SUM)
            comm.allreduce(1.0, op=MPI.SUM)
        return (time.perf_counter() - t0) / args.block * 1e6

    added = []
    for _ in range(args.pairs):
        raw = block(world)
        added.append(block(lens_comm) - raw)
    lens_comm.close()
    if world.rank == 0:
        q1, q3 = np.percentile(added, [25, 75])
        print(f"ailens adds {statistics.median(added):.0f} us per k-means iteration (median; "
              f"quartiles {q1:.0f}..{q3:.0f} us; {args.pairs} pairs of {args.block}-iteration "
              f"blocks, {world.Get_size()} ranks, period inferred: "
              f"{lens_comm.inferred_period} collectives)")


if __name__ == "__main__":
    main()
