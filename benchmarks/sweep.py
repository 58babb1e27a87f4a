"""Record the learned predictor's dataset on this machine: the examples x ranks {1, 2} x
threads per rank {1, 2} x two sizes x emulated platforms, one short run each, keeping only
the signature records (``benchmarks/history/records/*.json``, not the traces).

    nice -n 10 python benchmarks/sweep.py                 # everything not yet recorded
    python benchmarks/sweep.py --examples kmeans --platforms full,quota-1.0 --max-runs 8

Platforms are made real with what the machine has (needs root for the cgroup ones):

* ``full``: the whole machine;
* ``quota-X``: a child group of the cgroup v1 cpu controller
  (``/sys/fs/cgroup/cpu/ailens-sweep-quota-X``) with ``cpu.cfs_quota_us`` = X CPUs; each
  launcher puts itself into ``cgroup.procs`` before it execs, so every rank is inside;
* ``core0``: ``taskset``-style affinity to CPU 0 only.

Each platform is described once by ``ailens probe`` run inside it
(``benchmarks/history/platforms/NAME.json``). The sweep resumes: a record already present
is not run again. The order (size, platform, example, ranks, threads) keeps a partial sweep
balanced. Every run has a timeout; the 1-minute load average before and after is stored
in the record (``sweep`` key).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import _harness as harness  # noqa: E402

from ailens.tools import signature_record  # noqa: E402

OUT = REPO / "benchmarks" / "history"
CGROUP = Path("/sys/fs/cgroup/cpu")

# name -> (run script, fixed flags, sizes {label: flags}, scaling mode, batch flag or None)
EXAMPLES = {
    "kmeans": ("examples/kmeans/run",
               ["--progress-every", "0", "--eval-every", "0", "--checkpoint-every", "0",
                "--iterations", "30"],
               {"p20k": ["--points", "20000"], "p80k": ["--points", "80000"],
                "p5k": ["--points", "5000"]}, "strong"),
    "mnist-ddp": ("examples/mnist/run",
                  ["--framework", "ddp", "--eval-every-epochs", "0", "--checkpoint-every", "0",
                   "--progress-every", "0", "--epochs", "1"],
                  {"b16": ["--batch-size", "16"], "b64": ["--batch-size", "64"],
                   "b32": ["--batch-size", "32"]}, "weak"),
    "mnist-hvd": ("examples/mnist/run",
                  ["--framework", "torch", "--eval-every-epochs", "0", "--checkpoint-every", "0",
                   "--progress-every", "0", "--epochs", "1"],
                  {"b16": ["--batch-size", "16"], "b64": ["--batch-size", "64"],
                   "b32": ["--batch-size", "32"]}, "weak"),
    "resnet50-ddp": ("examples/resnet50/run",
                     ["--framework", "ddp", "--eval-batches", "0", "--checkpoint-every", "0",
                      "--progress-every", "0", "--steps", "8"],
                     {"i32b2": ["--image-size", "32", "--batch-size", "2"],
                      "i32b4": ["--image-size", "32", "--batch-size", "4"]}, "weak"),
}  # fmt: skip
# name -> (CPU quota in CPUs or None, CPUs to pin to or None)
PLATFORMS = {
    "full": (None, None),
    "quota-1.5": (1.5, None),
    "quota-1.0": (1.0, None),
    "core0": (None, [0]),
    "quota-0.7": (0.7, None),
}
PERIOD_US = 100_000


def cgroup_for(name: str, quota: float | None) -> Path | None:
    """The cpu-controller child group of a quota platform (created and set)."""
    if quota is None:
        return None
    g = CGROUP / f"ailens-sweep-{name}"
    g.mkdir(exist_ok=True)
    (g / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (g / "cpu.cfs_quota_us").write_text(str(int(quota * PERIOD_US)))
    return g


def _enter(group: Path | None, cpus: list[int] | None):
    """preexec_fn: move the launcher into the platform before it execs (its ranks follow)."""

    def enter() -> None:
        if group is not None:
            (group / "cgroup.procs").write_text(str(os.getpid()))
        if cpus is not None:
            os.sched_setaffinity(0, cpus)

    return enter


def call(cmd: list[str], env: dict, platform: str, timeout: float) -> str:
    quota, cpus = PLATFORMS[platform]
    enter = _enter(cgroup_for(platform, quota), cpus)
    return harness.launch_all([cmd], env, timeout, " ".join(cmd), preexec_fn=enter)


def probe_platform(name: str, timeout: float) -> None:
    dest = OUT / "platforms" / f"{name}.json"
    if dest.exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    cmd = [harness.PY, "-m", "ailens", "probe", "--seconds", "1.0", "--name", name, "-o", str(dest)]
    call(cmd, harness.rank_env(1), name, timeout)
    print(f"probed {name}: {dest}", flush=True)


def run_one(example: str, size: str, platform: str, ranks: int, threads: int, timeout: float,
            tmp: Path, repeat: int = 0) -> Path | None:  # fmt: skip
    """One run; its signature record in records/ (None when already there)."""
    job = f"{example}/{size}"
    key = f"{example}__{size}__{platform}__r{ranks}t{threads}" + (
        f"__rep{repeat}" if repeat else ""
    )
    dest = OUT / "records" / f"{key}.json"
    if dest.exists():
        return None
    script, flags, sizes, mode = EXAMPLES[example]
    d = tmp / key
    shutil.rmtree(d, ignore_errors=True)
    cmd = [harness.PY, str(REPO / script), "--ranks", str(ranks), "--threads", str(threads),
           "--run-dir", str(d), *flags, *sizes[size]]  # fmt: skip
    before, t0 = harness.load1(), time.perf_counter()
    call(cmd, harness.rank_env(threads), platform, timeout)
    wall = time.perf_counter() - t0
    flags_s = sizes[size]
    batch = next((int(v) for k, v in zip(flags_s, flags_s[1:]) if k == "--batch-size"), None)  # noqa: B905
    rec = signature_record(harness.analyze_run(d), job=job, mode=mode, batch_size=batch,
                           platform=platform)  # fmt: skip
    rec["run_dir"] = f"(removed) {key}"
    rec["sweep"] = {"key": key, "example": example, "size": size, "wall_s": wall, "repeat": repeat,
                    "load_before": before, "load_after": harness.load1(),
                    "command": cmd[1:]}  # fmt: skip
    dest.parent.mkdir(parents=True, exist_ok=True)
    harness.write_json(dest, rec, sort_keys=True, newline=False)
    shutil.rmtree(d, ignore_errors=True)
    print(f"{key}: step {rec['step']['step_s'] * 1e3:.2f} ms, wall {wall:.1f} s, "
          f"load {before} -> {rec['sweep']['load_after']}", flush=True)  # fmt: skip
    return dest


def main() -> int:
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", default=",".join(EXAMPLES))
    ap.add_argument("--platforms", default=",".join(PLATFORMS))
    ap.add_argument("--max-runs", type=int, default=0, help="stop after N new runs (0: all)")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per run")
    ap.add_argument("--repeat", type=int, default=0,
                    help="N > 0: run the cells again as repeat N (run-to-run spread)")  # fmt: skip
    ap.add_argument("--sizes", type=int, default=2, help="sizes per example, in order (max 3)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"dataset directory (default {OUT})")
    args = ap.parse_args()
    OUT = args.out
    examples = args.examples.split(",")
    platforms = args.platforms.split(",")
    unknown = [x for x in examples if x not in EXAMPLES] + [
        p for p in platforms if p not in PLATFORMS
    ]
    if unknown:
        ap.error(f"unknown {unknown}: examples {list(EXAMPLES)}, platforms {list(PLATFORMS)}")
    if any(PLATFORMS[p][0] is not None for p in platforms) and not os.access(CGROUP, os.W_OK):
        ap.error(f"{CGROUP} is not writable (run as root on cgroup v1, or drop quota-* platforms)")
    done = failed = 0
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ailens-sweep-") as tmp:
        for platform in platforms:
            probe_platform(platform, args.timeout)
        todo = [
            (example, list(EXAMPLES[example][2])[size_i], platform, ranks, threads)
            for size_i in range(args.sizes)
            for platform in platforms
            for example in examples
            if size_i < len(EXAMPLES[example][2])
            for ranks in (1, 2)
            for threads in (1, 2)
        ]
        for example, size, platform, ranks, threads in todo:
            if args.max_runs and done >= args.max_runs:
                break
            try:
                got = run_one(
                    example, size, platform, ranks, threads, args.timeout, Path(tmp), args.repeat
                )
            except Exception as e:  # noqa: BLE001 - one failed run: go on with the others
                failed += 1
                print(f"FAILED {example}/{size} {platform} r{ranks}t{threads}: {e}", flush=True)
                continue
            done += got is not None
    n = len(list((OUT / "records").glob("*.json")))
    print(
        f"{done} new runs, {failed} failed, {n} records in {OUT / 'records'}, "
        f"{time.perf_counter() - t_start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
