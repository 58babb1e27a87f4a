"""Bounded resources and safe files: flat memory over a long run, a small trace per event,
no leaked threads or descriptors, nothing on a read path that executes data, and files that
are never world-writable.

The 10 M-tick and 10 M-event versions of the first two checks live in
benchmarks/bench_trace_size.py (see docs/robustness.md for the figures).
"""

import ast
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import psutil
import pytest
from conftest import REPO

from ailens import Lens, load_run

BENCH = REPO / "benchmarks" / "bench_trace_size.py"
PACKAGE = REPO / "ailens"


def _bench(*args: str, timeout: float = 240) -> dict:
    out = subprocess.run(
        [sys.executable, str(BENCH), *args, "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_memory_is_flat_over_a_million_ticks():
    # A fresh interpreter, so nothing else the test session allocated moves the RSS.
    r = _bench("memory", "--ticks", "1000000")
    assert r["disabled"] is None
    # From 2e5 ticks on: the first 1e5-2e5 ticks grow the allocator's pools by 1.5-3 MB
    # once (also before this check existed); a leak of 5 bytes a tick would add 4 MB here.
    rss = r["rss_mb"]
    assert rss["1000000"] - rss["200000"] < 4, rss
    assert r["trace_bytes_per_event"] <= 32


def test_trace_is_at_most_32_bytes_per_event():
    for counter in ("cpu-ns", "instructions"):
        r = _bench("size", "--events", "1000000", "--counter", counter)
        assert r["read_events"] == 1_000_000
        assert r["bytes_per_event"] <= 32, r


def test_lens_cycles_leak_no_thread_or_descriptor(tmp_path):
    proc = psutil.Process()

    def cycle(i: int) -> None:
        with Lens(run_dir=tmp_path / str(i), chunk_events=8) as lens:
            for _ in range(20):
                lens.collective_begin("allreduce", 8)
                lens.collective_end()
            lens.step_end()

    cycle(-1)  # first use loads modules and opens the counter once
    fds, threads = proc.num_fds(), threading.active_count()
    for i in range(30):
        cycle(i)
    assert threading.active_count() == threads
    assert proc.num_fds() <= fds
    assert load_run(tmp_path / "29").ranks[0].n_events == 20


# ---------------------------------------------------------------- safe reading

_MODULES = {
    "pickle",
    "cPickle",
    "_pickle",
    "marshal",
    "shelve",
    "dill",
    "cloudpickle",
    "yaml",
    "joblib",
}
_CALLS = {"eval", "exec", "compile", "__import__"}


def _unsafe(path: Path) -> list[str]:
    """Names on a code path (not in comments or docstrings) that can execute file content."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [
                f"{where} import {a.name}" for a in node.names if a.name.split(".")[0] in _MODULES
            ]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _MODULES:
            found.append(f"{where} from {node.module} import")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id in _CALLS:
                found.append(f"{where} {f.id}()")
            if (
                isinstance(f, ast.Attribute)
                and f.attr in ("load", "loads", "unsafe_load")
                and (isinstance(f.value, ast.Name) and f.value.id in _MODULES)
            ):
                found.append(f"{where} {f.value.id}.{f.attr}()")
            for kw in node.keywords:  # np.load(..., allow_pickle=True)
                if kw.arg == "allow_pickle" and not (
                    isinstance(kw.value, ast.Constant) and kw.value.value is False
                ):
                    found.append(f"{where} allow_pickle")
        elif isinstance(node, ast.Name) and node.id in _MODULES | {"eval", "exec"}:
            found.append(f"{where} {node.id}")
    return found


def test_no_read_path_executes_file_content():
    files = sorted(PACKAGE.rglob("*.py"))
    assert any(f.parts[-2:] == ("record", "reader.py") for f in files)
    found = [hit for f in files for hit in _unsafe(f)]
    assert not found, found


def test_the_safety_scan_catches_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import pickle\nfrom yaml import load\nx = eval('1')\n"
        "import numpy as np\nnp.load('f', allow_pickle=True)\nyaml.load(s)\n"
        "'''docstring mentioning pickle and eval( is fine'''\n# so is pickle here\n"
    )
    lines = {int(h.split(":")[1].split()[0]) for h in _unsafe(bad)}
    assert lines == {1, 2, 3, 5, 6}


# ---------------------------------------------------------------- file modes


def _lens_files(run_dir: Path, umask: int) -> list[tuple[Path, int]]:
    old = os.umask(umask)
    try:
        with Lens(
            run_dir=run_dir,
            chunk_events=4,
            warmup_steps=0,
            signature_min_steps=3,
            signature_window=2,
            total_steps=30,
        ) as lens:
            for _ in range(30):
                lens.collective_begin("allreduce", 8)
                lens.collective_end()
                lens.step_end()
    finally:
        os.umask(old)
    return [(p, p.stat().st_mode & 0o777) for p in [run_dir, *run_dir.iterdir()]]


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o000, 0o077])
def test_files_follow_the_umask_and_are_never_world_writable(tmp_path, umask):
    files = _lens_files(tmp_path / "run", umask)
    names = {p.name for p, _ in files}
    assert {"rank-00000.ailens", "phases-online.json"} <= names, names
    assert not any(".tmp" in n for n in names)  # no temp file left behind
    for path, mode in files:
        assert not mode & 0o002, f"{path} is world-writable ({mode:o}) at umask {umask:03o}"
        base = 0o755 if path.is_dir() else 0o644
        assert mode == base & ~umask, f"{path}: {mode:o}, expected {base & ~umask:o}"


def test_reading_a_large_trace_stays_near_its_decoded_size(tmp_path):
    import tracemalloc

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from bench_trace_size import trace_size
    finally:
        sys.path.pop(0)
    r = trace_size(200_000, tmp_path)
    tracemalloc.start()
    from ailens.record.reader import read_trace
    from ailens.record.trace import EVENT_ROW_BYTES

    t = read_trace(tmp_path / "rank-00000.ailens")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    decoded = t.n_events * EVENT_ROW_BYTES
    # The file's bytes, per-chunk buffers and the concatenated columns: about 2x decoded.
    assert peak <= 3 * decoded + r["bytes"], (peak, decoded, r["bytes"])
    assert np.all(np.diff(t.events["t_begin"]) > 0)
