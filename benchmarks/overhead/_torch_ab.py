"""The PyTorch cases' shared body: two identical models train side by side in one job, one
plain, one with ailens' one line (DDP: ``attach(model, opt)``; Horovod: ``attach(hvd,
optimizer=opt)``), in alternating blocks of steps (``_ab.measure``).

The plain blocks run with the original framework functions (``_ab.Unpatched``): ailens wraps
``torch.distributed`` / Horovod's functions module-wide while attached, and without the swap
the plain model's own calls (DDP's buffer broadcast, Horovod's allreduces) would go through it.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
from collections.abc import Callable

import _attribution
import torch
from _ab import Unpatched, add_common_args, emit, measure

Step = Callable[[], None]


def parse_args(doc: str, **defaults) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_common_args(p)
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    p.add_argument(
        "--control",
        action="store_true",
        help="ailens in neither model (the protocol's reading with no "
        "difference between the arms: what this machine resolves)",
    )
    for name, value in defaults.items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    return p.parse_args()


def trainer(model: torch.nn.Module, opt, batch: tuple[torch.Tensor, torch.Tensor], loss_fn):
    x, y = batch

    def run(n: int) -> None:
        for _ in range(n):
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    return run


def ab_and_emit(case: dict, args, handle, unpatched, run_plain, run_lensed, share, barrier, *,
                rank: int, size: int, profiler=None) -> None:  # fmt: skip
    """Alternate blocks of the plain and the attached trainer (the plain one, and the
    ``barrier`` between blocks, with ailens bypassed), close the Lens, and print rank 0's
    OVERHEAD line (and with ``profiler``, every rank's ATTRIBUTION line)."""
    if profiler is not None:
        run_lensed = profiler.count_steps(run_lensed)

    def plain_steps(n: int) -> None:
        with unpatched:
            run_plain(n)

    def sync() -> None:
        with unpatched:
            barrier()

    result = measure(plain_steps, run_lensed, pairs=args.pairs, block_s=args.block_s, sync=sync,
                     share=share)  # fmt: skip
    lens = handle.lens
    ticks, steps, disabled = lens.ticks, lens.steps, lens.disabled
    if profiler is not None:
        profiler.read_threads()
        profiler.restore()
    handle.close()
    if rank == 0:
        emit(case["name"], case["framework"], result, ranks=size,
             collectives_per_step=round(ticks / max(steps, 1), 2), threads=args.threads,
             unpatched=len(unpatched), ailens_disabled=disabled)  # fmt: skip
    if profiler is not None:
        _attribution.emit(profiler, steps, rank=rank, name=case["name"],
                          added_us=round(result.added_us, 2))  # fmt: skip


def run_ddp(case: dict, args, make_model: Callable[[], torch.nn.Module], batch, loss_fn,
            **ddp_kw) -> None:  # fmt: skip
    """The DDP case: ``make_model()`` is called twice under the same seed."""
    import torch.distributed as dist
    from ailens.integrations.torch import attach
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    plain = DDP(make_model(), **ddp_kw)
    torch.manual_seed(0)
    lensed = DDP(make_model(), **ddp_kw)
    opt_plain = torch.optim.SGD(plain.parameters(), lr=1e-3, momentum=0.9)
    opt_lensed = torch.optim.SGD(lensed.parameters(), lr=1e-3, momentum=0.9)
    run_dir = [tempfile.mkdtemp(prefix="ailens-overhead-") if rank == 0 else None]
    dist.broadcast_object_list(run_dir)
    profiler = _attribution.profiler_for(args)
    if profiler is not None:
        profiler.intercept_comm_hook(lensed)
    # --control: ailens attached but disabled, the second model as plain as the first.
    handle = attach(lensed, opt_lensed, run_dir=run_dir[0], enabled=not args.control)
    if profiler is not None:
        profiler.attach_handle(handle, ("torch.distributed",))
    unpatched = Unpatched("torch.distributed")
    run_plain, run_lensed = (
        trainer(plain, opt_plain, batch, loss_fn),
        trainer(lensed, opt_lensed, batch, loss_fn),
    )

    def share(n: int) -> int:
        t = torch.tensor([n if rank == 0 else 0])
        with unpatched:
            dist.broadcast(t, 0)
        return int(t[0])

    ab_and_emit(case, args, handle, unpatched, run_plain, run_lensed, share, dist.barrier,
                rank=rank, size=size, profiler=profiler)  # fmt: skip
    del plain, lensed  # before destroy_process_group: DDP aborts at exit otherwise
    gc.collect()  # DDP holds reference cycles: free its reducer now, not at exit
    dist.destroy_process_group()


def run_hvd(case: dict, args, make_model: Callable[[], torch.nn.Module], batch, loss_fn) -> None:
    """The Horovod case: two models, each with its own ``hvd.DistributedOptimizer``."""
    import horovod.torch as hvd
    from ailens.integrations.horovod import attach

    torch.set_num_threads(args.threads)
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    models, opts = [], []
    for prefix in ("plain", "lensed"):
        torch.manual_seed(0)
        model = make_model()
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        named = [(f"{prefix}.{n}", p) for n, p in model.named_parameters()]
        opts.append(hvd.DistributedOptimizer(opt, named_parameters=named))
        models.append(model)
    # A name on every rank: Horovod's default is the object's type, which differs (str, None).
    run_dir = tempfile.mkdtemp(prefix="ailens-overhead-") if rank == 0 else None
    run_dir = hvd.broadcast_object(run_dir, root_rank=0, name="ailens_run_dir")
    # --control: ailens attached but disabled, the second model as plain as the first.
    handle = attach(hvd, optimizer=opts[1], run_dir=run_dir, enabled=not args.control)
    profiler = _attribution.profiler_for(args)
    if profiler is not None:
        profiler.attach_handle(handle, ("horovod",))
    unpatched = Unpatched("horovod")
    with unpatched:
        for model in models:
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    run_plain = trainer(models[0], opts[0], batch, loss_fn)
    run_lensed = trainer(models[1], opts[1], batch, loss_fn)

    def share(n: int) -> int:
        with unpatched:
            return int(hvd.broadcast_object(n, root_rank=0, name="ailens_block_steps"))

    ab_and_emit(case, args, handle, unpatched, run_plain, run_lensed, share, hvd.barrier,
                rank=rank, size=size, profiler=profiler)  # fmt: skip
    hvd.shutdown()
