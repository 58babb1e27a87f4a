"""Offline analysis of runs written as real trace files (tests/synthetic.py): phases equal
ailens.phases on the same data, partial runs, forecast fallbacks and the scaling what-if."""

from __future__ import annotations

import json

import numpy as np
import pytest
from synthetic import Collective, write_run

import ailens
from ailens import analyze, load_run
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
    # The signature is the run's structure captured (issue 30), each part to the precision
    # the rule states; the interval there is the honest one, whatever its width.
    assert f.signature_parts and all(c.captured for c in f.signature_parts)
    assert all(c.precision <= 0.10 or c.name != "training steps" for c in f.signature_parts)
    assert f.to_dict()["signature_parts"][0]["name"] == "training steps"
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
    from ailens.record.trace import TraceWriter

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


def test_a_change_of_behaviour_is_adopted_within_a_few_steps(tmp_path):
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
    seen = {}
    a = analyze(load_run(syn.path), watch=lambda oa: seen.setdefault(oa.steps, oa.predict()))
    d = np.diff(syn.step_end_ns[:, 0]) / 1e9
    before, after = d[10:39].mean(), d[45:].mean()
    assert seen[38].step_time_s == pytest.approx(before, rel=0.03)
    assert seen[50].step_time_s == pytest.approx(after, rel=0.03)  # adopted by step 50
    assert a.forecast.total_steps == 200


# --------------------------------------------------------------------------- public API, steps


def test_public_analyze_reads_a_directory_or_a_loaded_run(syn, a):
    by_path = ailens.analyze(syn.path)
    assert isinstance(by_path, ailens.RunAnalysis) and ailens.analyze is analyze
    np.testing.assert_array_equal(by_path.phase_ids, a.phase_ids)
    np.testing.assert_array_equal(by_path.steps.wall_s, a.steps.wall_s)
    assert by_path.forecast == a.forecast and by_path.warnings == a.warnings
    with pytest.raises(ailens.TraceError, match="missing: no such run directory"):
        ailens.analyze(syn.path / "missing")


def _rank_clock_s(syn, ns: np.ndarray) -> np.ndarray:
    return (ns - syn.offsets_ns) / 1e9


def test_step_table_splits_each_step_on_each_rank(syn, a):
    """Blocking collectives (framework "synthetic"): the exposed communication of a step is
    the time its collectives were in flight, nothing overlaps, compute is the rest."""
    t = a.steps
    assert t.wall_s.shape == (syn.steps, 3) and not t.whole_recording
    ends = _rank_clock_s(syn, syn.step_end_ns)
    np.testing.assert_allclose(t.wall_s[1:], np.diff(ends, axis=0), atol=1e-9)
    np.testing.assert_allclose(t.wall_s[0], ends[0], atol=1e-9)
    flight = (syn.end_ns - syn.begin_ns) / 1e9
    want = np.zeros((syn.steps, 3))
    np.add.at(want, syn.step, flight)
    np.testing.assert_allclose(t.exposed_s, want, atol=1e-9)
    np.testing.assert_allclose(t.comm_s, want, atol=1e-9)
    np.testing.assert_array_equal(t.overlap_s, np.maximum(t.comm_s - t.exposed_s, 0.0))
    assert t.overlap_s.max() < 1e-9 and not t.tick_async.any() and t.async_note == ""
    np.testing.assert_array_equal(t.compute_s, t.wall_s - t.exposed_s)
    assert (t.compute_s > 0).all() and not t.sections_s.any() and t.cpu_s is None
    np.testing.assert_array_equal(t.training_steps(5), np.arange(5, syn.steps))
    np.testing.assert_array_equal(t.training_steps(0), np.arange(1, syn.steps))
    np.testing.assert_allclose(a.work_mean, syn.work.mean(axis=1))


def test_step_table_groups_ddp_gradient_allreduces(tmp_path):
    """Under DDP a step's consecutive allreduces are one asynchronous group: only the wait
    after the last one is exposed, the rest of their flight overlaps compute."""
    syn = write_run(tmp_path / "ddp", ranks=2, steps=60, seed=4, framework="torch-ddp")
    t = analyze(syn.path).steps
    assert "asynchronous group" in t.async_note and t.tick_async.any()
    flight = (syn.end_ns - syn.begin_ns) / 1e9
    want = np.zeros((syn.steps, 2))
    for s in range(syn.steps):
        ticks = np.flatnonzero(syn.step == s)
        ar = [k for k in ticks if syn.op_names[syn.op[k]] == "allreduce"]
        last = ar[-1]
        want[s] = (syn.end_ns[ar].max(axis=0) - syn.begin_ns[last]) / 1e9
        want[s] += flight[[k for k in ticks if k not in ar]].sum(axis=0)
    np.testing.assert_allclose(t.exposed_s, want, atol=1e-9)
    assert (t.overlap_s > 0).all()
    np.testing.assert_allclose(t.comm_s - t.overlap_s, t.exposed_s, atol=1e-12)


def test_step_table_sections_and_cpu_time(tmp_path):
    """A Lens-recorded run with an evaluation section: the table holds its seconds in the
    step it began in, leaves that step out of the training steps, and (counter cpu-ns) the
    CPU seconds of each step."""
    with ailens.lens(run_dir=str(tmp_path), counter="cpu-ns", signature_record=False) as lens:
        for step in range(12):
            lens.collective_begin("allreduce", 64)
            lens.collective_end()
            if step == 6:
                with lens.section("evaluation"):
                    sum(range(20000))
            lens.step_end()
    a = analyze(tmp_path)
    t = a.steps
    assert t.n_steps == 12 and t.sectioned.tolist() == [s == 6 for s in range(12)]
    assert t.sections_s[6, 0] > 0 and t.sections_s.sum() == t.sections_s[6, 0]
    assert t.sections_s[6, 0] == t.section_total_s[0] <= t.wall_s[6, 0]
    assert 6 not in t.training_steps(2).tolist() and 7 in t.training_steps(2).tolist()
    assert t.cpu_s is not None and np.isnan(t.cpu_s[0, 0]) and (t.cpu_s[1:] >= 0).all()


def test_step_table_of_a_run_without_step_ends(tmp_path):
    with ailens.lens(run_dir=str(tmp_path), signature_record=False) as lens:
        for _ in range(5):
            lens.collective_begin("allreduce", 64)
            lens.collective_end()
    t = analyze(tmp_path).steps
    assert t.whole_recording and t.n_steps == 1 and t.training_steps(3).tolist() == [0]
    assert t.wall_s[0, 0] == pytest.approx(t.tick_end_s[-1, 0]) and "one step" in t.async_note
