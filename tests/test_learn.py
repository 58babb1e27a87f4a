"""Learning from run history (issue 16): signature record, history database, probe, fit and
``whatif --model`` on real runs (the kmeans example under mpiexec, and the recorded sweep
dataset in benchmarks/history)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, run_ranks

from ailens.tools.history import History, HistoryError
from ailens.tools.learn import (
    config_key,
    fit_model,
    load_model,
    pairs,
    predict,
    split_configs,
    target_of_record,
)
from ailens.tools.learners import fit_learner, predict_residual
from ailens.tools.probe import check_platform
from ailens.tools.signature_record import RECORD_FILE, RecordError, check_record, read_record

DATASET = REPO / "benchmarks" / "history" / "records"
KMEANS = [
    "--points", "8000", "--iterations", "14", "--progress-every", "0", "--eval-every", "0",
    "--checkpoint-every", "0",
]  # fmt: skip


def cli(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "ailens", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two real kmeans runs (mpi4py, 1 and 2 ranks, one thread each)."""
    base = tmp_path_factory.mktemp("learn")
    mpiexec = Path(sys.executable).parent / "mpiexec"
    if not mpiexec.exists():
        pytest.skip("mpiexec not installed in this venv")
    script = REPO / "examples" / "kmeans" / "kmeans.py"
    dirs = {}
    for n in (1, 2):
        d = base / f"k{n}"
        out = run_ranks(
            [str(mpiexec), "-n", str(n), sys.executable, str(script), "--run-dir", str(d),
             *KMEANS],
            timeout=90,
            env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        dirs[n] = d
    return base, dirs


def test_record_history_add_and_list(runs):
    base, dirs = runs
    for n, d in dirs.items():  # the run never writes it (close costs milliseconds): report does
        assert not (d / RECORD_FILE).exists()
        out = cli("report", d)
        assert out.returncode == 0 and f"wrote {d / RECORD_FILE}" in out.stderr, out.stderr
        by_report = read_record(d)
        assert by_report["layout"]["ranks"] == n and by_report["step"]["steps"] >= 10
    hist = base / "h.sqlite"
    out = cli("history", "add", dirs[1], dirs[2], "--history", hist, "--job", "kmeans-tiny",
              "--mode", "strong")  # fmt: skip
    assert out.returncode == 0, out.stderr
    rec = read_record(dirs[2])
    assert rec["format"] == "ailens-signature" and rec["version"] == 1
    assert rec["job"] == "kmeans-tiny" and rec["mode"] == "strong"
    assert rec["layout"]["ranks"] == 2 and rec["layout"]["threads_per_rank"] == 1
    assert rec["framework"] == "mpi4py" and rec["transport"] == "mpi"
    assert rec["platform"]["cores"] >= 1 and rec["platform"]["cpu_model"]
    assert rec["platform"]["link"]["alpha_s"] is not None  # fitted on its own collectives
    st = rec["step"]
    assert st["step_s"] > 0 and 0 <= st["comm_s"] < st["step_s"] and st["compute_s"] > 0
    ar = [p for p in rec["phases"] if p["op"] == "allreduce"]  # kmeans: 3 per iteration
    assert ar and sum(p["per_step"] for p in ar) >= 1
    assert all(p["work_per_occurrence"] > 0 and p["simo"] > 0 for p in ar)
    assert {c["nbytes"] for c in rec["collectives"]} >= {8192}  # kmeans' centroid sums
    # The stored analytic grid reproduces the run at its own layout (what-if contract).
    own = [r for r in rec["analytic"]["strong"] if r[:2] == [2, 1]]
    cores = rec["layout"]["cores_per_node"]
    at_own = [r[3] for r in own if r[2] == cores]
    if at_own:
        assert at_own[0] == pytest.approx(st["step_s"], rel=0.05)
    # Stored once; a second add of the same run is a no-op unless --rebuild.
    again = cli("history", "add", dirs[2], "--history", hist)
    assert again.returncode == 0 and "already stored" in again.stderr
    listed = cli("history", "list", "--history", hist)
    assert listed.returncode == 0 and listed.stdout.count("kmeans-tiny") == 2, listed.stdout
    with sqlite3.connect(hist) as db:
        assert db.execute("SELECT version FROM schema_version").fetchone() == (1,)


def test_history_refuses_inconsistent_records(runs, tmp_path):
    _, dirs = runs
    rec = read_record(dirs[1]) if (dirs[1] / RECORD_FILE).exists() else None
    if rec is None:
        assert cli("history", "add", dirs[1], "--history", tmp_path / "x.sqlite").returncode == 0
        rec = read_record(dirs[1])
    with History(tmp_path / "h.sqlite") as h:
        assert h.add(rec)
        # Same job name, another model: refused, naming the run and the fix.
        other = json.loads(json.dumps(rec))
        other.update(run_id="other", run_dir="/runs/other", param_count=123, framework="torch")
        with pytest.raises(HistoryError, match=r"/runs/other.*--job NAME"):
            h.add(other)
        # A record whose layout contradicts itself.
        bad = json.loads(json.dumps(rec))
        bad.update(run_id="bad", run_dir="/runs/bad")
        bad["layout"]["ranks_per_node"] = 4
        with pytest.raises(HistoryError, match=r"/runs/bad: inconsistent.*--rebuild"):
            h.add(bad)
        assert len(h.records()) == 1
    # A record file edited by hand: the CLI says which file and what to do, exit 2.
    f = tmp_path / "signature.json"
    broken = json.loads(json.dumps(rec))
    broken["step"]["step_s"] = -1
    f.write_text(json.dumps(broken))
    out = cli("history", "add", f, "--history", tmp_path / "h.sqlite")
    assert out.returncode == 2 and str(f) in out.stderr and "step time" in out.stderr
    with pytest.raises(RecordError):
        check_record({"format": "nope"}, "x")
    # Not a database / another schema version.
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not sqlite at all " * 100)
    out = cli("history", "list", "--history", junk)
    assert out.returncode == 2 and "not an ailens history database" in out.stderr
    with sqlite3.connect(tmp_path / "old.sqlite") as db:
        db.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        db.execute("INSERT INTO schema_version VALUES (99)")
    with pytest.raises(HistoryError, match="schema version 99"):
        History(tmp_path / "old.sqlite")


def test_probe_writes_a_platform_descriptor(tmp_path):
    p = tmp_path / "p.json"
    out = cli("probe", "--seconds", "0.1", "--name", "here", "-o", p)
    assert out.returncode == 0, out.stderr
    doc = check_platform(json.loads(p.read_text()), str(p))
    assert doc["name"] == "here" and doc["collectives"] is None  # not launched with ranks
    assert doc["usable_cores"] <= len(os.sched_getaffinity(0))
    assert doc["core_gflops"] > 0.1 and doc["node_gflops"] > 0.1 and doc["mem_gbps"] > 0.1
    assert set(doc["node"]) >= {"cpu_model", "cores", "affinity", "cpu_quota", "mem_total_bytes"}


def _dataset(job_prefix: str = "kmeans/") -> list[dict]:
    recs = [json.loads(f.read_text()) for f in sorted(DATASET.glob("*.json"))]
    recs = [r for r in recs if r["job"].startswith(job_prefix)]
    if len(recs) < 6:
        pytest.skip(f"fewer than 6 {job_prefix} records in {DATASET} (python benchmarks/sweep.py)")
    return recs


def test_split_keeps_configurations_disjoint():
    recs = _dataset()
    keys = [config_key(r) for r in recs]
    train, held = split_configs(keys + keys[:3], 0.25, seed=3)  # repeats: still disjoint
    assert train and held and not train & held and train | held == set(keys)
    Xv, yv, av, mv, kv = pairs(recs, targets=held, sources=train)
    assert set(kv) <= held and len(yv) == len(mv) == len(av) == len(Xv)
    assert np.allclose(np.exp(yv) * av, mv)  # y is the log residual over the analytic model


def test_fit_and_whatif_with_the_model(runs, tmp_path):
    base, dirs = runs
    hist = tmp_path / "h.sqlite"
    files = sorted(DATASET.glob("kmeans__*.json"))
    if len(files) < 6:
        pytest.skip("no kmeans records in benchmarks/history (python benchmarks/sweep.py)")
    assert cli("history", "add", *files, "--history", hist).returncode == 0
    out = cli("fit", "--history", hist, "-o", tmp_path / "m.json", "--learners", "ridge,gbt")
    assert out.returncode == 0, out.stderr
    assert "<- kept" in out.stdout and "analytic" in out.stdout
    model = load_model(tmp_path / "m.json")
    assert model["best"] in ("analytic", "ridge", "gbt")
    assert set(model["validation_mape"]) == {"analytic", "ridge", "gbt"}
    probe = tmp_path / "p.json"
    assert cli("probe", "--seconds", "0.1", "-o", probe).returncode == 0
    wj = cli("whatif", dirs[2], "--model", tmp_path / "m.json", "--platform", probe,
             "--ranks", "1,2", "--mode", "strong", "--json")  # fmt: skip
    assert wj.returncode == 0, wj.stderr
    rows = json.loads(wj.stdout)
    assert [r["ranks"] for r in rows] == [1, 2]
    for r in rows:
        assert r["learned_model"] == model["best"] and r["learned_step_time_s"] > 0
        assert r["cores_per_node"] == json.loads(probe.read_text())["usable_cores"]
    text = cli("whatif", dirs[2], "--model", tmp_path / "m.json", "--ranks", "1,2")
    assert (
        text.returncode == 0 and "Learned model (" in text.stdout and "learned step" in text.stdout
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    out = cli("whatif", dirs[2], "--model", bad)
    assert out.returncode == 2 and str(bad) in out.stderr and "ailens fit" in out.stderr
    out = cli("whatif", dirs[2], "--platform", bad)
    assert out.returncode == 2 and "ailens probe" in out.stderr


def test_finet_learns_the_residual():
    pytest.importorskip("torch")
    recs = _dataset()
    model = fit_model(recs, learners=("finet",), seed=1, finet_steps=40)
    assert set(model["validation_mape"]) == {"analytic", "finet"}
    assert all(np.isfinite(v) for v in model["validation_mape"].values())
    net = fit_learner("finet", *pairs(recs)[:2], groups=pairs(recs)[4], seed=1, finet_steps=40)
    model = {**model, "model": net}
    got = predict(model, recs[0], target_of_record(recs[-1]), analytic_s=0.01)
    assert np.isfinite(got) and got > 0


def test_sweep_records_one_run_on_a_pinned_platform(tmp_path):
    """benchmarks/sweep.py end to end on its cheapest cell: the kmeans example on 1 rank
    pinned to CPU 0 (affinity, no root needed), probe and signature record only."""
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "sweep.py"), "--examples", "kmeans",
         "--platforms", "core0", "--max-runs", "1", "--out", str(tmp_path), "--timeout", "90"],
        capture_output=True, text=True, timeout=150, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (rec_file,) = (tmp_path / "records").glob("*.json")
    rec = read_record(rec_file)
    assert rec["job"] == "kmeans/p20k" and rec["mode"] == "strong"
    assert rec["platform"]["name"] == "core0" and rec["platform"]["affinity_cores"] == 1
    assert rec["layout"]["cores_per_node"] == 1.0 and rec["layout"]["ranks"] == 1
    assert rec["sweep"]["load_before"] >= 0 and not list(tmp_path.glob("**/*.ailens"))
    plat = check_platform(json.loads((tmp_path / "platforms" / "core0.json").read_text()), "p")
    assert plat["usable_cores"] == 1.0


def test_bench_learned_writes_the_issue_keys(tmp_path):
    if len(list(DATASET.glob("*.json"))) < 20:
        pytest.skip(f"too few records in {DATASET} (python benchmarks/sweep.py)")
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "bench_learned.py"), "--learners", "ridge",
         "--splits", "1", "--json", str(tmp_path / "b.json")],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    doc = json.loads((tmp_path / "b.json").read_text())
    assert set(doc) == {"runs", "held_out", "platform_out"} and doc["runs"] >= 20
    assert set(doc["held_out"]) == {"analytic_mape", "learned_mape", "best"}
    assert set(doc["held_out"]["learned_mape"]) == {"ridge"}
    assert doc["platform_out"] and all(
        set(r) == {"platform", "mape", "r2", "ordering"} for r in doc["platform_out"]
    )
    assert "| analytic what-if |" in out.stdout


def test_gbt_fits_a_nonlinear_residual():
    """The trees find an interaction the linear model cannot (a step up where two inputs
    are both high), on held-out points."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (600, 5))
    y = np.where((X[:, 0] > 0.5) & (X[:, 1] > 0.5), 1.0, 0.0) + 0.02 * rng.standard_normal(600)
    m = fit_learner("gbt", X[:400], y[:400], groups=list(range(400)), seed=0)
    err = np.abs(predict_residual(m, X[400:]) - y[400:]).mean()
    ridge = fit_learner("ridge", X[:400], y[:400], groups=list(range(400)), seed=0)
    assert err < 0.1 < np.abs(predict_residual(ridge, X[400:]) - y[400:]).mean()
