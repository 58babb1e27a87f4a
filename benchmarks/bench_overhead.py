"""What ailens costs a training step and a whole job, for every example and framework.

    python benchmarks/bench_overhead.py --json overhead.json                 # step and job cases
    python benchmarks/bench_overhead.py --kind step --cases mnist_ddp,ddp_2ms --pairs 10
    python benchmarks/bench_overhead.py --kind job --job-pairs 5 --json jobs.json
    python benchmarks/bench_overhead.py --smoke --force                      # tiny sizes, 1 pair
    python benchmarks/bench_overhead.py --kind close                         # Lens.close() ms

It refuses to start while the 1-minute load average is above 0.5 (``--force`` measures
anyway) and writes the load before and after into the JSON (``load_before``, ``load_after``).

Writes ``{"cases": [{"name", "framework", "step_ms", "ratio", "ci95": [lo, hi], ...}, ...],
"jobs": [{"name", "framework", "job_ratio", "job_ci95": [lo, hi], "pairs": [[plain_s,
lensed_s], ...], ...}, ...], "load_before": [...], "load_after": [...]}`` and prints the
tables.

**Step cases** (``--kind step``) time steps A/B inside one run. ``ratio`` is the mean step
time with ailens over the mean step time without it (the mean over block pairs of that
ratio), ``ci95`` its 95 % interval over the pairs, ``step_ms`` the step time without
ailens; every row also carries the load average (``loadavg``, read by rank 0 at the end
of the case) and how it was measured.

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

**Job cases** (``--kind job``, the ``JOBS`` table) time the whole job as a user launches it:
each example's ``examples/*/run`` (its ``--no-report``: the job alone, not the report after
it) and a tutorial-shaped DDP script under ``torchrun``, from the launch to the exit of the
launcher, i.e. of the last rank (imports, attach, training, close, exit). One discarded
lensed warm-up launch, then ``--job-pairs`` pairs, plain first in even pairs and lensed
first in odd ones. ``job_ratio``: the mean over pairs of lensed / plain seconds; ``job_ci95``
its Student-t 95 % interval; ``pairs`` the seconds of each pair. Lensed runs write to a
temporary run directory, removed after each launch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import _harness as harness

CASES_DIR = Path(__file__).resolve().parent / "overhead"
REPO = harness.REPO


# Rank 0's result line; horovodrun prefixes each line with "[rank]<stdout>:".
OVERHEAD_LINE = re.compile(r"^(?:\[\d+\]<stdout>:)?OVERHEAD (\{.*\})$", re.M)


@dataclass(frozen=True)
class Case:
    name: str  # the row's name, unique
    framework: str  # shown in the table
    launcher: str  # one of _harness.LAUNCHERS
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
    Case("ddp_hook_floor", "torch-ddp", "torchrun", 2, "ddp_hook_floor.py", ("torch",)),
    Case("keras_hvd", "keras+horovod", "horovodrun", 2, "keras_hvd.py", ("tf_keras", "horovod.tensorflow.keras")),  # noqa: E501
    Case("keras_plain", "keras", "python", 1, "keras_plain.py", ("tf_keras",)),
)  # fmt: skip

# Refuse to measure above this 1-minute load average (without --force).
MAX_LOAD = 0.5


@dataclass(frozen=True)
class Job:
    name: str  # the row's name, unique among jobs and cases
    framework: str
    argv: tuple[str, ...]  # from the repository root; "{python}" is this interpreter
    plain: tuple[str, ...]  # appended without ailens
    lensed: tuple[str, ...]  # appended with ailens; "{run_dir}" is a fresh directory
    smoke: tuple[str, ...]  # appended with --smoke (tiny sizes; later flags win)
    requires: tuple[str, ...] = ()


_RUN = ("--run-dir", "{run_dir}")


def _example(name: str, framework: str, example: str, flags: str, smoke: str, *requires) -> Job:
    """``examples/EXAMPLE/run FLAGS`` as a user runs it, without the report after training."""
    argv = ("{python}", f"examples/{example}/run", *flags.split(), "--progress-every", "0",
            "--no-report")  # fmt: skip
    return Job(name, framework, argv, ("--no-lens",), _RUN, tuple(smoke.split()), requires)


# The jobs, in table order: every example and framework, sized for ~10 min on 2 cores at
# the default --job-pairs (a few seconds of training: start-up and close weigh their share).
JOBS = (
    _example("kmeans_job", "mpi4py", "kmeans", "--ranks 2 --points 200000 --iterations 40",
             "--points 20000 --iterations 5", "mpi4py"),
    _example("mnist_ddp_job", "torch-ddp", "mnist", "--framework ddp --ranks 2 --epochs 3",
             "--epochs 1", "torch"),
    _example("mnist_hvd_job", "horovod-torch", "mnist", "--framework torch --ranks 2 --epochs 3",
             "--epochs 1", "horovod.torch"),
    _example("keras_hvd_job", "keras+horovod", "mnist", "--framework keras --ranks 2 --epochs 3",
             "--epochs 1", "tf_keras", "horovod.tensorflow.keras"),
    _example("keras_plain_job", "keras", "mnist", "--framework keras-plain --ranks 1 --epochs 3",
             "--epochs 1", "tf_keras"),
    _example("resnet50_ddp_job", "torch-ddp", "resnet50", "--framework ddp --ranks 2 --steps 30",
             "--steps 4 --steps-per-epoch 2", "torch"),
    _example("resnet50_hvd_job", "horovod-torch", "resnet50",
             "--framework horovod --ranks 2 --steps 30", "--steps 4 --steps-per-epoch 2",
             "horovod.torch"),
    Job("ddp_tutorial_job", "torch-ddp",
        ("{torchrun}", "--standalone", "--nproc_per_node=2",
         "benchmarks/overhead/job_ddp_tutorial.py", "--steps", "2000"),
        (), ("--lens", *_RUN), ("--steps", "50"), ("torch",)),
)  # fmt: skip


def run_case(case: Case, args: argparse.Namespace) -> dict:
    """One row: the script's OVERHEAD line, or ``skipped`` with the reason."""
    ranks = args.ranks if args.ranks and case.launcher != "python" else case.ranks
    row = {"name": case.name, "framework": case.framework, "ranks": ranks}
    script = CASES_DIR / case.script
    if case.launcher not in harness.LAUNCHERS:
        return {**row, "skipped": f"launcher {case.launcher!r} is not one of {harness.LAUNCHERS}"}
    if not script.exists():
        return {**row, "skipped": f"{script.relative_to(REPO)} does not exist yet"}
    why = harness.missing_module(list(case.requires))
    if why:
        return {**row, "skipped": why}
    env = harness.launch_env(OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // ranks)))
    argv = [str(script), "--pairs", str(args.pairs), "--block-s", str(args.block_s)]
    cmd = harness.launcher_command(case.launcher, ranks, argv)
    t0 = time.monotonic()
    try:
        returncode, out, err = harness.launch(cmd, env, args.timeout)
    except subprocess.TimeoutExpired as e:
        tail = (e.output or "")[-2000:]
        return {**row, "skipped": f"timed out after {args.timeout} s", "log_tail": tail}
    lines = [m.group(1) for m in OVERHEAD_LINE.finditer(out)]
    if returncode != 0 or not lines:
        tail = (out + err)[-3000:]
        return {**row, "skipped": f"exit {returncode}, no OVERHEAD line", "log_tail": tail}
    result = json.loads(lines[-1])
    return {**result, **row, "wall_s": round(time.monotonic() - t0, 1)}


def _t975(df: int) -> float:
    sys.path.insert(0, str(CASES_DIR))
    from _ab import t975  # the step cases' Student-t table

    return t975(df)


def job_command(job: Job, extra: tuple[str, ...], run_dir: str, smoke: bool) -> list[str]:
    """The launch command of ``job`` with ``extra`` (its plain or lensed flags)."""
    bindir = Path(sys.executable).parent
    fill = {"{python}": sys.executable, "{torchrun}": str(bindir / "torchrun"),
            "{run_dir}": run_dir}  # fmt: skip
    argv = [*job.argv, *extra, *(job.smoke if smoke else ())]
    return [fill.get(a, a) for a in argv]


def run_job(job: Job, args: argparse.Namespace) -> dict:
    """One job row: ``--job-pairs`` interleaved pairs of whole launches, or ``skipped``."""
    row = {"name": job.name, "framework": job.framework}
    why = harness.missing_module(list(job.requires))
    if why:
        return {**row, "skipped": why}
    env = harness.launch_env(AILENS_VENV=str(Path(sys.executable).parent.parent))

    def once(lensed: bool) -> float:
        run_dir = tempfile.mkdtemp(prefix=f"ailens-{job.name}-")
        cmd = job_command(job, job.lensed if lensed else job.plain, run_dir, args.smoke)
        try:
            t0 = time.monotonic()
            code, out, err = harness.launch(cmd, env, args.timeout)
            took = time.monotonic() - t0
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        if code != 0:
            raise RuntimeError(f"exit {code}: {' '.join(cmd)}\n{(out + err)[-2000:]}")
        return took

    pairs = []
    try:
        if not args.smoke:
            once(True)  # warm-up: page cache, compiled kernels; discarded
        for i in range(args.job_pairs):
            if i % 2 == 0:
                plain = once(False)
                lensed = once(True)
            else:
                lensed = once(True)
                plain = once(False)
            pairs.append((plain, lensed))
    except subprocess.TimeoutExpired as e:
        return {
            **row,
            "skipped": f"timed out after {args.timeout} s",
            "log_tail": (e.output or "")[-2000:],
        }  # noqa: E501
    except RuntimeError as e:
        return {**row, "skipped": str(e).splitlines()[0], "log_tail": str(e)[-2000:]}
    ratios = [b / a for a, b in pairs]
    ratio = statistics.fmean(ratios)
    half = (_t975(len(ratios) - 1) * statistics.stdev(ratios) / math.sqrt(len(ratios))
            if len(ratios) > 1 else math.nan)  # fmt: skip
    return {
        **row,
        "job_s": round(statistics.fmean(a for a, _ in pairs), 3),
        "job_ratio": round(ratio, 5),
        "job_ci95": [round(ratio - half, 5), round(ratio + half, 5)],
        "pairs": [[round(a, 3), round(b, 3)] for a, b in pairs],
        "loadavg": harness.loadavg(),
        "command": job_command(job, job.lensed, "RUN_DIR", args.smoke)[1:],
    }


def job_table(rows: list[dict]) -> str:
    head = (f"{'job':<18} {'framework':<16} {'plain s':>8} {'job ratio':>9} {'95% CI':>19} "
            f"{'pairs':>5} {'load 1m':>7}")  # fmt: skip
    out = [head, "-" * len(head)]
    for r in rows:
        if "skipped" in r:
            out.append(f"{r['name']:<18} {r.get('framework', ''):<16} skipped: {r['skipped']}")
            continue
        lo, hi = r["job_ci95"]
        out.append(
            f"{r['name']:<18} {r['framework']:<16} {r['job_s']:>8.2f} {r['job_ratio']:>9.4f} "
            f"{f'[{lo:.4f}, {hi:.4f}]':>19} {len(r['pairs']):>5} {r['loadavg'][0]:>7.2f}"
        )
    measured = [r for r in rows if "skipped" not in r]
    if measured:
        worst = max(measured, key=lambda r: r["job_ratio"])
        out.append(f"worst job: {worst['name']} ratio {worst['job_ratio']:.4f}")
    return "\n".join(out)


def close_times(steps: int, per_step: int, repeats: int) -> dict:
    """``Lens.close()`` on one rank after ``steps`` steps of ``per_step`` collectives, in this
    process (an injected clock makes the run ~10 ms a step long without taking that long):
    the close's own milliseconds, ``repeats`` runs."""
    sys.path.insert(0, str(REPO))
    from ailens import Lens

    class Clock:  # the run's clock: ~1 ms between collectives, a spike every 500 steps
        now = 0

        def __call__(self) -> int:
            self.now += 1
            return self.now

    times = []
    for _ in range(repeats):
        clock, run_dir = Clock(), tempfile.mkdtemp(prefix="ailens-close-")
        try:
            lens = Lens(run_dir=run_dir, clock=clock, counter="cpu-ns")
            for s in range(steps):
                for _ in range(per_step):
                    clock.now += 900_000
                    lens.collective_begin("allreduce", 4096)
                    clock.now += 50_000
                    lens.collective_end()
                clock.now += 40_000_000 if s % 500 == 499 else 100_000
                lens.step_end()
            t0 = time.perf_counter()
            lens.close()
            times.append(round((time.perf_counter() - t0) * 1e3, 2))
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
    return {"steps": steps, "collectives": steps * per_step, "close_ms": times,
            "loadavg": harness.loadavg()}  # fmt: skip


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
    p.add_argument(
        "--kind",
        choices=("step", "job", "both", "close"),
        default="both",
        help="step cases (A/B inside one run), job cases (whole launches), both; close: "
        "Lens.close() after --close-steps steps of 10 collectives, one rank, in this process",
    )
    p.add_argument("--close-steps", type=int, default=25_000, help="steps before close")
    p.add_argument("--cases", help="comma-separated case and job names (default: all)")
    p.add_argument("--pairs", type=int, default=20, help="plain/lensed block pairs per case")
    p.add_argument(
        "--ranks",
        type=int,
        default=0,
        help="ranks of every multi-rank step case (default: each case's own, 2)",
    )
    p.add_argument("--block-s", type=float, default=1.0, help="target seconds per block")
    p.add_argument("--job-pairs", type=int, default=3, help="plain/lensed launch pairs per job")
    p.add_argument("--timeout", type=int, default=900, help="seconds per case (per launch)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes and one pair: checks that every case runs, measures nothing",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help=f"measure even above a 1-minute load average of {MAX_LOAD}",
    )
    args = p.parse_args()
    if args.smoke:
        args.pairs, args.block_s, args.job_pairs = 1, 0.05, 1

    steps = [c for c in CASES if args.kind in ("step", "both")]
    jobs = [j for j in JOBS if args.kind in ("job", "both")]
    names = [c.name for c in steps] + [j.name for j in jobs]
    chosen = args.cases.split(",") if args.cases else names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)} for --kind {args.kind}; "
                f"cases: {', '.join(names)}")  # fmt: skip
    load_before = harness.loadavg()
    if load_before[0] > MAX_LOAD and not args.force:
        print(f"bench_overhead: 1-minute load average {load_before[0]:.2f} > {MAX_LOAD}: the "
              "machine is not quiet; run alone, or pass --force", file=sys.stderr)  # fmt: skip
        return 2
    if args.kind == "close":
        got = close_times(args.close_steps, 10, 1 if args.smoke else 5)
        print(f"Lens.close after {got['collectives']:,} collectives ({got['steps']:,} steps, one "
              f"rank): {got['close_ms']} ms (load {got['loadavg'][0]:.2f})")  # fmt: skip
        if args.json:
            harness.write_json(args.json, {"close": got, "load_before": load_before,
                                     "load_after": harness.loadavg()})  # fmt: skip
        return 0
    rows, job_rows = [], []
    for items, runner, dest in ((steps, run_case, rows), (jobs, run_job, job_rows)):
        for case in items:
            if case.name not in chosen:
                continue
            print(f"{case.name}: running (load {os.getloadavg()[0]:.2f})", file=sys.stderr,
                  flush=True)  # fmt: skip
            row = runner(case, args)
            if "skipped" in row:
                print(f"{case.name}: skipped: {row['skipped']}", file=sys.stderr, flush=True)
            dest.append(row)
    if rows:
        print(table(rows))
    if job_rows:
        print(job_table(job_rows))
    if args.json:
        doc = {"cases": rows, "jobs": job_rows, "load_before": load_before,
               "load_after": harness.loadavg(), "smoke": args.smoke}  # fmt: skip
        harness.write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
