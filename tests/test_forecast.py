"""Signature rule, forecast arithmetic, cost models and the alpha-beta fit; a real Lens for
online == offline; real MPI ranks for early stop and calibration."""

from __future__ import annotations

import json
import math
import sys
import textwrap

import numpy as np
import pytest
from conftest import mpiexec, run_ranks

import ailens
from ailens import LensConfig, load_run
from ailens._analysis import analyze
from ailens._collectives import CostParams, canonical_op, collective_time, fit_cost_params
from ailens._forecast import (
    StepStats,
    forecast_total,
    new_significant_phases,
    step_time_changed,
    step_time_precise,
    step_time_stable,
    t_quantile,
)
from ailens._online import OnlineAnalysis, replay

# --------------------------------------------------------------------------- cost models

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


# --------------------------------------------------------------------------- signature rule


def test_step_time_stable_compares_two_disjoint_windows():
    assert step_time_stable([100] * 10 + [101] * 10, 10, 0.02)
    assert not step_time_stable([100] * 10 + [103] * 10, 10, 0.02)
    assert not step_time_stable([100] * 19, 10, 0.02)  # not two full windows yet
    assert step_time_stable([999] * 5 + [100] * 20, 10, 0.0)  # only the last 2W count


def test_step_time_changed_needs_a_large_and_significant_difference():
    rng = np.random.default_rng(0)
    older = list(np.round(1e7 * (1 + 0.01 * rng.standard_normal(40))).astype(int))
    last = list(np.round(1e7 * (1 + 0.01 * rng.standard_normal(10))).astype(int))
    assert not step_time_changed(_stats(older), last, 0.02)
    assert step_time_changed(_stats(older), [int(x * 1.1) for x in last], 0.02)
    # A 10 % jump inside 30 % noise is not significant: no restart on noise.
    wild = list(np.round(1e7 * (1 + 0.3 * rng.standard_normal(50))).astype(int))
    assert not step_time_changed(_stats(wild[:40]), [int(x * 1.1) for x in wild[40:]], 0.02)
    # A change long before the last window still shows against the older mean.
    mixed = [14_000_000] * 20 + [10_000_000] * 20
    assert step_time_changed(_stats(mixed), [10_000_000] * 10, 0.02)


def test_a_long_warm_up_restarts_the_statistics():
    # The first 8 steps are 40 % slower (a warm-up longer than warmup_steps=2): the forecast
    # must use the steady 10 ms steps only.
    rng = np.random.default_rng(11)
    level = np.where(np.arange(200) < 8, 14e6, 10e6)
    step_ns = np.round(level * (1 + 0.002 * rng.standard_normal(200))).astype(np.int64)
    oa = _replay(_series(step_ns), total_steps=1000)
    f = oa.forecast()
    assert oa.restarts >= 1 and f.regime_start_step > 8
    assert f.signature_step is not None and f.step_time_s == pytest.approx(0.010, rel=0.005)
    assert f.predicted_total_s == pytest.approx(
        f.elapsed_s + (1000 - f.made_at_step) * 0.010, rel=1e-3
    )


def test_new_significant_phases_are_late_ids_with_a_share_of_the_window():
    then = [5.0, 1.0]
    assert new_significant_phases([6.0, 1.5], then, 2, 0.01) == []
    assert new_significant_phases([6.0, 1.5, 0.5], then, 2, 0.01) == [3]  # 0.5 of 2.0
    assert new_significant_phases([6.0, 1.5, 0.001], then, 2, 0.01) == []  # under 1 %


W, WARM, MIN = 10, 2, 20


def _cfg(**kw):
    return LensConfig(
        run_dir="unused",
        signature_window=W,
        warmup_steps=WARM,
        signature_min_steps=MIN,
        signature_rel_tol=0.02,
        exchange_ticks=256,
        exchange_seconds=0,  # agreed interval: one step, so the rule is evaluated every step
        **kw,
    )


def _series(step_ns, ticks_per_step=3, simo_fn=None, comm_share=0.3):
    """A run as replay() takes it: steps of the given durations, ticks splitting each step
    into compute then comm (comm_share of the step), SIMO from simo_fn(step, tick)."""
    step_ns = np.asarray(step_ns, dtype=np.int64)
    steps = len(step_ns)
    t = np.cumsum(step_ns)
    tick_step = np.repeat(np.arange(steps), ticks_per_step)
    per_tick = np.repeat(step_ns, ticks_per_step) / ticks_per_step
    simo_fn = simo_fn or (lambda s, k: 20 + 4 * k)
    s = np.array(
        [simo_fn(st, k % ticks_per_step) for k, st in enumerate(tick_step)], dtype=np.int64
    )
    key = np.zeros(len(s), dtype=np.int64)
    return t, tick_step, s, key, per_tick * comm_share, per_tick * (1 - comm_share)


def _replay(series, cfg=None, total_steps=None):
    t, tick_step, s, key, comm, compute = series
    return replay(
        cfg or _cfg(),
        2,
        ["allreduce"],
        t,
        tick_step,
        s,
        key,
        comm,
        compute,
        total_steps=total_steps,
    )


def _evaluation_steps(steps):
    """Steps after which the Lens exchanges: first after W // 2 steps, then (interval agreed
    with exchange_seconds=0) after every step."""
    return list(range(W // 2, steps + 1))


def test_signature_ready_exactly_when_the_rule_first_holds():
    oa = _replay(_series([10_000_000] * 100))
    first = min(s for s in _evaluation_steps(100) if s >= MIN and s - WARM >= 2 * W)
    assert oa.signature_ready and oa.signature_step == first == 22


def _rule_by_hand(step_ns, simo_ticks, tick_step, comm, compute, tol=0.02, share=0.01):
    """The documented rule, evaluated directly on the arrays at every exchange step."""
    from ailens.phases import assign

    d = [int(x) for x in step_ns]
    ids = assign(np.asarray(simo_ticks), 1, key=np.zeros(len(simo_ticks), dtype=np.int64))
    t_tick = np.asarray(comm) + np.asarray(compute)
    evals = _evaluation_steps(len(d))
    start = WARM  # index of the regime's first step time
    for s in evals:
        if s - start >= 2 * W and step_time_changed(_stats(d[start : s - W]), d[s - W : s], tol):
            start = s - W
        post = d[start:s]
        if s < MIN or len(post) < 2 * W:
            continue
        old, new = sum(post[-2 * W : -W]), sum(post[-W:])
        if abs(new - old) > tol * old:
            continue
        if not step_time_precise(_stats(post), tol):
            continue
        ref = max(e for e in [0, *evals] if e <= s - W)
        now_ticks, ref_ticks = int((tick_step < s).sum()), int((tick_step < ref).sum())
        n_ref = int(ids[:ref_ticks].max()) if ref_ticks else 0
        win_ids, win_t = ids[ref_ticks:now_ticks], t_tick[ref_ticks:now_ticks]
        heavy = [
            i
            for i in set(win_ids.tolist())
            if i > n_ref and win_t[win_ids == i].sum() >= share * win_t.sum()
        ]
        if ref and not heavy:
            return s
    return None


@pytest.mark.parametrize("seed", range(12))
def test_signature_step_equals_the_rule_evaluated_by_hand(seed):
    rng = np.random.default_rng(seed)
    steps = 160
    level = np.where(np.arange(steps) < rng.integers(0, 60), 14e6, 10e6)  # a late level shift
    noise = rng.choice([0.002, 0.01, 0.03])
    step_ns = np.round(level * (1 + noise * rng.standard_normal(steps))).astype(np.int64)
    late = int(rng.integers(10, 120))  # a heavy phase appears at this step
    series = _series(step_ns, simo_fn=lambda st, k: 60 if (k == 0 and st >= late) else 20 + 4 * k)
    t, tick_step, s, key, comm, compute = series
    oa = _replay(series)
    assert oa.signature_step == _rule_by_hand(step_ns, s, tick_step, comm, compute)


def test_signature_not_ready_while_a_new_phase_appears():
    # A new, heavy phase appears in step 20 (0-based tick step): nothing may be ready until a
    # whole window after the exchange that brought it (after step 21), i.e. the first
    # evaluation whose reference snapshot (<= s - W) already holds it.
    series = _series(
        [10_000_000] * 100, simo_fn=lambda st, k: 40 if (st >= 20 and k == 0) else 20 + 4 * k
    )
    oa = _replay(series)
    assert oa.signature_step == min(s for s in _evaluation_steps(100) if s - W >= 21) == 31


def test_signature_never_ready_with_phases_that_keep_appearing_or_drifting_time():
    grow = _series(
        [10_000_000] * 200, simo_fn=lambda st, k: 100 + 3 * (st // 8) if k == 0 else 20 + 4 * k
    )
    assert not _replay(grow).signature_ready
    drift = _series((10_000_000 * 1.01 ** np.arange(200)).astype(np.int64))
    assert not _replay(drift).signature_ready
    rng = np.random.default_rng(0)
    noisy = _series((10_000_000 * (1 + 0.02 * rng.standard_normal(200))).astype(np.int64))
    assert _replay(noisy).signature_ready  # stationary noise does settle


def test_total_steps_only_changes_the_forecast_not_the_signature():
    series = _series([10_000_000] * 60)
    a, b = _replay(series), _replay(series, total_steps=1000)
    assert a.signature_step == b.signature_step
    assert a.forecast().predicted_total_s is None and "per-step time only" in a.forecast().note
    assert b.forecast().predicted_total_s == pytest.approx(1000 * 0.01)


# --------------------------------------------------------------------------- forecast arithmetic


def _stats(d, block_len=W):
    """StepStats of integer-ns step times, blocks of block_len as OnlineAnalysis keeps them."""
    d = [int(x) for x in d]
    blocks = [sum(d[i : i + block_len]) for i in range(0, len(d) - block_len + 1, block_len)]
    return StepStats(
        len(d),
        sum(d),
        sum(x * x for x in d),
        len(blocks),
        sum(blocks),
        sum(b * b for b in blocks),
        block_len,
    )


def test_forecast_arithmetic_with_phases_and_outside_time():
    d = np.array([9, 11, 10, 10, 12, 8], dtype=np.int64) * 1_000_000  # ns
    n, m = len(d), d.mean() / 1e9
    sd = d.std(ddof=1) / 1e9
    out = forecast_total(
        elapsed_s=1.5,
        steps_done=10,
        total_steps=110,
        stats=_stats(d),
        phase_step_s=[0.004, 0.003, 0.0001],
        kept=[1, 2],
    )
    r = 100
    assert out["predicted_total_s"] == pytest.approx(1.5 + r * m)
    half = t_quantile(0.975, n - 1) * sd * math.sqrt(r + r * r / n)
    assert out["interval_s"] == pytest.approx((1.5 + r * m - half, 1.5 + r * m + half))
    assert dict(out["remaining_by_phase_s"]) == pytest.approx({1: 0.4, 2: 0.3})
    assert out["remaining_other_phases_s"] == pytest.approx(0.01)
    # What no tick covers (here 10 ms - 7.1 ms per step) is forecast as outside collectives.
    assert out["remaining_outside_s"] == pytest.approx(r * (m - 0.0071))
    assert out["step_time_s"] == pytest.approx(m)


def test_online_forecast_splits_steps_into_phases_and_outside_time():
    # Ticks cover 60 % of each 10 ms step; the rest (optimizer, data loading) is outside.
    t, tick_step, s, key, comm, compute = _series([10_000_000] * 100)
    oa = replay(
        _cfg(), 2, ["allreduce"], t, tick_step, s, key, comm * 0.6, compute * 0.6, total_steps=1000
    )
    f = oa.forecast()
    r = 1000 - f.made_at_step
    assert f.predicted_total_s == pytest.approx(f.elapsed_s + r * 0.01)
    assert f.remaining_outside_s == pytest.approx(0.4 * 0.01 * r, rel=1e-6)
    assert sum(v for _, v in f.remaining_by_phase_s) + f.remaining_other_phases_s == pytest.approx(
        0.6 * 0.01 * r
    )


def test_interval_contains_the_truth_on_stationary_series():
    rng = np.random.default_rng(42)
    total, at, hits, trials = 1000, 40, 0, 400
    for _ in range(trials):
        d = np.maximum(rng.normal(0.01, 0.001, total), 1e-4)
        ns = np.round(d * 1e9).astype(np.int64)
        used = ns[WARM:at]
        truth = ns.sum() / 1e9
        out = forecast_total(
            elapsed_s=ns[:at].sum() / 1e9,
            steps_done=at,
            total_steps=total,
            stats=_stats(used),
        )
        lo, hi = out["interval_s"]
        hits += lo <= truth <= hi
    assert 0.92 <= hits / trials <= 0.98


def test_batch_means_widen_the_interval_for_slow_swings():
    # Step time switching between two levels every 25 steps (another job comes and goes):
    # step-to-step spread is small, the swings are not.
    rng = np.random.default_rng(7)
    level = np.where((np.arange(400) // 25) % 2, 12e6, 8e6)
    d = np.round(level * (1 + 0.01 * rng.standard_normal(400))).astype(np.int64)
    st = _stats(d)
    sd, df, method = st.spread()
    assert method == "batch means of 10 steps" and df == st.blocks - 1 == 39
    assert sd > 5 * (np.diff(d).std() / 1e9 / np.sqrt(2))
    few = _stats(d[:40])  # 4 blocks: not enough for batch means yet
    assert few.spread()[2] == "step-to-step"


def test_precision_half_of_the_rule():
    rng = np.random.default_rng(3)
    calm = np.round(1e7 * (1 + 0.01 * rng.standard_normal(20))).astype(np.int64)
    noisy = np.round(1e7 * (1 + 0.3 * rng.standard_normal(200))).astype(np.int64)
    assert step_time_precise(_stats(calm), 0.02)
    assert not step_time_precise(_stats(noisy), 0.02)  # +/-2 % needs ~900 such steps
    assert not _replay(_series(noisy)).signature_ready


# --------------------------------------------------------------------------- real Lens


def _plain_loop(run_dir, steps, **cfg):
    rng = np.random.default_rng(0)
    x = rng.random(30_000)
    lens = ailens.Lens(run_dir=run_dir, total_steps=steps, **cfg)
    done = 0
    for _ in range(steps):
        for k in range(3):
            float(np.sort(x).sum())
            lens.collective_begin("allreduce", 1000 * (k + 1))
            lens.collective_end()
        lens.step_end()
        done += 1
        if lens.should_stop:
            break
    lens.close()
    return lens, done


def test_offline_analysis_reproduces_the_online_decision(tmp_path):
    lens, done = _plain_loop(tmp_path, 150, signature_rel_tol=0.5, exchange_seconds=0.005)
    online = json.loads((tmp_path / "forecast.json").read_text())
    f = analyze(load_run(tmp_path)).forecast
    assert done == 150 and online["final"] and online["steps_done"] == 150
    assert online["signature_step"] is not None
    assert f.signature_step == online["signature_step"] == lens.online.signature_step
    assert f.predicted_total_s == online["predicted_total_s"]
    assert list(f.interval_s) == online["interval_s"]
    assert f.actual_total_s == online["actual_total_s"] and f.actual_total_s is not None
    assert [list(h) for h in f.history] == online["history"]


def test_early_stop_in_one_process_forecasts_the_full_run(tmp_path):
    lens, done = _plain_loop(
        tmp_path, 2000, signature_rel_tol=0.5, early_stop=True, exchange_seconds=0
    )
    doc = json.loads((tmp_path / "forecast.json").read_text())
    assert done < 2000 and lens.should_stop
    assert (
        doc["total_steps"] == 2000 and doc["steps_done"] == done and doc["actual_total_s"] is None
    )
    # A forecast for all 2000 steps: the steps not run are in it (step time from the same
    # document, so the check holds however loaded the machine is).
    remaining = (2000 - done) * doc["step_time_s"]
    assert doc["predicted_total_s"] > doc["elapsed_s"] + 0.5 * remaining
    assert done < 1000
    assert doc["signature_fraction"] == doc["signature_step"] / 2000


def test_progress_lines_go_to_stderr(tmp_path, capfd):
    _plain_loop(tmp_path, 60, progress_every=20)
    err = capfd.readouterr().err
    assert "ailens: step 20/60 (33.3%)" in err and "ailens: step 60/60 (100.0%)" in err


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
    lens.close()
    final = json.loads((tmp_path / "forecast.json").read_text())
    assert final["final"] is True and final["steps_done"] == 200
    assert final["actual_total_s"] == pytest.approx(lens.online.last_t_ns / 1e9)
    assert final["closed_s"] >= final["actual_total_s"]


def test_online_state_stays_small():
    oa = OnlineAnalysis(_cfg(), 1, 0, ["allreduce"], live=False)
    t = 0
    for step in range(5000):
        t += 1_000_000
        oa.on_step(step, t)
        if step % 6 == 5:
            oa.on_batch(
                np.array([20, 24, 28] * 6),
                np.zeros(18, dtype=np.int64),
                np.ones(18),
                np.ones(18),
                0,
            )
    assert len(oa._snaps) <= W and len(oa._recent) == 2 * W and len(oa.history) < 512


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
    # The default exchange cadence (exchange_seconds of steps, agreed by rank 0) is replayed
    # from the schedule rank 0 recorded: the offline decision is the online one.
    assert doc["exchange_schedule"]
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
            "ailens._calibrate",
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
    from ailens import _calibrate

    monkeypatch.setitem(sys.modules, "mpi4py", None)  # makes `import mpi4py` raise ImportError
    with pytest.raises(ImportError, match=r"pip install ailens\[mpi\]"):
        _calibrate.main(["--out", "unused.json"])
