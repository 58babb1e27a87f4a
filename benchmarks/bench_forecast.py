"""Forecast accuracy: ailens against the progress-bar ETA, on a corpus of recorded runs replayed
deterministically, and live on the examples.

    .venv/bin/python benchmarks/bench_forecast.py corpus --json OUT.json   # replay the corpus
    .venv/bin/python benchmarks/bench_forecast.py record                   # (re)record real runs
    .venv/bin/python benchmarks/bench_forecast.py live --examples kmeans   # end to end, now

``corpus`` replays every run stored under ``benchmarks/forecast_corpus/`` (real runs of the
examples, recorded once by ``record`` with the command and load average beside each) and a
set of synthetic runs with known answers (a real Lens driven by a fake clock: steady, noisy,
evaluation marked or not, checkpoints, changes of speed, one-off pauses, drift). Each run is
fed through the same code as ``ailens predict`` (``analyze`` -> ``OnlineAnalysis``); at 1, 5,
10 and 20 % of the steps it takes the forecast made at that step and the progress-bar ETA a
user already has (elapsed + remaining steps x mean step time so far, as tqdm and Keras'
progbar compute it), both scored against the run's actual total.

Goals (issue "Forecasts that beat a progress bar"): median |error| at 5 % <= 1 %; on every
run |ailens| <= |naive| + 0.25 points at 5, 10 and 20 %; interval coverage >= 90 %;
signature at <= 5 % of the steps on every run with step CV <= 10 %.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ailens  # noqa: E402
from ailens import load_run  # noqa: E402
from ailens._analysis import analyze  # noqa: E402
from ailens._forecast import naive_total_s  # noqa: E402

CORPUS = REPO / "benchmarks" / "forecast_corpus"
FRACTIONS = (1, 5, 10, 20)
BIN = Path(sys.executable).parent


def loadavg() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


# --------------------------------------------------------------------------- replay


def replay(run_dir: Path) -> dict:
    """Score one recorded run: forecast and progress bar at each fraction of the steps."""
    seen: dict[int, tuple] = {}
    a = analyze(load_run(run_dir), watch=lambda oa: _watch(oa, seen))
    f = a.forecast
    if f is None or not f.actual_total_s or not f.total_steps:
        raise ValueError(f"{run_dir}: no finished run with a known total ({a.warnings})")
    n, actual = f.total_steps, f.actual_total_s
    row = {"steps": n, "ranks": a.ranks, "actual_total_s": actual}
    err = {"ailens": {}, "naive": {}}
    covered = {}
    for pct in FRACTIONS:
        s = max(1, math.floor(pct / 100 * n))
        pred, interval, naive = seen.get(s, (None, None, None))
        err["ailens"][str(pct)] = None if pred is None else 100 * (pred - actual) / actual
        err["naive"][str(pct)] = None if naive is None else 100 * (naive - actual) / actual
        covered[str(pct)] = None if interval is None else interval[0] <= actual <= interval[1]
    row["error_pct"] = err
    row["covered"] = covered
    row["signature_fraction"] = f.signature_fraction
    row["step_cv"] = _step_cv(a)
    return row


def _watch(oa, seen: dict) -> None:
    p = oa.predict()
    seen[p.steps_done] = (
        p.predicted_total_s,
        p.interval_s,
        naive_total_s(p.elapsed_s, p.steps_done, p.total_steps),
    )


def _step_cv(a) -> float:
    """Coefficient of variation of the training-step times after warm-up (sections out)."""
    t = np.asarray(a.step_end_s)
    d = np.diff(np.concatenate(([0.0], t)))
    for m in a.run.ranks[0].marks:
        if m.get("kind") == "section" and m.get("step", 0) < len(d):
            d[m["step"]] -= (m["t_end_ns"] - m["t_begin_ns"]) / 1e9
    d = d[a.config.warmup_steps :]
    return float(d.std() / d.mean()) if len(d) > 1 and d.mean() > 0 else 0.0


# --------------------------------------------------------------------------- synthetic runs


class FakeClock:
    def __init__(self) -> None:
        self.now = 10**9

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(round(seconds * 1e9))


class FakeCounter:
    kind, unit, fallback_reason = "cpu-ns", "ns", None

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock

    def read(self) -> int:
        return self.clock.now  # one busy core: work = time

    def close(self) -> None:
        pass


def synthetic(name: str, run_dir: Path, seed: int = 0) -> list[str]:
    """Drive a real Lens through a scripted run with a fake clock; returns its structure."""
    rng = np.random.default_rng(seed)
    n, m = 2000, 0.1
    d = rng.normal(m, 0.05 * m, n)
    structure: list[str] = []
    sections: dict[int, tuple[str, float]] = {}
    schedule: dict = {}
    if name == "steady-cv2":
        d = rng.normal(m, 0.02 * m, n)
    elif name == "steady-cv10":
        d = rng.normal(m, 0.10 * m, n)
    elif name == "noisy-machine":  # 4 % of the steps 2-4x slower: another job's bursts
        slow = rng.random(n) < 0.04
        d[slow] *= rng.uniform(2, 4, slow.sum())
        structure.append("noise")
    elif name == "eval-marked":  # an evaluation section after each epoch, schedule known
        schedule = {"steps_per_epoch": 100, "eval_every_epochs": 1, "eval_steps": 30}
        sections = {k: ("eval", rng.normal(1.0, 0.05)) for k in range(100, n + 1, 100)}
        structure.append("eval")
    elif name == "eval-in-steps":  # a plain loop: the evaluation makes an epoch's first step long
        schedule = {"steps_per_epoch": 50}
        d[50::50] += 0.5
        structure.append("eval")
    elif name == "eval-and-checkpoint-unknown":  # nothing said: both learned from the steps
        d[24::25] += 0.5
        d[99::100] += 1.0
        structure += ["eval", "checkpoint"]
    elif name == "slowdown":  # another job takes the cores at 3 % of the steps and stays
        d[60:] *= 1.3
        structure.append("slowdown")
    elif name == "burst":  # another job from 2 to 4 % of the steps
        d[40:80] *= 1.5
        structure.append("slowdown")
    elif name == "long-warmup":
        d[:30] *= np.linspace(4, 1, 30)
        structure.append("warm-up")
    elif name == "gc-pauses":  # three one-off pauses, far apart
        d[[120, 900, 1600]] += 2.0
        structure.append("one-offs")
    elif name == "drift":  # thermal throttling: 20 % slower by the end
        d *= np.linspace(1, 1.2, n)
        structure.append("slowdown")
    else:
        raise ValueError(name)
    d = np.clip(d, 0.2 * m, None)
    clock = FakeClock()
    lens = ailens.Lens(
        run_dir=run_dir,
        clock=clock,
        work_counter=FakeCounter(clock),
        total_steps=n,
        framework="synthetic",
    )
    if schedule:
        lens.set_schedule(**schedule)
    clock.advance(0.5)  # start-up before the first step
    for i, x in enumerate(d):
        clock.advance(0.8 * x)
        lens.collective_begin("allreduce", 4 << 20)
        clock.advance(0.2 * x)
        lens.collective_end()
        lens.step_end()
        if i + 1 in sections:
            what, secs = sections[i + 1]
            lens.section_begin(what)
            clock.advance(secs)
            lens.section_end()
    lens.close()
    return structure


SYNTHETIC = (
    "steady-cv2",
    "steady-cv10",
    "noisy-machine",
    "eval-marked",
    "eval-in-steps",
    "eval-and-checkpoint-unknown",
    "slowdown",
    "burst",
    "long-warmup",
    "gc-pauses",
    "drift",
)


# --------------------------------------------------------------------------- corpus


def corpus(args) -> int:
    rows = []
    for d in sorted(p for p in args.dir.iterdir() if (p / "case.json").is_file()):
        case = json.loads((d / "case.json").read_text())
        try:
            row = replay(d)
        except (ValueError, ailens.TraceError) as e:
            print(f"skipped {d.name}: {e}", file=sys.stderr)
            continue
        rows.append(
            {
                "name": d.name,
                "kind": _load_group(case),
                "structure": case["structure"],
                "load": [case.get("load_before"), case.get("load_after")],
                **row,
            }
        )
    if not args.no_synthetic:
        with tempfile.TemporaryDirectory() as tmp:
            for name in SYNTHETIC:
                for seed in range(args.seeds):
                    run_dir = Path(tmp) / f"{name}-{seed}"
                    structure = synthetic(name, run_dir, seed)
                    row = replay(run_dir)
                    rows.append(
                        {
                            "name": f"synthetic/{name}/{seed}",
                            "kind": "synthetic",
                            "structure": structure,
                            **row,
                        }
                    )
    summary = summarise(rows)
    groups = {k: summarise([r for r in rows if r["kind"] == k]) for k in _kinds(rows)}
    print(table(rows, summary))
    for kind, s in groups.items():
        print(f"\n-- {kind} ({s['runs']} runs)\n" + "\n".join(summary_lines(s)))
    if args.json:
        doc = {"runs": rows, "summary": summary, "summary_by_kind": groups}
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def _load_group(case: dict) -> str:
    """Recorded runs by the machine's 1-minute load average around them: "busy" when it
    exceeded the cores (more runnable threads than cores: other jobs took time)."""
    loads = [
        float(str(x).split("/")[0]) for x in (case.get("load_before"), case.get("load_after")) if x
    ]
    busy = bool(loads) and max(loads) > (case.get("cores") or 2)
    return "recorded, busy machine" if busy else "recorded"


def _kinds(rows: list[dict]) -> list[str]:
    return sorted({r["kind"] for r in rows})


def summarise(rows: list[dict]) -> dict:
    at5 = [
        abs(r["error_pct"]["ailens"]["5"])
        for r in rows
        if r["error_pct"]["ailens"]["5"] is not None
    ]
    at5n = [
        abs(r["error_pct"]["naive"]["5"]) for r in rows if r["error_pct"]["naive"]["5"] is not None
    ]
    worse = []
    for r in rows:
        for pct in ("5", "10", "20"):
            ours, naive = r["error_pct"]["ailens"][pct], r["error_pct"]["naive"][pct]
            if ours is None or naive is None or abs(ours) > abs(naive) + 0.25:
                worse.append(f"{r['name']}@{pct}%")
    cov = [c for r in rows for c in r["covered"].values() if c is not None]
    late = [
        r["name"]
        for r in rows
        if r["step_cv"] <= 0.10
        and (r["signature_fraction"] is None or r["signature_fraction"] > 0.05)
    ]
    return {
        "runs": len(rows),
        "median_abs_error_5pct": {"ailens": _median(at5), "naive": _median(at5n)},
        "worse_than_naive": worse,
        "coverage": sum(cov) / len(cov) if cov else None,
        "pairs": len(cov),
        "late_signature_cv_le_10pct": late,
    }


def _median(x: list[float]) -> float | None:
    return float(np.median(x)) if x else None


def _f(x, spec="+.2f") -> str:
    return "   n/a" if x is None else f"{x:{spec}}"


def table(rows: list[dict], s: dict) -> str:
    out = [
        f"{'run':<40} {'steps':>6} {'cv':>5} {'sig%':>5}  "
        + "  ".join(f"{p:>2}%: ailens  naive  in" for p in FRACTIONS)
    ]
    for r in rows:
        sig = r["signature_fraction"]
        line = (
            f"{r['name'][:40]:<40} {r['steps']:>6} {r['step_cv']:>5.2f} "
            f"{'  n/a' if sig is None else f'{100 * sig:5.1f}'}  "
        )
        cells = []
        for p in FRACTIONS:
            k = str(p)
            c = r["covered"][k]
            cells.append(
                f"    {_f(r['error_pct']['ailens'][k]):>6} {_f(r['error_pct']['naive'][k]):>6} "
                f"{'  ' if c is None else ('ok' if c else '--')}"
            )
        out.append(line + "  ".join(cells))
    return "\n".join([*out, "", *summary_lines(s)])


def summary_lines(s: dict) -> list[str]:
    m = s["median_abs_error_5pct"]
    return [
        f"median |error| at 5 %: ailens {_f(m['ailens'], '.2f')} %, progress bar "
        f"{_f(m['naive'], '.2f')} %  (goal <= 1 %)",
        f"interval coverage: {_f(None if s['coverage'] is None else 100 * s['coverage'], '.1f')} % "
        f"of {s['pairs']} (run, fraction) pairs  (goal >= 90 %)",
        f"worse than the progress bar by > 0.25 points at 5/10/20 %: "
        f"{len(s['worse_than_naive'])}  {', '.join(s['worse_than_naive'][:12])}",
        f"signature later than 5 % on runs with step CV <= 10 %: "
        f"{len(s['late_signature_cv_le_10pct'])}  "
        + ", ".join(s["late_signature_cv_le_10pct"][:12]),
    ]


# --------------------------------------------------------------------------- recording

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


def record(args) -> int:
    names = args.only.split(",") if args.only else list(CASES)
    for name in names:
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
            before = loadavg()
            print(f"== {name}: {' '.join(cmd[1:])}  (load {before})", flush=True)
            t0 = time.time()
            code = _run_with_slowdown(cmd, run_dir, slow_at)
            if code:
                print(f"   failed with exit code {code}; not stored", flush=True)
                continue
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
                "load_after": loadavg(),
                "wall_s": round(time.time() - t0, 1),
                "recorded": time.strftime("%Y-%m-%d %H:%M:%S%z"),
                "cores": os.cpu_count(),
            }
            (out / "case.json").write_text(json.dumps(case, indent=1) + "\n")
            print(
                f"   stored in {out} ({case['wall_s']} s, load after {case['load_after']})",
                flush=True,
            )
    return 0


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
            doc = _read_json(run_dir / "forecast.json")
            if doc and doc.get("total_steps") and doc["steps_done"] >= slow_at * doc["total_steps"]:
                hogs = [
                    subprocess.Popen([sys.executable, "-c", "while True: pass"])
                    for _ in range(os.cpu_count() or 2)
                ]
        return proc.wait()
    finally:
        for h in hogs:
            h.kill()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- live


def live(args) -> int:
    """Run examples end to end now and score their forecasts (the machine's load included)."""
    rows = []
    for name in args.examples.split(","):
        script, ranks, flags, structure, _ = CASES[name]
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            before = loadavg()
            code = subprocess.run(
                [
                    sys.executable,
                    str(REPO / script),
                    "--ranks",
                    str(ranks),
                    "--run-dir",
                    str(run_dir),
                    "--progress-every",
                    "0",
                    *flags,
                ],
                cwd=REPO,
                capture_output=True,
                timeout=args.timeout,
            ).returncode
            if code:
                print(f"{name}: exit code {code}", file=sys.stderr)
                continue
            rows.append(
                {
                    "name": name,
                    "kind": "live",
                    "structure": structure,
                    "load": [before, loadavg()],
                    **replay(run_dir),
                }
            )
    summary = summarise(rows)
    print(table(rows, summary))
    print("load average before/after: " + ", ".join(f"{r['name']} {r['load']}" for r in rows))
    if args.json:
        args.json.write_text(json.dumps({"runs": rows, "summary": summary}, indent=1) + "\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode")
    c = sub.add_parser("corpus", help="replay the stored corpus and the synthetic runs")
    c.add_argument("--dir", type=Path, default=CORPUS)
    c.add_argument("--json", type=Path)
    c.add_argument("--seeds", type=int, default=2, help="seeds per synthetic scenario")
    c.add_argument("--no-synthetic", action="store_true")
    r = sub.add_parser("record", help="run the examples and store their traces in the corpus")
    r.add_argument("--dir", type=Path, default=CORPUS)
    r.add_argument("--only", help="comma-separated case names: " + ", ".join(CASES))
    v = sub.add_parser("live", help="run examples end to end now and score their forecasts")
    v.add_argument("--examples", default="kmeans-2,resnet50-ddp-2,mnist-torch-2")
    v.add_argument("--json", type=Path)
    v.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    if args.mode is None:
        ap.print_help()
        return 2
    return {"corpus": corpus, "record": record, "live": live}[args.mode](args)


if __name__ == "__main__":
    raise SystemExit(main())
