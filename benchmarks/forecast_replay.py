"""Score one run's forecasts against its actual total (``bench_forecast.py``): the forecast a
user would have read, the progress-bar ETA and Composer's RuntimeEstimator at 1, 5, 10, 20 and
50 % of the steps. A recorded run goes through ``analyze`` (as ``ailens predict``), an MLPerf log
through the public timeline API (``ailens.read_timeline`` -> ``ailens.forecast_timeline``)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import _harness as harness
import numpy as np

import ailens
from ailens.model import composer_total_s, naive_total_s

FRACTIONS = (1, 5, 10, 20, 50)


def replay(run_dir: Path, *, total_steps: int | None = None, epochs: bool = False) -> dict:
    """Score one recorded run: forecast, progress bar and Composer at each fraction of the
    steps, and the step of its first total forecast (``first_forecast_step``). A run whose
    length nothing said during it scores null at every fraction, as its user saw it;
    ``total_steps`` replays it told the length from the start (what the length hint asks
    for). ``epochs``: also the epoch-level forecast (``epoch_scores``)."""
    seen: dict = {"epochs": {} if epochs else None}
    a = harness.analyze_run(run_dir, watch=lambda oa: _watch(oa, seen), total_steps=total_steps)
    f = a.forecast
    if f is None or not f.actual_total_s or not f.total_steps:
        raise ValueError(f"{run_dir}: no finished run with a known total ({a.warnings})")
    row = _score(f.total_steps, f.actual_total_s, seen)
    row["first_forecast_step"] = seen.get("first_forecast_step")
    row["warmup_steps"] = a.config.warmup_steps
    if epochs:
        row.update(epoch_scores(seen["epochs"], a.step_end_s, f.total_steps))
    row["ranks"] = a.ranks
    row["signature_fraction"] = f.signature_fraction
    row["signature_error_pct"] = f.error_pct if f.basis == "signature" else None
    _at_signature(row, f.signature_step if f.basis == "signature" else None, f.actual_total_s, seen)
    _signature_rule(row, f)
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


def _at_signature(row: dict, sig: int | None, actual: float, seen: dict) -> None:
    """The progress bar's and Composer's errors at the signature step (beside ailens'), and
    what the signature captured."""
    _, _, naive, comp = seen.get(sig, (None, None, None, None)) if sig else (None,) * 4
    row["signature_naive_error_pct"] = _pct(naive, actual)
    row["signature_composer_error_pct"] = _pct(comp, actual)


def _signature_rule(row: dict, f) -> None:
    """Whether the signature's interval held the actual end, and what held the signature at
    the evaluation point before it (``signature_waited_for``; for a run that never reached
    it, at its last one), as the rule said it and by kind (``held_by``)."""
    at_sig = f is not None and f.basis == "signature"
    row["signature_covered"] = f.covered if at_sig else None
    waited = list(f.signature_waited_for) if f is not None else []
    row["signature_waited_for"] = waited
    row["signature_held_by"] = held_by(waited, reached=at_sig)


def held_by(waited: list[str], *, reached: bool) -> list[str]:
    """The kinds of what held a signature (``Forecast.signature_waited_for``), one per
    blocker: ``"<part>: <why>"`` with the part's numbers written N (``every N steps``) and
    the reason reduced to its kind; nothing held it: the first evaluation point decided."""
    if not waited:
        return ["nothing: the first evaluation point" if reached else "nothing evaluated"]
    out = []
    for w in waited:
        if w.startswith("fewer than"):
            out.append("too few steps (signature_min_steps)")
            continue
        name, _, why = w.partition(": ")
        name = re.sub(r"\d+", "N", name)
        kind = next((k for key, k in _WHY if key in why), why)
        out.append(f"{name}: {kind}")
    return sorted(set(out))


# A blocker's reason -> its kind (the first that matches).
_WHY = (
    ("priced from the schedule", "not seen, its priced cost not within the tolerance"),
    ("not seen yet", "not seen yet"),
    ("none passed yet", "none passed yet"),
    ("off its level", "latest steps off its level"),
    ("still settling", "still settling"),
    ("known to", "not known to the precision needed"),
    ("period is not known", "period not known"),
    ("not known yet", "not known yet"),
    ("warm-up steps only", "not known yet"),
    ("no level yet", "not known yet"),
)


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
    if p.predicted_total_s is not None:
        seen.setdefault("first_forecast_step", p.steps_done)
    if seen.get("epochs") is not None and (e := oa.epoch_forecast()) is not None:
        seen["epochs"][p.steps_done] = (e.epoch_end_step, e.predicted_end_s, p.elapsed_s)


def epoch_scores(epochs: dict[int, tuple], step_end_s, n: int) -> dict:
    """The epoch-level forecast (when the running epoch ends: what a run whose length nothing
    says gets) scored like the total: at each fraction of the steps, its error against the
    epoch's actual end, beside the progress bar of that epoch (elapsed + steps to the
    epoch's end x mean step time so far), both in % of the actual end (time from the Lens
    start); and the step it first appeared (``first_epoch_forecast_step``)."""
    err: dict = {"ailens": {}, "naive": {}}
    for pct in FRACTIONS:
        s = max(1, math.floor(pct / 100 * n))
        end_step, predicted, elapsed = epochs.get(s, (None, None, None))
        ok = end_step is not None and end_step <= len(step_end_s)
        actual = float(step_end_s[end_step - 1]) if ok else None
        naive = elapsed + (end_step - s) * elapsed / s if ok else None
        err["ailens"][str(pct)] = _pct(predicted, actual) if ok else None
        err["naive"][str(pct)] = _pct(naive, actual) if ok else None
    first = min(epochs) if epochs else None
    return {"first_epoch_forecast_step": first, "epoch_error_pct": err}


def replay_mlperf(path: Path) -> dict:
    """Score one MLPerf log through the public timeline API (run_start to run_stop, the
    run's real number of steps given)."""
    return replay_log(path, include_init=False)


def replay_log(path: Path, *, include_init: bool = True) -> dict:
    """Score one finished training log of any format ``ailens forecast`` reads through the
    public timeline API, the run's real number of steps given. At a step between two of
    the log's clock readings the forecast is the one made at the last reading."""
    tl = ailens.read_timeline(path, include_init=include_init)
    r = ailens.forecast_timeline(tl)
    if not r.actual_total_s or not tl.total_steps:
        raise ValueError(f"{path}: no finished run in the log (its end or its total unknown)")
    seen = {
        k: (
            x.predicted_total_s,
            x.interval_s,
            x.progress_bar_total_s,
            x.composer_total_s,
        )
        for k, x in enumerate(r.steps, 1)
    }
    row = _score(tl.total_steps, r.actual_total_s, seen)
    f = r.forecast
    n = tl.total_steps
    row["ranks"] = None
    row["unit"] = tl.unit
    row["format"] = tl.source
    row["signature_fraction"] = None if r.signature_step is None else r.signature_step / n
    row["signature_error_pct"] = f.error_pct if f is not None and f.basis == "signature" else None
    sig = r.signature_step if f is not None and f.basis == "signature" else None
    _at_signature(row, sig, r.actual_total_s, seen)
    _signature_rule(row, f)
    row["step_cv"] = _timeline_cv(tl)
    row["evaluations"] = sum(s.name == "eval" for s in tl.sections)
    return row


def unit_training_s(tl) -> np.ndarray:
    """Each unit's (step's) training time in a timeline: its duration less the marked
    sections that lie inside it."""
    ends = np.asarray(tl.step_end_s)
    units = np.diff(np.concatenate(([0.0], ends)))
    for sec in tl.sections:
        i = int(np.searchsorted(ends, sec.end_s, side="left"))
        if i < len(units) and (i == 0 or sec.begin_s >= ends[i - 1]):
            units[i] -= sec.end_s - sec.begin_s
    return units


def _timeline_cv(tl) -> float:
    """Coefficient of variation of a timeline's step times after the warm-up, sections out."""
    d = unit_training_s(tl)[2:]
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
