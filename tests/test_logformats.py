"""The log formats of ``ailens forecast LOG``: each read on a real public log of its format
(tests/data/logs/<format>/, provenance in the README beside each), detection by content, the
shared mechanisms (intervals of k steps, coarse clocks, restarts), and bad input."""

from __future__ import annotations

import calendar
import gzip
import json
import os
import random
import re
from pathlib import Path

import numpy as np
import pytest

import ailens
from ailens.analysis.logformats import FORMATS, detect_format, get_format, read_text
from ailens.cli import main as cli_main

LOGS = Path(__file__).parent / "data" / "logs"


def _stamp(text: str) -> float:
    """Seconds of a 'YYYY-mm-dd HH:MM:SS,mmm' timestamp read off a log by hand."""
    day, clock = text.split(" ")
    hms, _, ms = clock.partition(",")
    y, mo, d = (int(x) for x in day.split("-"))
    h, mi, s = (int(x) for x in hms.split(":"))
    return calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) + (int(ms) / 1000 if ms else 0.0)


# Not logs: the README beside each sample, and the files a reader looks up beside its log
# (Ultralytics' args.yaml). Logs of a format that cannot give a timeline (a trainer_state.json,
# a metrics.csv with no time column) are under <format>/refused/.
NOT_LOGS = {"README.md", "args.yaml"}


def _samples(refused: bool = False):
    for d in sorted(p for p in LOGS.iterdir() if p.is_dir()):
        where = d / "refused" if refused else d
        for f in sorted(where.iterdir()) if where.is_dir() else ():
            if f.is_file() and f.name not in NOT_LOGS:
                yield d.name, f


def _copy_as(path: Path, folder: Path, data: bytes) -> Path:
    """``data`` written as the sample ``path`` (uncompressed) into ``folder``, with the files
    its reader looks up beside it (Ultralytics' args.yaml)."""
    folder.mkdir()
    for beside in NOT_LOGS & {f.name for f in path.parent.iterdir()}:
        (folder / beside).write_bytes((path.parent / beside).read_bytes())
    p = folder / path.name.removesuffix(".gz")
    p.write_bytes(data)
    return p


def _assert_same_steps(got, want, label: str = "") -> None:
    """The same steps, their ends and the sections."""
    assert (got.steps, got.step_end_s, got.sections) == (
        want.steps,
        want.step_end_s,
        want.sections,
    ), label


def _assert_same_timeline(got, want, label: str = "") -> None:
    """The same timeline: steps, sections, schedule, total and end."""
    _assert_same_steps(got, want, label)
    assert got.schedule == want.schedule and got.total_steps == want.total_steps, label
    assert got.end_s == want.end_s, label


# --------------------------------------------------------------------------- the formats


def test_megatron_deepspeed_log():
    """Iterations every 10 to 470 of 171661, no timestamps on them: the step ends follow from
    the elapsed time per iteration."""
    tl = ailens.read_timeline(LOGS / "megatron" / "megatron_deepspeed_gpt3-0.125B.log.gz")
    assert tl.source == "megatron" and tl.unit == "iteration"
    assert tl.steps == 470 and tl.total_steps == 171661 and not tl.finished
    d = np.diff((0.0, *tl.step_end_s))
    # "iteration 10/ ... elapsed time per iteration (ms): 1001.5", "iteration 30/ ... 484.5"
    assert d[:10] == pytest.approx([1.0015] * 10)
    assert d[20:30] == pytest.approx([0.4845] * 10)
    # "validation loss at iteration 100", then "iteration 110 ... (ms): 802.8": the interval's
    # time beyond 10 iterations at the usual ~485 ms is the evaluation.
    evals = [s for s in tl.sections if s.name == "eval"]
    assert len(evals) == 4  # at iterations 100, 200, 300, 400
    assert evals[0].begin_s == pytest.approx(tl.step_end_s[99])
    assert 8.028 - 10 * 0.490 <= evals[0].end_s - evals[0].begin_s <= 8.028 - 10 * 0.480
    assert (README := LOGS / "megatron" / "README.md").exists() and "Licence" in README.read_text()


def test_megatron_elapsed_time_in_seconds():
    """BigScience's Megatron-DeepSpeed (BLOOM 176B) prints 'elapsed time per iteration (s):
    106.46': seconds, not milliseconds; a skipped stretch ('[...]') counts its iterations."""
    path = LOGS / "megatron" / "bigscience_tr11_176B_chronicles_loss_spike.log"
    assert detect_format(read_text(path)).name == "megatron"
    tl = ailens.read_timeline(path)
    # iterations 31214..31222 and 31250..31251 of 115311: 38 done after the log's first start
    assert tl.steps == 38 and tl.total_steps == 115311 - 31213 and not tl.finished
    d = np.diff((0.0, *tl.step_end_s))
    assert d[:3] == pytest.approx([106.46, 105.90, 106.40])  # iterations 31214-31216
    assert d[9:37] == pytest.approx([106.09] * 28)  # 31223..31250: the 31250 line's time
    assert tl.step_end_s[-1] == pytest.approx(
        sum((106.46, 105.90, 106.40, 106.33, 107.53, 106.36, 106.30, 106.13, 106.44))
        + 28 * 106.09
        + 106.13
    )


def test_deepspeed_chat_log():
    """[Rank 0] step=N lines every 10 steps with DeepSpeed's timestamps; the epochs' micro
    batches give the steps per epoch and the total; the run ended at the launcher's last
    line."""
    tl = ailens.read_timeline(LOGS / "deepspeed" / "deepspeed_chat_opt-1.3b_sft.log.gz")
    assert tl.source == "deepspeed"
    assert tl.steps == 7360 and tl.total_steps == 7360 and tl.steps_per_epoch == 460
    assert tl.finished
    d = np.diff(tl.step_end_s)
    step10, step20 = _stamp("2023-04-18 01:46:59,142"), _stamp("2023-04-18 01:47:06,590")
    assert d[10:19] == pytest.approx([(step20 - step10) / 10] * 9)
    # "***** Evaluating perplexity, Epoch 1/16 *****" between step=460 (01:52:34,866) and
    # step=470 (01:52:50,545): the interval's time beyond 10 steps is the evaluation.
    evals = [s for s in tl.sections if s.name == "eval"]
    assert len(evals) == 15  # between the 16 epochs
    gap = _stamp("2023-04-18 01:52:50,545") - _stamp("2023-04-18 01:52:34,866")
    assert evals[0].begin_s == pytest.approx(tl.step_end_s[459])
    assert gap - 10 * 0.76 <= evals[0].end_s - evals[0].begin_s <= gap - 10 * 0.74
    first = _stamp("2023-04-18 01:46:52,554")  # the log's first timestamp
    assert tl.end_s == pytest.approx(_stamp("2023-04-18 03:20:49,471") - first)
    assert tl.step_end_s[-1] == pytest.approx(_stamp("2023-04-18 03:20:25,116") - first)
    assert ailens.read_timeline(LOGS / "deepspeed" / "deepspeed_chat_opt-1.3b_sft.log.gz",
                                epochs=8).total_steps == 3680  # fmt: skip


def test_nanogpt_log():
    """iter N lines every 5 iterations from 0: each the time of its last iteration, the
    evaluation inside the iteration after it."""
    tl = ailens.read_timeline(LOGS / "nanogpt" / "train.log")
    assert tl.source == "nanogpt" and tl.steps == 451 and tl.total_steps is None
    assert tl.step_end_s[0] == pytest.approx(10.26808)  # iter 0: time 10268.08ms
    d = np.diff(tl.step_end_s)
    assert 1.431 <= np.median(d) <= 1.459  # the plain lines' times: 1431.27 to 1458.02 ms
    evals = [s for s in tl.sections if s.name == "eval"]
    assert len(evals) == 5  # step 0, 100, 200, 300, 400: train loss ..., val loss ...
    # iter 100: time 10538.35ms after the evaluation at 100: the eval is the extra
    assert 10.53835 - 1.459 <= evals[1].end_s - evals[1].begin_s <= 10.53835 - 1.431
    with pytest.raises(ailens.LogError, match="train.log.*--total-steps"):
        ailens.read_timeline(LOGS / "nanogpt" / "train.log", epochs=2)


def test_modded_nanogpt_log():
    """train_time is cumulative and restarts from 0 after step 10: the timeline continues."""
    tl = ailens.read_timeline(LOGS / "modded-nanogpt" / "011625_Sub3Min_c8cbdf48.txt")
    assert tl.source == "modded-nanogpt"
    assert tl.steps == tl.total_steps == 1385 and tl.finished
    ends = tl.step_end_s
    assert ends[0] == pytest.approx(17.555) and ends[9] == pytest.approx(19.300)
    assert ends[10] == pytest.approx(19.300 + 0.126)  # step:11/1385 train_time:126ms
    assert ends[-1] == pytest.approx(19.300 + 178.616)  # step:1385/1385 train_time:178616ms


def test_detectron2_log_txt():
    """Detectron2's log.txt: ``iter`` from 0 every 20 iterations, timestamps without a year;
    the checkpoint and the evaluation after iteration 999 end the iterations where they begin
    and hold the next ones until they end; the total and the schedule from the printed
    config."""
    d2 = LOGS / "detectron2"
    tl = ailens.read_timeline(d2 / "nyu_finetune_6gpu_first_eval.log")
    assert tl.source == "detectron2" and tl.unit == "iteration" and not tl.finished
    # SOLVER.MAX_ITER: 10000, CHECKPOINT_PERIOD: 1000, TEST.EVAL_PERIOD: 1000
    assert tl.steps == 1000 and tl.total_steps == 10000
    assert tl.schedule["eval_every_steps"] == tl.schedule["checkpoint_every_steps"] == 1000
    # the first line 01:15:45; "iter: 19" at 01:16:13; "Saving checkpoint ... model_0000999.pth"
    # at 01:27:20, the evaluation's last line and "iter: 999" at 01:30:17
    assert tl.step_end_s[19] == pytest.approx(28.0)
    assert tl.step_end_s[999] == pytest.approx(695.0)
    (ev,) = [s for s in tl.sections if s.name == "eval"]
    assert (ev.begin_s, ev.end_s) == pytest.approx((695.0, 872.0))

    tl = ailens.read_timeline(d2 / "nyu_faster_rcnn_6gpu_stopped_16k.log.gz")
    assert tl.steps == 16010 and tl.total_steps == 111000 and not tl.finished
    parts = [s for s in tl.sections if s.name in ("eval", "checkpoint")]
    assert len(parts) == 16  # after iterations 999, 1999, ..., 15999
    # "Total training time: 3:49:40 (0:47:23 on hooks)": the hooks are the checkpoints and
    # evaluations (and the iteration timer's own)
    assert sum(s.end_s - s.begin_s for s in parts) == pytest.approx(47 * 60 + 23, rel=0.01)
    assert (README := d2 / "README.md").exists() and "Licence" in README.read_text()


def test_fairseq_json_progress():
    """train_inner json lines: num_updates with the wall seconds since training began; the
    total from max_update, the end from 'done training in'."""
    tl = ailens.read_timeline(LOGS / "fairseq" / "fsdp_13B_1gpu_example_output.log")
    assert tl.source == "fairseq" and tl.steps == tl.total_steps == 10 and tl.finished
    assert tl.step_end_s == (105, 161, 294, 351, 403, 456, 515, 566, 620, 673)
    assert tl.end_s == 798.6


def test_fairseq_wall_stuck_at_zero_is_timed_by_the_timestamps():
    """fairseq 0.10 resumed from a checkpoint prints wall=0 on every line (read before as all
    its updates in 0 s): the lines' timestamps are the clock."""
    tl = ailens.read_timeline(LOGS / "fairseq" / "syngec_glat_resumed_wall0_head.log")
    start = _stamp("2023-06-13 17:29:37,000")  # the log's first line
    assert tl.source == "fairseq" and not tl.finished
    # num_updates=40100 at 17:31:08, 40200 at 17:31:54, the last 41900 at 17:47:08
    t1, t2 = (_stamp(f"2023-06-13 17:{x},000") - start for x in ("31:08", "31:54"))
    i = tl.step_end_s.index(pytest.approx(t1))
    assert tl.step_end_s[i + 100] == pytest.approx(t2)
    assert tl.step_end_s[-1] == pytest.approx(_stamp("2023-06-13 17:47:08,000") - start)
    # max_update=300000 (within one update: the first interval's estimated start)
    assert tl.total_steps - tl.steps == pytest.approx(300000 - 41900, abs=1)
    # each epoch's validation and checkpoint (17:32:38 to 17:32:53 after epoch 143)
    evals = [s for s in tl.sections if s.name == "eval"]
    assert len(evals) == 6 and evals[0].end_s - evals[0].begin_s == pytest.approx(15, abs=1)


def test_tensorflow_estimator_log():
    """TF1 Estimator: the LoggingTensorHook's 'loss = X, step = N (S sec)' every 100 steps,
    no clock: the intervals' seconds summed; its first line says step 0 (the global step
    before the step ran); the final checkpoint's steps after the last line at the last pace;
    the evaluate() after 'Loss for final step' is not the run's."""
    path = LOGS / "tensorflow" / "handson_ml_ch10_dnnclassifier.log"
    assert detect_format(read_text(path)).name == "tensorflow"
    tl = ailens.read_timeline(path)
    assert tl.source == "tensorflow" and tl.steps == tl.total_steps == 44000 and tl.finished
    # "step = 0", then "step = 100 (0.209 sec)": 101 steps done 0.209 s after the first
    assert tl.step_end_s[0] == 0.0 and tl.step_end_s[100] == pytest.approx(0.209)
    assert np.diff(tl.step_end_s[:101]) == pytest.approx([0.00209] * 100)
    # 439 intervals summing to 61.714 s to "step = 43900 (0.126 sec)", then 99 steps to
    # "Saving checkpoints for 44000" at that interval's pace
    assert tl.step_end_s[43900] == pytest.approx(61.714)
    assert tl.end_s == tl.step_end_s[-1] == pytest.approx(61.714 + 99 * 0.00126)
    assert not [s for s in tl.sections if s.name == "eval"]
    assert (
        README := LOGS / "tensorflow" / "README.md"
    ).exists() and "Licence" in README.read_text()


def test_tensorflow_absl_times_are_the_clock_and_a_checkpoint_a_section():
    """Each event printed twice, through tf.logging and absl: the absl copy's time is the
    clock; a resumed run's tail (from step 900029); a checkpoint saved inside an interval is a
    step reading of its own and a section; 'Loss for final step' ends the run."""
    tl = ailens.read_timeline(LOGS / "tensorflow" / "ascend_npu_estimator_resumed_tail.log")
    assert tl.info["steps_before_log"] == 900029 - 100  # its first interval began before it
    assert tl.steps == tl.total_steps == 900810 - 899929 and tl.finished

    def at(hms: str) -> float:  # absl times of 12/12, from the first interval's start
        h, m, s = (float(x) for x in hms.split(":"))
        return h * 3600 + m * 60 + s - (21 * 3600 + 59 * 60 + 5.964472 - 22.301)

    assert tl.step_end_s[99] == pytest.approx(22.301)  # step = 900029 (22.301 sec)
    assert tl.step_end_s[171] == pytest.approx(at("21:59:22.676009"))  # checkpoint 900101
    assert tl.step_end_s[299] == pytest.approx(at("22:00:23.045186"))  # step = 900229
    assert tl.step_end_s[-1] == pytest.approx(at("22:02:36.937217"))  # checkpoint 900810
    assert tl.end_s == pytest.approx(at("22:02:51.659879"))  # Loss for final step
    # 900101 -> 900129 took 33.0 s where 28 steps take ~6.3 s: the save (and the job's copy)
    (ckpt,) = tl.sections
    assert ckpt.name == "checkpoint" and ckpt.begin_s == pytest.approx(tl.step_end_s[171])
    assert 25.0 < ckpt.end_s - ckpt.begin_s < 28.0


_TF1_HOOKS = """
import tensorflow as tf
tf.compat.v1.disable_eager_execution()
tf.compat.v1.logging.set_verbosity(tf.compat.v1.logging.INFO)
step = tf.compat.v1.train.get_or_create_global_step()
x = tf.compat.v1.get_variable("x", initializer=3.0)
loss = tf.square(x)
train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step)
hooks = [tf.compat.v1.train.LoggingTensorHook({"loss": loss, "step": step}, every_n_iter=50),
         tf.compat.v1.train.StopAtStepHook(last_step=300)]
with tf.compat.v1.train.MonitoredTrainingSession(
        checkpoint_dir=CKPT, save_checkpoint_steps=100, hooks=hooks) as sess:
    while not sess.should_stop():
        sess.run(train)
"""


def test_tensorflow_logs_as_tensorflow_prints_them_today(tmp_path):
    """The hooks of today's TensorFlow (tf.compat.v1's MonitoredTrainingSession): what it
    prints reads as the steps it ran, each logged interval the seconds its line says."""
    pytest.importorskip("tensorflow")
    import subprocess
    import sys

    code = f"CKPT = {str(tmp_path / 'ckpt')!r}\n" + _TF1_HOOKS
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    log = tmp_path / "train.log"
    log.write_text(out.stderr + out.stdout)
    lines = re.findall(r"step = (\d+)(?: \(([0-9.]+) sec\))?$", log.read_text(), re.M)
    # "step = 0" .. "step = 250": the hook reads the global step in the step's own run, before
    # its increment (one behind the steps done) or, now and then, after it
    counters = [int(n) for n, _ in lines]
    assert len(counters) == 6 and all(0 <= c - 50 * i <= 1 for i, c in enumerate(counters))
    tl = ailens.read_timeline(log)
    assert tl.source == "tensorflow" and tl.steps == counters[-1] + 1
    ends = [tl.step_end_s[int(n)] for n, _ in lines]
    assert np.diff(ends) == pytest.approx([float(sec) for _, sec in lines[1:]], abs=1e-9)


def test_tensorflow_log_with_cpp_lines_whose_time_is_no_date(tmp_path):
    """TensorFlow's C++ logging before absl is initialised prints a glog prefix whose time is
    no date (``I0000 00:00:1796652008.249888``): not a clock reading, and no error."""
    path = LOGS / "tensorflow" / "handson_ml_ch10_dnnclassifier.log"
    cpp = (
        "I0000 00:00:1796652008.249888   18098 cudart_stub.cc:31] Could not find cuda drivers\n"
        "I0000 00:00:00.411288   18098 mlir_graph_optimization_pass.cc:437] MLIR V1 pass\n"
    )
    p = tmp_path / "with_cpp.log"
    p.write_text(cpp + path.read_text())
    _assert_same_steps(ailens.read_timeline(p), ailens.read_timeline(path))


def test_paddledetection_log():
    """PaddleDetection: '[MM/DD HH:MM:SS] ppdet.engine INFO: Epoch: [e] [i/N] ... eta: ...
    batch_cost: ...' every 20 steps; epochs and steps from 0; the total from the trainer's
    ETA (the steps left at its average step time) in whole epochs; the checkpoint and the
    evaluation after each epoch a section of the interval they fell in."""
    path = LOGS / "paddle" / "ppdet_yolov5_roadsign_aistudio.log"
    assert detect_format(read_text(path)).name == "paddle"
    tl = ailens.read_timeline(path)
    assert tl.source == "paddle" and not tl.finished
    assert tl.steps == 2 * 87 + 1 and tl.steps_per_epoch == 87  # the last: Epoch: [2] [ 0/87]
    assert tl.total_steps == 40 * 87  # eta 8:28:32 / batch_cost 8.7679 = 3,480 steps left
    # from the first line (10:17:41): [ 0/87] at 10:17:51, [20/87] at 10:19:42
    assert tl.step_end_s[0] == 10.0 and tl.step_end_s[20] == 121.0
    evals = [s for s in tl.sections if s.name == "eval"]
    assert len(evals) == 2
    # [80/87] at 10:25:13, then the checkpoint, the evaluation and [1] [ 0/87] at 10:26:35:
    # 82 s for 7 steps at ~5-6.3 s (the log's intervals) and the rest
    assert evals[0].begin_s == tl.step_end_s[80] == 452.0
    assert 82 - 7 * 6.3 <= evals[0].end_s - evals[0].begin_s <= 82 - 7 * 5.0
    assert "Licence: Apache-2.0" in (LOGS / "paddle" / "README.md").read_text()


def test_python_logging_lines_with_a_step_number():
    """maskrcnn-benchmark's logger: a timestamp, then 'iter: N' every 20 iterations."""
    tl = ailens.read_timeline(
        LOGS / "pylogging" / "mlperf_v0.6_nvidia_maskrcnn_python_logging.log.gz"
    )
    assert tl.source == "pylogging" and tl.steps == 31840 and tl.total_steps is None
    d = np.diff(tl.step_end_s)
    # iter: 20 at 01:59:27,037 and iter: 40 at 01:59:33,382
    per_step = (_stamp("2019-05-23 01:59:33,382") - _stamp("2019-05-23 01:59:27,037")) / 20
    assert d[20:39] == pytest.approx([per_step] * 19)
    # maskrcnn-benchmark evaluates asynchronously: "Start evaluation" is a section of its
    # interval, the results printed later while training goes on are not.
    assert sum(s.name == "eval" for s in tl.sections) == 1
    # From the log's first clock reading ("STARTING TIMING RUN AT 2019-05-23 01:58:44 AM") to
    # the first iterations' start is init; they ran at the next interval's pace.
    first = _stamp("2019-05-23 01:58:44")
    assert tl.step_end_s[19] == pytest.approx(_stamp("2019-05-23 01:59:27,037") - first)
    (init,) = [s for s in tl.sections if s.name == "init"]
    assert init.begin_s == 0 and init.end_s == pytest.approx(tl.step_end_s[19] - 20 * per_step)
    # --no-init: counted from the end of the init, as the progress bar counts.
    scored = ailens.read_timeline(
        LOGS / "pylogging" / "mlperf_v0.6_nvidia_maskrcnn_python_logging.log.gz",
        include_init=False,
    )
    assert not any(s.name == "init" for s in scored.sections)
    assert scored.step_end_s[19] == pytest.approx(tl.step_end_s[19] - init.end_s)


def test_python_logging_lines_with_an_epoch_counter_only():
    """No step number, 'Epoch [k/K]' on timestamped lines: one step per epoch, K the total; a
    line reporting values ends its epoch, a bare one begins it (read before as not a log)."""
    tl = ailens.read_timeline(LOGS / "pylogging" / "vqvae_epoch_reports_30epochs_readme.log")
    assert tl.source == "pylogging" and tl.steps == tl.total_steps == 30 and tl.finished
    # "Epoch [1/30], Train Loss: ..." at 01:02:35,345 is the log's first reading: epoch 1
    # ran at epoch 2's pace ("[2/30]" at 01:03:30,373), then "[3/30]" at 01:04:25,236 and,
    # after the README's "...", "[30/30]" at 01:28:53,271; the last line at 01:29:01,155.
    e1 = _stamp("2024-10-17 01:03:30,373") - _stamp("2024-10-17 01:02:35,345")
    ends = [tl.step_end_s[i] - e1 for i in (0, 1, 2, 29)]
    assert ends == pytest.approx([0.0, e1, 109.891, 1577.926])
    assert tl.end_s - e1 == pytest.approx(1585.81)

    tl = ailens.read_timeline(LOGS / "pylogging" / "siamese_epoch_begins_10epochs.log")
    assert tl.source == "pylogging" and tl.steps == tl.total_steps == 10 and tl.finished
    start = _stamp("2024-10-06 20:03:09,044")  # "Epoch 1/10"
    # "Epoch 2/10" at 20:37:13,226 ... "Epoch 10/10" at 01:23:38,372; "Training completed"
    assert tl.step_end_s[0] == pytest.approx(_stamp("2024-10-06 20:37:13,226") - start)
    assert tl.step_end_s[8] == pytest.approx(_stamp("2024-10-07 01:23:38,372") - start)
    assert tl.step_end_s[9] == pytest.approx(_stamp("2024-10-07 01:58:56,281") - start)
    assert tl.end_s == pytest.approx(_stamp("2024-10-07 02:06:25,191") - start)  # the test


def test_python_logging_per_epoch_counter_and_validation_lines(tmp_path):
    """A counter that starts over each epoch ('epoch 2 | iter 1/3') counts on; validation
    lines and every rank's copy of a line are not steps."""
    p = tmp_path / "dll.log"
    p.write_text(
        "DLL 2021-10-20 09:00:00.000000 - epoch 1 | iter 1/3 | loss 3.1 | took 1.0 s\n"
        "DLL 2021-10-20 09:00:01.000000 - epoch 1 | iter 2/3 | loss 3.0 | took 1.0 s\n"
        "DLL 2021-10-20 09:00:01.000000 - epoch 1 | iter 2/3 | loss 3.0 | took 1.0 s\n"
        "DLL 2021-10-20 09:00:02.000000 - epoch 1 | iter 3/3 | loss 2.9 | took 1.0 s\n"
        "DLL 2021-10-20 09:00:05.000000 - validation step 1 | wer 0.5\n"
        "DLL 2021-10-20 09:00:06.000000 - epoch 2 | iter 1/3 | loss 2.8 | took 1.0 s\n"
        "DLL 2021-10-20 09:00:07.000000 - epoch 2 | iter 2/3 | loss 2.7 | took 1.0 s\n"
    )
    tl = ailens.read_timeline(p)
    assert tl.source == "pylogging" and tl.steps == 5 and tl.steps_per_epoch == 3
    assert tl.step_end_s == pytest.approx([0.0, 1.0, 2.0, 6.0, 7.0][: tl.steps])


# --------------------------------------------------------------------------- detection

# A Megatron-DeepSpeed log also has DeepSpeed's step lines, and DeepSpeed's are timestamped
# logger lines with a step number; the registry's order reads each with its own format. (At
# most these: an excerpt of progress lines alone is taken by its own format only.)
ALSO_DETECTED = {
    "megatron": {"deepspeed", "pylogging"},
    "deepspeed": {"pylogging"},
    "torchtitan": {"pylogging"},
    "nemo": {"pylogging"},
    # tqdm bars are in these consoles too; the generic tqdm reader comes after them
    "hf-trainer": {"tqdm"},
    "pylogging": {"tqdm"},  # maskrcnn-benchmark's evaluation bars
    "yolo-console": {"tqdm"},
}


@pytest.mark.parametrize("fmt, path", list(_samples()), ids=lambda x: str(x))
def test_each_sample_is_detected_as_its_format(fmt, path):
    text = read_text(path)
    assert detect_format(text).name == fmt
    others = {f.name for f in FORMATS if f.name != fmt and f.detect(text)}
    assert others <= ALSO_DETECTED.get(fmt, set())
    # Forcing the format reads the same timeline.
    forced = ailens.read_timeline(path, fmt=fmt)
    assert forced.step_end_s == ailens.read_timeline(path).step_end_s


@pytest.mark.parametrize("fmt, path", list(_samples(refused=True)), ids=lambda x: str(x))
def test_refused_samples_are_detected_and_say_why(fmt, path):
    """A log of a known format that cannot give a timeline is detected as that format and
    refused in one line naming the file (not 'not a training log')."""
    assert detect_format(read_text(path)).name == fmt
    with pytest.raises(ailens.LogError) as e:
        ailens.read_timeline(path)
    assert path.name in str(e.value) and "\n" not in str(e.value)
    assert "not a training log" not in str(e.value)


def test_every_format_has_a_sample_and_an_example():
    names = [f.name for f in FORMATS]
    assert len(set(names)) == len(names)
    sampled = {fmt for fmt, _ in _samples()} | {fmt for fmt, _ in _samples(refused=True)}
    for f in FORMATS:
        assert f.title and f.example
        if f.name not in ("mlperf", "csv"):  # those two are tested in test_timeline.py
            assert f.name in sampled, f"{f.name}: no public sample under {LOGS}"
    with pytest.raises(ailens.LogError, match="unknown log format 'nope'; known: mlperf"):
        get_format("nope")


# --------------------------------------------------------------------------- mechanisms


def test_csv_step_column_counts_k_steps_per_row(tmp_path):
    """Rows written every 10 steps are 10 steps each, their ends spread over the interval."""
    p = tmp_path / "every10.csv"
    p.write_text("step,end_s\n10,5.0\n20,10.0\n30,16.0\n30,16.5,end\n")
    tl = ailens.read_timeline(p)
    assert tl.steps == 30 and tl.total_steps == 30 and tl.finished
    assert tl.step_end_s[:3] == pytest.approx([0.5, 1.0, 1.5])
    assert tl.step_end_s[20:] == pytest.approx([10.0 + 0.6 * i for i in range(1, 11)])
    # Counted from 0 (the first row is the first step): one step a row.
    p.write_text("0,1.0\n1,2.0\n2,3.0\n")
    assert ailens.read_timeline(p).step_end_s == (1.0, 2.0, 3.0)


def test_coarse_clock_spreads_equal_readings(tmp_path):
    """A clock in whole seconds gives several lines the same reading: their steps are spread
    between the readings, not 0 s steps."""
    p = tmp_path / "coarse.csv"
    p.write_text("1,1\n2,1\n3,1\n4,2\n5,2\n6,3\n")
    tl = ailens.read_timeline(p)
    assert tl.step_end_s == pytest.approx([1 / 3, 2 / 3, 1.0, 1.5, 2.0, 3.0])
    assert min(np.diff(tl.step_end_s)) > 0


def test_restart_is_one_timeline_with_the_lost_time(tmp_path):
    """The counter goes back (a run resumed from an older checkpoint): the steps redone are
    not counted twice, and the time from the last step before to when the counter passed it
    again is a "restart" section."""
    p = tmp_path / "restart.csv"
    p.write_text("1,1\n2,2\n3,3\n1,5\n2,6\n3,7\n4,8\n5,9\n")
    tl = ailens.read_timeline(p)
    assert tl.steps == 5 and tl.step_end_s == pytest.approx([1, 2, 3, 8, 9])
    (r,) = [s for s in tl.sections if s.name == "restart"]
    assert (r.begin_s, r.end_s) == pytest.approx((3.0, 7.0))
    assert tl.info["restarts"] == 1 and tl.info["restart_lost_s"] == pytest.approx(4.0)


def test_timestamps_slightly_out_of_order_are_not_a_clock_restart(tmp_path):
    """Ranks' lines interleave with clocks a moment apart: a timestamp a little before the
    previous line's is the same moment, not a clock that started over."""
    p = tmp_path / "ranks.log"
    p.write_text(
        "2024-01-01 12:00:00,000 - INFO - step 1 loss 3\n"
        "2024-01-01 12:00:01,000 - INFO - step 2 loss 3\n"
        "2024-01-01 12:00:00,990 - INFO - step 3 loss 3\n"
        "2024-01-01 12:00:03,000 - INFO - step 4 loss 3\n"
    )
    tl = ailens.read_timeline(p)
    assert tl.steps == 4 and tl.step_end_s[-1] == pytest.approx(3.0)


def test_modded_log_cut_before_its_clock_restart(tmp_path):
    """The same sample cut at step 10 (before train_time restarts) is the first 10 steps."""
    lines = (LOGS / "modded-nanogpt" / "011625_Sub3Min_c8cbdf48.txt").read_text().splitlines()
    cut = next(i for i, x in enumerate(lines) if x.startswith("step:11/"))
    p = tmp_path / "running.txt"
    p.write_text("\n".join(lines[:cut]) + "\n")
    tl = ailens.read_timeline(p)
    assert tl.steps == 10 and tl.total_steps == 1385 and not tl.finished


# --------------------------------------------------------------------------- bad input


def test_random_bytes_are_not_a_training_log(tmp_path):
    """Binary input gets the one-line LogError naming the file, never another exception."""
    rng = random.Random(31)
    for i in range(60):
        p = tmp_path / f"blob{i}.bin"
        p.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(200, 5000))))
        with pytest.raises(ailens.LogError) as e:
            ailens.read_timeline(p)
        assert f"blob{i}.bin" in str(e.value) and "\n" not in str(e.value)
    p = tmp_path / "urandom.log"
    p.write_bytes(os.urandom(100_000))
    with pytest.raises(ailens.LogError, match=r"urandom\.log: not a training log \(binary"):
        ailens.read_timeline(p)


@pytest.mark.parametrize("fmt, path", list(_samples()), ids=lambda x: str(x))
def test_truncated_samples_read_or_say_why(fmt, path, tmp_path):
    """A log cut anywhere (a job still running, a copy cut short) reads as its first part or
    gets a LogError naming the file; a cut gzip says so."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        cut_gz = tmp_path / path.name
        cut_gz.write_bytes(raw[: len(raw) // 2])
        with pytest.raises(ailens.LogError, match=f"{path.name}: a gzip file"):
            ailens.read_timeline(cut_gz)
        raw = gzip.decompress(raw)
    full = ailens.read_timeline(path)
    for frac in (0.02, 0.3, 0.7):
        p = tmp_path / f"cut_{frac}_{path.name.removesuffix('.gz')}"
        p.write_bytes(raw[: int(len(raw) * frac)])
        try:
            tl = ailens.read_timeline(p, fmt=fmt)
        except ailens.LogError as e:
            assert p.name in str(e)
            continue
        assert tl.steps <= full.steps
        assert tl.step_end_s == pytest.approx(full.step_end_s[: tl.steps], abs=5.0)


@pytest.mark.parametrize(
    "body, says",
    [
        ("1,nan\n2,3\n", r"bad\.csv:1: end_s nan is not a finite number"),
        ("1,1\n2,inf\n", r"bad\.csv:2: end_s inf is not a finite number"),
        ("1,-1\n2,3\n", r"bad\.csv:1: end_s -1 is before"),
        ("1,abc\n", r"bad\.csv:1: 'abc' is not a number"),
        ("1,1\n2,1e300\n", r"bad\.csv: its steps span 1e\+300 s"),
    ],
)
def test_csv_with_bad_times_says_which_row(tmp_path, body, says):
    p = tmp_path / "bad.csv"
    p.write_text(body)
    with pytest.raises(ailens.LogError, match=says):
        ailens.read_timeline(p)


def test_unknown_text_gets_one_line_with_what_it_looks_like(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("\n\nEpoch one went fine, loss went down a lot and then up\nmore text\n")
    with pytest.raises(ailens.LogError) as e:
        ailens.read_timeline(p)
    msg = str(e.value)
    assert "\n" not in msg and "notes.txt" in msg and "'Epoch one went fine" in msg
    assert all(f.name in msg for f in FORMATS) and "step,end_s" in msg


# --------------------------------------------------------------------------- the CLI


def test_cli_forecast_reads_the_logs_and_lists_the_formats(tmp_path, capsys):
    assert cli_main(["forecast", "--format", "list"]) == 0
    listed = capsys.readouterr().out
    assert all(f.name in listed for f in FORMATS)
    log = LOGS / "modded-nanogpt" / "011625_Sub3Min_c8cbdf48.txt"
    assert cli_main(["forecast", str(log), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["source"] == "modded-nanogpt" and doc["steps"] == doc["total_steps"] == 1385
    assert [round(r["steps_done"] / 1385, 2) for r in doc["at"]] == [0.05, 0.1, 0.2, 0.5]
    assert doc["init_s"] == 0.0
    # Forcing another format says what that format needs, naming the file.
    assert cli_main(["forecast", str(log), "--format", "megatron"]) == 2
    err = capsys.readouterr().err
    assert "011625_Sub3Min_c8cbdf48.txt: no Megatron" in err and "internal error" not in err
    assert cli_main(["forecast", str(log), "--format", "nope"]) == 2
    assert "unknown log format 'nope'" in capsys.readouterr().err
    blob = tmp_path / "weights.bin"
    blob.write_bytes(bytes(range(256)) * 40)
    assert cli_main(["forecast", str(blob)]) == 2
    err = capsys.readouterr().err
    assert "weights.bin: not a training log" in err and "internal error" not in err
    assert cli_main(["forecast"]) == 2
    assert "give the LOG" in capsys.readouterr().err


def test_cli_progress_bar_counts_from_the_first_step(tmp_path, capsys):
    """A log with 10 s of init before 100 steps of 1 s: the bar (tqdm, Keras) starts with the
    first step, so at step 50 it says 10 + 50 / 50 x 100 = 110 s, not 60 / 50 x 100."""
    p = tmp_path / "init.csv"
    rows = ["step,end_s,section,begin_s", "0,10.0,init,0.0"]
    rows += [f"{i},{10.0 + i:.1f}" for i in range(1, 101)] + ["100,110.0,end"]
    p.write_text("\n".join(rows) + "\n")
    assert cli_main(["forecast", str(p), "--at", "50%", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["init_s"] == 10.0
    (row,) = doc["at"]
    assert row["steps_done"] == 50 and row["progress_bar_total_s"] == pytest.approx(110.0)
    assert cli_main(["forecast", str(p), "--at", "50%"]) == 0
    assert "(from the first step, after 10.00s of init)" in capsys.readouterr().out


def test_cli_a_point_before_the_first_reading_has_spent_nothing(capsys):
    """A log whose first line comes at half the run (an interactive bar captured rarely): at
    5 % no step's end has been read, so nothing is spent yet (before, the run's last step end
    was shown as spent: "training steps 0 in 2m22.6s")."""
    log = LOGS / "hf-trainer" / "seq_label_nbbert_interactive.log"
    assert cli_main(["forecast", str(log), "--at", "5%"]) == 0
    out = capsys.readouterr().out
    assert "not yet (warming up)" in out and "spent" not in out.split("actual end")[0]


def test_logs_compressed_with_bzip2_or_xz_read_as_the_original(tmp_path):
    """A log kept as ``.bz2`` or ``.xz`` (archives, log rotation) reads as the plain one; a
    cut one says which compression failed."""
    import bz2
    import lzma

    path = LOGS / "megatron" / "megatron_deepspeed_gpt3-0.125B.log.gz"
    raw = gzip.decompress(path.read_bytes())
    want = ailens.read_timeline(path)
    for kind, data in (("bzip2", bz2.compress(raw)), ("xz", lzma.compress(raw))):
        p = tmp_path / f"log.{kind}"
        p.write_bytes(data)
        got = ailens.read_timeline(p)
        _assert_same_steps(got, want)
        p.write_bytes(data[: len(data) // 2])
        with pytest.raises(ailens.LogError, match=f"log.{kind}: a {kind} file that does not"):
            ailens.read_timeline(p)


@pytest.mark.parametrize("fmt, path", list(_samples()), ids=lambda x: str(x))
def test_samples_saved_on_windows_read_as_the_original(fmt, path, tmp_path):
    """A log saved by Windows PowerShell 5 (``python train.py > log``: UTF-16 with a
    byte-order mark, CRLF line ends) or by an editor as UTF-8 with a byte-order mark reads
    as the original: the same timeline."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
    want = ailens.read_timeline(path)
    name = path.name.removesuffix(".gz")
    for label, data in (
        ("utf16", text.replace("\n", "\r\n").encode("utf-16")),
        ("utf8bom", b"\xef\xbb\xbf" + text.encode("utf-8")),
    ):
        got = ailens.read_timeline(_copy_as(path, tmp_path / label, data))
        _assert_same_timeline(got, want, label)
    # Still being written: cut inside a character, it reads as its UTF-8 copy cut there.
    p = tmp_path / "utf16" / name
    written = p.read_bytes()
    cut = written[: len(written) // 2 | 1]
    p.write_bytes(cut)
    same = tmp_path / "utf8bom" / name
    same.write_text(cut.decode("utf-16", errors="ignore"), encoding="utf-8")
    try:
        want = ailens.read_timeline(same, fmt=fmt)
    except ailens.LogError:
        with pytest.raises(ailens.LogError, match=name):
            ailens.read_timeline(p, fmt=fmt)
    else:
        got = ailens.read_timeline(p, fmt=fmt)
        _assert_same_steps(got, want)


# A launcher's per-line prefix for rank r (Open MPI --tag-output, Horovod's Gloo launcher,
# torchrun --tee, srun --label padded to two digits, MPICH -prepend-rank; pdsh's host names,
# DeepSpeed's multi-node launcher).
LAUNCHER_TAGS = {
    "openmpi": "[1,{r}]<stdout>:",
    "gloo": "[{r}]<stdout>:",
    "torchrun": "[default{r}]:",
    "srun": "{r:2d}: ",
    "mpich": "[{r}] ",
    "pdsh": "worker-{r}: ",
    "pdsh_ip": "10.0.0.{r}: ",
}


@pytest.mark.parametrize("fmt, path", list(_samples()), ids=lambda x: str(x))
def test_samples_as_launchers_and_consoles_print_them_read_as_the_original(fmt, path, tmp_path):
    """A log as a multi-rank launch prints it: each line prefixed with its rank by the
    launcher, two ranks printing the same lines interleaved (rank 0's kept, once); with a
    terminal's colour codes around its lines; or with every line twice (a logger with two
    handlers on one stream), reads as the original: the same timeline."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    lines = raw.decode("utf-8", errors="replace").split("\n")
    want = ailens.read_timeline(path)
    variants = {
        f"{name}_two_ranks": "\n".join(tag.format(r=r) + ln for ln in lines for r in (0, 1))
        for name, tag in LAUNCHER_TAGS.items()
    }
    variants["doubled"] = "\n".join(ln for ln in lines for _ in (0, 1))
    variants["colour"] = "\n".join(
        f"\x1b[1;32m{ln[:12]}\x1b[0m{ln[12:]}\x1b[K" if ln else ln for ln in lines
    )
    for label, text in variants.items():
        got = ailens.read_timeline(_copy_as(path, tmp_path / label, text.encode("utf-8")))
        _assert_same_timeline(got, want, label)


def test_a_pipeline_runs_last_rank_printing_the_iterations_is_kept_beside_rank_0(tmp_path):
    """Megatron prints its arguments on rank 0 and its iteration lines on the last pipeline
    rank: under ``srun --label`` both are kept (the schedule from the first, the steps from
    the second), and the same iteration lines printed by a higher rank, its own loss in
    them, are left out."""
    import re

    path = LOGS / "megatron" / "megatron_deepspeed_gpt3-0.125B.log.gz"
    lines = gzip.decompress(path.read_bytes()).decode().split("\n")
    first = next(i for i, ln in enumerate(lines) if " iteration " in ln)
    want = ailens.read_timeline(path)
    out = [f" 0: {ln}" for ln in lines[:first]]
    own_loss = re.compile(r"(?<=lm loss: )[0-9.E+-]+")
    for ln in lines[first:]:
        out.append(f"15: {ln}")
        out.append("31: " + own_loss.sub("9.876543E+00", ln))
    p = tmp_path / "srun.log"
    p.write_text("\n".join(out), encoding="utf-8")
    got = ailens.read_timeline(p)
    assert want.schedule and got.schedule == want.schedule
    _assert_same_steps(got, want)


def test_a_launcher_prefix_or_a_repeat_on_few_lines_is_left_alone():
    """Lines that merely begin like a launcher's prefix (a log's own "[0] " or "12: ") on
    fewer than half the lines, or a line repeated now and then, are the log's text: nothing
    is removed."""
    from ailens.analysis.logformats._text import one_rank, without_repeats

    text = "epoch 1\n[0] warmup\n12: step one\nstep two\nstep three\n"
    assert one_rank(text) == text
    tagged = "launcher starting\n[1,0]<stdout>:a\n[1,1]<stdout>:a\n[1,1]<stdout>:b\n[1,0]<stdout>:b"
    assert one_rank(tagged) == "launcher starting\na\nb"
    # A rank printing its own lines is kept; one printing a lower rank's lines, its own
    # numbers in them, is not.
    assert one_rank(" 0: x\n 1: y\n 1: z\n") == "x\ny\nz\n"
    two = " 0: setup\n 0: step 1 loss 2.5\n 1: step 1 loss 2.7\n 0: step 2 loss 2.4\n"
    assert one_rank(two + " 1: step 2 loss 2.3\n") == "setup\nstep 1 loss 2.5\nstep 2 loss 2.4\n"
    # A log's own "word: " lines are not a host's prefix (a host name has a digit, dot or dash)
    text = "INFO: start\nloss: 2.5\nloss: 2.4\nnode-1 up\n"
    assert one_rank(text) == text
    text = "step 1\n----\n----\nstep 2\nstep 3\nstep 4\nstep 5\n"
    assert without_repeats(text) == text
    assert without_repeats("a\na\n\nb\nb\nc\n") == "a\n\nb\nc\n"


def test_the_logs_of_a_resubmitted_run_read_as_one_timeline(tmp_path):
    """A run resubmitted after a failure leaves one log per job: the second prints its
    preamble again and redoes the iterations since the last checkpoint. Given in order
    (``ailens forecast A B``, ``read_timeline([A, B])``), they make one timeline: every
    iteration once, the redone ones' time a "restart" section, the schedule of the run; a run
    directory among several logs is refused; ``--follow`` reads the earlier logs with the
    one being written."""
    path = LOGS / "megatron" / "megatron_deepspeed_gpt3-0.125B.log.gz"
    lines = gzip.decompress(path.read_bytes()).decode().split("\n")
    iters = [i for i, ln in enumerate(lines) if " iteration " in ln and "/" in ln]
    first, checkpoint, failed = iters[0], iters[14], iters[19]
    a, b = tmp_path / "slurm-1001.out", tmp_path / "slurm-1002.out"
    a.write_text("\n".join(lines[: failed + 1]), encoding="utf-8")
    b.write_text("\n".join(lines[:first] + lines[checkpoint + 1 :]), encoding="utf-8")
    whole = ailens.read_timeline(path)
    got = ailens.read_timeline([a, b])
    assert got.steps == whole.steps and got.schedule == whole.schedule
    (lost,) = [s for s in got.sections if s.name == "restart"]

    def iteration(i):
        return int(lines[i].split(" iteration ")[1].split("/")[0])

    ends = whole.step_end_s  # iteration n ends at ends[n - 1]
    redone = ends[iteration(failed) - 1] - ends[iteration(checkpoint) - 1]
    assert lost.end_s - lost.begin_s == pytest.approx(redone, rel=0.05)
    assert got.step_end_s[-1] == pytest.approx(whole.step_end_s[-1] + (lost.end_s - lost.begin_s))
    with pytest.raises(ailens.LogError, match="a run directory is read alone"):
        ailens.read_timeline([a, tmp_path])
    from ailens.cli.follow import _LogSource

    src = _LogSource(b, {}, earlier=(a,))
    u = src.read(lambda _: None)
    assert u.steps == whole.steps
    out = cli_main(["forecast", str(a), str(b)])
    assert out == 0


def test_a_hole_of_nul_bytes_a_failed_node_left_is_skipped(tmp_path):
    """A log on a network file system whose node failed mid-write holds a block of NUL bytes
    where the lost writes were; the text around it reads as the log without it. NULs
    scattered through the bytes are still binary data."""
    path = LOGS / "megatron" / "megatron_deepspeed_gpt3-0.125B.log.gz"
    raw = gzip.decompress(path.read_bytes())
    want = ailens.read_timeline(path)
    cut = raw.index(b"\n", 2000) + 1  # in the head the format is detected from
    for hole in (raw[:cut] + bytes(4096) + raw[cut:], raw + bytes(4096)):
        p = tmp_path / "hole.log"
        p.write_bytes(hole)
        got = ailens.read_timeline(p)
        _assert_same_steps(got, want)
    p.write_bytes(b"".join(raw[i : i + 50] + b"\x00" for i in range(0, 20000, 50)))
    with pytest.raises(ailens.LogError, match="binary data"):
        ailens.read_timeline(p)
