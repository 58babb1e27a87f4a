"""Launched by tests/test_integration_torch.py under torchrun: a tiny DDP run, with or without
ailens, that prints one ``RESULT {json}`` line per rank for the test to compare."""

import argparse
import gc
import hashlib
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lens", action="store_true")
    ap.add_argument("--run-dir", default="")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--user-hook", action="store_true", help="pass our own comm hook to attach")
    ap.add_argument("--fault", default="", help="RANK:TICK: make ailens fail there")
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(16, 64),
        torch.nn.BatchNorm1d(64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 4),
    )
    # A small bucket cap gives several buckets per step.
    model = DDP(net, bucket_cap_mb=0.002)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    hook_calls = [0]
    handle = None
    if args.lens:
        from ailens.integrations.torch import attach
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def my_hook(state, bucket):
            hook_calls[0] += 1
            return allreduce_hook(state, bucket)

        extra = {"comm_hook": my_hook, "state": None} if args.user_hook else {}
        from inject_fault import inject

        handle = attach(
            model,
            opt,
            run_dir=args.run_dir,
            exchange_ticks=16,
            steps_per_epoch=args.steps,
            epochs=1,
            **extra,
        )
        inject(handle.lens, args.fault)

    gen = torch.Generator().manual_seed(100 + rank)
    expected = {"allreduce": 0, "allgather": 0, "broadcast": 0, "barrier": 0}
    counts = dict.fromkeys(expected, 0)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    buf_bytes = sum(b.numel() * b.element_size() for b in model.module.buffers())
    # Direct collectives the script calls itself (each must be recorded once).
    w = torch.arange(8, dtype=torch.float32)
    dist.broadcast(w, src=0)
    counts["broadcast"] += 1
    expected["broadcast"] += w.nbytes
    for _ in range(args.steps):
        x = torch.randn(32, 16, generator=gen)
        y = torch.randn(32, 4, generator=gen)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        # DDP buffer broadcast (BatchNorm stats) happens in forward; DDP buckets in backward.
        expected["broadcast"] += buf_bytes
        expected["allreduce"] += grad_bytes
        stat = loss.detach().reshape(1).clone()
        dist.all_reduce(stat)  # sync
        counts["allreduce"] += 1
        expected["allreduce"] += stat.nbytes
        work = dist.all_reduce(stat.clone(), async_op=True)  # async, timed to wait()
        work.wait()
        counts["allreduce"] += 1
        expected["allreduce"] += stat.nbytes
        fut = dist.all_reduce(stat.clone(), async_op=True).get_future()  # ended by the future
        fut.wait()
        counts["allreduce"] += 1
        expected["allreduce"] += stat.nbytes
        out = torch.zeros(world * 2)
        dist.all_gather_into_tensor(out, torch.ones(2) * rank)
        counts["allgather"] += 1
        expected["allgather"] += 8
    dist.barrier()
    counts["barrier"] += 1

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().numpy().tobytes())
    result = {
        "rank": rank,
        "checksum": digest.hexdigest(),
        "steps": args.steps,
        "expected_bytes": expected,
        "direct_counts": counts,
        "hook_calls": hook_calls[0],
        "param_count": sum(p.numel() for p in model.parameters()),
    }
    if handle is not None:
        lens = handle.lens
        handle.close()
        result["ticks"] = lens.ticks
        result["lens_steps"] = lens.steps
        result["disabled"] = lens.disabled
        result["table"] = lens.online.table().to_dict() if lens.online else None
        result["restored"] = not hasattr(dist.all_reduce, "_ailens_owner")
        if lens.disabled is None:
            from ailens.record.reader import read_trace

            tr = read_trace(os.path.join(args.run_dir, f"rank-{rank:05d}.ailens"))
            ops = [tr.ops[i] for i in tr.events["op"]]
            nb = tr.events["nbytes"].tolist()
            by_op: dict[str, int] = {}
            n_by_op: dict[str, int] = {}
            for o, b in zip(ops, nb, strict=True):
                by_op[o] = by_op.get(o, 0) + b
                n_by_op[o] = n_by_op.get(o, 0) + 1
            result["recorded_bytes"] = by_op
            result["recorded_counts"] = n_by_op
            result["events"] = tr.n_events
            result["open_events"] = int((tr.events["t_end"] < 0).sum())
            result["steps_per_event"] = tr.events["step"].tolist()
    print("RESULT " + json.dumps(result), flush=True)
    del model  # the DDP model must go before destroy_process_group (SIGABRT otherwise)
    gc.collect()  # DDP holds reference cycles: free its reducer now, not at exit
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
