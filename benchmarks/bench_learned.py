"""Accuracy of the learned step-time predictor on the recorded dataset (issue 16).

    python benchmarks/bench_learned.py --json OUT.json [--records DIR] [--splits 3]

Reads the signature records of ``benchmarks/sweep.py`` (default benchmarks/history/records)
and reports:

* **repeat spread** (printed): configurations recorded more than once (``sweep.py
  --repeat N``): how far one run lies from the others' mean, the noise floor of any MAPE;
* **held out configurations** (seed 002's split: runs split 4:1, each side deduplicated,
  configurations on both sides dealt out again 4:1; ``--splits`` random splits, figures
  averaged): step-time MAPE of the analytic what-if and of each learner trained on the
  training configurations only, predicting every held-out configuration from every
  training run of the same job; ``best`` is the learner ``fit`` keeps by its own validation
  inside the training side (not chosen on the test figures);
* **leave one platform out** (seed 001's measures): trained without platform P (no run on P
  as source or target), predicting the runs on P from the runs elsewhere: MAPE over those
  (source, target) pairs; per job and layout (a sample), P's predicted step time is the
  geometric mean of its predictions from every other-platform run of that job; R² of P's
  relative performance (log of its step time over the geometric mean of the other
  platforms' measured step times, same job and layout); ``ordering``: share of samples whose
  vector of step times across platforms (P predicted, the others measured) is in the
  measured order.

Writes ``{"runs", "held_out": {"analytic_mape", "learned_mape": {learner: x}, "best"},
"platform_out": [{"platform", "mape", "r2", "ordering"}]}`` (percentages as numbers,
ordering as a fraction) and prints the tables.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import _harness as harness  # noqa: E402

from ailens.tools import (  # noqa: E402
    LEARNERS,
    LearnError,
    config_key,
    configs,
    fit_learner,
    fit_model,
    mape,
    pairs,
    predict_residual,
    split_configs,
    torch_available,
)


def held_out(records: list[dict], learners, splits: int, steps: int) -> dict:
    keys = [config_key(r) for r in records]
    ana, learned, best = [], {k: [] for k in learners}, []
    for seed in range(splits):
        train, test = split_configs(keys, 0.2, seed)
        tr_recs = [r for r in records if config_key(r) in train]
        Xt, yt, _, _, kt = pairs(tr_recs)
        Xs, _, a_s, m_s, _ = pairs(records, targets=test, sources=train)
        ana.append(mape(a_s, m_s))
        for name in learners:
            m = fit_learner(name, Xt, yt, kt, seed, finet_steps=steps)
            learned[name].append(mape(a_s * np.exp(predict_residual(m, Xs)), m_s))
        chosen = fit_model(tr_recs, learners=learners, seed=seed, finet_steps=steps)["best"]
        best.append(chosen)
        print(f"  split {seed}: {len(train)} train / {len(test)} held-out configurations, "
              f"{len(m_s)} test pairs; analytic {ana[-1]:.1f} %, "
              + ", ".join(f"{k} {v[-1]:.1f} %" for k, v in learned.items())
              + f"; fit keeps {chosen}", flush=True)  # fmt: skip
    return {
        "analytic_mape": float(np.mean(ana)),
        "learned_mape": {k: float(np.mean(v)) for k, v in learned.items()},
        "best": max(set(best), key=best.count),
    }


def repeat_spread(records: list[dict]) -> str | None:
    """Run-to-run spread of configurations measured more than once: the mean |difference|
    of each run from the other runs' mean, in % (the noise floor of any MAPE here)."""
    devs = []
    for c in configs(records).values():
        t = [r["step"]["step_s"] for r in c["records"]]
        for i, v in enumerate(t[: len(t) if len(t) > 1 else 0]):
            rest = float(np.mean(t[:i] + t[i + 1 :]))
            devs.append(abs(v - rest) / rest)
    if not devs:
        return None
    return (f"run-to-run spread of {len(devs)} runs of repeated configurations: mean "
            f"{100 * np.mean(devs):.1f} %, median {100 * np.median(devs):.1f} %")  # fmt: skip


def _r2(pred: np.ndarray, meas: np.ndarray) -> float:
    ss = float(np.sum((meas - meas.mean()) ** 2))
    return 1.0 - float(np.sum((pred - meas) ** 2)) / ss if ss > 0 else float("nan")


def platform_out(records: list[dict], learners, steps: int) -> tuple[list[dict], list[dict]]:
    """Per platform: (the issue's row, the analytic baseline's row)."""
    cfg = configs(records)
    plats = sorted({k[1] for k in cfg})
    rows, base = [], []
    for P in plats:
        on_p = {k for k in cfg if k[1] == P}
        others = set(cfg) - on_p
        tr_recs = [r for r in records if config_key(r) not in on_p]
        try:
            model = fit_model(tr_recs, learners=learners, seed=0, finet_steps=steps)
        except LearnError as e:
            print(f"  without {P}: skipped ({e})")
            continue
        X, _, a, m, keys = pairs(records, targets=on_p, sources=others)
        pred = a * np.exp(predict_residual(model["model"], X))
        row, brow = {"platform": P}, {"platform": P}
        for out, p in ((row, pred), (brow, a)):
            out["mape"] = mape(p, m)
            # Per sample (job, layout): P's prediction = geometric mean over the sources.
            by: dict = {}
            for k, v in zip(keys, p, strict=True):
                by.setdefault(k, []).append(math.log(v))
            rel_p, rel_m, ok = [], [], []
            for k, logs in by.items():
                same = [cfg[o]["step_s"] for o in others if o[0] == k[0] and o[2:] == k[2:]]
                if not same:
                    continue
                ref = float(np.mean(np.log(same)))
                guess = float(np.mean(logs))
                meas = math.log(cfg[k]["step_s"])
                rel_p.append(guess - ref)
                rel_m.append(meas - ref)
                ok.append(all((guess < math.log(s)) == (meas < math.log(s)) for s in same))
            out["r2"] = _r2(np.array(rel_p), np.array(rel_m)) if rel_p else float("nan")
            out["ordering"] = float(np.mean(ok)) if ok else float("nan")
        row["learner"] = model["best"]
        print(f"  without {P}: {len(m)} pairs, {len(by)} samples; fit keeps {model['best']}",
              flush=True)  # fmt: skip
        rows.append(row)
        base.append(brow)
    return rows, base


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=None, metavar="OUT.json")
    ap.add_argument("--records", type=Path, default=REPO / "benchmarks" / "history" / "records")
    ap.add_argument("--splits", type=int, default=3, help="random held-out splits (default 3)")
    ap.add_argument("--steps", type=int, default=300, help="FI-Net optimiser steps")
    ap.add_argument("--learners", default=",".join(LEARNERS))
    args = ap.parse_args()
    learners = [x for x in args.learners.split(",") if x]
    if "finet" in learners and not torch_available():
        print("finet skipped: torch not installed (pip install ailens[learn])")
        learners.remove("finet")
    records = [json.loads(f.read_text()) for f in sorted(args.records.glob("*.json"))]
    if not records:
        print(f"no records in {args.records}: run python benchmarks/sweep.py first")
        return 2
    t0 = time.perf_counter()
    load0 = harness.load1()
    print(f"{len(records)} runs, {len(configs(records))} configurations, "
          f"{len({r['job'] for r in records})} jobs, "
          f"{len({r['platform']['name'] for r in records})} platforms")  # fmt: skip
    spread = repeat_spread(records)
    if spread:
        print(spread)
    print("held-out configurations:")
    ho = held_out(records, learners, args.splits, args.steps)
    print("leave one platform out:")
    po, po_base = platform_out(records, learners, args.steps)
    print()
    print("| predictor | held-out MAPE |\n|---|---|")
    print(f"| analytic what-if | {ho['analytic_mape']:.2f} % |")
    for k, v in ho["learned_mape"].items():
        print(f"| {k}{' (kept by fit)' if k == ho['best'] else ''} | {v:.2f} % |")
    print()
    print("| held-out platform | learner | MAPE | R² rel. perf. | ordering | analytic MAPE | "
          "analytic R² | analytic ordering |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    for r, b in zip(po, po_base, strict=True):
        print(f"| {r['platform']} | {r['learner']} | {r['mape']:.2f} % | {r['r2']:.3f} | "
              f"{r['ordering']:.2f} | {b['mape']:.2f} % | {b['r2']:.3f} | "
              f"{b['ordering']:.2f} |")  # fmt: skip
    print(f"\n{time.perf_counter() - t0:.0f} s, load average {load0:.2f} -> "
          f"{harness.load1():.2f}")  # fmt: skip
    doc = {
        "runs": len(records),
        "held_out": ho,
        "platform_out": [{k: r[k] for k in ("platform", "mape", "r2", "ordering")} for r in po],
    }
    if args.json is not None:
        harness.write_json(args.json, doc, indent=2, newline=False)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
