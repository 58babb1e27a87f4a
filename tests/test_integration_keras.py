"""LensCallback with real Keras: plain tf-keras and Keras 3 in one process, and
horovod.tensorflow.keras with two real ranks under horovodrun."""

import json
import os
import re
import socket
import subprocess
import sys

import pytest
from conftest import REPO, run_ranks, venv_tool

from ailens import load_run

PLAIN = REPO / "tests/parallel/keras_plain.py"
HVD = REPO / "tests/parallel/keras_hvd.py"
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONHASHSEED": "0"}


def _results(out) -> dict[int, dict]:
    """RESULT lines by rank (``rank`` key, 0 for a single process)."""
    docs = [json.loads(m) for m in re.findall(r"RESULT (\{.*\})", out.stdout)]
    return {d.get("rank", 0): d for d in docs}


@pytest.mark.parametrize("flavour", ["legacy", "keras3"])
def test_plain_keras_marks_every_step_and_keeps_the_weights(tmp_path, flavour):
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf_keras" if flavour == "legacy" else "keras")
    cmd = [sys.executable, str(PLAIN), str(tmp_path), flavour, "0"]
    out = run_ranks(cmd, timeout=120, env=QUIET)
    assert out.returncode == 0, out.stderr[-3000:]
    r = _results(out)[0]
    assert r["base"].startswith("tf_keras" if flavour == "legacy" else "keras.")
    assert r["lensed"] == r["plain"]  # the callback changes nothing in training
    assert r["steps"] == 24 and r["total_steps"] == 24  # 3 epochs x 8 batches, from Keras
    assert r["closed"] and r["disabled"] is None and r["framework"] == "keras"
    assert r["ticks"] == 0 and r["world_size"] == 1  # one process: no collective
    run = load_run(tmp_path)
    rank = run.ranks[0]
    assert run.complete and list(rank.steps["step"]) == list(range(24))
    # What Keras knows: the schedule (validation_freq=2 read from fit's arguments), the
    # validation after epoch 2 as an "eval" section, the run facts.
    marks = rank.marks
    sched = [m for m in marks if m["kind"] == "schedule"]
    assert len(sched) == 1 and sched[0]["steps_per_epoch"] == 8 and sched[0]["epochs"] == 3
    assert sched[0]["eval_every_epochs"] == 2 and sched[0]["total_steps"] == 24
    # Issue 30, 10: the validation's batches (16 samples at fit's batch 8), so an evaluation
    # not run yet is priced from the step time.
    assert sched[0]["eval_steps"] == 2
    # Issue 31, 3: the forecast in the epoch logs, so History keeps it (and TensorBoard,
    # CSVLogger, W&B after the callback): every epoch, the time still to go shrinking.
    hist = r["history"]
    assert len(hist["ailens_eta_s"]) == len(hist["ailens_total_s"]) == 3, hist
    # With epochs still to come the time to go has a spread; at the last epoch's end the
    # forecast may be the one made at the last step (on a loaded machine its cache is a
    # second old): nothing to go, +/- 0.
    pm = hist["ailens_eta_pm_s"]
    assert len(pm) == 3 and all(v > 0 for v in pm[:-1]) and pm[-1] >= 0
    assert hist["ailens_eta_s"][0] > hist["ailens_eta_s"][-1] >= 0
    evals = [m for m in marks if m["kind"] == "section"]
    assert [(m["name"], m["step"]) for m in evals] == [("eval", 16)]
    assert evals[0]["t_end_ns"] > evals[0]["t_begin_ns"]
    facts = rank.meta["run"]
    assert facts["param_count"] == 16 * 32 + 32 + 32 * 4 + 4 and facts["batch_size"] == 8
    assert facts["threads"] >= 1 and facts["interop_threads"] >= 1
    assert facts["framework_version"].startswith("tf_keras" if flavour == "legacy" else "keras")


@pytest.mark.parametrize("flavour", ["legacy", "keras3"])
def test_the_forecast_shows_in_keras_progress_bar(tmp_path, flavour):
    pytest.importorskip("tensorflow")
    pytest.importorskip("tf_keras" if flavour == "legacy" else "keras")
    cmd = [sys.executable, str(PLAIN), str(tmp_path), flavour, "0", "1"]
    out = run_ranks(cmd, timeout=120, env=QUIET)
    assert out.returncode == 0, out.stderr[-3000:]
    r = _results(out)[0]
    assert r["lensed"] == r["plain"] and r["steps"] == 24
    # Keras' own bar (one per epoch), with the forecast once there is one: shown as is,
    # the predicted total constant between predictions (not averaged over the epoch).
    bars = re.findall(r"ailens_total_s: ([\d.]+) - ailens_eta_s: ([\d.]+)", out.stdout)
    assert bars, out.stdout[-2000:]
    last_total, last_eta = map(float, bars[-1])
    assert last_eta <= last_total and last_eta < 1.0  # the last bar: the run about done
    # Issue 30, 12: the bar's forecast is the Lens's at every step end, not one made steps
    # earlier (it was refreshed twice a second or when the steps doubled).
    watched = [(s, shown, live) for s, shown, live in r["watched"] if live is not None]
    assert len(watched) >= 20, r["watched"]
    assert all(shown == pytest.approx(live) for _, shown, live in watched), watched


def test_keras_stops_training_when_the_lens_says_so(tmp_path):
    pytest.importorskip("tf_keras")
    cmd = [sys.executable, str(PLAIN), str(tmp_path), "legacy", "5"]
    out = run_ranks(cmd, timeout=120, env=QUIET)
    assert out.returncode == 0, out.stderr[-3000:]
    r = _results(out)[0]
    # The stop vote lands during step 6: fit ends after it, in the first epoch, and closes.
    assert r["steps"] == 6 and r["epochs_run"] == 1 and r["closed"]


# ---------------------------------------------------------------- horovod.tensorflow.keras

EPOCHS = 3
STEPS = EPOCHS * 8  # 64 samples / batch 8


@pytest.fixture(scope="module")
def hvd_runs(tmp_path_factory):
    """Runs of keras_hvd.py by (mode, fault), each launched once when a test first needs it."""
    tool = venv_tool("horovodrun")
    if tool is None:
        pytest.skip("horovodrun is not installed")
    pytest.importorskip("horovod.tensorflow.keras")
    cache: dict = {}

    def get(mode: str, fault: bool = False, epochs: int = EPOCHS, config: str = "{}"):
        key = mode, fault, epochs, config
        if key not in cache:
            run_dir = tmp_path_factory.mktemp(f"keras-hvd-{mode}{'-fault' if fault else ''}")
            env = {**QUIET, "TF_USE_LEGACY_KERAS": "1"}
            cmd = [
                tool,
                "--gloo",
                "-np",
                "2",
                "-H",
                "localhost:2",
                sys.executable,
                str(HVD),
                str(run_dir),
                str(epochs),
                mode,
                config,
                "1:5" if fault else "",
            ]
            out = run_ranks(cmd, timeout=150, env=env)
            assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
            res = _results(out)
            assert sorted(res) == [0, 1], out.stdout[-3000:]
            cache[key] = res, run_dir
        return cache[key]

    return get


@pytest.mark.parallel
def test_keras_horovod_records_each_collective_once(hvd_runs):
    res, run_dir = hvd_runs("lens")
    # Per rank: one broadcast per variable, then 4 gradient allreduces per step.
    for r in res.values():
        assert r["framework"] == "keras+horovod" and r["closed"] and r["disabled"] is None
        assert r["steps"] == STEPS and r["total_steps"] == STEPS and r["restored"]
        assert r["python_hooks"] == 0  # timed inside Keras' graphs: no Python per collective
    assert res[0]["ticks"] == res[1]["ticks"]
    assert res[0]["table"] == res[1]["table"] and res[0]["table"]["n_ticks"] == res[0]["ticks"]
    run = load_run(run_dir)
    assert run.complete and run.world_size == 2
    grads = sorted([16 * 32 * 4, 32 * 4, 32 * 4 * 4, 4 * 4])
    for rank in run.ranks:
        ev, ops = rank.events, rank.ops
        names = [ops[i] for i in ev["op"]]
        assert len(names) == res[rank.rank]["ticks"]
        # BroadcastGlobalVariablesCallback broadcasts after the first batch: the 4 model
        # variables, then the optimizer's (its iteration counter, int64); all in step 0.
        bcast = [i for i, n in enumerate(names) if n == "broadcast"]
        assert sorted(ev["nbytes"][bcast[:4]].tolist()) == grads and 8 in ev["nbytes"][bcast]
        assert bcast[0] == 4 and set(ev["step"][bcast].tolist()) == {0}
        reduce = [i for i, n in enumerate(names) if n == "allreduce"]
        assert len(reduce) == 4 * STEPS
        step_end = rank.steps["t_ns"]
        for step in range(STEPS):
            in_step = [i for i in reduce if ev["step"][i] == step]
            assert sorted(ev["nbytes"][in_step].tolist()) == grads, step
            # Timed in the graph, in the batch it belongs to.
            lo = step_end[step - 1] if step else 0
            assert (ev["t_begin"][in_step] > lo).all()
            assert (ev["t_end"][in_step] <= step_end[step]).all()
        assert (ev["t_end"] >= ev["t_begin"]).all()  # every tick ended


@pytest.mark.parallel
def test_keras_horovod_weights_identical_with_and_without_lens(hvd_runs):
    lensed, _ = hvd_runs("lens")
    plain, _ = hvd_runs("nolens")
    sums = {r["checksum"] for r in [*lensed.values(), *plain.values()]}
    assert len(sums) == 1


@pytest.mark.parallel
def test_keras_horovod_fault_in_ailens_leaves_training_intact(hvd_runs):
    res, run_dir = hvd_runs("lens", fault=True)
    plain, _ = hvd_runs("nolens")
    assert res[1]["disabled"] and "injected" in res[1]["disabled"]
    assert res[0]["disabled"] is None
    assert res[0]["ticks"] == res[1]["ticks"] and res[0]["steps"] == res[1]["steps"] == STEPS
    assert {r["checksum"] for r in [*res.values(), *plain.values()]} == {plain[0]["checksum"]}
    assert any("rank 1" in w and "disabled" in w for w in load_run(run_dir).warnings)


@pytest.mark.parallel
def test_keras_horovod_early_stop_stops_every_rank_at_the_same_step(hvd_runs):
    # A loose tolerance, so the signature is reached early even on a noisy shared machine.
    config = json.dumps({"early_stop": True, "signature_rel_tol": 0.5})
    res, _ = hvd_runs("lens", epochs=30, config=config)
    a, b = res[0], res[1]
    assert a["should_stop"] and b["should_stop"]
    assert a["steps"] == b["steps"] < 30 * 8 and a["epochs_run"] == b["epochs_run"] < 30
    assert a["ticks"] == b["ticks"] and a["checksum"] == b["checksum"] and a["closed"]


# ---------------------------------------------------------------- tf.distribute

MWMS = REPO / "tests/parallel/keras_mwms.py"


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _run_workers(run_dir, mode: str, timeout: float = 120) -> dict[int, dict]:
    """Two MultiWorkerMirroredStrategy workers (TF_CONFIG per process), both waited on with
    one hard deadline; every worker must report."""
    cluster = {"worker": [f"localhost:{p}" for p in _free_ports(2)]}
    procs = []
    for i in range(2):
        env = {
            **os.environ,
            **QUIET,
            "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(MWMS), str(run_dir), mode],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                start_new_session=True,
                cwd=REPO,
            )
        )
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout))
    except subprocess.TimeoutExpired:
        for p in procs:
            os.killpg(p.pid, 9)
        pytest.fail("a tf.distribute worker hung")
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-2000:] + err[-3000:]
    docs = [json.loads(m) for out, _ in outs for m in re.findall(r"RESULT (\{.*\})", out)]
    res = {d["rank"]: d for d in docs}
    assert sorted(res) == [0, 1]
    return res


@pytest.mark.parallel
def test_keras_multiworker_records_the_strategy_allreduce(tmp_path):
    pytest.importorskip("tf_keras")
    res = _run_workers(tmp_path, "lens")
    plain = _run_workers(tmp_path / "plain", "nolens")
    for r in res.values():
        assert r["world_size"] == 2 and r["framework"] == "keras+tf.distribute"
        assert r["steps"] == 8 and r["closed"] and r["disabled"] is None
    assert res[0]["run_id"] == res[1]["run_id"]  # the exchange through the strategy works
    assert res[0]["ticks"] == res[1]["ticks"] > 0
    assert {r["checksum"] for r in [*res.values(), *plain.values()]} == {plain[0]["checksum"]}
    run = load_run(tmp_path)
    grads = (16 * 8 + 8 + 8 * 4 + 4) * 4  # one batched all-reduce of every float32 gradient
    for rank in run.ranks:
        ev = rank.events
        for step in range(8):
            assert (ev["nbytes"][ev["step"] == step] == grads).sum() == 1, step
        assert (ev["t_end"] >= ev["t_begin"]).all()


# ---------------------------------------------------------------- the mnist example

MNIST = REPO / "examples/mnist"


@pytest.fixture()
def mnist_data():
    sys.path.insert(0, str(MNIST))
    try:
        import mnist_data

        yield mnist_data
    finally:
        sys.path.remove(str(MNIST))


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_reader_reads_what_was_written(tmp_path, mnist_data, suffix):
    import numpy as np

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (7, 28, 28), dtype=np.uint8)
    path = tmp_path / f"train-images-idx3-ubyte{suffix}"
    mnist_data.write_idx(path, images)
    raw = path.read_bytes() if not suffix else __import__("gzip").decompress(path.read_bytes())
    assert raw[:4] == bytes([0, 0, 0x08, 3]) and raw[4:8] == (7).to_bytes(4, "big")
    back = mnist_data.read_idx(path)
    assert back.dtype == np.uint8 and back.shape == (7, 28, 28) and (back == images).all()
    floats = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    mnist_data.write_idx(tmp_path / "f.idx", floats)
    assert (mnist_data.read_idx(tmp_path / "f.idx") == floats).all()


def test_idx_reader_rejects_broken_files(tmp_path, mnist_data):
    import numpy as np

    (tmp_path / "bad").write_bytes(b"\x01\x02\x08\x01" + b"\x00" * 8)
    with pytest.raises(mnist_data.IdxError, match="bad magic"):
        mnist_data.read_idx(tmp_path / "bad")
    mnist_data.write_idx(tmp_path / "short", np.zeros((4, 2), np.uint8))
    (tmp_path / "short").write_bytes((tmp_path / "short").read_bytes()[:-1])
    with pytest.raises(mnist_data.IdxError, match="needs 8"):
        mnist_data.read_idx(tmp_path / "short")
    with pytest.raises(FileNotFoundError, match="train-images"):
        mnist_data.load_idx_dir(tmp_path)


def _write_fake_mnist(mnist_data, root, n_train=256, n_test=64):
    """MNIST-shaped IDX files: a bright square whose position encodes the label."""
    import numpy as np

    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 40, (n, 28, 28)).astype(np.uint8)
        for i, lab in enumerate(labels):
            images[i, 2 + 2 * lab : 6 + 2 * lab, 10:18] = 255
        mnist_data.write_idx(root / f"{prefix}-images-idx3-ubyte.gz", images)
        mnist_data.write_idx(root / f"{prefix}-labels-idx1-ubyte.gz", labels)


def test_idx_dir_loads_as_mnist(tmp_path, mnist_data):
    _write_fake_mnist(mnist_data, tmp_path)
    x, y, xt, yt = mnist_data.load(tmp_path)
    assert x.shape == (256, 28, 28, 1) and xt.shape == (64, 28, 28, 1)
    assert x.dtype.name == "float32" and 0 <= x.min() and x.max() == 1.0
    assert y.shape == (256,) and set(y.tolist()) <= set(range(10))


@pytest.mark.parallel
@pytest.mark.parametrize("framework", ["keras", "torch"])
def test_mnist_example_runs_two_ranks(tmp_path, mnist_data, framework):
    if venv_tool("horovodrun") is None:
        pytest.skip("horovodrun is not installed")
    pytest.importorskip("horovod.tensorflow.keras" if framework == "keras" else "horovod.torch")
    idx = tmp_path / "idx"
    idx.mkdir()
    _write_fake_mnist(mnist_data, idx)
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        str(MNIST / "run"),
        "--ranks",
        "2",
        "--framework",
        framework,
        "--epochs",
        "2",
        "--idx-dir",
        str(idx),
        "--run-dir",
        str(run_dir),
    ]
    out = run_ranks(cmd, timeout=150, env=QUIET)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"mean step time \(lens, .*\): [\d.]+ ms over \d+ steps", out.stdout)
    assert "ACCURACY test=" in out.stdout
    run = load_run(run_dir)
    assert run.complete and run.world_size == 2
    assert run.meta["framework"] == ("keras+horovod" if framework == "keras" else "horovod.torch")
    steps = 2 * (256 // 2 // 32)  # 2 epochs x 4 batches per rank
    for rank in run.ranks:
        assert len(rank.steps["step"]) == steps and rank.n_events >= 8 * steps
