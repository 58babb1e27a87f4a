"""ailens.integrations.mpi: buffer-spec bytes in-process, and the parallel tier on 2 real
mpiexec ranks: tests/parallel/mpi_script.py (every kind of collective; one ``RESULT {json}``
line per rank) and tests/parallel/mpi_kmeans.py (a short k-means loop with only the wrap
line: its steps inferred, its run ended at exit)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, rank_results

MPI = pytest.importorskip("mpi4py.MPI")
from ailens.integrations.mpi import buffer_nbytes, object_nbytes  # noqa: E402

from ailens import load_run  # noqa: E402

SCRIPT = Path(__file__).parent / "parallel" / "mpi_script.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"
TIMEOUT = 60


def test_buffer_specs():
    a = np.zeros(10)
    assert buffer_nbytes(a) == 80
    assert buffer_nbytes([a, MPI.DOUBLE]) == 80
    assert buffer_nbytes([a, 4, MPI.DOUBLE]) == 32
    assert buffer_nbytes([a, (3, 0), MPI.DOUBLE]) == 24
    assert buffer_nbytes([a, [2, 3], [0, 2], MPI.DOUBLE]) == 40
    assert buffer_nbytes(bytearray(7)) == 7
    assert buffer_nbytes(MPI.IN_PLACE) is None
    assert buffer_nbytes(None) is None
    assert object_nbytes(np.ones(3, np.float32)) == 12
    assert object_nbytes([np.ones(2), b"abc"]) == 19
    assert object_nbytes({"not": "known"}) == 0


def run_mpi(tmp_path: Path, *args: str, env: dict | None = None) -> list[dict]:
    if not MPIEXEC.exists():
        pytest.skip("mpiexec not found next to the interpreter")
    cmd = [
        str(MPIEXEC),
        "-n",
        "2",
        sys.executable,
        str(SCRIPT),
        "--run-dir",
        str(tmp_path / "run"),
        *args,
    ]
    return rank_results(cmd, cwd=tmp_path, env=env, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> list[dict]:
    return run_mpi(tmp_path_factory.mktemp("nolens"))


@pytest.mark.parallel
def test_every_collective_recorded_once_with_its_bytes(tmp_path, baseline):
    results = run_mpi(tmp_path, "--lens")
    for r, base in zip(results, baseline, strict=True):
        assert r["disabled"] is None
        assert r["recorded_counts"] == r["expected_counts"]
        assert r["recorded_bytes"] == r["expected_bytes"]
        assert r["events"] == r["ticks"] == sum(r["expected_counts"].values())
        assert r["open_events"] == 0, "Wait, Test and Waitall must all end their ticks"
        # Inferred iterations: 12 collectives each, found in the second iteration, so every
        # iteration is a step (the last one ended at close).
        assert r["period"] == 12 and r["merged"] == 0
        assert r["lens_steps"] == r["iterations"]
        assert r["trace_steps"] == r["lens_steps"]
        assert r["checksum"] == base["checksum"], "ailens changed the computation"
    a, b = results
    assert a["ticks"] == b["ticks"]
    assert a["table"] == b["table"] and a["table"]["phases"]
    online = json.loads((tmp_path / "run" / "phases-online.json").read_text())
    assert online["table"] == a["table"]


@pytest.mark.parallel
def test_manual_steps(tmp_path):
    results = run_mpi(tmp_path, "--lens", "--steps-mode", "manual")
    for r in results:
        assert r["period"] == 0 and r["merged"] == 0
        assert r["lens_steps"] == r["trace_steps"] == r["iterations"]
    assert results[0]["table"] == results[1]["table"]


@pytest.mark.parallel
def test_fault_in_ailens_leaves_the_job_intact(tmp_path, baseline):
    results = run_mpi(tmp_path, "--lens", "--fault", "1:5")
    assert results[0]["disabled"] is None
    assert "injected fault" in results[1]["disabled"]
    # The disabled rank keeps counting and inferring, so both agree and nobody waits.
    assert results[0]["ticks"] == results[1]["ticks"]
    assert results[0]["lens_steps"] == results[1]["lens_steps"]
    for r, base in zip(results, baseline, strict=True):
        assert r["checksum"] == base["checksum"]


# ---------------------------------------------------------------- one line is enough

KMEANS = Path(__file__).parent / "parallel" / "mpi_kmeans.py"


def run_kmeans(run_dir: Path, iterations: int, *flags: str):
    """k-means with only the wrap line; returns the run read back from its trace files."""
    if not MPIEXEC.exists():
        pytest.skip("mpiexec not found next to the interpreter")
    cmd = [
        str(MPIEXEC),
        "-n",
        "2",
        sys.executable,
        str(KMEANS),
        str(run_dir),
        str(iterations),
        *flags,
    ]
    rank_results(cmd, cwd=run_dir.parent, timeout=TIMEOUT)
    return load_run(run_dir)


def report_text(run_dir: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "ailens", "report", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def check_steps(run, iterations: int) -> None:
    """Every iteration a step, on both ranks, and the run closed (the last step too)."""
    assert run.complete and run.world_size == 2
    for rank in run.ranks:
        assert rank.n_events == 1 + 3 * iterations  # the Bcast, then 3 collectives each
        assert len(rank.steps["step"]) == iterations
        # Steps end before each iteration's first collective (the first one a collective
        # late, when the loop was found in iteration 2); the last one at the end of the run.
        first = rank.events["step"][1 + 3 * np.arange(2, iterations)]
        assert first.tolist() == list(range(2, iterations))


@pytest.mark.parallel
def test_short_loop_records_every_iteration_as_a_step(tmp_path):
    run = run_kmeans(tmp_path / "run", 4)
    check_steps(run, 4)
    assert "has not finished" not in report_text(tmp_path / "run")


@pytest.mark.parallel
def test_evaluation_collectives_stay_inside_their_iteration(tmp_path):
    """An evaluation every 5 iterations adds a scalar allreduce like the loop's own last one:
    it belongs to its iteration, so the steps still count iterations (not collectives / 3)."""
    iterations = 30
    run = run_kmeans(tmp_path / "run", iterations, "--eval-every", "5", "--total")
    assert run.complete and run.world_size == 2
    for rank in run.ranks:
        assert rank.n_events == 1 + 3 * iterations + iterations // 5
        assert len(rank.steps["step"]) == iterations


@pytest.mark.parallel
@pytest.mark.parametrize("total", [True, False])
def test_run_without_close_ends_at_exit(tmp_path, total):
    """The issue's case: 40 iterations, no comm.close(): the last step is ended and the run
    closed at interpreter exit; the forecast's actual total is known (given or learned)."""
    run = run_kmeans(tmp_path / "run", 40, "--no-close", *(["--total"] if total else []))
    check_steps(run, 40)
    assert all(r.info.get("closed") for r in run.ranks)
    forecast = json.loads((tmp_path / "run" / "forecast.json").read_text())
    assert forecast["total_steps"] == 40 and forecast["actual_total_s"] > 0
    if total:
        # Issue 30, 12: a forecast from the first steps (it was step 5, the exchange
        # cadence's first evaluation): at 10 % of the steps there is one.
        assert forecast["history"][0][0] <= 4, forecast["history"]
    text = report_text(tmp_path / "run")
    assert "Actual total time" in text and "has not finished" not in text


# ---------------------------------------------------------------- the flattened hot path


def _collectives(comm, iterations: int, manual: bool) -> float:
    """Every kind of blocking collective (payloads the hot path sizes itself, and specs it
    leaves to the general path), an evaluation every 5 iterations; one rank (COMM_SELF)."""
    a, out = np.arange(12.0), np.empty(12)
    total = 0.0
    for i in range(iterations):
        comm.Allreduce(a, out, op=MPI.SUM)
        comm.Allreduce(MPI.IN_PLACE, out, op=MPI.SUM)
        comm.Allreduce([a, 4, MPI.DOUBLE], [out, 4, MPI.DOUBLE], op=MPI.SUM)
        comm.Allreduce(sendbuf=a, recvbuf=out, op=MPI.SUM)
        total += comm.allreduce(float(i), op=MPI.SUM)
        total += sum(x.sum() for x in comm.allreduce([a, np.ones(3)], op=MPI.SUM))
        comm.bcast({"i": i}, root=0)
        comm.bcast(np.ones(5, np.float32), root=0)
        comm.Bcast(out, root=0)
        comm.Allgather(a, np.empty(12))
        comm.Scatter(a, np.empty(12), root=0)
        comm.Barrier()
        if i % 5 == 4:  # interrupts the followed pattern
            total += comm.allreduce(1, op=MPI.SUM)
        if manual:
            comm.step_end()
    return total + float(out.sum())


def _record_all(tmp_path: Path, steps: str, path: str, monkeypatch, fault: str = "") -> dict:
    """One run's recording, every blocking call through ``path``: "general" (``LensComm._record``,
    the path before the flattened one), "flattened" (the Python methods) or "compiled" (their
    compiled form, ``BlockingCall``); what step inference observed, in order. ``fault``:
    "begin" or "end": that Lens method raises from the 300th tick on."""
    from ailens.integrations import mpi

    if path == "compiled" and mpi.BLOCKING_CALL is None:
        pytest.skip("ailens._recorder not built")
    with monkeypatch.context() as m:
        if path != "compiled":
            m.setattr(mpi, "BLOCKING_CALL", None)
        if path == "general":
            for name, (op, nbytes_of) in {**mpi._BUFFER_OPS, **mpi._OBJECT_OPS}.items():

                def via_record(self, *args, _n=name, _o=op, _nb=nbytes_of, **kwargs):
                    return self._record(_n, _o, _nb, False, args, kwargs)

                m.setattr(mpi.LensComm, name, via_record)
        run_dir = tmp_path / path / steps / fault
        comm = mpi.wrap(MPI.COMM_SELF, run_dir=str(run_dir), steps=steps)
        observed, real_observe = [], comm._observe
        records, real_call = [], comm.call  # only _record calls it (a spy on _record
        # itself would be a frame between _record and the calling line, which keys inference)

        def observe(op, key):
            observed.append((op, key))
            return real_observe(op, key)

        def call(fn, op, *args, **kwargs):
            records.append(op)
            return real_call(fn, op, *args, **kwargs)

        comm._observe, comm.call = observe, call
        if fault:
            lens, name = comm.lens, f"collective_{fault}"
            real = getattr(lens, name)

            def faulty(*args):
                if lens.ticks >= 300:
                    raise RuntimeError("injected fault")
                return real(*args)

            setattr(lens, name, faulty)
        checksum = _collectives(comm, 40, steps == "manual")
        lens = comm.lens
        finder = comm._finder  # how many observations it made (the compiled path makes
        # the common ones in C, past the spy on _observe)
        facts = dict(ticks=lens.ticks, steps=lens.steps, disabled=lens.disabled,
                     period=comm.inferred_period, merged=comm.steps_merged,
                     observations=None if finder is None else finder._n)  # fmt: skip
        comm.close()
    if fault:
        return dict(facts, checksum=checksum, observed=observed)
    rank = load_run(run_dir).ranks[0]
    events = {k: rank.events[k].tolist() for k in ("op", "nbytes", "step")}
    ops = [rank.ops[i] for i in events.pop("op")]
    return dict(facts, checksum=checksum, ops=ops, observed=observed, records=records, **events)


@pytest.mark.parametrize("fast_path", ["flattened", "compiled"])
@pytest.mark.parametrize("steps", ["infer", "manual"])
def test_the_hot_path_records_what_the_general_path_records(
    tmp_path, monkeypatch, steps, fast_path
):
    """Ticks, ops, bytes, each tick's step, the steps and the number of step inference's
    observations are the same through the flattened methods, and through their compiled
    form, as through ``_record`` (the observations in order where all reach ``_observe``);
    and the fast path is taken (fewer ``Attachment.call`` calls) once steps are followed by
    op or marked."""
    fast = _record_all(tmp_path, steps, fast_path, monkeypatch)
    general = _record_all(tmp_path, steps, "general", monkeypatch)
    collectives = 40 * 12 + 40 // 5
    assert fast["disabled"] is None and fast["ticks"] == collectives
    assert fast["steps"] == 40 if steps == "manual" else fast["period"] == 12
    for key in ("ticks", "steps", "period", "merged", "checksum", "ops", "nbytes", "step",
                "observations"):  # fmt: skip
        assert fast[key] == general[key], key
    if fast_path == "flattened" or steps == "manual":
        assert fast["observed"] == general["observed"]
    else:  # the loop followed in C: the search and the step ends reach the spy on _observe
        assert len(fast["observed"]) < len(general["observed"])
    assert len(general["records"]) == collectives
    assert len(fast["records"]) < collectives // 2
    assert sorted(set(fast["nbytes"])) == [0, 20, 32, 96, 120]


@pytest.mark.parametrize("fast_path", ["flattened", "compiled"])
@pytest.mark.parametrize("fault", ["begin", "end"])
@pytest.mark.parametrize("steps", ["infer", "manual"])
def test_a_fault_on_the_hot_path_fails_open_as_on_the_general_path(
    tmp_path, monkeypatch, steps, fault, fast_path
):
    """A Lens that raises in the flattened or the compiled path: ailens off with the same
    reason, every call made once (same results), every tick still counted, steps still
    followed."""
    fast = _record_all(tmp_path, steps, fast_path, monkeypatch, fault)
    general = _record_all(tmp_path, steps, "general", monkeypatch, fault)
    assert "injected fault" in fast["disabled"]
    assert fast["ticks"] == 40 * 12 + 40 // 5
    for key in ("disabled", "ticks", "steps", "period", "merged", "checksum", "observations"):
        assert fast[key] == general[key], key
    if fast_path == "flattened":
        assert fast["observed"] == general["observed"]


def test_a_framework_error_through_the_compiled_path_ends_its_tick_and_passes_unchanged(tmp_path):
    """mpi4py's own exception (buffers of different sizes) reaches the script as it is; the
    collective still counts as one tick, ended, and ailens stays on; the next call records."""
    from ailens.integrations import mpi

    if mpi.BLOCKING_CALL is None:
        pytest.skip("ailens._recorder not built")
    from ailens import _recorder
    from ailens.record import steps

    assert (mpi._SIZE_FIRST, mpi._SIZE_ZERO) == (_recorder.SIZE_FIRST, _recorder.SIZE_ZERO)
    assert steps._FOLLOW == _recorder.FINDER_FOLLOW  # the state the C path follows in
    comm = mpi.wrap(MPI.COMM_SELF, run_dir=str(tmp_path / "run"), steps="manual")
    assert isinstance(vars(comm)["Allreduce"], mpi.BLOCKING_CALL)
    with pytest.raises(ValueError, match="mismatch in send count"):
        comm.Allreduce(np.ones(4), np.empty(2), op=MPI.SUM)
    out = np.empty(4)
    comm.Allreduce(np.ones(4), out, op=MPI.SUM)
    assert out.tolist() == [1.0] * 4
    assert comm.lens.ticks == 2 and comm.lens.disabled is None
    comm.step_end()
    comm.close()
    events = load_run(tmp_path / "run").ranks[0].events
    assert events["nbytes"].tolist() == [32, 32]
    assert (events["t_end"] >= events["t_begin"]).all()


def test_the_compiled_path_waits_for_another_thread_inside_the_lock(tmp_path):
    """While another thread holds the attachment's lock (its observation and tick in one
    order), a call that step inference follows waits for it, as the Python path does, and
    then records; the steps stay those of the loop."""
    import threading
    import time

    from ailens.integrations import mpi

    if mpi.BLOCKING_CALL is None:
        pytest.skip("ailens._recorder not built")
    comm = mpi.wrap(MPI.COMM_SELF, run_dir=str(tmp_path / "run"))
    a, out = np.ones(4), np.empty(4)
    for _ in range(20):  # the loop found and followed
        comm.Allreduce(a, out, op=MPI.SUM)
        comm.allreduce(1.0, op=MPI.SUM)
    assert comm.inferred_period == 2 and not comm._finder.needs_keys
    comm.Allreduce(a, out, op=MPI.SUM)  # a step end: the next call is followed in C
    held, done = threading.Event(), []

    def hold() -> None:
        with comm.lock:
            held.set()
            time.sleep(0.3)
            done.append(comm.lens.ticks)

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    comm.allreduce(1.0, op=MPI.SUM)
    t.join()
    assert done == [41]  # the call's tick came after the other thread let go
    assert comm.lens.ticks == 42 and comm.lens.steps == 20 and comm.lens.disabled is None
    comm.close()
