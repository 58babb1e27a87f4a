"""Forecast accuracy on the real examples: total time from the signature, early stop, and
the 1-rank <-> 2-rank scaling what-if.

    .venv/bin/python benchmarks/bench_forecast.py               # kmeans, resnet50-ddp, mnist
    .venv/bin/python benchmarks/bench_forecast.py --examples kmeans --json out.json
    .venv/bin/python benchmarks/bench_forecast.py --calibrate   # `ailens calibrate` first

For each example (its documented ``run --ranks N --run-dir DIR [--early-stop] <sizes>``):

1. a full run on 2 ranks and on 1 rank; ``analyze`` replays each and reports the forecast the
   Lens made at the signature step: |predicted - actual| / actual, and the fraction of the
   steps (and of the time) at which it was made;
2. an ``--early-stop`` run on 2 ranks: the forecast it wrote for the full run against the
   full run's actual time, and how much of the run it needed;
3. scaling: ``whatif`` from the 1-rank run to 2 ranks (collectives from the cost model:
   calibration.json with ``--calibrate``, else the labelled default) and from the 2-rank run
   to 1 rank (collectives removed), against the measured runs: step time and total.

Goals (issue "Forecasts"): <= 1 % total-time error from <= 5 % of the steps; <= 5 % scaling
error. The machine's load average is printed: on a shared machine step times move with
other jobs, which no forecast can see coming.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ailens import load_run  # noqa: E402
from ailens._analysis import analyze  # noqa: E402
from ailens._whatif import whatif  # noqa: E402

BIN = Path(sys.executable).parent

# name: (run script, size flags, what-if mode, fixed dataset, launcher it needs)
EXAMPLES = {
    # Global problem fixed (points split across ranks), iterations fixed: strong scaling.
    "kmeans": (
        "examples/kmeans/run",
        ["--points", "100000", "--iterations", "500", "--progress-every", "0"],
        "strong",
        True,
        "mpiexec",
    ),
    # Per-rank batch fixed, steps fixed: weak scaling with a fixed number of steps.
    "resnet50-ddp": (
        "examples/resnet50/run",
        [
            "--framework",
            "ddp",
            "--steps",
            "300",
            "--image-size",
            "32",
            "--batch-size",
            "4",
            "--progress-every",
            "0",
        ],
        "weak",
        False,
        "torchrun",
    ),
    # Per-rank batch fixed, epochs over a fixed dataset: weak scaling, steps x p/p'.
    "mnist-torch": (
        "examples/mnist/run",
        ["--framework", "torch", "--epochs", "20", "--progress-every", "0"],
        "weak",
        True,
        "horovodrun",
    ),
}


def load() -> str:
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


MAX_LOAD: float | None = None  # --max-load: wait for a quieter machine before each run
WAIT_LIMIT_S = 1800.0


def wait_for_quiet() -> None:
    """Wait (up to WAIT_LIMIT_S) until the 1-minute load average is under MAX_LOAD: step
    times on a shared machine follow the other jobs, and so would the errors below."""
    if MAX_LOAD is None:
        return
    deadline = time.monotonic() + WAIT_LIMIT_S
    while os.getloadavg()[0] > MAX_LOAD and time.monotonic() < deadline:
        time.sleep(15)


def launch(script: str, ranks: int, run_dir: Path, flags: list[str], timeout: float) -> float:
    """Run an example to completion in its own process group; returns wall seconds."""
    wait_for_quiet()
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cmd = [
        sys.executable,
        str(REPO / script),
        "--ranks",
        str(ranks),
        "--run-dir",
        str(run_dir),
        *flags,
    ]
    t = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        raise RuntimeError(f"{' '.join(cmd)}: timed out after {timeout:.0f} s") from None
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{out[-3000:]}")
    return time.perf_counter() - t


def pct(pred: float | None, actual: float | None) -> float | None:
    if pred is None or not actual:
        return None
    return 100.0 * (pred - actual) / actual


def forecast_row(a) -> dict:
    f = a.forecast
    if f is None:
        return {"forecast": None, "warnings": list(a.warnings)}
    actual = f.actual_total_s
    lo, hi = f.interval_s
    return {
        "predicted_total_s": f.predicted_total_s,
        "interval_s": [lo, hi],
        "actual_total_s": actual,
        "error_pct": pct(f.predicted_total_s, actual),
        "inside_interval": actual is not None and lo <= actual <= hi,
        "signature_step": f.signature_step,
        "total_steps": f.total_steps,
        "step_fraction": f.signature_fraction,
        "time_fraction": (f.signature_elapsed_s / actual)
        if f.signature_elapsed_s and actual
        else None,
        "spread_method": f.spread_method,
    }


def scaling_row(src, dst, q: int, mode: str, fixed_dataset: bool) -> dict:
    (row,) = whatif(src, [q], mode=mode, fixed_dataset=fixed_dataset)
    warm = dst.config.warmup_steps
    t = dst.step_end_s
    step_meas = (t[-1] - t[warm - 1]) / (len(t) - warm)
    total_meas = dst.forecast.actual_total_s if dst.forecast else float(t[-1])
    return {
        "from_ranks": src.ranks,
        "to_ranks": q,
        "predicted_step_s": row.step_time_s,
        "measured_step_s": step_meas,
        "step_error_pct": pct(row.step_time_s, step_meas),
        "predicted_total_s": row.total_time_s,
        "measured_total_s": total_meas,
        "total_error_pct": pct(row.total_time_s, total_meas),
        "predicted_comm_pct": row.comm_pct,
        "measured_comm_pct": dst.comm_pct,
    }


def bench(name: str, out: Path, timeout: float, calibrate: bool) -> dict:
    script, flags, mode, fixed_dataset, launcher = EXAMPLES[name]
    if not (BIN / launcher).exists() and shutil.which(launcher) is None:
        return {"example": name, "skipped": f"{launcher} not installed"}
    res: dict = {
        "example": name,
        "mode": mode,
        "fixed_dataset": fixed_dataset,
        "flags": flags,
        "load_before": load(),
    }
    runs = {}
    for ranks in (2, 1):
        d = out / f"{name}-{ranks}"
        res[f"wall_{ranks}_s"] = launch(script, ranks, d, flags, timeout)
        if calibrate and ranks == 1:
            subprocess.run(
                [
                    str(BIN / "mpiexec"),
                    "-n",
                    "2",
                    sys.executable,
                    "-m",
                    "ailens._calibrate",
                    "--out",
                    str(d / "calibration.json"),
                ],
                check=True,
                timeout=120,
                capture_output=True,
            )
        runs[ranks] = analyze(load_run(d))
        res[f"forecast_{ranks}"] = forecast_row(runs[ranks])
    d = out / f"{name}-2-early"
    res["wall_early_s"] = launch(script, 2, d, [*flags, "--early-stop"], timeout)
    doc = json.loads((d / "forecast.json").read_text())
    full = res["forecast_2"].get("actual_total_s")
    res["early_stop"] = {
        "steps_run": doc["steps_done"],
        "total_steps": doc["total_steps"],
        "step_fraction": doc["steps_done"] / doc["total_steps"] if doc["total_steps"] else None,
        "signature_step": doc["signature_step"],
        "predicted_total_s": doc["predicted_total_s"],
        "full_run_actual_s": full,
        "error_pct": pct(doc["predicted_total_s"], full),
        "time_fraction": doc["elapsed_s"] / full if full else None,
    }
    res["scaling"] = [
        scaling_row(runs[1], runs[2], 2, mode, fixed_dataset),
        scaling_row(runs[2], runs[1], 1, mode, fixed_dataset),
    ]
    res["calibrated"] = calibrate
    res["load_after"] = load()
    return res


def fmt(x, spec=".1f", suffix="") -> str:
    return "n/a" if x is None else f"{x:{spec}}{suffix}"


def _share(x) -> str:
    return fmt(None if x is None else 100 * x, ".1f", "%")


def summary(results: list[dict]) -> str:
    out = [
        "",
        "Total-time forecast made at the signature (full runs)",
        "example        ranks  signature  % steps  % time  predicted    actual    error  interval",
    ]
    for r in results:
        if "skipped" in r:
            out.append(f"{r['example']:<14} skipped: {r['skipped']}")
            continue
        for ranks in (2, 1):
            f = r[f"forecast_{ranks}"]
            head = f"{r['example']:<14} {ranks:>5}  "
            if f.get("predicted_total_s") is None:
                out.append(head + "no forecast: " + "; ".join(f.get("warnings", [])))
            elif f["signature_step"] is None:
                out.append(head + "no signature: step time never settled within the tolerance")
            else:
                out.append(
                    head + f"{f['signature_step']:>9}  {_share(f['step_fraction']):>7}  "
                    f"{_share(f['time_fraction']):>6}  {f['predicted_total_s']:>8.2f}s "
                    f"{f['actual_total_s']:>8.2f}s  {fmt(f['error_pct'], '+.2f', '%'):>7}  "
                    + ("inside" if f["inside_interval"] else "OUTSIDE")
                )
    out += [
        "",
        "Early stop on 2 ranks: its forecast for the full run vs the full run",
        "example        steps run  % steps  % time  predicted   full run    error",
    ]
    for r in results:
        e = r.get("early_stop")
        if not e:
            continue
        if e["signature_step"] is None:
            out.append(f"{r['example']:<14} no signature: ran all {e['steps_run']} steps")
            continue
        out.append(
            f"{r['example']:<14} {e['steps_run']:>9}  {_share(e['step_fraction']):>7}  "
            f"{_share(e['time_fraction']):>6}  {e['predicted_total_s']:>8.2f}s "
            f"{fmt(e['full_run_actual_s'], '.2f', 's'):>9}  {fmt(e['error_pct'], '+.2f', '%'):>7}"
        )
    out += [
        "",
        "Scaling what-if vs measured",
        "example        mode    from->to  step pred  step meas  step err  total err  "
        "comm% pred/meas",
    ]
    for r in results:
        for c in r.get("scaling", ()):
            out.append(
                f"{r['example']:<14} {r['mode']:<7} {c['from_ranks']:>4}->{c['to_ranks']:<3} "
                f"{c['predicted_step_s'] * 1e3:>8.1f}ms {c['measured_step_s'] * 1e3:>8.1f}ms "
                f"{fmt(c['step_error_pct'], '+.1f', '%'):>8}  "
                f"{fmt(c['total_error_pct'], '+.1f', '%'):>8}  "
                f"{c['predicted_comm_pct']:.1f}/{c['measured_comm_pct']:.1f}"
            )
    loads = [
        f"{r['example']} {r.get('load_before')} -> {r.get('load_after')}"
        for r in results
        if "skipped" not in r
    ]
    out += ["", "load average before -> after (1/5/15 min): " + ", ".join(loads)]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--examples", default=",".join(EXAMPLES), help="comma-separated: " + ", ".join(EXAMPLES)
    )
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "bench_forecast")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per example run")
    ap.add_argument(
        "--calibrate", action="store_true", help="run `ailens calibrate` for the 1->2 what-if"
    )
    ap.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="before each run, wait (up to 30 min) for the 1-minute load average to drop "
        "below this",
    )
    args = ap.parse_args()
    global MAX_LOAD
    MAX_LOAD = args.max_load
    args.out.mkdir(parents=True, exist_ok=True)
    print(
        f"bench_forecast: {os.cpu_count()} cores, load {load()}, runs under {args.out}", flush=True
    )
    results = []
    for name in args.examples.split(","):
        if name not in EXAMPLES:
            print(f"unknown example {name!r}; choose from {', '.join(EXAMPLES)}", file=sys.stderr)
            return 2
        print(f"== {name}", flush=True)
        try:
            results.append(bench(name, args.out, args.timeout, args.calibrate))
        except (RuntimeError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            results.append({"example": name, "skipped": f"failed: {e}"})
        print(json.dumps(results[-1], indent=1, default=str), flush=True)
    print(summary(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
