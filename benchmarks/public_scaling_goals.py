"""The data-parallel scaling goals of issue 23 (``bench_whatif.py --public``) scored on the
cases of ``public_scaling.py``: errors overall and per source, against ideal scaling, and the
platform ordering."""

from __future__ import annotations

import statistics


def ordering(cases: list[dict], threshold_pct: float = 5.0) -> dict:
    """Platforms or networks for the same job: pairs of cases of one source and job at one
    GPU count whose platform or layout differs (Gavel P100 vs V100, DLE DGX-1 vs DGX-2, one
    vs two nodes), measured apart by more than ``threshold_pct``: is the faster one
    predicted faster?"""
    groups: dict[tuple, list[dict]] = {}
    for c in cases:
        f = c["from"]
        job = f.get("model") or f.get("job") or f.get("readme")
        key = (
            c["source"].split(" ")[0],
            str(job),
            str(f.get("precision", "")),
            str(f.get("batch_per_gpu", "")),
            c["to"]["gpus"],
        )
        groups.setdefault(key, []).append(c)
    pairs = right = 0
    wrong = []
    for key, cs in groups.items():
        for i in range(len(cs)):
            for j in range(i + 1, len(cs)):
                a, b = cs[i], cs[j]
                if (
                    a["platform"],
                    a["from"].get("worker_type"),
                    a["from"].get("platform"),
                    a["to"].get("nodes"),
                ) == (
                    b["platform"],
                    b["from"].get("worker_type"),
                    b["from"].get("platform"),
                    b["to"].get("nodes"),
                ):
                    continue
                ma, mb = a["measured_s"], b["measured_s"]
                if abs(ma - mb) / min(ma, mb) * 100 <= threshold_pct:
                    continue
                pairs += 1
                ok = (a["predicted_s"] < b["predicted_s"]) == (ma < mb)
                right += ok
                if not ok:
                    wrong.append([key[1], key[4], a["source"], b["source"]])
    return {
        "pairs": pairs,
        "right": right,
        "fraction_right": right / pairs if pairs else None,
        "wrong": wrong[:20],
    }


def scaling_goals(cases: list[dict]) -> dict:
    """The data-parallel goals of issue 23, reached or not, overall and per source."""
    sc = [c for c in cases if c["kind"] == "scaling"]
    if not sc:
        return {"note": "no scaling case"}

    def stats(cs):
        e = [abs(c["error_pct"]) for c in cs]
        closer = sum(abs(c["error_pct"]) < abs(c["baseline_error_pct"]) for c in cs)
        return {
            "cases": len(cs),
            "median_abs_error_pct": statistics.median(e),
            "max_abs_error_pct": max(e),
            "baseline_median_abs_error_pct": statistics.median(
                abs(c["baseline_error_pct"]) for c in cs
            ),
            "closer_than_baseline": closer,
            "median_within_5pct": statistics.median(e) <= 5,
            "worst_within_15pct": max(e) <= 15,
            "closer_than_baseline_every_case": closer == len(cs),
        }

    per: dict[str, list[dict]] = {}
    for c in sc:
        per.setdefault(c["source"], []).append(c)
    # Strong cases whose compute came from the floor assumption (a band, no measured curve).
    strong = [
        c for c in sc if c.get("scaling") == "strong" and c["compute_high_s"] > c["compute_low_s"]
    ]
    in_band = sum(c["compute_low_s"] <= c["measured_s"] - c["exposed_comm_s"] <= c["compute_high_s"]
                  for c in strong)  # fmt: skip
    return {
        "scaling": stats(sc),
        "strong_scaling_measured_within_compute_band": f"{in_band} of {len(strong)}",
        "scaling_by_source": {k: stats(v) for k, v in sorted(per.items())},
        "ordering": ordering(sc),
    }
