"""The scaling what-if against measured runs: predicted vs measured step time.

    python benchmarks/bench_whatif.py --json OUT.json            # everything (~5 min here)
    python benchmarks/bench_whatif.py --examples kmeans --no-links --quick
    python benchmarks/bench_whatif.py --public --json OUT.json   # public data only (replay)

``--public`` replays the public measurements of ``../shared/scaling-dev`` (``--data``) and
runs nothing: see ``benchmarks/public_cases.py``. Its cases are reported apart from the local
ones below.

For each example it runs the real example with ailens attached and predicts one run's step
time from another's trace (``ailens.predict.whatif.whatif``), calibrated the way a user would:
``ailens calibrate`` launched like the job (mpiexec / torchrun / horovodrun) on its own
transport, with the run's own message sizes.

* kmeans (mpi4py, strong scaling), resnet50 (DDP, gloo), mnist (Horovod-torch, gloo): 1 -> 2
  and 2 -> 1 ranks with one thread per rank, and with the examples' default threads (the
  node's cores divided among the ranks: 1 rank x 2 threads <-> 2 ranks x 1 thread here);
* kmeans (MPI) and mnist (DDP, gloo): 2 ranks on one host (loopback) -> 2 ranks on two
  emulated hosts (network namespaces, one rank each, own hostname) joined by a 1 Gbit/s,
  0.2 ms link and by a 100 Mbit/s, 1 ms link, and back (skipped with the reason when network
  namespaces are not available: not root, no iproute2).

Measured step time = mean duration of the post-warm-up training steps of the target run (the
same ``WARMUP`` for prediction and measurement; evaluation and checkpoints turned off so
steps are training only). The 1-minute load average is recorded before and after every run:
other jobs on the machine change step times by more than the goal (|error| <= 5 %).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

import _harness as harness  # noqa: E402
import netns  # noqa: E402

from ailens.predict.whatif import features, measured_step_s, merge_calibrations, whatif  # noqa: E402

WARMUP = 3
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
LINKS = ((1000.0, 0.2), (100.0, 1.0))  # (Mbit/s, one-way ms)
_FEATURE_KEYS = ("step_s", "compute_s", "imbalance_s", "comm_s", "overlap_s", "cpu_s",
                 "parallelism", "model_error_pct")  # fmt: skip


# name: run script, size flags (quick, full), mode, transport, launcher, rank script, netns
EXAMPLES = {
    "kmeans": {
        "run": "examples/kmeans/run",
        "flags": ["--progress-every", "0", "--eval-every", "0", "--checkpoint-every", "0"],
        "size": {"quick": ["--points", "100000", "--iterations", "60"],
                 "full": ["--points", "200000", "--iterations", "300"]},
        "mode": "strong",
        "transport": "mpi",
        "launcher": "mpiexec",
        "rank_script": "examples/kmeans/kmeans.py",
    },
    "resnet50-ddp": {
        "run": "examples/resnet50/run",
        "flags": ["--framework", "ddp", "--image-size", "32", "--batch-size", "4",
                  "--eval-batches", "0", "--checkpoint-every", "0", "--progress-every", "0"],
        "size": {"quick": ["--steps", "15"], "full": ["--steps", "60"]},
        "mode": "weak",
        "transport": "gloo",
        "launcher": "torchrun",
    },
    "mnist-torch": {
        "run": "examples/mnist/run",
        "flags": ["--framework", "torch", "--eval-every-epochs", "0", "--checkpoint-every", "0",
                  "--progress-every", "0"],
        "size": {"quick": ["--epochs", "2"], "full": ["--epochs", "10"]},
        "mode": "weak",
        "transport": "horovod",
        "launcher": "horovodrun",
    },
    "mnist-ddp": {  # the gloo example across emulated hosts (small gradients: link-bound)
        "run": "examples/mnist/run",
        "flags": ["--framework", "ddp", "--eval-every-epochs", "0", "--checkpoint-every", "0",
                  "--progress-every", "0"],
        "size": {"quick": ["--epochs", "2"], "full": ["--epochs", "10"]},
        "mode": "weak",
        "transport": "gloo",
        "launcher": "torchrun",
        "rank_script": "examples/mnist/train_torch.py",
    },
}  # fmt: skip
CPU_EXAMPLES = ("kmeans", "resnet50-ddp", "mnist-torch")
LINK_EXAMPLES = ("kmeans", "mnist-ddp")


class Bench:
    def __init__(self, out: Path, size: str, timeout: float) -> None:
        self.out = out
        self.size = size
        self.timeout = timeout
        self.runs: dict[str, dict] = {}

    # ------------------------------------------------------------ launching

    def run(self, name: str, ranks: int, threads: int, link=None, hosts=None, *,
            pin: bool = False) -> dict:  # fmt: skip
        """One run of an example; returns its record (run dir, load before/after). ``pin``:
        the job confined to ``ranks x threads`` cores (``taskset``), one core per thread."""
        key = f"{name}-r{ranks}-t{threads}-" + ("loopback" if link is None else _link_key(link))
        if key in self.runs:
            return self.runs[key]
        ex = EXAMPLES[name]
        d = self.out / key
        shutil.rmtree(d, ignore_errors=True)
        flags = [*ex["flags"], *ex["size"][self.size]]
        rec = {"key": key, "dir": str(d), "load_before": harness.load1()}
        t0 = time.perf_counter()
        if link is None:
            cmd = [harness.PY, str(REPO / ex["run"]), "--ranks", str(ranks), "--threads",
                   str(threads), "--run-dir", str(d), *flags]  # fmt: skip
            if pin:
                cmd = ["taskset", "-c", f"0-{ranks * threads - 1}", *cmd]
                rec["cores"] = ranks * threads
            harness.launch_all([cmd], harness.rank_env(threads), self.timeout, key)
        else:
            harness.launch_all(*self._link_cmds(name, d, threads, flags, hosts), self.timeout, key)
        rec["wall_s"] = time.perf_counter() - t0
        rec["load_after"] = harness.load1()
        self.runs[key] = rec
        print(f"  ran {key}: {rec['wall_s']:.0f} s, load {rec['load_before']} -> "
              f"{rec['load_after']}", flush=True)  # fmt: skip
        return rec

    def _link_cmds(self, name, d: Path, threads: int, flags: list[str], hosts):
        """The example's rank script launched across the two emulated hosts, with the
        arguments and environment its ``run`` script would give it."""
        ex = EXAMPLES[name]
        script = str(REPO / ex["rank_script"])
        d.mkdir(parents=True, exist_ok=True)
        env = harness.rank_env(threads, {**hosts.env(), "TF_USE_LEGACY_KERAS": "1"})
        if name == "kmeans":
            argv = [harness.PY, script, "--run-dir", str(d), "--warmup", "2", *flags]
            return [hosts.mpiexec_cmd(str(harness.BIN / "mpiexec"), argv)], env
        argv = [script, "--run-dir", str(d), "--threads", str(threads), "--warmup", "5", *flags]
        return hosts.torchrun_cmds(str(harness.BIN / "torchrun"), argv), env

    def calibrate(self, name: str, run_dir: str, link=None, hosts=None) -> dict:
        """``ailens calibrate`` on the example's transport, launched like the example, with
        the (op, bytes) pairs of ``run_dir``; returns the document."""
        ex = EXAMPLES[name]
        key = f"cal-{name}-" + ("loopback" if link is None else _link_key(link))
        out = self.out / f"{key}.json"
        if key in self.runs:
            return self.runs[key]["doc"]
        args = ["-m", "ailens", "calibrate", "--out", str(out), "--sizes-from", run_dir,
                "--max-bytes", str(4 << 20)]  # fmt: skip
        rec = {"load_before": harness.load1()}
        if link is None:
            env = harness.rank_env(1)
            cmds = [harness.launcher_command(ex["launcher"], 2, args, python=harness.PY)]
        else:
            env = harness.rank_env(1, hosts.env())
            if ex["launcher"] == "mpiexec":
                cmds = [hosts.mpiexec_cmd(str(harness.BIN / "mpiexec"), [harness.PY, *args])]
            else:
                cmds = hosts.torchrun_cmds(str(harness.BIN / "torchrun"), args, port=29544)
        harness.launch_all(cmds, env, self.timeout, key)
        rec.update(doc=json.loads(out.read_text()), load_after=harness.load1())
        self.runs[key] = rec
        print(f"  calibrated {key}, load {rec['load_before']} -> {rec['load_after']}", flush=True)
        return rec["doc"]


class Priority(threading.Thread):
    """Keeps every process this benchmark starts at niceness ``nice``: the process itself
    and its session's autogroup (with autogroup scheduling, each session, and every launcher
    starts one, competes as a whole whatever its processes' nice values)."""

    def __init__(self, nice: int) -> None:
        super().__init__(daemon=True, name="bench-priority")
        self.nice = nice
        self.done: set[int] = set()

    def run(self) -> None:
        import psutil

        me = psutil.Process()
        self.apply(me.pid)
        while True:
            try:
                for child in me.children(recursive=True):
                    if child.pid not in self.done:
                        self.apply(child.pid)
            except psutil.Error:
                pass
            time.sleep(0.05)  # polling the process table, not waiting on a process

    def apply(self, pid: int) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, pid, self.nice)
            Path(f"/proc/{pid}/autogroup").write_text(str(self.nice))
            self.done.add(pid)
        except OSError:
            pass


def _link_key(link) -> str:
    return f"link{link[0]:g}mbit{link[1]:g}ms"


def _case(bench: Bench, name: str, src: dict, dst: dict, frm: dict, to: dict, cal: dict) -> dict:
    ex = EXAMPLES[name]
    a_src = harness.analyze_run(src["dir"])
    a_dst = harness.analyze_run(dst["dir"])
    rpn = 1 if to["link"] != "loopback" else to["ranks"]
    (row,) = whatif(
        a_src,
        [to["ranks"]],
        mode=ex["mode"],
        threads_per_rank=to["threads"],
        ranks_per_node=rpn,
        calibration=cal,
        warmup=WARMUP,
    )
    meas = measured_step_s(a_dst, WARMUP)
    err = 100.0 * (row.step_time_s - meas) / meas
    f_src, f_dst = features(a_src, warmup=WARMUP), features(a_dst, warmup=WARMUP)
    return {
        "example": name,
        "from": frm,
        "to": to,
        "predicted_step_s": row.step_time_s,
        "measured_step_s": meas,
        "error_pct": err,
        "predicted_compute_step_s": row.compute_step_s,
        "predicted_comm_step_s": row.comm_step_s,
        "measured_compute_step_s": f_dst.compute_s + f_dst.imbalance_s,
        "measured_comm_step_s": f_dst.comm_s,
        "source_features": {k: getattr(f_src, k) for k in _FEATURE_KEYS},
        "target_features": {k: getattr(f_dst, k) for k in _FEATURE_KEYS},
        "compute_factor": row.compute_factor,
        "assumptions": list(row.assumptions),
        "load": {
            "from_run": [src["load_before"], src["load_after"]],
            "to_run": [dst["load_before"], dst["load_after"]],
        },
    }


def cpu_cases(bench: Bench, name: str) -> list[dict]:
    """1 <-> 2 ranks on this host, one thread per rank and the default threads."""
    r11 = bench.run(name, 1, 1)
    r21 = bench.run(name, 2, 1)
    r12 = bench.run(name, 1, max(CORES, 1))
    cal = bench.calibrate(name, r21["dir"])
    lp = "loopback"
    cases = []
    d2 = max(CORES // 2, 1)
    for src, dst, frm, to in (
        (r11, r21, (1, 1), (2, 1)),
        (r21, r11, (2, 1), (1, 1)),
        (r12, r21, (1, CORES), (2, d2)),
        (r21, r12, (2, d2), (1, CORES)),
    ):
        cases.append(
            _case(
                bench, name, src, dst,
                {"ranks": frm[0], "threads": frm[1], "link": lp},
                {"ranks": to[0], "threads": to[1], "link": lp},
                cal,
            )
        )  # fmt: skip
    return cases


def ladder_cases(bench: Bench, name: str, counts: list[int]) -> list[dict]:
    """Runs at every rank count of ``counts`` (one thread per rank, the job on as many
    cores); predictions from the two smallest counts to every larger one, and from the third
    to the largest. Needs a machine with ``max(counts)`` cores."""
    runs = {n: bench.run(name, n, 1, pin=True) for n in counts}
    cal = bench.calibrate(name, runs[counts[1] if len(counts) > 1 else counts[0]]["dir"])
    pairs = [(a, b) for a in counts[:2] for b in counts if b > a]
    if len(counts) > 3:
        pairs.append((counts[2], counts[-1]))
    lp = "loopback"
    return [
        _case(bench, name, runs[a], runs[b], {"ranks": a, "threads": 1, "link": lp},
              {"ranks": b, "threads": 1, "link": lp}, cal)
        for a, b in pairs
    ]  # fmt: skip


def link_cases(bench: Bench, name: str) -> list[dict]:
    """2 ranks on one host <-> 2 ranks on two emulated hosts, for each link setting."""
    local = bench.run(name, 2, 1)
    cal_local = bench.calibrate(name, local["dir"])
    cases = []
    for link in LINKS:
        with netns.TwoHosts(*link) as hosts:
            remote = bench.run(name, 2, 1, link, hosts)
            cal_link = bench.calibrate(name, local["dir"], link, hosts)
            desc = hosts.describe()
        cal = merge_calibrations([cal_link, cal_local])
        lk = f"{link[0]:g} Mbit/s, {link[1]:g} ms ({desc['method'].split(' (')[0]})"
        lp = {"ranks": 2, "threads": 1, "link": "loopback"}
        ln = {"ranks": 2, "threads": 1, "link": lk}
        cases.append(_case(bench, name, local, remote, lp, ln, cal))
        cases.append(_case(bench, name, remote, local, ln, lp, cal))
    return cases


def table(cases: list[dict]) -> str:
    def lay(d):
        return f"{d['ranks']}r x {d['threads']}t {d['link'].split(' (')[0]}"

    out = [
        f"{'example':<13} {'from':<28} {'to':<28} {'predicted':>10} {'measured':>10} "
        f"{'error':>7}  load (from run / to run)"
    ]
    for c in cases:
        if "skipped" in c:
            out.append(f"{c['example']:<13} skipped: {c['skipped']}")
            continue
        ld = c["load"]
        out.append(
            f"{c['example']:<13} {lay(c['from']):<28} {lay(c['to']):<28} "
            f"{c['predicted_step_s'] * 1e3:>8.1f}ms {c['measured_step_s'] * 1e3:>8.1f}ms "
            f"{c['error_pct']:>+6.1f}%  {ld['from_run'][0]}->{ld['from_run'][1]} / "
            f"{ld['to_run'][0]}->{ld['to_run'][1]}"
        )
    errs = [abs(c["error_pct"]) for c in cases if "error_pct" in c]
    if errs:
        within = sum(e <= 5 for e in errs)
        out.append(
            f"{len(errs)} cases: |error| mean {sum(errs) / len(errs):.1f} %, "
            f"max {max(errs):.1f} %, {within} within 5 %"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=None, help="write the cases here")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "bench_whatif")
    ap.add_argument("--examples", default=",".join(dict.fromkeys(CPU_EXAMPLES + LINK_EXAMPLES)))
    ap.add_argument("--quick", action="store_true", help="short runs (development)")
    ap.add_argument(
        "--ladder",
        default="",
        help="rank counts, e.g. 1,2,4,8,16: run CPU examples at each (one thread per rank, "
        "pinned to that many cores) and predict from the two smallest counts to every larger "
        "one and from the third to the largest, instead of the 1 <-> 2 and link cases (a "
        "machine with that many cores)",
    )
    ap.add_argument("--no-links", action="store_true", help="skip the emulated-host cases")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per launch")
    ap.add_argument(
        "--nice",
        type=int,
        default=0,
        help="run every launched process (and its session's autogroup) at this niceness, "
        "e.g. -15 as root: on a machine shared with other jobs the runs then get most of the "
        "CPU time (the load average still counts the others)",
    )
    ap.add_argument(
        "--public",
        action="store_true",
        help="replay the public measurements (collectives, data-parallel scaling) instead of "
        "running the local examples",
    )
    ap.add_argument(
        "--data",
        type=Path,
        default=None,
        help="the public data folder (default: $AILENS_SCALING_DATA or ../shared/scaling-dev)",
    )
    args = ap.parse_args()
    if args.public:
        return public_main(args)
    if args.nice:
        Priority(args.nice).start()
    args.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.examples.split(",") if n]
    for n in names:
        if n not in EXAMPLES:
            print(f"unknown example {n!r}; choose from {', '.join(EXAMPLES)}", file=sys.stderr)
            return 2
    bench = Bench(args.out, "quick" if args.quick else "full", args.timeout)
    t0 = time.perf_counter()
    print(f"bench_whatif: {CORES} cores, load {os.getloadavg()}, runs under {args.out}",
          flush=True)  # fmt: skip
    cases: list[dict] = []
    if args.ladder:
        counts = sorted({int(x) for x in args.ladder.split(",") if x})
        if counts[-1] > CORES:
            print(f"--ladder {args.ladder}: needs {counts[-1]} cores, this machine has {CORES}",
                  file=sys.stderr)  # fmt: skip
            return 2
        for n in names:
            print(f"== {n}: ranks {counts}", flush=True)
            try:
                done = ladder_cases(bench, n, counts)
            except (RuntimeError, OSError, ValueError) as e:
                done = [{"example": n, "skipped": f"failed: {e}"}]
            cases += done
            print(table(done), flush=True)  # each example's cases as soon as they exist
            if args.json:  # kept as it goes: a time limit on the whole run loses nothing done
                harness.write_json(args.json, {"cases": cases, "partial": True}, indent=2,
                                   default=str)  # fmt: skip
        names = []  # the ladder replaces the 1 <-> 2 and link cases
    for n in names:
        if n not in CPU_EXAMPLES:
            continue
        print(f"== {n}: 1 <-> 2 ranks", flush=True)
        try:
            cases += cpu_cases(bench, n)
        except (RuntimeError, OSError, ValueError) as e:
            cases.append({"example": n, "skipped": f"failed: {e}"})
    ok, why = netns.available()
    for n in names:
        if n not in LINK_EXAMPLES or args.no_links:
            continue
        print(f"== {n}: loopback <-> emulated hosts", flush=True)
        if not ok:
            cases.append({"example": n, "skipped": f"emulated hosts unavailable: {why}"})
            continue
        try:
            cases += link_cases(bench, n)
        except (RuntimeError, OSError, ValueError) as e:
            cases.append({"example": n, "skipped": f"failed: {e}"})
    print(table(cases))
    doc = {
        "cases": cases,
        "warmup_steps": WARMUP,
        "cores": CORES,
        "size": bench.size,
        "seconds": time.perf_counter() - t0,
        "runs": {k: {x: v for x, v in r.items() if x != "doc"} for k, r in bench.runs.items()},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "nice": args.nice,
        "machine": harness.describe_machine(),
    }
    if args.json:
        harness.write_json(args.json, doc, indent=2, default=str)
    return 0


def public_main(args) -> int:
    """``--public``: the cases of ``public_cases.CASE_BUILDERS``, their summary and goals."""
    import public_cases as pc
    import public_scaling as ps
    import public_scaling_goals
    import public_scaling_two as ps2

    for build in (ps.scaling_cases, ps2.two_scale_cases):
        if build not in pc.CASE_BUILDERS:
            pc.CASE_BUILDERS.append(build)
    t0 = time.perf_counter()
    data = args.data or pc.default_data_dir()
    try:
        cases = pc.public_cases(data)
    except FileNotFoundError as e:
        print(f"bench_whatif: {e}", file=sys.stderr)
        return 2
    print(pc.table(cases))
    print(ps2.table(cases))
    goals = {
        **pc.goals(cases),
        **public_scaling_goals.scaling_goals(cases),
        "measured_scales": ps2.goals(cases, data),
        "compute_floor": ps.compute_floor_check(data),
    }
    print(json.dumps(goals, indent=2))
    if args.json:
        doc = {
            "public_cases": cases,
            "summary": pc.summary(cases),
            "goals": goals,
            "diagnostics": pc.collective_diagnostics(data),
            "data": str(data),
            "seconds": time.perf_counter() - t0,
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
        }
        harness.write_json(args.json, doc, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
