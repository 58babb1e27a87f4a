"""Recording the examples into the forecast corpus (``bench_forecast.py record``) on a quiet
machine, and the cases it records (also run end to end by ``bench_forecast.py live``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _harness as harness

REPO = Path(__file__).resolve().parents[1]
# A recording counts as made on a quiet machine below this 1-minute load average.
QUIET_LOAD = 0.5

# name: (run script, ranks, flags, structure, slowdown at this fraction of the steps or None)
CASES = {
    "kmeans-1": (
        "examples/kmeans/run",
        1,
        ["--points", "100000", "--iterations", "1500", "--threads", "1"],
        ["eval", "checkpoint"],
        None,
    ),
    "kmeans-2": (
        "examples/kmeans/run",
        2,
        ["--points", "200000", "--iterations", "1500"],
        ["eval", "checkpoint"],
        None,
    ),
    "kmeans-2-slowdown": (
        "examples/kmeans/run",
        2,
        ["--points", "200000", "--iterations", "1500"],
        ["eval", "checkpoint", "slowdown"],
        0.4,
    ),
    "resnet50-ddp-1": (
        "examples/resnet50/run",
        1,
        ["--framework", "ddp", "--steps", "600", "--image-size", "32", "--batch-size", "4"],
        ["eval", "checkpoint"],
        None,
    ),
    "resnet50-ddp-2": (
        "examples/resnet50/run",
        2,
        ["--framework", "ddp", "--steps", "600", "--image-size", "32", "--batch-size", "4"],
        ["eval", "checkpoint"],
        None,
    ),
    "resnet50-ddp-2-slowdown": (
        "examples/resnet50/run",
        2,
        ["--framework", "ddp", "--steps", "600", "--image-size", "32", "--batch-size", "4"],
        ["eval", "checkpoint", "slowdown"],
        0.3,
    ),
    "resnet50-horovod-1": (
        "examples/resnet50/run",
        1,
        ["--framework", "horovod", "--steps", "600", "--image-size", "32", "--batch-size", "4"],
        ["eval", "checkpoint"],
        None,
    ),
    "resnet50-horovod-2": (
        "examples/resnet50/run",
        2,
        ["--framework", "horovod", "--steps", "600", "--image-size", "32", "--batch-size", "4"],
        ["eval", "checkpoint"],
        None,
    ),
    "mnist-torch-1": (
        "examples/mnist/run",
        1,
        ["--framework", "torch", "--epochs", "30", "--batch-size", "16"],
        ["eval", "checkpoint"],
        None,
    ),
    "mnist-torch-2": (
        "examples/mnist/run",
        2,
        ["--framework", "torch", "--epochs", "60", "--batch-size", "16"],
        ["eval", "checkpoint"],
        None,
    ),
    "mnist-ddp-1": (
        "examples/mnist/run",
        1,
        ["--framework", "ddp", "--epochs", "30", "--batch-size", "16"],
        ["eval", "checkpoint"],
        None,
    ),
    "mnist-ddp-2": (
        "examples/mnist/run",
        2,
        ["--framework", "ddp", "--epochs", "60", "--batch-size", "16"],
        ["eval", "checkpoint"],
        None,
    ),
    "mnist-keras-1": (
        "examples/mnist/run",
        1,
        ["--framework", "keras", "--epochs", "30", "--batch-size", "16"],
        ["eval", "checkpoint"],
        None,
    ),
    "mnist-keras-2": (
        "examples/mnist/run",
        2,
        ["--framework", "keras", "--epochs", "60", "--batch-size", "16"],
        ["eval", "checkpoint"],
        None,
    ),
    "mnist-keras-plain-1": (
        "examples/mnist/run",
        1,
        ["--framework", "keras-plain", "--epochs", "30", "--batch-size", "16"],
        ["eval", "checkpoint"],
        None,
    ),
}


def recording_set(case: dict) -> str:
    """The set of a recording (its ``source`` is "recorded"): "recorded" when made on a quiet
    machine (the recorder's load check passed, not forced; the 1-minute load at most
    ``QUIET_LOAD`` per two cores, the development machine's size), else "recorded-loaded"."""
    before = case.get("load_1min_before")
    limit = QUIET_LOAD * max(1, int(case.get("cores") or 2)) / 2
    quiet = before is not None and float(before) <= limit and not case.get("forced")
    return "recorded" if quiet else "recorded-loaded"


def record(args) -> int:
    names = args.only.split(",") if args.only else list(CASES)
    for i, name in enumerate(names):
        load = _quiet_load(args, wait=0 if i == 0 else args.settle)
        if load is None:
            return 2
        script, ranks, flags, structure, slow_at = CASES[name]
        out = args.dir / name
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            cmd = [
                sys.executable,
                str(REPO / script),
                "--ranks",
                str(ranks),
                "--run-dir",
                str(run_dir),
                "--progress-every",
                "0",
                *flags,
            ]
            before = harness.loadavg_text()
            print(f"== {name}: {' '.join(cmd[1:])}  (load {before})", flush=True)
            t0 = time.time()
            code = _run_with_slowdown(cmd, run_dir, slow_at)
            if code:
                print(f"   failed with exit code {code}; not stored", flush=True)
                continue
            _keep_loaded(out)
            if out.exists():
                shutil.rmtree(out)
            out.mkdir(parents=True)
            for f in [*run_dir.glob("rank-*.ailens"), run_dir / "forecast.json"]:
                if f.is_file():
                    shutil.copy2(f, out / f.name)
            case = {
                "command": " ".join(
                    [Path(sys.executable).name, script, "--ranks", str(ranks), *flags]
                ),
                "structure": structure,
                "slowdown_at_fraction": slow_at,
                "load_before": before,
                "load_after": harness.loadavg_text(),
                "load_1min_before": round(load, 2),
                "load_1min_after": round(os.getloadavg()[0], 2),
                "max_load": args.max_load,
                "forced": bool(args.force and load > args.max_load),
                "wall_s": round(time.time() - t0, 1),
                "recorded": time.strftime("%Y-%m-%d %H:%M:%S%z"),
                "cores": os.cpu_count(),
            }
            harness.write_json(out / "case.json", case)
            print(
                f"   stored in {out} ({case['wall_s']} s, load after {case['load_after']})",
                flush=True,
            )
    return 0


def _keep_loaded(out: Path) -> None:
    """A loaded recording stored under ``out`` moves to the first free ``<case>-recN``: the
    robustness set keeps it when the case is recorded again."""
    case = harness.read_json(out / "case.json")
    if case is None or recording_set(case) != "recorded-loaded":
        return
    n = 0
    while (dst := out.with_name(f"{out.name}-rec{n}")).exists():
        n += 1
    out.rename(dst)
    print(f"   the loaded recording {out.name} moved to {dst.name} (robustness set)", flush=True)


def _quiet_load(args, *, wait: float) -> float | None:
    """The 1-minute load average once it is at most ``--max-load`` (waiting up to ``wait``
    seconds for the previous case's load to decay); None (with the reason printed) when it
    stays above and ``--force`` was not given. Timings recorded beside other work follow the
    neighbours, not the training."""
    load, quiet = harness.quiet_load(args.max_load, 0 if args.force else wait)
    if quiet:
        return load
    if args.force:
        print(f"   load {load:.2f} > {args.max_load}: recording anyway (--force); the case "
              "is marked forced and stays out of the headline", flush=True)  # fmt: skip
        return load
    print(
        f"bench_forecast record: the 1-minute load average is {load:.2f} > "
        f"{args.max_load}: other work is running on this machine, and recorded step "
        "times would follow it. Record on a quiet machine (no other jobs, test suites "
        "or builds), or pass --force to record anyway (cases marked forced).",
        file=sys.stderr,
    )
    return None


def _run_with_slowdown(cmd: list[str], run_dir: Path, slow_at: float | None) -> int:
    """Run an example; at ``slow_at`` of its steps start two CPU hogs (another job taking the
    cores) that stay until it ends."""
    proc = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    hogs: list[subprocess.Popen] = []
    try:
        while proc.poll() is None:
            time.sleep(0.5)
            if slow_at is None or hogs:
                continue
            doc = harness.read_json(run_dir / "forecast.json")
            if doc and doc.get("total_steps") and doc["steps_done"] >= slow_at * doc["total_steps"]:
                hogs = [
                    subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(os.cpu_count() or 2)
                ]
        return proc.wait()
    finally:
        for hog in hogs:
            hog.kill()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
