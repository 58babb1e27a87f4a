"""The what-if on public measurements (``bench_whatif.py --public``): replays stored data, runs
nothing, so its figures hold on any machine.

Every case is a prediction at a configuration the model was not fitted on, beside the measured
value and a baseline, in the JSON shape of issue 23::

    {"source", "kind": "collective" | "scaling", "from", "to", "band", "predicted_s",
     "measured_s", "error_pct", "baseline_error_pct", "over_link_ceiling", ...}

``CASE_BUILDERS`` lists the functions that make the cases; each takes the data folder and
returns its cases. Collectives (``collective_cases``): a platform is fitted
(``ailens.predict.fit_platform``) on the all-reduce tables of some GPU counts and predicts the
other counts; the baseline is the alpha-beta ring model of ``predict/collectives.py`` fitted on
the same rows. Size bands (per-rank buffer): latency-bound <= 64 KiB, bandwidth-bound >= 64 MiB,
middle between (on these A100/V100 tables the bus bandwidth is < 5 % of its peak at 64 KiB
and > 80 % at 64 MiB).
"""

from __future__ import annotations

import csv
import os
import statistics
from pathlib import Path

import numpy as np

from ailens.predict import (
    DEFAULT_PLATFORMS,
    CostParams,
    NcclTestsTable,
    busbw_factor,
    collective_time,
    cost_coefficients,
    fit_platform,
    nccl_collective_s,
    nonnegative_least_squares,
)

REPO = Path(__file__).resolve().parents[1]
LATENCY_MAX_BYTES = 64 << 10
BANDWIDTH_MIN_BYTES = 64 << 20


def default_data_dir() -> Path:
    """``$AILENS_SCALING_DATA``, else ``../shared/scaling-dev`` beside the repository."""
    env = os.environ.get("AILENS_SCALING_DATA")
    return Path(env) if env else REPO.parent / "shared" / "scaling-dev"


def band(nbytes: float) -> str:
    if nbytes <= LATENCY_MAX_BYTES:
        return "latency"
    if nbytes >= BANDWIDTH_MIN_BYTES:
        return "bandwidth"
    return "middle"


def _read(path: Path) -> list[dict]:
    if not path.exists():
        raise FileNotFoundError(
            f"{path}: public data not found; give --data DIR (the scaling-dev folder) or set "
            "AILENS_SCALING_DATA"
        )
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- collectives


def _tables(rows: list[dict], key: str, source: str, sizes=None) -> dict[int, NcclTestsTable]:
    """One NcclTestsTable per GPU count from tidy CSV rows (both placements; rows the README
    says to drop, flagged ``oop_ip_diff_gt_20pct`` or single rank, left out)."""
    by: dict[int, dict[int, dict[str, float]]] = {}
    nodes: dict[int, int] = {}
    per_process: dict[int, int] = {}
    for r in rows:
        if "oop_ip_diff_gt_20pct" in r.get("flag", "") or int(r["gpus"]) < 2:
            continue
        g, s = int(r["gpus"]), int(r["size_bytes"])
        if sizes is not None and s not in sizes:
            continue
        by.setdefault(g, {}).setdefault(s, {})[r["placement"]] = float(r["time_us"]) * 1e-6
        nodes[g] = int(r.get("nodes") or 1)
        # Echo's one-node logs ran as one process driving all GPUs (nccl-tests -g N).
        launch = r.get("launch", "")
        per_process[g] = g if launch.startswith("single process") else 1
    out = {}
    for g, d in by.items():
        ss = sorted(s for s in d if "out_of_place" in d[s])
        per = g // nodes[g]
        hosts = tuple(f"node{i // per}" for i in range(g))
        out[g] = NcclTestsTable(
            "allreduce",
            g,
            hosts,
            per,
            tuple(ss),
            tuple(d[s]["out_of_place"] for s in ss),
            tuple(d[s].get("in_place", 0.0) for s in ss),
            source=f"{source} ({key}, {g} GPUs)",
            devices_per_process=per_process[g],
        )
    return out


def _alpha_beta(tables: list[NcclTestsTable]) -> CostParams:
    """The baseline: ``predict.collectives``' ring all-reduce (alpha, beta, gamma), fitted by
    NNLS on relative error over the same rows as the platform."""
    a, y = [], []
    for t in tables:
        for i, s in enumerate(t.sizes):
            a.append(cost_coefficients("allreduce", t.ranks, s))
            y.append(t.seconds(i))
    a, y = np.array(a), np.array(y)
    w = 1 / y
    # beta and gamma multiply the same bytes here: one column for both.
    x = nonnegative_least_squares((a * w[:, None])[:, :2], y * w)
    return CostParams(float(x[0]), float(x[1]), 0.0, source="alpha-beta fit")


def _collective_split(
    tables: dict[int, NcclTestsTable],
    fit_on: list[int],
    predict: list[int],
    base: str,
    source: str,
    what: str,
) -> list[dict]:
    cal = [tables[g] for g in fit_on]
    plat = fit_platform(cal, DEFAULT_PLATFORMS[base], name=f"{base} fitted on {fit_on} GPUs")
    ab = _alpha_beta(cal)
    cases = []
    for g in predict:
        t = tables[g]
        for i, s in enumerate(t.sizes):
            meas = t.seconds(i)
            est = nccl_collective_s(
                "allreduce", s, g, plat, t.ranks_per_node, devices_per_process=t.devices_per_process
            )
            base_s = collective_time("allreduce", g, s, ab)
            bus = s / est.seconds * busbw_factor("allreduce", g)
            cases.append(
                {
                    "source": source,
                    "kind": "collective",
                    "from": {
                        "gpus": fit_on,
                        "platform": base,
                        "fitted": what,
                    },
                    "to": {
                        "gpus": g,
                        "nodes": t.nodes,
                        "gpus_per_node": t.ranks_per_node,
                        "op": "allreduce",
                        "size_bytes": s,
                    },
                    "band": band(s),
                    "predicted_s": est.seconds,
                    "measured_s": meas,
                    "error_pct": 100 * (est.seconds - meas) / meas,
                    "baseline_error_pct": 100 * (base_s - meas) / meas,
                    "over_link_ceiling": bool(bus > est.ceiling_Bps * (1 + 1e-9)),
                    "predicted_busbw_GBps": bus / 1e9,
                    "measured_busbw_GBps": s / meas * busbw_factor("allreduce", g) / 1e9,
                    "link_ceiling_GBps": est.ceiling_Bps / 1e9,
                    "algorithm": est.algorithm,
                    "protocol": est.protocol,
                }
            )
    return cases


def collective_cases(data: Path) -> list[dict]:
    """All-reduce at GPU counts the platform was not fitted on (see the module docstring)."""
    coll = data / "collectives"
    cases: list[dict] = []
    echo = _tables(_read(coll / "echo_allreduce_ndv4.csv"), "ndv4", "NetX-lab/Echo nccl-tests")
    one = sorted(g for g in echo if echo[g].nodes == 1)
    for g in one:  # each one-node count from the other two
        rest = [x for x in one if x != g]
        cases += _collective_split(
            echo, rest, [g], "azure-nd-a100-v4", "echo_allreduce_ndv4.csv", "one-node logs"
        )
    multi = sorted(g for g in echo if echo[g].nodes > 1)
    if multi:  # across nodes: intra-node fitted, the network from the datasheet
        cases += _collective_split(
            echo,
            one,
            multi,
            "azure-nd-a100-v4",
            "echo_allreduce_ndv4.csv",
            "one-node logs; network: datasheet defaults (no multi-node log fitted)",
        )
    # vTrain: 1 MiB steps from 1 MiB to 1 GiB; the powers of two and the midpoints between.
    mib = 1 << 20
    picked = {mib << k for k in range(11)} | {3 * (mib << k) // 2 for k in range(1, 10)}
    vt_rows = _read(coll / "vtrain_allreduce_lut.csv")
    for model, base in (("A100", "dgx-a100"), ("V100", "dgx1-v100")):
        rows = [r for r in vt_rows if r["gpu_model"] == model]
        vt = _tables(rows, model, "VIA-Research/vTrain LUT", picked)
        counts = sorted(vt)
        for g in counts:
            rest = [x for x in counts if x != g]
            cases += _collective_split(
                vt, rest, [g], base, f"vtrain_allreduce_lut.csv {model}", "one-node tables"
            )
    return cases


def collective_diagnostics(data: Path) -> dict:
    """Not predictions: the platform fitted on every Echo log (one node and two) against
    those same logs, per GPU count and band, and the fitted figures."""
    coll = data / "collectives"
    echo = _tables(_read(coll / "echo_allreduce_ndv4.csv"), "ndv4", "NetX-lab/Echo nccl-tests")
    plat = fit_platform(list(echo.values()), DEFAULT_PLATFORMS["azure-nd-a100-v4"])
    in_sample: dict = {}
    for g, t in sorted(echo.items()):
        errs: dict[str, list[float]] = {}
        for i, s in enumerate(t.sizes):
            est = nccl_collective_s(
                "allreduce", s, g, plat, t.ranks_per_node, devices_per_process=t.devices_per_process
            )
            errs.setdefault(band(s), []).append(
                abs(100 * (est.seconds - t.seconds(i)) / t.seconds(i))
            )
        in_sample[str(g)] = {b: statistics.median(v) for b, v in errs.items()}
    one_node = fit_platform(
        [t for t in echo.values() if t.nodes == 1], DEFAULT_PLATFORMS["azure-nd-a100-v4"]
    )
    return {
        "echo_all_logs_in_sample_median_abs_error_pct": in_sample,
        "echo_all_logs_platform": {
            "base_latency_us": plat.base_latency_s * 1e6,
            "intra_step_us": plat.intra.latency_s * 1e6,
            "network_step_us": plat.network.latency_s * 1e6 if plat.network else None,
            "nic_GBps": plat.network.bandwidth_Bps / 1e9 if plat.network else None,
            "intra_bus_GBps": {k: v / 1e9 for k, v in plat.intra_by_devices.items()},
            "launch_us_per_extra_gpu": plat.launch_s * 1e6,
        },
        "echo_one_node_launch_us_per_extra_gpu": one_node.launch_s * 1e6,
    }


# --------------------------------------------------------------------------- all cases

# The builders of the public cases, in report order. Each takes the data folder and returns
# a list of cases; the data-parallel scaling cases append their builder here.
CASE_BUILDERS = [collective_cases]


def public_cases(data: Path | None = None) -> list[dict]:
    data = Path(data) if data is not None else default_data_dir()
    out: list[dict] = []
    for build in CASE_BUILDERS:
        out += build(data)
    return out


def summary(cases: list[dict]) -> dict:
    """Per kind and band: count, median and max |error|, baseline median, link-ceiling
    violations."""
    out: dict = {}
    groups: dict[tuple[str, str], list[dict]] = {}
    for c in cases:
        groups.setdefault((c["kind"], c["band"] or "all"), []).append(c)
        groups.setdefault((c["kind"], f"{c['source']}|{c['band'] or 'all'}"), []).append(c)
    for (kind, b), cs in sorted(groups.items()):
        errs = [abs(c["error_pct"]) for c in cs]
        base = [abs(c["baseline_error_pct"]) for c in cs if c["baseline_error_pct"] is not None]
        out.setdefault(kind, {})[b] = {
            "cases": len(cs),
            "median_abs_error_pct": statistics.median(errs),
            "max_abs_error_pct": max(errs),
            "baseline_median_abs_error_pct": statistics.median(base) if base else None,
            "over_link_ceiling": sum(bool(c["over_link_ceiling"]) for c in cs),
        }
    return out


def table(cases: list[dict]) -> str:
    s = summary(cases)
    lines = [f"{'kind':<11} {'group':<52} {'cases':>5} {'median':>8} {'max':>8} {'baseline':>9} "
             f"{'>ceil':>5}"]  # fmt: skip
    for kind, groups in s.items():
        for g, v in groups.items():
            b = v["baseline_median_abs_error_pct"]
            lines.append(
                f"{kind:<11} {g:<52} {v['cases']:>5} {v['median_abs_error_pct']:>7.1f}% "
                f"{v['max_abs_error_pct']:>7.1f}% "
                f"{'' if b is None else f'{b:.1f}%':>9} {v['over_link_ceiling']:>5}"
            )
    return "\n".join(lines)


def goals(cases: list[dict]) -> dict:
    """The collective goals of issue 23, reached or not."""
    coll = [c for c in cases if c["kind"] == "collective"]
    by_band: dict[str, list[float]] = {}
    for c in coll:
        by_band.setdefault(c["band"], []).append(abs(c["error_pct"]))
    med = {b: statistics.median(v) for b, v in by_band.items()}
    return {
        "collective_median_abs_error_pct_by_band": med,
        "collective_median_within_10pct_every_band": bool(med)
        and all(v <= 10 for v in med.values()),
        "collective_predictions_over_link_ceiling": sum(c["over_link_ceiling"] for c in coll),
        "note": "median |error| over every held-out GPU count of every source, per size band"
        if coll
        else "no collective case",
    }
