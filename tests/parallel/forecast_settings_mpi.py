"""Real MPI ranks drive a Lens with settings that are not the defaults (exchange cadence,
warm-up, signature rule) and a schedule with evaluations: the run ``ailens forecast RUN_DIR``
must read as ``ailens report`` and the run's forecast.json do. Launched by
tests/test_timeline.py under mpiexec: ``forecast_settings_mpi.py RUN_DIR STEPS``."""

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
lens = ailens.Lens(
    run_dir=run_dir,
    rank=comm.rank,
    world_size=comm.size,
    exchange=exchange,
    exchange_ticks=8,
    exchange_seconds=0.05,
    signature_window=6,
    signature_rel_tol=0.05,
    warmup_steps=3,
    framework="mpi4py-plain",
)
lens.set_schedule(total_steps=steps, eval_every_steps=10)
grad = np.zeros(2000)
for step in range(steps):
    time.sleep(0.01 + 0.002 * (step % 3))  # the step's compute
    lens.collective_begin("allreduce", grad.nbytes)
    comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
    lens.collective_end()
    lens.step_end()
    if (step + 1) % 10 == 0:
        with lens.section("eval"):
            time.sleep(0.03)
comm.Barrier()
lens.close()
