"""Two real MPI ranks drive a plain Lens with different work per rank; each writes its
online phase table and how long its close() took. Launched by tests/test_lens_parallel.py
under mpiexec: ``plain_lens_mpi.py RUN_DIR STEPS [WORK]`` (WORK 0: collectives only)."""

import json
import sys
import time

import numpy as np
from mpi4py import MPI

import ailens

comm = MPI.COMM_WORLD


def exchange(a: np.ndarray) -> np.ndarray:
    out = np.empty_like(a)
    comm.Allreduce(a, out, op=MPI.SUM)
    return out


run_dir, steps = sys.argv[1], int(sys.argv[2])
work = int(sys.argv[3]) if len(sys.argv) > 3 else 1
lens = ailens.Lens(
    run_dir=run_dir,
    rank=comm.rank,
    world_size=comm.size,
    exchange=exchange,
    exchange_ticks=16,
    framework="mpi4py-plain",
)
rng = np.random.default_rng(comm.rank)
grad = np.zeros(1000)
for _ in range(steps):
    # Forward-ish work differs per rank (rank 1 does ~3x more), then two allreduces.
    for size, scale in ((1000, 1), (200, 20)):
        if work:
            x = rng.random(size * (1 + 2 * comm.rank) * scale * work)
            float(np.sort(x).sum())
        lens.collective_begin("allreduce", grad[:size].nbytes)
        comm.Allreduce(MPI.IN_PLACE, grad[:size], op=MPI.SUM)
        lens.collective_end()
    lens.step_end()
comm.Barrier()  # both ranks reach close() together: its time is close's own
t0 = time.perf_counter()
lens.close()
close_s = time.perf_counter() - t0
table = lens.online.table().to_dict()
# One file per rank: mpiexec may interleave the ranks' stdout lines.
with open(f"{run_dir}/table-{comm.rank}.json", "w") as f:
    json.dump(
        {
            "rank": comm.rank,
            "close_s": close_s,
            "ticks": lens.ticks,
            "ids": [p["id"] for p in table["phases"]],
            "weights": [p["weight"] for p in table["phases"]],
            "simo": [p["simo"] for p in table["phases"]],
            "time": [round(p["time_per_occurrence_s"], 12) for p in table["phases"]],
        },
        f,
    )
