"""What ailens costs a training step, for every example and framework: A/B inside one run.

    python benchmarks/bench_overhead.py --json overhead.json
    python benchmarks/bench_overhead.py --cases mnist_ddp,ddp_2ms --pairs 10 --block-s 0.5

Writes ``{"cases": [{"name", "framework", "step_ms", "ratio", "ci95": [lo, hi], ...}, ...]}``
and prints the table. ``ratio`` is the mean step time with ailens over the mean step time
without it (the mean over block pairs of that ratio), ``ci95`` its 95 % interval over the
pairs, ``step_ms`` the step time without ailens; every row also carries the load average
(``loadavg``, read by rank 0 at the end of the case) and how it was measured.

Cases: the ``CASES`` table below, one line each; a case is a rank script in
``benchmarks/overhead/`` (files starting with ``_`` are helpers), launched the way its
framework is launched, from the repository root, with the interpreter running this script
(launchers from its bin directory)::

    mpiexec -n R python SCRIPT ARGS
    torchrun --standalone --nproc_per_node=R SCRIPT ARGS
    horovodrun --gloo -np R -H localhost:R python SCRIPT ARGS
    python SCRIPT ARGS

ARGS are ``--pairs P --block-s S`` (block pairs; target seconds per block); a script must
accept both (``_ab.add_common_args``) and may take more with defaults. The environment has
``OMP_NUM_THREADS`` = cores / ranks, ``PYTHONUNBUFFERED=1``, ``TF_CPP_MIN_LOG_LEVEL=2``.
Rank 0 prints exactly one line ``OVERHEAD {json}`` with at least ``name``, ``framework``,
``step_ms``, ``ratio``, ``ci95`` (more keys are kept in the JSON; the table's name and
framework win). ``_ab.measure`` runs the protocol (alternating blocks of steps with ailens
recording and bypassed, plain first in even pairs and lensed first in odd ones, a discarded
warm-up pair) and ``_ab.emit`` prints the line. "Bypassed" means without ailens: the raw
communicator, a second model without the hook, the original framework functions
(``_ab.Unpatched``), never a disabled Lens.

A script that does not exist yet, a framework that does not import, or a case that fails or
prints no line is reported as skipped with the reason; the others still run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "overhead"
REPO = HERE.parent
LAUNCHERS = ("mpiexec", "torchrun", "horovodrun", "python")


# Rank 0's result line; horovodrun prefixes each line with "[rank]<stdout>:".
OVERHEAD_LINE = re.compile(r"^(?:\[\d+\]<stdout>:)?OVERHEAD (\{.*\})$", re.M)


@dataclass(frozen=True)
class Case:
    name: str  # the row's name, unique
    framework: str  # shown in the table
    launcher: str  # one of LAUNCHERS
    ranks: int  # processes (python: 1)
    script: str  # in benchmarks/overhead/
    requires: tuple[str, ...] = ()  # modules that must import, else the row is skipped


# The cases, in table order: one line each.
CASES = (
    Case("kmeans_mpi", "mpi4py", "mpiexec", 2, "kmeans_mpi.py", ("mpi4py",)),
    Case("resnet50_ddp", "torch-ddp", "torchrun", 2, "resnet50_ddp.py", ("torch",)),
    Case("resnet50_hvd", "horovod-torch", "horovodrun", 2, "resnet50_hvd.py", ("horovod.torch",)),
    Case("mnist_ddp", "torch-ddp", "torchrun", 2, "mnist_ddp.py", ("torch",)),
    Case("mnist_hvd", "horovod-torch", "horovodrun", 2, "mnist_hvd.py", ("horovod.torch",)),
    Case("ddp_2ms", "torch-ddp", "torchrun", 2, "ddp_2ms.py", ("torch",)),
    Case("keras_hvd", "keras+horovod", "horovodrun", 2, "keras_hvd.py", ("tf_keras", "horovod.tensorflow.keras")),  # noqa: E501
    Case("keras_plain", "keras", "python", 1, "keras_plain.py", ("tf_keras",)),
)  # fmt: skip


def command(case: Case, script: Path, args: list[str]) -> list[str]:
    """The launch command of ``case``."""
    bindir = Path(sys.executable).parent
    python, n, launcher = sys.executable, str(case.ranks), case.launcher
    if launcher == "mpiexec":
        return [str(bindir / "mpiexec"), "-n", n, python, str(script), *args]
    if launcher == "torchrun":
        return [str(bindir / "torchrun"), "--standalone", f"--nproc_per_node={n}", str(script),
                *args]  # fmt: skip
    if launcher == "horovodrun":
        return [str(bindir / "horovodrun"), "--gloo", "-np", n, "-H", f"localhost:{n}", python,
                str(script), *args]  # fmt: skip
    return [python, str(script), *args]


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


def launch(cmd: list[str], env: dict, timeout: float) -> tuple[int, str, str]:
    """Run a launcher in its own process group: (exit status, stdout, stderr). On a timeout,
    or when this driver is stopped, the whole group (launcher and ranks) is killed."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException as e:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        if isinstance(e, subprocess.TimeoutExpired):
            raise subprocess.TimeoutExpired(cmd, timeout, output=out + err) from None
        raise
    return proc.returncode, out, err


def run_case(case: Case, args: argparse.Namespace) -> dict:
    """One row: the script's OVERHEAD line, or ``skipped`` with the reason."""
    row = {"name": case.name, "framework": case.framework, "ranks": case.ranks}
    script = CASES_DIR / case.script
    if case.launcher not in LAUNCHERS:
        return {**row, "skipped": f"launcher {case.launcher!r} is not one of {LAUNCHERS}"}
    if not script.exists():
        return {**row, "skipped": f"{script.relative_to(REPO)} does not exist yet"}
    why = missing_module(list(case.requires))
    if why:
        return {**row, "skipped": why}
    threads = str(max(1, (os.cpu_count() or 1) // case.ranks))
    env = {
        **os.environ,
        "OMP_NUM_THREADS": threads,
        "PYTHONUNBUFFERED": "1",
        "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
    }
    cmd = command(case, script, ["--pairs", str(args.pairs), "--block-s", str(args.block_s)])
    t0 = time.monotonic()
    try:
        returncode, out, err = launch(cmd, env, args.timeout)
    except subprocess.TimeoutExpired as e:
        tail = (e.output or "")[-2000:]
        return {**row, "skipped": f"timed out after {args.timeout} s", "log_tail": tail}
    lines = [m.group(1) for m in OVERHEAD_LINE.finditer(out)]
    if returncode != 0 or not lines:
        tail = (out + err)[-3000:]
        return {**row, "skipped": f"exit {returncode}, no OVERHEAD line", "log_tail": tail}
    result = json.loads(lines[-1])
    return {**result, **row, "wall_s": round(time.monotonic() - t0, 1)}


def table(rows: list[dict]) -> str:
    head = (f"{'case':<14} {'framework':<16} {'ranks':>5} {'step ms':>9} {'ratio':>8} "
            f"{'95% CI':>19} {'+us/step':>9} {'load 1m':>7}")  # fmt: skip
    out = [head, "-" * len(head)]
    for r in rows:
        if "skipped" in r:
            out.append(f"{r['name']:<14} {r.get('framework', ''):<16} skipped: {r['skipped']}")
            continue
        lo, hi = r["ci95"]
        out.append(
            f"{r['name']:<14} {r['framework']:<16} {r.get('ranks', ''):>5} {r['step_ms']:>9.3f} "
            f"{r['ratio']:>8.4f} {f'[{lo:.4f}, {hi:.4f}]':>19} {r.get('added_us', 0):>9.1f} "
            f"{r.get('loadavg', [0])[0]:>7.2f}"
        )
    measured = [r for r in rows if "skipped" not in r]
    if measured:
        worst = max(measured, key=lambda r: r["ratio"])
        out.append(f"worst case: {worst['name']} ratio {worst['ratio']:.4f} "
                   f"(95% CI {worst['ci95'][0]:.4f}..{worst['ci95'][1]:.4f})")  # fmt: skip
    return "\n".join(out)


def main() -> int:
    # SIGTERM (a timeout around this driver) unwinds like Ctrl-C, so launch() kills the ranks.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", metavar="OUT", help="write the rows to this JSON file")
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--pairs", type=int, default=20, help="plain/lensed block pairs per case")
    p.add_argument("--block-s", type=float, default=1.0, help="target seconds per block")
    p.add_argument("--timeout", type=int, default=900, help="seconds per case")
    args = p.parse_args()

    names = [c.name for c in CASES]
    chosen = args.cases.split(",") if args.cases else names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; cases: {', '.join(names)}")
    rows = []
    for case in CASES:
        if case.name not in chosen:
            continue
        print(f"{case.name}: running (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        row = run_case(case, args)
        if "skipped" in row:
            print(f"{case.name}: skipped: {row['skipped']}", file=sys.stderr, flush=True)
        rows.append(row)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"cases": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
