"""Deterministic data-parallel training on real MPI ranks, with or without ailens.

    mpiexec -n 2 python fault_train_mpi.py RUN_DIR|- STEPS [CHUNK_EVENTS] [--fault=RANK:TICK]

``-`` runs without ailens (the reference). Each rank prints one ``RESULT {json}`` line: a hash
of the final weights, the loss, and what ailens saw (disabled reason, ticks, steps) plus every
record the ``ailens`` logger emitted on that rank. Launched by tests/test_faults.py, which
injects a fault inside ailens (``--fault``, tests/parallel/inject_fault.py) or points RUN_DIR
at a full disk.
"""

import hashlib
import json
import logging
import sys

import numpy as np
from mpi4py import MPI

fault = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--fault=")), "")
argv = [a for a in sys.argv if not a.startswith("--fault=")]
run_dir, steps = argv[1], int(argv[2])
chunk_events = int(argv[3]) if len(argv) > 3 else 64
world = MPI.COMM_WORLD


class Collect(logging.Handler):
    """Keeps every ailens log record of this rank, to count warnings exactly."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelname, record.getMessage().splitlines()[0]))


logs = Collect()
logging.getLogger("ailens").addHandler(logs)
logging.getLogger("ailens").setLevel(logging.INFO)

if run_dir == "-":
    comm, lens = world, None
else:
    from ailens.integrations.mpi import wrap
    from inject_fault import inject

    comm = wrap(
        world,
        steps="manual",
        run_dir=run_dir,
        chunk_events=chunk_events,
        exchange_ticks=16,
        framework="fault-test",
    )
    lens = comm.lens
    inject(lens, fault)

# Linear regression, a different data shard per rank; gradients summed with Allreduce.
rng = np.random.default_rng(100 + world.rank)
x = rng.standard_normal((256, 32))
y = x @ np.linspace(-1, 1, 32) + 0.01 * rng.standard_normal(256)
w = np.zeros(32)
grad, total = np.empty(32), np.empty(32)
loss = np.empty(1)
for step in range(steps):
    r = x @ w - y
    grad[:] = x.T @ r / len(y)
    comm.Allreduce(grad, total, op=MPI.SUM)
    w -= 0.1 * total / world.size
    local = np.array([float(r @ r) / len(y)])
    comm.Allreduce(local, loss, op=MPI.SUM)
    if step % 10 == 0:
        comm.Bcast(w, root=0)  # keeps the replicas bit-identical, as DDP's broadcast does
    if lens is not None:
        lens.step_end()
if lens is not None:
    comm.close()

print(
    "RESULT "
    + json.dumps(
        {
            "rank": world.rank,
            "weights": hashlib.sha256(w.tobytes()).hexdigest(),
            "loss": float(loss[0]),
            "disabled": None if lens is None else lens.disabled,
            "ticks": None if lens is None else lens.ticks,
            "steps": None if lens is None else lens.steps,
            "logs": logs.records,
        }
    ),
    flush=True,
)
