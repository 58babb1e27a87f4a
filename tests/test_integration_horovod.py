"""ailens.integrations.horovod with two real Horovod ranks (horovodrun --gloo) for
horovod.torch and horovod.tensorflow: every collective once with its bytes, identical phase
tables on both ranks, unchanged weights, a fault inside ailens that training survives, and a
TensorFlow custom loop with only the attach line (steps inferred, the run ended at exit)."""

import json
import re
import subprocess
import sys

import pytest
from conftest import REPO, run_ranks, venv_tool

from ailens import load_run

pytestmark = pytest.mark.parallel

QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0"}
STEPS = 20
# The tiny model of both scripts: Linear/Dense 16->32 (+bias), 32->4 (+bias in torch).
TORCH_GRADS = sorted([16 * 32 * 4, 32 * 4, 32 * 4 * 4, 4 * 4])
TF_GRADS = sorted([16 * 32 * 4, 32 * 4, 32 * 4 * 4])


def _launcher(module: str):
    tool = venv_tool("horovodrun")
    if tool is None:
        pytest.skip("horovodrun is not installed")
    pytest.importorskip(module)
    cache: dict = {}

    def get(script: str, tmp_path_factory, mode: str, fault: bool = False):
        if (mode, fault) not in cache:
            run_dir = tmp_path_factory.mktemp(f"{mode}{'-fault' if fault else ''}")
            cmd = [
                tool,
                "--gloo",
                "-np",
                "2",
                "-H",
                "localhost:2",
                sys.executable,
                str(REPO / "tests/parallel" / script),
                str(run_dir),
                str(STEPS),
                mode,
                "1:5" if fault else "",
            ]
            out = run_ranks(cmd, timeout=150, env=QUIET)
            assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
            docs = [json.loads(m) for m in re.findall(r"RESULT (\{.*\})", out.stdout)]
            res = {d["rank"]: d for d in docs}
            assert sorted(res) == [0, 1], out.stdout[-3000:]  # every rank reported
            cache[mode, fault] = res, run_dir
        return cache[mode, fault]

    return get


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory):
    get = _launcher("horovod.torch")
    return lambda mode, fault=False: get("hvd_torch.py", tmp_path_factory, mode, fault)


@pytest.fixture(scope="module")
def tf_runs(tmp_path_factory):
    get = _launcher("horovod.tensorflow")
    return lambda mode, fault=False: get("hvd_tf.py", tmp_path_factory, mode, fault)


def _names(rank) -> list[str]:
    return [rank.ops[i] for i in rank.events["op"]]


def _check_agreement(res):
    for r in res.values():
        assert r["disabled"] is None and r["restored"]
        assert r["steps"] == STEPS
    assert res[0]["ticks"] == res[1]["ticks"]
    assert res[0]["table"] == res[1]["table"]  # identical online phase tables
    assert res[0]["table"]["n_ticks"] == res[0]["ticks"]


def test_horovod_torch_records_each_collective_once_with_its_bytes(torch_runs):
    res, run_dir = torch_runs("lens")
    _check_agreement(res)
    assert res[0]["ticks"] == 4 * STEPS + 6
    # What a checkpoint writes, learned at the first step: plain SGD keeps no state.
    assert all(r["checkpoint_bytes"] == sum(TORCH_GRADS) for r in res.values())
    run = load_run(run_dir)
    assert run.complete and run.world_size == 2 and run.meta["framework"] == "horovod.torch"
    for rank in run.ranks:
        ev, names = rank.events, _names(rank)
        assert len(names) == 4 * STEPS + 6
        # hvd.DistributedOptimizer: one allreduce per gradient per step, the gradient's bytes.
        for step in range(STEPS):
            in_step = ev["step"] == step
            assert sorted(ev["nbytes"][in_step].tolist()) == TORCH_GRADS, step
            assert {names[i] for i in in_step.nonzero()[0]} == {"allreduce"}
        # The script's own calls: allreduce, allreduce_async+synchronize, allreduce_,
        # allgather (local input 3x2 float64), broadcast (5 int64), grouped_allreduce (6+2 f32).
        assert names[-6:] == ["allreduce"] * 3 + ["allgather", "broadcast", "allreduce"]
        assert ev["nbytes"][-6:].tolist() == [24, 24, 24, 48, 40, 32]
        assert (ev["t_end"] >= ev["t_begin"]).all()  # every async handle was ended


def test_horovod_torch_weights_identical_with_and_without_lens(torch_runs):
    lensed, _ = torch_runs("lens")
    plain, _ = torch_runs("nolens")
    assert len({r["checksum"] for r in [*lensed.values(), *plain.values()]}) == 1


def test_horovod_torch_fault_in_ailens_leaves_training_intact(torch_runs):
    res, run_dir = torch_runs("lens", fault=True)
    plain, _ = torch_runs("nolens")
    assert "injected" in res[1]["disabled"] and res[0]["disabled"] is None
    assert res[0]["ticks"] == res[1]["ticks"] and res[0]["steps"] == res[1]["steps"] == STEPS
    assert {r["checksum"] for r in [*res.values(), *plain.values()]} == {plain[0]["checksum"]}
    assert any("rank 1" in w and "disabled" in w for w in load_run(run_dir).warnings)


def test_horovod_tensorflow_records_graph_and_eager_collectives(tf_runs):
    res, run_dir = tf_runs("lens")
    _check_agreement(res)
    assert res[0]["ticks"] == 3 + 3 * STEPS + 4
    # Steps inferred while the graph was traced: the Python hooks, one begin per graph tick.
    assert all(r["python_hooks"] == 3 + 3 * STEPS for r in res.values())
    run = load_run(run_dir)
    assert run.complete and run.meta["framework"] == "horovod.tensorflow"
    for rank in run.ranks:
        ev, names = rank.events, _names(rank)
        # broadcast_variables (inside a tf.function): one broadcast per variable.
        assert names[:3] == ["broadcast"] * 3 and sorted(ev["nbytes"][:3].tolist()) == TF_GRADS
        # DistributedGradientTape inside tf.function: recorded at run time, every step.
        for step in range(STEPS):
            in_step = (ev["step"] == step).nonzero()[0]
            in_step = in_step[in_step >= 3]
            assert sorted(ev["nbytes"][in_step].tolist()) == TF_GRADS, step
            assert {names[i] for i in in_step} == {"allreduce"}
        # Eager calls: allreduce (6 f32), allgather (3x2 f64), broadcast (5 i64), grouped (6+2).
        assert names[-4:] == ["allreduce", "allgather", "broadcast", "allreduce"]
        assert ev["nbytes"][-4:].tolist() == [24, 48, 40, 32]
        assert (ev["t_end"] >= ev["t_begin"]).all()


def test_horovod_tensorflow_manual_steps_time_graph_collectives_in_the_graph(tf_runs):
    """``attach(hvd, steps="manual")`` + ``step_end()`` after each call: no Python call per
    graph collective (timed in the graph, read in bulk), yet every collective is one tick with
    its op and bytes, in the step it ran in, in the same order on both ranks."""
    res, run_dir = tf_runs("manual")
    plain, _ = tf_runs("nolens")
    _check_agreement(res)
    assert all(r["python_hooks"] == 0 for r in res.values())
    assert res[0]["ticks"] == 3 + 3 * STEPS + 4
    assert {r["checksum"] for r in [*res.values(), *plain.values()]} == {plain[0]["checksum"]}
    run = load_run(run_dir)
    assert run.complete
    order = {tuple(_names(rank)) + tuple(rank.events["nbytes"].tolist()) for rank in run.ranks}
    assert len(order) == 1  # the same tick order on both ranks
    for rank in run.ranks:
        ev, names = rank.events, _names(rank)
        assert names[:3] == ["broadcast"] * 3 and sorted(ev["nbytes"][:3].tolist()) == TF_GRADS
        assert ev["step"][:3].tolist() == [0] * 3
        step_end = rank.steps["t_ns"]
        assert len(step_end) == STEPS
        for step in range(STEPS):
            in_step = (ev["step"] == step).nonzero()[0]
            in_step = in_step[(in_step >= 3) & (in_step < len(names) - 4)]
            assert sorted(ev["nbytes"][in_step].tolist()) == TF_GRADS, step
            assert {names[i] for i in in_step} == {"allreduce"}
            # Timed in the graph: inside the step, each a real interval.
            lo = step_end[step - 1] if step else 0
            assert (ev["t_begin"][in_step] > lo).all()
            assert (ev["t_end"][in_step] <= step_end[step]).all()
            assert (ev["t_end"][in_step] > ev["t_begin"][in_step]).all()
        assert names[-4:] == ["allreduce", "allgather", "broadcast", "allreduce"]
        assert ev["nbytes"][-4:].tolist() == [24, 48, 40, 32]
        assert (ev["t_end"] >= ev["t_begin"]).all()


def test_horovod_tensorflow_manual_steps_fault_leaves_training_intact(tf_runs):
    res, _ = tf_runs("manual", fault=True)
    plain, _ = tf_runs("nolens")
    assert "injected" in res[1]["disabled"] and res[0]["disabled"] is None
    assert res[0]["ticks"] == res[1]["ticks"] and res[0]["steps"] == res[1]["steps"] == STEPS
    assert {r["checksum"] for r in [*res.values(), *plain.values()]} == {plain[0]["checksum"]}


def test_horovod_tensorflow_weights_identical_with_and_without_lens(tf_runs):
    lensed, _ = tf_runs("lens")
    plain, _ = tf_runs("nolens")
    assert len({r["checksum"] for r in [*lensed.values(), *plain.values()]}) == 1


def test_horovod_tensorflow_fault_in_ailens_leaves_training_intact(tf_runs):
    res, _ = tf_runs("lens", fault=True)
    plain, _ = tf_runs("nolens")
    assert "injected" in res[1]["disabled"] and res[0]["disabled"] is None
    assert res[0]["ticks"] == res[1]["ticks"]
    assert {r["checksum"] for r in [*res.values(), *plain.values()]} == {plain[0]["checksum"]}


def test_horovod_tensorflow_custom_loop_needs_only_the_attach_line(tf_runs):
    """A tf.function loop with DistributedGradientTape, no step_end, no close: each call of
    the training function is a step, the last one ended and the run closed at exit."""
    res, run_dir = tf_runs("oneline")
    plain, _ = tf_runs("nolens")
    assert {r["checksum"] for r in [*res.values(), *plain.values()]} == {plain[0]["checksum"]}
    run = load_run(run_dir)
    assert run.complete and run.meta["framework"] == "horovod.tensorflow"
    for rank in run.ranks:
        ev, names = rank.events, _names(rank)
        assert rank.info["closed"] and rank.n_events == 3 + 3 * STEPS + 4
        assert len(rank.steps["step"]) == STEPS
        # The broadcasts and the first call in step 0, then one step per call: every step's
        # collectives are its gradients' allreduces; the eager ones after the loop in the last.
        assert ev["step"][: 3 + 3].tolist() == [0] * 6
        grads = ev["step"][3:-4]
        for step in range(STEPS):
            assert sorted(ev["nbytes"][3:-4][grads == step].tolist()) == TF_GRADS, step
        assert names[-4:] == ["allreduce", "allgather", "broadcast", "allreduce"]
        assert ev["step"][-4:].tolist() == [STEPS - 1] * 4
        facts = rank.meta["run"]
        assert facts["threads"] == 1 and facts["interop_threads"] == 1
        assert facts["framework_version"].startswith("horovod ")
    forecast = json.loads((run_dir / "forecast.json").read_text())
    assert forecast["total_steps"] == STEPS  # learned when the run ended
    report = subprocess.run(
        [sys.executable, "-m", "ailens", "report", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert report.returncode == 0, report.stderr
    assert "Actual total time" in report.stdout and "has not finished" not in report.stdout


def test_tf_custom_loop_told_nothing_forecasts_the_end_of_its_pass(tmp_path):
    """Issue 30, 9: Horovod's TF2 example with only the attach line (a loop over
    ``dataset.take(n)``, steps inferred) ended with "no early forecast": the dataset that
    trains says its length (its cardinality), so the end of the pass is forecast from the
    first steps, and one line says how to give the run's length."""
    tool = venv_tool("horovodrun")
    if tool is None:
        pytest.skip("horovodrun is not installed")
    pytest.importorskip("horovod.tensorflow")
    steps = 40
    script = REPO / "tests/parallel/hvd_tf_loop.py"
    cmd = [tool, "--gloo", "-np", "2", "-H", "localhost:2", sys.executable,
           str(script), str(tmp_path / "run"), str(steps)]  # fmt: skip
    out = run_ranks(cmd, timeout=150, env=QUIET)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    docs = {d["rank"]: d for d in map(json.loads, re.findall(r"RESULT (\{.*\})", out.stdout))}
    assert sorted(docs) == [0, 1], out.stdout[-3000:]
    for r in docs.values():
        assert r["disabled"] is None and r["steps"] == steps
        # The steps per epoch from dataset.take(40): the pass is the epoch.
        assert r["steps_per_epoch"] == steps
        shown = [(done, end) for done, _, end in r["seen"] if end is not None]
        assert shown and shown[0][0] <= 5, r["seen"][:8]
        assert {end for _, end in shown} == {steps}
    hints = [n for n in docs[0]["notices"] if "total_steps=N" in n]
    assert len(hints) == 1 and "epoch 1 ends in" in hints[0], docs[0]["notices"]
