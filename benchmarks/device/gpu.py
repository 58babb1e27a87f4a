"""ailens on a GPU: device time checked against the profiler, overhead A/B, forecast runs.

Run by ``benchmarks/device/gpu.sh`` on a machine with a CUDA device (each case writes one JSON
file into ``--out``); every case also runs on a CPU with ``--cpu`` (tiny sizes, gloo), which
only checks that the script works end to end.

Cases (``python benchmarks/device/gpu.py CASE --out DIR``):

- ``profile``: DDP on CUDA with ailens attached (one line) and ``torch.profiler`` (CUPTI) over
  steps in the middle of the run. Ground truth per bucket: the communication stream's device
  activity (NCCL kernels; with gloo and CUDA tensors, the copy to the host through the copy
  back); per step: the end of the last kernel launched inside the step's ``ProfilerStep#``
  range. Compared with ailens's device rows (``ailens.analyze(run).device_ranks``) over the
  same steps: per bucket position, median |error| of the collective's device time; the
  median device step time. Backends: ``nccl`` (world size 1, in-process) or ``gloo`` (launch
  with torchrun, 2 ranks on one GPU).
- ``ab``: the step-time A/B inside one run (``benchmarks/overhead/_ab.measure``): two
  identical DDP models, one plain, one with ``attach``, alternating blocks that each end with a
  device synchronise.
- ``forecast``: a run with evaluation and checkpoints, recorded into a run directory the
  forecast corpus takes (``case.json`` beside it).
- ``recompare``: the ``profile`` comparison again from its saved trace and run directory.
- ``oneliners``: Lightning (``accelerator="gpu"``) and the Hugging Face Trainer on the GPU
  with their one line: the trace must hold device rows.

Models: torchvision ResNet-50 (224 px) and Hugging Face GPT-2 small (random weights, 1024
tokens), bf16 autocast.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "overhead"))

from ailens.integrations.torch import attach  # noqa: E402

import ailens  # noqa: E402

# --------------------------------------------------------------------------- set-up


def init(backend: str) -> tuple[int, int]:
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def device(args) -> torch.device:
    return torch.device("cpu") if args.cpu else torch.device("cuda", 0)


def make_model(name: str, args):
    """(model, batch maker, loss) for ``name``; sizes shrink with ``--cpu``."""
    dev = device(args)
    if name == "resnet50":
        import torchvision

        model = torchvision.models.resnet50(num_classes=1000).to(dev)
        px, batch = (32, 4) if args.cpu else (224, args.batch or 128)
        x = torch.randn(batch, 3, px, px, device=dev)
        y = torch.randint(0, 1000, (batch,), device=dev)
        if not args.cpu:
            model = model.to(memory_format=torch.channels_last)
            x = x.to(memory_format=torch.channels_last)

        def loss(m):
            return torch.nn.functional.cross_entropy(m(x), y)

        return model, batch, loss
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        cfg = GPT2Config(n_layer=2, n_embd=128, n_head=2) if args.cpu else GPT2Config()
        model = GPT2LMHeadModel(cfg).to(dev)
        seq, batch = (64, 2) if args.cpu else (1024, args.batch or 16)
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device=dev)

        def loss(m):
            return m(input_ids=ids, labels=ids).loss

        return model, batch, loss
    raise SystemExit(f"unknown model {name}")


def train_step(model, opt, loss_fn, args) -> torch.Tensor:
    with torch.autocast(device_type=device(args).type, dtype=torch.bfloat16, enabled=True):
        loss = loss_fn(model)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def sync(args) -> None:
    if not args.cpu:
        torch.cuda.synchronize()


def machine() -> dict:
    d = {"host": platform.node(), "cpus": os.cpu_count(), "torch": torch.__version__,
         "python": platform.python_version(), "loadavg": list(os.getloadavg())}  # fmt: skip
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        d.update(gpu=p.name, gpu_memory_gib=round(p.total_memory / 2**30, 1),
                 sms=p.multi_processor_count, cuda=torch.version.cuda,
                 nccl=".".join(map(str, torch.cuda.nccl.version())))  # fmt: skip
    return d


def write(args, name: str, result: dict) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"case": name, "machine": machine(), "command": " ".join(sys.argv), **result}
    (out / f"{name}.json").write_text(json.dumps(result, indent=1, default=float))
    print(f"{name}: {json.dumps(_headline(result), default=float)}", flush=True)


def _headline(result: dict) -> dict:
    return {k: v for k, v in result.items() if not isinstance(v, (list, dict)) or k == "check"}


# --------------------------------------------------------------------------- profile


def case_profile(args) -> None:
    rank, world = init(args.backend)
    if not args.cpu:
        torch.cuda.set_device(0)
    torch.manual_seed(0)
    net, batch, loss_fn = make_model(args.model, args)
    model = DDP(net, device_ids=None if args.cpu else [0])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=not args.cpu)
    run_dir = Path(args.out) / f"run-profile-{args.model}-{args.backend}{world}"
    lens = attach(model, opt, run_dir=str(run_dir), total_steps=args.steps)
    from torch.profiler import ProfilerActivity, profile, schedule

    acts = [ProfilerActivity.CPU] + ([] if args.cpu else [ProfilerActivity.CUDA])
    first = args.steps - args.profiled - 2
    sched = schedule(wait=first - 2, warmup=2, active=args.profiled, repeat=1)
    with profile(activities=acts, schedule=sched) as prof:
        for _ in range(args.steps):
            train_step(model, opt, loss_fn, args)
            prof.step()
    sync(args)
    lens.close()
    trace = Path(args.out) / f"trace-{args.model}-{args.backend}{world}-rank{rank}.json"
    prof.export_chrome_trace(str(trace))
    truth = profiler_truth(json.loads(trace.read_text()), steps=range(first, first + args.profiled))
    subprocess.run(["gzip", "-f", str(trace)], check=False)  # kept: the ground truth, re-readable
    dist.barrier()
    if rank == 0:
        a = ailens.analyze(run_dir)
        d = a.device_ranks[0] if a.device_ranks else None
        write(args, f"profile-{args.model}-{args.backend}{world}",
              compare(d, truth, range(first, first + args.profiled), batch=batch,
                      nbytes=a.tick_nbytes))  # fmt: skip
    dist.destroy_process_group()


def profiler_truth(tr: dict, steps: range) -> dict:
    """Per profiled step: its device end and its collectives' device spans (µs), from the
    chrome trace of ``torch.profiler``.

    A step's device end is the end of the last GPU activity launched inside its
    ``ProfilerStep#`` range. Collectives: NCCL kernels (one each); with gloo and CUDA tensors
    a copy to pinned host memory and the copy back on the same stream of gloo's pool (one
    collective: the span from the first's start to the second's end). A collective belongs to
    the step in whose device interval (previous step's device end, this one's] it starts.
    """
    events = tr.get("traceEvents", [])
    launch = {}  # correlation id -> CPU launch timestamp
    gpu, marks = [], []
    for e in events:
        cat, args = e.get("cat", ""), e.get("args") or {}
        if cat == "cuda_runtime" and "correlation" in args:
            launch[args["correlation"]] = e["ts"]
        elif cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu.append(e)
        elif str(e.get("name", "")).startswith("ProfilerStep#") and cat == "user_annotation":
            marks.append((int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]))
    marks.sort()
    ends = []
    for _, lo, hi in marks[: len(steps)]:
        inside = [e for e in gpu if lo <= launch.get(e["args"].get("correlation"), -1) <= hi]
        ends.append(max((e["ts"] + e["dur"] for e in inside), default=None))
    spans = _collectives(gpu)
    per_step = []
    for i, end in enumerate(ends):
        lo = ends[i - 1] if i else None
        mine = [(d, b) for t, d, _, b in spans if end and lo and lo < t <= end]
        per_step.append({"step": steps[i], "device_end_us": end, "comm": [d for d, _ in mine],
                         "comm_bytes": [b for _, b in mine]})  # fmt: skip
    return {"steps": per_step, "collective_kinds": sorted({k for _, _, k, _ in spans}),
            "streams": len({e["args"].get("stream") for e in gpu})}  # fmt: skip


def _collectives(gpu: list) -> list[tuple[float, float, str, int | None]]:
    """(start µs, duration µs, kind, bytes copied out or None) of each collective's device
    activity."""
    out = []
    by_stream: dict = {}
    for e in sorted(gpu, key=lambda e: e["ts"]):
        name = e["name"]
        if "nccl" in name.lower():
            out.append((e["ts"], e["dur"], "nccl kernel", None))
        elif "Pinned" in name:  # gloo's copies of CUDA tensors, on its own streams
            by_stream.setdefault(e["args"].get("stream"), []).append(e)
    for es in by_stream.values():
        start = nbytes = None
        for e in es:
            if "DtoH" in e["name"] or "Device -> Pinned" in e["name"]:
                if start is None:
                    start, nbytes = e["ts"], e["args"].get("bytes")
            elif start is not None:  # the copy back ends the collective
                out.append((start, e["ts"] + e["dur"] - start, "gloo copy out..copy back", nbytes))
                start = None
    return sorted(out)


def compare(d, truth: dict, steps: range, *, batch: int, nbytes=None) -> dict:
    """ailens's device rows against the profiler over the profiled steps. ``nbytes``: the
    bytes of every tick (``RunAnalysis.tick_nbytes``), to pair each bucket with the copy of
    the same size where the profiler gives sizes (gloo); else buckets pair in order."""
    if d is None:
        return {"check": "no device rows in the trace", "truth": truth}
    step_end = dict(zip(d.step.tolist(), d.step_end_ns.tolist(), strict=True))
    ailens_step_ms = [
        (step_end[s] - step_end[s - 1]) / 1e6 for s in steps if s in step_end and s - 1 in step_end
    ]
    ends = [t["device_end_us"] for t in truth["steps"]]
    prof_step_ms = [(b - a) / 1e3 for a, b in zip(ends, ends[1:], strict=False) if a and b]
    comm_ns = d.comm_ns
    pairs = []  # (step, bucket position, ailens µs, profiler µs)
    for t in truth["steps"]:
        s = t["step"]
        lo, hi = step_end.get(s - 1), step_end.get(s)
        if lo is None or hi is None or not t["comm"]:
            continue
        inside = np.flatnonzero((d.ready_ns > lo) & (d.ready_ns <= hi))
        sized = nbytes is not None and all(b is not None for b in t["comm_bytes"])
        for pos, i in enumerate(inside):
            if sized:
                b = int(nbytes[d.tick[i]])
                match = [p for p, pb in zip(t["comm"], t["comm_bytes"], strict=True) if pb == b]
            else:
                match = t["comm"][pos : pos + 1] if len(inside) == len(t["comm"]) else []
            if len(match) == 1:
                pairs.append((s, pos, comm_ns[i] / 1e3, match[0]))
    bucket_err = []
    for pos in sorted({p for _, p, _, _ in pairs}):
        a = statistics.median(x[2] for x in pairs if x[1] == pos)
        p = statistics.median(x[3] for x in pairs if x[1] == pos)
        bucket_err.append({"bucket": pos, "ailens_us": a, "profiler_us": p,
                           "err_pct": 100 * (a - p) / p if p else None})  # fmt: skip
    errs = [abs(x["err_pct"]) for x in bucket_err if x["err_pct"] is not None]
    a_step = statistics.median(ailens_step_ms) if ailens_step_ms else None
    p_step = statistics.median(prof_step_ms) if prof_step_ms else None
    return {
        "check": "ailens device rows vs torch.profiler (CUPTI)",
        "batch": batch,
        "step_ms_ailens": a_step,
        "step_ms_profiler": p_step,
        "step_err_pct": 100 * (a_step - p_step) / p_step if a_step and p_step else None,
        "collective_kinds": truth["collective_kinds"],
        "collectives_per_step_profiler": [len(t["comm"]) for t in truth["steps"]],
        "buckets_paired": len(pairs),
        "bucket_median_abs_err_pct": statistics.median(errs) if errs else None,
        "buckets": bucket_err,
        "truth": truth,
    }


# --------------------------------------------------------------------------- A/B


def case_recompare(args) -> None:
    """``profile``'s comparison again, from its saved files: ``--trace`` (the profiler's
    chrome trace, gzip) and ``--run`` (ailens's run directory)."""
    import gzip

    a = ailens.analyze(args.run)
    tr = json.loads(gzip.open(args.trace).read())
    marks = sorted(int(e["name"].split("#")[1]) for e in tr["traceEvents"]
                   if str(e.get("name", "")).startswith("ProfilerStep#")
                   and e.get("cat") == "user_annotation")  # fmt: skip
    steps = range(marks[0], marks[-1] + 1)
    d = a.device_ranks[0] if a.device_ranks else None
    result = compare(d, profiler_truth(tr, steps), steps, batch=0, nbytes=a.tick_nbytes)
    write(args, f"recompare-{Path(args.run).name}", {"trace": args.trace, **result})


def case_ab(args) -> None:
    from _ab import Unpatched, measure

    rank, world = init(args.backend)
    dev = device(args)
    torch.manual_seed(0)
    net_a, batch, loss_a = make_model(args.model, args)
    torch.manual_seed(0)
    net_b, _, loss_b = make_model(args.model, args)
    ids = None if args.cpu else [0]
    plain, lensed = DDP(net_a, device_ids=ids), DDP(net_b, device_ids=ids)
    opt_a = torch.optim.AdamW(plain.parameters(), lr=1e-4, fused=not args.cpu)
    opt_b = torch.optim.AdamW(lensed.parameters(), lr=1e-4, fused=not args.cpu)
    run_dir = tempfile.mkdtemp(prefix="ailens-gpu-ab-")
    handle = attach(lensed, opt_b, run_dir=run_dir)  # the one line
    unpatched = Unpatched("torch.distributed")

    def runner(model, opt, loss_fn):
        def run(n: int) -> None:
            for _ in range(n):
                train_step(model, opt, loss_fn, args)
            sync(args)  # a block ends when the device is done

        return run

    run_plain, run_lensed = runner(plain, opt_a, loss_a), runner(lensed, opt_b, loss_b)

    def plain_steps(n: int) -> None:
        with unpatched:
            run_plain(n)

    def barrier() -> None:
        with unpatched:
            dist.barrier()

    r = measure(plain_steps, run_lensed, pairs=args.pairs, block_s=args.block_s, sync=barrier,
                share=lambda n: n, min_steps=3)  # fmt: skip
    lens = handle.lens
    ticks, steps, disabled = lens.ticks, lens.steps, lens.disabled
    handle.close()
    dev_rows = ailens.analyze(run_dir).device
    lo, hi = r.ci95
    write(args, f"ab-{args.model}", {
        "check": "step-time A/B in one run, plain DDP vs attach (device synchronised per block)",
        "device": str(dev), "batch": batch, "step_ms": r.step_ms, "ratio": r.ratio,
        "ci95": [lo, hi], "added_us": r.added_us, "pairs": len(r.plain),
        "block_steps": r.block_steps, "collectives_per_step": ticks / max(steps, 1),
        "ailens_disabled": disabled, "device_summary": dev_rows.to_dict() if dev_rows else None,
        "pair_step_ms": [[a * 1e3, b * 1e3] for a, b in zip(r.plain, r.lensed, strict=True)],
    })  # fmt: skip
    dist.destroy_process_group()


# --------------------------------------------------------------------------- forecast run


def case_forecast(args) -> None:
    """A run as a user's script makes it: evaluation every ``eval_every`` steps, a checkpoint
    every ``ckpt_every``, the loss read every 10 steps (a host sync, as logging does)."""
    load_before = os.getloadavg()[0]
    init(args.backend)
    torch.manual_seed(0)
    net, batch, loss_fn = make_model(args.model, args)
    model = DDP(net, device_ids=None if args.cpu else [0])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=not args.cpu)
    out = Path(args.out) / f"gpu-{args.model}-1"
    steps, eval_every, ckpt_every = args.steps, args.eval_every, args.ckpt_every
    t0 = time.time()
    lens = attach(model, opt, run_dir=str(out), total_steps=steps)
    lens.lens.set_schedule(eval_every_steps=eval_every, checkpoint_every_steps=ckpt_every)
    ckpt = Path(tempfile.mkdtemp()) / "ckpt.pt"
    for step in range(1, steps + 1):
        loss = train_step(model, opt, loss_fn, args)
        if step % 10 == 0:
            loss.item()
        if step % eval_every == 0:
            with lens.lens.section("eval"), torch.no_grad():
                model.eval()
                for _ in range(args.eval_batches):
                    with torch.autocast(device_type=device(args).type, dtype=torch.bfloat16):
                        loss_fn(model).item()
                model.train()
        if step % ckpt_every == 0:
            with lens.lens.section("checkpoint"):
                torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, ckpt)
    lens.close()
    case = {
        "command": " ".join(sys.argv),
        "structure": ["eval", "checkpoint"],
        "slowdown_at_fraction": None,
        "load_1min_before": load_before,
        "wall_s": round(time.time() - t0, 1),
        "recorded": time.strftime("%Y-%m-%d %H:%M:%S%z"),
        "cores": os.cpu_count(),
        "device": machine(),
    }
    (out / "case.json").write_text(json.dumps(case, indent=1))
    write(args, f"forecast-{args.model}", {"run_dir": str(out), "steps": steps,
                                           "wall_s": case["wall_s"]})  # fmt: skip
    dist.destroy_process_group()


# --------------------------------------------------------------------------- one-liners


def case_oneliners(args) -> None:
    """Lightning and the HF Trainer on the device, each with its one line."""
    results = {}
    for name, fn in (("lightning", _lightning), ("transformers", _hf_trainer)):
        run_dir = Path(tempfile.mkdtemp(prefix=f"ailens-{name}-"))
        try:
            fn(args, run_dir)
            a = ailens.analyze(run_dir)
            results[name] = {"device": a.device.to_dict() if a.device else None,
                             "steps": int(len(a.step_end_s)), "ticks": int(a.n_ticks)}  # fmt: skip
        except Exception as e:  # noqa: BLE001 - report and go on to the next one-liner
            results[name] = {"error": f"{type(e).__name__}: {e}"}
    write(args, "oneliners", {"check": "device rows from the one-liners", **results})


def _lightning(args, run_dir: Path) -> None:
    import lightning.pytorch as pl
    from ailens.integrations.lightning import LensCallback

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                           torch.nn.Linear(2048, 512))  # fmt: skip

        def training_step(self, batch, _):
            return self.net(batch[0]).square().mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=1e-3)

    data = torch.utils.data.TensorDataset(torch.randn(64 * 40, 512))
    loader = torch.utils.data.DataLoader(data, batch_size=64)
    trainer = pl.Trainer(accelerator="cpu" if args.cpu else "gpu", devices=1, max_epochs=1,
                         callbacks=[LensCallback(run_dir=str(run_dir))], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False)  # fmt: skip
    trainer.fit(Net(), loader)


def _hf_trainer(args, run_dir: Path) -> None:
    from ailens.integrations.transformers import attach as hf_attach
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    cfg = GPT2Config(n_layer=2, n_embd=128, n_head=2)
    ids = torch.randint(0, cfg.vocab_size, (16 * 20, 64))
    data = [{"input_ids": x, "labels": x} for x in ids]
    targs = TrainingArguments(output_dir=str(run_dir / "hf"), per_device_train_batch_size=16,
                              num_train_epochs=1, report_to=[], save_strategy="no",
                              logging_steps=5, use_cpu=args.cpu)  # fmt: skip
    trainer = Trainer(model=GPT2LMHeadModel(cfg), args=targs, train_dataset=data)
    hf_attach(trainer, run_dir=str(run_dir))
    trainer.train()


# --------------------------------------------------------------------------- main


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", choices=["profile", "recompare", "ab", "forecast", "oneliners"])
    p.add_argument("--trace", help="recompare: the profiler's chrome trace (.json.gz)")
    p.add_argument("--run", help="recompare: ailens's run directory")
    p.add_argument("--out", required=True)
    p.add_argument("--model", default="resnet50", choices=["resnet50", "gpt2"])
    p.add_argument("--backend", default="nccl")
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--profiled", type=int, default=10)
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--block-s", type=float, default=1.0)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-batches", type=int, default=20)
    p.add_argument("--ckpt-every", type=int, default=250)
    p.add_argument("--cpu", action="store_true", help="tiny sizes on the CPU (gloo): a dry run")
    args = p.parse_args()
    if args.cpu and args.backend == "nccl":
        args.backend = "gloo"
    {"profile": case_profile, "recompare": case_recompare, "ab": case_ab,
     "forecast": case_forecast, "oneliners": case_oneliners}[args.case](args)  # fmt: skip


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
