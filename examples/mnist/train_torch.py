"""One rank of the mnist example, PyTorch variant: horovod.torch + ailens' Horovod adapter.
Launched by ./run --framework torch (horovodrun --gloo); see examples/README.md."""

import sys
from pathlib import Path

import horovod.torch as hvd
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import StepTimer, params_digest, parse_args, threads_per_rank  # noqa: E402
from mnist_data import load, shard  # noqa: E402

args = parse_args("torch")
hvd.init()
torch.set_num_threads(threads_per_rank(hvd.size()))
torch.manual_seed(0)

x_train, y_train, x_test, y_test = load(args.idx_dir)
x_train, y_train = shard(x_train, y_train, hvd.rank(), hvd.size())
# NHWC numpy -> NCHW tensors
x_train, x_test = (torch.from_numpy(a).permute(0, 3, 1, 2).contiguous() for a in (x_train, x_test))
y_train, y_test = torch.from_numpy(y_train), torch.from_numpy(y_test)

side = x_train.shape[-1]
flat = 32 * (((side - 2) // 2 - 2) // 2) ** 2
model = nn.Sequential(
    nn.Conv2d(1, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Conv2d(16, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(flat, 64), nn.ReLU(), nn.Linear(64, 10),
)
opt = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
batches = len(x_train) // args.batch_size

lens = None
if not args.no_lens:
    from ailens.integrations import horovod as ailens_hvd

    lens = ailens_hvd.attach(hvd, optimizer=opt, run_dir=args.run_dir,  # the one line
                             early_stop=args.early_stop, progress_every=args.progress_every,
                             total_steps=args.epochs * batches)

hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)

timer = StepTimer(args.warmup)
loss_fn = nn.CrossEntropyLoss()
stop = False
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
        timer.step_end()
        if lens is not None and lens.should_stop:  # early stop: True on every rank at once
            stop = True
            break
    if hvd.rank() == 0:
        print(f"epoch {epoch + 1}/{args.epochs} loss {total / max(b + 1, 1):.4f}", flush=True)
    if stop:
        break

if lens is not None:
    lens.close()  # collective: every rank
with torch.no_grad():
    accuracy = float((model(x_test).argmax(1) == y_test).float().mean())
    digest = params_digest(p.numpy() for p in model.parameters())
print(f"PARAMS rank {hvd.rank()} sha256 {digest}", flush=True)
if hvd.rank() == 0:
    print(timer.line(), flush=True)
    print(f"ACCURACY test={accuracy:.4f}", flush=True)
