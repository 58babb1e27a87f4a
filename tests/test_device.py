"""Device time (``ailens.record.device``, ``ailens.analysis.device``): marks resolved later,
never blocking; written to the trace; read back as collective, step and gpu-ns times.

The CPU tests drive the Lens with a scripted clock of device events (the protocol an
integration implements), so resolution order, non-blocking behaviour and the arithmetic are
checked exactly. ``test_ddp_on_cuda_*`` run real DDP on a CUDA device and skip without one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ailens
from ailens.analysis.device import device_rank, device_summary


class ScriptedDevice:
    """Device events whose completion times the test decides: ``mark()`` stamps the event
    with the device time ``now`` (ns); an event is done once ``passed`` reaches it."""

    name = "scripted"

    def __init__(self) -> None:
        self.now = 0
        self.passed = -1
        self.waited = 0

    def mark(self):
        return {"t": self.now}

    def done(self, event) -> bool:
        return event["t"] <= self.passed

    def elapsed_ns(self, start, end) -> int:
        assert self.done(start) and self.done(end), "elapsed on an event not done"
        return end["t"] - start["t"]

    def wait(self) -> None:
        self.waited += 1
        self.passed = 10**18


def _lens(tmp_path, **kw):
    return ailens.Lens(run_dir=str(tmp_path / "run"), exchange_seconds=3600, **kw)


def test_marks_resolve_at_later_steps_in_order_and_never_wait(tmp_path):
    dev = ScriptedDevice()
    lens = _lens(tmp_path)
    times = lens.use_device_clock(dev)
    assert times is not None and lens.use_device_clock(dev) is times
    ready_end = []
    for step in range(3):
        for k in range(2):
            tick = lens.collective_begin("allreduce", 1024)
            dev.now = 1000 * (10 * step + 2 * k + 1)  # the input is ready
            entry = times.collective_ready(tick)
            dev.now += 300 + 100 * k  # the collective completes
            times.collective_done(entry)
            ready_end.append((entry[1]["t"], entry[2]["t"]))
            lens.collective_end(tick)
        dev.now = 1000 * (10 * step + 8)
        # the device lags a step behind the host: it has passed the previous step's end only
        dev.passed = 1000 * (10 * (step - 1) + 8) if step else -1
        lens.step_end()
    assert dev.waited == 0
    assert times.resolved_collectives == 4 and times.resolved_steps == 2  # earlier steps only
    lens.close()
    assert dev.waited == 1  # close waits once
    run = ailens.load_run(tmp_path / "run")
    d = device_rank(0, run.ranks[0].marks)
    assert d.clock == "scripted"
    assert list(d.tick) == [0, 1, 2, 3, 4, 5]
    assert [(int(a), int(b)) for a, b in zip(d.ready_ns, d.end_ns, strict=True)] == ready_end
    assert list(d.step) == [0, 1, 2]
    assert list(d.step_end_ns) == [8000, 18000, 28000]


def test_collective_device_time_starts_when_the_previous_one_ended():
    marks = [
        {
            "kind": "device",
            "clock": "c",
            # two buckets ready 1 us apart, the second queued behind the first (10 us long)
            "tick": [0, 1, 2],
            "ready_ns": [1_000, 2_000, 50_000],
            "end_ns": [11_000, 15_000, 53_000],
            "step": [0, 1],
            "step_end_ns": [20_000, 60_000],
        }
    ]
    d = device_rank(3, marks)
    assert list(d.comm_ns) == [10_000, 4_000, 3_000]
    # a backend with worker threads (gloo) runs collectives side by side: each from its own
    # ready point, whatever ended first
    side = device_rank(3, [{**marks[0], "queued": False, "end_ns": [11_000, 9_000, 53_000]}])
    assert list(side.comm_ns) == [10_000, 7_000, 3_000]
    assert list(device_rank(3, [{**marks[0], "queued": False}]).comm_ns) == [10_000, 13_000, 3_000]
    # gpu-ns: the training stream's time before each collective, restarting at step ends
    assert list(d.work_ns()) == [1_000, 1_000, 30_000]
    assert list(d.step_ns) == [40_000]
    s = device_summary([d])
    assert s.collective_s == pytest.approx(4e-6)
    assert s.step_s == pytest.approx(40e-6)
    assert s.comm_per_step_s == pytest.approx(3e-6)  # step 1 holds tick 2 only
    assert s.work_per_step_s == pytest.approx(30e-6)


def test_report_shows_device_time_only_when_recorded(tmp_path):
    dev = ScriptedDevice()
    lens = _lens(tmp_path)
    times = lens.use_device_clock(dev)
    for step in range(4):
        tick = lens.collective_begin("allreduce", 4096)
        dev.now = 10_000 * step + 2_000
        entry = times.collective_ready(tick)
        dev.now += 5_000
        times.collective_done(entry)
        lens.collective_end(tick)
        dev.now = 10_000 * (step + 1)
        lens.step_end()
    lens.close()
    out = subprocess.run(
        [sys.executable, "-m", "ailens", "report", str(tmp_path / "run"), "--json", "--no-record"],
        capture_output=True,
        text=True,
        check=True,
    )
    device = json.loads(out.stdout)["device"]
    assert device["counter"] == "gpu-ns" and device["clock"] == "scripted"
    assert device["step_s"] == pytest.approx(10e-6)
    assert device["collective_s"] == pytest.approx(5e-6)
    text = subprocess.run(
        [sys.executable, "-m", "ailens", "report", str(tmp_path / "run"), "--no-record"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Device time" in text and "gpu-ns" in text

    plain = _lens(tmp_path / "plain")
    plain.step_end()
    plain.close()
    out = subprocess.run(
        [sys.executable, "-m", "ailens", "report", str(tmp_path / "plain" / "run"), "--json",
         "--no-record"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(out.stdout)["device"] is None


def test_device_steps_without_collectives_summarise(tmp_path):
    """One device, no DDP (Lightning or the HF Trainer on one GPU): step ends only."""
    dev = ScriptedDevice()
    lens = _lens(tmp_path)
    lens.use_device_clock(dev)
    for step in range(5):
        dev.now = 7_000 * (step + 1)
        lens.step_end()
    lens.close()
    a = ailens.analyze(tmp_path / "run")
    assert a.device.collectives == 0 and a.device.collective_s is None
    assert a.device.comm_per_step_s is None and a.device.steps == 5
    assert a.device.step_s == pytest.approx(7e-6)


def test_a_failing_device_clock_disables_ailens_not_training(tmp_path, caplog):
    class Broken(ScriptedDevice):
        def done(self, event):
            raise RuntimeError("device lost")

    lens = _lens(tmp_path)
    times = lens.use_device_clock(Broken())
    tick = lens.collective_begin("allreduce", 8)
    times.collective_done(times.collective_ready(tick))
    lens.collective_end(tick)
    lens.step_end()  # resolution fails here: one warning, the Lens disables itself
    assert lens.disabled is not None and "device lost" in lens.disabled
    lens.step_end()
    lens.close()


_CUDA_DDP = textwrap.dedent(
    """
    import os, sys, torch, torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from ailens.integrations.torch import attach
    backend, run_dir = sys.argv[1], sys.argv[2]
    dist.init_process_group(backend)
    rank = dist.get_rank()
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).cuda()
    model = DDP(net, device_ids=[0], bucket_cap_mb=4)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    lens = attach(model, opt, run_dir=run_dir, total_steps=30)
    x = torch.randn(256, 1024, device="cuda")
    for _ in range(30):
        model(x).square().mean().backward()
        opt.step(); opt.zero_grad()
    lens.close()
    dist.destroy_process_group()
    """
)


def _cuda_ranks() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


@pytest.mark.skipif(_cuda_ranks() == 0, reason="no CUDA device on this machine")
@pytest.mark.parametrize("backend,ranks", [("nccl", 1), ("gloo", 2)])
def test_ddp_on_cuda_records_device_time(tmp_path, backend, ranks):
    script = tmp_path / "ddp_cuda.py"
    script.write_text(_CUDA_DDP)
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
         "--standalone", str(script), backend, str(tmp_path / "run")],
        check=True, timeout=240,
    )  # fmt: skip
    a = ailens.analyze(tmp_path / "run")
    assert a.device is not None and a.device.clock == "cuda-events"
    assert a.device.ranks == ranks
    for d in a.device_ranks:
        assert len(d.step_end_ns) == 30  # every step resolved (close waits once)
        assert len(d.tick) >= 30 * 2  # 8 MB of gradients in 4 MB buckets
        assert np.all(d.end_ns >= d.ready_ns) and np.all(np.diff(d.step_end_ns) > 0)
    assert a.device.step_s > 0 and a.device.collective_s >= 0


def test_exchange_on_an_nccl_only_job_runs_on_a_gloo_group_of_the_same_ranks(tmp_path):
    """``init_process_group("nccl")`` reduces no CPU tensors: ailens's int64 exchange gets a
    gloo group of its own (checked here on a gloo world: the decision and the group's sums)."""
    code = textwrap.dedent(
        f"""
        import numpy as np, torch.distributed as dist
        from ailens.integrations.torch import _exchange_fn, _exchange_group
        dist.init_process_group("gloo", init_method="file://{tmp_path}/store", rank=0,
                                world_size=1)
        assert _exchange_group("gloo") is None and _exchange_group("cpu:gloo,cuda:nccl") is None
        group = _exchange_group("nccl")
        assert group is not None and dist.get_backend(group) == "gloo"
        ex = _exchange_fn(dist.all_reduce, group)
        assert ex(np.array([3, 4])).tolist() == [3, 4]
        assert ex.start(np.array([5]))().tolist() == [5]
        dist.destroy_process_group()
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]
