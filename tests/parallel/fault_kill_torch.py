"""Rank 1 dies by SIGKILL while rank 0 finishes alone: torch.distributed (gloo) ranks started
the way SLURM or Kubernetes start them (RANK, WORLD_SIZE, MASTER_ADDR/PORT in the
environment), with no agent that kills the survivors. tests/test_faults.py launches it.

    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p python fault_kill_torch.py RUN_DIR

Both ranks train a DDP model for WINDOW steps (ailens records the gradient buckets through
``ailens.integrations.torch``), then go on with LOCAL steps of per-rank work and no
collective (evaluation, checkpoint writing, local fine-tuning). Rank 1 kills itself during
that local phase, after the last cross-rank exchange, once its trace on disk holds every
chunk it handed to the writer (it trains on until then: no sleep); it prints ``KILL {json}``
first. Rank 0 finishes, closes and prints ``DONE {json}``.

(mpiexec cannot host this scenario: its process manager kills the other ranks as soon as
one dies, even after MPI_Finalize and with -disable-auto-cleanup; see tests/test_faults.py.)
"""

import gc
import json
import os
import signal
import sys

import torch
import torch.distributed as dist
from ailens.integrations.torch import attach
from torch.nn.parallel import DistributedDataParallel as DDP

from ailens import TraceError
from ailens.record.reader import read_trace

CHUNK, WINDOW, LOCAL = 32, 30, 40
KILL_STEP = WINDOW + 12  # exchange_seconds=0: pending ticks are exchanged at the next step end

run_dir = sys.argv[1]
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
net = torch.nn.Sequential(
    torch.nn.Linear(16, 64),
    torch.nn.ReLU(),
    torch.nn.Linear(64, 64),
    torch.nn.ReLU(),
    torch.nn.Linear(64, 4),
)
model = DDP(net, bucket_cap_mb=0.01)  # a few buckets per step
opt = torch.optim.SGD(model.parameters(), lr=0.05)
handle = attach(
    model,
    opt,
    run_dir=run_dir,
    chunk_events=CHUNK,
    exchange_ticks=16,
    exchange_seconds=0,
    framework="fault-kill-torch",
)
lens = handle.lens
path = os.path.join(run_dir, f"rank-{rank:05d}.ailens")
gen = torch.Generator().manual_seed(100 + rank)


def disk_events() -> int:
    try:
        return read_trace(path).n_events  # safe while the writer appends
    except TraceError:
        return 0


for _ in range(WINDOW):
    x, y = torch.randn(32, 16, generator=gen), torch.randn(32, 4, generator=gen)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()  # ailens ends the step here (optimizer hook)

local_opt = torch.optim.SGD(net.parameters(), lr=0.01)
for step in range(WINDOW, WINDOW + LOCAL):
    x, y = torch.randn(32, 16, generator=gen), torch.randn(32, 4, generator=gen)
    loss = torch.nn.functional.mse_loss(net(x), y)  # the local module: no collective
    local_opt.zero_grad()
    loss.backward()
    local_opt.step()
    handle.step_end()
    if rank == 1 and step >= KILL_STEP:
        # Rows handed to the writer so far (the Lens' own counter; a test peeks at it).
        flushed, on_disk = lens.flushed_ticks, disk_events()
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
                        "exchanged": lens.exchanged_ticks,
                    }
                ),
                flush=True,
            )
            os.kill(os.getpid(), signal.SIGKILL)

handle.close()  # nothing left to exchange, so no collective with the dead rank
print(
    "DONE "
    + json.dumps(
        {
            "rank": rank,
            "ticks": lens.ticks,
            "steps": lens.steps,
            "disabled": lens.disabled,
            "exchanged": lens.exchanged_ticks,
        }
    ),
    flush=True,
)
del model  # before destroy_process_group, or gloo may abort at exit
gc.collect()  # DDP holds reference cycles: free its reducer now, not at exit
dist.destroy_process_group()
