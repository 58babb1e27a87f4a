"""Two Horovod ranks train a tiny torch model with hvd.DistributedOptimizer and print, per
rank, what ailens recorded. Launched by tests/test_integration_horovod.py under horovodrun.

argv: RUN_DIR STEPS MODE [FAULT]   (MODE: lens | nolens; FAULT: RANK:TICK, a fault injected
inside ailens)
Prints one ``RESULT {json}`` line per rank.
"""

import json
import sys
import zlib

import horovod.torch as hvd
import numpy as np
import torch

run_dir, steps, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
fault = sys.argv[4] if len(sys.argv) > 4 else ""
hvd.init()
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())

lens = None
if mode == "lens":
    from ailens.integrations import horovod as ailens_hvd
    from inject_fault import inject

    lens = ailens_hvd.attach(hvd, optimizer=opt, run_dir=run_dir, exchange_ticks=16)
    inject(lens.lens, fault)

gen = torch.Generator().manual_seed(1 + hvd.rank())
for _ in range(steps):
    x = torch.randn(8, 16, generator=gen)
    y = torch.randn(8, 4, generator=gen)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()

# Direct collectives the script issues itself: sync, async, in-place, allgather, broadcast.
extra = torch.arange(6, dtype=torch.float32)
hvd.allreduce(extra, name="x.sync")
hvd.synchronize(hvd.allreduce_async(extra, name="x.async"))
hvd.allreduce_(extra.clone(), name="x.inplace")
hvd.allgather(torch.ones(3, 2, dtype=torch.float64), name="x.gather")
hvd.broadcast(torch.zeros(5, dtype=torch.int64), root_rank=0, name="x.bcast")
hvd.grouped_allreduce([extra, extra[:2].clone()], name="x.group")

params = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
result = {"rank": hvd.rank(), "checksum": zlib.crc32(params.astype(np.float32).tobytes())}
if lens is not None:
    lens.close()
    table = lens.lens.online.table().to_dict() if lens.lens.online else None
    result.update(
        ticks=lens.lens.ticks,
        steps=lens.lens.steps,
        disabled=lens.lens.disabled,
        checkpoint_bytes=lens.lens.schedule.checkpoint_bytes,
        table=table,
        restored=not hasattr(hvd.mpi_ops._allreduce_async, "__wrapped__")
        and not hasattr(hvd.optimizer.synchronize, "__wrapped__"),
    )
print("RESULT", json.dumps(result), flush=True)
