"""benchmarks/_harness.py: launches end with their whole process group, failures name the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import _harness as harness  # noqa: E402

# A launcher stand-in: starts a "rank" that would run for a minute (not holding the launcher's
# output pipes, as mpiexec's ranks do not), writes its pid, waits.
LAUNCHER = (
    "import subprocess, sys\n"
    "rank = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
    "                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
    "open(sys.argv[1], 'w').write(str(rank.pid))\n"
    "rank.wait()\n"
)


@pytest.mark.timeout(60)
def test_a_timeout_kills_the_launcher_and_its_ranks(tmp_path):
    pid_file = tmp_path / "rank.pid"
    with pytest.raises(subprocess.TimeoutExpired):
        harness.launch([sys.executable, "-c", LAUNCHER, str(pid_file)], None, timeout=10)
    rank = int(pid_file.read_text())
    try:
        psutil.Process(rank).wait(timeout=10)  # not our child: psutil waits by polling
    except psutil.NoSuchProcess:
        pass  # already gone
    except psutil.TimeoutExpired:
        psutil.Process(rank).kill()
        pytest.fail(f"rank {rank} outlived its launcher's timeout")


@pytest.mark.timeout(60)
def test_launch_all_names_the_failed_run_with_its_output(tmp_path):
    ok = [sys.executable, "-c", "print('fine')"]
    failing = [sys.executable, "-c", "print('boom'); raise SystemExit(3)"]
    assert harness.launch_all([ok], None, 30, "run-a").strip() == "fine"
    with pytest.raises(RuntimeError, match=r"^run-b: exit 3\nboom"):
        harness.launch_all([ok, failing], None, 30, "run-b")
