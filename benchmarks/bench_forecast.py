"""Forecast accuracy: ailens against the progress-bar ETA and Composer's RuntimeEstimator, on
a corpus of real runs replayed deterministically, and live on the examples.

    .venv/bin/python benchmarks/bench_forecast.py corpus --json OUT.json   # replay the corpus
    .venv/bin/python benchmarks/bench_forecast.py record                   # re-record (quiet!)
    .venv/bin/python benchmarks/bench_forecast.py live --examples kmeans   # end to end, now

``corpus`` replays, each tagged with its ``source`` (``mlperf``, ``recorded`` or ``synthetic``)
and its ``set`` (the source, with ``recorded-loaded`` for recordings made on a loaded machine):

- ``mlperf``: the MLPerf Training logs under ``benchmarks/forecast_corpus/mlperf/`` (real
  large-scale runs; see its README for provenance and the selection rule), through the public
  timeline API (``ailens.read_timeline`` -> ``ailens.forecast_timeline``), from ``run_start``
  to ``run_stop``, with the run's real number of steps given (MLPerf runs stop at a target
  accuracy: the forecaster gets what a progress bar is given);
- ``recorded``: runs of the examples recorded by ``record`` on a quiet machine (1-minute load
  average <= 0.5 before the run, not forced), through the same code as ``ailens predict``
  (``analyze`` -> ``OnlineAnalysis``);
- ``recorded-loaded`` (source ``recorded``): recordings made while other work shared the machine
  (every run recorded before the load check existed): a robustness set, reported apart, never in
  the headline;
- ``synthetic``: runs with known answers (a real Lens driven by a fake clock: steady, noisy,
  evaluation marked or not, checkpoints, changes of speed, one-off pauses, drift).

At 1, 5, 10, 20 and 50 % of the steps it takes the forecast a user would have read at that step,
the progress-bar ETA (elapsed + remaining steps x mean step time so far, as tqdm and Keras'
progbar compute it) and Composer's RuntimeEstimator (``ailens.model.baselines``), all scored against
the run's actual total. The headline (``summary``) is over the real runs (``mlperf`` and
``recorded`` sets); ``synthetic`` and ``recorded-loaded`` are reported apart. The tables group by
set (``summary_by_source``) and by set and model family.

Goals (issue 21): median |error| <= 2 % at 5 %, <= 1 % at 10 %, <= 0.5 % at 20 %; closer than
the better baseline on >= 80 % of (run, fraction) points and worse by > 0.25 points on <= 5 %;
95 % interval coverage 90-98 %; a signature on >= 90 % of runs at a median <= 10 % of the steps
with median |error| <= 1 % there.
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

import _harness as harness  # noqa: E402

import ailens  # noqa: E402
from ailens.model import composer_total_s, naive_total_s  # noqa: E402

CORPUS = REPO / "benchmarks" / "forecast_corpus"
MLPERF = CORPUS / "mlperf"
FRACTIONS = (1, 5, 10, 20, 50)
SCORED = ("5", "10", "20", "50")  # the fractions the summaries score
# A recording counts as made on a quiet machine below this 1-minute load average.
QUIET_LOAD = 0.5
# The headline figures: real runs on quiet machines (synthetic runs and loaded recordings are
# reported apart).
HEADLINE_SETS = ("mlperf", "recorded")


# --------------------------------------------------------------------------- replay


def replay(run_dir: Path) -> dict:
    """Score one recorded run: forecast, progress bar and Composer at each fraction of the
    steps."""
    seen: dict[int, tuple] = {}
    a = harness.analyze_run(run_dir, watch=lambda oa: _watch(oa, seen))
    f = a.forecast
    if f is None or not f.actual_total_s or not f.total_steps:
        raise ValueError(f"{run_dir}: no finished run with a known total ({a.warnings})")
    row = _score(f.total_steps, f.actual_total_s, seen)
    row["ranks"] = a.ranks
    row["signature_fraction"] = f.signature_fraction
    row["signature_error_pct"] = f.error_pct if f.basis == "signature" else None
    row["step_cv"] = _step_cv(a)
    return row


def _score(n: int, actual: float, seen: dict[int, tuple]) -> dict:
    """The row of one run from (predicted, interval, progress bar, Composer) by steps done."""
    row = {"steps": n, "actual_total_s": actual}
    err: dict = {"ailens": {}, "naive": {}, "composer": {}}
    covered, half = {}, {}
    for pct in FRACTIONS:
        s = max(1, math.floor(pct / 100 * n))
        pred, interval, naive, comp = seen.get(s, (None, None, None, None))
        k = str(pct)
        err["ailens"][k] = _pct(pred, actual)
        err["naive"][k] = _pct(naive, actual)
        err["composer"][k] = _pct(comp, actual)
        covered[k] = None if interval is None else interval[0] <= actual <= interval[1]
        half[k] = None if interval is None else 100 * (interval[1] - interval[0]) / 2 / pred
    row["error_pct"] = err
    row["covered"] = covered
    row["half_width_pct"] = half
    return row


def _pct(v: float | None, actual: float) -> float | None:
    return None if v is None else 100 * (v - actual) / actual


def _watch(oa, seen: dict) -> None:
    p = oa.predict()
    evals = {k: v for k, v in oa.forecaster.sections.items() if k.startswith("eval")}
    if p.steps_done == 1:  # Composer's clock starts after the first step (skip_batches=1)
        seen["clock_start_s"] = p.elapsed_s
    composer = None
    if "clock_start_s" in seen:
        composer = composer_total_s(
            p.elapsed_s, p.steps_done, p.total_steps, evals, clock_start_s=seen["clock_start_s"]
        )
    seen[p.steps_done] = (
        p.predicted_total_s,
        p.interval_s,
        naive_total_s(p.elapsed_s, p.steps_done, p.total_steps),
        composer,
    )


def replay_mlperf(path: Path) -> dict:
    """Score one MLPerf log through the public timeline API (run_start to run_stop, the
    run's real number of steps given)."""
    tl = ailens.read_timeline(path, include_init=False)
    r = ailens.forecast_timeline(tl)
    if not r.actual_total_s or not tl.total_steps:
        raise ValueError(f"{path}: no finished run (run_stop) in the log")
    seen = {
        x.steps_done: (
            x.predicted_total_s,
            x.interval_s,
            x.progress_bar_total_s,
            x.composer_total_s,
        )
        for x in r.steps
    }
    row = _score(tl.total_steps, r.actual_total_s, seen)
    f = r.forecast
    n = tl.total_steps
    row["ranks"] = None
    row["unit"] = tl.unit
    row["signature_fraction"] = None if r.signature_step is None else r.signature_step / n
    row["signature_error_pct"] = f.error_pct if f is not None and f.basis == "signature" else None
    row["step_cv"] = _timeline_cv(tl)
    row["evaluations"] = sum(s.name == "eval" for s in tl.sections)
    return row


def _timeline_cv(tl) -> float:
    """Coefficient of variation of a timeline's step times after the warm-up, sections out."""
    t = np.asarray(tl.step_end_s)
    d = np.diff(np.concatenate(([0.0], t)))
    for sec in tl.sections:
        i = int(np.searchsorted(t, sec.end_s, side="left"))
        if i < len(d) and (i == 0 or sec.begin_s >= t[i - 1]):
            d[i] -= sec.end_s - sec.begin_s
    d = d[2:]
    return float(d.std() / d.mean()) if len(d) > 1 and d.mean() > 0 else 0.0


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
    rows = [] if args.no_mlperf else mlperf_rows()
    rows += recorded_rows(args.dir)
    if not args.no_synthetic:
        rows += synthetic_rows(args.seeds)
    report_corpus(rows, args.json)
    return 0


def mlperf_rows() -> list[dict]:
    """A row per MLPerf log of ``forecast_corpus/mlperf/index.json`` (none without it)."""
    rows = []
    index = MLPERF / "index.json"
    if not index.is_file():
        return rows
    for x in json.loads(index.read_text()):
        try:
            row = replay_mlperf(MLPERF / x["file"])
        except ValueError as e:
            print(f"skipped {x['file']}: {e}", file=sys.stderr)
            continue
        rows.append(
            {
                "name": "mlperf/" + x["file"].removesuffix(".txt.gz"),
                "kind": "mlperf",
                "source": "mlperf",
                "set": "mlperf",
                "family": _FAMILY.get(x["benchmark"], x["benchmark"]),
                "structure": ["eval"] if row["evaluations"] else [],
                "nodes": x.get("nodes_from_name"),
                **row,
            }
        )
    return rows


def recorded_rows(corpus_dir: Path) -> list[dict]:
    """A row per recorded run (a folder with a ``case.json``) in ``corpus_dir``."""
    rows = []
    for d in sorted(p for p in corpus_dir.iterdir() if (p / "case.json").is_file()):
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
                "source": "recorded",
                "set": _set(case),
                "family": d.name.split("-")[0],
                "structure": case["structure"],
                "load": [case.get("load_before"), case.get("load_after")],
                **row,
            }
        )
    return rows


def synthetic_rows(seeds: int) -> list[dict]:
    """A row per synthetic run (``SYNTHETIC``, ``seeds`` seeds each), written and replayed in
    a temporary folder."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in SYNTHETIC:
            for seed in range(seeds):
                run_dir = Path(tmp) / f"{name}-{seed}"
                structure = synthetic(name, run_dir, seed)
                row = replay(run_dir)
                rows.append(
                    {
                        "name": f"synthetic/{name}/{seed}",
                        "kind": "synthetic",
                        "source": "synthetic",
                        "set": "synthetic",
                        "family": "synthetic",
                        "structure": structure,
                        **row,
                    }
                )
    return rows


def report_corpus(rows: list[dict], json_path) -> None:
    """Print the corpus' tables and summaries; write them to ``json_path`` when given."""
    headline = [r for r in rows if r["set"] in HEADLINE_SETS]
    summary = summarise(headline)
    groups = {k: summarise([r for r in rows if r["kind"] == k]) for k in _kinds(rows)}
    # By set: the sources, with the recordings made on a loaded machine apart.
    by_source = {k: summarise([r for r in rows if r["set"] == k]) for k in _values(rows, "set")}
    by_family = {
        f"{src}/{fam}": summarise([r for r in rows if r["set"] == src and r["family"] == fam])
        for src, fam in sorted({(r["set"], r["family"]) for r in rows})
    }
    print(table(rows, summary))
    print("\n" + group_table("source", by_source))
    print("\n" + group_table("source/family", by_family))
    for src, sm in by_source.items():
        print(f"\n-- {src} ({sm['runs']} runs)\n" + "\n".join(summary_lines(sm)))
    print(f"\n-- headline: real runs, {' + '.join(HEADLINE_SETS)} ({summary['runs']} runs)")
    print("\n".join(summary_lines(summary)))
    if json_path:
        doc = {
            "runs": rows,
            "summary": summary,
            "summary_by_kind": groups,
            "summary_by_source": by_source,
            "summary_by_family": by_family,
        }
        harness.write_json(json_path, doc)


# MLPerf benchmark names -> model family (v0.6 Google logs call Mask R-CNN "mask").
_FAMILY = {"mask": "maskrcnn", "dlrm_dcnv2": "dlrm"}


def _set(case: dict) -> str:
    """The set of a recording (its ``source`` is "recorded"): "recorded" when made on a quiet
    machine (the recorder's load check passed, not forced), else "recorded-loaded"."""
    before = case.get("load_1min_before")
    quiet = before is not None and float(before) <= QUIET_LOAD and not case.get("forced")
    return "recorded" if quiet else "recorded-loaded"


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


def _values(rows: list[dict], key: str) -> list[str]:
    return sorted({r[key] for r in rows})


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
    # Against the better of the two baselines, at 5/10/20/50 %: a point where ailens has no
    # forecast yet (but a baseline has) counts as worse.
    points = closer = worse_best = no_forecast = 0
    for r in rows:
        e = r["error_pct"]
        for pct in SCORED:
            base = [abs(v) for v in (e["naive"][pct], e["composer"].get(pct)) if v is not None]
            if not base:
                continue
            points += 1
            ours = e["ailens"][pct]
            if ours is None:
                no_forecast += 1
                worse_best += 1
                continue
            closer += abs(ours) < min(base)
            worse_best += abs(ours) > min(base) + 0.25
    cov_scored = [r["covered"][p] for r in rows for p in SCORED if r["covered"].get(p) is not None]
    half = [
        r["half_width_pct"][p]
        for r in rows
        for p in SCORED
        if r.get("half_width_pct", {}).get(p) is not None
    ]
    sig = [r["signature_fraction"] for r in rows if r["signature_fraction"] is not None]
    sig_err = [
        abs(r["signature_error_pct"]) for r in rows if r.get("signature_error_pct") is not None
    ]
    return {
        "runs": len(rows),
        "median_abs_error_5pct": {"ailens": _median(at5), "naive": _median(at5n)},
        "worse_than_naive": worse,
        "coverage": sum(cov) / len(cov) if cov else None,
        "pairs": len(cov),
        "late_signature_cv_le_10pct": late,
        "median_abs_error_pct": {
            who: {p: _median(_abs_errors(rows, who, p)) for p in SCORED}
            for who in ("ailens", "naive", "composer")
        },
        # Runs each median is over (ailens has no forecast before its warm-up is done).
        "forecasts": {
            who: {p: len(_abs_errors(rows, who, p)) for p in SCORED}
            for who in ("ailens", "naive", "composer")
        },
        # Composer logs nothing before step 2: its medians are over fewer (longer) runs. The
        # three side by side on the runs where Composer and ailens both have a forecast.
        "paired_with_composer": {p: _paired(rows, p) for p in SCORED},
        "points": points,
        "closer_than_best_baseline_pct": 100 * closer / points if points else None,
        "worse_than_best_baseline_pct": 100 * worse_best / points if points else None,
        "no_forecast_points": no_forecast,
        "coverage_95_pct": 100 * sum(cov_scored) / len(cov_scored) if cov_scored else None,
        "coverage_points": len(cov_scored),
        "median_half_width_pct": _median(half),
        "signature_rate_pct": 100 * len(sig) / len(rows) if rows else None,
        "signature_median_fraction": _median(sig),
        "signature_median_abs_error_pct": _median(sig_err),
    }


def _abs_errors(rows: list[dict], who: str, pct: str) -> list[float]:
    return [abs(r["error_pct"][who][pct]) for r in rows if r["error_pct"][who].get(pct) is not None]


def _median(x: list[float]) -> float | None:
    return float(np.median(x)) if x else None


def _f(x, spec="+.2f") -> str:
    return "   n/a" if x is None else f"{x:{spec}}"


def table(rows: list[dict], s: dict) -> str:
    out = [
        f"{'run':<44} {'steps':>6} {'cv':>5} {'sig%':>5}  "
        + "  ".join(f"{p:>2}%: ailens  naive compsr in" for p in FRACTIONS)
    ]
    for r in rows:
        sig = r["signature_fraction"]
        line = (
            f"{r['name'][-44:]:<44} {r['steps']:>6} {r['step_cv']:>5.2f} "
            f"{'  n/a' if sig is None else f'{100 * sig:5.1f}'}  "
        )
        cells = []
        for p in FRACTIONS:
            k = str(p)
            c = r["covered"][k]
            e = r["error_pct"]
            cells.append(
                f"    {_f(e['ailens'][k]):>6} {_f(e['naive'][k]):>6} {_f(e['composer'][k]):>6} "
                f"{'  ' if c is None else ('ok' if c else '--')}"
            )
        out.append(line + "  ".join(cells))
    return "\n".join(out)


def group_table(title: str, groups: dict[str, dict]) -> str:
    """One line per group: median |error| of ailens / progress bar / Composer at 5, 10, 20 and
    50 %, points closer than the better baseline, worse by > 0.25, coverage, half-width,
    signature."""
    head = (
        f"{title:<26} {'runs':>4}  "
        + "  ".join(f"{p:>2}%: ail/bar/cmp    " for p in SCORED)
        + "  closer worse  cov   hw%   sig%  sig@  err@sig"
    )
    out = [head]
    for name, s in groups.items():
        m = s["median_abs_error_pct"]
        cells = "  ".join(
            f"{_f(m['ailens'][p], '.2f'):>5}/{_f(m['naive'][p], '.2f'):>5}/"
            f"{_f(m['composer'][p], '.2f'):>5}"
            for p in SCORED
        )
        sig_at = s["signature_median_fraction"]
        out.append(
            f"{name[:26]:<26} {s['runs']:>4}  {cells}  "
            f"{_f(s['closer_than_best_baseline_pct'], '5.1f'):>6} "
            f"{_f(s['worse_than_best_baseline_pct'], '5.1f'):>5} "
            f"{_f(s['coverage_95_pct'], '5.1f'):>5} {_f(s['median_half_width_pct'], '5.2f'):>5} "
            f"{_f(s['signature_rate_pct'], '5.1f'):>5} "
            f"{_f(None if sig_at is None else 100 * sig_at, '5.1f'):>5} "
            f"{_f(s['signature_median_abs_error_pct'], '5.2f'):>7}"
        )
    return "\n".join(out)


def _paired(rows: list[dict], pct: str) -> dict:
    both = [
        r["error_pct"]
        for r in rows
        if r["error_pct"]["ailens"].get(pct) is not None
        and r["error_pct"]["composer"].get(pct) is not None
    ]
    out: dict = {"runs": len(both)}
    for who in ("ailens", "naive", "composer"):
        out[who] = _median([abs(e[who][pct]) for e in both if e[who].get(pct) is not None])
    return out


def summary_lines(s: dict) -> list[str]:
    m = s["median_abs_error_pct"]
    errs = "; ".join(
        f"{p} %: ailens {_f(m['ailens'][p], '.2f')}, bar {_f(m['naive'][p], '.2f')}, "
        f"Composer {_f(m['composer'][p], '.2f')}"
        for p in SCORED
    )
    sig_at = s["signature_median_fraction"]
    k = s["forecasts"]["ailens"]
    return [
        f"median |error| (%) {errs}  (goals 2 / 1 / 0.5 at 5 / 10 / 20 %)",
        "  ailens forecasts at 5/10/20/50 %: on "
        + "/".join(str(k[p]) for p in SCORED)
        + f" of {s['runs']} runs (the medians are over those)",
        "  on the runs where Composer has a forecast too (none before step 2): "
        + "; ".join(
            f"{p} % ({q['runs']}): ailens {_f(q['ailens'], '.2f')}, bar {_f(q['naive'], '.2f')}, "
            f"Composer {_f(q['composer'], '.2f')}"
            for p, q in s["paired_with_composer"].items()
        ),
        f"closer than the better baseline on {_f(s['closer_than_best_baseline_pct'], '.1f')} % "
        f"of {s['points']} (run, 5/10/20/50 %) points (goal >= 80 %); worse by > 0.25 points on "
        f"{_f(s['worse_than_best_baseline_pct'], '.1f')} % (goal <= 5 %), "
        f"{s['no_forecast_points']} of them without an ailens forecast yet",
        f"95 % interval coverage {_f(s['coverage_95_pct'], '.1f')} % of {s['coverage_points']} "
        f"points (goal 90-98 %); median half-width {_f(s['median_half_width_pct'], '.2f')} %",
        f"signature on {_f(s['signature_rate_pct'], '.1f')} % of runs (goal >= 90 %), at a median "
        f"{_f(None if sig_at is None else 100 * sig_at, '.1f')} % of the steps (goal <= 10 %), "
        f"median |error| there {_f(s['signature_median_abs_error_pct'], '.2f')} % (goal <= 1 %)",
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
    if case is None or _set(case) != "recorded-loaded":
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


# --------------------------------------------------------------------------- live


def live(args) -> int:
    """Run examples end to end now and score their forecasts (the machine's load included)."""
    rows = []
    for name in args.examples.split(","):
        script, ranks, flags, structure, _ = CASES[name]
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            before = harness.loadavg_text()
            cmd = [sys.executable, str(REPO / script), "--ranks", str(ranks),
                   "--run-dir", str(run_dir), "--progress-every", "0", *flags]  # fmt: skip
            code = harness.launch(cmd, None, args.timeout)[0]
            if code:
                print(f"{name}: exit code {code}", file=sys.stderr)
                continue
            rows.append(
                {
                    "name": name,
                    "kind": "live",
                    "structure": structure,
                    "load": [before, harness.loadavg_text()],
                    **replay(run_dir),
                }
            )
    summary = summarise(rows)
    print(table(rows, summary))
    print("\n".join(summary_lines(summary)))
    print("load average before/after: " + ", ".join(f"{r['name']} {r['load']}" for r in rows))
    if args.json:
        harness.write_json(args.json, {"runs": rows, "summary": summary})
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode")
    c = sub.add_parser("corpus", help="replay the stored corpus and the synthetic runs")
    c.add_argument("--dir", type=Path, default=CORPUS)
    c.add_argument("--json", type=Path)
    c.add_argument("--seeds", type=int, default=2, help="seeds per synthetic scenario")
    c.add_argument("--no-synthetic", action="store_true")
    c.add_argument("--no-mlperf", action="store_true", help="leave the MLPerf logs out")
    r = sub.add_parser("record", help="run the examples and store their traces in the corpus")
    r.add_argument("--dir", type=Path, default=CORPUS)
    r.add_argument("--only", help="comma-separated case names: " + ", ".join(CASES))
    r.add_argument(
        "--max-load",
        type=float,
        default=QUIET_LOAD,
        help=f"refuse to record above this 1-minute load average (default {QUIET_LOAD})",
    )
    r.add_argument(
        "--settle",
        type=float,
        default=300,
        help="seconds to wait between cases for the previous run's load to decay (default 300)",
    )
    r.add_argument(
        "--force", action="store_true", help="record even on a loaded machine (cases marked forced)"
    )
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
