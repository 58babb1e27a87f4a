"""One rank of the mnist example, PyTorch variant: horovod.torch (``--framework torch``) or
PyTorch DDP over gloo (``--framework ddp``), with ailens' one line. Launched by ./run
(horovodrun --gloo or torchrun); see examples/README.md.

Like a real job it evaluates on the held-out split at each epoch end (accuracy averaged
across ranks) and rank 0 checkpoints the weights every ``--checkpoint-every`` steps."""

import gc
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    StepTimer,
    params_digest,
    parse_args,
    threads_per_rank,
    torch_model,
)
from mnist_data import load, shard  # noqa: E402

args = parse_args("torch")
if args.framework == "ddp":
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()

    def average(x: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(x)
        return x / size
else:
    import horovod.torch as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    average = hvd.allreduce  # averages by default
torch.set_num_threads(args.threads or threads_per_rank(size))
torch.manual_seed(0)

x_train, y_train, x_test, y_test = load(args.idx_dir)
x_train, y_train = shard(x_train, y_train, rank, size)
x_test, y_test = shard(x_test, y_test, rank, size)
# NHWC numpy -> NCHW tensors
x_train, x_test = (torch.from_numpy(a).permute(0, 3, 1, 2).contiguous() for a in (x_train, x_test))
y_train, y_test = torch.from_numpy(y_train), torch.from_numpy(y_test)

model = torch_model(side=x_train.shape[-1])
batches = len(x_train) // args.batch_size
lens_config = dict(run_dir=args.run_dir, early_stop=args.early_stop,
                   progress_every=args.progress_every)
lens = None
if args.framework == "ddp":
    model = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    if not args.no_lens:
        from ailens.integrations.torch import attach

        lens = attach(model, opt, steps_per_epoch=batches, epochs=args.epochs,  # the one line
                      **lens_config)
else:
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    if not args.no_lens:
        from ailens.integrations import horovod as ailens_hvd

        # the one line
        lens = ailens_hvd.attach(hvd, optimizer=opt, total_steps=args.epochs * batches,
                                 steps_per_epoch=batches, **lens_config)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)


def evaluate() -> float:
    model.eval()
    with torch.no_grad():
        correct = (model(x_test).argmax(1) == y_test).float().mean()
    model.train()
    return float(average(correct.reshape(1))[0])


checkpoint = Path(args.run_dir) / "checkpoint.pt"
timer = StepTimer(args.warmup)
loss_fn = nn.CrossEntropyLoss()
stop = False
done = 0
for epoch in range(args.epochs):
    order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(epoch))
    timer.epoch_begin()
    total = 0.0
    for b in range(batches):
        idx = order[b * args.batch_size:(b + 1) * args.batch_size]
        opt.zero_grad()
        loss = loss_fn(model(x_train[idx]), y_train[idx])
        loss.backward()
        opt.step()  # the step hook marks the step for ailens
        total += float(loss)
        done += 1
        if args.checkpoint_every and done % args.checkpoint_every == 0 and rank == 0:
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            torch.save(model.state_dict(), checkpoint)
        timer.step_end()
        if lens is not None and lens.should_stop:  # early stop: True on every rank at once
            stop = True
            break
    accuracy = evaluate() if args.eval_every_epochs and (epoch + 1) % args.eval_every_epochs == 0 \
        else None
    if rank == 0:
        print(f"epoch {epoch + 1}/{args.epochs} loss {total / max(b + 1, 1):.4f}"
              + ("" if accuracy is None else f" held-out accuracy {accuracy:.4f}"), flush=True)
    if stop:
        break

if lens is not None:
    lens.close()  # collective: every rank
with torch.no_grad():
    accuracy = evaluate()
    digest = params_digest(p.numpy() for p in model.parameters())
print(f"PARAMS rank {rank} sha256 {digest}", flush=True)
if rank == 0:
    print(timer.line(), flush=True)
    print(f"ACCURACY test={accuracy:.4f}", flush=True)
if args.framework == "ddp":
    del model  # before destroy_process_group: DDP aborts at exit otherwise
    gc.collect()  # DDP holds reference cycles: free its reducer now, not at exit
    dist.destroy_process_group()
