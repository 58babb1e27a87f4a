"""benchmarks/bench_overhead.py's command lines: --ranks reaches every multi-rank case and job,
launchers come from next to the interpreter or from PATH, and the default run waits for the
load to settle before the job cases (bounded), saying so beside the figures."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_overhead as bo  # noqa: E402


def test_ranks_reach_every_multi_rank_job_and_case():
    jobs = {j.name: j for j in bo.JOBS}
    kmeans = bo.job_command(jobs["kmeans_job"], ("--no-lens",), "R", False, ranks=4)
    assert kmeans[kmeans.index("--ranks") + 1] == "4" and kmeans[0] == sys.executable
    plain = bo.job_command(jobs["keras_plain_job"], (), "R", False, ranks=4)
    assert plain[plain.index("--ranks") + 1] == "1"  # one process stays one
    tutorial = bo.job_command(jobs["ddp_tutorial_job"], ("--lens", "--run-dir", "{run_dir}"),
                              "/tmp/x", False, ranks=3)  # fmt: skip
    assert "--nproc_per_node=3" in tutorial and "--nproc_per_node=2" not in tutorial
    assert tutorial[-2:] == ["--run-dir", "/tmp/x"]
    cases = {c.name: c for c in bo.CASES}
    assert bo.case_ranks(cases["kmeans_mpi"], 4) == 4
    assert bo.case_ranks(cases["keras_plain"], 4) == 1


def test_launchers_next_to_the_interpreter_else_on_path(monkeypatch, tmp_path):
    monkeypatch.setattr(bo.harness, "BIN", tmp_path)  # an interpreter with no launchers beside
    cmd = bo.launcher_command("torchrun", 2, ["script.py"])
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--nproc_per_node=2" in cmd and cmd[-1] == "script.py"
    cmd = bo.launcher_command("horovodrun", 2, ["script.py"])
    assert cmd[:3] == [sys.executable, "-m", "horovod.runner.launch"] and "-np" in cmd
    (tmp_path / "bin").mkdir()
    mpiexec = tmp_path / "bin" / "mpiexec"
    mpiexec.write_text("#!/bin/sh\n")
    mpiexec.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    cmd = bo.launcher_command("mpiexec", 3, ["script.py"])
    assert cmd[0] == str(mpiexec) and cmd[1:4] == ["-n", "3", sys.executable]


def test_settle_waits_at_most_its_bound_and_reports_the_load(monkeypatch):
    loads = iter([3.0, 3.0, 2.0, 0.4])  # the first read is the message's
    monkeypatch.setattr(bo.os, "getloadavg", lambda: (next(loads, 0.4), 0.0, 0.0))
    monkeypatch.setattr(bo.harness.time, "sleep", lambda s: None)
    got = bo.settle_load(60)
    assert got["quiet"] and got["load"] == 0.4 and got["waited_s"] < 5
    monkeypatch.setattr(bo.harness.os, "getloadavg", lambda: (3.0, 0.0, 0.0))
    got = bo.settle_load(0)
    assert not got["quiet"] and got["load"] == 3.0 and got["waited_s"] < 5


def test_control_rows_run_both_arms_plain_and_are_not_the_worst_case():
    """Issue 33: Horovod's A/B reads 1.04-1.10 where ailens's own CPU is 0.5 % of the step;
    the control rows (the same two-model protocol with ailens in neither arm) say what the
    protocol reads with no difference, and never stand as ailens's worst case."""
    cases = {c.name: c for c in bo.CASES}
    for name in ("resnet50_ddp_control", "resnet50_hvd_control", "mnist_hvd_control"):
        assert name in bo.NO_AILENS
        assert cases[name].args == ("--control",) and name in bo.NO_AILENS
        assert cases[name].script == cases[name.removesuffix("_control")].script
    keras = cases["keras_hvd_control"]
    assert keras.script == "keras_hvd.py" and '"enabled": false' in " ".join(keras.args)
    assert "keras_hvd_control" in bo.NO_AILENS
    rows = [
        {"name": "resnet50_hvd", "framework": "h", "ratio": 1.01, "ci95": [1.0, 1.02],
         "step_ms": 800.0},
        {"name": "resnet50_hvd_control", "framework": "h", "ratio": 1.09, "ci95": [1.0, 1.2],
         "step_ms": 800.0},
    ]  # fmt: skip
    assert "worst case: resnet50_hvd ratio 1.0100" in bo.table(rows)


def _rank(hooks, buffer, framework, *, total, step=100_000.0):
    """One rank's attribution: (cpu us, calls) per step of the wrapper components."""
    comps = {name: {"cpu_us_per_step": cpu, "wall_us_per_step": cpu, "calls_per_step": calls}
             for name, (cpu, calls) in (("hooks", hooks), ("buffer", buffer),
                                        ("framework", framework))}  # fmt: skip
    return {"rank": 0, "components": comps, "total_cpu_us_per_step": total, "step_cpu_us": step,
            "cpu_share_pct": 100 * total / step}  # fmt: skip


def test_two_timer_densities_take_the_timers_in_place_out():
    """Issue 33: each timer costs more in place than in the calibration loop. Full timers
    have 50 a step at or inside the wrappers (hooks 20, buffer 20, framework 10), lean ones
    30; the wrappers read 400 and 250 us: 7.5 us a timer beyond the calibration, so the
    wrappers themselves are 250 - 30 x 7.5 = 25 us, and the sum 500 - 250 + 25."""
    full = {"name": "x", "attribution": [_rank((300, 20), (100, 20), (900, 10), total=650)]}
    lean = {"name": "x", "attribution": [_rank((250, 20), (0, 0), (900, 10), total=500)]}
    row = bo.with_lean(full, lean)
    (out,) = row["instrument_out"]
    assert out["timer_excess_us"] == 7.5
    assert out["wrappers_cpu_us_per_step"] == 25.0
    assert out["total_cpu_us_per_step"] == 275.0
    assert out["cpu_share_pct"] == 0.275
    assert row["attribution_lean"] == lean["attribution"]
    # No timer dropped (nothing inside the wrappers): nothing to extrapolate.
    same = bo.with_lean(lean, lean)
    assert same["instrument_out"][0]["timer_excess_us"] is None
