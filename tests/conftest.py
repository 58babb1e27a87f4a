import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent


def venv_tool(name: str) -> str | None:
    """A launcher from this interpreter's venv (mpiexec, torchrun, horovodrun), else None."""
    path = VENV_BIN / name
    return str(path) if path.exists() else shutil.which(name) if name != "mpiexec" else None


def run_ranks(
    cmd: list[str], *, timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run a launcher command with a hard timeout; the whole process group dies on timeout."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        start_new_session=True,
        cwd=REPO,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        pytest.fail(
            f"{cmd[0]} timed out after {timeout}s (a rank hung)\nstdout:\n{out}\nstderr:\n{err}"
        )
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def tagged_records(stdout: str, tag: str) -> list[dict]:
    """Every ``TAG {json}`` record the ranks printed; ranks share stdout, so one line may
    hold two records."""
    decoder, head, out, i = json.JSONDecoder(), tag + " {", [], 0
    while (i := stdout.find(head, i)) >= 0:
        obj, i = decoder.raw_decode(stdout, i + len(head) - 1)
        out.append(obj)
    return out


def rank_results(
    cmd: list[str], *, cwd, env: dict | None = None, timeout: float, ranks: int = 2
) -> list[dict]:
    """Launch ranks without inherited AILENS_* settings (hard timeout, whole process group
    killed); return each rank's ``RESULT`` record, sorted by rank, asserting ``ranks``."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("AILENS_")}
    full_env.update(env or {})
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        start_new_session=True,
        cwd=cwd,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        pytest.fail(
            f"{cmd[0]} timed out after {timeout}s (a rank hung)\nstdout:\n{out}\nstderr:\n{err}"
        )
    results = tagged_records(out, "RESULT")
    assert proc.returncode == 0 and len(results) == ranks, (
        f"exit {proc.returncode}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    )
    return sorted(results, key=lambda r: r["rank"])


def mpiexec() -> str:
    tool = venv_tool("mpiexec")
    if tool is None:
        pytest.skip("mpiexec from the mpich wheel is not installed (pip install ailens[mpi])")
    pytest.importorskip("mpi4py")
    return tool
