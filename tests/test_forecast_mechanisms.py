"""The forecast's mechanisms on real runs' structure (issue 21): each test reproduces a way the
forecast once lost to a progress bar on real training logs. A real Lens driven by a clock
that follows the timeline, or the Forecaster fed step ends and sections."""

from __future__ import annotations

import numpy as np
import pytest

import ailens
from ailens import load_run
from ailens._analysis import analyze
from ailens._forecast import EvalPlan, Forecaster, Schedule


class Clock:
    """A Lens clock that follows the timeline (ns)."""

    def __init__(self) -> None:
        self.now = 10**9

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(round(seconds * 1e9))


class Counter:
    kind, unit, fallback_reason = "cpu-ns", "ns", None

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def read(self) -> int:
        return self.clock.now

    def close(self) -> None:
        pass


def _lens(tmp_path, **cfg):
    clock = Clock()
    lens = ailens.Lens(run_dir=tmp_path, clock=clock, work_counter=Counter(clock), **cfg)
    return lens, clock


def _feed(f: Forecaster, durations_s, *, sections=None, t_ns: int = 0):
    """Step durations into ``f``; ``sections``: {steps done: (name, seconds)} after that
    step. Returns the prediction after each step and the end time."""
    out = []
    for i, d in enumerate(durations_s):
        t_ns += int(round(d * 1e9))
        f.on_step(t_ns)
        if sections and i + 1 in sections:
            name, secs = sections[i + 1]
            f.on_section(name, i + 1, t_ns, t_ns + int(round(secs * 1e9)))
            t_ns += int(round(secs * 1e9))
        out.append(f.predict())
    return out, t_ns


def _noisy(n, mean=1.0, cv=0.02, seed=0):
    return np.random.default_rng(seed).normal(mean, cv * mean, n).clip(mean * 0.3)


# --------------------------------------------------------------------------- schedules


def test_set_schedule_says_starts_listed_evaluations_and_fractional_periods(tmp_path):
    lens, clock = _lens(tmp_path)
    lens.set_schedule(
        total_steps=1000, steps_per_epoch=10, eval_every_epochs=2.5, eval_start_epoch=40
    )
    lens.set_schedule(eval_at_steps=[7, 3], eval_at_epochs=[1.5])
    sched = lens.online.forecaster.schedule
    assert sched.eval_every_epochs == 2.5 and sched.eval_start_epoch == 40
    assert sched.eval_at_steps == (3, 7) and sched.eval_at_epochs == (1.5,)
    plan = sched.eval_plan()
    # Every 25 steps from step 400 (epoch 40), and at steps 3, 7 and 15 (epoch 1.5).
    assert plan.count(0, 1000) == 3 + len(range(400, 1001, 25))
    assert plan.count(401, 424) == 0 and plan.count(401, 425) == 1
    for _ in range(5):
        clock.advance(1.0)
        lens.step_end()
    lens.close()
    # The schedule is a mark of the trace: the offline analysis sees the same.
    marks = [m for m in load_run(tmp_path).ranks[0].marks if m["kind"] == "schedule"]
    assert marks[0]["eval_every_epochs"] == 2.5 and marks[1]["eval_at_steps"] == [3, 7]
    fed = []
    analyze(load_run(tmp_path), watch=fed.append)
    assert fed[-1].forecaster.schedule == sched
    with pytest.raises(ValueError, match="eval_at_steps"):
        lens.set_schedule(eval_at_steps=[1.5])


def test_an_evaluation_period_that_is_not_a_whole_number_of_steps_lands_on_the_nearest():
    plan = EvalPlan(period=2.5, start=2.5)
    hits = [k for k in range(0, 21) if plan.count(k, k)]
    assert hits == [3, 5, 8, 10, 13, 15, 18, 20]  # floor(2.5 j + 0.5)
    assert plan.count(0, 20) == len(hits)
    s = Schedule()
    s.update({"total_steps": 100, "eval_every_steps": 10, "eval_start_step": 0})
    assert s.eval_plan().count(0, 100) == 11  # 0, 10, ..., 100


# --------------------------------------------------------------------------- 1. no zero level


def test_the_first_forecast_after_warm_up_has_a_level_and_an_interval(tmp_path):
    """Issue 21, 1: the first forecast after the warm-up once had a step level of 0 (the
    regime's first steps were kept out of its sums) and a zero-width interval."""
    lens, clock = _lens(tmp_path, total_steps=40)
    for _ in range(4):
        clock.advance(1.0)
        lens.step_end()
    live = lens.forecast
    assert live.step == 4 and live.step_time_s == pytest.approx(1.0)
    assert live.predicted_total_s == pytest.approx(40.0)
    lo, hi = live.interval_s
    assert lo < 40.0 < hi  # two or three identical steps do not make a certainty
    lens.close()


def test_two_steps_after_the_warm_up_give_their_mean_not_zero():
    f = Forecaster(warmup_steps=2)
    f.on_schedule({"total_steps": 1000})
    preds, _ = _feed(f, [3.0, 2.0, 1.0, 1.2])
    p = preds[3]
    assert p.step_time_s == pytest.approx(1.1)
    assert p.predicted_total_s == pytest.approx(7.2 + 996 * 1.1)
    assert p.interval_s[1] - p.interval_s[0] > 0


# --------------------------------------------------------------------------- 8. Lens clock


def test_lens_forecast_is_refreshed_on_the_lens_clock(tmp_path):
    """Issue 21, 8: ``lens.forecast`` was refreshed on the machine's monotonic clock, so a
    Lens on another clock (a replay, a test) read a forecast made steps earlier."""
    lens, clock = _lens(tmp_path, total_steps=100)
    for i in range(30):
        clock.advance(1.0 + 0.5 * (i >= 15))  # a lasting change of speed at step 15
        lens.step_end()
        live = lens.forecast
        if live is not None:
            assert live.step == i + 1
            assert live.elapsed_s == pytest.approx((clock.now - 10**9) / 1e9)
    assert lens.forecast.step_time_s == pytest.approx(1.5)
    lens.close()
