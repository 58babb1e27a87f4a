"""ailens.integrations.transformers on a real Hugging Face Trainer, DDP on 2 torchrun ranks
(gloo, CPU), a tiny GPT-2 built from a config (tests/parallel/hf_trainer.py); the tests check
what both ranks' trace files hold."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import rank_results

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import ailens  # noqa: E402

SCRIPT = Path(__file__).parent / "parallel" / "hf_trainer.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"


def train_ddp(tmp_path: Path, *args: str) -> list[dict]:
    if not TORCHRUN.exists():
        pytest.skip("torchrun not found next to the interpreter")
    cmd = [
        str(TORCHRUN), "--standalone", "--nproc_per_node=2", str(SCRIPT),
        "--run-dir", str(tmp_path / "run"), "--out-dir", str(tmp_path / "out"), *args,
    ]  # fmt: skip
    return rank_results(cmd, cwd=tmp_path, env={"OMP_NUM_THREADS": "1"}, timeout=100)


def summary(trace, param_bytes: int) -> dict:
    ops = [trace.ops[i] for i in trace.events["op"]]
    events = list(zip(ops, trace.events["nbytes"].tolist(), strict=True))
    return {
        "steps": len(trace.steps["step"]),
        "buckets": events.count(("allreduce", param_bytes)),
        "events": events,
        "sections": [(m["name"], m["step"]) for m in trace.marks if m["kind"] == "section"],
        "schedule": [m for m in trace.marks if m["kind"] == "schedule"],
    }


@pytest.mark.parallel
@pytest.mark.timeout(120)
def test_attach_records_buckets_steps_and_evaluation_on_both_ranks(tmp_path):
    # 48 samples per rank, batch 4, accumulation 2: 6 optimizer steps per epoch, 2 epochs;
    # evaluation every 4 steps.
    results = train_ddp(tmp_path, "--samples", "96", "--accumulate", "2", "--eval-steps", "4")
    run = ailens.load_run(tmp_path / "run")
    assert run.complete and not run.warnings, run.warnings
    assert run.meta["framework"] == "transformers-ddp"
    summaries = []
    for r, trace in zip(results, run.ranks, strict=True):
        assert r["disabled"] is None and r["closed"] and not r["warnings"]
        assert r["global_step"] == r["max_steps"] == r["lens_steps"] == 12
        s = summary(trace, r["param_bytes"])
        # One step per optimizer step; one gradient bucket per step (no_sync while
        # accumulating); the Trainer's gathers for the logged loss recorded as well.
        assert s["steps"] == 12 and s["buckets"] == 12
        assert any(op == "allgather" for op, _ in s["events"])
        assert s["sections"] == [("eval", 4), ("eval", 8), ("eval", 12)]
        schedule, learned = s["schedule"]
        # Issue 30: what a checkpoint writes, learned after the first optimizer step: the
        # model's parameters and buffers and AdamW's two moments and step counts.
        assert learned["step"] == 1 and "total_steps" not in learned
        assert 3 * r["param_bytes"] <= learned["checkpoint_bytes"] <= 3.1 * r["param_bytes"]
        assert schedule["total_steps"] == 12 and schedule["steps_per_epoch"] == 6
        assert schedule["epochs"] == 2 and schedule["eval_every_steps"] == 4
        # Issue 30, 10: one evaluation's batches on a rank (16 samples, batch 4, 2 ranks).
        assert schedule["eval_steps"] == 2
        summaries.append(s)
    assert summaries[0]["events"] == summaries[1]["events"], "ranks recorded different ticks"
    # Rank 0's printed training logs carry the forecast once it has one (from then on), rank
    # 1's never.
    shown = ["ailens_eta_s" in log for log in results[0]["printed"] if "loss" in log]
    assert any(shown) and all(shown[shown.index(True) :]), results[0]["printed"]
    assert not any("ailens_eta_s" in log for log in results[1]["printed"])
    # Issue 31, 3: and the Trainer's own record of them (log_history, trainer_state.json),
    # which the reporting integrations read: the forecast's end, interval and time to go.
    stored = [log for log in results[0]["log_history"] if "loss" in log]
    with_forecast = ["ailens_eta_s" in log for log in stored]
    assert any(with_forecast) and all(with_forecast[with_forecast.index(True) :]), stored
    for log in stored[with_forecast.index(True) :]:
        # A spread while steps remain (none at the last step: nothing to go).
        assert log["ailens_total_s"] > 0 and (log["ailens_eta_pm_s"] > 0 or not log["ailens_eta_s"])
        assert 0 <= log["ailens_eta_s"] <= log["ailens_total_s"]
    assert not any("ailens_eta_s" in log for log in results[1]["log_history"])


@pytest.mark.parallel
@pytest.mark.timeout(120)
def test_callback_alone_early_stops_both_ranks_at_the_same_step(tmp_path):
    config = {"early_stop": True, "signature_rel_tol": 0.5, "exchange_seconds": 0}
    results = train_ddp(
        tmp_path, "--callback-only", "--samples", "800", "--epochs", "1",
        "--eval-steps", "1000", "--config", json.dumps(config),
    )  # fmt: skip
    assert results[0]["max_steps"] == 100
    steps = {r["global_step"] for r in results}
    assert len(steps) == 1 and steps.pop() < 100
    assert all(r["lens_should_stop"] and r["disabled"] is None for r in results)
    run = ailens.load_run(tmp_path / "run")
    for r, trace in zip(results, run.ranks, strict=True):
        s = summary(trace, r["param_bytes"])
        assert s["steps"] == r["global_step"]
        # callbacks=[LensCallback()] never sees the DDP model: no buckets, and rank 0 says so.
        assert s["buckets"] == 0 and s["events"]
    assert any("attach(trainer)" in w for w in results[0]["warnings"])
    assert not results[1]["warnings"]
    assert run.meta["framework"] == "transformers"


def test_a_misspelt_setting_fails_at_the_callback_line():
    from ailens.integrations.transformers import LensCallback

    with pytest.raises(TypeError):
        LensCallback(early_stopp=True)
