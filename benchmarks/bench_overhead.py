"""What ailens costs a training step and a whole job, for every example and framework.

    python benchmarks/bench_overhead.py --json overhead.json                 # step and job cases
    python benchmarks/bench_overhead.py --kind step --cases mnist_ddp,ddp_2ms --pairs 10
    python benchmarks/bench_overhead.py --kind job --job-pairs 5 --json jobs.json
    python benchmarks/bench_overhead.py --kind attribution --cases mnist_ddp --pairs 4
    python benchmarks/bench_overhead.py --kind step --ranks 4 --cases kmeans_mpi,mnist_ddp
    python benchmarks/bench_overhead.py --smoke --force                      # tiny sizes, 1 pair
    python benchmarks/bench_overhead.py --kind close                         # Lens.close() ms

It refuses to start while the 1-minute load average is above 0.5 (``--force`` measures
anyway; the attribution never refuses: it does not depend on a quiet machine) and writes the
load before and after into the JSON (``load_before``, ``load_after``). The default run
(``--kind both``) measures the step cases, then waits up to ``--settle-s`` seconds for the
load they leave to decay below 0.5 (``settle``: seconds waited, the load then, whether it got
there), then measures the job cases; every row carries the load at its end (``loadavg``).

``--ranks N`` (default 2) runs every multi-rank case and job on N ranks; the launchers are
taken from the folder of the interpreter running this script, else torchrun and horovodrun
run as modules of this interpreter (``-m torch.distributed.run``, ``-m
horovod.runner.launch``) and mpiexec comes from ``PATH``.

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

Controls, with no ailens in either arm (``NO_AILENS``; never the worst case): ``ddp_hook_floor``
(DDP's built-in reduction against torch's own Python comm hook: the floor under any hook)
and the ``*_control`` rows, the case's own script with ``--control`` (ailens in neither
model) or a disabled ``LensCallback``: what the protocol reads where the arms do not differ,
i.e. what this machine can resolve for that case.

A script that does not exist yet, a framework that does not import, or a case that fails or
prints no line is reported as skipped with the reason; the others still run.

**Attribution** (``--kind attribution``): the step cases again, with ``--attribution``: every
rank also times ailens's parts directly (``overhead/_attribution.py``: exclusive CPU and wall
time of its hooks, buffer, step ends, exchanges, online model and live outputs on the
training thread, and the thread CPU clocks of the threads ailens starts) and prints
``ATTRIBUTION {json}``. The table shows, per case and rank, microseconds per step per
component, their sum, the A/B's ``added_us`` beside it (measured in the same run, so with the
timers in; the timers' own estimated cost is shown and removed from the components), and the
sum as a share of the step's CPU time (process CPU time per lensed step). The steps counted
are those the A/B times: the untimed first step and the warm-up block (the run's start: step
inference's votes, the first forecasts) are left out and shown apart, once per run
(``setup_cpu_us``, ``setup_steps``). ``--timers lean`` leaves the per-collective path inside
the wrappers untimed (half the timers per collective on Horovod's gradients): the timers cost
more in place (cold caches) than in the calibration loop, so two densities bound what the
instrument adds. Rows: ``attribution`` in each case of the JSON, a list with one entry per rank.

**Job cases** (``--kind job``, the ``JOBS`` table) time the whole job as a user launches it:
each example's ``examples/*/run`` (its ``--no-report``: the job alone, not the report after
it) and a tutorial-shaped DDP script under ``torchrun``, from the launch to the exit of the
launcher, i.e. of the last rank (imports, attach, training, close, exit). One discarded
lensed warm-up launch, then ``--job-pairs`` pairs, plain first in even pairs and lensed
first in odd ones. ``job_ratio``: the mean over pairs of lensed / plain seconds; ``job_ci95``
its Student-t 95 % interval; ``pairs`` the seconds of each pair; ``load_start`` and
``loadavg``: the load averages when the job's launches began and ended. Lensed runs write to
a temporary run directory, removed after each launch.
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
    args: tuple[str, ...] = ()  # passed to the script after the common arguments


# The cases, in table order: one line each.
CASES = (
    Case("kmeans_mpi", "mpi4py", "mpiexec", 2, "kmeans_mpi.py", ("mpi4py",)),
    Case("resnet50_ddp", "torch-ddp", "torchrun", 2, "resnet50_ddp.py", ("torch",)),
    Case("resnet50_ddp_control", "torch-ddp", "torchrun", 2, "resnet50_ddp.py", ("torch",), ("--control",)),  # noqa: E501
    Case("resnet50_hvd", "horovod-torch", "horovodrun", 2, "resnet50_hvd.py", ("horovod.torch",)),
    Case("mnist_ddp", "torch-ddp", "torchrun", 2, "mnist_ddp.py", ("torch",)),
    Case("resnet50_hvd_control", "horovod-torch", "horovodrun", 2, "resnet50_hvd.py", ("horovod.torch",), ("--control",)),  # noqa: E501
    Case("mnist_hvd", "horovod-torch", "horovodrun", 2, "mnist_hvd.py", ("horovod.torch",)),
    Case("mnist_hvd_control", "horovod-torch", "horovodrun", 2, "mnist_hvd.py", ("horovod.torch",), ("--control",)),  # noqa: E501
    Case("ddp_2ms", "torch-ddp", "torchrun", 2, "ddp_2ms.py", ("torch",)),
    Case("ddp_hook_floor", "torch-ddp", "torchrun", 2, "ddp_hook_floor.py", ("torch",)),
    Case("keras_hvd", "keras+horovod", "horovodrun", 2, "keras_hvd.py", ("tf_keras", "horovod.tensorflow.keras")),  # noqa: E501
    Case("keras_hvd_control", "keras+horovod", "horovodrun", 2, "keras_hvd.py", ("tf_keras", "horovod.tensorflow.keras"), ("--lens-config", '{"enabled": false}')),  # noqa: E501
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


# Every rank's attribution line (--kind attribution), horovodrun's prefix allowed.
ATTRIBUTION_LINE = re.compile(r"^(?:\[\d+\]<stdout>:)?ATTRIBUTION (\{.*\})$", re.M)
# Cases without ailens in them: nothing to attribute.
NO_AILENS = (
    "ddp_hook_floor",
    "resnet50_ddp_control",
    "resnet50_hvd_control",
    "mnist_hvd_control",
    "keras_hvd_control",
)


def case_ranks(case: Case, ranks: int) -> int:
    """The ranks ``case`` runs on with ``--ranks``: single-process cases stay at 1."""
    return case.ranks if case.ranks == 1 else ranks


def launcher_command(launcher: str, ranks: int, argv: list[str]) -> list[str]:
    """``harness.launcher_command`` with the launcher found next to this interpreter, else
    (torchrun, horovodrun) the same module run by this interpreter, else (mpiexec) on
    ``PATH``."""
    cmd = harness.launcher_command(launcher, ranks, argv)
    if launcher == "python" or Path(cmd[0]).exists():
        return cmd
    module = {"torchrun": "torch.distributed.run", "horovodrun": "horovod.runner.launch"}
    if launcher in module:
        return [sys.executable, "-m", module[launcher], *cmd[1:]]
    found = shutil.which(launcher)
    return [found, *cmd[1:]] if found else cmd


def run_case(case: Case, args: argparse.Namespace) -> dict:
    """One row: the script's OVERHEAD line, or ``skipped`` with the reason."""
    ranks = case_ranks(case, args.ranks)
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
    argv = [str(script), "--pairs", str(args.pairs), "--block-s", str(args.block_s), *case.args]
    attribution = args.kind == "attribution"
    if attribution:
        argv += ["--attribution", "full" if args.timers == "both" else args.timers]
    cmd = launcher_command(case.launcher, ranks, argv)
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
    row = {**result, **row, "wall_s": round(time.monotonic() - t0, 1)}
    if attribution:
        per_rank = sorted((json.loads(m.group(1)) for m in ATTRIBUTION_LINE.finditer(out)),
                          key=lambda a: a["rank"])  # fmt: skip
        if not per_rank:
            return {**row, "skipped": "no ATTRIBUTION line", "log_tail": (out + err)[-3000:]}
        row["attribution"] = per_rank
    return row


def _t975(df: int) -> float:
    sys.path.insert(0, str(CASES_DIR))
    from _ab import t975  # the step cases' Student-t table

    return t975(df)


def job_command(job: Job, extra: tuple[str, ...], run_dir: str, smoke: bool,
                ranks: int = 2) -> list[str]:  # fmt: skip
    """The launch command of ``job`` with ``extra`` (its plain or lensed flags), its
    multi-rank launches on ``ranks`` ranks."""
    fill = {"{python}": sys.executable, "{run_dir}": run_dir}
    argv = [*job.argv, *extra, *(job.smoke if smoke else ())]
    argv = [fill.get(a, a) for a in argv]
    if "--ranks" in argv:
        i = argv.index("--ranks") + 1
        if argv[i] != "1":
            argv[i] = str(ranks)
    if argv[0] == "{torchrun}":
        rest = [a for a in argv[1:] if not a.startswith("--nproc_per_node=")]
        argv = launcher_command("torchrun", ranks, rest[1:] if rest[0] == "--standalone" else rest)
    return argv


def run_job(job: Job, args: argparse.Namespace) -> dict:
    """One job row: ``--job-pairs`` interleaved pairs of whole launches, or ``skipped``."""
    row = {"name": job.name, "framework": job.framework}
    why = harness.missing_module(list(job.requires))
    if why:
        return {**row, "skipped": why}
    env = harness.launch_env(AILENS_VENV=str(Path(sys.executable).parent.parent))
    load_start = harness.loadavg()

    def once(lensed: bool) -> float:
        run_dir = tempfile.mkdtemp(prefix=f"ailens-{job.name}-")
        cmd = job_command(job, job.lensed if lensed else job.plain, run_dir, args.smoke,
                          args.ranks)  # fmt: skip
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
        "load_start": load_start,
        "command": job_command(job, job.lensed, "RUN_DIR", args.smoke, args.ranks)[1:],
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


def settle_load(wait_s: float) -> dict:
    """Between the step and the job cases: wait up to ``wait_s`` seconds for the 1-minute
    load the step cases left to fall to MAX_LOAD; what happened goes beside the figures."""
    t0 = time.monotonic()
    print(f"waiting up to {wait_s:.0f} s for the load ({os.getloadavg()[0]:.2f}) to fall to "
          f"{MAX_LOAD}", file=sys.stderr, flush=True)  # fmt: skip
    load, quiet = harness.quiet_load(MAX_LOAD, wait_s)
    return {"waited_s": round(time.monotonic() - t0, 1), "load": round(load, 2), "quiet": quiet}


# The attribution table's rows: component -> label.
ATTRIBUTION_ROWS = (
    ("hooks", "hooks and wrappers (Python)"),
    ("buffer", "collective begin/end (buffer)"),
    ("step_infer", "step inference"),
    ("step_vote", "step inference votes (collective)"),
    ("step_end", "step end (log)"),
    ("flush", "hand-off to the writer"),
    ("exchange", "exchange (ailens side)"),
    ("exchange_wait", "exchange collective (incl. wait)"),
    ("online", "online model"),
    ("live", "live output"),
    ("writer_thread", "writer thread (CPU)"),
    ("other_threads", "other ailens threads (CPU)"),
)


def attribution_table(rows: list[dict]) -> str:
    """Per case: microseconds per step per component and rank (CPU / wall), the sum, the
    A/B difference beside it, the share of the step's CPU time."""
    out = []
    for r in rows:
        if "skipped" in r:
            out.append(f"{r['name']}: skipped: {r['skipped']}")
            continue
        ranks = r["attribution"]
        out.append(
            f"{r['name']} ({r['framework']}, {len(ranks)} ranks, step {r['step_ms']:.3f} ms, "
            f"load {r.get('loadavg', [0])[0]:.2f}): us per step, CPU / wall"
        )
        names = ["rank " + str(a["rank"]) for a in ranks]
        head = f"  {'component':<36}" + "".join(f"{n:>22}" for n in names)
        out += [head, "  " + "-" * (len(head) - 2)]

        def cell(cpu, wall) -> str:
            w = "-" if wall is None else f"{wall:.1f}"
            return f"{f'{cpu:.1f} / {w}':>22}"

        for comp, label in ATTRIBUTION_ROWS:
            cs = [a["components"][comp] for a in ranks]
            if not any(c["cpu_us_per_step"] or c["wall_us_per_step"] for c in cs):
                continue
            out.append(f"  {label:<36}" + "".join(
                cell(c["cpu_us_per_step"], c["wall_us_per_step"]) for c in cs))  # fmt: skip
        sums = [cell(a["total_cpu_us_per_step"], a["total_wall_us_per_step"]) for a in ranks]
        out.append(f"  {'ailens, sum':<36}" + "".join(sums))
        shares = ["-" if a["cpu_share_pct"] is None else f"{a['cpu_share_pct']:.3f} %"
                  for a in ranks]  # fmt: skip
        out.append(f"  {'  share of the step CPU time':<36}" + "".join(f"{x:>22}" for x in shares))
        out.append(f"  {'timers (removed from the above)':<36}" + "".join(
            cell(a["instrument_cpu_us_per_step"], a["instrument_wall_us_per_step"])
            for a in ranks))  # fmt: skip
        fw = [a["components"]["framework"] for a in ranks]
        out.append(f"  {'framework calls inside (not ailens)':<36}" + "".join(
            cell(c["cpu_us_per_step"], c["wall_us_per_step"]) for c in fw))  # fmt: skip
        setup = [f"{a.get('setup_cpu_us', 0) / 1e3:.1f} ms / {a.get('setup_steps', 0)}"
                 for a in ranks]  # fmt: skip
        label = "set-up left out: ms CPU / steps"
        out.append(f"  {label:<36}" + "".join(f"{x:>22}" for x in setup))
        if "attribution_lean" in r:
            lean = r["attribution_lean"]
            out.append(f"  {'lean timers: ailens, sum (CPU)':<36}" + "".join(
                f"{a['total_cpu_us_per_step']:>22.1f}" for a in lean))  # fmt: skip
            out.append(f"  {'    share of the step CPU time':<36}" + "".join(
                f"{a['cpu_share_pct']:>20.3f} %" for a in lean))  # fmt: skip
            xs = r["instrument_out"]
            if all(x["timer_excess_us"] is not None for x in xs):
                out.append(f"  {'timers in place: us each beyond calib.':<36}" + "".join(
                    f"{x['timer_excess_us']:>22.2f}" for x in xs))  # fmt: skip
                out.append(f"  {'ailens, sum, timers taken out (CPU)':<36}" + "".join(
                    f"{x['total_cpu_us_per_step']:>22.1f}" for x in xs))  # fmt: skip
                out.append(f"  {'    share of the step CPU time':<36}" + "".join(
                    f"{x['cpu_share_pct']:>20.3f} %" for x in xs))  # fmt: skip
        out.append(f"  A/B difference (rank 0's blocks, timers in): {r.get('added_us', 0):.1f} "
                   f"us per step, ratio {r['ratio']:.4f}")  # fmt: skip
        out.append("")
    return "\n".join(out)


def with_lean(full: dict, lean: dict) -> dict:
    """``full``'s row with the lean run's attribution beside it (``attribution_lean``) and,
    per rank, the timers' cost in place taken out (``instrument_out``). Every timer at or
    inside the wrappers (theirs, begin/end's, the buffer's, the framework calls') costs in
    place ``e`` beyond what the calibration removed; the lean run has ``n_l`` of them a step
    where the full one has ``n_f``, so wrappers = W + e n: e from the two, W = lean - e n_l."""
    if "skipped" in lean:
        return {**full, "lean_skipped": lean["skipped"]}
    out = []
    for f, g in zip(full["attribution"], lean["attribution"], strict=True):
        fc, gc = f["components"], g["components"]
        n_f = sum(fc[c]["calls_per_step"] for c in ("hooks", "buffer", "framework"))
        n_l = sum(gc[c]["calls_per_step"] for c in ("hooks", "buffer", "framework"))
        w_f = fc["hooks"]["cpu_us_per_step"] + fc["buffer"]["cpu_us_per_step"]
        w_l = gc["hooks"]["cpu_us_per_step"] + gc["buffer"]["cpu_us_per_step"]
        if n_f <= n_l:  # no per-collective timers to drop (none inside the wrappers)
            out.append({"rank": f["rank"], "timer_excess_us": None})
            continue
        e = max((w_f - w_l) / (n_f - n_l), 0.0)
        wrappers = max(w_l - e * n_l, 0.0)
        total = g["total_cpu_us_per_step"] - w_l + wrappers
        step = g["step_cpu_us"]
        out.append({
            "rank": f["rank"],
            "timer_excess_us": round(e, 3),
            "wrappers_cpu_us_per_step": round(wrappers, 1),
            "total_cpu_us_per_step": round(total, 1),
            "cpu_share_pct": round(100 * total / step, 4) if step else None,
        })  # fmt: skip
    return {**full, "attribution_lean": lean["attribution"], "instrument_out": out}


def table(rows: list[dict]) -> str:
    head = (f"{'case':<20} {'framework':<16} {'ranks':>5} {'step ms':>9} {'ratio':>8} "
            f"{'95% CI':>19} {'+us/step':>9} {'load 1m':>7}")  # fmt: skip
    out = [head, "-" * len(head)]
    for r in rows:
        if "skipped" in r:
            out.append(f"{r['name']:<20} {r.get('framework', ''):<16} skipped: {r['skipped']}")
            continue
        lo, hi = r["ci95"]
        out.append(
            f"{r['name']:<20} {r['framework']:<16} {r.get('ranks', ''):>5} {r['step_ms']:>9.3f} "
            f"{r['ratio']:>8.4f} {f'[{lo:.4f}, {hi:.4f}]':>19} {r.get('added_us', 0):>9.1f} "
            f"{r.get('loadavg', [0])[0]:>7.2f}"
        )
    measured = [r for r in rows if "skipped" not in r and r["name"] not in NO_AILENS]
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
        choices=("step", "job", "both", "attribution", "close"),
        default="both",
        help="step cases (A/B inside one run), job cases (whole launches), both (steps, a "
        "bounded wait for the load to settle, jobs); attribution: the step cases with "
        "ailens's parts timed directly; close: Lens.close() after --close-steps steps of 10 "
        "collectives, one rank, in this process",
    )
    p.add_argument(
        "--timers",
        choices=("full", "lean", "both"),
        default="full",
        help="attribution: full (every part timed, begin/end and the event buffer apart), "
        "lean (no timers of their own on the per-collective path inside the adapter's "
        "wrappers: fewer timers per collective, that time counted as the wrappers'), or both "
        "(each case run with full, then lean: the timers' cost in place from the two "
        "densities, and the wrappers' cost with it taken out)",
    )
    p.add_argument("--ranks", type=int, default=2, help="ranks of every multi-rank case and job")
    p.add_argument(
        "--settle-s",
        type=float,
        default=300,
        help="--kind both: seconds to wait at most between the step and the job cases for "
        f"the 1-minute load to fall to {MAX_LOAD}",
    )
    p.add_argument("--close-steps", type=int, default=25_000, help="steps before close")
    p.add_argument("--cases", help="comma-separated case and job names (default: all)")
    p.add_argument("--pairs", type=int, default=20, help="plain/lensed block pairs per case")
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

    if args.ranks < 1:
        p.error("--ranks must be >= 1")
    steps = [c for c in CASES if args.kind in ("step", "both")
             or (args.kind == "attribution" and c.name not in NO_AILENS)]  # fmt: skip
    jobs = [j for j in JOBS if args.kind in ("job", "both")]
    names = [c.name for c in steps] + [j.name for j in jobs]
    chosen = args.cases.split(",") if args.cases else names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)} for --kind {args.kind}; "
                f"cases: {', '.join(names)}")  # fmt: skip
    load_before = harness.loadavg()
    if load_before[0] > MAX_LOAD and not args.force and args.kind != "attribution":
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
    harness.compile_bytecode()  # what a launch imports is the installed package's
    rows, job_rows, settle = [], [], None
    for items, runner, dest in ((steps, run_case, rows), (jobs, run_job, job_rows)):
        if dest is job_rows and rows and any(j.name in chosen for j in jobs):
            settle = settle_load(args.settle_s)
        for case in items:
            if case.name not in chosen:
                continue
            print(f"{case.name}: running (load {os.getloadavg()[0]:.2f})", file=sys.stderr,
                  flush=True)  # fmt: skip
            row = runner(case, args)
            if args.kind == "attribution" and args.timers == "both" and "skipped" not in row:
                lean_args = argparse.Namespace(**{**vars(args), "timers": "lean"})
                row = with_lean(row, runner(case, lean_args))
            if "skipped" in row:
                print(f"{case.name}: skipped: {row['skipped']}", file=sys.stderr, flush=True)
            dest.append(row)
    if rows:
        print(attribution_table(rows) if args.kind == "attribution" else table(rows))
    if job_rows:
        print(job_table(job_rows))
    if args.json:
        doc = {"cases": rows, "jobs": job_rows, "load_before": load_before,
               "load_after": harness.loadavg(), "smoke": args.smoke, "kind": args.kind,
               "ranks": args.ranks, "python": sys.executable}  # fmt: skip
        if settle is not None:
            doc["settle"] = settle
        harness.write_json(args.json, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
