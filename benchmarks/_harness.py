"""What the benchmark scripts share: launching ranks (the launchers' command lines, the
environment, timeouts that kill the whole process group), loading a recorded run, the load
average, and writing results JSON.

Import it from a script in ``benchmarks/`` (its folder is on ``sys.path``)::

    import _harness as harness
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# The venv's interpreter by its own name (what a user types), else this one.
PY = str(BIN / "python") if (BIN / "python").exists() else sys.executable
LAUNCHERS = ("mpiexec", "torchrun", "horovodrun", "python")


# --------------------------------------------------------------------------- load average


def loadavg() -> list[float]:
    """The 1, 5 and 15-minute load averages."""
    return list(os.getloadavg())


def load1() -> float:
    """The 1-minute load average, rounded to 0.01."""
    return round(os.getloadavg()[0], 2)


def loadavg_text() -> str:
    """The load averages as ``1.0/0.5/0.3`` (``?`` where the system has none)."""
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def quiet_load(max_load: float, wait: float = 0) -> tuple[float, bool]:
    """The 1-minute load average once it is at most ``max_load``, waiting up to ``wait``
    seconds for an earlier run's load to decay, and True; else the last reading and False.
    Timings taken beside other work follow the neighbours, not the training."""
    deadline = time.monotonic() + wait
    while True:
        load = os.getloadavg()[0]
        if load <= max_load:
            return load, True
        if time.monotonic() >= deadline:
            return load, False
        time.sleep(5)


# --------------------------------------------------------------------------- bytecode


def compile_bytecode() -> None:
    """Write the bytecode of ailens and its integrations where it is stale, as
    ``scripts/setup`` does after installing: a wheel install compiles it, but where
    ``PYTHONDONTWRITEBYTECODE`` is set (this VM) a module edited since the set-up compiles
    again at every import, and a launch would count that as ailens's cost (issue 33: 98
    against 42-47 ms for ``import ailens`` with 35 modules stale,
    ``benchmarks/overhead/_import_cost.py``). Up to date, it costs a directory scan."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "ailens"),
                    str(REPO / "integrations")], check=True, stdout=subprocess.DEVNULL)  # fmt: skip


# --------------------------------------------------------------------------- launching


def launch_env(**overrides: str) -> dict[str, str]:
    """This process's environment for a launched benchmark case: unbuffered output, quiet
    TensorFlow (unless set), and ``overrides``."""
    tf_log = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")
    return {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": tf_log, **overrides}


def rank_env(threads: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a launched example: this checkout first on ``PYTHONPATH``, no
    inherited ``AILENS_*`` settings, ``threads`` threads per rank for every math library."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AILENS_")}
    env.update(
        PYTHONPATH=str(REPO), AILENS_VENV=str(BIN.parent), PYTHONUNBUFFERED="1",
        TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS=str(threads),
        OPENBLAS_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
    )  # fmt: skip
    env.update(extra or {})
    return env


def launcher_command(
    launcher: str, ranks: int, argv: list[str], python: str = sys.executable
) -> list[str]:
    """``argv`` (a script or ``-m module`` and its arguments) on ``ranks`` local ranks, the
    way ``launcher`` (one of :data:`LAUNCHERS`, from this interpreter's bin folder) starts
    them; ``python`` runs each rank where the launcher does not."""
    n = str(ranks)
    if launcher == "mpiexec":
        return [str(BIN / "mpiexec"), "-n", n, python, *argv]
    if launcher == "torchrun":
        return [str(BIN / "torchrun"), "--standalone", f"--nproc_per_node={n}", *argv]
    if launcher == "horovodrun":
        return [str(BIN / "horovodrun"), "--gloo", "-np", n, "-H", f"localhost:{n}", python,
                *argv]  # fmt: skip
    if launcher == "python":
        return [python, *argv]
    raise ValueError(f"launcher {launcher!r} is not one of {LAUNCHERS}")


def _kill(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def launch(
    cmd: list[str],
    env: dict[str, str] | None,
    timeout: float,
    *,
    merge_output: bool = False,
    preexec_fn: Callable[[], None] | None = None,
    cwd: str | Path = REPO,
) -> tuple[int, str, str]:
    """Run ``cmd`` from ``cwd`` (the repository root) in its own process group: (exit status,
    stdout, stderr; with ``merge_output`` stderr goes into stdout; ``env`` None: this
    process's). On a timeout, or when this script is stopped, the whole group (launcher and
    ranks) is killed; a timeout raises ``subprocess.TimeoutExpired`` carrying the output so far."""
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_output else subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=preexec_fn,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as e:
        _kill(proc)
        out, err = proc.communicate()
        if isinstance(e, subprocess.TimeoutExpired):
            raise subprocess.TimeoutExpired(cmd, timeout, output=out + (err or "")) from None
        raise
    return proc.returncode, out, err or ""


def launch_all(
    cmds: list[list[str]],
    env: dict[str, str] | None,
    timeout: float,
    what: str,
    *,
    preexec_fn: Callable[[], None] | None = None,
) -> str:
    """Run ``cmds`` side by side (one per emulated host), each in its own process group; all
    must exit 0 within ``timeout`` seconds, else ``RuntimeError`` naming ``what`` with the
    output's tail (and the others are killed). Returns their outputs (stderr merged)."""
    procs = [
        subprocess.Popen(
            c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            cwd=REPO, start_new_session=True, preexec_fn=preexec_fn,
        )
        for c in cmds
    ]  # fmt: skip
    deadline = time.monotonic() + timeout
    outs = []
    try:
        for p in procs:
            try:
                out, _ = p.communicate(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{what}: timed out after {timeout:.0f} s") from None
            outs.append(out)
            if p.returncode:
                raise RuntimeError(f"{what}: exit {p.returncode}\n{out[-3000:]}")
    finally:
        for p in procs:
            if p.poll() is None:
                _kill(p)
                p.communicate()
    return "\n".join(outs)


def missing_module(modules: list[str]) -> str | None:
    """The first of ``modules`` that does not import in this interpreter, with the error."""
    if not modules:
        return None
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, *modules],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        )
    except subprocess.TimeoutExpired:
        return f"importing {', '.join(modules)} took over 300 s"
    if proc.returncode == 0:
        return None
    last = (proc.stderr.strip().splitlines() or ["?"])[-1]
    return f"not installed: {last}"


# --------------------------------------------------------------------------- runs and results


def analyze_run(run_dir: str | Path, **kwargs: Any):
    """The offline analysis of a recorded run directory (every rank's trace)."""
    import ailens

    return ailens.analyze(run_dir, **kwargs)


def describe_machine() -> dict:
    """The machine a benchmark ran on, as it describes itself: host, cores, CPU model,
    memory, Python and (when importable) torch and its GPU."""
    import platform

    d: dict[str, Any] = {"host": platform.node(), "machine": platform.machine(),
                         "cores": len(os.sched_getaffinity(0)), "python": platform.python_version(),
                         "loadavg": loadavg()}  # fmt: skip
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                d["cpu"] = line.split(":", 1)[1].strip()
                break
        d["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (OSError, ValueError):
        pass
    try:
        import torch

        d["torch"] = torch.__version__
        if torch.cuda.is_available():
            d["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return d


def read_json(path: Path) -> dict | None:
    """A JSON file's document; None when it is missing or not (yet) whole."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: str | Path, doc: Any, *, indent: int = 1, newline: bool = True, **kw) -> None:
    """Write a results document (``kw``: more ``json.dumps`` options, e.g. ``default=str``)."""
    Path(path).write_text(json.dumps(doc, indent=indent, **kw) + ("\n" if newline else ""))
