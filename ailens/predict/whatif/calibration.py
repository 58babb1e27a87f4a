"""Calibrations (``ailens calibrate``'s calibration.json): reading them, combining them,
and the parts the what-if takes from one: the link measurements per link kind (cost-model
parameters, measured times, CPU, times beside computing ranks, the transport's idle CPU) and
the compute probe (thread speed-up, ranks sharing a node)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..._io import read_json
from ..collectives import CostParams, canonical_op, params_from_dict

__all__ = [
    "LinkCalibration",
    "compute_probe",
    "interp_samples",
    "link_calibration",
    "load_calibration",
    "merge_calibrations",
    "sample_table",
]


def load_calibration(path: str | os.PathLike) -> dict | None:
    """A calibration.json (``ailens calibrate``), or None when absent or unreadable."""
    f = Path(path)
    return read_json(f / "calibration.json" if f.is_dir() else f)


@dataclass(frozen=True)
class LinkCalibration:
    """What a calibration measured of the links: cost-model parameters per link kind
    (None: not measured), and per link kind ``(ranks, table)`` of measured seconds, CPU
    seconds and seconds beside computing ranks, and ``(ranks, CPU s per s)`` of the
    transport's idle CPU."""

    transport: str | None = None
    intra: CostParams | None = None
    inter: CostParams | None = None
    samples: dict = field(default_factory=dict)
    cpu_samples: dict = field(default_factory=dict)
    loaded_samples: dict = field(default_factory=dict)
    background_cpu: dict = field(default_factory=dict)


def link_calibration(cal: dict | None, run_transport: str) -> LinkCalibration:
    """The link measurements of ``cal`` (a run of ``run_transport``); empty when None."""
    if not isinstance(cal, dict):
        return LinkCalibration()
    cal_transport = str(cal.get("transport") or "mpi")  # version 1 files were MPI only
    what = f"ailens calibrate on {cal_transport}"
    if run_transport and cal_transport != run_transport:
        what += f" (the run used {run_transport}: figures of another transport)"
    cal_intra = params_from_dict(cal.get("intra"), f"{what}, intra-node")
    cal_inter = params_from_dict(cal.get("inter"), f"{what}, inter-node")
    samples: dict = {}
    cpu_samples: dict = {}
    loaded: dict = {}
    background: dict = {}
    for kind, got in (("intra", cal_intra), ("inter", cal_inter)):
        table = sample_table(cal.get(kind)) if got is not None else None
        if table:
            samples[kind] = (int(cal[kind].get("ranks") or 0), table)
        ranks_cal = int(cal[kind].get("ranks") or 0) if got is not None else 0
        for key, dest in (("cpu_seconds", cpu_samples), ("loaded_seconds", loaded)):
            table = sample_table(cal.get(kind), key) if got is not None else None
            if table:
                dest[kind] = (ranks_cal, table)
        try:
            bg = float((cal.get(kind) or {}).get("background_cpu") or 0.0)
        except (TypeError, ValueError, AttributeError):
            bg = 0.0
        if got is not None and bg > 0:
            background[kind] = (int(cal[kind].get("ranks") or 0), bg)
    return LinkCalibration(
        cal_transport, cal_intra, cal_inter, samples, cpu_samples, loaded, background
    )


def compute_probe(cal: dict | None) -> tuple[tuple | None, tuple | None, str, str]:
    """The compute probe of a calibration: (thread speed-up curve ``((cores, speed-up),
    ...)``, node-sharing slowdown curve ``((busy cores, slowdown), ...)``, where each came
    from); None for a curve it did not measure."""
    probe = (cal or {}).get("compute") if isinstance(cal, dict) else None
    speedup, corun, t_src, c_src = None, None, "", ""
    if not isinstance(probe, dict):
        return speedup, corun, t_src, c_src
    try:
        th = {float(k): float(v) for k, v in (probe.get("threads") or {}).items()}
        co = {float(k): float(v) for k, v in (probe.get("corun") or {}).items()}
    except (TypeError, ValueError):
        th, co = {}, {}
    kernel = probe.get("kernel", "a probe kernel")
    if 1.0 in th and len(th) > 1 and all(v > 0 for v in th.values()):
        speedup = tuple(sorted((c, th[1.0] / v) for c, v in th.items()))
        t_src = f"measured by ailens calibrate ({kernel}, not this job's own kernels)"
    if 1.0 in co and len(co) > 1 and all(v > 0 for v in co.values()):
        # Sharing a node never speeds a core up: a ratio under 1 is noise of the probe.
        corun = tuple(sorted((c, max(v / co[1.0], 1.0)) for c, v in co.items()))
        c_src = f"measured by ailens calibrate ({kernel}, ranks computing side by side)"
    return speedup, corun, t_src, c_src


def sample_table(entry, key: str = "seconds") -> dict:
    """{canonical op: (sizes, values)} of a calibration entry's measurements of ``key``
    (``seconds`` or ``cpu_seconds``)."""
    rows = entry.get("samples") if isinstance(entry, dict) else None
    out: dict = {}
    for r in rows or ():
        try:
            op, n, v = canonical_op(str(r["op"])) or "allreduce", float(r["nbytes"]), float(r[key])
        except (KeyError, TypeError, ValueError):
            continue
        if n > 0 and v > 0:
            out.setdefault(op, {})[n] = v
    return {op: (np.array(sorted(d)), np.array([d[k] for k in sorted(d)])) for op, d in out.items()}


def interp_samples(table: dict, op: str, nbytes: float) -> float | None:
    """Measured seconds at ``nbytes`` (log-log interpolation between the measured sizes),
    None outside them."""
    got = table.get(canonical_op(op) or "allreduce")
    if got is None or nbytes <= 0:
        return None
    sizes, secs = got
    if nbytes < sizes[0] or nbytes > sizes[-1]:
        return None
    return float(np.exp(np.interp(np.log(nbytes), np.log(sizes), np.log(secs))))


def merge_calibrations(docs: list[dict | None]) -> dict | None:
    """One calibration from several (e.g. one run on a single host for the intra-node
    figures, one across hosts for the inter-node ones): per part, the first that has it."""
    docs = [d for d in docs if isinstance(d, dict)]
    if not docs:
        return None
    out = dict(docs[0])
    for key in ("intra", "inter", "compute"):
        out[key] = next((d[key] for d in docs if d.get(key)), None)
    return out
