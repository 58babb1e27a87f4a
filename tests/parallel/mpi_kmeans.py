"""k-means on real MPI ranks with only the one ``wrap`` line: no ``step_end``, and with
``--no-close`` no ``comm.close()`` either (the run must end by itself at exit). Launched by
tests/test_integration_mpi.py, which reads the trace files afterwards.

argv: RUN_DIR ITERATIONS [--no-close] [--total] [--eval-every N]
(--total: pass total_steps=ITERATIONS; --eval-every: one more scalar allreduce, a held-out
check, every N iterations)
Each rank prints one ``RESULT {json}`` line (its centroids' checksum).
"""

import hashlib
import json
import sys

import numpy as np
from ailens.integrations.mpi import wrap
from mpi4py import MPI

run_dir, iterations = sys.argv[1], int(sys.argv[2])
world = MPI.COMM_WORLD
extra = {"total_steps": iterations} if "--total" in sys.argv else {}
eval_every = int(sys.argv[sys.argv.index("--eval-every") + 1]) if "--eval-every" in sys.argv else 0
comm = wrap(world, run_dir=run_dir, exchange_ticks=16, **extra)  # the one line

rng = np.random.default_rng([7, world.rank])
k, dims = 4, 3
x = rng.standard_normal((2000, dims)) + rng.integers(0, k, 2000)[:, None] * 4.0
centroids = x[:k].copy()
comm.Bcast(centroids, root=0)
sums, counts = np.empty_like(centroids), np.empty(k)
for it in range(iterations):
    d = ((x[:, None, :] - centroids[None]) ** 2).sum(axis=2)
    label = d.argmin(axis=1)
    local_sums = np.stack([x[label == j].sum(axis=0) for j in range(k)])
    local_counts = np.bincount(label, minlength=k).astype(float)
    comm.Allreduce(local_sums, sums, op=MPI.SUM)
    comm.Allreduce(local_counts, counts, op=MPI.SUM)
    inertia = comm.allreduce(float(d.min(axis=1).sum()), op=MPI.SUM)
    centroids = sums / np.maximum(counts, 1)[:, None]
    if eval_every and (it + 1) % eval_every == 0:
        comm.allreduce(float(((x[:50, None, :] - centroids[None]) ** 2).sum()), op=MPI.SUM)
if "--no-close" not in sys.argv:
    comm.close()
checksum = hashlib.sha256(centroids.tobytes()).hexdigest()[:16]
print("RESULT " + json.dumps({"rank": world.rank, "checksum": checksum}), flush=True)
