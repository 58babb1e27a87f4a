"""ailens.integrations.lightning: LensCallback on a real Lightning Trainer.

The parallel tests run 2 CPU ranks (gloo) started by Lightning's own launcher
(``Trainer(devices=2, strategy="ddp")`` runs tests/parallel/lightning_ddp.py again for rank 1)
and check what both ranks' trace files hold.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import rank_results

pytest.importorskip("lightning")

import ailens  # noqa: E402

SCRIPT = Path(__file__).parent / "parallel" / "lightning_ddp.py"


def fit_ddp(tmp_path: Path, *args: str, env: dict | None = None) -> list[dict]:
    cmd = [sys.executable, str(SCRIPT), "--run-dir", str(tmp_path / "run"), *args]
    env = {"OMP_NUM_THREADS": "1", **(env or {})}
    return rank_results(cmd, cwd=tmp_path, env=env, timeout=100)


def trace_summary(trace, param_bytes: int) -> dict:
    ops = [trace.ops[i] for i in trace.events["op"]]
    return {
        "steps": len(trace.steps["step"]),
        "buckets": sum(
            op == "allreduce" and n == param_bytes
            for op, n in zip(ops, trace.events["nbytes"].tolist(), strict=True)
        ),
        "events": list(zip(ops, trace.events["nbytes"].tolist(), strict=True)),
        "sections": [(m["name"], m["step"]) for m in trace.marks if m["kind"] == "section"],
        "schedule": [m for m in trace.marks if m["kind"] == "schedule"],
    }


@pytest.mark.parallel
@pytest.mark.timeout(120)
def test_ddp_fit_records_buckets_steps_and_validation_on_both_ranks(tmp_path):
    # 320 samples per rank, batch 8, accumulate 2: 20 optimizer steps per epoch, 2 epochs
    # (long enough for the live forecast, refreshed every 1 s, to reach the bar).
    results = fit_ddp(tmp_path, "--samples", "640", "--epochs", "2", "--accumulate", "2")
    run = ailens.load_run(tmp_path / "run")
    assert run.complete and not run.warnings, run.warnings
    assert run.meta["framework"] == "lightning-ddp" and run.world_size == 2
    summaries = []
    for r, trace in zip(results, run.ranks, strict=True):
        assert r["disabled"] is None and r["closed"]
        assert r["global_step"] == r["estimated_steps"] == r["lens_steps"] == 40
        s = trace_summary(trace, r["param_bytes"])
        # One step per optimizer step, not per batch; one gradient bucket per step: DDP does
        # not reduce the accumulating batches.
        assert s["steps"] == 40 and s["buckets"] == 40
        # The strategy's own collectives go through torch.distributed and are recorded too.
        assert {op for op, _ in s["events"]} >= {"allreduce", "barrier"}
        assert s["sections"] == [("sanity_check", 0), ("eval", 20), ("eval", 40)]
        schedule, learned = s["schedule"]
        assert "checkpoint_bytes" in learned and "total_steps" not in learned
        assert schedule["total_steps"] == 40 and schedule["steps_per_epoch"] == 20
        assert schedule["epochs"] == 2 and schedule["eval_every_epochs"] == 1
        # Issue 30, 10: the validation's batches (32 samples, 2 ranks, batch 8).
        assert schedule["eval_steps"] == 2
        summaries.append(s)
    assert summaries[0]["events"] == summaries[1]["events"], "ranks recorded different ticks"
    # The forecast is in the postfix of Lightning's own bar on rank 0.
    assert "ailens_eta_s=" in results[0]["postfix"], results[0]["postfix"]
    assert results[1]["postfix"] is None


@pytest.mark.parallel
@pytest.mark.timeout(120)
def test_early_stop_stops_both_ranks_at_the_same_step(tmp_path):
    # Eight epochs of 100 steps: the signature waits for the first validation (an announced
    # part) at step 100 and a steady level after it, which a loaded machine can delay.
    config = {"early_stop": True, "signature_rel_tol": 0.5, "exchange_seconds": 0}
    results = fit_ddp(
        tmp_path, "--samples", "1600", "--epochs", "8", "--config", json.dumps(config)
    )
    total = results[0]["estimated_steps"]
    assert total == 800
    steps = {r["global_step"] for r in results}
    assert len(steps) == 1 and steps.pop() < total
    assert all(r["should_stop"] and r["lens_should_stop"] for r in results)
    run = ailens.load_run(tmp_path / "run")
    recorded = [len(t.steps["step"]) for t in run.ranks]
    assert recorded == [results[0]["global_step"]] * 2
    doc = json.loads((tmp_path / "run" / "forecast.json").read_text())
    assert doc["total_steps"] == total and doc["signature_step"] <= recorded[0]


@pytest.mark.parallel
@pytest.mark.timeout(120)
def test_early_stop_also_stops_a_rank_where_ailens_disabled_itself(tmp_path):
    # Rank 1 faults at its 6th collective and goes on without recording; rank 0 still finds
    # the signature. Rank 1 must follow the stop vote, or rank 0 would leave it waiting on a
    # gradient allreduce (the run would hang).
    # Eight epochs of 100 steps: the signature waits for the first validation (an announced
    # part) at step 100 and a steady level after it, which a loaded machine can delay (with
    # four epochs a full-suite run here once ended the run before the signature).
    config = {"early_stop": True, "signature_rel_tol": 0.5, "exchange_seconds": 0}
    results = fit_ddp(
        tmp_path, "--samples", "1600", "--epochs", "8", "--config", json.dumps(config),
        "--fault", "1:5",
    )  # fmt: skip
    assert results[0]["disabled"] is None and "injected fault" in results[1]["disabled"]
    assert results[0]["global_step"] == results[1]["global_step"] < 800
    assert all(r["should_stop"] for r in results)


def _one_layer():
    """A one-layer LightningModule on plain SGD (no optimizer state), its validation the
    mean output."""
    import torch
    from lightning.pytorch import LightningModule

    class Net(LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.log("v", self.layer(batch[0]).mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net()


@pytest.mark.timeout(90)
def test_single_process_fit_records_steps_and_validation(tmp_path):
    import torch
    from ailens.integrations.lightning import LensCallback
    from lightning.pytorch import Trainer
    from torch.utils.data import DataLoader, TensorDataset

    data = DataLoader(TensorDataset(torch.randn(24, 4)), batch_size=4)  # 6 batches
    callback = LensCallback(run_dir=tmp_path / "run", progress_bar=False)
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        val_check_interval=3,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(_one_layer(), data, DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4))
    assert callback.lens.closed and callback.lens.disabled is None
    assert "ailens_eta_s" not in trainer.progress_bar_metrics  # progress_bar=False
    (trace,) = ailens.load_run(tmp_path / "run").ranks
    assert trace.meta["framework"] == "lightning"
    s = trace_summary(trace, 0)
    assert s["steps"] == 12
    assert s["sections"] == [("eval", 3), ("eval", 6), ("eval", 9), ("eval", 12)]
    schedule, learned = s["schedule"]
    assert schedule["eval_every_steps"] == 3 and schedule["total_steps"] == 12
    # What a checkpoint writes, learned at the first optimizer step (SGD keeps no state).
    assert learned["step"] == 1 and learned["checkpoint_bytes"] == (4 + 1) * 4


@pytest.mark.timeout(90)
@pytest.mark.parametrize("every", [None, 4])
def test_the_trainers_model_checkpoint_announces_the_checkpoints(tmp_path, every):
    """Issue 30: Lightning checkpoints every epoch by default (a ModelCheckpoint saving
    every_n_epochs=1), or every_n_train_steps: the schedule says when, so the forecast
    prices the checkpoints before the first one ran."""
    import torch
    from ailens.integrations.lightning import LensCallback
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    data = DataLoader(TensorDataset(torch.randn(24, 4)), batch_size=4)  # 6 batches
    callback = LensCallback(run_dir=tmp_path / "run", progress_bar=False)
    saves = [] if every is None else [ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=every)]
    trainer = Trainer(accelerator="cpu", devices=1, max_epochs=2, callbacks=[callback, *saves],
                      logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(_one_layer(), data)
    assert callback.lens.closed and callback.lens.disabled is None
    (trace,) = ailens.load_run(tmp_path / "run").ranks
    schedule = trace_summary(trace, 0)["schedule"][0]
    assert schedule["checkpoint_every_steps"] == (6 if every is None else every)


def test_a_misspelt_setting_fails_at_the_callback_line():
    from ailens.integrations.lightning import LensCallback

    with pytest.raises(TypeError):
        LensCallback(early_stopp=True)


@pytest.mark.timeout(60)
def test_the_standalone_pytorch_lightning_package_gets_its_own_callback_class():
    pytest.importorskip("pytorch_lightning")
    code = (
        "import sys, pytorch_lightning\n"
        "from ailens.integrations.lightning import LensCallback\n"
        "assert issubclass(LensCallback, pytorch_lightning.Callback)\n"
        "print('lightning.pytorch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parallel
@pytest.mark.timeout(120)
def test_the_forecast_reaches_the_trainers_loggers(tmp_path):
    """Issue 31, 3: the forecast's end, interval and time to go in the user's own loggers
    (here a CSVLogger: metrics.csv), at the trainer's logging cadence (log_every_n_steps=5),
    from rank 0 only."""
    import csv

    fit_ddp(tmp_path, "--samples", "640", "--epochs", "2", "--csv", str(tmp_path / "logs"))
    (path,) = (tmp_path / "logs").rglob("metrics.csv")
    rows = [r for r in csv.DictReader(path.open()) if r.get("ailens_eta_s")]
    assert len(rows) >= 4, path.read_text()[:2000]
    steps = [int(r["step"]) for r in rows]
    assert all(s % 5 == 0 for s in steps) and steps == sorted(set(steps))
    for r in rows:
        total, eta, pm = (
            float(r["ailens_total_s"]),
            float(r["ailens_eta_s"]),
            float(r["ailens_eta_pm_s"]),
        )
        assert 0 <= eta <= total and (pm > 0 or eta == 0)  # nothing to go: +/- 0
    assert float(rows[-1]["ailens_eta_s"]) < float(rows[0]["ailens_eta_s"])
