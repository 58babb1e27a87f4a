"""benchmarks/forecast_public.py: a public script run with only the one ailens line, its
forecast history found and scored (never its accuracy: that is the benchmark's), and the live
goal's rule."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import forecast_public  # noqa: E402

TORCHRUN = Path(sys.executable).parent / "torchrun"


@pytest.mark.parallel
@pytest.mark.timeout(300)
def test_the_ddp_tutorial_runs_with_the_one_line_and_its_forecasts_are_scored(tmp_path):
    """PyTorch's DDP tutorial (torchrun, 2 gloo ranks, tiny sizes): nothing but its own
    ``for epoch in range(self.epochs_run, max_epochs)`` says its length, and that does (issue
    30, 9): a total forecast from the first steps after warm-up, scored at 10 %, and no line
    asking for the length; the epoch-level forecast is scored beside it."""
    pytest.importorskip("torch.distributed")
    if not TORCHRUN.exists():
        pytest.skip("torchrun not found next to the interpreter")
    run_dir = tmp_path / "run"
    code, out, _ = forecast_public.run_public("ddp-tutorial", run_dir, smoke=True, timeout=240)
    assert code == 0, out[-3000:]
    assert "are not known" not in out  # the loop said the length: no line asking for it
    row = forecast_public.score_public(run_dir)
    assert row["steps"] == 2 * 64  # 2 epochs x 2048 samples / 2 ranks / batch 16
    first = row["first_forecast_step"]
    assert first is not None and first <= row["warmup_steps"] + forecast_public.FIRST_AFTER_WARMUP
    assert "length_given" not in row  # the run had its total: no replay told the length
    for who in ("ailens", "naive"):
        assert row["error_pct"][who]["10"] is not None
        assert row["epoch_error_pct"][who]["10"] is not None
    goal = row["goal"]
    assert goal["forecast"] == "total" and goal["first_step"] == first
    assert goal["ailens_error_10_pct"] == row["error_pct"]["ailens"]["10"]


def _row(first_total, total_10, naive_10, *, first_epoch=None, epoch_10=None, epoch_naive=None):
    """A scored row with only what ``live_goal`` reads."""

    def errs(a, n):
        return {"ailens": {"10": a}, "naive": {"10": n}}

    row = {
        "warmup_steps": 2,
        "first_forecast_step": first_total,
        "error_pct": errs(total_10, naive_10),
    }
    if first_epoch is not None:
        row |= {
            "first_epoch_forecast_step": first_epoch,
            "epoch_error_pct": errs(epoch_10, epoch_naive),
        }
    return row


@pytest.mark.parametrize(
    ("row", "forecast", "holds"),
    [
        (_row(3, -1.9, 1.0), "total", True),  # within the progress bar + 1 point
        (_row(3, 2.1, -1.0), "total", False),  # worse by more than 1 point
        (_row(9, 0.1, 5.0), "total", False),  # first forecast too long after the warm-up
        (_row(None, None, None, first_epoch=3, epoch_10=4.0, epoch_naive=9.0), "epoch", True),
        (_row(None, None, None, first_epoch=3, epoch_10=None, epoch_naive=9.0), "epoch", False),
        (_row(None, None, None), "none", False),  # nothing at all: not reached
    ],
)
def test_the_live_goal_rule(row, forecast, holds):
    goal = forecast_public.live_goal(row)
    assert goal["forecast"] == forecast and goal["holds"] is holds


def test_the_epoch_level_forecast_is_scored_against_its_epochs_actual_end():
    """At 10 % of 100 steps (step 10, 1 s elapsed, 0.1 s a step) the forecast says the
    running epoch ends (step 20) at 2.2 s; it ended at 2.0 s: +10 %, where the epoch's
    progress bar (1 s + 10 steps x 0.1 s) is exact. Points without a forecast stay null."""
    from forecast_replay import epoch_scores

    step_end_s = [0.1 * k for k in range(1, 101)]
    got = epoch_scores({10: (20, 2.2, 1.0), 5: (120, 9.0, 0.5)}, step_end_s, 100)
    assert got["first_epoch_forecast_step"] == 5
    assert got["epoch_error_pct"]["ailens"]["10"] == pytest.approx(10.0)
    assert got["epoch_error_pct"]["naive"]["10"] == pytest.approx(0.0)
    # an epoch end past the run's last step has no actual end to score against
    assert got["epoch_error_pct"]["ailens"]["5"] is None
    assert got["epoch_error_pct"]["ailens"]["20"] is None
