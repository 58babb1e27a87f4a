"""Where ailens's forecast is worse than the better of the progress bar and Composer on the
MLPerf logs of the corpus, and why (issue 30): each (run, 5/10/20/50 %) point worse by more
than 0.25 points, by mechanism, from a ``bench_forecast.py corpus --json`` result.

    .venv/bin/python benchmarks/bench_forecast.py corpus --json OUT.json
    .venv/bin/python benchmarks/forecast_misses.py OUT.json [--list] [--split] [--calibration]
                                                            [--signature] [--mlperf-dir DIR]

``--mlperf-dir``: the folder the corpus JSON's MLPerf logs came from (``bench_forecast.py
corpus --mlperf-dir``), the curated corpus by default.

Each point's error is split in two (``split``): the training part (the remaining steps at the
forecast's level, with the parts that lie inside the units: recurring extras, evaluations
beside the steps) against the remaining units' training time (sections inside a unit out),
and the rest (evaluations, checkpoints, what runs after the last step)
against the remaining time besides it. ``--list`` prints both for ailens and Composer, and
which of them makes ailens worse (``decides``: the part whose error alone, the other part
taken as it happened, is worse than the better baseline by more than ``NOISE``). ``--split``
prints, over every MLPerf point where Composer has an estimate, on how many runs ailens is
closer than Composer and the median, mean and 75th percentile of both |errors| at each
fraction, and the median |error| of each part for both: where each estimator is closer.

Mechanisms, the first that applies:

- ``first unit only``: the forecast at step 1 (the level is a stated share of the first
  unit's training time, 0.83 +/- 0.37 of it: nothing else is known yet);
- ``last unit partial``: a run of at most 10 units whose last unit is under half the others
  (the run stopped at its target accuracy inside it: its length in units is not its length);
- ``change of speed after the point``: had the training's speed over the remaining units
  (their sections out, slow units over 1.25x their median left out) been the level the
  forecast used, ailens would not have been worse: a physical limit, nothing before the
  point shows it;
- ``time after the last step nobody announced``: the rest decides, no evaluation is
  announced nor priced, and the run spent time after its last step (MiniGo's evaluations of
  all its models once the training ended);
- ``announced evaluation not seen yet``: its cost was the stated prior;
- ``evaluation seen once``: its later ones were priced from the cold first (0.75 +/- 0.25);
- ``other``.

``--calibration`` prints, on the same logs, what the cold-first prior rests on: the later
evaluations' mean against the first (marked sections, and those beside the steps).

``--signature`` lists the MLPerf runs whose signature comes after ``SIGNATURE_GOAL`` (15 %)
of the steps with what held it, and how many of them are runs where the first evaluation
point (``FIRST_POINT``, step 5) is already past it; with the median the step fraction would
have were the signature at that point on every run (what the rule cannot beat).
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from forecast_replay import unit_training_s  # noqa: E402

import ailens  # noqa: E402
from ailens.model import composer_total_s  # noqa: E402

MLPERF = REPO / "benchmarks" / "forecast_corpus" / "mlperf"
FRACTIONS = ("5", "10", "20", "50")
NOISE = 0.25  # points: "worse" is worse by more than this
SIGNATURE_GOAL = 0.15  # issue 30: the signature at a median <= 15 % of the steps
# The first evaluation point: the first exchange, signature_window // 2 steps in.
FIRST_POINT = ailens.LensConfig().signature_window // 2


def _index(root: Path) -> dict[str, Path]:
    """The logs of a folder's ``index.json`` by their corpus row name."""
    return {
        "mlperf/" + x["file"].removesuffix(".gz").removesuffix(".txt"): root / x["file"]
        for x in json.loads((root / "index.json").read_text())
    }


def split(tl, fr, s: int) -> dict:
    """The error at step ``s`` (% of the actual total) of ailens and Composer, each split
    into its training part and the rest: ``{who: (training part, rest)}`` (Composer None
    before its clock has a step). The training part is the remaining time of the parts inside
    the units (``_in_units``) for ailens and Composer's rate x the fraction left (its rate
    leaves out every evaluation's wall time, beside the steps or not), against the remaining
    units' training time (``unit_training_s``); the rest is everything else either
    forecasts, against the remaining time besides it."""
    total = fr.actual_total_s
    row = fr.steps[s - 1]
    p = fr.at_step(s)
    elapsed = p.elapsed_s
    act_train = float(unit_training_s(tl)[s:].sum())
    act_rest = total - elapsed - act_train
    out: dict = {"ailens": None, "composer": None}
    if p.components:
        # Parts inside the units (recurring extras, sections that ran beside the steps) are
        # in the units' time: the training part's.
        train = sum(c.remaining_s for c in p.components if _in_units(c.name))
        rest = p.predicted_total_s - elapsed - train
        out["ailens"] = (100 * (train - act_train) / total, 100 * (rest - act_rest) / total)
    if row.composer_total_s is not None:
        # Composer's training part: its rate (skip_batches=1) over the wall time since the
        # first step's end less the evaluations that ended after it, times the fraction left:
        # ``composer_total_s`` on that wall time with no evaluations to add back.
        ends = tl.step_end_s
        busy = sum(
            e.end_s - e.begin_s
            for e in tl.sections
            if e.name.lower().startswith("eval")
            and e.end_s <= ends[s - 1]
            and bisect.bisect_right(ends, e.end_s) >= 1
        )
        wall = elapsed - busy
        train = composer_total_s(wall, s, tl.total_steps, clock_start_s=ends[0]) - wall
        rest = row.composer_total_s - elapsed - train
        out["composer"] = (100 * (train - act_train) / total, 100 * (rest - act_rest) / total)
    return out


def _in_units(name: str) -> bool:
    """A forecast part whose time lies inside the units: the step level, a recurring extra
    inside steps, a section that runs beside them."""
    return name == "training steps" or name.startswith("every ") or name.endswith("steps)")


def _decides(parts: tuple[float, float] | None, best: float) -> str:
    """Which part of ailens's error makes it worse than ``best`` (the better baseline's
    |error|): the part whose error alone, the other as it happened, is still worse."""
    if parts is None:
        return "-"
    train, rest = (abs(x) > best + NOISE for x in parts)
    return "both" if train and rest else "training" if train else "rest" if rest else "sum"


def classify(rows: list[dict], root: Path = MLPERF) -> list[tuple]:
    """(run, fraction, ailens error, the better baseline's |error|, the speed change's
    share of the total, mechanism, the split of ailens's and Composer's errors, the part
    that decides) of each point worse than the better baseline."""
    index, cache, out = _index(root), {}, []
    for r in rows:
        if r.get("set") != "mlperf":
            continue
        for pct in FRACTIONS:
            e = r["error_pct"]
            ours = e["ailens"][pct]
            base = [abs(x) for x in (e["naive"][pct], e["composer"][pct]) if x is not None]
            if ours is None or not base or abs(ours) <= min(base) + NOISE:
                continue
            f = index[r["name"]]
            if f not in cache:
                tl = ailens.read_timeline(f, include_init=False)
                cache[f] = (tl, ailens.forecast_timeline(tl))
            tl, fr = cache[f]
            n = tl.total_steps
            s = max(1, int(int(pct) / 100 * n))
            p = fr.at_step(s)
            u = unit_training_s(tl)
            rest = u[s:]
            speed = rest[rest <= 1.25 * np.median(rest)].mean() if len(rest) > 3 else rest.mean()
            # error = (predicted - actual) / actual: a faster rest makes the forecast high.
            change = 100 * (p.step_time_s - speed) * len(rest) / fr.actual_total_s
            names = {c.name for c in p.components}
            parts = split(tl, fr, s)
            decides = _decides(parts["ailens"], min(base))
            evals = [c for c in p.components if c.name.startswith("section eval")]
            if s == 1:
                why = "first unit only"
            elif n <= 10 and u[-1] < 0.5 * np.median(u[1:-1]):
                why = "last unit partial"
            elif abs(ours - change) <= min(base) + NOISE:
                why = "change of speed after the point"
            elif (
                decides == "rest"
                and not evals
                and not any(k.startswith("eval") for k in tl.schedule)
                and fr.actual_total_s - tl.step_end_s[-1] > 0.01 * fr.actual_total_s
            ):
                why = "time after the last step nobody announced"
            elif "section eval (not seen yet)" in names:
                why = "announced evaluation not seen yet"
            elif any(c.seen == 1 and c.remaining for c in evals):
                why = "evaluation seen once"
            else:
                why = "other"
            out.append((r["name"], pct, ours, min(base), change, why, parts, decides))
    return out


def paired_table(rows: list[dict]) -> None:
    """ailens against Composer on the MLPerf runs where Composer has an estimate, at each
    fraction: on how many runs ailens is closer, and the median, mean and 75th percentile
    of both |errors| (a median can sit inside a cluster of runs)."""
    print("paired with Composer:    n  ailens closer   median        mean          75 %")
    for pct in FRACTIONS:
        xs = np.array(
            [
                (abs(r["error_pct"]["ailens"][pct]), abs(r["error_pct"]["composer"][pct]))
                for r in rows
                if r.get("set") == "mlperf"
                and r["error_pct"]["ailens"][pct] is not None
                and r["error_pct"]["composer"][pct] is not None
            ]
        )
        if not len(xs):
            continue
        closer = int((xs[:, 0] < xs[:, 1]).sum())
        med, mean, q75 = np.median(xs, axis=0), xs.mean(axis=0), np.percentile(xs, 75, axis=0)
        print(f"  at {pct:>2} %            {len(xs):4d} {closer:9d}    "
              + "   ".join(f"{a:5.2f} {c:5.2f}" for a, c in (med, mean, q75)))  # fmt: skip


def split_table(rows: list[dict], root: Path = MLPERF) -> None:
    """Median |error| of the training part and of the rest, ailens and Composer, over the
    MLPerf points where Composer has an estimate: which part each is closer on."""
    index = _index(root)
    by: dict[str, list] = {pct: [] for pct in FRACTIONS}
    for r in rows:
        if r.get("set") != "mlperf":
            continue
        tl = ailens.read_timeline(index[r["name"]], include_init=False)
        fr = ailens.forecast_timeline(tl)
        for pct in FRACTIONS:
            s = max(1, int(int(pct) / 100 * tl.total_steps))
            parts = split(tl, fr, s)
            if parts["ailens"] is not None and parts["composer"] is not None:
                by[pct].append((*parts["ailens"], *parts["composer"]))
    print("median |error| (points of the total) of each part, where Composer has an estimate:")
    print("  at    n  training part: ailens  Composer   the rest: ailens  Composer")
    for pct, xs in by.items():
        if not xs:
            continue
        m = np.median(np.abs(np.array(xs)), axis=0)
        print(f"  {pct:>2} % {len(xs):4d}  {m[0]:22.2f} {m[2]:9.2f}  {m[1]:16.2f} {m[3]:9.2f}")


def calibration(root: Path = MLPERF) -> None:
    """The later evaluations' mean against the first, as the forecaster measured them at
    the end of each log: marked sections (their own time) and those beside the steps (what
    the units they ran beside took over the level)."""
    ratios: dict[str, list[float]] = {"marked sections": [], "beside the steps": []}
    for f in _index(root).values():
        tl = ailens.read_timeline(f, include_init=False)
        replay = ailens.TimelineReplay()
        replay.feed(tl)
        fc = replay.oa.forecaster
        own = [v for _, v in fc.sections.get("eval", [])]
        beside = [v for _, v in fc._beside_excess()[0].get("eval", [])]
        for kind, xs in (("marked sections", own), ("beside the steps", beside)):
            if len(xs) >= 3 and xs[0] > 0:
                ratios[kind].append(float(np.mean(xs[1:]) / xs[0]))
    q = (2.5, 25, 50, 75, 97.5)
    for kind, xs in ratios.items():
        print(f"later evaluations' mean / the first, {kind} ({len(xs)} runs with 3 or more): "
              f"quantiles {q}: {np.round(np.percentile(xs, q), 2).tolist()}")  # fmt: skip


def signature(rows: list[dict]) -> None:
    """The runs whose signature comes after the goal's fraction, and what held each."""
    rows = [r for r in rows if r.get("set") == "mlperf" and r["signature_fraction"]]
    late = [r for r in rows if r["signature_fraction"] > SIGNATURE_GOAL]
    floor = [r for r in late if FIRST_POINT / r["steps"] > SIGNATURE_GOAL]
    at_first = np.median([min(FIRST_POINT / r["steps"], 1.0) for r in rows])
    print(
        f"signature after {100 * SIGNATURE_GOAL:.0f} % of the steps on {len(late)} of "
        f"{len(rows)} MLPerf runs with one; on {len(floor)} of them step {FIRST_POINT} (the "
        f"first evaluation point) is already past it; at that point on every run the median "
        f"would be {100 * at_first:.1f} %"
    )
    for r in sorted(late, key=lambda r: (r in floor, r["signature_fraction"])):
        held = "; ".join(r["signature_held_by"])
        print(f"  {100 * r['signature_fraction']:5.1f} %  {r['steps']:5d} steps  "
              f"{r['name']:70.70s}  {held}")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus_json", type=Path, help="bench_forecast.py corpus --json's output")
    ap.add_argument("--list", action="store_true", help="print every point")
    ap.add_argument("--split", action="store_true", help="each part's error, ailens and Composer")
    ap.add_argument("--calibration", action="store_true", help="print what the priors rest on")
    ap.add_argument("--signature", action="store_true", help="the runs whose signature is late")
    ap.add_argument(
        "--mlperf-dir",
        type=Path,
        default=MLPERF,
        help="the logs' folder (its index.json), as given to bench_forecast.py corpus "
        "--mlperf-dir (default: the curated corpus)",
    )
    args = ap.parse_args()
    rows = json.loads(args.corpus_json.read_text())["runs"]
    points = classify(rows, args.mlperf_dir)
    if args.list:
        for name, pct, ours, best, change, why, parts, decides in points:
            a = "{:+7.2f} {:+7.2f}".format(*parts["ailens"]) if parts["ailens"] else " " * 15
            c = "{:+7.2f} {:+7.2f}".format(*parts["composer"]) if parts["composer"] else "    n/a"
            print(f"{pct:>3} % {name[7:]:62.62s} ailens {ours:+7.2f} better {best:6.2f} "
                  f"speed {change:+7.2f} | ailens {a} Composer {c} (training, rest) "
                  f"| {decides:8s} {why}")  # fmt: skip
    scored = sum(
        1
        for r in rows
        if r.get("set") == "mlperf"
        for p in FRACTIONS
        if r["error_pct"]["ailens"][p] is not None
        and any(r["error_pct"][b][p] is not None for b in ("naive", "composer"))
    )
    summed = sum(
        abs(r["error_pct"]["ailens"][p])
        for r in rows
        if r.get("set") == "mlperf"
        for p in FRACTIONS
        if r["error_pct"]["ailens"][p] is not None
    )
    print(f"{len(points)} of {scored} MLPerf points worse than the better baseline by > {NOISE}; "
          f"ailens's |error| summed over the points {summed:.1f}")  # fmt: skip
    counts = collections.Counter(x[5] for x in points)
    for why, k in counts.most_common():
        mine = [x for x in points if x[5] == why]
        by = " ".join(f"{p} %: {sum(1 for x in mine if x[1] == p)}" for p in FRACTIONS)
        # How much worse: ailens's |error| over the better baseline's, summed over the points.
        excess = sum(abs(x[2]) - x[3] for x in mine)
        decide = collections.Counter(x[7] for x in mine)
        parts = ", ".join(f"{d} {m}" for d, m in decide.most_common())
        print(f"  {k:3d}  {why}  ({by}); {excess:.1f} points over the better baseline; "
              f"decided by: {parts}")  # fmt: skip
    if args.split:
        paired_table(rows)
        split_table(rows, args.mlperf_dir)
    if args.calibration:
        calibration(args.mlperf_dir)
    if args.signature:
        signature(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
