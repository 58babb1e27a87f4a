"""It never breaks the training it watches: killed ranks, faults inside ailens, full and
read-only disks.

Parallel tests launch real MPI ranks (tests/parallel/fault_*.py) with a hard timeout and
check every rank's output; the disk tests use a real tiny tmpfs where this machine lets us
mount one (root), and an injected ENOSPC (a file object that refuses bytes) everywhere.
"""

import contextlib
import errno
import functools
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import REPO, mpiexec, run_ranks, tagged_records

from ailens import Lens, load_run
from ailens.record import writer as writer_module
from ailens.record.writer import WriterThread

TRAIN = str(REPO / "tests/parallel/fault_train_mpi.py")
KILL = str(REPO / "tests/parallel/fault_kill_mpi.py")
PATTERN = (512, 256, 8)  # bytes of the three collectives of each step in fault_kill_mpi.py


def _by_rank(stdout: str, tag: str = "RESULT") -> dict[int, dict]:
    return {r["rank"]: r for r in tagged_records(stdout, tag)}


def _warnings(result: dict) -> list[str]:
    return [msg for level, msg in result["logs"] if level == "WARNING"]


def _report(run_dir) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ailens", "report", str(run_dir)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _assert_prefix(trace, ticks: int | None = None) -> None:
    """The events read back are exactly the first n recorded (fault_kill_mpi.py's pattern)."""
    n = trace.n_events
    k = np.arange(n)
    assert np.array_equal(trace.events["nbytes"], np.array(PATTERN)[k % 3])
    assert np.array_equal(trace.events["step"], k // 3)
    assert np.all(trace.events["t_end"] >= trace.events["t_begin"])
    if ticks is not None:
        assert n <= ticks


def _train(run_dir: str, steps: int, *args: str) -> dict[int, dict]:
    out = run_ranks(
        [mpiexec(), "-n", "2", sys.executable, TRAIN, run_dir, str(steps), *args], timeout=60
    )
    assert out.returncode == 0, out.stderr
    results = _by_rank(out.stdout)
    assert sorted(results) == [0, 1], out.stdout
    return results


# ---------------------------------------------------------------- an exception inside ailens


@pytest.mark.parallel
def test_injected_fault_on_one_rank_leaves_training_unchanged(tmp_path):
    steps = 60
    reference = _train("-", steps)
    clean = _train(str(tmp_path / "clean"), steps)
    faulty = _train(str(tmp_path / "faulty"), steps, "--fault=1:5")
    for rank in (0, 1):  # same weights, bit for bit, with and without ailens
        assert reference[rank]["weights"] == clean[rank]["weights"] == faulty[rank]["weights"]
        assert reference[rank]["loss"] == faulty[rank]["loss"]
        assert faulty[rank]["steps"] == steps and faulty[rank]["ticks"] == clean[rank]["ticks"]
        assert not _warnings(clean[rank])
    assert faulty[0]["disabled"] is None and not _warnings(faulty[0])
    assert "injected fault" in faulty[1]["disabled"]
    warned = _warnings(faulty[1])
    assert len(warned) == 1 and "rank 1" in warned[0] and "training continues" in warned[0]

    run = load_run(tmp_path / "faulty")
    r0, r1 = run.ranks
    assert r0.complete and r0.n_events == faulty[0]["ticks"]
    # Rank 1 kept what it recorded before the fault (5 collectives and the one in flight).
    assert r1.n_events == 6 and r1.events["t_end"][-1] == -1 and "injected" in r1.info["disabled"]
    # Rank 0 went on exchanging with the disabled rank and knows it was out.
    online = json.loads((tmp_path / "faulty" / "phases-online.json").read_text())
    assert online["disabled_ranks"] == 1
    rep = _report(tmp_path / "faulty")
    assert rep.returncode == 0, rep.stderr
    assert "ailens disabled itself" in rep.stdout


# ---------------------------------------------------------------- a rank killed with SIGKILL


@pytest.mark.parallel
def test_sigkilled_rank_when_the_launcher_aborts_the_job(tmp_path):
    out = run_ranks(
        [mpiexec(), "-n", "2", sys.executable, KILL, str(tmp_path), "abort"], timeout=60
    )
    assert out.returncode != 0  # the launcher reports the killed rank and kills the rest
    kill = tagged_records(out.stdout, "KILL")
    assert len(kill) == 1, out.stdout + out.stderr
    kill = kill[0]
    disk = {
        r: max([d["events"] for d in tagged_records(out.stdout, "DISK") if d["rank"] == r] or [0])
        for r in (0, 1)
    }
    run = load_run(tmp_path)
    assert len(run.ranks) == 2 and not run.complete
    r0, r1 = run.ranks
    # The killed rank reads back up to its last flushed chunk, no torn chunk, nothing invented.
    assert kill["on_disk"] <= r1.n_events <= kill["ticks"] and r1.n_events % 32 == 0
    _assert_prefix(r1, kill["ticks"])
    # Rank 0, killed by the launcher, keeps everything it had flushed.
    assert r0.n_events >= disk[0]
    _assert_prefix(r0)
    for t in (r0, r1):
        assert not t.complete and any("closing record" in p for p in t.problems)
    rep = _report(tmp_path)
    assert rep.returncode == 0, rep.stderr
    warned = [line for line in rep.stdout.splitlines() if line.startswith("WARNING")]
    assert any("rank 1" in w and "closing record" in w for w in warned), rep.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch_env_ranks(script: str, args: list[str], n: int = 2, timeout: float = 60):
    """Start n ranks the way SLURM or Kubernetes do (rank and rendezvous in the environment),
    wait for all with one hard deadline; returns (returncode, stdout, stderr) per rank."""
    port = str(_free_port())
    procs = []
    for rank in range(n):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(n),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, script, *args],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
        )
    deadline = time.monotonic() + timeout
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=max(deadline - time.monotonic(), 1))
            results.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
        details = [p.communicate() for p in procs]
        pytest.fail(f"a rank hung past {timeout}s: {details}")
    return results


@pytest.mark.parallel
def test_sigkilled_rank_while_the_survivor_finishes_and_closes(tmp_path):
    pytest.importorskip("torch.distributed")
    (rc0, out0, err0), (rc1, out1, err1) = _launch_env_ranks(
        str(REPO / "tests/parallel/fault_kill_torch.py"), [str(tmp_path)]
    )
    assert rc1 == -9 and rc0 == 0, err0 + err1
    kill, done = tagged_records(out1, "KILL"), tagged_records(out0, "DONE")
    assert len(kill) == 1 and len(done) == 1, out0 + out1
    kill, done = kill[0], done[0]
    assert done["disabled"] is None and done["steps"] == 70
    assert kill["exchanged"] == kill["ticks"] == done["ticks"]  # killed after the last exchange

    run = load_run(tmp_path)
    r0, r1 = run.ranks
    # The survivor's trace is whole: every gradient bucket, every step, its closing record.
    assert r0.complete and r0.n_events == done["ticks"] and len(r0.steps["step"]) == 70
    # The killed rank holds what it had flushed, not the rows still in its buffer, and they
    # are the same logical ticks rank 0 recorded: same op, bytes and step, tick by tick.
    assert kill["on_disk"] <= r1.n_events <= kill["ticks"]
    assert kill["flushed"] < kill["ticks"]  # something was lost with the process
    n = r1.n_events
    for col in ("op", "nbytes", "step"):
        assert np.array_equal(r1.events[col], r0.events[col][:n]), col
    assert not r1.complete and any("closing record" in p for p in r1.problems)
    rep = _report(tmp_path)
    assert rep.returncode == 0, rep.stderr
    warned = [line for line in rep.stdout.splitlines() if line.startswith("WARNING")]
    assert any("rank 1" in w for w in warned) and not any("rank 0 " in w for w in warned)


# ---------------------------------------------------------------- full and read-only disks


@contextlib.contextmanager
def tiny_tmpfs(where, size: str = "64k"):
    """A real tmpfs of ``size`` at ``where`` (root only); skips the test when unavailable."""
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    cmd = ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


@pytest.mark.parallel
def test_full_disk_on_real_ranks(tmp_path):
    mpiexec()
    reference = _train("-", 1500)
    with tiny_tmpfs(tmp_path / "mnt", "32k") as mnt:
        results = _train(str(mnt / "run"), 1500)
        run = load_run(mnt / "run")
        rep = _report(mnt / "run")
    for rank in (0, 1):
        r = results[rank]
        assert r["weights"] == reference[rank]["weights"] and r["steps"] == 1500
        warned = _warnings(r)
        assert len(warned) == 1 and "No space left" in warned[0]
        assert "training continues" in warned[0]
        assert r["disabled"] is None  # the online phases went on; only the trace is cut short
    assert len(run.ranks) == 2 and not run.complete
    for t in run.ranks:  # each file is a readable prefix of its rank's events
        assert 0 < t.n_events < results[t.rank]["ticks"] and t.problems
    assert rep.returncode == 0, rep.stderr


class FullDisk:
    """Stands in for the trace's file object: takes ``budget`` more bytes, then fails with
    ENOSPC, with a partial write first, as a real full disk does."""

    def __init__(self, f, budget: int) -> None:
        self.f, self.budget, self.refused = f, budget, 0

    def write(self, data) -> int:
        if self.budget <= 0:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        n = self.f.write(data[: self.budget])
        self.budget -= n
        return n

    def __getattr__(self, name):
        return getattr(self.f, name)


def full_disk(budget: int):
    """A writer factory whose trace file is a FullDisk of ``budget`` bytes after the header,
    and the list that receives that FullDisk."""
    disks: list[FullDisk] = []

    def wrap(f):
        disks.append(FullDisk(f, budget))
        return disks[-1]

    return functools.partial(WriterThread, file_wrapper=wrap), disks


def _fill(lens: Lens, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        lens.collective_begin("allreduce", 8 * (i % 7 + 1))
        lens.collective_end()
        if i % 10 == 9:
            lens.step_end()


def _wait_refused(lens: Lens) -> None:
    """Block until the writer has met the full disk: its queue is processed in order, so a
    round trip through it (a no-op op list) shows it has tried every earlier chunk."""
    seen = threading.Event()
    real = writer_module._ENCODERS["ops"]
    writer_module._ENCODERS["ops"] = lambda names: (seen.set(), real(names))[1]
    try:
        lens.recorder.writer.put_ops(list(lens.recorder.op_names))
        assert seen.wait(30)
    finally:
        writer_module._ENCODERS["ops"] = real


def _warning_messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_full_disk_that_frees_up_loses_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ailens")
    writer, disks = full_disk(3000)
    lens = Lens(run_dir=tmp_path, chunk_events=64, writer=writer)
    disk = disks[0]
    _fill(lens, 2000)
    lens.flush()
    _wait_refused(lens)
    assert lens.disabled is None and lens.ticks == 2000 and disk.refused
    disk.budget = 10**9  # space comes back (a log rotated, a checkpoint deleted)
    _fill(lens, 1000, 2000)
    lens.close()
    assert disk.refused > 0
    warned = _warning_messages(caplog)
    assert len(warned) == 1 and "No space left" in warned[0], warned
    run = load_run(tmp_path)
    t = run.ranks[0]
    assert run.complete and t.n_events == 3000 and len(t.steps["step"]) == 300
    assert np.array_equal(t.events["nbytes"], 8 * (np.arange(3000) % 7 + 1))
    assert any("written again, nothing lost" in r.getMessage() for r in caplog.records)


def test_disk_full_until_close_leaves_a_readable_prefix(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ailens")
    lens = Lens(run_dir=tmp_path, chunk_events=64, writer=full_disk(4000)[0])
    header = (tmp_path / "rank-00000.ailens").stat().st_size
    _fill(lens, 3000)
    lens.close()
    assert lens.disabled is None and lens.ticks == 3000 and lens.steps == 300
    assert len(_warning_messages(caplog)) == 1
    t = load_run(tmp_path).ranks[0]
    assert 0 < t.n_events < 3000 and t.n_events % 64 == 0  # whole chunks only, nothing torn
    assert np.array_equal(t.events["nbytes"], 8 * (np.arange(t.n_events) % 7 + 1))
    assert not t.complete and t.problems
    assert (tmp_path / "rank-00000.ailens").stat().st_size <= header + 4000


def test_backlog_over_its_cap_stops_the_trace_not_the_training(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(writer_module, "BACKLOG_BYTES", 2000)
    caplog.set_level(logging.INFO, logger="ailens")
    lens = Lens(run_dir=tmp_path, chunk_events=64, writer=full_disk(2500)[0])
    _fill(lens, 5000)
    lens.close()
    assert lens.ticks == 5000 and lens.steps == 500  # still counted, the exchange stays in step
    assert lens.disabled and "No space left" in lens.disabled
    warned = _warning_messages(caplog)
    assert 1 <= len(warned) <= 2 and all("No space left" in w for w in warned)
    t = load_run(tmp_path).ranks[0]
    assert 0 < t.n_events < 5000
    assert np.array_equal(t.events["nbytes"], 8 * (np.arange(t.n_events) % 7 + 1))


def test_real_full_disk_then_space_freed(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="ailens")
    with tiny_tmpfs(tmp_path / "mnt", "64k") as mnt:
        lens = Lens(run_dir=mnt / "run", chunk_events=256)
        # Fill the disk to the last block, then record until the writer meets it (how much
        # fits in the trace's last partly used block depends on how well chunks compress).
        ballast = mnt / "ballast"
        with open(ballast, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError as e:
                assert e.errno == errno.ENOSPC
        n = 0
        while not _warning_messages(caplog) and n < 100_000:
            _fill(lens, 1000, n)
            n += 1000
            lens.flush()
            _wait_refused(lens)
        assert lens.disabled is None and _warning_messages(caplog)
        ballast.unlink()  # space comes back halfway through the run
        _fill(lens, 2000, n)
        lens.close()
        warned = _warning_messages(caplog)
        t = load_run(mnt / "run").ranks[0]
    assert len(warned) == 1 and "No space left" in warned[0], warned
    assert t.complete and t.n_events == n + 2000
    assert np.array_equal(t.events["nbytes"], 8 * (np.arange(n + 2000) % 7 + 1))


def test_read_only_run_directory(tmp_path, caplog):
    with tiny_tmpfs(tmp_path / "mnt") as mnt:
        (mnt / "run").mkdir()
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True, timeout=30)
        with caplog.at_level(logging.WARNING, logger="ailens"):
            lens = Lens(run_dir=mnt / "run")
            _fill(lens, 100)
            lens.close()
        assert list((mnt / "run").iterdir()) == []
    assert lens.disabled and lens.ticks == 100 and lens.steps == 10
    warned = _warning_messages(caplog)
    assert len(warned) == 1 and "cannot write to the run directory" in warned[0]
    assert "Traceback" not in caplog.text


def test_disk_already_full_at_start(tmp_path, caplog):
    with tiny_tmpfs(tmp_path / "mnt", "16k") as mnt:
        (mnt / "ballast").write_bytes(b"\0" * (16 << 10))
        with caplog.at_level(logging.WARNING, logger="ailens"):
            lens = Lens(run_dir=mnt / "run")
            _fill(lens, 100)
            lens.close()
    assert lens.disabled and "No space left" in lens.disabled and lens.ticks == 100
    assert len(_warning_messages(caplog)) == 1
