"""The forecast model (step level, recurring extras, sections, interval, signature), the cost
models and the alpha-beta fit; a real Lens for online == offline; real MPI ranks for early
stop and calibration."""

from __future__ import annotations

import json
import math
import sys
import textwrap

import numpy as np
import pytest
from conftest import mpiexec, run_ranks

import ailens
from ailens import LensConfig, analyze, load_run
from ailens.model.forecast import (
    Forecaster,
    StepLevel,
    naive_total_s,
    t_quantile,
)
from ailens.model.online import OnlineAnalysis
from ailens.predict.collectives import CostParams, canonical_op, collective_time, fit_cost_params

# --------------------------------------------------------------------------- cost models

A, B, G = 7e-6, 2e-10, 5e-11
P = CostParams(A, B, G)


A, B, G = 7e-6, 2e-10, 5e-11
P = CostParams(A, B, G)


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16, 33])
@pytest.mark.parametrize("n", [8, 1000, 1 << 20])
def test_cost_models_are_the_textbook_formulas(p, n):
    f = (p - 1) / p
    lg = math.ceil(math.log2(p))
    assert collective_time("allreduce", p, n, P) == pytest.approx(
        2 * (p - 1) * A + 2 * f * n * B + f * n * G
    )
    # allgather: nbytes is the local payload, the ring moves (p-1)/p of the gathered p*n.
    assert collective_time("allgather", p, n, P) == pytest.approx((p - 1) * A + f * p * n * B)
    assert collective_time("broadcast", p, n, P, algorithm="binomial") == pytest.approx(
        lg * (A + n * B)
    )
    assert collective_time("broadcast", p, n, P, algorithm="scatter_allgather") == pytest.approx(
        (lg + p - 1) * A + 2 * f * n * B
    )
    auto = "binomial" if n < 12288 or p < 8 else "scatter_allgather"
    assert collective_time("broadcast", p, n, P) == collective_time(
        "broadcast", p, n, P, algorithm=auto
    )
    assert collective_time("reduce_scatter", p, n, P) == pytest.approx(
        (p - 1) * A + f * n * B + f * n * G
    )
    assert collective_time("barrier", p, n, P) == pytest.approx(lg * A)


@pytest.mark.parametrize(
    "op", ["allreduce", "allgather", "broadcast", "alltoall", "barrier", "mystery"]
)
def test_one_rank_collectives_cost_nothing(op):
    assert collective_time(op, 1, 1 << 20, P) == 0.0


def test_op_names_map_to_models():
    for name in (
        "allreduce",
        "MPI_Allreduce",
        "all_reduce",
        "grouped_allreduce",
        "iallreduce",
        "allreduce_async",
        "hvd.allreduce",
    ):
        assert canonical_op(name) == "allreduce", name
    assert canonical_op("all_gather_into_tensor") == "allgather"
    assert canonical_op("Bcast") == "broadcast"
    assert canonical_op("reduce_scatter_tensor") == "reduce_scatter"
    assert canonical_op("frobnicate") is None
    # Unknown ops are costed as an allreduce.
    assert collective_time("frobnicate", 4, 100, P) == collective_time("allreduce", 4, 100, P)


# --------------------------------------------------------------------------- alpha-beta fit


def _measure(ops, p, sizes, params, noise, rng, reps=5):
    rows = [(op, n) for op in ops for n in sizes for _ in range(reps)]
    sec = [
        collective_time(op, p, n, params) * (1 + noise * rng.standard_normal()) for op, n in rows
    ]
    return [r[0] for r in rows], [r[1] for r in rows], sec


def test_fit_recovers_alpha_beta_gamma_from_allreduce_and_allgather():
    rng = np.random.default_rng(0)
    sizes = [8 * 4**i for i in range(12)]
    ops, nb, sec = _measure(["allreduce", "allgather"], 4, sizes, P, 0.01, rng)
    fit = fit_cost_params(ops, 4, nb, sec)
    assert fit.fitted == ("alpha", "beta", "gamma") and fit.note == ""
    assert fit.params.alpha == pytest.approx(A, rel=0.03)
    assert fit.params.beta == pytest.approx(B, rel=0.03)
    assert fit.params.gamma == pytest.approx(G, rel=0.1)
    assert fit.rel_rmse < 0.02 and fit.rows == 24 and fit.samples == 120


def test_fit_is_robust_to_outliers_and_folds_gamma_with_one_op_kind():
    rng = np.random.default_rng(1)
    sizes = [8 * 4**i for i in range(10)]
    ops, nb, sec = _measure(["allreduce"], 2, sizes, P, 0.0, rng)
    sec[3] *= 50  # one collective stuck behind something: the group median ignores it
    fit = fit_cost_params(ops, 2, nb, sec)
    assert "gamma" not in fit.fitted and "folded" in fit.note
    assert fit.params.alpha == pytest.approx(A, rel=1e-6)
    # 2(p-1)/p n beta' == 2(p-1)/p n beta + (p-1)/p n gamma  =>  beta' = beta + gamma / 2
    assert fit.params.beta == pytest.approx(B + G / 2, rel=1e-6)


def test_fit_with_one_size_takes_alpha_from_the_prior_and_one_rank_fits_nothing():
    prior = CostParams(2e-6, 0.0, source="prior")
    t = collective_time("allreduce", 2, 4096, CostParams(2e-6, 1e-9))
    fit = fit_cost_params(["allreduce"] * 3, 2, [4096] * 3, [t] * 3, prior=prior)
    assert fit.params.alpha == 2e-6 and fit.params.beta == pytest.approx(1e-9, rel=1e-9)
    assert "alpha taken from prior" in fit.note
    assert fit_cost_params(["allreduce"], 1, [8], [1e-6]).params is None


# --------------------------------------------------------------------------- statistics


def test_t_quantile_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4, 5, 9, 10, 29, 30, 59, 60, 61, 100, 300, 1000, 100000):
        for q in (0.6, 0.9, 0.975, 0.995):
            assert t_quantile(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-6, abs=1e-9), (
                q,
                df,
            )


def test_t_quantile_of_a_new_df_costs_a_few_cdf_evaluations(monkeypatch):
    # A live run's early evaluations each ask for a new df (the level's steps grow): the
    # quantile is solved there, on the training thread (issue 33: bisection took ~42 CDF
    # evaluations, ~110 us, per new df). Newton's method from the Cornish-Fisher start
    # needs a few, and agrees with scipy to the bisection's 1e-12.
    stats = pytest.importorskip("scipy.stats")
    import ailens._stats as st

    calls = []
    real = st._t_two_sided_cdf
    monkeypatch.setattr(st, "_t_two_sided_cdf", lambda t, df: calls.append(df) or real(t, df))
    for df in range(1, 61):
        for q in (0.6, 0.975, 0.995):
            calls.clear()
            assert st.t_quantile.__wrapped__(q, df) == pytest.approx(
                stats.t.ppf(q, df), rel=1e-11
            ), (q, df)
            assert len(calls) <= 6, (q, df, len(calls))


# --------------------------------------------------------------------------- the model


def _feed(f: Forecaster, durations_s, *, start_ns: int = 0) -> list:
    """Feed step durations; returns the prediction after each step."""
    t, out = start_ns, []
    for d in durations_s:
        t += int(round(d * 1e9))
        f.on_step(t)
        out.append(f.predict())
    return out


def _noisy(n, mean=0.1, cv=0.05, seed=0):
    return np.random.default_rng(seed).normal(mean, cv * mean, n).clip(mean * 0.3)


def test_a_forecast_from_the_first_steps_after_warm_up():
    f = Forecaster(warmup_steps=2)
    f.on_schedule({"total_steps": 1000})
    preds = _feed(f, [1.0, 0.5] + [0.1] * 10)  # two slow warm-up steps
    # One step after warm-up: a forecast, with the prior spread (a step is no certainty).
    one = preds[2]
    assert one.predicted_total_s == pytest.approx(1.6 + 997 * 0.1)
    assert one.half_width_rel > 0.05
    p = preds[4]
    assert p.predicted_total_s == pytest.approx(1.5 + 0.3 + 995 * 0.1)
    lo, hi = p.interval_s
    assert lo <= p.predicted_total_s <= hi
    assert p.naive_total_s == pytest.approx(1.8 * 1000 / 5)  # the progress bar keeps the warm-up


def test_a_one_off_outlier_does_not_move_the_level():
    durations = list(_noisy(200))
    durations[100] = 3.0  # a 30x step: a GC pause, a burst from another process
    f = Forecaster()
    f.on_schedule({"total_steps": 2000})
    preds = _feed(f, durations)
    before, after = preds[99], preds[101]
    assert after.step_time_s == pytest.approx(before.step_time_s, rel=0.01)
    # The forecast moves by the time the outlier took, not by its rate over the remaining run.
    moved = after.predicted_total_s - before.predicted_total_s
    assert moved == pytest.approx(3.0, rel=0.2)
    assert abs(after.naive_total_s - before.naive_total_s) > 20  # the progress bar swings


def test_a_lasting_change_of_speed_is_adopted_within_a_few_steps():
    durations = list(_noisy(100, 0.1)) + list(_noisy(100, 0.15, seed=1))
    f = Forecaster()
    f.on_schedule({"total_steps": 1000})
    preds = _feed(f, durations)
    assert preds[99].step_time_s == pytest.approx(0.1, rel=0.03)
    assert preds[100 + StepLevel.CHANGE_RUN].step_time_s == pytest.approx(0.15, rel=0.05)
    assert f.level.changes and f.level.changes[0][0] == 100
    # Wider for the rest of the run: a change of speed was seen.
    assert preds[150].half_width_rel > preds[99].half_width_rel


def test_a_slow_drift_is_followed():
    durations = 0.1 * (1 + np.linspace(0, 0.3, 400)) * np.random.default_rng(3).normal(1, 0.01, 400)
    f = Forecaster()
    f.on_schedule({"total_steps": 400})
    preds = _feed(f, durations)
    assert preds[-1].step_time_s == pytest.approx(durations[-20:].mean(), rel=0.05)


def test_recurring_extra_time_is_learned_from_two_occurrences():
    base = list(_noisy(60, 0.1, cv=0.02))
    for k in range(9, 60, 10):  # every 10th step also evaluates: +50 ms
        base[k] += 0.05
    f = Forecaster()
    f.on_schedule({"total_steps": 1000})
    preds = _feed(f, base)
    assert not [c for c in preds[15].components if c.name.startswith("every")]
    comp = next(c for c in preds[-1].components if c.name.startswith("every 10 steps"))
    assert comp.source == "learned" and comp.per_occurrence_s == pytest.approx(0.05, rel=0.2)
    assert comp.remaining == 94  # steps 69, 79, ..., 999
    truth = sum(base) + 940 * 0.1 + 94 * 0.05
    assert preds[-1].predicted_total_s == pytest.approx(truth, rel=0.01)


def test_a_period_the_schedule_names_is_taken_from_one_occurrence():
    base = list(_noisy(40, 0.1, cv=0.02))
    base[25] += 0.5  # the first step of epoch 2 carries the evaluation of epoch 1
    f = Forecaster()
    f.on_schedule({"total_steps": 500, "steps_per_epoch": 25})
    p = _feed(f, base)[-1]
    comp = next(c for c in p.components if c.name.startswith("every 25 steps"))
    assert comp.source == "schedule" and comp.remaining == len(range(50, 500, 25))


def test_sections_are_timed_and_scheduled_apart_from_the_steps():
    f = Forecaster()
    f.on_schedule({"total_steps": 100, "steps_per_epoch": 20, "eval_every_epochs": 1})
    t = 0
    for i in range(45):
        t += 100_000_000
        f.on_step(t)
        if (i + 1) % 20 == 0:  # an evaluation after each epoch's last step: 0.3 s
            f.on_section("eval", i + 1, t, t + 300_000_000)
            t += 300_000_000
    p = f.predict()
    assert p.step_time_s == pytest.approx(0.1)  # the sections are not training time
    comp = next(c for c in p.components if c.name == "section eval")
    assert comp.source == "schedule" and comp.remaining == 3  # after steps 60, 80, 100
    assert p.predicted_total_s == pytest.approx(100 * 0.1 + 5 * 0.3, rel=1e-6)


def test_interval_covers_the_truth_on_stationary_runs():
    covered = 0
    for seed in range(40):
        d = _noisy(1000, 0.1, cv=0.1, seed=seed)
        f = Forecaster()
        f.on_schedule({"total_steps": 1000})
        t = 0
        for x in d[:50]:
            t += int(x * 1e9)
            f.on_step(t)
        lo, hi = f.predict().interval_s
        covered += lo <= d.sum() <= hi
    assert covered >= 36  # >= 90 % of 40


def test_naive_total_is_the_progress_bar():
    assert naive_total_s(10.0, 5, 100) == 200.0
    assert naive_total_s(10.0, 0, 100) is None and naive_total_s(10.0, 5, None) is None


def _cfg(**kw):
    base = dict(run_dir="/nonexistent", signature_min_steps=10, warmup_steps=2)
    return LensConfig(**{**base, **kw})


def test_signature_is_the_first_evaluation_with_the_structure_captured():
    """Issue 30: the signature (PAS2P) is the first evaluation, after min_steps, at which
    every part of the run (here the steps alone) is known to the rule's precision; the
    forecast there carries its interval, whatever its width."""
    PART_PRECISION = LensConfig().signature_part_precision
    from ailens.record.exchange import Summed

    oa = OnlineAnalysis(_cfg(signature_rel_tol=0.02), 1, 0, ["allreduce"])
    oa.on_mark({"kind": "schedule", "total_steps": 2000})
    empty = Summed(np.zeros(0), np.zeros(0), np.zeros(0), 0, False, 0)
    t = 0
    ready_at = None
    for step, d in enumerate(_noisy(400, 0.1, cv=0.05)):
        t += int(d * 1e9)
        oa.on_step(step, t)
        if step % 5 == 4:
            p = oa.predict()
            oa.on_batch(empty, np.zeros(0, np.int64), np.zeros(0, np.int64))
            steps = p.components[0]
            if ready_at is None and p.steps_done >= 100 and steps.precision <= PART_PRECISION:
                ready_at = p.steps_done
    # 5 % of the run at least (min_steps is 10 here): the steady level is known before.
    assert oa.signature_step == ready_at == 100
    f = oa.forecast()
    assert f.basis == "signature" and f.made_at_step == ready_at
    assert [c.name for c in f.signature_parts] == ["training steps"]
    assert f.signature_waited_for == ("fewer than 100 steps",)
    lo, hi = f.interval_s
    assert (hi - lo) / 2 > 0.02 * f.predicted_total_s  # honest: the drift still to come


def test_the_run_model_writes_nothing_and_its_subscribers_see_it(tmp_path, capfd):
    """``OnlineAnalysis`` is pure: rank 0 of a run with a run directory and progress lines
    asked for, it writes no file and prints nothing; a subscriber sees each step end once,
    in order, and the signature once."""
    from ailens.record.exchange import Summed

    class Seen:
        flush_every = 0

        def __init__(self):
            self.steps, self.signatures = [], []

        def on_step(self, o):
            self.steps.append(o.steps)

        def on_signature(self, o):
            self.signatures.append(o.signature_step)

        def on_evaluation(self, o, snap, p):
            pass

    cfg = _cfg(run_dir=str(tmp_path), progress_every=10, signature_rel_tol=0.02)
    oa = OnlineAnalysis(cfg, 1, 0, ["allreduce"])
    seen = Seen()
    oa.subscribe(seen)
    oa.on_mark({"kind": "schedule", "total_steps": 2000})
    empty = Summed(np.zeros(0), np.zeros(0), np.zeros(0), 0, False, 0)
    t = 0
    for step, d in enumerate(_noisy(400, 0.1, cv=0.05)):
        t += int(d * 1e9)
        oa.on_step(step, t)
        if step % 5 == 4:
            oa.on_batch(empty, np.zeros(0, np.int64), np.zeros(0, np.int64))
    oa.on_close(t)
    assert oa.forecast() is not None and oa.signature_step is not None
    assert list(tmp_path.iterdir()) == []
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert seen.steps == list(range(1, 401))
    assert seen.signatures == [oa.signature_step]


def test_online_state_stays_small():
    from ailens.record.exchange import Summed

    oa = OnlineAnalysis(_cfg(), 1, 0, ["allreduce"])
    oa.on_mark({"kind": "schedule", "total_steps": 100_000})
    batch = Summed(np.array([20, 24, 28] * 6), np.ones(18), np.ones(18), 0, False, 0)
    rng = np.random.default_rng(0)
    t = 0
    for step in range(20_000):
        t += int(1e6 * (1 + (rng.random() < 0.05) * 5))  # 5 % slow steps: many outliers
        oa.on_step(step, t)
        if step % 6 == 5:
            oa.on_batch(batch, np.zeros(18, dtype=np.int64), np.full(18, step))
    lv = oa.forecaster.level
    assert len(lv.recent) <= StepLevel.KEEP and len(oa.history) < 512
    assert oa.phases.n_phases <= 3


def test_a_load_that_comes_and_goes_is_forecast_at_its_long_run_mean():
    """Another job on and off every 60 steps (1 ms <-> 3 ms): caught in a slow spell at 20 %
    of the run, the forecast does not extrapolate that spell to the end (the speed went up
    and down before), while a single lasting change is adopted (test_lasting_change...)."""
    f = Forecaster(warmup_steps=2)
    f.on_schedule({"total_steps": 3000})
    t = 0
    for i in range(690):  # ends 30 steps into a slow spell
        t += int(1e6 * (3 if (i // 60) % 2 else 1))
        f.on_step(t)
    assert len(f.level.changes) >= 3 and f.level.center > 2.5e-3  # in the slow regime now
    p = f.predict()
    actual = t / 1e9 + (3000 - 690) * 2e-3  # the on/off pattern goes on: 2 ms on average
    assert abs(p.predicted_total_s - actual) / actual < 0.15
    assert p.naive_total_s is not None


def test_one_sided_outliers_that_never_agree_keep_a_step_cheap():
    """Slow steps of scattered sizes, on one side only: never a change of speed, and the run
    of outliers judged each step stays bounded (it once grew with the run: 1.3 ms a step)."""
    lv = StepLevel()
    rng = np.random.default_rng(1)
    for i in range(5000):
        lv.add(i, 0.01 if i < 50 else 0.01 * (2 + 20 * rng.random()))
    assert len(lv.run) <= StepLevel.MAX_RUN


# --------------------------------------------------------------------------- real Lens


def _plain_loop(run_dir, steps, **cfg):
    rng = np.random.default_rng(0)
    x = rng.random(30_000)
    lens = ailens.Lens(run_dir=run_dir, total_steps=steps, **cfg)
    done = 0
    for i in range(steps):
        for k in range(3):
            float(np.sort(x).sum())
            lens.collective_begin("allreduce", 1000 * (k + 1))
            lens.collective_end()
        lens.step_end()
        if i % 40 == 39:
            with lens.section("eval"):
                float(np.sort(x).sum())
        done += 1
        if lens.should_stop:
            break
    lens.close()
    return lens, done


def test_offline_analysis_reproduces_the_online_numbers(tmp_path):
    lens, done = _plain_loop(tmp_path, 150, signature_rel_tol=0.5, exchange_seconds=0.005)
    online = json.loads((tmp_path / "forecast.json").read_text())
    f = analyze(load_run(tmp_path)).forecast
    assert done == 150 and online["final"] and online["steps_done"] == 150
    assert online["signature_step"] is not None
    assert f.signature_step == online["signature_step"] == lens.online.signature_step
    assert f.predicted_total_s == online["predicted_total_s"]
    assert list(f.interval_s) == online["interval_s"]
    assert f.naive_total_s == online["naive_total_s"]
    assert f.actual_total_s == online["actual_total_s"] and f.actual_total_s is not None
    assert [list(h) for h in f.history] == online["history"]
    assert [c.name for c in f.components] == [c["name"] for c in online["components"]]


def test_early_stop_in_one_process_forecasts_the_full_run(tmp_path):
    lens, done = _plain_loop(
        tmp_path, 2000, signature_rel_tol=0.5, early_stop=True, exchange_seconds=0
    )
    doc = json.loads((tmp_path / "forecast.json").read_text())
    assert done < 2000 and lens.should_stop
    assert doc["total_steps"] == 2000 and doc["steps_done"] == done
    assert doc["actual_total_s"] is None
    # A forecast for all 2000 steps: the steps not run are in it.
    remaining = (2000 - done) * doc["step_time_s"]
    assert doc["predicted_total_s"] >= doc["elapsed_s"] + remaining
    assert done < 1000
    assert doc["signature_fraction"] == doc["signature_step"] / 2000


def test_progress_lines_go_to_stderr_with_the_progress_bar_beside(tmp_path, capfd):
    _plain_loop(tmp_path, 60, progress_every=20)
    err = capfd.readouterr().err
    assert "ailens: step 20/60 (33.3%)" in err and "ailens: step 60/60 (100.0%)" in err
    assert "a progress bar would say" in err


def test_forecast_json_is_written_live_then_final(tmp_path):
    x = np.random.default_rng(0).random(20_000)
    lens = ailens.Lens(run_dir=tmp_path, total_steps=200, progress_every=20)
    for step in range(200):
        float(np.sort(x).sum())
        lens.collective_begin("allreduce", 800)
        lens.collective_end()
        lens.step_end()
        if step + 1 == 40:
            live = json.loads((tmp_path / "forecast.json").read_text())
            assert live["final"] is False and live["steps_done"] == 40
            assert live["latest"]["predicted_total_s"] > live["elapsed_s"]
            assert lens.forecast.step == 40 and lens.forecast.eta_s > 0
    lens.close()
    final = json.loads((tmp_path / "forecast.json").read_text())
    assert final["final"] is True and final["steps_done"] == 200
    assert final["actual_total_s"] == pytest.approx(final["closed_s"])
    assert final["closed_s"] >= lens.online.forecaster.t_last / 1e9


# --------------------------------------------------------------------------- parallel

EARLY_STOP = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from mpi4py import MPI
    import ailens

    comm = MPI.COMM_WORLD

    def exchange(a):
        out = np.empty_like(a)
        comm.Allreduce(a, out, op=MPI.SUM)
        return out

    run_dir, total, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    lens = ailens.Lens(run_dir=run_dir, rank=comm.rank, world_size=comm.size, exchange=exchange,
                       early_stop=True, signature_rel_tol=0.5, framework="mpi4py-plain")
    lens.set_total_steps(total)
    x = np.random.default_rng(comm.rank).random(20_000 * (1 + comm.rank))
    grad = np.zeros(2000)
    done = 0
    for step in range(total):
        for size in (2000, 200):
            float(np.sort(x).sum())
            lens.collective_begin("allreduce", grad[:size].nbytes)
            comm.Allreduce(MPI.IN_PLACE, grad[:size], op=MPI.SUM)
            lens.collective_end()
        lens.step_end()
        done += 1
        if lens.should_stop:
            break
    lens.close()
    # One file per rank: mpiexec may interleave the ranks' stdout lines.
    state = {"rank": comm.rank, "steps": done, "stop": lens.should_stop}
    with open(f"{out_dir}/done-{comm.rank}.json", "w") as f:
        json.dump(state, f)
    """
)


@pytest.mark.parallel
def test_early_stop_on_real_ranks_stops_everyone_at_the_same_step(tmp_path):
    script = tmp_path / "early_stop.py"
    script.write_text(EARLY_STOP)
    run_dir = tmp_path / "run"
    out = run_ranks(
        [mpiexec(), "-n", "2", sys.executable, str(script), str(run_dir), "5000", str(tmp_path)],
        timeout=50,
    )
    assert out.returncode == 0, out.stderr
    done = [json.loads(f.read_text()) for f in sorted(tmp_path.glob("done-*.json"))]
    assert sorted(d["rank"] for d in done) == [0, 1]
    assert all(d["stop"] for d in done)
    assert done[0]["steps"] == done[1]["steps"] < 5000
    doc = json.loads((run_dir / "forecast.json").read_text())
    assert doc["predicted_total_s"] > 0 and doc["total_steps"] == 5000 and doc["final"]
    assert doc["signature_step"] <= done[0]["steps"]
    # The exchanges rank 0 recorded are where the offline analysis evaluates too: the
    # offline decision is the online one.
    assert len(load_run(run_dir).ranks[0].exchanges["seq"]) > 1
    a = analyze(load_run(run_dir))
    assert a.forecast.signature_step == doc["signature_step"]
    assert a.forecast.predicted_total_s == doc["predicted_total_s"]


@pytest.mark.parallel
def test_calibrate_on_real_ranks_writes_link_parameters(tmp_path):
    out_json = tmp_path / "calibration.json"
    out = run_ranks(
        [
            mpiexec(),
            "-n",
            "2",
            sys.executable,
            "-m",
            "ailens",
            "calibrate",
            "--out",
            str(out_json),
            "--max-bytes",
            str(1 << 20),
            "--reps",
            "5",
        ],
        timeout=50,
    )
    assert out.returncode == 0, out.stderr
    assert "wrote" in out.stdout
    doc = json.loads(out_json.read_text())
    assert doc["ranks"] == 2 and doc["inter"] is None and doc["ranks_per_node"] == 2
    intra = doc["intra"]
    assert intra["alpha"] > 0 and intra["beta"] > 0 and intra["ranks"] == 2
    assert {s["op"] for s in intra["samples"]} == {"allreduce", "allgather", "broadcast"}


def test_calibrate_without_mpi4py_says_how_to_install(monkeypatch):
    from ailens.cli import main

    monkeypatch.setitem(sys.modules, "mpi4py", None)  # makes `import mpi4py` raise ImportError
    with pytest.raises(ImportError, match=r"pip install ailens\[mpi\]"):
        main(["calibrate", "--out", "unused.json"])
