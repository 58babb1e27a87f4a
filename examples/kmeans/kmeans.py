"""k-means with mpi4py, one rank of it; launched by ``examples/kmeans/run``.

Each rank generates its shard of a seeded clustered data set, assigns its points to the
nearest centroid (the compute, ~99 % of the time at the default size), and every iteration
the ranks ``Allreduce`` the per-cluster sums and counts and the inertia. Like a real job it
also evaluates (the inertia of held-out points, every ``--eval-every`` iterations) and
checkpoints (rank 0 saves the centroids every ``--checkpoint-every`` iterations). ailens is
the one ``wrap`` line; it infers the iteration from the repeating collectives.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

CHUNK = 16384  # rows per distance block: keeps the block in cache and memory flat


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="k-means, one MPI rank")
    p.add_argument("--run-dir", default="runs/kmeans")
    p.add_argument("--no-lens", action="store_true")
    p.add_argument("--early-stop", action="store_true")
    p.add_argument("--points", type=int, default=400_000, help="total, split across ranks")
    p.add_argument("--dims", type=int, default=32)
    p.add_argument("--clusters", type=int, default=32)
    p.add_argument("--iterations", type=int, default=60)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--progress-every", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2, help="iterations left out of the mean")
    p.add_argument("--eval-every", type=int, default=10,
                   help="iterations between held-out inertia checks (0: none)")
    p.add_argument("--checkpoint-every", type=int, default=25,
                   help="iterations between centroid checkpoints on rank 0 (0: none)")
    return p.parse_args()


def make_shard(
    n_total: int, dims: int, k: int, seed: int, rank: int, size: int, stream: int = 0
) -> np.ndarray:
    """This rank's points: Gaussian blobs around k seeded centres (the same centres on every
    rank, points from a per-rank stream), so the data set does not depend on timing.
    ``stream`` 1 gives the held-out points."""
    centres = np.random.default_rng(seed).uniform(-10, 10, size=(k, dims))
    n = n_total // size + (rank < n_total % size)
    rng = np.random.default_rng([seed, rank, stream])
    labels = rng.integers(0, k, size=n)
    return centres[labels] + rng.standard_normal((n, dims))


def local_step(x: np.ndarray, x2: np.ndarray, c: np.ndarray):
    """Per-cluster sums and counts of the points nearest to each centroid, and the inertia."""
    k, dims = c.shape
    sums = np.zeros((k, dims))
    counts = np.zeros(k)
    inertia = 0.0
    c2 = np.einsum("ij,ij->i", c, c)
    eye = np.eye(k)
    for lo in range(0, len(x), CHUNK):
        xb = x[lo : lo + CHUNK]
        d = c2 - 2.0 * (xb @ c.T)           # |x|^2 is constant per row: not needed for argmin
        lab = d.argmin(axis=1)
        inertia += float(d[np.arange(len(xb)), lab].sum() + x2[lo : lo + CHUNK].sum())
        onehot = eye[lab]
        sums += onehot.T @ xb
        counts += onehot.sum(axis=0)
    return sums, counts, inertia


def save_checkpoint(path: Path, centroids: np.ndarray) -> None:
    """Write atomically and to disk, as a real checkpoint must survive a crash."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    with open(tmp, "wb") as f:
        np.save(f, centroids)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main() -> int:
    args = parse_args()
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    comm = world
    if not args.no_lens:
        from ailens.integrations.mpi import wrap

        # The one line: every collective below is recorded; iterations are inferred.
        comm = wrap(world, run_dir=args.run_dir, total_steps=args.iterations,
                    progress_every=args.progress_every, early_stop=args.early_stop)

    x = make_shard(args.points, args.dims, args.clusters, args.seed, rank, size)
    x2 = np.einsum("ij,ij->i", x, x)
    held = make_shard(args.points // 10, args.dims, args.clusters, args.seed, rank, size, 1)
    held2 = np.einsum("ij,ij->i", held, held)
    centroids = np.empty((args.clusters, args.dims))
    if rank == 0:  # initial centroids: k points of rank 0's shard, seeded
        pick = np.random.default_rng(args.seed + 1).choice(len(x), args.clusters, replace=False)
        centroids[:] = x[pick]
    comm.Bcast(centroids, root=0)

    sums = np.empty_like(centroids)
    counts = np.empty(args.clusters)
    times: list[float] = []
    done = 0
    for it in range(args.iterations):
        t0 = time.perf_counter()
        local_sums, local_counts, local_inertia = local_step(x, x2, centroids)
        comm.Allreduce(local_sums, sums, op=MPI.SUM)
        comm.Allreduce(local_counts, counts, op=MPI.SUM)
        inertia = comm.allreduce(local_inertia, op=MPI.SUM)
        nonempty = counts > 0  # an empty cluster keeps its centroid
        centroids[nonempty] = sums[nonempty] / counts[nonempty, None]
        done = it + 1
        if args.eval_every and done % args.eval_every == 0:
            held_inertia = comm.allreduce(local_step(held, held2, centroids)[2], op=MPI.SUM)
            if rank == 0 and args.progress_every:
                print(f"iteration {done}: held-out inertia {held_inertia:.6e}", flush=True)
        if args.checkpoint_every and done % args.checkpoint_every == 0 and rank == 0:
            save_checkpoint(Path(args.run_dir) / "centroids.npy", centroids)
        times.append(time.perf_counter() - t0)
        if rank == 0 and args.progress_every and done % args.progress_every == 0:
            print(f"iteration {done}/{args.iterations}: inertia {inertia:.6e}, "
                  f"{times[-1] * 1e3:.1f} ms", flush=True)
        if not args.no_lens and comm.should_stop:
            if rank == 0:
                print(f"ailens: signature ready, stopping after {done} iterations", flush=True)
            break
    if not args.no_lens:
        comm.close()

    checksum = hashlib.sha256(centroids.tobytes()).hexdigest()[:16]
    print(f"rank {rank}: iterations={done} inertia={inertia:.10e} centroids_sha256={checksum}",
          flush=True)
    kept = times[args.warmup:]
    mean = sum(kept) / len(kept) * 1e3 if kept else float("nan")
    if rank == 0:
        print(f"STEP_TIME mean_ms={mean:.3f} steps={len(kept)} warmup={args.warmup}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
