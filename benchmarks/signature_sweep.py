"""The signature rule's constants swept on the MLPerf development corpus (docs/forecast.md,
"The signature"): for each setting, the runs with a signature, its median step fraction (all
runs, and runs of >= 200 steps), the median and mean |error| of its forecast, and how often
its 95 % interval held the actual end. A deterministic replay (the public timeline API).

    .venv/bin/python benchmarks/signature_sweep.py                     # the docs' table
    .venv/bin/python benchmarks/signature_sweep.py --rel-tol 0.02,0.03 --part-precision 0.1

``--rel-tol`` is ``LensConfig.signature_rel_tol``; ``--part-precision`` sets
``LensConfig.signature_part_precision`` for the sweep;
``--levers`` adds the Lens settings outside the rule (the first exchange, the warm-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ailens  # noqa: E402
from ailens import LensConfig  # noqa: E402

MLPERF = REPO / "benchmarks" / "forecast_corpus" / "mlperf"
LONG_RUN = 200
REL_TOL = (0.01, 0.02, 0.025, 0.03, 0.04, 0.05)
PART_PRECISIONS = (0.05, 0.10, 0.20)
# Lens settings outside the rule: the first exchange at step 1 / 4 instead of 5, one warm-up
# step instead of two.
LEVERS = (
    {"signature_window": 2},
    {"signature_window": 8},
    {"warmup_steps": 1},
    {"warmup_steps": 1, "signature_window": 2},
)


def score(timelines: list, config: LensConfig) -> dict:
    """The signature's figures over ``timelines`` under ``config``."""
    frac, long_frac, err, cov = [], [], [], []
    for tl in timelines:
        r = ailens.forecast_timeline(tl, config=config)
        f = r.forecast
        if r.signature_step is None or f is None or f.basis != "signature":
            continue
        frac.append(r.signature_step / tl.total_steps)
        if tl.total_steps >= LONG_RUN:
            long_frac.append(frac[-1])
        err.append(abs(f.error_pct))
        cov.append(bool(f.covered))
    n = len(timelines)
    return {
        "runs_pct": 100 * len(frac) / n if n else None,
        "median_fraction_pct": 100 * statistics.median(frac) if frac else None,
        f"median_fraction_runs_ge_{LONG_RUN}_pct": (
            100 * statistics.median(long_frac) if long_frac else None
        ),
        "long_runs": len(long_frac),
        "median_abs_error_pct": statistics.median(err) if err else None,
        "mean_abs_error_pct": statistics.mean(err) if err else None,
        "coverage_pct": 100 * sum(cov) / len(cov) if cov else None,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rel-tol", help="comma-separated signature_rel_tol values")
    ap.add_argument("--part-precision", help="comma-separated signature_part_precision values")
    ap.add_argument("--levers", action="store_true", help="also the first exchange, warm-up")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    tols = [float(x) for x in args.rel_tol.split(",")] if args.rel_tol else REL_TOL
    precs = (
        [float(x) for x in args.part_precision.split(",")]
        if args.part_precision
        else PART_PRECISIONS
    )
    index = json.loads((MLPERF / "index.json").read_text())
    timelines = [ailens.read_timeline(MLPERF / x["file"], include_init=False) for x in index]
    rows = []
    for prec in precs:
        for tol in tols:
            cfg = LensConfig(signature_rel_tol=tol, signature_part_precision=prec)
            rows.append({"rel_tol": tol, "part_precision": prec, **score(timelines, cfg)})
    if args.levers:
        for lever in LEVERS:
            rows.append({"lever": lever, **score(timelines, LensConfig(**lever))})
    print(f"MLPerf development corpus: {len(timelines)} runs")
    print("setting                               runs  at    >=200  |err| med  mean  coverage")
    for r in rows:
        what = (
            f"rel_tol {100 * r['rel_tol']:.1f} %, part {100 * r['part_precision']:.0f} %"
            if "rel_tol" in r
            else ", ".join(f"{k}={v}" for k, v in r["lever"].items())
        )
        print(
            f"{what:<37} {r['runs_pct']:5.1f} {r['median_fraction_pct']:5.1f} "
            f"{r[f'median_fraction_runs_ge_{LONG_RUN}_pct']:6.1f} "
            f"{r['median_abs_error_pct']:8.2f} {r['mean_abs_error_pct']:6.2f} "
            f"{r['coverage_pct']:7.1f}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
