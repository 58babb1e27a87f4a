"""The public timeline API: readers (MLPerf logs of several rounds, CSV, run directory), the
forecast of a timeline against a live Lens fed the same timeline, the Composer baseline and
the ``ailens forecast`` command."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import ailens
from ailens import Section, Timeline, forecast_timeline, read_timeline
from ailens.cli import main as cli_main
from ailens.model.baselines import composer_total_s

REPO = Path(__file__).resolve().parents[1]
MLPERF = REPO / "benchmarks" / "forecast_corpus" / "mlperf"


class Clock:
    """The Lens's injected clock (ns): set by the test, never by the wall."""

    def __init__(self) -> None:
        self.now = 5 * 10**9

    def __call__(self) -> int:
        return self.now


class WorkCounter:
    kind, unit, fallback_reason = "cpu-ns", "ns", None

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def read(self) -> int:
        return self.clock.now

    def close(self) -> None:
        pass


def _timeline(n: int = 120, seed: int = 3) -> Timeline:
    """Steps of ~1 s (ms resolution, so ns are exact), an init section, an evaluation after
    every 25 steps (the first one slower), a checkpoint after step 60."""
    rng = np.random.default_rng(seed)
    t = 2.0  # init
    ends, sections = [], [Section("init", 0.0, 2.0)]
    for i in range(1, n + 1):
        t = round(t + rng.normal(1.0, 0.03), 3)
        ends.append(t)
        if i % 25 == 0:
            d = 4.0 if i == 25 else 2.5
            sections.append(Section("eval", t + 0.001, round(t + 0.001 + d, 3)))
            t = round(t + 0.001 + d, 3)
        if i == 60:
            sections.append(Section("checkpoint", t + 0.002, round(t + 0.502, 3)))
            t = round(t + 0.502, 3)
    return Timeline(
        step_end_s=tuple(ends),
        sections=tuple(sections),
        schedule={"total_steps": n, "eval_every_steps": 25},
        end_s=round(t + 0.25, 3),
        name="synthetic",
    )


def _ns(s: float) -> int:
    return round(s * 1e9)


def test_timeline_forecast_equals_live_lens(tmp_path):
    """A real Lens driven by a clock that follows the timeline gives the same forecast at
    every step, the same signature and the same final forecast as forecast_timeline."""
    tl = _timeline()
    clock = Clock()
    t0 = clock.now
    lens = ailens.Lens(
        run_dir=tmp_path / "run", clock=clock, work_counter=WorkCounter(clock), framework="test"
    )
    lens.set_schedule(total_steps=120, eval_every_steps=25)
    pending = list(tl.sections)
    live = []

    def run_sections_until(t_s: float) -> None:
        while pending and pending[0].end_s <= t_s:
            s = pending.pop(0)
            clock.now = t0 + _ns(s.begin_s)
            lens.section_begin(s.name)
            clock.now = t0 + _ns(s.end_s)
            lens.section_end()

    for t in tl.step_end_s:
        run_sections_until(t)
        clock.now = t0 + _ns(t)
        lens.step_end()
        live.append(lens.online.predict())
    run_sections_until(tl.end_s)
    clock.now = t0 + _ns(tl.end_s)
    lens.close()

    got = forecast_timeline(tl)
    assert len(got.steps) == len(live) == 120
    for ours, theirs in zip(got.steps, live, strict=True):
        assert ours.steps_done == theirs.steps_done
        assert ours.elapsed_s == theirs.elapsed_s
        assert ours.predicted_total_s == theirs.predicted_total_s
        assert ours.interval_s == theirs.interval_s
        assert ours.step_time_s == theirs.step_time_s
        assert ours.components == theirs.components
    assert got.signature_step == lens.online.signature_step
    assert got.signature_step is not None
    assert got.actual_total_s == pytest.approx(tl.end_s)
    online = json.loads((tmp_path / "run" / "forecast.json").read_text())
    mine = got.forecast.to_dict()
    for key in ("predicted_total_s", "interval_s", "signature_step", "history", "components"):
        assert mine[key] == online[key], key
    # Parts are there: evaluations seen, the checkpoint spent once.
    names = {c.name for c in got.at_step(70).components}
    assert "section eval" in names and "section checkpoint" in names


def test_baselines_beside_every_step():
    tl = _timeline()
    got = forecast_timeline(tl)
    s = got.at_step(30)  # after the first evaluation (4 s) at step 25
    # The progress bar counts from the first step, as tqdm and Keras do: the 2 s of init are
    # added as they were, not extrapolated with the steps.
    assert tl.init_s == 2.0
    assert s.progress_bar_total_s == pytest.approx(2.0 + (s.elapsed_s - 2.0) * 120 / 30)
    # Composer (skip_batches=1): the clock starts at the first step's end, so the init and the
    # first step are out; the rate leaves the evaluation out; one call seen after 25 steps, i.e.
    # 24 of the 119 steps the clock covers: 119 / 24 calls in all, 119 / 24 - 1 still to come.
    rate = (s.elapsed_s - tl.step_end_s[0] - 4.0) / 29
    assert s.composer_total_s == pytest.approx(
        s.elapsed_s + rate * 90 + 4.0 * (119 / 24 - 1), rel=1e-9
    )
    assert got.at_step(1).composer_total_s is None  # Composer logs nothing before step 2


def test_composer_hand_computed():
    """Composer's RuntimeEstimator (composer/callbacks/runtime_estimator.py, skip_batches=1) on
    a hand-computed case: 100 s elapsed at 40 of 200 steps, the clock started at 4 s (the first
    step's end); evaluations of 12 s (cold), 6 s and 8 s ending after steps 10, 20 and 30, one
    other kind of 3 s after step 30, and one evaluation before the clock started (ignored)."""
    evals = {"eval": [(0, 50.0), (10, 12.0), (20, 6.0), (30, 8.0)], "val2": [(30, 3.0)]}
    total = composer_total_s(100.0, 40, 200, evals, clock_start_s=4.0)
    # fractions: start 1/200 = 0.005, now 0.2, last calls at 0.15 -> 0.145 since the start
    # training: (100 - 4 - 29) / (0.2 - 0.005) x (1 - 0.2) = 274.871794... s
    # eval: mean of [6, 8] = 7 s x (3 / 0.145 x 0.995 - 3 = 17.586206...) = 123.103448... s
    # val2: its one call 3 s x (1 / 0.145 x 0.995 - 1 = 5.862068...) = 17.586206... s
    assert total == pytest.approx(100 + 274.871794872 + 123.103448276 + 17.586206897, rel=1e-9)
    assert composer_total_s(10.0, 0, 100, clock_start_s=0.0) is None
    assert composer_total_s(10.0, 1, 100, clock_start_s=9.0) is None  # before step 2
    assert composer_total_s(10.0, 5, None, clock_start_s=1.0) is None
    # 5 of 10 steps, clock from 2 s: (10 - 2) / 0.4 x 0.5 = 10 s to go
    assert composer_total_s(10.0, 5, 10, clock_start_s=2.0) == pytest.approx(20.0)
    # a kind whose only call ended at the clock's start has no frequency yet: adds nothing
    only = composer_total_s(10.0, 5, 10, {"eval": [(1, 1.0)]}, clock_start_s=2.0)
    assert only == pytest.approx(10.0 + (10 - 2 - 1) / 0.4 * 0.5)


# --------------------------------------------------------------------------- MLPerf readers


@pytest.mark.parametrize(
    "rel, unit, evals",
    [
        ("v0.6/Google/tpu-v3-32/mask/result_0.txt.gz", "block", True),  # :::MLL, blocks
        (
            "v0.6/NVIDIA/dgx1_ngc19.05_pytorch/maskrcnn/result_0.txt.gz",
            "logged step (+20 iterations, the job's own progress lines)",
            True,
        ),
        ("v1.1/Fujitsu/gx_A100x4_pytorch_NGC_21.09/bert/result_0.txt.gz", "eval interval", False),
        ("v2.1/GIGABYTE/G492-ZD2_mxnet/unet3d/result_0.txt.gz", "block", True),
        ("v3.0/ASUSTeK/ESC4000-E11-4xA100-PCIE-80GB/resnet/result_0.txt.gz", "epoch", True),
        ("v3.0/Intel-HabanaLabs/HLS-Gaudi2-N32-PT/gpt3/result_0.txt.gz", "eval interval", True),
    ],
)
def test_mlperf_logs_of_several_rounds(rel, unit, evals):
    path = MLPERF / rel
    tl = read_timeline(path)
    assert tl.source == "mlperf" and tl.unit == unit
    assert tl.finished and tl.total_steps == tl.steps >= 3
    assert tl.end_s >= tl.step_end_s[-1] > 0
    assert any(s.name == "init" for s in tl.sections)  # the origin is init_start
    assert any(s.name == "eval" for s in tl.sections) == evals
    # Without init, the origin is run_start: the run is shorter by the initialisation.
    scored = read_timeline(path, include_init=False)
    init = next(s for s in tl.sections if s.name == "init")
    assert scored.end_s < tl.end_s
    assert tl.end_s - scored.end_s >= init.end_s - 1e-6
    r = forecast_timeline(scored)
    assert r.actual_total_s == pytest.approx(scored.end_s)
    assert r.at_fraction(0.5).progress_bar_total_s is not None


def test_mlperf_per_iteration_progress():
    """Regular per-iteration tracked_stats (every 50 iterations) are the steps where the log
    has them; evaluations every epoch, not a whole number of those steps, are listed."""
    tl = read_timeline(
        MLPERF / "v3.0/ASUSTeK/ESC4000-E11-4xA100-PCIE-80GB/maskrcnn/result_0.txt.gz"
    )
    assert tl.unit.startswith("logged step") and tl.steps == tl.total_steps == 551
    evals = [s for s in tl.sections if s.name == "eval"]
    at = tl.schedule["eval_at_steps"]
    assert len(at) == len(evals) and len(set(np.diff(at).tolist())) > 1
    assert tl.steps_per_epoch == pytest.approx(551 / 15)
    # Each step is about the same time (50 iterations), unlike the epochs it replaces.
    d = np.diff(tl.step_end_s)
    assert np.median(d) < 0.1 * (tl.end_s / 15)


def test_mlperf_framework_progress_lines():
    """A log whose MLPerf lines give only epochs, with the job's own logger printing every 20
    iterations (maskrcnn-benchmark, a local timestamp): those lines are the steps, placed on
    the MLPerf clock."""
    path = MLPERF / "v0.6/NVIDIA/dgx1_ngc19.05_pytorch/maskrcnn/result_0.txt.gz"
    text = gzip.decompress(path.read_bytes()).decode()
    iters = [
        x for x in text.splitlines() if "maskrcnn_benchmark.trainer INFO:" in x and "iter:" in x
    ]
    tl = read_timeline(path)
    assert tl.unit.startswith("logged step (+20 iterations")
    assert tl.steps == tl.total_steps == len(iters) == 1592
    assert tl.steps_per_epoch == pytest.approx(1592 / 13)  # 13 epoch_stop events
    # 'iter: 20' at 01:59:27,037, 'iter: 40' at 01:59:33,382 (the logger's own clock)
    assert tl.step_end_s[1] - tl.step_end_s[0] == pytest.approx(6.345, abs=1e-3)
    assert tl.end_s - tl.step_end_s[-1] < 30


def test_mlperf_v05_lines(tmp_path):
    """The v0.5 style (``:::MLPv0.5.0 bench time (file:line) key: value``): epochs from the
    successive train_epoch events, evaluations, run_final as the end."""
    lines = [":::MLPv0.5.0 resnet 1000.000 (main.py:10) run_start"]
    t = 1000.0
    for epoch in range(6):
        lines.append(f":::MLPv0.5.0 resnet {t:.3f} (main.py:20) train_epoch: {epoch}")
        t += 10.0
        lines.append(f":::MLPv0.5.0 resnet {t:.3f} (main.py:30) eval_start: {epoch}")
        t += 2.0
        lines.append(f":::MLPv0.5.0 resnet {t:.3f} (main.py:40) eval_stop: {epoch}")
    lines.append(f":::MLPv0.5.0 resnet {t + 0.5:.3f} (main.py:50) run_final")
    p = tmp_path / "v05.log"
    p.write_text("\n".join("[0] " + x for x in lines) + "\n")
    tl = read_timeline(p)
    assert tl.unit == "epoch" and tl.steps == 6 and tl.finished
    assert tl.step_end_s[0] == pytest.approx(12.0) and tl.end_s == pytest.approx(72.5)
    assert [round(s.end_s - s.begin_s, 3) for s in tl.sections] == [2.0] * 6


def test_mlperf_v06_submitter_lines():
    """A v0.6 submitter's own form ('MLPerf: resnet [06/13/19 00:30:58], train_epoch:0': the
    v0.5 keys, to the second) reads as the v0.5 lines do."""
    path = REPO / "tests" / "data" / "mlperf_v0.6_alibaba_sinian_resnet_result_1.txt.gz"
    tl = read_timeline(path)
    assert tl.source == "mlperf" and tl.unit == "epoch"
    assert tl.steps == tl.total_steps == 80 and tl.finished  # train_epoch:0 .. train_epoch:79
    # run_start 00:30:56, train_epoch:0 00:30:58 (start-up), train_epoch:1 00:31:23,
    # run_stop 00:55:21
    assert tl.step_end_s[0] == 27.0 and tl.end_s == 24 * 60 + 25
    evals = [s for s in tl.sections if s.name == "eval"]
    assert len(evals) == 20 and (evals[0].begin_s, evals[0].end_s) == (81.0, 83.0)


def test_mlperf_epochs_give_the_total(tmp_path):
    """A log cut mid-run (no run_stop) has no total until --epochs or --total-steps say it;
    the epochs convert with the steps per epoch read from the log."""
    src = MLPERF / "v3.0/ASUSTeK/ESC4000-E11-4xA100-PCIE-80GB/resnet/result_0.txt.gz"
    lines = gzip.decompress(src.read_bytes()).decode().splitlines()
    cut = next(
        i for i, line in enumerate(lines) if '"epoch_stop"' in line and '"epoch_num": 10' in line
    )
    part = tmp_path / "running.log"
    part.write_text("\n".join(lines[: cut + 1]) + "\n")
    tl = read_timeline(part)
    assert tl.total_steps is None and not tl.finished and tl.steps_per_epoch == 1.0
    assert read_timeline(part, epochs=37).total_steps == 37
    assert read_timeline(part, total_steps=40).total_steps == 40
    r = forecast_timeline(read_timeline(part, epochs=37))
    assert r.latest.predicted_total_s is not None and r.actual_total_s is None


def test_mlperf_blocks_convert_epochs():
    tl = read_timeline(MLPERF / "v2.1/GIGABYTE/G492-ZD2_mxnet/unet3d/result_0.txt.gz")
    assert tl.unit == "block" and tl.steps_per_epoch == pytest.approx(1 / 20)
    assert tl.with_total(epochs=4000).total_steps == 200


def test_not_a_log_names_the_file_and_the_fix(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello world\nthis is not a log\n")
    with pytest.raises(ailens.LogError, match=r"notes\.txt.*step,end_s.*MLPerf"):
        read_timeline(bad)
    cut = tmp_path / "cut.log"
    cut.write_text(':::MLLOG {"time_ms": 1, "key": "init_start", "value": null}\n')
    with pytest.raises(ailens.LogError, match=r"cut\.log: no run_start"):
        read_timeline(cut)
    with pytest.raises(ailens.LogError, match="no such file"):
        read_timeline(tmp_path / "missing.log")


# --------------------------------------------------------------------------- CSV, run dir


def test_csv_steps_sections_end(tmp_path):
    p = tmp_path / "run.csv"
    rows = ["step,end_s,section"]
    t = 0.0
    for i in range(40):
        t += 0.5
        rows.append(f"{i},{t:.3f},")
        if i % 10 == 9:
            t += 1.0
            rows.append(f"{i},{t:.3f},eval")
    rows.append(f"40,{t + 0.1:.3f},end")
    p.write_text("\n".join(rows) + "\n")
    tl = read_timeline(p)
    assert tl.steps == 40 and tl.finished and tl.total_steps == 40
    evals = [s for s in tl.sections if s.name == "eval"]
    assert len(evals) == 4 and evals[0].begin_s == pytest.approx(5.0)
    assert evals[0].end_s == pytest.approx(6.0)
    gz = tmp_path / "run.csv.gz"
    gz.write_bytes(gzip.compress(p.read_bytes()))
    assert read_timeline(gz).step_end_s == tl.step_end_s
    p.write_text("0,1.0\n1,0.5\n")
    with pytest.raises(ailens.LogError, match=r"run\.csv:2: .*time order"):
        read_timeline(p)
    p.write_text("0,abc\n")
    with pytest.raises(ailens.LogError, match=r"run\.csv:1: 'abc' is not a number"):
        read_timeline(p)


def test_run_dir_reader_matches_the_recording(tmp_path):
    clock = Clock()
    t0 = clock.now
    with ailens.Lens(
        run_dir=tmp_path / "run", clock=clock, work_counter=WorkCounter(clock), framework="test"
    ) as lens:
        lens.set_schedule(total_steps=30, eval_every_steps=10)
        for i in range(30):
            clock.now += 10**9
            lens.step_end()
            if i % 10 == 9:
                with lens.section("eval"):
                    clock.now += 2 * 10**9
        clock.now += 10**8
    tl = read_timeline(tmp_path / "run")
    assert tl.source == "ailens" and tl.steps == 30 and tl.finished
    assert tl.schedule == {"total_steps": 30, "eval_every_steps": 10}
    assert [s.name for s in tl.sections] == ["eval"] * 3
    assert tl.step_end_s[0] == pytest.approx(1.0) and tl.end_s == pytest.approx(36.1)
    assert clock.now - t0 == _ns(36.1)
    r = forecast_timeline(tl)
    assert r.actual_total_s == pytest.approx(36.1)


def test_timeline_rejects_bad_input():
    with pytest.raises(ValueError, match="non-decreasing"):
        Timeline(step_end_s=(1.0, 0.5))
    with pytest.raises(ValueError, match="begin_s <= end_s"):
        Timeline(step_end_s=(1.0,), sections=(Section("eval", 2.0, 1.0),))
    with pytest.raises(ValueError, match="unknown schedule keys"):
        Timeline(step_end_s=(1.0,), schedule={"total_step": 3})


# --------------------------------------------------------------------------- CLI


def test_cli_forecast_mlperf_text_and_json(capsys):
    log = MLPERF / "v3.0/ASUSTeK/ESC4000-E11-4xA100-PCIE-80GB/resnet/result_0.txt.gz"
    assert cli_main(["forecast", str(log), "--at", "10%,50%"]) == 0
    out = capsys.readouterr().out
    for word in ("forecast end", "progress bar", "Composer", "training steps", "section eval"):
        assert word in out, word
    assert cli_main(["forecast", str(log), "--at", "10%", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "mlperf" and doc["unit"] == "epoch"
    (row,) = doc["at"]
    assert row["steps_done"] == 3 and row["composer_total_s"] is not None
    assert doc["actual_total_s"] == pytest.approx(read_timeline(log).end_s)


def test_cli_forecast_errors(tmp_path, capsys):
    bad = tmp_path / "x.csv"
    bad.write_text("0,zzz\n")
    assert cli_main(["forecast", str(bad)]) == 2
    assert "x.csv:1" in capsys.readouterr().err
    good = tmp_path / "y.csv"
    good.write_text("0,1\n1,2\n2,3\n")
    with pytest.raises(SystemExit):
        cli_main(["forecast", str(good), "--at", "150%"])


def test_cli_forecast_running_csv_and_run_dir(tmp_path, capsys):
    """A running job's CSV: the forecast now, once --total-steps says how long the run is;
    an ailens run directory reads the same way."""
    p = tmp_path / "steps.csv"
    p.write_text("".join(f"{i},{0.5 * (i + 1):.3f}\n" for i in range(60)))
    assert cli_main(["forecast", str(p)]) == 0
    out = capsys.readouterr().out
    assert "total unknown" in out and "now (step 60, 30.00s elapsed)" in out
    assert cli_main(["forecast", str(p), "--total-steps", "120", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["at"]
    assert row["steps_done"] == 60
    assert row["predicted_total_s"] == pytest.approx(60.0, rel=0.01)
    assert row["progress_bar_total_s"] == pytest.approx(60.0)
    assert cli_main(["forecast", str(p), "--at", "10%"]) == 2
    assert "--total-steps" in capsys.readouterr().err

    clock = Clock()
    with ailens.Lens(
        run_dir=tmp_path / "run", clock=clock, work_counter=WorkCounter(clock), framework="test"
    ) as lens:
        for _ in range(40):
            clock.now += 10**9
            lens.step_end()
    assert cli_main(["forecast", str(tmp_path / "run"), "--at", "50%"]) == 0
    out = capsys.readouterr().out
    assert "ailens run" in out and "at 50% (step 20/40" in out and "actual end" in out
