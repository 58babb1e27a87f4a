"""The framework log formats (Hugging Face Trainer, LLaMA-Factory, MetricLogger, Keras,
Ultralytics, Lightning's metrics.csv, timm, mmengine) on real public logs committed under
tests/data/logs/<format>/ (source and licence in each README). The expected numbers are read
from the logs by hand (quoted beside each assertion), not produced by the readers."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from ailens.analysis.logformats import FORMATS, LogError, detect_format, read_log, read_text
from ailens.analysis.logformats._base import HEAD_BYTES

DATA = Path(__file__).parent / "data" / "logs"


def _only_claimed_by(path: Path, name: str) -> str:
    """The sample is detected as ``name`` and no other registered format claims it (but the
    generic tqdm reader, last in the order, which takes any log with tqdm bars)."""
    text = read_text(path)
    claimed = [f.name for f in FORMATS if f.detect(text[:HEAD_BYTES]) and f.name != "tqdm"]
    assert claimed == [name], claimed
    assert detect_format(text).name == name
    return text


def hms(h: int, m: int, s: float) -> float:
    return h * 3600 + m * 60 + s


# --------------------------------------------------------------------------- LLaMA-Factory


def test_llamafactory_trainer_log_jsonl():
    path = DATA / "llamafactory" / "trainer_log.jsonl"
    _only_claimed_by(path, "llamafactory")
    tl = read_log(path)
    # {"current_steps": 8660, "total_steps": 8660, ... "epoch": 4.0, "elapsed_time": "5:39:46"}
    assert tl.steps == 8660 and tl.total_steps == 8660
    assert tl.steps_per_epoch == pytest.approx(8660 / 4.0)
    assert tl.finished and tl.end_s == pytest.approx(hms(5, 39, 46))
    # {"current_steps": 10, ... "elapsed_time": "0:00:24"}: logged every 10 steps
    assert tl.step_end_s[9] == pytest.approx(24.0)
    assert tl.step_end_s[4] == pytest.approx(12.0)  # spread evenly inside the interval
    # {"current_steps": 2500, ... "elapsed_time": "1:37:53"}
    assert tl.step_end_s[2499] == pytest.approx(hms(1, 37, 53))


def test_llamafactory_evaluation_records_are_eval_sections():
    path = DATA / "llamafactory" / "evaluations" / "trainer_log.jsonl"
    _only_claimed_by(path, "llamafactory")
    tl = read_log(path)
    # {"current_steps": 6750, "total_steps": 6750, ... "epoch": 3.0, "elapsed_time": "6:48:06"}
    assert tl.steps == 6750 and tl.total_steps == 6750 and tl.steps_per_epoch == 2250
    assert tl.finished and tl.end_s == pytest.approx(hms(6, 48, 6))
    # {"current_steps": 500, "loss": 1.8535, ... "elapsed_time": "0:25:47"} then
    # {"current_steps": 500, "eval_loss": 1.641..., ... "elapsed_time": "0:29:27"}
    evals = [s for s in tl.sections if s.name == "eval"]
    assert [t for s in evals for t in (s.begin_s, s.end_s)] == pytest.approx(
        [hms(0, 25, 47), hms(0, 29, 27), hms(0, 55, 16), hms(0, 58, 54)], abs=1e-3
    )
    assert tl.step_end_s[499] == pytest.approx(hms(0, 25, 47))
    # {"current_steps": 510, ... "elapsed_time": "0:30:00"}: its 10 steps after the evaluation
    assert tl.step_end_s[509] == pytest.approx(hms(0, 30, 0))
    assert tl.step_end_s[504] == pytest.approx(hms(0, 29, 27) + 33 / 2, abs=1e-3)


def test_llamafactory_null_keys_are_not_evaluations():
    # an older LLaMA-Factory writes "eval_loss": null on every training record
    path = DATA / "llamafactory" / "nulls" / "trainer_log.jsonl"
    _only_claimed_by(path, "llamafactory")
    tl = read_log(path)
    assert not tl.sections
    # {"current_steps": 8712, "total_steps": 8712, "loss": null, ... "4 days, 7:19:52"}
    assert tl.steps == 8712 and tl.finished
    assert tl.end_s == pytest.approx(4 * 86400 + hms(7, 19, 52))
    assert tl.step_end_s[4] == pytest.approx(hms(0, 3, 29))  # "current_steps": 5, "0:03:29"


# --------------------------------------------------------------------------- HF Trainer


def test_hf_trainer_console_bar_dicts_and_evaluations():
    path = DATA / "hf-trainer" / "seq_label_nbbert_interactive.log"
    _only_claimed_by(path, "hf-trainer")
    tl = read_log(path)
    # " 50%|...| 268/536 [01:10<01:00,  4.45it/s" ... "536/536 [02:38<00:00,  3.38it/s]"
    assert tl.steps == 536 and tl.total_steps == 536
    assert tl.step_end_s[267] == pytest.approx(70.0)
    assert tl.step_end_s[437] == pytest.approx(123.0)  # "438/536 [02:03<00:24,  3.97it/s]"
    assert tl.step_end_s[535] == pytest.approx(148.0)  # "536/536 [02:28<00:00,  4.55it/s"
    # {'loss': 0.08, ..., 'epoch': 1.0} redrawn at 268/536
    assert tl.steps_per_epoch == pytest.approx(268.0)
    # {'eval_loss': ..., 'eval_runtime': 5.4015, ...} after 268 and 5.3206 after 536; the
    # log_history list printed at the end (dicts with 'step') adds none
    evals = [s for s in tl.sections if s.name == "eval"]
    assert [round(s.begin_s, 4) for s in evals] == [70.0, 148.0]
    assert [round(s.end_s - s.begin_s, 4) for s in evals] == [5.4015, 5.3206]
    # {'train_runtime': 158.4339, ...}
    assert tl.finished and tl.end_s == pytest.approx(158.4339)


def test_hf_trainer_console_without_its_bar_says_where_the_bar_went():
    path = DATA / "hf-trainer" / "refused" / "slurm_10917672_no_bar.out"
    _only_claimed_by(path, "hf-trainer")
    with pytest.raises(LogError, match=r"slurm_10917672_no_bar\.out: .*progress bar.*2>&1"):
        read_log(path)


def test_hf_trainer_state_is_refused_with_what_to_give_instead():
    path = DATA / "hf-trainer-state" / "refused" / "trainer_state.json"
    _only_claimed_by(path, "hf-trainer-state")
    with pytest.raises(LogError) as e:
        read_log(path)
    msg = str(e.value)
    assert str(path) in msg and "no times" in msg and "trainer_log.jsonl" in msg
    assert "max_steps 8660" in msg  # "max_steps": 8660


# --------------------------------------------------------------------------- MetricLogger


def test_metriclogger_deit_epochs_tests_and_training_time():
    path = DATA / "metriclogger" / "deit_vim_8gpu_2epochs.log"
    _only_claimed_by(path, "metriclogger")
    tl = read_log(path)
    # "Epoch: [0]  [   0/1251]", "Start training for 2 epochs"
    assert tl.steps_per_epoch == 1251
    assert tl.steps == 2 * 1251 and tl.total_steps == 2 * 1251
    # "Epoch: [0] Total time: 1:07:10 (3.2217 s / it)"
    epoch0 = 1251 * 3.2217
    assert tl.step_end_s[1250] == pytest.approx(epoch0)
    assert abs(epoch0 - hms(1, 7, 10)) < 1.0
    # "Test: Total time: 0:05:19 (22.7948 s / it)" over "Test:  [13/14]"
    evals = [s for s in tl.sections if s.name == "eval"]
    assert len(evals) == 2
    assert evals[0].begin_s == pytest.approx(epoch0)
    assert evals[0].end_s - evals[0].begin_s == pytest.approx(14 * 22.7948)
    # "Epoch: [1] Total time: 1:08:54 (3.3050 s / it)" begins when the test ends
    assert tl.step_end_s[2501] == pytest.approx(evals[0].end_s + 1251 * 3.3050)
    assert evals[1].end_s - evals[1].begin_s == pytest.approx(14 * 26.7514)
    # "Training time 2:28:59"
    assert tl.finished and tl.end_s == pytest.approx(hms(2, 28, 59))
    # Inside epoch 0 the 10-iteration intervals follow the printed pace ("time: 3.2104"
    # at 600), not the slow first iterations ("time: 14.1278" at 0).
    pace = (tl.step_end_s[610] - tl.step_end_s[600]) / 10
    first = tl.step_end_s[0]
    assert pace < first and pace == pytest.approx(3.2171, rel=0.05)


# --------------------------------------------------------------------------- Keras


def test_keras2_console_epochs_from_the_final_bar_lines():
    path = DATA / "keras" / "mnist_convnet_keras2.log"
    _only_claimed_by(path, "keras")
    tl = read_log(path)
    # "Epoch 1/15" ... 11 finished epochs of "422/422"; epoch 12 stops at "237/422 ... ETA: 7s"
    assert tl.steps_per_epoch == 422
    assert tl.steps == 11 * 422 and tl.total_steps == 15 * 422
    assert not tl.finished and tl.end_s is None
    # "422/422 [====] - 13s 29ms/step": 13 s (> 422 x 29 ms)
    assert tl.step_end_s[421] == pytest.approx(13.0)
    # "- 13s 31ms/step": 422 x 31 ms = 13.08 s is longer than the rounded 13 s
    assert tl.step_end_s[843] - tl.step_end_s[421] == pytest.approx(422 * 0.031)
    # epoch 7 "- 17s 41ms/step" -> 17.302 s
    assert tl.step_end_s[7 * 422 - 1] - tl.step_end_s[6 * 422 - 1] == pytest.approx(422 * 0.041)


def test_keras3_console_skips_in_epoch_redraws_and_times_evaluate():
    path = DATA / "keras" / "float8_transformer_keras3.log"
    _only_claimed_by(path, "keras")
    tl = read_log(path)
    # "Epoch 3/3", "625/625 ━━━ 5s 5ms/step", "2s 923us/step", "1s 890us/step"
    assert tl.steps == 3 * 625 and tl.total_steps == 3 * 625
    assert [tl.step_end_s[i] for i in (624, 1249, 1874)] == pytest.approx([5.0, 7.0, 8.0])
    # "  56/625 ━━━  11s 20ms/step" is the time left, not elapsed: epoch 1 still ends at 5 s
    # "782/782 ━━━ 1s 491us/step" after the last epoch: evaluate()
    evals = [s for s in tl.sections if s.name == "eval"]
    assert [(s.begin_s, s.end_s) for s in evals] == [(8.0, 9.0)]
    assert tl.finished and tl.end_s == pytest.approx(9.0)


def test_keras1_verbose2_epoch_lines_and_several_fits():
    path = DATA / "keras" / "kanji_keras1_verbose2_four_fits.log"
    _only_claimed_by(path, "keras")
    tl = read_log(path)
    # "Epoch 1/50" then "224s - loss: 3.5508 - ...": no N/N, a step is an epoch
    assert tl.unit == "epoch" and tl.steps_per_epoch == 1
    assert tl.step_end_s[0] == pytest.approx(224.0) and tl.step_end_s[1] == pytest.approx(447.0)
    # fit 1 stops after 19 epochs ("Epoch 00018: early stopping"; 4278 s, its seconds summed);
    # fit 2's "Epoch 1/50" ... "225s" follows it, it stops after 14 ("Epoch 00013")
    assert tl.step_end_s[18] == pytest.approx(4278.0)
    assert tl.step_end_s[19] == pytest.approx(4278.0 + 225.0)
    assert tl.step_end_s[32] == pytest.approx(7427.0)
    # then "Epoch 1/19" ... "Epoch 19/19" and "Epoch 1/14" ... "Epoch 14/14": 19+14+19+14
    assert tl.steps == 66 and tl.total_steps == 66
    assert tl.finished and tl.end_s == pytest.approx(16396.0)  # every epoch's seconds


# --------------------------------------------------------------------------- Ultralytics


def test_yolo_results_csv_time_column_and_args_yaml_epochs():
    path = DATA / "yolo-results" / "results.csv"
    _only_claimed_by(path, "yolo-results")
    tl = read_log(path)
    assert tl.unit == "epoch" and tl.steps == 20  # rows "1,93.2846,..." to "20,623.782,..."
    assert tl.total_steps == 50  # args.yaml "epochs: 50"
    assert tl.step_end_s[0] == pytest.approx(93.2846)
    assert tl.step_end_s[9] == pytest.approx(343.598)  # "10,343.598,..."
    assert tl.step_end_s[19] == pytest.approx(623.782)
    assert not tl.finished


# --------------------------------------------------------------------------- Lightning


def test_lightning_metrics_csv_with_a_logged_epoch_time():
    path = DATA / "lightning-csv" / "metrics.csv"
    _only_claimed_by(path, "lightning-csv")
    tl = read_log(path)
    # "0,2517.10107421875,14073,..." ... "9,2419.625244140625,140739,...": step counts from 0
    assert tl.steps == 140740 and tl.steps_per_epoch == 14074
    assert tl.step_end_s[14073] == pytest.approx(2517.10107421875)
    # "1,2414.659423828125,28147,...": a duration per epoch, summed
    assert tl.step_end_s[28147] == pytest.approx(2517.10107421875 + 2414.659423828125)
    assert tl.info["time column"] == "epoch_time"


def test_lightning_metrics_csv_without_time_says_it_cannot_give_times():
    path = DATA / "lightning-csv" / "refused" / "metrics_no_time.csv"
    _only_claimed_by(path, "lightning-csv")
    with pytest.raises(LogError, match=r"no_time\.csv: .*cannot give times.*no time column"):
        read_log(path)


# --------------------------------------------------------------------------- mmengine


def test_mmengine_epoch_log_with_checkpoint_and_validation():
    path = DATA / "mmengine" / "15_minutes_cifar10_resnet50.log"
    _only_claimed_by(path, "mmengine")
    tl = read_log(path)
    # "2022/08/22 15:51:54 - ... Checkpoints will be saved": the log's start;
    # "15:51:56 ... Epoch(train) [1][10/1563] ... time: 0.1414" begins the steps 10 x 0.1414 s
    # before; "[1][30/1563]" is the last line stamped 15:51:56, "[1][70/1563]" 15:51:58
    assert tl.steps_per_epoch == 1563
    assert tl.step_end_s[29] == pytest.approx(2.0)
    assert tl.step_end_s[69] == pytest.approx(4.0)
    init = [s for s in tl.sections if s.name == "init"]
    assert init and init[0].end_s == pytest.approx(2.0 - 10 * 0.1414)
    # "15:52:50 ... Saving checkpoint at 1 epochs": the epoch's 1563 iterations ended
    assert tl.steps == 1563 and tl.step_end_s[-1] == pytest.approx(56.0)
    # "Epoch(val) [1][10/313]" at 15:52:51 ... "[1][313/313]" at 15:52:54
    evals = [s for s in tl.sections if s.name == "eval"]
    assert [(s.begin_s, s.end_s) for s in evals] == [(56.0, 60.0)]


def test_mmcv1_runner_epochs_checkpoints_and_validations():
    """MMCV 1.x (MMClassification 0.x): 'Epoch [e][i/N]' lines with Python logging's
    timestamps, one 'Epoch(val) [e][n]' line when a validation has ended (after its progress
    bar, on the same console line); max_epochs from the printed config."""
    path = DATA / "mmengine" / "mmcls_0x_colab_tools_2epochs.log"
    _only_claimed_by(path, "mmengine")
    tl = read_log(path)
    assert tl.source == "mmengine" and tl.steps_per_epoch == 201
    assert tl.steps == tl.total_steps == 402 and tl.finished

    def at(stamp: str) -> float:  # seconds after "Environment info:", the log's first line
        t0 = datetime.strptime("2021-10-21 02:48:20,030", "%Y-%m-%d %H:%M:%S,%f")
        return (datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f") - t0).total_seconds()

    # "Epoch [1][10/201] ... time: 0.533" at 02:48:44,261: the steps before it at 0.533 s
    assert tl.step_end_s[9] == pytest.approx(at("2021-10-21 02:48:44,261"))
    assert tl.step_end_s[0] == pytest.approx(at("2021-10-21 02:48:44,261") - 9 * 0.533)
    # "Saving checkpoint at 1 epochs": the epoch's 201 iterations ended; "Epoch(val) [1][51]"
    # at 02:49:44,587: the validation ran since the checkpoint line
    assert tl.step_end_s[200] == pytest.approx(at("2021-10-21 02:49:35,247"))
    evals = [x for s in tl.sections if s.name == "eval" for x in (s.begin_s, s.end_s)]
    assert evals == pytest.approx(
        [at("2021-10-21 02:49:35,247"), at("2021-10-21 02:49:44,587")]
        + [at("2021-10-21 02:50:40,443"), at("2021-10-21 02:50:49,905")]
    )
    # epoch 2's first ten steps from the validation's end to "Epoch [2][10/201]"
    assert tl.step_end_s[210] == pytest.approx(at("2021-10-21 02:49:49,625"))
    assert tl.step_end_s[201] - evals[1] == pytest.approx(
        (at("2021-10-21 02:49:49,625") - evals[1]) / 10, abs=1e-5
    )
    # the run ended with its last validation, the log's last line
    assert tl.end_s == pytest.approx(at("2021-10-21 02:50:49,905"))


def test_mmengine_timestamps_without_the_year():
    path = DATA / "mmengine" / "deepspeed_flexible_runner_2gpu.log"
    _only_claimed_by(path, "mmengine")
    tl = read_log(path)
    # "07/03 13:04:17 ... [1][ 10/196] ... time: 0.4073" ... "07/03 13:04:53 ... [1][190/196]"
    assert tl.steps == 190 and tl.steps_per_epoch == 196
    assert tl.step_end_s[189] - tl.step_end_s[9] == pytest.approx(36.0)
    assert tl.step_end_s[9] == pytest.approx(10 * 0.4073)


# --------------------------------------------------------------------------- timm


def test_timm_train_and_test_lines():
    path = DATA / "timm" / "imagenette_resnet50_hpu_2epochs.log"
    _only_claimed_by(path, "timm")
    tl = read_log(path)
    # "Train: 0 [   0/73 (  1%)] ... Time: 9.575s, ... (9.575s, ...)"
    assert tl.steps_per_epoch == 73 and tl.steps == 2 * 73
    assert tl.step_end_s[0] == pytest.approx(9.575)
    # "Train: 0 [  50/73 ( 70%)] ... (0.470s, ...)": 51 batches at 0.470 s on average
    assert tl.step_end_s[50] == pytest.approx(51 * 0.470)
    epoch0 = 73 * 0.470
    assert tl.step_end_s[72] == pytest.approx(epoch0)
    # "Test: [  30/30]  Time: 3.856 (0.732)": 31 batches at 0.732 s
    evals = [s for s in tl.sections if s.name == "eval"]
    assert evals[0].begin_s == pytest.approx(epoch0)
    assert evals[0].end_s == pytest.approx(epoch0 + 31 * 0.732)
    # "Train: 1 [  50/73 ( 70%)] ... (0.148s, ...)" after the test
    assert tl.step_end_s[145] == pytest.approx(evals[0].end_s + 73 * 0.148)
    assert evals[1].end_s - evals[1].begin_s == pytest.approx(31 * 0.126)


# --------------------------------------------------------------------------- Keras CSVLogger


def test_keras_csvlogger_without_time_says_it_cannot_give_times():
    path = DATA / "keras-csv" / "refused" / "training_log.csv"
    _only_claimed_by(path, "keras-csv")
    # "epoch,accuracy,loss,val_accuracy,val_loss": no time column
    with pytest.raises(LogError, match=r"training_log\.csv: .*cannot give times.*console"):
        read_log(path)


def test_metriclogger_variant_validate_and_epochs_from_one():
    path = DATA / "metriclogger" / "food101_ddp_2gpu_20epochs.log"
    _only_claimed_by(path, "metriclogger")
    tl = read_log(path)
    # "Namespace(... epochs=20 ...)", "Epoch: [1] [  0/295]" ... "Epoch: [20] Total time"
    assert tl.steps_per_epoch == 295
    assert tl.steps == 20 * 295 and tl.total_steps == 20 * 295
    # "Epoch: [1] Total time: 0:01:06", then "Validate: Total time: 0:00:19"
    assert tl.step_end_s[294] == pytest.approx(66.0)
    evals = [s for s in tl.sections if s.name == "eval"]
    assert len(evals) == 20
    assert (evals[0].begin_s, evals[0].end_s) == pytest.approx((66.0, 85.0))
    # "Epoch: [2] Total time: 0:01:00" begins when the validation ends
    assert tl.step_end_s[589] == pytest.approx(85.0 + 60.0)
    # the last "Validate: Total time: 0:00:18" ends the run
    assert tl.finished and tl.end_s == pytest.approx(evals[-1].end_s)
    assert tl.end_s - tl.step_end_s[-1] == pytest.approx(18.0)


def test_mmengine_validation_between_epochs():
    path = DATA / "mmengine" / "debug_tricks_val_between_epochs.log"
    _only_claimed_by(path, "mmengine")
    tl = read_log(path)
    # "20:27:22 ... Epoch(train) [1][5/5]", "Saving checkpoint at 1 epochs" at 20:27:22,
    # "Epoch(val) [1][5/5]" at 20:27:23, "Epoch(train) [2][5/5]" at 20:27:23, ... val at :24
    assert tl.steps == 10 and tl.steps_per_epoch == 5
    evals = [s for s in tl.sections if s.name == "eval"]
    assert [(s.begin_s, s.end_s) for s in evals] == [(0.0, 1.0), (1.0, 2.0)]
    assert tl.step_end_s[4] == pytest.approx(0.0) and tl.step_end_s[9] == pytest.approx(1.0)


def test_hf_trainer_steps_after_an_evaluation_begin_when_it_ends():
    tl = read_log(DATA / "hf-trainer" / "seq_label_nbbert_interactive.log")
    # 268/536 at 01:10, then {'eval_runtime': 5.4015}: step 269 ends after 75.4015 s
    assert tl.step_end_s[268] > 70.0 + 5.4015
    assert tl.step_end_s[437] == pytest.approx(123.0)  # "438/536 [02:03" is still read


def test_keras_log_cut_after_its_first_epoch_begins_at_zero(tmp_path):
    """fit()'s first epoch begins the run: a log with one finished epoch is its N steps."""
    lines = (DATA / "keras" / "mnist_convnet_keras2.log").read_text().splitlines(keepends=True)
    p = tmp_path / "first_epoch.log"
    p.write_text("".join(lines[:2]))  # "Epoch 1/15", "422/422 [====] - 13s 29ms/step ..."
    tl = read_log(p)
    assert tl.steps == 422 and tl.step_end_s[-1] == pytest.approx(13.0)
    assert tl.step_end_s[0] == pytest.approx(13.0 / 422)


def test_hf_trainer_steps_per_epoch_while_running(tmp_path):
    """Read before the end (no train_runtime yet): the epoch of {'loss': 0.08, 'epoch': 1.0} at
    268/536, not the evaluation's dict paired with the next reading (436/536)."""
    text = (DATA / "hf-trainer" / "seq_label_nbbert_interactive.log").read_text()
    p = tmp_path / "running.log"
    p.write_text(text[: text.index("438/536")])  # up to the " 82%|... 43" redraws
    tl = read_log(p)
    assert tl.steps == 436 and tl.steps_per_epoch == pytest.approx(268.0)
    assert not tl.finished


def test_timm_log_that_starts_at_a_later_epoch(tmp_path):
    """The sample from its epoch 1 on (as a run resumed at epoch 1 prints it): its steps are
    that epoch's 73 batches, not 146 counted from epoch 0."""
    lines = (DATA / "timm" / "imagenette_resnet50_hpu_2epochs.log").read_text().splitlines()
    p = tmp_path / "resumed.log"
    p.write_text("\n".join(lines[lines.index("") + 1 :]) + "\n")  # from "Train: 1 [   0/73"
    tl = read_log(p)
    # "Train: 1 [   0/73 (  1%)] ... (0.796s, ...)", "Train: 1 [  50/73 ( 70%)] ... (0.148s"
    assert tl.steps == 73
    assert tl.step_end_s[0] == pytest.approx(0.796)
    assert tl.step_end_s[50] == pytest.approx(51 * 0.148)


# --------------------------------------------------------------------------- torchtitan


def test_torchtitan_metrics_lines_total_and_init():
    path = DATA / "torchtitan" / "blendcorpus_llama2_aurora_24xpu.log"
    assert detect_format(read_text(path)).name == "torchtitan"
    tl = read_log(path)
    # "total steps 1000 (warmup 2)"; "step: 105" is the last line before "^C"
    assert tl.source == "torchtitan" and tl.steps == 105 and tl.total_steps == 1000
    assert not tl.finished
    first = hms(14, 8, 53.284)  # "[2025-09-11 14:08:53,284] [INFO] [real_accelerator.py..."
    assert tl.step_end_s[0] == pytest.approx(hms(14, 9, 46.954794) - first)  # "step:  1"
    assert tl.step_end_s[1] == pytest.approx(hms(14, 9, 47.568581) - first)  # "step:  2"
    assert tl.step_end_s[-1] == pytest.approx(hms(14, 10, 51.208789) - first)  # "step: 105"
    # The time before step 1 (the first interval at step 2's pace) is init.
    (init,) = [s for s in tl.sections if s.name == "init"]
    assert init.end_s == pytest.approx(tl.step_end_s[0] - (47.568581 - 46.954794))


def test_torchtitan_default_prefix_resume_and_validation(tmp_path):
    """torchtitan's own prefix; a second 'Training starts at step' is a resumed run, a
    'validate step:' line is not a training step but an evaluation in its interval."""
    p = tmp_path / "titan.log"
    head = "[rank0]:[titan] 2025-06-04 08:51:{} - root - INFO - "
    lines = [
        head.format("40,000") + "Trainer is initialized with local batch size 8, total steps 6",
        head.format("40,100") + "Training starts at step 1.",
        head.format("48,000") + "step:  1  loss: 12.2254  memory: 27.34GiB(28.78%)  tps: 375",
        head.format("49,000") + "step:  2  loss: 11.2254  memory: 27.34GiB(28.78%)  tps: 375",
        head.format("50,000") + "step:  3  loss: 10.2254  memory: 27.34GiB(28.78%)  tps: 375",
        head.format("53,000") + "validate step: 3  loss: 10.5  memory: 27.34GiB(28.78%)",
        head.format("54,000") + "step:  4  loss:  9.2254  memory: 27.34GiB(28.78%)  tps: 375",
        head.format("55,000") + "Training starts at step 4.",
        head.format("57,000") + "step:  4  loss:  9.2254  memory: 27.34GiB(28.78%)  tps: 375",
        head.format("58,000") + "step:  5  loss:  8.2254  memory: 27.34GiB(28.78%)  tps: 375",
        head.format("59,000") + "step:  6  loss:  7.2254  memory: 27.34GiB(28.78%)  tps: 375",
        head.format("59,500") + "Training completed",
    ]
    p.write_text("\n".join(lines) + "\n")
    tl = read_log(p)
    assert tl.source == "torchtitan" and tl.steps == tl.total_steps == 6 and tl.finished
    assert [s.name for s in tl.sections].count("eval") == 1
    assert [s.name for s in tl.sections].count("restart") == 1
    assert tl.step_end_s[-1] == pytest.approx(19.0)  # 08:51:59 from 08:51:40


# --------------------------------------------------------------------------- llm.c


def test_llmc_step_times_summed():
    path = DATA / "llm.c" / "readme_train_gpt2_cpu.log"
    _only_claimed_by(path, "llm.c")
    tl = read_log(path)
    # "step 0: train loss 5.356189 (took 1452.121000 ms)" ... "step 39: ... (took 1323.779000 ms)"
    assert tl.source == "llm.c" and tl.steps == 40 and tl.total_steps is None
    assert tl.step_end_s[:4] == pytest.approx(
        [1.452121, 1.452121 + 1.288673, 2.740794 + 1.369394, 4.110188 + 1.290761]
    )
    # steps 4-38 are cut from the README: step 39's time stands for each of them
    assert tl.step_end_s[-1] == pytest.approx(5.400949 + 36 * 1.323779)


def test_llmc_cuda_lines_count_from_one_with_a_total(tmp_path):
    p = tmp_path / "gpt2cu.log"
    p.write_text(
        "val loss 11.129390\n"
        "step    1/4 | loss 11.133732 (+nanz)| norm 52.9732 (+nanz)| lr 8.57e-07 | 3056.36 ms "
        "| 42.6% bf16 MFU | 343080 tok/s\n"
        "step    2/4 | loss 10.539388 (+nanz)| norm 43.5996 (+nanz)| lr 1.71e-06 | 2747.19 ms "
        "| 47.4% bf16 MFU | 381690 tok/s\n"
        "step    3/4 | train loss 9.894109 | norm 23.2229 | lr 2.57e-06 | 2753.25 ms | 47.3% A100"
        " fp16 MFU | 381259 tok/s\n"
        "step    4/4: train loss 9.566241 norm 28.4920 lr 3.43e-06 (2741.47 ms, 381690 tok/s)\n"
        "val loss 9.4\ntotal average iteration time: 2800.0 ms\n"
    )
    tl = read_log(p)
    assert tl.source == "llm.c" and tl.steps == tl.total_steps == 4 and tl.finished
    assert tl.step_end_s == pytest.approx([3.05636, 5.80355, 8.5568, 11.29827])


# --------------------------------------------------------------------------- NeMo


def test_nemo2_iterations_step_timing_and_checkpoint_gaps():
    path = DATA / "nemo" / "geneformer_10m_pretrain_500steps.log.gz"
    assert detect_format(read_text(path)).name == "nemo"  # before pylogging, which its
    # "[NeMo I <timestamp>] ... from iteration 99" lines also give
    tl = read_log(path)
    # "iteration 0/499 ... max_steps=500"; "`Trainer.fit` stopped: `max_steps=500` reached."
    assert tl.source == "nemo" and tl.steps == tl.total_steps == 500 and tl.finished
    # "iteration 0/499 ... train_step_timing in s: 3.472", "iteration 1/499 ... 0.08818"
    assert tl.step_end_s[:2] == pytest.approx([3.472, 3.472 + 0.08818])
    # After iteration 99: the checkpoint save and validation, "[NeMo I 2025-09-16 20:08:44"
    # to "[NeMo I 2025-09-16 20:09:01": 17 s before iteration 100 began.
    ckpt = tl.sections[0]
    assert ckpt.name == "checkpoint" and ckpt.begin_s == pytest.approx(tl.step_end_s[99])
    assert ckpt.end_s - ckpt.begin_s == pytest.approx(17.0)
    assert tl.step_end_s[100] == pytest.approx(ckpt.end_s + 0.08667)  # "100/499 ... 0.08667"


# --------------------------------------------------------------------------- tqdm bars


def test_ultralytics_console_epoch_bars_and_validations():
    path = DATA / "yolo-console" / "yolov5s_coco128_3epochs_tutorial.log"
    assert detect_format(read_text(path)).name == "yolo-console"
    tl = read_log(path)
    # "Starting training for 3 epochs...", each epoch "8/8"; "3 epochs completed in ..."
    assert tl.source == "yolo" and tl.steps == tl.total_steps == 24 and tl.finished
    assert tl.steps_per_epoch == 8
    # epoch bars "8/8 [00:09", "[00:02", "[00:01", each followed by "4/4 [00:01" (validation)
    assert tl.step_end_s[7] == pytest.approx(9.0)
    assert tl.step_end_s[15] == pytest.approx(9.0 + 1.0 + 2.0)
    assert tl.step_end_s[23] == pytest.approx(12.0 + 1.0 + 1.0)
    evals = [s for s in tl.sections if s.name == "eval"]
    assert (evals[0].begin_s, evals[0].end_s) == pytest.approx((9.0, 10.0))
    assert (evals[1].begin_s, evals[1].end_s) == pytest.approx((12.0, 13.0))
    # After the last epoch: its validation and best.pt's ("4/4 [00:06"), shown at 4/4 with
    # nothing between, are read as one bar redrawn: 6 s, not 1 + 6 (a known limit).
    assert tl.end_s == pytest.approx(14.0 + 6.0)


def test_ultralytics_console_yolov5_layouts_before_v7():
    """YOLOv5 before v7.0 printed 'Epoch gpu_mem box obj cls ...' (and 'GIoU' in 2020): the
    same console, read as such (not as generic tqdm bars, which know neither its 'Starting
    training for 3 epochs' nor its end)."""
    path = DATA / "yolo-console" / "yolov5_2020_giou_coco128_3epochs_tutorial.log"
    _only_claimed_by(path, "yolo-console")
    tl = read_log(path)
    # "Starting training for 3 epochs...", each epoch "8/8"; "3 epochs completed in ..."
    assert tl.source == "yolo" and tl.steps == tl.total_steps == 24 and tl.finished
    # epoch bars "8/8 [00:09<00:00,  1.22s/it]", "[00:03", "[00:03", each followed by its
    # validation's "8/8 [00:09", "[00:02", "[00:02"
    assert [tl.step_end_s[i] for i in (7, 15, 23)] == pytest.approx([9.0, 21.0, 26.0])
    evals = [t for s in tl.sections if s.name == "eval" for t in (s.begin_s, s.end_s)]
    assert evals == pytest.approx([9.0, 18.0, 21.0, 23.0, 26.0, 28.0])
    assert tl.end_s == pytest.approx(28.0)

    path = DATA / "yolo-console" / "yolov5_v6.2_gpu_mem_coco128_3epochs_tutorial.log"
    _only_claimed_by(path, "yolo-console")
    tl = read_log(path)
    assert tl.source == "yolo" and tl.steps == tl.total_steps == 24 and tl.finished
    assert tl.step_end_s[7] == pytest.approx(4.0)  # "8/8 [00:04"


def test_ultralytics_classification_console():
    """YOLOv5's classification console ('Epoch GPU_mem train_loss val_loss ...', 'Starting
    ... for 5 epochs...', 'Training complete'): read before as generic tqdm bars, total unknown
    and a finished run 'running'."""
    path = DATA / "yolo-console" / "yolov5s_cls_imagenette_5epochs_tutorial.log"
    _only_claimed_by(path, "yolo-console")
    tl = read_log(path)
    assert tl.source == "yolo" and tl.steps == tl.total_steps == 740 and tl.finished
    assert tl.steps_per_epoch == 148
    # five bars "148/148 [00:38", "[00:36", "[00:35", "[00:36", "[00:37"
    ends = [tl.step_end_s[148 * k - 1] for k in range(1, 6)]
    assert ends == pytest.approx([38.0, 74.0, 109.0, 145.0, 182.0])
    assert tl.end_s == pytest.approx(182.0)


def test_generic_tqdm_one_bar_over_the_run_in_seconds_per_iteration():
    path = DATA / "tqdm" / "accelerate_megatron_gpt2_large_no_trainer.log"
    assert [f.name for f in FORMATS if f.detect(read_text(path))] == ["tqdm"]
    tl = read_log(path)
    # one bar, "49/245 [01:04<04:09,  1.27s/it]" ... "245/245 [05:27<00:00,  1.28s/it]"
    assert tl.source == "tqdm" and tl.steps == tl.total_steps == 245 and tl.finished
    ends = [tl.step_end_s[i - 1] for i in (49, 98, 147, 196, 245)]
    assert ends == pytest.approx([64.0, 130.0, 196.0, 262.0, 327.0])


def test_tqdm_lightning_console_validation_inside_the_epoch(tmp_path):
    """Lightning's bars: the validation bar runs while the epoch bar is open; the epoch bar
    is redrawn after it with its elapsed grown by the validation; the next epoch's bar
    starts again from 0; `Trainer.fit` stopped gives the epochs and ends the run."""
    p = tmp_path / "lightning.log"
    p.write_text(
        "Epoch 0:  50%|█████     | 2/4 [00:02<00:02,  1.00it/s, v_num=0]\r"
        "Epoch 0: 100%|██████████| 4/4 [00:04<00:00,  1.00it/s, v_num=0]\n"
        "Validation DataLoader 0: 100%|██████████| 2/2 [00:01<00:00,  2.00it/s]\n"
        "Epoch 0: 100%|██████████| 4/4 [00:05<00:00,  0.80it/s, v_num=0, val_loss=1.0]\n"
        "Epoch 1:  50%|█████     | 2/4 [00:02<00:02,  1.00it/s, v_num=0]\r"
        "Epoch 1: 100%|██████████| 4/4 [00:04<00:00,  1.00it/s, v_num=0]\n"
        "Validation DataLoader 0: 100%|██████████| 2/2 [00:01<00:00,  2.00it/s]\n"
        "Epoch 1: 100%|██████████| 4/4 [00:05<00:00,  0.80it/s, v_num=0, val_loss=0.9]"
        "`Trainer.fit` stopped: `max_epochs=2` reached.\n"
    )
    tl = read_log(p)
    assert tl.source == "tqdm" and tl.steps == tl.total_steps == 8 and tl.finished
    assert tl.step_end_s == pytest.approx([1, 2, 3, 4, 6, 7, 8, 9], abs=1e-5)
    bounds = [x for s in tl.sections for x in (s.begin_s, s.end_s)]
    assert bounds == pytest.approx([4, 5, 9, 10])
    assert tl.end_s == pytest.approx(10.0)


# --------------------------------------------------------------------------- Composer


def test_composer_console_epoch_form_with_validation_time():
    path = DATA / "composer" / "resnet_cifar_readme_console.log"
    assert detect_format(read_text(path)).name == "composer"  # before tqdm (its bar line)
    tl = read_log(path)
    # "[epoch=0][batch=16/625]: wall_clock/total: 28.1273", "... wall_clock/val: 10.9666",
    # "[epoch=0][batch=17/625]: wall_clock/total: 28.8502"
    assert tl.source == "composer" and tl.steps == 17 and tl.steps_per_epoch == 625
    assert tl.step_end_s[15:] == pytest.approx([28.1273, 28.8502])
    (ev,) = [s for s in tl.sections if s.name == "eval"]
    assert (ev.begin_s, ev.end_s) == pytest.approx((0.0, 10.9666))
    # the 16 batches before share the training time since the evaluation
    assert tl.step_end_s[0] == pytest.approx(10.9666 + (28.1273 - 10.9666) / 16, rel=1e-6)


def test_composer_console_batch_form_total():
    path = DATA / "composer" / "llm_mosaic_gpt_readme_console.log"
    _only_claimed_by(path, "composer")
    tl = read_log(path)
    # "[batch=8/5000]: wall_clock/total: 16.8334", "[batch=9/5000]: wall_clock/total: 18.3862"
    assert tl.steps == 9 and tl.total_steps == 5000 and not tl.sections
    assert tl.step_end_s[7:] == pytest.approx([16.8334, 18.3862])


def test_composer_console_newer_form_in_hours(tmp_path):
    p = tmp_path / "composer.log"
    p.write_text(
        "[epoch=1][batch=1/2]:\n\t Train time/train: 0.0010\n\t Train time/val: 0.0000\n"
        "\t Train time/total: 0.0010\n\t Train loss/train/total: 7.1\n"
        "[epoch=1][batch=2/2]:\n\t Train time/total: 0.0020\n"
        "[epoch=2][batch=1/2]:\n\t Train time/val: 0.0005\n\t Train time/total: 0.0035\n"
    )
    tl = read_log(p)
    assert tl.source == "composer" and tl.steps == 3 and tl.steps_per_epoch == 2
    assert tl.step_end_s == pytest.approx([3.6, 7.2, 12.6])
    (ev,) = tl.sections
    assert (ev.begin_s, ev.end_s) == pytest.approx((7.2, 9.0))


def test_composer_console_without_a_clock_is_refused_naming_speedmonitor():
    """LLM Foundry's README console: '[batch=1/100]:' tags, no SpeedMonitor clock. Composer's,
    refused saying what to log (before: 'not a training log'); with Composer's progress bar
    in it, the tqdm reader still reads the bar."""
    path = DATA / "composer" / "refused" / "llm_foundry_mpt125m_readme_no_clock.log"
    _only_claimed_by(path, "composer")
    with pytest.raises(LogError, match="log with SpeedMonitor and ConsoleLogger"):
        read_log(path)
    with_bar = (
        read_text(path)
        + (
            "train          Epoch   0:    4%|▋     | 4/100 [00:08<03:12,  2.00s/ba, "
            "loss/train/total=10.6459]\n"
        )
        * 3
    )
    assert detect_format(with_bar).name == "tqdm"


def test_nanogpt_jax_port_licensed_sample():
    path = DATA / "nanogpt" / "nanogpt_jax_amp_rocm_blog.log"
    _only_claimed_by(path, "nanogpt")
    tl = read_log(path)
    assert tl.source == "nanogpt" and tl.steps == 101  # "iter 0" ... "iter 100"
    assert tl.step_end_s[0] == pytest.approx(44.3091)  # "iter 0: ... time 44309.10ms"
    usual = 0.05551  # the median of iter 10 ... iter 100's times (51.32 ... 57.52 ms)
    # "iter 10: ... time 51.32ms": its own time, the 9 before it at the usual time
    assert tl.step_end_s[10] == pytest.approx(44.3091 + 9 * usual + 0.05132)
    # iter 0 ran after "step 0: train loss ..., val loss ...": its extra is the evaluation
    (ev,) = [s for s in tl.sections if s.name == "eval"]
    assert ev.end_s - ev.begin_s == pytest.approx(44.3091 - usual)


def test_nemo1_lightning_bar_is_read_as_tqdm(tmp_path):
    """NeMo 1 prints Lightning's bar with its own postfix and no rate; a job of max_steps
    has one bar over the run, whose total is the run's."""
    p = tmp_path / "nemo1.out"
    state = (
        "Epoch 0: : {pct}%|█▌        | {n}/15 [{el}<{rem}, reduced_train_loss={loss}, "
        "global_step={gs}, consumed_samples=12288.0, train_step_timing in s=49.50]"
    )
    p.write_text(
        "\r".join(
            state.format(pct=p_, n=n, el=el, rem=rem, loss=loss, gs=gs)
            for p_, n, el, rem, loss, gs in [
                (7, 1, "01:00", "14:00", "11.90", "0.000"),
                (13, 2, "01:50", "12:00", "11.70", "1.000"),
                (47, 7, "06:19", "07:13", "11.50", "5.000"),
            ]
        )
        + "\n"
    )
    assert detect_format(read_text(p)).name == "tqdm"
    tl = read_log(p)
    assert tl.steps == 7 and tl.total_steps == 15
    assert tl.step_end_s[0] == pytest.approx(60.0) and tl.step_end_s[1] == pytest.approx(110.0)
    assert tl.step_end_s[6] == pytest.approx(379.0)  # "7/15 [06:19"


def test_ultralytics_83_bar_rate_then_elapsed(tmp_path):
    """Ultralytics 8.3 prints its own bar (rate, then elapsed); lines as a public YOLO11 log
    printed them (epochs 1-3 of 100: 221 batches, validation 26)."""
    head = "      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size\n"
    val = (
        "                 Class     Images  Instances      Box(P          R      mAP50  "
        "mAP50-95): 100% ━━━━━━━━━━━━ 26/26 {rate}it/s {el}s\n"
        "                   all        801        944      0.415       0.26      0.118     0.0719\n"
    )
    ep = "      {e}/100      2.06G      2.681      4.744      3.814         37        640: 100% "
    ep += "━━━━━━━━━━━━ 221/221 {rate}it/s {el}s\n"
    p = tmp_path / "yolo11.log"
    p.write_text(
        "Starting training for 100 epochs...\n\n"
        + "".join(
            head + ep.format(e=e, rate=r1, el=t1) + val.format(rate=r2, el=t2) + "\n"
            for e, r1, t1, r2, t2 in [
                (1, "4.5", "49.5", "4.8", "5.5"),
                (2, "5.0", "44.6", "5.1", "5.0"),
                (3, "5.0", "43.9", "5.2", "5.0"),
            ]
        )
    )
    assert detect_format(read_text(p)).name == "yolo-console"
    tl = read_log(p)
    assert tl.steps == 663 and tl.total_steps == 22100 and tl.steps_per_epoch == 221
    ends = [tl.step_end_s[221 * k - 1] for k in (1, 2, 3)]
    assert ends == pytest.approx([49.5, 49.5 + 5.5 + 44.6, 99.6 + 5.0 + 43.9])
