"""The k-means example (mpi4py; examples/kmeans/kmeans.py), A/B: the raw communicator vs the
one ``wrap`` line.

An iteration is the example's: assign this rank's points to the nearest centroid, then
``Allreduce`` the per-cluster sums and counts and ``allreduce`` the inertia. Plain blocks use
``MPI.COMM_WORLD``, lensed blocks the ``wrap``-ed communicator (steps inferred from the
repeating collectives, as in the example), both with the same data and centroids.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import _attribution
import numpy as np
from _ab import add_common_args, emit, measure
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "kmeans"))
from kmeans import local_step, make_shard  # noqa: E402

CASE = {"name": "kmeans_mpi", "framework": "mpi4py"}  # the row in bench_overhead.CASES


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p)
    p.add_argument("--points", type=int, default=400_000, help="total, split across ranks")
    p.add_argument("--dims", type=int, default=32)
    p.add_argument("--clusters", type=int, default=32)
    args = p.parse_args()

    from ailens.integrations.mpi import wrap

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    run_dir = world.bcast(tempfile.mkdtemp(prefix="ailens-overhead-") if rank == 0 else None)
    lensed_comm = wrap(world, run_dir=run_dir)  # the one line
    profiler = _attribution.profiler_for(args)
    if profiler is not None:
        profiler.attach_handle(lensed_comm)
    x = make_shard(args.points, args.dims, args.clusters, 7, rank, size)
    x2 = np.einsum("ij,ij->i", x, x)
    centroids = np.array(x[: args.clusters])
    world.Bcast(centroids, root=0)
    sums, counts = np.empty_like(centroids), np.empty(args.clusters)

    def iterations(comm):
        def run(n: int) -> None:
            for _ in range(n):
                local_sums, local_counts, local_inertia = local_step(x, x2, centroids)
                comm.Allreduce(local_sums, sums, op=MPI.SUM)
                comm.Allreduce(local_counts, counts, op=MPI.SUM)
                comm.allreduce(local_inertia, op=MPI.SUM)
                nonempty = counts > 0
                centroids[nonempty] = sums[nonempty] / counts[nonempty, None]

        return run

    lensed = iterations(lensed_comm)
    if profiler is not None:
        lensed = profiler.count_steps(lensed)
    result = measure(iterations(world), lensed, pairs=args.pairs,
                     block_s=args.block_s, sync=world.Barrier,
                     share=lambda n: world.bcast(n, root=0))  # fmt: skip
    lens = lensed_comm.lens
    ticks, steps, disabled = lens.ticks, lens.steps, lens.disabled
    if profiler is not None:
        profiler.read_threads()
        profiler.restore()
    lensed_comm.close()
    if rank == 0:
        per_step = round(ticks / max(steps, 1), 2)
        emit(CASE["name"], CASE["framework"], result, ranks=size,
             collectives_per_step=per_step, ailens_disabled=disabled)  # fmt: skip
    if profiler is not None:
        _attribution.emit(profiler, steps, rank=rank, name=CASE["name"],
                          added_us=round(result.added_us, 2))  # fmt: skip


if __name__ == "__main__":
    main()
