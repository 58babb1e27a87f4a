"""The cluster what-if from several measured scales of one job (ailens/predict/measured.py)
and the intervals of assumed terms (ailens/predict/cluster.py)."""

import json
import math
from dataclasses import replace

import pytest
from conftest import REPO
from test_cli import assert_one_line_error, cli

from ailens.predict import (
    DEFAULT_PLATFORMS,
    JobDescription,
    ddp_buckets,
    fit_measured,
    load_platform,
    predict,
    predict_measured,
)
from ailens.predict.cluster import (
    UNEXPLAINED_PER_DOUBLING,
    scale_bandwidth,
    unexplained_band,
)
from ailens.predict.terms import expected_max_normal

GRAD = 4 * 25_557_032  # ResNet-50's fp32 gradients


def _job(step_s=0.100, ranks=1, rpn=1, platform="pcie-node", **kw) -> JobDescription:
    return JobDescription(
        name="resnet50",
        grad_bytes=GRAD,
        buckets=ddp_buckets(GRAD),
        step_s=step_s,
        batch_per_device=32,
        ranks=ranks,
        ranks_per_node=rpn,
        platform=platform,
        source=f"run at {ranks}",
        **kw,
    )


def test_two_scales_recover_the_effective_network_and_predict_larger_counts():
    """A job whose allreduces run at 1/8 of the datasheet PCIe bandwidth: its runs at 1 and
    2 GPUs pin the factor down, and 4 and 8 GPUs follow from it; the datasheet alone
    (one measured scale) misses them."""
    base = DEFAULT_PLATFORMS["pcie-node"]
    slow = scale_bandwidth(base, 1 / 8)
    one = _job()
    truth = {r.ranks: r.step_time_s for r in predict(one, [2, 4, 8], slow)}
    two = _job(step_s=truth[2], ranks=2, rpn=2)
    fit = fit_measured([two, one], base)  # any order
    assert fit.base is one and fit.bandwidth_factor == pytest.approx(1 / 8, rel=0.05)
    assert "fitted on the job's runs" in fit.platform.intra.source
    rows = predict_measured([one, two], [4, 8], base)
    for r in rows:
        assert r.step_time_s == pytest.approx(truth[r.ranks], rel=0.01), r.ranks
        assert r.step_low_s <= r.step_time_s <= r.step_high_s
        assert r.wide_term in ("extrapolation", "unexplained")
        assert "one more scale" not in r.narrow_by
        said = " ".join(r.assumptions)
        assert "run at 1" in said and "run at 2" in said and "effective network" in said
        assert r.terms[-1].name == "measured_residual"
    datasheet = {r.ranks: r.step_time_s for r in predict(one, [4, 8], base)}
    assert all(abs(datasheet[q] / truth[q] - 1) > 0.05 for q in (4, 8))


def test_what_is_not_communication_is_carried_and_interpolated_in_log_devices():
    """No gradients to reduce: the measured growth is all residual; between measured scales
    it is interpolated in log2(devices), beyond them the nearest one's is kept."""
    runs = [
        replace(_job(step_s=s, ranks=q, rpn=q), grad_bytes=0, buckets=())
        for q, s in ((1, 0.100), (2, 0.104), (8, 0.110))
    ]
    got = {r.ranks: r.step_time_s for r in predict_measured(runs, [2, 4, 8, 16], "pcie-node")}
    assert got[2] == pytest.approx(0.104)
    assert got[4] == pytest.approx(0.107)  # halfway in log2 between 2 and 8
    assert got[8] == pytest.approx(0.110)
    assert got[16] == pytest.approx(0.110)
    fit = fit_measured(runs, "pcie-node")
    assert fit.bandwidth_factor is None  # nothing to reduce: no network fitted


def test_measured_inputs_are_checked():
    with pytest.raises(ValueError, match="two or more device counts"):
        fit_measured([_job()], "pcie-node")
    with pytest.raises(ValueError, match="same layout"):
        fit_measured([_job(), _job(step_s=0.2)], "pcie-node")
    with pytest.raises(ValueError, match="different platforms"):
        fit_measured([_job(), _job(ranks=2, rpn=2, platform="dgx1-v100")])


def test_an_unmeasured_network_gives_an_interval_that_says_what_to_measure():
    """On datasheet links the exposed sync is priced from the datasheet down to 1/16 of it;
    on links fitted on nccl-tests output the weak-scaling step is a point."""
    job = _job(ranks=8, rpn=8)
    r = predict(job, [16], "pcie-node", ranks_per_node=8)[0]
    f_lo, f_hi = unexplained_band(16, [8])
    assert r.step_low_s == pytest.approx(r.step_time_s * f_lo)
    assert r.step_high_s > r.step_time_s * f_hi
    assert r.wide_term == "network" and "nccl-tests" in r.narrow_by
    d = r.to_dict()
    assert {"step_low_s", "step_high_s", "wide_term", "narrow_by"} <= set(d)
    fitted = load_platform("ndv4-echo")
    r = predict(replace(job, platform=None), [16], fitted, ranks_per_node=8)[0]
    # Fitted links: no network range; only what no term prices (UNEXPLAINED_PER_DOUBLING).
    assert r.step_low_s == pytest.approx(r.step_time_s * f_lo)
    assert r.step_high_s == pytest.approx(r.step_time_s * f_hi)
    assert r.wide_term == "unexplained" and "nccl-tests" not in r.narrow_by
    # Strong scaling without a compute curve: the compute's floor band widens it further.
    r = predict(replace(job, platform=None), [16], fitted, scaling="strong", ranks_per_node=8)[0]
    assert r.compute_low_s < r.compute_high_s
    assert r.step_high_s - r.step_low_s > r.step_time_s * (f_hi - f_lo) * 1.01


EXAMPLE1 = REPO / "docs" / "examples" / "resnet50_ddp_dgx1.json"
EXAMPLE2 = REPO / "docs" / "examples" / "resnet50_ddp_dgx1_2gpu.json"
# PyTorch's DDP benchmark (pytorch/pytorch:benchmarks/distributed/ddp/README.md@bf69c14),
# ResNet-50 p50 at 8 GPUs (one DGX-1) and 16 (two): what the two runs did not see.
MEASURED = {8: 0.104, 16: 0.104}


def test_whatif_command_takes_several_measured_scales():
    """``ailens whatif A.json B.json``: the DDP benchmark's 1- and 2-GPU runs predict 8 and
    16 GPUs within 4 %, inside the printed interval, each term's run named."""
    out = cli("whatif", EXAMPLE1, EXAMPLE2, "--ranks", "8,16", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    for r in rows:
        want = MEASURED[r["ranks"]]
        assert abs(r["step_time_s"] / want - 1) < 0.04, r
        assert r["step_low_s"] <= want <= r["step_high_s"], r
        assert r["terms"][-1]["name"] == "measured_residual"
        assert any("resnet50_ddp_dgx1_2gpu.json" in a for a in r["assumptions"])
    text = cli("whatif", EXAMPLE1, EXAMPLE2, "--ranks", "16").stdout
    assert "measured: 100 ms at 1, 103 ms at 2 device(s)" in text
    assert "Widest interval at 16 devices: unexplained" in text


def test_whatif_several_scales_errors_are_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert_one_line_error(cli("whatif", EXAMPLE1, run), str(run), "--cluster")
    assert_one_line_error(cli("whatif", EXAMPLE1, EXAMPLE1), "same layout")


def test_strong_scaling_takes_the_compute_curve_from_the_runs():
    """Strong scaling without a compute curve: two runs at different batches per device are
    its points; beyond them the per-step overhead + per-sample fit through them, not the
    stated 10 % floor."""
    kw = {"grad_bytes": 0, "buckets": (), "scaling": "strong", "global_batch": 256}
    one = replace(_job(step_s=0.200, ranks=1, rpn=1), batch_per_device=256, **kw)
    two = replace(_job(step_s=0.120, ranks=2, rpn=2), batch_per_device=128, **kw)
    row = predict_measured([one, two], [8], "pcie-node")[0]
    b = (0.200 - 0.120) / (256 - 128)  # per sample
    a = 0.200 - b * 256  # per step
    assert row.step_time_s == pytest.approx(a + b * 32, rel=1e-6)
    assert any("from the runs' own steps" in x for x in row.assumptions)
    floor = predict(one, [8], "pcie-node", scaling="strong")[0].step_time_s
    assert floor != pytest.approx(row.step_time_s, rel=0.01)


RECORDS = REPO / "benchmarks" / "history" / "records"


def test_whatif_takes_every_scale_of_a_job_from_the_history(tmp_path):
    """``ailens whatif H.sqlite --job NAME``: the job's recorded runs (real records of
    mnist-ddp at 1 and 2 ranks) are its measured scales; the run at 2 ranks is reproduced
    and named, and 4 ranks predicted from both."""
    from ailens.tools.history import History

    hist = tmp_path / "h.sqlite"
    recs = [json.loads((RECORDS / f"mnist-ddp__b64__full__r{r}t1.json").read_text())
            for r in (1, 2)]  # fmt: skip
    other = json.loads((RECORDS / "mnist-hvd__b16__full__r1t1.json").read_text())
    with History(hist) as h:
        for rec in [*recs, other]:
            assert h.add(rec)
    out = cli("whatif", hist, "--job", "mnist-ddp/b64", "--cluster", "pcie-node",
              "--ranks", "2,4", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = {r["ranks"]: r for r in json.loads(out.stdout)}
    assert rows[2]["step_time_s"] == pytest.approx(recs[1]["step"]["step_s"], rel=1e-6)
    said = " ".join(rows[4]["assumptions"])
    assert recs[0]["run_dir"] in said and recs[1]["run_dir"] in said
    assert rows[4]["terms"][-1]["name"] == "measured_residual"
    # Two jobs in the database and none named; a job it does not hold.
    assert_one_line_error(cli("whatif", hist, "--cluster", "pcie-node"), "2 jobs", "--job")
    assert_one_line_error(cli("whatif", hist, "--job", "nope", "--cluster", "pcie-node"),
                          "no job 'nope'")  # fmt: skip


def test_weak_scaling_step_is_not_below_the_largest_measured_scale_under_the_target():
    """On the DGX-1 cube mesh 2 GPUs ride one NVLink and 4 GPUs rings over four: a slow
    2-GPU run fitted as a slow network prices 4 GPUs faster than 2. Weak scaling keeps each
    device's work, so the 4-GPU step is kept at the 2-GPU measurement, and said so."""
    one = _job(platform="dgx1-v100")
    two = _job(step_s=0.120, ranks=2, rpn=2, platform="dgx1-v100")
    fit = fit_measured([one, two])
    model4 = predict(one, [4], fit.platform)[0].step_time_s
    assert model4 < 0.120  # what the link model alone says
    row = predict_measured([one, two], [4])[0]
    assert row.step_time_s >= 0.120
    assert any("weak scaling does not speed a device up" in a for a in row.assumptions)


def test_weak_scaling_growth_the_model_does_not_continue_goes_on_as_the_slowest_rank():
    """Where the model's shape contradicts the runs (the slow network the 1 -> 2 GPU growth
    was fitted as prices 4 and 8 GPUs on the cube mesh below the 2-GPU step), the runs
    decide: the measured growth goes on as the slowest of q devices lags (E[max of q
    normals], the spread the two runs imply), not flat at the 2-GPU step (ideal scaling)."""
    one = _job(platform="dgx1-v100")
    two = _job(step_s=0.120, ranks=2, rpn=2, platform="dgx1-v100")
    rows = predict_measured([one, two], [4, 8])
    sd = 0.020 / (expected_max_normal(2) - expected_max_normal(1))
    for r in rows:
        want = 0.120 + sd * (expected_max_normal(r.ranks) - expected_max_normal(2))
        assert r.step_time_s == pytest.approx(want, rel=1e-9)
        assert any("continued as the slowest of" in a for a in r.assumptions)
    assert 0.120 < rows[0].step_time_s < rows[1].step_time_s
    # Steps that FELL from 1 to 2 GPUs are noise, not a growth to continue: the 2-GPU step.
    down = predict_measured([one, replace(two, step_s=0.095)], [8])[0]
    assert down.step_time_s == pytest.approx(0.095)


def test_another_platform_puts_the_device_speed_in_the_interval():
    """A job measured on a DGX-1 (V100) predicted on a DGX A100: the compute moves by the
    learned device speed (``device_speed.py``) and the interval is its held-out band; where
    the model knows no device (pcie-node names none) the point stays "same speed" and the
    interval is wide and says so."""
    from ailens.predict import platform_from_dict, platform_to_dict
    from ailens.predict.device_speed import load_device_speed

    job = _job(platform="dgx1-v100")
    same = predict(job, [1], "dgx1-v100")[0]
    r = predict(job, [1], "dgx-a100")[0]
    k = load_device_speed().ratio("V100", "A100 SXM4", "fp32")
    assert k.learned and k.low < k.ratio < k.high
    assert r.step_time_s == pytest.approx(same.step_time_s * k.ratio)
    assert r.step_low_s == pytest.approx(same.step_time_s * k.low)
    assert r.step_high_s == pytest.approx(same.step_time_s * k.high)
    assert r.wide_term == "device" and "target platform" in r.narrow_by
    a100 = DEFAULT_PLATFORMS["dgx-a100"]
    assert platform_from_dict(platform_to_dict(a100)).peak_tflops == a100.peak_tflops
    r = predict(job, [1], "pcie-node")[0]
    assert r.step_time_s == pytest.approx(same.step_time_s)
    assert r.step_low_s < r.step_time_s < r.step_high_s and r.wide_term == "device"
    assert any("not in the device-speed model" in a for a in r.assumptions)


def test_what_no_term_prices_widens_the_interval_with_each_doubling_from_a_measurement():
    """The step may move beyond the priced terms (host, input pipeline, PCIe sharing, the
    runs' noise) by a range per doubling of the devices from the nearest measured scale:
    nothing at the measured scale, exp(range x doublings) beyond it, and taken off towards
    fewer devices; with several measured scales the nearest one counts."""
    assert unexplained_band(4, [4]) == (1.0, 1.0)
    lo, hi = UNEXPLAINED_PER_DOUBLING
    f = unexplained_band(16, [2])
    assert f == pytest.approx((math.exp(3 * lo), math.exp(3 * hi)))
    f = unexplained_band(1, [4])
    assert f == pytest.approx((math.exp(-2 * hi), math.exp(-2 * lo)))
    assert unexplained_band(8, [1, 4]) == pytest.approx((math.exp(lo), math.exp(hi)))
    job = replace(_job(platform=None), grad_bytes=0, buckets=())
    rows = {r.ranks: r for r in predict(job, [1, 2, 8], load_platform("ndv4-echo"))}
    assert rows[1].step_low_s == rows[1].step_high_s == pytest.approx(0.100)
    assert rows[2].step_high_s / rows[2].step_time_s < rows[8].step_high_s / rows[8].step_time_s
    assert rows[8].wide_term == "unexplained" and "scale nearer" in rows[8].narrow_by


def test_measured_steps_that_fall_under_weak_scaling_are_noise_the_interval_spans():
    """Weak scaling keeps each device's work: a step that falls when devices are added
    (Gavel's V100 rows: 30.9 ms at 1 worker, 20.0 ms at 2) is the runs' noise, so the
    interval reaches every measured step, and says why."""
    one = replace(_job(step_s=0.0309), grad_bytes=0, buckets=())
    two = replace(_job(step_s=0.0200, ranks=2, rpn=2), grad_bytes=0, buckets=())
    r = predict_measured([one, two], [4])[0]
    assert r.step_time_s == pytest.approx(0.0200)
    assert r.step_high_s >= 0.0309 * unexplained_band(4, [1, 2])[1] - 1e-12
    assert any("measurement noise" in a for a in r.assumptions)
    rising = replace(two, step_s=0.0400)
    r = predict_measured([one, rising], [4])[0]
    assert not any("measurement noise" in a for a in r.assumptions)


def test_a_measured_fall_is_not_continued_below_ideal_scaling():
    """A fall between the two largest measured scales, continued linearly in the devices,
    reaches a step of 0 and below (Gavel's V100 ResNet-18 rows: 30.9 ms at 1 worker, 20.0
    ms at 2, so -36 ms at 8; a strong-scaling speed-up beyond ideal, a negative serial
    part, does the same). The interval's low end beyond the runs is ideal scaling from the
    nearest measured scale, widened only by the unexplained range."""
    one = replace(_job(step_s=0.0309), grad_bytes=0, buckets=())
    two = replace(_job(step_s=0.0200, ranks=2, rpn=2), grad_bytes=0, buckets=())
    for q in (4, 8):
        r = predict_measured([one, two], [q])[0]
        f_lo = unexplained_band(q, [1, 2])[0]
        assert r.step_low_s == pytest.approx(0.0200 * f_lo)
    strong = dict(scaling="strong", global_batch=256.0)
    # Gavel's V100 Transformer: 627 ms at batch 256 on 1 worker, 199 ms at 128 on 2; its
    # 1-worker steps at batches 64 and 128 are the compute curve.
    curve = ((64.0, 0.116), (128.0, 0.184), (256.0, 0.627))
    one = replace(_job(step_s=0.627), grad_bytes=0, buckets=(), batch_per_device=256, curve=curve)
    two = replace(
        _job(step_s=0.199, ranks=2, rpn=2), grad_bytes=0, buckets=(), batch_per_device=128
    )
    for q in (4, 8):
        r = predict_measured([one, two], [q], **strong)[0]
        assert r.step_low_s >= 0.199 * 2 / q * unexplained_band(q, [1, 2])[0] - 1e-12
        assert 0 < r.step_low_s <= r.step_time_s <= r.step_high_s


def test_the_interval_spans_other_splits_of_the_measured_growth_between_network_and_the_rest():
    """Two runs (2 GPUs 100 ms, 4 GPUs 104 ms) fit the growth as a slow network; but the
    4-GPU run may lie off the model by the unexplained range, so the network may explain
    more of it (or less). The 16-GPU interval (2 nodes) spans the network fitted to 104 ms /
    either end of that range, the rest of the 4-GPU step kept as residual: its high end is
    that prediction widened by the unexplained range from 4 GPUs."""
    two = _job(step_s=0.100, ranks=2, rpn=2)
    four = _job(step_s=0.104, ranks=4, rpn=4)
    row = predict_measured([two, four], [16], ranks_per_node=8)[0]
    f_lo = unexplained_band(4, [2])[0]
    more = replace(four, step_s=0.104 / f_lo)  # the network explains 104 ms / f_lo
    alt = predict_measured([two, more], [16], ranks_per_node=8)[0].step_time_s
    alt -= more.step_s - four.step_s  # the measured 4-GPU step: the rest is residual
    assert alt > row.step_time_s
    assert row.step_high_s == pytest.approx(alt * unexplained_band(16, [2, 4])[1])
    assert row.step_low_s < row.step_time_s < row.step_high_s


def test_a_network_that_explains_the_growth_leaves_no_residual_of_rounding():
    """Where the fitted network meets the second run's step, what the model does not
    explain there is 0, not the search's rounding printed as a cost ("-1.5e-07 ms")."""
    grad = 4 * 13_987_678  # Gavel's LM
    for step2 in (0.026, 0.0276, 0.0321):
        one = replace(_job(step_s=0.011), grad_bytes=grad, buckets=ddp_buckets(grad))
        two = replace(one, step_s=step2, ranks=2, ranks_per_node=2, source="run at 2")
        fit = fit_measured([one, two])
        assert 0 < fit.bandwidth_factor < 1
        assert [m.residual_s for m in fit.scales] == [0.0, 0.0]
        assert "+0 ms at 2 devices" in fit.notes[-1]


def test_the_users_jobs_on_two_devices_move_the_device_speed():
    """Issue 32 item 3: the user's own jobs measured on both devices of a pair move the
    learned ratio for it, by their mean log residual pooled with the model (worth
    ``HISTORY_PRIOR_JOBS`` jobs); a job measured the other way round counts inverted, a job's
    repeated runs once, another precision or another pair not at all; one job keeps the
    model's interval (moved), several agreeing jobs narrow it, disagreeing ones widen it."""
    from ailens.predict import HISTORY_PRIOR_JOBS, MeasuredRatio, load_device_speed, pooled_ratio

    model = load_device_speed()
    base = model.ratio("V100", "A100 SXM4", "fp32")

    def ran(job, ratio, src="V100", tgt="A100 SXM4", precision="fp32"):
        return MeasuredRatio(job=job, src_device=src, tgt_device=tgt, precision=precision,
                             ratio=ratio)  # fmt: skip

    k = HISTORY_PRIOR_JOBS
    one = model.with_history([ran("a", 0.5)]).ratio("V100", "A100 SXM4", "fp32")
    shift = math.log(0.5 / base.ratio) / (1 + k)
    assert one.ratio == pytest.approx(base.ratio * math.exp(shift))
    assert one.high / one.low == pytest.approx(base.high / base.low)
    assert "moved by 1 of the user's jobs measured on both (a)" in one.basis
    # The same job twice, the other way round, and what does not match the pair.
    same = model.with_history([
        ran("a", 0.5), ran("a", 1 / 0.5, src="A100 SXM4", tgt="V100"),
        ran("b", 0.2, precision="mixed"), ran("c", 0.2, tgt="H100 SXM5"),
    ]).ratio("V100", "A100 SXM4", "fp32")  # fmt: skip
    assert same.ratio == pytest.approx(one.ratio) and "(a)" in same.basis
    # Many jobs that agree: the point near theirs, the interval narrower than the model's.
    agree = model.with_history([ran(f"j{i}", 0.5 * (1 + 0.01 * i)) for i in range(12)])
    r = agree.ratio("V100", "A100 SXM4", "fp32")
    assert abs(math.log(r.ratio / 0.53)) < abs(math.log(base.ratio / 0.53)) / 2
    assert r.high / r.low < base.high / base.low
    # Jobs that disagree (0.25 to 1.0) widen it: the user's jobs do not share one ratio.
    spread = model.with_history([ran(f"j{i}", x) for i, x in enumerate((0.25, 1.0, 0.3, 0.9))])
    r = spread.ratio("V100", "A100 SXM4", "fp32")
    assert r.high / r.low > base.high / base.low
    assert pooled_ratio(0.1, 0.5, []) == (0.1, 0.5)
    with pytest.raises(ValueError, match="positive number"):
        ran("bad", 0.0)
    # A device the model does not know: the user's jobs are what moves "same speed".
    r = model.with_history([ran("a", 0.6, tgt="MI250"), ran("b", 0.62, tgt="MI250")]).ratio(
        "V100", "MI250", "fp32"
    )
    assert r.ratio < 0.9 and "moved by 2" in r.basis


def _on(rec: dict, platform: str, step_s: float, tag: str) -> dict:
    """A real record as the user stores it under a cluster platform's label (`history add
    --platform LABEL`), at the step that platform measured."""
    rec = json.loads(json.dumps(rec))
    rec["platform"]["name"], rec["step"]["step_s"] = platform, step_s
    rec["run_id"], rec["run_dir"] = f"{rec['run_id']}-{tag}", f"{rec['run_dir']}-{tag}"
    return rec


def test_whatif_from_the_history_moves_the_device_speed_by_the_users_other_jobs(tmp_path):
    """``ailens whatif H.sqlite --job J --cluster dgx-a100`` with J measured on a DGX-1 only:
    the history's other jobs measured on both (stored under the two platforms' labels) move
    the V100 -> A100 ratio, and the rows say so; J's two scales on the DGX-1 are not fitted
    on the A100s (an error says where); with J also measured on the DGX A100, that run is
    its scale there and no ratio is needed."""
    from ailens.predict import load_device_speed
    from ailens.tools.history import History

    read = lambda name: json.loads((RECORDS / f"{name}.json").read_text())  # noqa: E731
    job = read("mnist-ddp__b64__full__r1t1")
    others = [read("mnist-hvd__b16__full__r1t1"), read("kmeans__p20k__full__r1t1")]
    hist = tmp_path / "h.sqlite"
    with History(hist) as h:
        h.add(_on(job, "dgx1-v100", 0.100, "v100"))
        for rec in others:  # both 0.4x on the A100: far from the model's ratio
            h.add(_on(rec, "dgx1-v100", 0.050, "v100"))
            h.add(_on(rec, "dgx-a100", 0.020, "a100"))
    args = ("whatif", hist, "--job", "mnist-ddp/b64", "--cluster", "dgx-a100", "--ranks", "1",
            "--json")  # fmt: skip
    out = cli(*args)
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)
    model = load_device_speed().ratio("V100", "A100 SXM4", "fp32", batch_per_device=64)
    assert row["step_time_s"] < 0.100 * model.ratio * 0.9  # moved towards 0.4x
    said = " ".join(row["assumptions"])
    assert "moved by 2 of the user's jobs measured on both" in said
    assert "kmeans" in said and "mnist-hvd/b16" in said
    # Two scales on the DGX-1: they are fitted there, not on the A100s' network as if the
    # V100s' compute were the A100s'.
    with History(hist) as h:
        h.add(_on(read("mnist-ddp__b64__full__r2t1"), "dgx1-v100", 0.110, "v100"))
    assert_one_line_error(cli(*args[:-1]), "measured on dgx1-v100", "other devices")
    # Measured on the target too: that run is the scale, no device speed.
    with History(hist) as h:
        h.add(_on(job, "dgx-a100", 0.042, "a100"))
    (row,) = json.loads(cli(*args).stdout)
    assert row["step_time_s"] == pytest.approx(0.042, rel=1e-6)
    said = " ".join(row["assumptions"])
    assert "runs on dgx-a100 are its measured scales" in said and "device speed:" not in said
    # A run-directory what-if keeps its device: --history is refused there.
    assert_one_line_error(cli("whatif", REPO / "tests", "--history", hist), "--history")


def test_a_gpu_runs_recorded_accelerator_is_its_source_device(tmp_path):
    """A CUDA run's accelerator (the torch and Horovod adapters' attach facts) and what a run
    learns after its start (``Lens.describe``: the torch adapter's batch size at the first
    forward) are the run's: its features and its signature record have them, so a record of
    a run on V100s predicted on a DGX A100 carries its compute by the device speed (no
    platform label needed), and two such records of one job on two device types are a
    measured ratio of the user's history."""
    from test_lens import FakeClock, FakeCounter

    from ailens import Lens, analyze, load_run
    from ailens.predict.whatif import features
    from ailens.tools.history import measured_ratios
    from ailens.tools.signature_record import signature_record, write_record

    def run(name: str, accelerator: str, step_ns: int) -> dict:
        clock, counter = FakeClock(), FakeCounter()
        lens = Lens(run_dir=tmp_path / name, clock=clock, work_counter=counter,
                    framework="torch-ddp", total_steps=40,
                    meta={"accelerator": accelerator})  # fmt: skip
        lens.describe(batch_size=64)
        for _ in range(40):
            for _i in range(3):
                clock.advance(step_ns // 3)
                counter.value += step_ns // 3
                lens.collective_begin("allreduce", 4 << 20)
                clock.advance(100_000)
                lens.collective_end()
            lens.step_end()
        lens.close()
        a = analyze(load_run(tmp_path / name))
        assert a.run.run_info["accelerator"] == accelerator
        assert features(a).batch_size == 64  # described after the start, not in the header
        return signature_record(a, job="toy/b64", analytic_grid=False)

    v100 = run("v100", "Tesla V100-SXM2-32GB", 30_000_000)
    assert v100["platform"]["accelerator"] == "Tesla V100-SXM2-32GB"
    # The run directory itself, as the signature: its job's device is the recorded GPU.
    out = cli("whatif", tmp_path / "v100", "--cluster", "dgx-a100", "--ranks", "1", "--json")
    assert out.returncode == 0, out.stderr
    assert "learned device speed V100 -> A100-SXM" in " ".join(
        json.loads(out.stdout)[0]["assumptions"]
    )
    assert v100["platform"]["name"].startswith("Tesla V100-SXM2-32GB x1 / ")
    sig = write_record(tmp_path / "v100", v100)
    out = cli("whatif", sig, "--cluster", "dgx-a100", "--ranks", "1", "--json")
    assert out.returncode == 0, out.stderr
    said = " ".join(json.loads(out.stdout)[0]["assumptions"])
    assert "learned device speed V100 -> A100-SXM" in said
    assert "compute measured on Tesla V100-SXM2-32GB carried to dgx-a100" in said
    (m,) = measured_ratios([v100, run("a100", "NVIDIA A100-SXM4-80GB", 12_000_000)], "fp32")
    assert m.job == "toy/b64" and m.src_device.startswith("Tesla V100")
    assert m.ratio == pytest.approx(
        run("a100b", "NVIDIA A100-SXM4-80GB", 12_000_000)["step"]["step_s"] / v100["step"]["step_s"]
    )


def test_scales_measured_on_one_device_are_not_fitted_on_another_platforms_network():
    """Two scales of a job recorded on V100s (the accelerator the runs recorded, or a
    platform label) predicted on a DGX A100: refused, saying the ways that work; on a
    platform of the same devices, or one whose devices the model does not know, fitted as
    before."""
    v100 = "Tesla V100-SXM2-32GB"
    one = _job(platform=None, device=v100)
    two = _job(step_s=0.120, ranks=2, rpn=2, platform=None, device=v100)
    with pytest.raises(ValueError, match=f"measured on {v100}.*other devices"):
        fit_measured([one, two], "dgx-a100")
    assert fit_measured([one, two], "dgx1-v100").base is one
    assert fit_measured([one, two], "pcie-node").base is one
    labelled = [replace(j, device=None, platform="dgx1-v100") for j in (one, two)]
    with pytest.raises(ValueError, match="measured on dgx1-v100"):
        predict_measured(labelled, [4], "dgx-a100")
