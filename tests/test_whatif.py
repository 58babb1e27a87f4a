"""The scaling what-if (ailens.predict.whatif): its inputs (layout, run features), the compute model
(threads, cores, ranks sharing a node), collectives on the run's transport (fit, calibration,
overlap with compute), the assumptions it lists; on synthetic runs written as real trace
files, on real two-rank runs (mpiexec, torchrun, horovodrun) and across two emulated hosts
(network namespaces; skipped with the reason when not root or iproute2 is missing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO, mpiexec, run_ranks, venv_tool
from synthetic import Collective, write_run

import ailens
from ailens import analyze, load_run
from ailens.predict.collectives import CostParams, collective_time, transport_of
from ailens.predict.whatif import (
    Layout,
    expected_max_normal,
    features,
    measured_step_s,
    merge_calibrations,
    scaling_model,
    whatif,
)
from ailens.record.config import LensConfig
from ailens.record.trace import TraceWriter

NODE2 = {"hostname": "n", "cores": 2, "affinity": [0, 1], "cpu_quota": None, "thread_env": {}}


def node(cores: int, threads: int | None = None, quota: float | None = None) -> dict:
    env = {"OMP_NUM_THREADS": str(threads)} if threads else {}
    return {
        "hostname": "n",
        "cpu_model": "test cpu",
        "cores": cores,
        "affinity": list(range(cores)),
        "cpu_quota": quota,
        "mem_total_bytes": 1 << 34,
        "thread_env": env,
    }


# --------------------------------------------------------------------------- layout


def test_layout_knows_cores_threads_and_links():
    fits = Layout(ranks=2, ranks_per_node=2, threads_per_rank=1, cores_per_node=2)
    assert not fits.oversubscribed and fits.cores_per_rank == 1 and fits.busy_cores == 2
    assert fits.links == "intra" and fits.nodes == 1
    over = Layout(ranks=2, ranks_per_node=2, threads_per_rank=2, cores_per_node=2)
    assert over.oversubscribed and over.cores_per_rank == 1 and over.busy_cores == 2
    spread = Layout(ranks=8, ranks_per_node=4, threads_per_rank=4, cores_per_node=16)
    assert spread.nodes == 2 and spread.links == "inter" and spread.cores_per_rank == 4
    assert Layout(1, 1, 4, 2).links == "none" and Layout(1, 1, 4, 2).cores_per_rank == 2
    d = spread.to_dict()
    assert d["nodes"] == 2 and d["oversubscribed"] is False
    with pytest.raises(ValueError):
        Layout(0, 1, 1, 1)


def test_expected_max_of_normals():
    assert expected_max_normal(1) == 0
    assert expected_max_normal(2) == pytest.approx(1 / np.sqrt(np.pi), rel=1e-4)
    assert expected_max_normal(4) == pytest.approx(1.0294, rel=1e-3)


def test_transport_names_the_family_a_calibration_must_measure():
    assert transport_of("torch-ddp", "gloo") == "gloo"
    assert transport_of("horovod.torch", "gloo") == "horovod"
    assert transport_of("keras+horovod", "gloo") == "horovod"
    assert transport_of("mpi4py", "MPICH 5.0.2") == "mpi"
    assert transport_of("keras+tf.distribute", "tf.distribute") == "tf"


# --------------------------------------------------------------------------- synthetic runs

# Blocking collectives, no imbalance, little noise: the features are the pattern's figures.
PATTERN = (
    Collective("allreduce", 4_000_000, compute_s=0.008, comm_s=0.004, work=8e6),
    Collective("allreduce", 8, compute_s=0.002, comm_s=0.0002, work=2e6),
)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    path = tmp_path_factory.mktemp("two") / "run"
    syn = write_run(
        path,
        ranks=2,
        steps=80,
        pattern=PATTERN,
        counter="cpu-ns",
        imbalance=0.0,
        noise=0.01,
        tail_s=0.001,
        seed=5,
        extra_meta={"node": node(2, threads=1), "run": {"batch_size": 32}},
    )
    return syn, analyze(load_run(path))


def test_features_split_the_step_into_compute_and_comm(two):
    syn, a = two
    f = features(a)
    assert f.layout == Layout(2, 2, 1, 2.0)
    assert "OMP_NUM_THREADS" in f.layout_sources["threads_per_rank"]
    assert f.compute_s == pytest.approx(0.011, rel=0.03)  # 8 + 2 ms before, 1 ms after
    assert f.comm_s == pytest.approx(0.0042, rel=0.05)
    assert f.step_s == pytest.approx(measured_step_s(a), rel=1e-12)
    assert f.step_s == pytest.approx(f.compute_s + f.imbalance_s + f.comm_s, rel=0.02)
    assert abs(f.model_error_pct) < 2
    assert f.parallelism == pytest.approx(10 / 11, rel=0.05)  # CPU counted before collectives
    assert f.batch_size == 32 and f.transport == ""
    assert {(g.op, g.nbytes) for g in f.groups} == {("allreduce", 4_000_000), ("allreduce", 8)}
    assert not any(g.overlapped for g in f.groups) and f.overlap_s == 0
    d = f.to_dict()
    json.dumps(d)
    assert d["layout"]["cores_per_rank"] == 1 and d["groups"][0]["per_step"] == 1


def test_at_its_own_layout_the_model_reproduces_the_run(two):
    _, a = two
    (row,) = whatif(a, [2])
    assert row.measured and row.links == "intra" and row.compute_factor == 1
    assert row.step_time_s == pytest.approx(measured_step_s(a), rel=0.02)
    assert row.threads_per_rank == 1 and row.cores_per_node == 2 and row.ranks_per_node == 2


def test_two_to_one_rank_drops_the_collectives_and_keeps_the_compute(two):
    _, a = two
    rows = {r.ranks: r for r in whatif(a, [1, 2])}
    f = features(a)
    assert rows[1].comm_step_s == 0 and rows[1].links == "none"
    assert rows[1].step_time_s == pytest.approx(f.compute_s, rel=1e-9)
    assert rows[1].speedup == 1 and rows[2].efficiency == pytest.approx(rows[2].speedup / 2)


def test_strong_scaling_divides_the_work(two):
    _, a = two
    rows = {r.ranks: r for r in whatif(a, [1, 2], mode="strong")}
    f = features(a)
    assert rows[1].compute_factor == pytest.approx(2.0)
    assert rows[1].step_time_s == pytest.approx(2 * f.compute_s, rel=1e-9)


def test_calibration_measurements_are_used_at_their_rank_count(two):
    _, a = two
    # Measured: 4 MB allreduce 10 ms on 2 ranks intra-node, 50 ms inter-node.
    samples = [{"op": "allreduce", "nbytes": n, "seconds": s} for n, s in ((8, 1e-4), (4e6, 0.01))]
    inter = [{"op": "allreduce", "nbytes": n, "seconds": s} for n, s in ((8, 1e-3), (4e6, 0.05))]
    cal = {
        "transport": "mpi",
        "intra": {"alpha": 1e-5, "beta": 2e-9, "ranks": 2, "samples": samples},
        "inter": {"alpha": 1e-4, "beta": 1e-8, "ranks": 2, "samples": inter},
    }
    model = scaling_model(a, calibration=cal)
    assert model.time("allreduce", 2, 4e6, "intra") == pytest.approx(0.01)
    assert model.time("allreduce", 2, 4e6, "inter") == pytest.approx(0.05)
    # Between measured sizes: log-log interpolation; other rank counts: the fitted model.
    mid = model.time("allreduce", 2, np.sqrt(8 * 4e6), "intra")
    assert mid == pytest.approx(np.sqrt(1e-4 * 0.01), rel=1e-6)
    p = CostParams(1e-5, 2e-9)
    assert model.time("allreduce", 4, 4e6, "intra") == pytest.approx(
        collective_time("allreduce", 4, 4e6, p)
    )
    # The same two ranks on two nodes: each collective takes the measured difference more.
    f = features(a)
    (row,) = whatif(a, [2], ranks_per_node=1, calibration=cal)
    added = (0.05 - 0.01) + (1e-3 - 1e-4)
    assert row.links == "inter"
    assert row.comm_step_s == pytest.approx(f.comm_s + added, rel=0.03)
    assert any("inter-node collectives: ailens calibrate on mpi" in s for s in row.assumptions)


def test_merge_calibrations_takes_each_part_from_the_first_that_has_it():
    loop = {"transport": "gloo", "intra": {"alpha": 1}, "inter": None, "compute": {"x": 1}}
    link = {"transport": "gloo", "intra": None, "inter": {"alpha": 2}, "compute": None}
    m = merge_calibrations([link, loop, None])
    assert m["intra"] == {"alpha": 1} and m["inter"] == {"alpha": 2} and m["compute"] == {"x": 1}
    assert merge_calibrations([None]) is None


@pytest.fixture(scope="module")
def one(tmp_path_factory):
    """One rank with 2 threads on a 2-core node: compute 20 ms per step."""
    path = tmp_path_factory.mktemp("one") / "run"
    pattern = (
        Collective("allreduce", 1_000_000, compute_s=0.016, comm_s=1e-5, work=3e7),
        Collective("allreduce", 8, compute_s=0.004, comm_s=1e-6, work=7e6),
    )
    write_run(
        path,
        ranks=1,
        steps=60,
        pattern=pattern,
        counter="cpu-ns",
        noise=0.0,
        tail_s=0.0,
        seed=1,
        extra_meta={"node": node(2), "run": {"threads": 2}},
    )
    return analyze(load_run(path))


PROBE = {
    "kernel": "test kernel",
    "threads": {"1": 0.010, "2": 0.00625},  # 1.6x on 2 threads
    "corun": {"1": 0.010, "2": 0.0125},  # 1.25x slower with 2 ranks computing side by side
}


def test_compute_follows_the_cores_each_rank_gets(one):
    """1 rank x 2 threads -> 2 ranks x 1 thread, and -> 2 ranks x 2 threads (oversubscribed):
    the measured thread speed-up and node-sharing slowdown."""
    cal = {"intra": {"alpha": 0.0, "beta": 0.0}, "compute": PROBE}
    f = features(one)
    assert f.layout == Layout(1, 1, 2, 2.0) and "recorded" in f.layout_sources["threads_per_rank"]
    rows = {
        t: whatif(one, [2], threads_per_rank=t, calibration=cal)[0] for t in (1, 2)
    }  # fmt: skip
    # Source speed = S(2) / I(2) = 1.6 / 1.25; 2 ranks x 1 thread: S(1) / I(2) = 1 / 1.25.
    assert rows[1].compute_factor == pytest.approx(1.6)
    # 2 ranks x 2 threads on 2 cores: each rank gets 1 core, the same as 1 thread.
    assert rows[2].compute_factor == pytest.approx(1.6)
    assert any("time-share the cores" in s for s in rows[2].assumptions)
    assert not any("time-share" in s for s in rows[1].assumptions)
    # Twice the cores per node: 2 ranks x 2 threads fit again.
    (wide,) = whatif(one, [2], threads_per_rank=2, cores_per_node=4, calibration=cal)
    assert wide.compute_factor == pytest.approx(1.0)
    for r in (*rows.values(), wide):
        assert any("measured by ailens calibrate (test kernel" in s for s in r.assumptions)
    assert rows[1].step_time_s == pytest.approx(1.6 * f.compute_s, rel=0.01)


def test_unmeasured_compute_inputs_are_labelled_as_assumptions(one):
    (row,) = whatif(one, [2], threads_per_rank=1)
    text = " | ".join(row.assumptions)
    assert "not modelled: memory bandwidth" in text
    # Thread speed-up from the run's own CPU-time parallelism (2 threads, P = 37 / 20 ms).
    assert "CPU-time parallelism 1.85" in text
    assert row.compute_factor == pytest.approx(1.85, rel=0.01)
    assert "intra-node collectives: assumed" in text


def test_quota_caps_the_cores(tmp_path):
    write_run(
        tmp_path / "run",
        ranks=1,
        steps=20,
        counter="cpu-ns",
        extra_meta={"node": node(8, threads=4, quota=2.0)},
    )
    f = features(analyze(load_run(tmp_path / "run")))
    assert f.layout.cores_per_node == 2.0 and "quota" in f.layout_sources["cores_per_node"]


def test_missing_node_facts_are_assumed_and_said(tmp_path):
    write_run(tmp_path / "run", ranks=2, steps=20)  # no node, no threads in the header
    a = analyze(load_run(tmp_path / "run"))
    (row,) = whatif(a, [1])
    text = " | ".join(row.assumptions)
    assert "cores per node not recorded" in text and "threads per rank not recorded" in text


def test_one_rank_noise_predicts_the_slowest_of_several(tmp_path):
    pattern = (Collective("allreduce", 1000, compute_s=0.01, comm_s=1e-6, work=1e7),)
    write_run(
        tmp_path / "run",
        ranks=1,
        steps=200,
        pattern=pattern,
        noise=0.1,
        tail_s=0.0,
        counter="cpu-ns",
        extra_meta={"node": node(4, threads=1)},
    )
    a = analyze(load_run(tmp_path / "run"))
    f = features(a)
    assert f.compute_sd_s == pytest.approx(0.001, rel=0.25)
    rows = {r.ranks: r for r in whatif(a, [1, 2, 4])}
    lag2 = rows[2].compute_step_s - rows[1].compute_step_s
    assert lag2 == pytest.approx(f.compute_sd_s * expected_max_normal(2), rel=1e-6)
    assert rows[4].compute_step_s - rows[1].compute_step_s > lag2


def test_sections_are_left_out_of_the_measured_step(tmp_path):
    syn = write_run(tmp_path / "run", ranks=1, steps=30, counter="cpu-ns", noise=0.0)
    a = analyze(load_run(syn.path))
    before = measured_step_s(a)
    # A 50 ms evaluation inside step 10: that step no longer counts.
    f = next(iter(sorted(syn.path.glob("rank-*.ailens"))))
    t = a.run.ranks[0].steps["t_ns"]
    mark = {"kind": "section", "name": "eval", "step": 10, "t_begin_ns": int(t[9]),
            "t_end_ns": int(t[9]) + 50_000_000}  # fmt: skip
    from ailens.record.trace import encode_json

    with open(f, "ab") as fh:
        fh.write(encode_json(b"MARK", [mark]))
    a2 = analyze(load_run(syn.path))
    assert a2.run.ranks[0].marks[-1]["name"] == "eval"
    assert measured_step_s(a2) == pytest.approx(before, rel=0.02)
    assert features(a2).sections_s == pytest.approx(0.05 / 30)


def test_a_run_without_step_boundaries_is_one_step(tmp_path):
    w = TraceWriter(
        tmp_path / "rank-00000.ailens",
        {
            "format_version": 1,
            "rank": 0,
            "world_size": 1,
            "counter": "cpu-ns",
            "run_id": "x",
            "config": {"run_dir": str(tmp_path)},
        },
    )
    w.write_ops(["allreduce"])
    n = 10
    w.write_events(
        {
            "op": np.zeros(n),
            "step": np.zeros(n),
            "nbytes": np.full(n, 8),
            "t_begin": np.arange(n) * 1000 + 900,
            "t_end": np.arange(n) * 1000 + 1000,
            "work": np.full(n, 900),
        }
    )
    w.write_info({"closed": True})
    w.close()
    a = analyze(load_run(tmp_path))
    rows = whatif(a, [1, 2])
    assert rows[0].step_time_s == pytest.approx(n * 1000 / 1e9, rel=0.2)
    assert rows[1].comm_step_s > 0
    assert any("no step boundaries" in s for s in rows[0].assumptions)


def test_bad_input_is_refused(two):
    _, a = two
    with pytest.raises(ValueError):
        whatif(a, [2], mode="sideways")
    with pytest.raises(ValueError):
        whatif(a, [0, 2])
    with pytest.raises(ValueError):
        whatif(a, [2], cores_per_node=0)


# --------------------------------------------------------------------------- overlap (DDP)


def write_ddp_like(path, *, ranks: int, steps: int = 60, comm_s=(0.006, 0.006, 0.006)) -> float:
    """A DDP-like run: forward 10 ms, backward 30 ms with a gradient bucket ready every 10 ms,
    bucket allreduces through one serial queue while backward goes on, optimizer 5 ms.
    Returns the step time. At 1 rank the allreduces take no time."""
    path.mkdir(parents=True, exist_ok=True)
    fwd, bwd, opt = 0.010, 0.030, 0.005
    k = len(comm_s)
    c = np.asarray(comm_s if ranks > 1 else [2e-5] * k)
    ready = fwd + bwd * np.arange(1, k + 1) / k
    fin = np.zeros(k)
    for i in range(k):
        fin[i] = max(ready[i], fin[i - 1] if i else 0.0) + c[i]
    step = max(fin[-1], ready[-1]) + opt
    cfg = LensConfig(run_dir=path, framework="torch-ddp", backend="gloo")
    rng = np.random.default_rng(0)
    for r in range(ranks):
        meta = {
            "format_version": 1,
            "ailens_version": ailens.__version__,
            "run_id": "ddp",
            "rank": r,
            "world_size": ranks,
            "host": "n",
            "pid": 1 + r,
            "framework": "torch-ddp",
            "backend": "gloo",
            "counter": "cpu-ns",
            "counter_unit": "ns",
            "counter_fallback": None,
            "start_wall_ns": 10**18,
            "start_time": "",
            "config": cfg.to_dict(),
            "node": node(2, threads=1),
            "run": {"threads": 1},
        }
        w = TraceWriter(path / f"rank-{r:05d}.ailens", meta)
        w.write_ops(["allreduce"])
        jitter = 1 + 0.002 * rng.standard_normal(steps)
        t0 = np.concatenate(([0.0], np.cumsum(step * jitter)))[:-1]
        b = (t0[:, None] + ready[None, :] * jitter[:, None]).ravel()
        e = (t0[:, None] + fin[None, :] * jitter[:, None]).ravel()
        work = np.diff(np.concatenate(([0.0], b))) * 1e9
        w.write_events(
            {
                "op": np.zeros(steps * k),
                "step": np.repeat(np.arange(steps), k),
                "nbytes": np.tile([25 << 20, 25 << 20, 10 << 20], steps)[: steps * k],
                "t_begin": np.round(b * 1e9),
                "t_end": np.round(e * 1e9),
                "work": np.round(work),
            }
        )
        ends = t0 + step * jitter
        w.write_steps(
            {
                "step": np.arange(steps),
                "t_ns": np.round(ends * 1e9),
                "work": np.round(ends * 1e9 * 0.9),
            }
        )
        w.write_info({"closed": True, "end_ns": int(ends[-1] * 1e9) + 1000})
        w.close()
    return float(step)


def test_comm_hidden_under_backward_stays_compute_at_one_rank(tmp_path):
    step2 = write_ddp_like(tmp_path / "two", ranks=2)
    step1 = write_ddp_like(tmp_path / "one", ranks=1)
    a2 = analyze(load_run(tmp_path / "two"))
    f = features(a2)
    assert measured_step_s(a2) == pytest.approx(step2, rel=0.01)
    assert [g.overlapped for g in sorted(f.groups, key=lambda g: -g.nbytes)][:1] == [True]
    assert f.comm_s == pytest.approx(step2 - step1, rel=0.05)  # only the tail is exposed
    assert f.overlap_s == pytest.approx(0.020, rel=0.02)
    (row,) = whatif(a2, [1])
    assert row.step_time_s == pytest.approx(step1, rel=0.02)


def test_one_rank_ddp_run_replays_the_buckets_against_backward(tmp_path):
    step1 = write_ddp_like(tmp_path / "one", ranks=1)
    step2 = write_ddp_like(tmp_path / "two", ranks=2, comm_s=(0.012, 0.012, 0.012))
    a1 = analyze(load_run(tmp_path / "one"))
    samples = [
        {"op": "allreduce", "nbytes": n, "seconds": 0.012} for n in (10 << 20, 25 << 20)
    ]  # fmt: skip
    cal = {"transport": "gloo", "intra": {"alpha": 1e-5, "beta": 1e-10, "ranks": 2,
                                          "samples": samples}}  # fmt: skip
    (row,) = whatif(a1, [2], calibration=cal)
    assert any("torch-ddp reduces gradients under the backward pass" in s for s in row.assumptions)
    assert row.step_time_s == pytest.approx(step2, rel=0.02)
    assert step2 - step1 < 3 * 0.012  # part of the comm was hidden


def test_collectives_measured_beside_compute_slow_down_on_a_full_rank(tmp_path):
    """ailens calibrate's loaded_seconds (the collective while the ranks compute) is used
    while a bucket overlaps backward on a rank with no spare core: more is left after it."""
    write_ddp_like(tmp_path / "one", ranks=1)
    a1 = analyze(load_run(tmp_path / "one"))
    rows = [{"op": "allreduce", "nbytes": n, "seconds": 0.012} for n in (10 << 20, 25 << 20)]
    cal = {"transport": "gloo", "intra": {"alpha": 1e-5, "beta": 1e-10, "ranks": 2,
                                          "samples": rows}}  # fmt: skip
    (idle,) = whatif(a1, [2], calibration=cal)
    for r in rows:
        r.update(loaded_seconds=0.024, loaded_compute_rate=0.9)
    (loaded,) = whatif(a1, [2], calibration=cal)
    assert loaded.comm_step_s > idle.comm_step_s + 0.005
    # With a spare core per rank (4 cores for 2 ranks) the idle figures apply.
    (spare,) = whatif(a1, [2], calibration=cal, cores_per_node=4)
    assert spare.comm_step_s == pytest.approx(idle.comm_step_s, rel=1e-6)


# --------------------------------------------------------------------------- CLI


def cli(*args, timeout=60):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "ailens", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_cli_whatif_takes_the_layout_and_lists_assumptions(two):
    syn, _ = two
    out = cli(
        "whatif", syn.path, "--ranks", "1,2,4", "--threads-per-rank", "2",
        "--cores-per-node", "4", "--ranks-per-node", "2", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["ranks"] for r in rows] == [1, 2, 4]
    for r in rows:
        assert r["threads_per_rank"] == 2 and r["cores_per_node"] == 4
        assert isinstance(r["assumptions"], list) and r["assumptions"]
    assert rows[2]["links"] == "inter" and rows[2]["ranks_per_node"] == 2
    text = cli("whatif", syn.path, "--ranks", "1,2")
    assert text.returncode == 0 and "Assumption: " in text.stdout
    bad = cli("whatif", syn.path, "--cores-per-node", "0")
    assert bad.returncode == 2 and "not a number > 0" in bad.stderr
    rep = cli("report", syn.path)
    assert rep.returncode == 0 and "Assumption: " in rep.stdout


# --------------------------------------------------------------------------- real ranks

KMEANS = [
    "--points", "40000", "--iterations", "30", "--progress-every", "0", "--eval-every", "0",
    "--checkpoint-every", "0",
]  # fmt: skip


def env_threads(n: int) -> dict:
    return {"OMP_NUM_THREADS": str(n), "OPENBLAS_NUM_THREADS": str(n), "PYTHONPATH": str(REPO)}


@pytest.mark.parallel
def test_real_mpi_runs_calibrate_and_scale(tmp_path):
    """kmeans on 1 and 2 MPI ranks, `ailens calibrate` under mpiexec: the what-if from either
    run lands near the other (loose bound: this machine is shared) and says what it used."""
    tool = mpiexec()
    script = REPO / "examples" / "kmeans" / "kmeans.py"
    for n in (1, 2):
        out = run_ranks(
            [tool, "-n", str(n), sys.executable, str(script), "--run-dir", tmp_path / f"r{n}",
             *KMEANS],
            timeout=120,
            env=env_threads(1),
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
    cal = tmp_path / "calibration.json"
    out = run_ranks(
        [tool, "-n", "2", sys.executable, "-m", "ailens", "calibrate", "--out", cal,
         "--sizes-from", tmp_path / "r2", "--max-bytes", str(1 << 16), "--reps", "5"],
        timeout=120,
        env=env_threads(1),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(cal.read_text())
    assert doc["transport"] == "mpi" and doc["intra"]["ranks"] == 2 and doc["inter"] is None
    assert {"1", "2"} <= set(doc["compute"]["threads"]) and "2" in doc["compute"]["corun"]
    assert 8192 in {s["nbytes"] for s in doc["intra"]["samples"]}  # the run's own size
    a1, a2 = (analyze(load_run(tmp_path / f"r{n}")) for n in (1, 2))
    assert features(a2).transport == "mpi" and features(a2).layout.ranks_per_node == 2
    (up,) = whatif(a1, [2], mode="strong", calibration=doc)
    (down,) = whatif(a2, [1], mode="strong", calibration=doc)
    # Accuracy is the benchmark's business (on a quiet machine); here other jobs share the
    # cores, so only gross errors (a missed factor of 2 in the work split) are caught.
    for row, other in ((up, a2), (down, a1)):
        assert 0.4 < row.step_time_s / measured_step_s(other) < 2.5
    assert any("ailens calibrate on mpi" in s for s in up.assumptions)


DDP_SCRIPT = r"""
import os, sys, torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from ailens.integrations.torch import attach
dist.init_process_group("gloo")
torch.set_num_threads(1)
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(6)]),
            bucket_cap_mb=0.3)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
lens = attach(model, opt, run_dir=sys.argv[1], total_steps=40)
x = torch.randn(64, 256)
for _ in range(40):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
lens.close()
del model
dist.destroy_process_group()
"""


@pytest.mark.parallel
def test_real_ddp_buckets_overlap_and_calibrate_on_gloo(tmp_path):
    torchrun = venv_tool("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed")
    pytest.importorskip("torch")
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    run = tmp_path / "run"
    out = run_ranks(
        [torchrun, "--standalone", "--nproc-per-node=2", script, run], timeout=120,
        env=env_threads(1),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    a = analyze(load_run(run))
    f = features(a)
    assert f.transport == "gloo" and f.layout.threads_per_rank == 1
    assert sum(g.per_step for g in f.groups) >= 3 and all(g.overlapped for g in f.groups)
    assert f.overlap_s > 0
    cal = tmp_path / "cal.json"
    out = run_ranks(
        [torchrun, "--standalone", "--nproc-per-node=2", "-m", "ailens", "calibrate", "--out",
         cal, "--sizes-from", run, "--max-bytes", str(1 << 18), "--reps", "3"],
        timeout=120,
        env=env_threads(1),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(cal.read_text())
    assert doc["transport"] == "gloo" and "torch" in doc["compute"]["kernel"]
    loaded = [r for r in doc["intra"]["samples"] if "loaded_seconds" in r]
    assert loaded and all(0 < r["loaded_compute_rate"] <= 1 for r in loaded)
    (row,) = whatif(a, [1], calibration=doc)
    # At 1 rank the hidden comm stays compute: more than the step minus all comm time.
    total_comm = float(np.sum(a.comm_s[np.isin(a.tick_step, np.arange(3, 40))])) / 37
    assert row.step_time_s > measured_step_s(a) - total_comm
    assert not any("calibrate on gloo (the run used" in s for s in row.assumptions)


@pytest.mark.parallel
def test_real_calibrate_under_horovodrun_times_horovod(tmp_path):
    hvdrun = venv_tool("horovodrun")
    if hvdrun is None:
        pytest.skip("horovodrun is not installed")
    pytest.importorskip("horovod.torch")
    cal = tmp_path / "cal.json"
    out = run_ranks(
        [hvdrun, "--gloo", "-np", "2", "-H", "localhost:2", sys.executable, "-m", "ailens",
         "calibrate", "--out", cal, "--max-bytes", str(1 << 14), "--reps", "3", "--no-compute"],
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr + out.stdout
    doc = json.loads(cal.read_text())
    assert doc["transport"] == "horovod" and doc["intra"]["alpha"] >= 0
    assert doc["compute"] is None


# --------------------------------------------------------------------------- two hosts


def netns_or_skip():
    import netns

    ok, why = netns.available()
    if not ok:
        pytest.skip(f"emulated hosts unavailable: {why}")
    return netns


MPI_SCRIPT = r"""
import sys, numpy as np
from mpi4py import MPI
from ailens.integrations.mpi import wrap
comm = wrap(MPI.COMM_WORLD, run_dir=sys.argv[1], total_steps=30)
x = np.ones(1024); y = np.empty_like(x)
for _ in range(30):
    np.linalg.norm(np.random.default_rng(0).standard_normal((200, 200)))
    comm.Allreduce(x, y)
comm.close()
"""


@pytest.mark.parallel
@pytest.mark.timeout(150)
def test_two_emulated_hosts_gloo_and_mpi_and_the_link_calibration(tmp_path):
    """Two namespaces joined by a 100 Mbit/s, 2 ms link, one rank each under its own
    hostname: a DDP run (gloo) and an mpi4py run see two hosts; `ailens calibrate` across
    them measures the link (latency >= the emulated delay); the namespaces are gone after."""
    netns = netns_or_skip()
    torchrun, tool = venv_tool("torchrun"), mpiexec()
    script = tmp_path / "ddp.py"
    script.write_text(DDP_SCRIPT)
    mpi_script = tmp_path / "mpi.py"
    mpi_script.write_text(MPI_SCRIPT)
    env = {**os.environ, **env_threads(1)}
    with netns.TwoHosts(100, 2.0) as hosts:
        names = [hosts.run(i, ["hostname"]).stdout.strip() for i in (0, 1)]
        assert names == ["ailens-h0", "ailens-h1"]
        env.update(hosts.env())
        procs = [
            subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
            for c in hosts.torchrun_cmds(torchrun, [str(script), str(tmp_path / "ddp")])
        ]  # fmt: skip
        for p in procs:
            out, _ = p.communicate(timeout=90)
            assert p.returncode == 0, out[-3000:]
        r = subprocess.run(
            hosts.mpiexec_cmd(tool, [sys.executable, str(mpi_script), str(tmp_path / "mpi")]),
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        cal = tmp_path / "link.json"
        r = subprocess.run(
            hosts.mpiexec_cmd(
                tool, [sys.executable, "-m", "ailens", "calibrate", "--out", str(cal),
                       "--max-bytes", str(1 << 16), "--reps", "3", "--no-compute"],
            ),
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        namespaces = [ns for ns, _, _ in hosts.hosts]
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in namespaces)
    for run in ("ddp", "mpi"):
        a = analyze(load_run(tmp_path / run))
        f = features(a)
        assert set(f.hosts) == {"ailens-h0", "ailens-h1"}
        assert f.layout.nodes == 2 and f.layout.links == "inter"
    doc = json.loads(cal.read_text())
    assert doc["inter"] is not None and doc["intra"] is None and doc["ranks_per_node"] == 1
    rows = doc["inter"]["samples"]
    # Every collective between the two hosts waits at least the one-way delay (2 ms), and
    # the loopback would take microseconds.
    assert min(r["seconds"] for r in rows) >= 2e-3
    a = analyze(load_run(tmp_path / "mpi"))
    (same,) = whatif(a, [2], ranks_per_node=2)  # no intra-node figures: assumed equal
    assert same.links == "intra" and any("intra-node assumed equal" in x for x in same.assumptions)
    shm = {"transport": "mpi", "intra": {"alpha": 2e-6, "beta": 1e-10, "ranks": 2}}
    (row,) = whatif(a, [2], ranks_per_node=2, calibration=merge_calibrations([doc, shm]))
    assert row.comm_step_s < 0.5 * features(a).comm_s


def test_namespaces_are_removed_when_setup_fails(monkeypatch):
    netns = netns_or_skip()

    def boom(self):
        raise RuntimeError("injected")

    monkeypatch.setattr(netns.TwoHosts, "_tun_forwarder", boom)
    monkeypatch.setattr(netns.TwoHosts, "_veth_netem", boom)
    h = netns.TwoHosts(10, 1)
    with pytest.raises(RuntimeError, match="injected"):
        h.__enter__()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns, _, _ in h.hosts)


def test_one_rank_horovod_run_gets_its_gradient_allreduce_from_the_parameter_count(tmp_path):
    """Horovod skips gradient allreduces on 1 rank: the parameter count stands in."""
    pattern = (Collective("broadcast", 64, compute_s=0.01, comm_s=1e-6, work=1e7, every=50),)
    cal = {
        "transport": "horovod",
        "intra": {
            "alpha": 1e-4,
            "beta": 1e-9,
            "ranks": 2,
            "samples": [{"op": "allreduce", "nbytes": n, "seconds": 0.005} for n in (8, 1 << 20)],
        },
    }
    for count in (250_000, None):
        path = tmp_path / f"run{count}"
        write_run(
            path, ranks=1, steps=40, pattern=pattern, framework="horovod.torch", noise=0.0,
            counter="cpu-ns",
            extra_meta={"node": node(2), "run": {"threads": 1, "param_count": count}},
        )  # fmt: skip
        a = analyze(load_run(path))
        (row,) = whatif(a, [2], calibration=cal)
        text = " | ".join(row.assumptions)
        if count:
            assert row.comm_step_s == pytest.approx(0.005, rel=1e-6)
            assert "1,000,000 bytes" in text
        else:
            assert row.comm_step_s == 0 and "not modelled" in text
