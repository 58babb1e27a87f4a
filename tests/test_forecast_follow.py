"""``ailens forecast LOG --follow`` on logs that real processes write while it runs: the live
updates (plain lines, JSON lines, TensorBoard scalars), a rotated log, Ctrl-C; and the
incremental replay it rests on (feeding a growing timeline in pieces gives the numbers of
feeding it whole)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ailens import Section, Timeline, forecast_timeline
from ailens.model.timeline import TimelineReplay

REPO = Path(__file__).resolve().parents[1]

# A job that logs one CSV row per step as it runs (real time from its start), an evaluation
# every 10 steps, and an ``end`` row when it is done.
WRITER = r"""
import sys, time
path, steps, step_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
t0 = time.monotonic()
with open(path, "a", buffering=1) as f:
    f.write("step,end_s,section,begin_s\n")
    for i in range(steps):
        time.sleep(step_s)
        f.write(f"{i},{time.monotonic() - t0:.4f}\n")
        if (i + 1) % 10 == 0:
            b = time.monotonic() - t0
            time.sleep(step_s)
            f.write(f"{i},{time.monotonic() - t0:.4f},eval,{b:.4f}\n")
    f.write(f"{steps},{time.monotonic() - t0 + 0.01:.4f},end\n")
"""


def _job(path: Path, steps: int, step_s: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(steps), str(step_s)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _follow(*args, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ailens", "forecast", *map(str, args), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        # Ctrl-C as at a terminal: a suite started in the background (nohup, `cmd &` in a
        # script) ignores SIGINT, and Python keeps ignoring what it inherits ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _finish(proc: subprocess.Popen, timeout: float = 120, first: str = "") -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"--follow did not end\nstdout:\n{first}{out}\nstderr:\n{err}")
    return first + out, err


def _follow_a_job(log: Path, steps: int, step_s: float, *args) -> tuple[str, str]:
    """Follow ``log``, then start the job that writes it once the follower is up (its
    first update says it waits for the log), so a loaded machine cannot make the follower
    miss the run."""
    follower = _follow(log, *args)
    first = follower.stdout.readline()
    assert "no " in first and "yet" in first, first
    job = _job(log, steps, step_s)
    out, err = _finish(follower, first=first)
    assert job.wait(timeout=60) == 0, job.stderr.read()
    assert follower.returncode == 0, err
    assert "Traceback" not in err
    return out, err


def test_follow_a_csv_that_a_running_job_writes(tmp_path):
    """Plain lines (stdout is not a terminal): one per update while the job writes, the
    forecast once the warm-up is past, and a last line saying the run finished."""
    out, _ = _follow_a_job(tmp_path / "steps.csv", 60, 0.05, "--total-steps", "60")
    lines = out.splitlines()
    steps = [int(re.match(r"ailens: step ([\d,]+)", ln).group(1).replace(",", "")) for ln in lines]
    assert len(set(steps)) >= 4, lines  # several updates while the log grew
    assert steps == sorted(steps)
    assert any("forecast end" in ln and "to go" in ln for ln in lines[:-1]), lines
    assert lines[-1].startswith("ailens: step 60/60 (100%)") and "finished at" in lines[-1]


def test_follow_json_lines_on_a_running_job(tmp_path):
    out, _ = _follow_a_job(tmp_path / "steps.csv", 50, 0.04, "--json-lines", "--total-steps", "50")
    docs = [json.loads(line) for line in out.splitlines()]
    assert len(docs) >= 3, out
    keys = {
        "time", "log", "status", "steps", "total_steps", "unit", "elapsed_s",
        "predicted_total_s", "interval_s", "eta_s", "progress_bar_total_s",
        "progress_bar_eta_s", "composer_total_s", "step_time_s", "signature_step",
        "actual_total_s", "end_wall_time", "rereads", "message",
    }  # fmt: skip
    assert all(set(d) == keys for d in docs)
    assert [d["steps"] for d in docs] == sorted(d["steps"] for d in docs)
    running = [d for d in docs if d["status"] == "running" and d["predicted_total_s"]]
    assert running, docs
    lo, hi = running[-1]["interval_s"]
    assert lo <= running[-1]["predicted_total_s"] <= hi
    assert running[-1]["end_wall_time"] > running[-1]["time"] - 5
    last = docs[-1]
    assert last["status"] == "finished" and last["steps"] == 50
    assert last["actual_total_s"] == pytest.approx(last["elapsed_s"] + 0.01, abs=0.2)


def test_follow_reads_a_rotated_log_anew(tmp_path):
    """The log replaced by another run's (rotation): read from its start, counted."""
    log = tmp_path / "steps.csv"
    log.write_text("".join(f"{i},{i + 1}.0\n" for i in range(30)))
    follower = _follow(log, "--json-lines", "--total-steps", "20")
    time.sleep(2.0)
    new = tmp_path / "new.csv"
    new.write_text("".join(f"{i},{0.5 * (i + 1)}\n" for i in range(20)) + "20,10.5,end\n")
    os.replace(new, log)
    out, err = _finish(follower)
    docs = [json.loads(line) for line in out.splitlines()]
    assert docs[0]["steps"] == 30 and docs[-1]["steps"] == 20, docs
    assert docs[-1]["rereads"] == 1 and docs[-1]["status"] == "finished"


def test_a_line_cut_mid_write_keeps_what_was_read(tmp_path):
    log = tmp_path / "steps.csv"
    log.write_text("".join(f"{i},{i + 1}.0\n" for i in range(30)))
    follower = _follow(log, "--json-lines", "--total-steps", "31")
    first = follower.stdout.readline()
    with log.open("a") as f:
        f.write("30,")  # the job is writing this row
        f.flush()
        time.sleep(1.5)
        f.write("31.0\n31,31.5,end\n")
    out, err = _finish(follower, first=first)
    docs = [json.loads(line) for line in out.splitlines()]
    assert [d["status"] for d in docs] == ["running", "finished"], docs
    assert docs[-1]["steps"] == 31


def test_ctrl_c_stops_following_cleanly(tmp_path):
    log = tmp_path / "steps.csv"
    log.write_text("".join(f"{i},{i + 1}.0\n" for i in range(30)))
    follower = _follow(log)
    deadline = time.monotonic() + 30
    first = follower.stdout.readline()  # the first update: it is following
    assert first.startswith("ailens: step 30"), first
    assert time.monotonic() < deadline
    follower.send_signal(signal.SIGINT)
    out, err = _finish(follower)
    assert follower.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_follow_writes_tensorboard_scalars(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    board = tmp_path / "tb"
    _follow_a_job(tmp_path / "steps.csv", 40, 0.04, "--total-steps", "40", "--tensorboard", board)
    acc = EventAccumulator(str(board))
    acc.Reload()
    tags = set(acc.Tags()["tensors"])  # tensorboard.summary.Writer's scalars are tensors
    assert {"ailens/forecast_total_s", "ailens/progress_bar_eta_s"} <= tags, tags

    def series(tag: str) -> dict[int, float]:
        return {e.step: float(make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)}

    total = series("ailens/forecast_total_s")
    assert len(total) >= 2 and max(total) == 40
    lows, highs = (
        series("ailens/forecast_interval_low_s"),
        series("ailens/forecast_interval_high_s"),
    )
    assert all(lows[k] <= v <= highs[k] for k, v in total.items())


def test_help_and_options_that_go_with_follow_only(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "ailens", "forecast", "--help"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    for flag in ("--follow", "--json-lines", "--tensorboard"):
        assert flag in out.stdout, flag
    log = tmp_path / "steps.csv"
    log.write_text("0,1\n1,2\n")
    out = subprocess.run(
        [sys.executable, "-m", "ailens", "forecast", str(log), "--json-lines"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 2 and "go with --follow" in out.stderr


def test_tensorboard_missing_is_a_one_line_error_naming_the_package(tmp_path):
    log = tmp_path / "steps.csv"
    log.write_text("0,1\n1,2\n2,3\n3,4\n4,5,end\n")
    code = (
        "import sys; sys.modules['tensorboard'] = None; from ailens.cli import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "forecast", str(log), "--follow", "--tensorboard",
         str(tmp_path / "tb")],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("ailens: error: ") and "tensorboard package" in line


def _growing(n: int = 400, seed: int = 5) -> Timeline:
    rng = np.random.default_rng(seed)
    t, ends, sections = 1.0, [], [Section("init", 0.0, 1.0)]
    for i in range(1, n + 1):
        t = round(t + rng.normal(0.2, 0.01), 4)
        ends.append(t)
        if i % 50 == 0:
            sections.append(Section("eval", t + 0.0001, round(t + 0.5, 4)))
            t = round(t + 0.5, 4)
    return Timeline(
        step_end_s=tuple(ends),
        sections=tuple(sections),
        schedule={"total_steps": n, "eval_every_steps": 50},
        end_s=round(t + 0.1, 4),
    )


def test_a_timeline_fed_in_pieces_gives_the_numbers_of_feeding_it_whole():
    tl = _growing()
    whole = forecast_timeline(tl)
    replay = TimelineReplay()
    for m in (7, 50, 51, 123, 250, 399):
        part = tl.head(m)
        assert replay.extends(part)
        replay.feed(part)
        got, want = replay.latest(), whole.at_step(m)
        assert got.predicted_total_s == want.predicted_total_s, m
        assert got.interval_s == want.interval_s and got.components == want.components
        assert got.progress_bar_total_s == want.progress_bar_total_s
        assert got.composer_total_s == want.composer_total_s
    replay.feed(tl)
    assert replay.latest().steps_done == whole.latest.steps_done == 400
    assert replay.oa.signature_step == whole.signature_step is not None
    assert replay.oa.actual_total_s == whole.actual_total_s
    # A log that changed what was read (a step rewritten) is not a continuation.
    fresh = TimelineReplay()
    fresh.feed(tl.head(100))
    moved = Timeline(step_end_s=(*tl.step_end_s[:99], tl.step_end_s[99] + 0.05))
    assert not fresh.extends(moved)
    with pytest.raises(ValueError, match="start a new replay"):
        fresh.feed(moved)


@pytest.mark.parallel
def test_follow_a_run_directory_that_real_ranks_write(tmp_path):
    """A run directory is followed through ``analyze``: its last update is the run's own
    latest forecast (forecast.json) once every rank closed."""
    from conftest import mpiexec

    run_dir = tmp_path / "run"
    follower = _follow(run_dir, "--json-lines")
    first = follower.stdout.readline()
    assert json.loads(first)["status"] == "waiting", first
    script = REPO / "tests/parallel/forecast_settings_mpi.py"
    job = subprocess.Popen(
        [mpiexec(), "-n", "2", sys.executable, str(script), str(run_dir), "300"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    out, err = _finish(follower, first=first)
    assert job.wait(timeout=60) == 0, job.stderr.read()
    assert follower.returncode == 0 and "Traceback" not in err, err
    last = json.loads(out.splitlines()[-1])
    online = json.loads((run_dir / "forecast.json").read_text())
    assert last["status"] == "finished" and last["steps"] == 300
    assert last["predicted_total_s"] == online["latest"]["predicted_total_s"]
    assert last["signature_step"] == online["signature_step"]
    assert last["actual_total_s"] == online["actual_total_s"]
