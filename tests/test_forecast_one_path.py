"""One path for a run directory: ``ailens forecast RUN_DIR`` goes through ``analyze`` (the
run's own settings and recorded exchanges), so its forecast is the one ``ailens report`` and
the run's forecast.json give, on real 1- and 2-rank runs recorded with settings that are not
the defaults; and the schedule's keys are spelled once (``Schedule``)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, mpiexec, run_ranks

import ailens
from ailens.model.timeline import SCHEDULE_KEYS
from ailens.record.schedule import Schedule

# The Forecast fields the three must agree on.
KEYS = (
    "predicted_total_s",
    "interval_s",
    "signature_step",
    "signature_fraction",
    "made_at_step",
    "basis",
    "actual_total_s",
    "total_steps",
    "history",
    "components",
    "naive_total_s",
    "job_offset_s",
)


def cli(*args) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "ailens", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=os.environ,
    )
    assert out.returncode == 0, out.stderr
    return out


@pytest.mark.parallel
@pytest.mark.parametrize("ranks", [1, 2])
def test_forecast_of_a_run_dir_is_the_report_and_forecast_json(tmp_path, ranks):
    run_dir = tmp_path / "run"
    script = REPO / "tests/parallel/forecast_settings_mpi.py"
    out = run_ranks(
        [mpiexec(), "-n", str(ranks), sys.executable, str(script), str(run_dir), "120"],
        timeout=90,
    )
    assert out.returncode == 0, out.stderr
    run = ailens.load_run(run_dir)
    assert run.world_size == ranks and run.complete
    assert run.meta["config"]["exchange_seconds"] == 0.05  # not the default (1.0)
    online = json.loads((run_dir / "forecast.json").read_text())
    assert online["final"] and online["signature_step"] is not None
    forecast = json.loads(cli("forecast", run_dir, "--json").stdout)["forecast"]
    report = json.loads(cli("report", run_dir, "--json", "--no-record").stdout)["forecast"]
    for key in KEYS:
        assert forecast[key] == online[key] == report[key], key
    # The text shows the report's own forecast section, line for line.
    text = cli("forecast", run_dir).stdout
    rep = cli("report", run_dir, "--no-record").stdout
    section = rep[rep.index("\nForecast\n") + 1 :].split("\n\n")[0]
    assert section.count("\n") >= 5 and section in text
    assert f"signature  step {online['signature_step']} " in text


def test_the_schedule_keys_are_spelled_once(tmp_path):
    """Lens.set_schedule's keywords, the recorded mark, the forecast's schedule and a
    timeline's keys are Schedule's fields."""
    fields = tuple(f.name for f in dataclasses.fields(Schedule))
    assert SCHEDULE_KEYS == fields
    params = inspect.signature(ailens.Lens.set_schedule).parameters
    assert tuple(params)[1:] == fields
    with ailens.Lens(run_dir=tmp_path / "run", framework="test") as lens:
        said = dict(
            total_steps=40, steps_per_epoch=10, epochs=4, eval_every_epochs=0.5,
            eval_every_steps=None, eval_steps=3, checkpoint_every_steps=20, eval_start_step=0,
            eval_start_epoch=1.5, eval_at_steps=[7, 3], eval_at_epochs=[2.5],
            eval_samples=640, samples_per_step=32, checkpoint_bytes=10**9,
        )  # fmt: skip
        assert set(said) == set(fields)
        lens.set_schedule(**said)
        with pytest.raises(TypeError, match="total_step; known: total_steps"):
            lens.set_schedule(total_step=3)
        for _ in range(5):
            lens.step_end()
        sched = lens.online.forecaster.schedule
    assert sched == Schedule.of(**said)
    (mark,) = [
        m for m in ailens.load_run(tmp_path / "run").ranks[0].marks if m["kind"] == "schedule"
    ]
    assert Schedule().merged(mark) == sched
    assert ailens.read_timeline(tmp_path / "run").schedule == {**sched.to_dict()}
