"""Real MPI ranks drive a plain Lens: the cross-rank exchange gives identical phase tables."""

import json
import sys

import numpy as np
import pytest
from conftest import REPO, mpiexec, run_ranks

from ailens import load_run
from ailens.phases import assign, simo

pytestmark = pytest.mark.parallel


def test_ranks_with_different_work_hold_identical_phase_tables(tmp_path):
    out = run_ranks(
        [
            mpiexec(),
            "-n",
            "2",
            sys.executable,
            str(REPO / "tests/parallel/plain_lens_mpi.py"),
            str(tmp_path),
            "40",
        ],
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    tables = [json.loads((tmp_path / f"table-{r}.json").read_text()) for r in (0, 1)]
    assert sorted(t["rank"] for t in tables) == [0, 1]
    a, b = tables
    assert a["ticks"] == b["ticks"] == 80
    for key in ("ids", "weights", "simo", "time"):
        assert a[key] == b[key], key
    assert sum(a["weights"]) <= 80 and len(a["ids"]) >= 1
    run = load_run(tmp_path)
    assert run.complete and run.world_size == 2
    assert run.ranks[0].meta["run_id"] == run.ranks[1].meta["run_id"]
    # The online table was built from the SUM of both ranks' magnitudes: it matches the
    # offline SIMO of the recorded work, tick by tick.
    work = np.stack([r.events["work"] for r in run.ranks], axis=1)
    ids = assign(simo(work), tolerance=1, key=run.ranks[0].events["op"].astype(np.int64))
    assert [int(np.sum(ids == i)) for i in a["ids"]] == a["weights"]  # kept phases (>= 1 % of time)
    assert [int(simo(work)[np.argmax(ids == i)]) for i in a["ids"]] == a["simo"]
