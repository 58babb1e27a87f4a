"""ailens.integrations.mpi: buffer-spec bytes and period finding in-process, and the
parallel tier on 2 real mpiexec ranks (tests/parallel/mpi_script.py prints one
``RESULT {json}`` line per rank)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import rank_results

MPI = pytest.importorskip("mpi4py.MPI")
from ailens.integrations.mpi import _StepInference, buffer_nbytes, object_nbytes  # noqa: E402

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


def infer(keys):
    inf = _StepInference(None)
    inf.keys = list(keys)
    return inf.find()


def test_period_found_after_prologue():
    cycle = [("allreduce", 8), ("allreduce", 8), ("allreduce", 8), ("broadcast", 4)]
    assert infer([("broadcast", 0)] + cycle * 4) == (4, 1)
    # Three identical collectives in a row are not an iteration: too short to be trusted.
    assert infer([("broadcast", 0)] + cycle * 2 + cycle[:3]) == (0, 0)
    assert infer([("allreduce", i) for i in range(40)]) == (0, 0)


def run_mpi(tmp_path: Path, *args: str, env: dict | None = None) -> list[dict]:
    if not MPIEXEC.exists():
        pytest.skip("mpiexec not found next to the interpreter")
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, str(SCRIPT), "--run-dir",
           str(tmp_path / "run"), *args]
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
        # Inferred iterations: 12 collectives each, the early ones merged into step 0.
        assert r["period"] == 12
        assert r["lens_steps"] + r["merged"] == r["iterations"]
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
    results = run_mpi(tmp_path, "--lens", env={"AILENS_INJECT_FAULT": "1:5"})
    assert results[0]["disabled"] is None
    assert "injected fault" in results[1]["disabled"]
    # The disabled rank keeps counting and inferring, so both agree and nobody waits.
    assert results[0]["ticks"] == results[1]["ticks"]
    assert results[0]["lens_steps"] == results[1]["lens_steps"]
    for r, base in zip(results, baseline, strict=True):
        assert r["checksum"] == base["checksum"]
