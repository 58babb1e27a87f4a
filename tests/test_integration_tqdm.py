"""The ailens forecast in a plain loop's tqdm bar (ailens.integrations.tqdm), and that importing
ailens or its integrations package loads no framework and no tqdm."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time

import pytest
from ailens.integrations.tqdm import forecast_numbers, forecast_postfix, format_duration

import ailens


def run_steps(lens, steps: int) -> None:
    for _ in range(steps):
        lens.collective_begin("allreduce", 4096)
        lens.collective_end()
        lens.step_end()


def test_format_duration_reads_like_tqdm():
    assert format_duration(0.0000412) == "41.2us"
    assert format_duration(0.0412) == "41.2ms"
    assert format_duration(3.25) == "3.2s"
    assert format_duration(59.6) == "1:00"
    assert format_duration(723) == "12:03"
    assert format_duration(3 * 3600 + 5 * 60 + 7) == "3:05:07"


def test_postfix_is_empty_before_the_forecast_then_eta_with_interval(tmp_path):
    with ailens.lens(run_dir=tmp_path, total_steps=1000) as lens:
        assert forecast_postfix(lens) == {} and forecast_numbers(lens) == {}
        run_steps(lens, 30)
        forecast = lens.forecast
        post = forecast_postfix(lens)
        assert re.fullmatch(r"\S+±\S+", post["ailens_eta"]), post
        assert post["ailens_eta"].startswith(format_duration(forecast.eta_s))
        numbers = forecast_numbers(lens)
        assert numbers["ailens_eta_s"] == pytest.approx(forecast.eta_s, rel=0.01)
        lo, hi = forecast.interval_s
        assert numbers["ailens_eta_pm_s"] == pytest.approx((hi - lo) / 2, rel=0.01)
        # A LiveForecast, or an object holding the Lens, give the same.
        assert forecast_postfix(forecast) == forecast_postfix(type("H", (), {"lens": lens})())


def test_without_total_steps_the_postfix_shows_the_step_time(tmp_path):
    with ailens.lens(run_dir=tmp_path) as lens:
        run_steps(lens, 30)
        assert lens.forecast.eta_s is None
        assert set(forecast_postfix(lens)) == {"ailens_step"}
        assert forecast_numbers(lens) == {}
        # Issue 30, 9: with the steps per epoch (what len(loader) says), the running epoch's
        # end beside the step time.
        lens.set_schedule(steps_per_epoch=20)
        run_steps(lens, 5)
        post = forecast_postfix(lens)
        assert set(post) == {"ailens_step", "ailens_epoch"}
        assert post["ailens_epoch"].startswith("2:")


def test_a_real_tqdm_bar_shows_the_forecast_beside_the_users_postfix(tmp_path):
    tqdm = pytest.importorskip("tqdm").tqdm
    out = io.StringIO()
    steps = 60
    with ailens.lens(run_dir=tmp_path, total_steps=steps) as lens:
        bar = tqdm(total=steps, file=out, mininterval=0)
        for _ in range(steps):
            time.sleep(0.004)  # the step's work: the live forecast refreshes every 1 s
            run_steps(lens, 1)
            bar.update()
            bar.set_postfix(loss="0.125", **forecast_postfix(lens), refresh=False)
        bar.close()
    last = out.getvalue().rsplit("\r", 1)[-1]
    assert f"{steps}/{steps}" in last and "loss=0.125" in last and "ailens_eta=" in last, last
    assert out.getvalue().count("\n") <= 1  # one bar, redrawn in place


def test_importing_ailens_and_the_tqdm_helper_loads_no_framework():
    code = (
        "import sys, ailens, ailens.integrations, ailens.integrations.tqdm\n"
        "names = ('torch', 'lightning', 'pytorch_lightning', 'transformers', 'accelerate',"
        " 'tqdm', 'tensorflow', 'keras')\n"
        "print(','.join(m for m in names if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
