"""Chrome trace export: structure, per-track order, rank alignment, phase labels."""

import json
import subprocess
import sys
import threading
from collections import defaultdict

import numpy as np
import pytest
from conftest import REPO
from synthetic import write_run

import ailens
from ailens.phases import assign
from ailens.report.export import _lanes, write_chrome_trace


def export(run_dir, out, *extra):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "ailens",
            "export",
            str(run_dir),
            "--format",
            "chrome",
            "-o",
            str(out),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    return doc, res


def check_structure(doc: dict, ranks: set[int]) -> dict:
    """Required keys, process per rank, slices in order and non-overlapping on every thread."""
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    names = {}
    tracks = defaultdict(list)
    for e in events:
        for key in ("ph", "pid", "tid", "name"):
            assert key in e, (key, e)
        if e["ph"] == "M":
            if e["name"] == "process_name":
                names[e["pid"]] = e["args"]["name"]
            continue
        assert e["ph"] == "X", e
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0 and e["dur"] >= 0, e
        tracks[(e["pid"], e["tid"])].append(e)
    assert set(names) == ranks
    for pid, name in names.items():
        assert name.startswith(f"rank {pid} (") and name.endswith(")"), name
    assert {pid for pid, _ in tracks} == ranks
    for key, evs in tracks.items():
        ts = np.array([e["ts"] for e in evs])
        end = ts + np.array([e["dur"] for e in evs])
        assert np.all(np.diff(ts) >= 0), f"track {key} not monotonic"
        assert np.all(ts[1:] >= end[:-1] - 1e-3), f"slices overlap on track {key}"
    return tracks


@pytest.fixture(scope="module")
def syn(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("exp") / "run", ranks=3, steps=40, seed=5)


def test_chrome_trace_structure_and_phase_labels(syn, tmp_path):
    doc, res = export(syn.path, tmp_path / "t.json")
    assert "wrote" in res.stderr and "perfetto" in res.stderr
    tracks = check_structure(doc, {0, 1, 2})
    assert doc["otherData"]["ailens_run_id"] == syn.run_id
    ids = assign(syn.simo(), 1, key=syn.op.astype(np.int64))
    for r in range(3):
        colls = sorted(
            (
                e
                for (pid, _), evs in tracks.items()
                if pid == r
                for e in evs
                if e["cat"] == "collective"
            ),
            key=lambda e: e["args"]["tick"],
        )
        assert [e["args"]["tick"] for e in colls] == list(range(syn.n_ticks))
        assert [e["name"] for e in colls] == [syn.op_names[o] for o in syn.op]
        assert [e["args"]["bytes"] for e in colls] == syn.nbytes.tolist()
        assert [e["args"]["step"] for e in colls] == syn.step.tolist()
        assert [e["args"]["phase"] for e in colls] == ids.tolist()
        assert [e["args"]["simo"] for e in colls] == syn.simo().tolist()
        steps = [e for e in tracks[(r, 0)] if e["cat"] == "step"]
        assert len(steps) == syn.steps
        compute = [e for e in tracks[(r, 1)] if e["cat"] == "compute"]
        assert len(compute) >= syn.n_ticks - 1


def test_ranks_are_aligned_by_start_wall_ns(syn, tmp_path):
    """Synthetic collectives end at the same instant on every rank although the ranks' clocks
    started at different times: after alignment the ends coincide within 1 µs."""
    assert len(set(syn.start_wall_ns.tolist())) == 3
    doc, _ = export(syn.path, tmp_path / "t.json")
    ends = defaultdict(dict)
    for e in doc["traceEvents"]:
        if e.get("cat") == "collective":
            ends[e["args"]["tick"]][e["pid"]] = e["ts"] + e["dur"]
    spread = max(max(v.values()) - min(v.values()) for v in ends.values())
    assert spread < 1.0, spread
    # And the absolute position: rank 0's first collective ends where the simulation put it.
    first = ends[0][0]
    assert first == pytest.approx((syn.end_ns[0, 0] - syn.offsets_ns.min()) / 1e3, abs=1.0)


def test_export_of_a_killed_rank_and_without_phases(tmp_path):
    s = write_run(tmp_path / "run", ranks=2, steps=60, kill_rank=1, kill_step=30)
    doc, res = export(s.path, tmp_path / "t.json", "--no-phases")
    assert "WARNING: rank 1" in res.stderr
    tracks = check_structure(doc, {0, 1})
    counts = {
        r: sum(
            1
            for (pid, _), evs in tracks.items()
            if pid == r
            for e in evs
            if e["cat"] == "collective"
        )
        for r in (0, 1)
    }
    assert counts == {0: s.n_ticks, 1: s.ticks_written[1]}
    assert doc["otherData"]["complete"] is False
    assert all("phase" not in e["args"] for e in doc["traceEvents"] if e.get("cat") == "collective")


def test_default_output_goes_into_the_run_directory(syn):
    res = subprocess.run(
        [sys.executable, "-m", "ailens", "export", str(syn.path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    check_structure(json.loads((syn.path / "trace.json").read_text()), {0, 1, 2})


def test_lanes_keep_overlapping_collectives_apart():
    b = np.array([0, 1, 2, 10, 11])
    e = np.array([5, 3, 4, 12, 20])
    lane = _lanes(b, e)
    assert lane.tolist() == [0, 1, 2, 0, 1]
    for k in set(lane.tolist()):
        m = lane == k
        assert np.all(b[m][1:] >= e[m][:-1])
    assert _lanes(np.array([0, 5]), np.array([5, 6])).tolist() == [0, 0]


def test_overlapping_collectives_from_a_real_lens(tmp_path):
    """DDP-style bucket overlap recorded by the real Lens exports onto separate lanes."""
    with ailens.Lens(run_dir=tmp_path, chunk_events=8) as lens:
        for _ in range(5):
            ticks = [lens.collective_begin("allreduce", 1000 + i) for i in range(3)]
            t = threading.Thread(
                target=lambda ts=ticks: [lens.collective_end(k) for k in reversed(ts)]
            )
            t.start()
            t.join()
            lens.collective_begin("broadcast", 8)
            lens.collective_end()
            lens.step_end()
    run = ailens.load_run(tmp_path)
    out = tmp_path / "t.json"
    n = write_chrome_trace(run, out)
    doc = json.loads(out.read_text())
    assert n == len(doc["traceEvents"])
    tracks = check_structure(doc, {0})
    colls = [e for evs in tracks.values() for e in evs if e["cat"] == "collective"]
    assert len(colls) == 20
    assert sorted(e["args"]["tick"] for e in colls) == list(range(20))
