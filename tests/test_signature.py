"""The signature rule (issue 30): when the run's structure counts as captured, through the
public timeline API (the live Lens's model fed a timeline)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ailens
from ailens import LensConfig, Section, Timeline, forecast_timeline

MLPERF = Path(__file__).resolve().parents[1] / "benchmarks" / "forecast_corpus" / "mlperf"


def _run(n: int, eval_batches: int, eval_batch_s: float, *, eval_from: int, every: int):
    """``n`` steps of 0.1 s (2 % noise) with an evaluation of ``eval_batches`` batches of
    ``eval_batch_s`` after every ``every`` steps from step ``eval_from``; its schedule
    announces them and their batches (as the Hugging Face Trainer's ``eval_steps`` does)."""
    d = np.random.default_rng(3).normal(0.1, 0.002, n).clip(0.05)
    d[:2] += 0.3  # warm-up
    t, ends, sections = 0.0, [], []
    for k, x in enumerate(d, 1):
        t += float(x)
        ends.append(t)
        if k >= eval_from and (k - eval_from) % every == 0:
            e = eval_batches * eval_batch_s
            sections.append(Section("eval", t, t + e))
            t += e
    sched = {
        "total_steps": n,
        "eval_every_steps": every,
        "eval_start_step": eval_from,
        "eval_steps": eval_batches,
    }
    return forecast_timeline(Timeline(tuple(ends), tuple(sections), sched, end_s=t))


def test_a_cheap_announced_evaluation_priced_from_the_schedule_need_not_be_seen_first():
    """Three evaluations of 5 batches from step 200 of 400 cost ~1 % of the run: priced
    from the schedule (5 batches at a third of a step, +/- 50 %), what they still cost is
    known within the tolerance (3 %; 2 % alike), so the signature does not wait half the run for the
    first one (it did: step 201). The forecast there is within 1 % and its interval holds
    the end."""
    r = _run(400, 5, 0.035, eval_from=200, every=100)
    sig = r.signature_step
    assert sig is not None and sig <= 40
    f = r.forecast
    ev = next(c for c in f.signature_parts if c.name.startswith("section eval"))
    assert ev.seen == 0 and ev.captured
    assert ev.precision == pytest.approx(1.96 * 0.5, rel=0.01)
    assert abs(f.error_pct) < 1.0 and f.covered


def test_an_expensive_announced_evaluation_is_still_waited_for():
    """The same schedule with evaluations of 100 batches (a quarter of the run): a prior
    of +/- 50 % is not a price within 3 % of the total, so the signature waits for the
    first evaluation and says so before."""
    r = _run(400, 100, 0.035, eval_from=200, every=100)
    sig = r.signature_step
    assert sig is None or sig > 200
    # What held it, read where the run stood at step 150.
    tl = r.timeline
    half = Timeline(tl.step_end_s[:150], (), tl.schedule, end_s=None)
    waited = forecast_timeline(half).forecast.signature_waited_for
    assert any(w.startswith("section eval (not seen yet): not seen yet: priced") for w in waited)


def _fading(n: int = 80) -> np.ndarray:
    fade = 1.0 + 0.4 * np.exp(-np.arange(n) / 3.5)  # 1.4, 1.30, 1.22, ... 1.0
    d = 4.0 * fade * np.random.default_rng(7).normal(1.0, 0.003, n)
    d[0] += 20.0  # compilation
    return np.cumsum(d)


def test_a_warm_up_that_fades_over_several_steps_is_no_steady_level():
    """Issue 30 (MLPerf RNN-T: blocks 35 % over the level after the 2 warm-up steps, fading
    over 10 of 79): the level was known to +/-10 % at the first evaluation point, step 5,
    and the signature there was +15.7 % off. While a significant line through the latest
    steps moves the level by more than the rule's precision it is not steady: the signature
    waits until the steps settle (+10.3 % at step 5 before; +1.8 % at step 9 now)."""
    n = 80
    ends = _fading(n)
    r = forecast_timeline(Timeline(tuple(ends), (), {"total_steps": n}, end_s=float(ends[-1])))
    sig = r.signature_step
    assert sig is not None and 8 <= sig <= 20
    f = r.forecast
    assert abs(f.error_pct) < 3.0 and f.covered
    # Before it, the rule said why.
    early = Timeline(tuple(ends[:6]), (), {"total_steps": n}, end_s=None)
    waited = forecast_timeline(early).forecast.signature_waited_for
    assert any(w.startswith("training steps: still settling") for w in waited)


def test_without_a_total_a_settling_level_holds_the_signature_too():
    """While the total is unknown the step level alone decides: a fading warm-up holds it
    there as well (with ``signature_min_steps`` 4 it was ready at the first evaluation
    point, step 5)."""
    ends = _fading()
    cfg = LensConfig(signature_min_steps=4)
    r = forecast_timeline(Timeline(tuple(ends[:30]), (), {}, end_s=None), config=cfg)
    assert r.signature_step is not None and r.signature_step >= 8


def test_a_part_seen_once_whose_cost_is_known_to_3_pct_of_the_total_is_captured():
    """The default tolerance, from the sweep on the MLPerf corpus (docs/forecast.md): a
    real Mask R-CNN run of 343 logged units whose evaluations run beside the steps (every
    24-25 units from unit 24, 3.2 % of the run), known from their first occurrence to
    +/-65 %: 2.1 % of the total. With 2 % it waited for the second (unit 49, 14.3 % of the
    run); now it is reached within 10 % of the run, within 1 % of the end and with an
    interval that holds it."""
    path = MLPERF / "v2.1/ASUSTeK/ESC8000A-E11-8xA100-PCIE-80GB-NVBridge/maskrcnn/result_0.txt.gz"
    tl = ailens.read_timeline(path, include_init=False)
    r = forecast_timeline(tl)
    assert LensConfig().signature_rel_tol == 0.03
    assert r.signature_step is not None and r.signature_step <= 0.10 * tl.total_steps
    f = r.forecast
    assert abs(f.error_pct) < 1.0 and f.covered
    ev = next(c for c in f.signature_parts if c.name == "section eval (beside the steps)")
    assert ev.seen == 1 and ev.captured and ev.precision > 0.10  # by its cost, not its time
    old = forecast_timeline(tl, config=LensConfig(signature_rel_tol=0.02))
    assert old.signature_step > 0.14 * tl.total_steps
