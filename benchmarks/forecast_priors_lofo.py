"""The forecast's two early priors checked leave-one-benchmark-family-out on the MLPerf logs
of the development corpus (issue 30): what a rule learned on the other families gets on the
family left out, for every family in turn.

    .venv/bin/python benchmarks/forecast_priors_lofo.py [--mlperf-dir ../shared/mlperf-dev]

1. **The first unit's start-up** (``Forecaster.FIRST_UNIT_SHARE``): at the first step of a run
   of epochs or blocks the level is a share of the first unit's training time (the start-up
   before the log's first epoch or block start out). Candidates: a constant share (the
   rule), the same with that start-up left in the unit, a constant number of seconds of
   start-up, a share that depends on the unit's
   seconds (a line in log-log), the progress bar (share 1). Score: |estimated level / level
   - 1| (level: the median unit after the first two, sections out).
2. **An announced evaluation not seen yet** (``sections.EVAL_SHARE``, ``EVAL_SAMPLE_COST``):
   the share of the training all evaluations take, estimated before one is seen. Candidates,
   on the logs that state ``eval_samples`` and ``train_samples`` (samples per epoch) with the
   epochs of a step known: the flat 5 % prior (the rule), the samples at the other families'
   median cost per evaluation sample, and the two combined in log space by the other
   families' log spreads. Score: |estimated - actual share| in points.
3. **A recurring part's later occurrences** (``parts.FIRST_WARM``, ``FIRST_WARM_SD``,
   ``SECTION_CV``, ``SECTION_PRIOR``): what the signature needs to capture an evaluation
   (marked sections, and those beside the steps: what the units they ran beside took over
   the level, as the forecaster measured them at the end of each log; runs with 3 or more).
   From the cold first alone: the later ones' mean over the first, the stated
   0.75 +/- 0.25 (normal 95 %) against the other families' median and 2.5-97.5 % quantiles.
   After ``k`` warm occurrences (the first left out): their mean against the later ones'
   mean, the stated 95 % half-width (the spread seen pooled with 10 % worth 2, Student t)
   against the other families' 95 % quantile of that error. Score: how often the range
   held the left-out family's runs, and its half-width (the precision the signature
   compares with ``signature_part_precision``).
4. **The share prior's form** (``sections.EVAL_SHARE``, ``EVAL_SHARE_LOG_SD``): on all the
   logs whose evaluations run inside the steps, the flat 5 % +/- 5 % (the rule before), a
   log-normal at 5 % whose log spread is the other families' (the rule), a log-normal at
   the other families' log-mean, the 5 % point with the other families' 2.5-97.5 %
   quantiles; and a line in log-log on what the schedule knows (the evaluations' count, the
   run's units, their seconds). Scores: |estimated - actual share| in points and how often
   the 95 % interval holds the actual share.

Families: the benchmark (``mask`` is ``maskrcnn``, ``dlrm_dcnv2`` is ``dlrm``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from forecast_replay import unit_training_s  # noqa: E402

import ailens  # noqa: E402
from ailens.analysis.logformats import parse_mlperf  # noqa: E402
from ailens.model.forecast import (  # noqa: E402
    EVAL_SHARE,
    FIRST_WARM,
    FIRST_WARM_SD,
    NORMAL_95,
    cold_precision,
    per_occurrence_precision,
)

MLPERF = REPO / "benchmarks" / "forecast_corpus" / "mlperf"
FAMILY = {"mask": "maskrcnn", "dlrm_dcnv2": "dlrm"}
PRIOR_SHARE_SD = 0.05  # the rule before: 5 % +/- 5 %


def _logs(root: Path):
    """(index entry, timeline) of every finished log of ``root``'s index.json with at least
    4 units (a level after the first two)."""
    for x in json.loads((root / "index.json").read_text()):
        try:
            tl = ailens.read_timeline(root / x["file"], include_init=False)
        except ailens.LogError:
            continue
        if tl.finished and tl.total_steps and tl.total_steps >= 4:
            yield x, tl


def runs(root: Path = MLPERF) -> list[dict]:
    """Per MLPerf log: its family, first unit, level, evaluations and stated sample counts."""
    out = []
    for x, tl in _logs(root):
        path = root / x["file"]
        stated: dict = {}
        for _, key, value, _ in parse_mlperf(gzip.open(path, "rt", errors="replace").read()):
            if key in ("eval_samples", "train_samples", "global_batch_size"):
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    stated.setdefault(key, float(value))
        units = unit_training_s(tl)  # sections inside a unit are no training time
        evals = sum(sec.name == "eval" for sec in tl.sections)
        eval_s = sum(sec.end_s - sec.begin_s for sec in tl.sections if sec.name == "eval")
        # The start-up: the sections other than evaluations inside the first unit.
        startup_s = sum(
            sec.end_s - sec.begin_s
            for sec in tl.sections
            if sec.name != "eval" and sec.end_s <= tl.step_end_s[0]
        )
        n = len(units)
        level = float(np.median(units[2:] if n > 3 else units[1:]))
        out.append(
            {
                "family": FAMILY.get(x["benchmark"], x["benchmark"]),
                "steps": n,
                "first": float(units[0]),
                "first_whole": float(units[0]) + startup_s,
                "level": level,
                "evals": evals,
                "share": eval_s / (n * level),
                "q": _samples_share(stated, tl.steps_per_epoch, evals, n),
            }
        )
    return out


def _samples_share(stated: dict, steps_per_epoch, evals: int, n: int) -> float | None:
    """The evaluations' samples over the training's, when the log states both (a count below
    2, or a step of fewer samples than a global batch, is not a sample count)."""
    es, ts = stated.get("eval_samples"), stated.get("train_samples")
    if not es or not ts or not steps_per_epoch or not evals or es < 2:
        return None
    per_step = ts / steps_per_epoch
    batch = stated.get("global_batch_size")
    if batch and (per_step < batch or per_step > ts * 1e3):
        return None
    return es * evals / (per_step * n)


def _lofo(rows: list[dict], predict) -> dict[str, list[float]]:
    """family -> the scores of its runs, each predicted from the other families."""
    out: dict[str, list[float]] = {}
    for fam in sorted({r["family"] for r in rows}):
        train = [r for r in rows if r["family"] != fam]
        out[fam] = [predict(train, r) for r in rows if r["family"] == fam]
    return out


def _line(name: str, by_family: dict[str, list[float]], unit: str) -> str:
    a = np.array([x for v in by_family.values() for x in v])
    fams = "  ".join(f"{f} {np.median(v):.2f}" for f, v in by_family.items())
    return (
        f"  {name:34s} median {np.median(a):6.2f}{unit} mean {np.mean(a):6.2f}{unit} "
        f"75 % {np.percentile(a, 75):6.2f}{unit}   by family (median): {fams}"
    )


def first_unit(rows: list[dict]) -> None:
    rows = [r for r in rows if r["steps"] >= 4]
    print(f"1. the first unit's start-up: {len(rows)} runs of >= 4 units, LOFO")

    def score(est, r):
        return abs(est / r["level"] - 1)

    def share(train, r):
        return score(np.median([t["level"] / t["first"] for t in train]) * r["first"], r)

    def seconds(train, r):
        c = np.median([t["first"] - t["level"] for t in train])
        return score(max(r["first"] - c, 0.1 * r["first"]), r)

    def loglog(train, r):
        x = np.log([t["first"] for t in train])
        y = np.log([t["level"] / t["first"] for t in train])
        a, b = np.polyfit(x, y, 1)
        return score(min(math.exp(a * math.log(r["first"]) + b), 1.0) * r["first"], r)

    def share_whole(train, r):
        s = np.median([t["level"] / t["first_whole"] for t in train])
        return score(s * r["first_whole"], r)

    for name, f in (
        ("constant share (the rule)", share),
        ("constant share, start-up left in", share_whole),
        ("constant seconds of start-up", seconds),
        ("share by the unit's seconds", loglog),
        ("progress bar (share 1)", lambda train, r: score(r["first"], r)),
    ):
        print(_line(name, _lofo(rows, f), ""))
    ratio = [r["level"] / r["first"] for r in rows]
    folds = [
        np.median([t["level"] / t["first"] for t in rows if t["family"] != fam])
        for fam in sorted({r["family"] for r in rows})
    ]
    print(
        f"  the constant share learned per fold: {min(folds):.2f} to {max(folds):.2f} "
        f"(all runs: {np.median([r['level'] / r['first'] for r in rows]):.2f}, quantiles "
        f"2.5/25/75 %: {np.round(np.percentile(ratio, [2.5, 25, 75]), 2).tolist()})"
    )


def eval_price(rows: list[dict]) -> None:
    inside = [r for r in rows if r["evals"] and 0 < r["share"] < 0.5]
    rows = [r for r in inside if r["q"]]
    print(
        f"2. an evaluation not seen yet: {len(rows)} runs with stated sample counts and "
        f"evaluations inside the steps, LOFO (share error, points)"
    )

    def err(est, r):
        return 100 * abs(est - r["share"])

    def logs(train, f):
        return [math.log(f(t)) for t in train]

    weights: list[float] = []

    def combined(train, r):
        k = np.median([t["share"] / t["q"] for t in train])
        sd_samples = np.std(logs(train, lambda t: t["share"] / t["q"]))
        pool = [t for t in inside if t["family"] != r["family"]]
        sd_share = np.std(logs(pool, lambda t: t["share"]))
        w = sd_share**2 / (sd_share**2 + sd_samples**2)
        weights.append(w)
        return err(math.exp((1 - w) * math.log(EVAL_SHARE) + w * math.log(k * r["q"])), r)

    for name, f in (
        ("flat 5 % prior (the rule)", lambda train, r: err(EVAL_SHARE, r)),
        (
            "samples at the others' median cost",
            lambda train, r: err(np.median([t["share"] / t["q"] for t in train]) * r["q"], r),
        ),
        ("both, by their log spreads", combined),
    ):
        print(_line(name, _lofo(rows, f), ""))
    print(f"  the samples' weight learned per fold: {min(weights):.2f} to {max(weights):.2f}")
    cost = {
        fam: np.round([r["share"] / r["q"] for r in rows if r["family"] == fam], 2).tolist()
        for fam in sorted({r["family"] for r in rows})
    }
    print(f"  an evaluation sample's cost in training samples, by family: {cost}")


def occurrences(root: Path = MLPERF) -> list[dict]:
    """Per MLPerf log and kind (marked sections, beside the steps): the evaluations' times
    as the forecaster measured them at the end of the log, where 3 or more were seen."""
    out = []
    for x, tl in _logs(root):
        replay = ailens.TimelineReplay()
        replay.feed(tl)
        fc = replay.oa.forecaster
        kinds = {
            "marked": [v for _, v in fc.sections.get("eval", [])],
            "beside": [v for _, v in fc._beside_excess()[0].get("eval", [])],
        }
        for kind, xs in kinds.items():
            if len(xs) >= 3 and xs[0] > 0 and np.mean(xs[1:]) > 0:
                fam = FAMILY.get(x["benchmark"], x["benchmark"])
                out.append({"family": fam, "kind": kind, "xs": [float(v) for v in xs]})
    return out


def later_occurrences(rows: list[dict]) -> None:
    kinds = {k: sum(r["kind"] == k for r in rows) for k in ("marked", "beside")}
    print(
        f"3. a recurring part's later occurrences: {len(rows)} evaluation series of 3 or "
        f"more ({kinds['marked']} marked, {kinds['beside']} beside the steps), LOFO"
    )
    ratio = {id(r): float(np.mean(r["xs"][1:]) / r["xs"][0]) for r in rows}
    lo_st, hi_st = FIRST_WARM - NORMAL_95 * FIRST_WARM_SD, FIRST_WARM + NORMAL_95 * FIRST_WARM_SD
    widths: list[float] = []

    def stated(train, r):
        return 100.0 * (lo_st <= ratio[id(r)] <= hi_st)

    def learned(train, r):
        xs = [ratio[id(t)] for t in train]
        lo, c, hi = np.percentile(xs, [2.5, 50, 97.5])
        widths.append(max(c - lo, hi - c) / c)
        return 100.0 * (lo <= ratio[id(r)] <= hi)

    print("  from the cold first alone: the later ones' mean / the first, held (%)")
    print(_line("stated 0.75 +/- 0.25 (the rule)", _lofo(rows, stated), ""))
    print(_line("the others' 2.5-97.5 % quantiles", _lofo(rows, learned), ""))
    q = np.round(np.percentile(list(ratio.values()), [2.5, 25, 50, 75, 97.5]), 2).tolist()
    print(
        f"  stated precision {100 * cold_precision():.0f} %; learned (the wider side over "
        f"the median) {100 * min(widths):.0f}-{100 * max(widths):.0f} %; all series, "
        f"quantiles 2.5/25/50/75/97.5 %: {q}"
    )
    for k in (1, 2, 3):
        _after_warm(rows, k)


def _after_warm(rows: list[dict], k: int) -> None:
    """After ``k`` warm occurrences: their mean against the later ones' mean, held by the
    stated half-width and by the other families' 95 % quantile of that error."""
    # k warm ones and a later one; occurrences of 0 s (a log's whole-second clock) have no
    # relative error
    rows = [r for r in rows if len(r["xs"]) - 1 > k and np.mean(r["xs"][1 : k + 1]) > 0]
    err, stated = [], []
    for r in rows:
        warm = np.array(r["xs"][1:])
        err.append(abs(np.mean(warm[:k]) / np.mean(warm[k:]) - 1))
        sd = float(np.std(warm[:k], ddof=1)) if k > 1 else 0.0
        stated.append(per_occurrence_precision(float(np.mean(warm[:k])), sd, k))
    fams = [r["family"] for r in rows]
    learned = {
        f: float(np.percentile([e for e, g in zip(err, fams, strict=True) if g != f], 95))
        for f in set(fams)
    }
    held_st = np.mean([e <= p for e, p in zip(err, stated, strict=True)])
    held_l = np.mean([e <= learned[f] for e, f in zip(err, fams, strict=True)])
    print(
        f"  after {k} warm ({len(rows)} series): |their mean / the later ones' - 1| median "
        f"{100 * np.median(err):.1f} %, 95 % {100 * np.percentile(err, 95):.1f} %; stated "
        f"half-width median {100 * np.median(stated):.0f} %, held {100 * held_st:.0f} %; the "
        f"others' 95 % quantile {100 * min(learned.values()):.0f}-"
        f"{100 * max(learned.values()):.0f} %, held {100 * held_l:.0f} %"
    )


def eval_share_form(rows: list[dict]) -> None:
    rows = [r for r in rows if r["evals"] and 0 < r["share"] < 0.5]
    log_share = np.log([r["share"] for r in rows])
    print(
        f"4. the share prior's form: {len(rows)} runs with evaluations inside the steps "
        f"(share {100 * min(r['share'] for r in rows):.1f}-"
        f"{100 * max(r['share'] for r in rows):.1f} %, median "
        f"{100 * np.median([r['share'] for r in rows]):.1f} %, log-mean "
        f"{100 * math.exp(log_share.mean()):.2f} %, log sd {log_share.std():.2f}), LOFO"
    )

    def lognormal(train, point=None):
        logs_ = np.log([t["share"] for t in train])
        mid = math.log(point) if point else logs_.mean()
        w = NORMAL_95 * logs_.std()
        return math.exp(mid), math.exp(mid - w), math.exp(mid + w)

    def quantiles(train):
        return (EVAL_SHARE, *np.percentile([t["share"] for t in train], [2.5, 97.5]))

    def by_counts(key):
        def predict(train, r):
            x = np.log([key(t) for t in train])
            y = np.log([t["share"] for t in train])
            a, b = np.polyfit(x, y, 1)
            w = NORMAL_95 * np.std(y - (a * x + b))
            mid = a * math.log(key(r)) + b
            return math.exp(mid), math.exp(mid - w), math.exp(mid + w)

        return predict

    candidates = (
        (
            "flat 5 % +/- 5 % (before)",
            lambda train, r: (
                EVAL_SHARE,
                EVAL_SHARE - NORMAL_95 * PRIOR_SHARE_SD,
                EVAL_SHARE + NORMAL_95 * PRIOR_SHARE_SD,
            ),
        ),
        ("log-normal at 5 % (the rule)", lambda train, r: lognormal(train, EVAL_SHARE)),
        ("log-normal at the log-mean", lambda train, r: lognormal(train)),
        ("5 %, empirical 2.5-97.5 %", lambda train, r: quantiles(train)),
        ("by the evaluations' count", by_counts(lambda t: t["evals"])),
        ("by the run's units", by_counts(lambda t: t["steps"])),
        ("by a unit's seconds", by_counts(lambda t: t["level"])),
    )
    for name, f in candidates:
        held: list[bool] = []

        def score(train, r, f=f, held=held):
            point, lo, hi = f(train, r)
            held.append(lo <= r["share"] <= hi)
            return 100 * abs(point - r["share"])

        line = _line(name, _lofo(rows, score), "")
        print(f"{line}   interval held {100 * np.mean(held):.1f} %")
    folds = [
        np.log([t["share"] for t in rows if t["family"] != fam])
        for fam in sorted({r["family"] for r in rows})
    ]
    print(
        f"  learned per fold: log-mean {100 * min(math.exp(x.mean()) for x in folds):.2f}-"
        f"{100 * max(math.exp(x.mean()) for x in folds):.2f} %, log sd "
        f"{min(x.std() for x in folds):.2f}-{max(x.std() for x in folds):.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--mlperf-dir",
        type=Path,
        default=MLPERF,
        help="the MLPerf logs (a folder with an index.json, e.g. ../shared/mlperf-dev); "
        "default: the curated corpus",
    )
    args = ap.parse_args()
    rows = runs(args.mlperf_dir)
    first_unit(rows)
    eval_price(rows)
    later_occurrences(occurrences(args.mlperf_dir))
    eval_share_form(rows)


if __name__ == "__main__":
    main()
