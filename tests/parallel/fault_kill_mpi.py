"""Rank 1 dies by SIGKILL on real MPI ranks; what do the trace files hold afterwards?

    mpiexec -n 2 python fault_kill_mpi.py RUN_DIR abort      # default launcher: job aborted
    mpiexec -disable-auto-cleanup -n 2 python fault_kill_mpi.py RUN_DIR survive

Every step issues the same three recorded collectives (Allreduce 512 B, Allreduce 256 B,
Bcast 8 B), so tick k of a trace must carry byte count PATTERN[k % 3] and step k // 3: the
test checks what it reads back is exactly a prefix of what was recorded.

- ``abort``: rank 1 kills itself mid-training, while rank 0 waits in the next Allreduce; the
  launcher then kills rank 0 too (as production launchers do). Both files are partial.
- ``survive``: both ranks train together for WINDOW steps, then continue with local steps
  (no collective: local evaluation, checkpoint writing). Rank 1 is killed during that local
  phase, after the last cross-rank exchange; rank 0 finishes alone and closes cleanly.

Before killing itself rank 1 waits, by training on, until its trace on disk holds every
complete chunk it handed to the writer, then prints ``KILL {json}`` with what it recorded and
what was on disk. Both ranks print ``DISK {json}`` whenever their on-disk event count grows.
"""

import json
import os
import signal
import sys

import numpy as np
from ailens.integrations.mpi import wrap
from mpi4py import MPI

from ailens import TraceError
from ailens.record.reader import read_trace

run_dir, mode = sys.argv[1], sys.argv[2]
CHUNK, WINDOW, LOCAL = 32, 60, 40
KILL_STEP = 30 if mode == "abort" else WINDOW + 12  # survive: > signature_window // 2 + 1 steps
world = MPI.COMM_WORLD
peer_failed = False
if mode == "survive":
    # Under -disable-auto-cleanup MPICH tells the survivors a peer died with SIGUSR1, whose
    # default action ends the process; a job meant to outlive a rank handles it.
    def _on_peer_failure(signum, frame) -> None:
        global peer_failed
        peer_failed = True

    signal.signal(signal.SIGUSR1, _on_peer_failure)
comm = wrap(
    world,
    steps="manual",
    run_dir=run_dir,
    chunk_events=CHUNK,
    exchange_ticks=16,
    framework="fault-kill-test",
)
lens = comm.lens
path = os.path.join(run_dir, f"rank-{world.rank:05d}.ailens")
on_disk = 0


def disk_events() -> int:
    try:
        return read_trace(path).n_events  # safe while the writer appends
    except TraceError:
        return 0


def check_disk() -> None:
    global on_disk
    n = disk_events()
    if n > on_disk:
        on_disk = n
        print("DISK " + json.dumps({"rank": world.rank, "events": n}), flush=True)


a, b, c = np.zeros(64), np.zeros(32), np.zeros(1)  # 512, 256 and 8 bytes
x = np.random.default_rng(world.rank).standard_normal(20_000)
for step in range(WINDOW + LOCAL):
    float(np.sort(x).sum())  # the step's compute
    if step < WINDOW:
        comm.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
        comm.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM)
        comm.Bcast(c, root=0)
    lens.step_end()
    check_disk()
    if world.rank == 1 and step >= KILL_STEP:
        flushed = (lens.ticks - 1) // CHUNK * CHUNK  # chunks handed to the writer (a full
        # buffer is flushed by the next collective_begin)
        if on_disk >= flushed:
            print(
                "KILL "
                + json.dumps(
                    {
                        "rank": 1,
                        "ticks": lens.ticks,
                        "on_disk": on_disk,
                        "flushed": flushed,
                        "step": step,
                    }
                ),
                flush=True,
            )
            os.kill(os.getpid(), signal.SIGKILL)
comm.close()  # rank 0 in survive mode: nothing left to exchange, so no collective
check_disk()
print(
    "DONE "
    + json.dumps(
        {
            "rank": world.rank,
            "ticks": lens.ticks,
            "steps": lens.steps,
            "disabled": lens.disabled,
            "peer_failed": peer_failed,
        }
    ),
    flush=True,
)
