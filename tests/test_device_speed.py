"""Device speed across platforms (``ailens/predict/device_speed.py``): the shipped model,
its held-out accuracy on public pairs, the fallback for a device it does not know, and the
cluster what-if that prices Compute with it."""

import dataclasses
import importlib.util
import json
import math

import pytest
from conftest import REPO
from test_cli import cli

from ailens.predict.cluster import predict
from ailens.predict.device_speed import (
    DEVICE_SPEED_FILE,
    batch_term,
    device_key,
    fit_device_speed,
    load_device_speed,
    model_from_dict,
    precision_class,
)
from ailens.predict.job import load_job

EXAMPLE = REPO / "docs" / "examples" / "resnet50_ddp_dgx1.json"


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_devices", REPO / "benchmarks" / "bench_devices.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _gavel_or_skip(bench):
    f = bench.scaling_dir() / "gavel_dp_throughputs.csv"
    if not f.exists():
        pytest.skip(f"public development data not here ({f}; set AILENS_SCALING_DATA)")
    return bench.gavel_observations(bench.scaling_dir())


def test_device_names_and_precisions_map_to_the_models_cells():
    assert device_key("A100 SXM4 (vendor datasheet: 19.5 TFLOP/s FP32)") == "A100-SXM"
    assert device_key("8 x A100-PCIE-80GB") == "A100-PCIE"
    assert device_key("Azure ND A100 v4 as NetX-lab/Echo measured it") == "A100-SXM"
    assert device_key("V100 SXM2") == "V100" and device_key("tpu-v3-128") == "TPU-v3"
    assert device_key("8 GPUs on PCIe gen3 x16 (no NVLink)") is None
    assert [precision_class(p) for p in ("fp32", "tf32", "mixed", "bf16", "fp16")] == [
        "fp32",
        "tf32",
        "mixed",
        "mixed",
        "mixed",
    ]


def test_the_shipped_model_is_what_the_script_fits_on_the_public_data():
    """``device_speed.json`` is reproducible: the script's fit on the development data gives
    the shipped effects, feature line and scale slope."""
    bench = _bench()
    _gavel_or_skip(bench)
    if not (bench.mlperf_dir() / "index.json").exists():
        pytest.skip("MLPerf development logs not here (set AILENS_MLPERF_DATA)")
    shipped = json.loads(DEVICE_SPEED_FILE.read_text())
    fitted = fit_device_speed(bench.observations(), bench.FEATURES)
    assert set(fitted["effects"]) == set(shipped["effects"])
    for cell, b in fitted["effects"].items():
        assert b == pytest.approx(shipped["effects"][cell], abs=1e-9), cell
    assert fitted["coef"] == pytest.approx(shipped["coef"], abs=1e-9)
    assert fitted["scale_slope"] == pytest.approx(shipped["scale_slope"], abs=1e-9)
    assert fitted["batch_slopes"] == pytest.approx(shipped["batch_slopes"], abs=1e-9)
    for key in ("batch_slope", "scale_slope_batch_unknown"):
        assert fitted[key] == pytest.approx(shipped[key], abs=1e-9), key
    # MLPerf's batch per device comes from the standard logs only (v0.6's is unknown).
    mlperf = [o for o in bench.observations() if o["source"] == "mlperf"]
    assert all(o["batch"] is None for o in mlperf if ":v0.6:" in o["job"])
    assert all(o["batch"] > 0 for o in mlperf if ":v0.6:" not in o["job"])
    model = load_device_speed()
    # Intervals are 95 % bands in log time: a factor between 1 and 10 either way, wider
    # across software stacks than within one.
    assert set(model.half_widths) == set(bench.WIDTH_KEYS)
    assert all(0 < h < math.log(10) for h in model.half_widths.values())
    for how in ("measured", "features"):
        assert model.half_widths[f"{how}|same stack"] < model.half_widths[f"{how}|across stacks"]


def test_held_out_jobs_relative_speed_falls_in_the_interval_and_beats_the_baselines():
    """Every Gavel job held out in turn (the model refitted without it): its V100 time per
    sample predicted from its P100 one at its batch per device lies in the shipped 95 %
    interval, and the median error is below both "same speed" and "ratio of fp32 peaks",
    and below the same model's point without the batch term (a job's small batch gains less
    from the faster device)."""
    bench = _bench()
    gavel = _gavel_or_skip(bench)
    others = bench.dle_observations(bench.scaling_dir())
    model = load_device_speed()
    errs = {"model": [], "same": [], "peak": [], "no batch term": []}
    inside = []
    for job in sorted({o["job"] for o in gavel}):
        train = [o for o in gavel + others if o["job"] != job]
        held = {o["cell"]: o for o in gavel if o["job"] == job}
        f = fit_device_speed(train, bench.FEATURES)
        log_k = f["effects"]["V100|fp32"] - f["effects"]["P100|fp32"]
        slope = f["batch_slopes"]["V100|fp32"] - f["batch_slopes"]["P100|fp32"]
        k = math.exp(log_k + slope * batch_term(held["V100|fp32"]["batch"]))
        truth = math.exp(held["V100|fp32"]["log_t"] - held["P100|fp32"]["log_t"])
        h = model.half_width(measured=True, same_stack=True)
        inside.append(k * math.exp(-h) <= truth <= k * math.exp(h))
        errs["model"].append(abs(k / truth - 1))
        errs["no batch term"].append(abs(math.exp(log_k) / truth - 1))
        errs["same"].append(abs(1 / truth - 1))
        errs["peak"].append(abs(9.3 / 15.7 / truth - 1))
    assert len(inside) == 19 and all(inside)
    med = {m: sorted(e)[len(e) // 2] for m, e in errs.items()}
    assert med["model"] < min(med["same"], med["peak"], med["no batch term"]), med


# Two devices the model's names know, with made-up datasheets (A = P100, B = V100).
_TOY_FEATURES = {
    "P100": {"peak_tflops": {"fp32": 10.0}, "mem_GBps": 500, "stack": "cuda"},
    "V100": {"peak_tflops": {"fp32": 20.0}, "mem_GBps": 1000, "stack": "cuda"},
}


def _toy(job: str, log_ratio: float, batch: float | None = None) -> list[dict]:
    a = {"job": job, "cell": "P100|fp32", "log_t": 0.3, "devices": 1, "batch": batch}
    return [a, {**a, "cell": "V100|fp32", "log_t": 0.3 + log_ratio}]


def _toy_model(fitted: dict):
    return model_from_dict({**fitted, "half_widths": {k: 0.1 for k in _bench().WIDTH_KEYS}})


def test_a_small_batch_per_device_gains_less_from_a_faster_device():
    """Jobs whose B/A ratio moves with the batch per device (launch- and host-bound small
    batches speed up less): the fit recovers the slope, and ``ratio(batch_per_device=)``
    prices each batch; without a batch, the point at the reference batch (32)."""
    truth = {b: -0.7 - 0.15 * math.log2(b / 32) for b in (4, 8, 16, 32, 64, 128, 256)}
    obs = [o for b, r in truth.items() for m in range(3) for o in _toy(f"m{m} b{b}", r, b)]
    model = _toy_model(fit_device_speed(obs, _TOY_FEATURES))
    for b in (4, 256):
        r = model.ratio("P100", "V100", "fp32", batch_per_device=b)
        assert r.ratio == pytest.approx(math.exp(truth[b]), rel=0.03), b
        assert f"at {b} per device" in r.basis
    assert model.ratio("P100", "V100", "fp32").ratio == pytest.approx(math.exp(truth[32]), rel=0.03)
    small = model.ratio("P100", "V100", "fp32", batch_per_device=4).ratio
    assert small > model.ratio("P100", "V100", "fp32", batch_per_device=256).ratio


def test_where_the_batch_is_unknown_the_device_count_stands_for_it():
    """A fixed global batch over more devices: each device's batch shrinks and its time per
    sample grows. Where the logs state the batch, the batch slope takes that up and the
    device count adds nothing; where they do not, the device count's own slope carries it."""
    obs = []
    for m in range(6):
        known = m % 2 == 0
        # Logs that state the batch: several global batches; the others: 256 over n.
        runs = [(8, 32), (8, 4), (32, 8), (128, 2), (128, 16)] if known else [
            (n, 256 / n) for n in (8, 32, 128)
        ]  # fmt: skip
        for n, batch in runs:
            log_t = 0.2 * m - 0.15 * math.log2(batch / 32)
            for cell, b in (("P100|fp32", 0.0), ("V100|fp32", -0.5)):
                obs.append(
                    {
                        "job": f"job {m}",
                        "cell": cell,
                        "log_t": log_t + b,
                        "devices": n,
                        "batch": batch if known else None,
                    }  # fmt: skip
                )
    fitted = fit_device_speed(obs, _TOY_FEATURES)
    assert fitted["batch_slope"] == pytest.approx(-0.15, abs=0.02)
    assert fitted["scale_slope"] == pytest.approx(0.0, abs=0.02)
    assert fitted["scale_slope_batch_unknown"] == pytest.approx(0.15, abs=0.02)


def test_the_in_sample_floor_is_the_job_by_device_interaction():
    """The benchmark's floor (the model fitted on every job, each pair's own included): 0
    where every job's B/A is one ratio, and as large as the jobs' spread around it where
    they disagree (no per-device ratio removes that part of the held-out error)."""
    bench = _bench()

    def jobs(ratios):
        return [
            {**o, "source": "toy"}
            for m, r in enumerate(ratios)
            for o in _toy(f"job {m}", math.log(r), 32.0)
        ]

    assert bench.in_sample_medians(jobs([0.5] * 6)) == pytest.approx(
        {"across device types": 0.0, "across CUDA GPU types": 0.0}, abs=1e-6
    )
    spread = bench.in_sample_medians(jobs([0.4, 0.45, 0.5, 0.5, 0.55, 0.6, 0.9]))
    assert set(spread) == {"across device types", "across CUDA GPU types"}
    assert 8 < spread["across device types"] < 20


def test_the_summary_counts_the_pairs_within_ten_percent_by_kind():
    """A median of 10 % needs half the pairs within 10 %: each row of the summary says what
    share is. Six jobs run 2x faster on the V100, a seventh 1.05x: held out, the six are
    predicted within 10 % both ways, the seventh (47-90 % off) is not ("same speed" is right
    on it only); the MLPerf CUDA rows exist only where MLPerf pairs do."""
    bench = _bench()
    obs = [
        {**o, "source": "gavel"}
        for m, r in enumerate([0.5] * 6 + [0.95])
        for o in _toy(f"job {m}", math.log(r), 32.0)
    ]
    summary = bench.summarise(bench.evaluate(obs))
    row = summary["leave-one-job-out / gavel P100<->V100"]
    assert row["cases"] == 14
    assert row["model"]["within_10_pct"] == pytest.approx(12 / 14)
    assert row["same_speed"]["within_10_pct"] == pytest.approx(2 / 14)
    assert not any("mlperf across CUDA" in k for k in summary)


def test_a_job_measured_on_many_systems_counts_once_in_the_job_weighted_median():
    """Job A has three pairs that the model gets right, B and C one each that it misses:
    over pairs the median is A's 1 %, with each job weighing one it is 50 %."""
    cases = [{"job": j} for j in ("A", "A", "A", "B", "C")]
    errors = [1.0, 1.0, 1.0, 50.0, 60.0]
    assert sorted(errors)[2] == 1.0
    assert _bench().job_weighted_median(cases, errors) == 50.0


def test_one_wild_measurement_does_not_drag_a_cells_effect():
    """Eight jobs run 2x faster on B; a ninth (a system unlike its device: another
    submitter's software, under one sample per device) was 5x slower there. The robust fit
    keeps B/A within 5 % of 0.5; plain least squares gives 0.65."""
    obs = [o for m in range(8) for o in _toy(f"job {m}", math.log(0.5))]
    obs += _toy("odd job", math.log(5.0))
    model = _toy_model(fit_device_speed(obs, _TOY_FEATURES))
    assert model.ratio("P100", "V100", "fp32").ratio == pytest.approx(0.5, rel=0.05)
    plain = _toy_model(fit_device_speed(obs, _TOY_FEATURES, huber=math.inf))
    assert plain.ratio("P100", "V100", "fp32").ratio == pytest.approx(0.65, abs=0.01)


def test_an_unknown_device_keeps_same_speed_with_a_stated_wide_interval():
    model = load_device_speed()
    wide = math.exp(model.half_width(measured=False, same_stack=False))
    r = model.ratio("MI250X", "V100 SXM2", "fp32", src_peak=47.9, tgt_peak=15.7)
    assert not r.learned and r.ratio == 1.0
    assert r.low == pytest.approx(1 / wide) and r.high == pytest.approx(47.9 / 15.7 * wide)
    assert "not in the device-speed model" in r.basis and "MI250X" in r.basis
    r = model.ratio("V100", "some-npu", "mixed")
    assert not r.learned and r.low == pytest.approx(1 / wide) and r.high == pytest.approx(wide)
    # A learned pair: a point inside its band; the same device type: exactly 1.
    r = model.ratio("V100 SXM2", "H100 SXM5", "mixed")
    assert r.learned and r.low < r.ratio < r.high and r.ratio < 1
    assert model.ratio("V100 SXM2", "V100 SXM3", "fp32").high == 1.0
    # No public job ran on both V100 and A100: that ratio rests on the feature line and
    # carries its width; P100 -> V100 (Gavel's jobs) carries the narrower measured one.
    r = model.ratio("V100 SXM2", "A100 SXM4", "mixed")
    assert r.high / r.ratio == pytest.approx(
        math.exp(model.half_width(measured=False, same_stack=True))
    )
    r = model.ratio("P100", "V100 SXM2", "fp32")
    assert r.high / r.ratio == pytest.approx(
        math.exp(model.half_width(measured=True, same_stack=True))
    )


def test_cluster_whatif_prices_compute_on_another_device_and_names_the_term():
    """A job measured on a DGX-1 predicted on a DGX H100: the compute moves by the learned
    device speed, its interval is the model's, the report names "device speed" and what
    narrows it; on the job's own platform nothing changes."""
    job = load_job(EXAMPLE)
    own = predict(job, [1], "dgx1-v100")[0]
    assert own.wide_term == "" and own.step_low_s == own.step_high_s
    k = load_device_speed().ratio("V100", "H100 SXM5", job.precision)
    h100 = predict(job, [1], "dgx-h100")[0]
    assert h100.step_time_s == pytest.approx(own.step_time_s * k.ratio)
    assert h100.step_low_s == pytest.approx(own.step_time_s * k.low)
    assert h100.step_high_s == pytest.approx(own.step_time_s * k.high)
    assert h100.wide_term == "device"
    assert any("learned device speed" in a for a in h100.assumptions)
    out = cli("whatif", EXAMPLE, "--cluster", "dgx-h100", "--ranks", "1")
    assert out.returncode == 0, out.stderr
    assert "Widest interval at 1 devices: device speed (assumed)" in out.stdout
    assert "a run of the job on the target platform" in out.stdout
    rows = json.loads(
        cli("whatif", EXAMPLE, "--cluster", "dgx-h100", "--ranks", "1", "--json").stdout
    )
    assert rows[0]["wide_term"] == "device" and rows[0]["step_time_s"] == pytest.approx(
        h100.step_time_s
    )


def test_cluster_whatif_prices_the_device_speed_at_the_jobs_batch_per_device():
    """The what-if hands the job's batch per device to the device-speed model: a job at 4
    per device moves by the ratio at 4, not by the one at 32."""
    job = load_job(EXAMPLE)
    small = dataclasses.replace(job, batch_per_device=4)
    model = load_device_speed()
    k4 = model.ratio("V100", "H100 SXM5", job.precision, batch_per_device=4)
    k32 = model.ratio("V100", "H100 SXM5", job.precision, batch_per_device=32)
    assert k4.ratio != pytest.approx(k32.ratio, rel=1e-3)
    own = predict(small, [1], "dgx1-v100")[0]
    h100 = predict(small, [1], "dgx-h100")[0]
    assert h100.step_time_s == pytest.approx(own.step_time_s * k4.ratio)
