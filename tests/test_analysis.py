"""Offline analysis of runs written as real trace files (tests/synthetic.py): phases equal
ailens.phases on the same data, partial runs, forecast fallbacks and the scaling what-if."""

from __future__ import annotations

import json

import numpy as np
import pytest
from synthetic import Collective, write_run

from ailens import load_run
from ailens._analysis import analyze, scaling_model, whatif
from ailens._forecast import collective_time
from ailens.phases import assign, magnitude, pas2p_assign, phase_table, simo


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("syn") / "run", ranks=3, steps=300, seed=3)


@pytest.fixture(scope="module")
def a(syn):
    return analyze(load_run(syn.path))


def test_phase_ids_and_table_equal_ailens_phases_on_the_same_data(syn, a):
    s = simo(syn.work)
    ids = assign(s, tolerance=1, key=syn.op.astype(np.int64))
    assert a.n_ticks == syn.n_ticks and a.ranks == 3
    np.testing.assert_array_equal(a.simo, s)
    np.testing.assert_array_equal(a.phase_ids, ids)
    comm, compute = syn.comm_compute_s()
    np.testing.assert_allclose(a.comm_s, comm, rtol=1e-12)
    np.testing.assert_allclose(a.compute_s, compute, rtol=1e-12)
    expect = phase_table(ids, comm, compute, op=syn.op, simo=s, op_names=syn.op_names)
    assert a.table.n_phases == expect.n_phases and a.table.dropped == expect.dropped
    assert [p.id for p in a.table.phases] == [p.id for p in expect.phases]
    assert [p.weight for p in a.table.phases] == [p.weight for p in expect.phases]
    assert [p.total_s for p in a.table.phases] == pytest.approx(
        [p.total_s for p in expect.phases], rel=1e-12
    )
    assert a.n_phases_previous == int(pas2p_assign(syn.op, syn.nbytes, magnitude(syn.work)).max())
    assert a.n_phases_previous > a.table.n_phases  # SIMO groups what PAS2P splits
    # The online table the run wrote (same SIMO data) has the same phases.
    online = json.loads((syn.path / "phases-online.json").read_text())["table"]
    assert [p["weight"] for p in online["phases"]] == [p.weight for p in a.table.phases]


def test_run_level_numbers(syn, a):
    assert a.op_names == syn.op_names and a.counter == "instructions"
    np.testing.assert_array_equal(a.step_end_s, (syn.step_end_ns[:, 0] - syn.offsets_ns[0]) / 1e9)
    assert a.total_s == pytest.approx(syn.total_s, abs=1e-3)
    assert a.comm_pct + a.compute_pct == pytest.approx(100)
    assert a.tick_s_by_rank.shape == (syn.n_ticks, 3)
    assert not a.warnings


def test_skew_names_the_rank_that_computes_most(a):
    assert a.skew and {s.phase for s in a.skew} == {p.id for p in a.table.phases}
    for s in a.skew:
        assert s.slowest_rank == 2  # rank factors 1, 1.25, 1.5
        assert 30 < s.spread_pct < 60 and len(s.per_rank_s) == 3


def test_forecast_of_a_finished_run(syn, a):
    f = a.forecast
    assert f.total_steps == 300  # the run said so at the start
    info = a.run.ranks[0].info
    assert f.actual_total_s == pytest.approx(info["end_ns"] / 1e9)  # its close: the run's end
    assert f.signature_step is not None and f.signature_fraction == f.signature_step / 300
    assert f.made_at_step == f.signature_step and f.basis == "signature"
    lo, hi = f.interval_s
    assert lo <= f.predicted_total_s <= hi
    assert (hi - lo) / 2 <= a.config.signature_rel_tol * f.predicted_total_s
    assert abs(f.error_pct) < 3
    # The progress bar's forecast at the same step, from the same step ends.
    s = f.made_at_step
    assert f.naive_total_s == pytest.approx(a.step_end_s[s - 1] * 300 / s)
    assert sum(c.remaining_s for c in f.components) == pytest.approx(
        f.predicted_total_s - f.elapsed_s
    )
    d = f.to_dict()
    for k in (
        "predicted_total_s",
        "interval_s",
        "signature_step",
        "signature_fraction",
        "actual_total_s",
        "naive_eta_s",
        "history",
    ):
        assert k in d
    steps = [h[0] for h in d["history"]]
    assert steps == sorted(set(steps))  # one point per step at most
    json.dumps(d)


def test_partial_run_is_analysed_over_common_ticks_with_warnings(tmp_path):
    syn = write_run(
        tmp_path / "run", ranks=3, steps=80, seed=5, kill_rank=1, kill_step=40, known_total=False
    )
    run = load_run(syn.path)
    assert not run.complete
    a = analyze(run)
    n = min(syn.ticks_written)
    assert a.n_ticks == n < syn.n_ticks
    np.testing.assert_array_equal(
        a.phase_ids, assign(simo(syn.work[:n]), 1, key=syn.op[:n].astype(np.int64))
    )
    text = " | ".join(a.warnings)
    assert "rank 1" in text and f"analysed the first {n}" in text
    # Incomplete and no total recorded: no total forecast, said so; with a total, there is one.
    assert a.forecast is None and "total steps unknown" in text
    b = analyze(run, total_steps=1000)
    assert (
        b.forecast is not None
        and b.forecast.total_steps == 1000
        and b.forecast.actual_total_s is None
    )


def test_missing_rank_file_is_a_warning(tmp_path):
    syn = write_run(tmp_path / "run", ranks=3, steps=40, seed=6)
    syn.files[2].unlink()
    a = analyze(load_run(syn.path))
    assert a.ranks == 3 and a.tick_s_by_rank.shape[1] == 2
    assert any("rank 2" in w and "missing" in w for w in a.warnings)
    assert any("SIMO sums the ranks present only" in w for w in a.warnings)


def test_run_without_steps_has_no_forecast(tmp_path):
    from ailens._trace import TraceWriter

    meta = {
        "format_version": 1,
        "rank": 0,
        "world_size": 1,
        "counter": "cpu-ns",
        "run_id": "x",
        "config": {},
    }
    w = TraceWriter(tmp_path / "rank-00000.ailens", meta)
    w.write_ops(["allreduce"])
    n = 50
    w.write_events(
        {
            "op": np.zeros(n, np.uint16),
            "step": np.zeros(n, np.uint32),
            "nbytes": np.full(n, 8),
            "t_begin": np.arange(n) * 1000 + 500,
            "t_end": np.arange(n) * 1000 + 900,
            "work": np.full(n, 10**6),
        }
    )
    w.write_info({"closed": True})
    w.close()
    a = analyze(load_run(tmp_path))
    assert a.forecast is None and any("no step boundaries" in x for x in a.warnings)
    rows = whatif(a, [1, 2])
    assert rows[0].step_time_s == pytest.approx((n * 1000 - 100) / 1e9) and rows[1].comm_step_s > 0


# --------------------------------------------------------------------------- what-if


def test_whatif_at_the_run_size_reproduces_the_measurement(a):
    (row,) = whatif(a, [3])
    warm = a.config.warmup_steps
    m = (a.step_end_s[-1] - a.step_end_s[warm - 1]) / (len(a.step_end_s) - warm)
    assert row.measured and row.links == "intra"
    assert row.step_time_s == pytest.approx(m, rel=1e-9)
    assert row.total_time_s == pytest.approx(a.forecast.actual_total_s, rel=1e-9)
    d = row.to_dict()
    assert {"ranks", "step_time_s", "total_time_s", "speedup", "efficiency", "comm_pct"} <= set(d)
    json.dumps(d)


def test_weak_and_strong_scaling_arithmetic(a):
    rows_w = {r.ranks: r for r in whatif(a, [1, 2, 3, 6, 12], mode="weak")}
    rows_s = {r.ranks: r for r in whatif(a, [1, 2, 3, 6, 12], mode="strong")}
    base_w, base_s = rows_w[3], rows_s[3]
    assert base_w.step_time_s == pytest.approx(base_s.step_time_s)
    model = scaling_model(a)
    par = model.intra
    warm = a.config.warmup_steps
    steady = (a.tick_step >= warm) & (a.tick_step < len(a.step_end_s))
    per = len(a.step_end_s) - warm
    ops = np.asarray(a.op_names, dtype=object)[a.tick_op[steady]]
    sizes = a.tick_nbytes[steady]
    comm = a.comm_s[steady]
    for q in (2, 6, 12):
        ratio = np.array(
            [
                collective_time(o, q, n, par) / collective_time(o, 3, n, par)
                for o, n in zip(ops, sizes, strict=True)
            ]
        )
        expect_comm = float((comm * ratio).sum()) / per
        for rows in (rows_w, rows_s):
            assert rows[q].comm_step_s == pytest.approx(expect_comm, rel=1e-9)
        # Weak: per-rank compute unchanged; strong: x p/p'.
        assert rows_w[q].compute_step_s == pytest.approx(base_w.compute_step_s, rel=1e-9)
        assert rows_s[q].compute_step_s == pytest.approx(base_s.compute_step_s * 3 / q, rel=1e-9)
        # Weak with a fixed dataset: p/p' as many steps; strong: the same steps.
        assert rows_w[q].steps == pytest.approx(300 * 3 / q) and rows_s[q].steps == 300
        for rows in (rows_w, rows_s):
            r = rows[q]
            assert r.speedup == pytest.approx(rows[1].total_time_s / r.total_time_s)
            assert r.efficiency == pytest.approx(r.speedup / q)
            assert r.comm_pct == pytest.approx(100 * r.comm_step_s / r.step_time_s)
            fixed = base_w.total_time_s - 300 * base_w.step_time_s
            assert r.total_time_s == pytest.approx(fixed + r.steps * r.step_time_s, rel=1e-9)
    assert rows_w[1].comm_step_s == 0 and rows_w[1].links == "none" and rows_w[1].speedup == 1
    # Weak scaling with a fixed number of steps instead of a fixed dataset.
    fixed_steps = {r.ranks: r for r in whatif(a, [6], fixed_dataset=False)}
    assert fixed_steps[6].steps == 300


def test_whatif_uses_calibration_and_labels_inter_node_assumptions(a):
    cal = {"intra": {"alpha": 1e-6, "beta": 1e-10, "gamma": 0.0}, "inter": None}
    model = scaling_model(a, calibration=cal, ranks_per_node=4)
    assert "calibrate" in model.intra.source and model.intra.alpha == 1e-6
    assert "assumed" in model.inter.source and model.inter.beta >= model.intra.beta
    rows = {r.ranks: r for r in whatif(a, [4, 8], calibration=cal, ranks_per_node=4)}
    assert rows[4].links == "intra" and rows[8].links == "inter"
    assert rows[8].comm_step_s > rows[4].comm_step_s


def test_whatif_from_a_one_rank_run_adds_modelled_collectives(tmp_path):
    syn = write_run(tmp_path / "run", ranks=1, steps=60, seed=2)
    a1 = analyze(load_run(syn.path))
    cal = {"intra": {"alpha": 1e-5, "beta": 1e-9, "gamma": 0.0}}
    rows = {r.ranks: r for r in whatif(a1, [1, 2], calibration=cal)}
    warm = a1.config.warmup_steps
    steady = (a1.tick_step >= warm) & (a1.tick_step < 60)
    ops = np.asarray(a1.op_names, dtype=object)[a1.tick_op[steady]]
    model = scaling_model(a1, calibration=cal)
    sizes = a1.tick_nbytes[steady]
    added = sum(collective_time(o, 2, n, model.intra) for o, n in zip(ops, sizes, strict=True))
    added /= 60 - warm
    assert rows[2].comm_step_s == pytest.approx(rows[1].comm_step_s + added, rel=1e-9)
    assert rows[1].measured and rows[2].links == "intra"


def test_whatif_rejects_bad_input(a):
    with pytest.raises(ValueError):
        whatif(a, [2], mode="sideways")
    with pytest.raises(ValueError):
        whatif(a, [0, 2])


def test_behaviour_change_delays_the_signature(tmp_path):
    steady = (Collective("allreduce", 4_000_000, compute_s=0.004, comm_s=0.003, work=9e6),)
    slow = steady + (Collective("allgather", 1_000_000, compute_s=0.002, comm_s=0.004, work=5e8),)
    syn = write_run(
        tmp_path / "run",
        ranks=2,
        steps=200,
        seed=4,
        noise=0.02,
        pattern=lambda step: steady if step < 40 else slow,
    )
    f = analyze(load_run(syn.path)).forecast
    # The steady part converges first (signature before step 40) or, if not, the
    # allgather phase appearing at step 40 holds it back for a full window.
    assert f.signature_step is not None
    assert f.signature_step < 40 or f.signature_step >= 40 + 10
