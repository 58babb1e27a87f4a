"""The corpus' scores summarised (``bench_forecast.py``): medians of |error| of ailens, the
progress bar and Composer, points closer than the better baseline, interval coverage, the
signature; and the tables printed from them."""

from __future__ import annotations

import numpy as np
from forecast_replay import FRACTIONS

SCORED = ("5", "10", "20", "50")  # the fractions the summaries score
LONG_RUN = 200  # runs of at least this many steps: the signature's goal there is 10 %


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
    sig_long = [
        r["signature_fraction"]
        for r in rows
        if r["signature_fraction"] is not None and r["steps"] >= LONG_RUN
    ]
    sig_cov = [r["signature_covered"] for r in rows if r.get("signature_covered") is not None]
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
        # The same at the signature step for the baselines (Composer: none before step 2).
        "signature_median_abs_error_naive_pct": _median(_sig_abs(rows, "naive")),
        "signature_median_abs_error_composer_pct": _median(_sig_abs(rows, "composer")),
        "signature_composer_runs": len(_sig_abs(rows, "composer")),
        f"signature_median_fraction_runs_ge_{LONG_RUN}_steps": _median(sig_long),
        f"runs_ge_{LONG_RUN}_steps": sum(r["steps"] >= LONG_RUN for r in rows),
        # The 95 % interval of the signature's forecast holding the actual end.
        "signature_coverage_pct": 100 * sum(sig_cov) / len(sig_cov) if sig_cov else None,
        # What held the signature at the evaluation point before it, by kind: runs each.
        "signature_held_by": _held_by(rows),
        f"signature_held_by_runs_ge_{LONG_RUN}_steps": _held_by(
            [r for r in rows if r["steps"] >= LONG_RUN]
        ),
    }


def _held_by(rows: list[dict]) -> dict[str, int]:
    count: dict[str, int] = {}
    for r in rows:
        for k in r.get("signature_held_by", ()):
            count[k] = count.get(k, 0) + 1
    return dict(sorted(count.items(), key=lambda kv: (-kv[1], kv[0])))


def _sig_abs(rows: list[dict], who: str) -> list[float]:
    key = f"signature_{who}_error_pct"
    return [abs(r[key]) for r in rows if r.get(key) is not None]


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
        + "  closer worse  cov   hw%   sig%  sig@  err@sig bar@sig cmp@sig"
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
            f"{_f(s['signature_median_abs_error_pct'], '5.2f'):>7} "
            f"{_f(s['signature_median_abs_error_naive_pct'], '5.2f'):>7} "
            f"{_f(s['signature_median_abs_error_composer_pct'], '5.2f'):>7}"
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
        f"median |error| (%) {errs}  (goals 2 / 1 / 0.5 / 0.25 at 5 / 10 / 20 / 50 %)",
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
        f"signature on {_f(s['signature_rate_pct'], '.1f')} % of runs (goal >= 95 %), at a median "
        f"{_f(None if sig_at is None else 100 * sig_at, '.1f')} % of the steps (goal <= 15 %), "
        f"median |error| there {_f(s['signature_median_abs_error_pct'], '.2f')} % (goal <= 1.5 %); "
        f"progress bar {_f(s['signature_median_abs_error_naive_pct'], '.2f')} %, Composer "
        f"{_f(s['signature_median_abs_error_composer_pct'], '.2f')} % "
        f"({s['signature_composer_runs']} runs) at the same step; on the "
        f"{s[f'runs_ge_{LONG_RUN}_steps']} runs of >= {LONG_RUN} steps at a median "
        f"{_f(_pct100(s[f'signature_median_fraction_runs_ge_{LONG_RUN}_steps']), '.1f')} % "
        "(goal <= 10 %)",
        f"  the signature's interval held the end on {_f(s['signature_coverage_pct'], '.1f')} % "
        "of the runs with one; what held it at the evaluation point before it (runs): "
        + ("; ".join(f"{k} {v}" for k, v in s["signature_held_by"].items()) or "none"),
    ]


def _pct100(x: float | None) -> float | None:
    return None if x is None else 100 * x
