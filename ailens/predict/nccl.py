"""Collectives as NCCL runs them: a hierarchical cost model on a ``Platform``, and its fit on
nccl-tests tables.

The structure is NCCL's own tuning model (``src/graph/tuning.cc`` in NVIDIA/nccl, read for
this: ``baseLat``, ``hwLat``, the per-protocol bandwidth factors, the ring and tree latency
terms), with the link figures taken from the platform instead of NCCL's built-in constants:

* **Bandwidth.** Every algorithm/protocol runs at a fraction of the bottleneck link's bus
  bandwidth ``B``: on one node the intra-node link (``Platform.intra_bandwidth(k)``), across
  nodes the smaller of that and the node's injection bandwidth (NICs in use x one NIC). Ring:
  LL 1/4, LL128 0.92 (0.7 with one device per node), Simple 1; tree: 0.9, LL x 1/3.8,
  LL128 x 7/9 (one node) or 0.915. Algorithm bandwidth = bus bandwidth x ``n / nsteps``
  (ring) or 1/2 (tree), so the bus bandwidth nccl-tests would report never exceeds ``B``.
* **Latency.** ``base + (nsteps - inter_steps) x intra_step + inter_steps x net_step`` for a
  ring (``nsteps`` = 2(n-1) all-reduce, n-1 all-gather / reduce-scatter, n broadcast / reduce;
  ``inter_steps`` = 2(nodes-1), nodes-1, nodes), ``base + 2((n/nodes - 1) x intra_step +
  log2(nodes) x net_step)`` for a tree: ring latency grows with the ranks at the intra-node
  link's step latency and with the nodes at the network's, tree latency with log2(nodes).
  The per-step latencies of the three protocols keep NCCL's ratios, scaled to the platform's
  ``latency_s`` (ring LL).
* **Choice.** NCCL picks, per call, the algorithm and protocol of least modelled time: so does
  ``nccl_collective_s``. Tree is considered for all-reduce only; LL128 only over NVLink.

``fit_platform`` fits the latencies (base, intra step, network step), the intra-node bus
bandwidth at each measured device count and the NIC bandwidth to nccl-tests rows by
least squares on log time (Nelder-Mead), starting from the base platform's values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .collectives import canonical_op
from .platforms import (
    NCCL_BASE_S,
    NCCL_NET_STEP_S,
    NCCL_NVLINK_STEP_S,
    NCCL_PCI_STEP_S,
    Link,
    NcclTestsTable,
    Platform,
    ring_links,
)

__all__ = [
    "BUSBW_FACTOR",
    "CollectiveEstimate",
    "busbw_factor",
    "fit_platform",
    "nccl_collective_s",
]

ALGORITHMS = ("ring", "tree")
PROTOCOLS = ("LL", "LL128", "Simple")
# NCCL's latency tables (microseconds), src/graph/tuning.cc: baseLat[algo][proto] and
# hwLat[NVLink | PCI | NET][algo][proto].
_BASE_US = {"tree": (6.8, 14.0, 0.0), "ring": (6.6, 14.0, 8.4)}
_HW_US = {
    "nvlink": {"tree": (0.52, 1.25, 28.0), "ring": (0.47, 1.9, 3.4)},
    "pcie": {"tree": (1.0, 1.9, 28.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 28.0), "ring": (2.7, 4.0, 14.0)},
}
# NCCL's correction of tree bandwidth for medium sizes (powers of two from 64 B to 128 MB).
_TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0),  # noqa: E501
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7, .8, .9, .9, 1.0),  # noqa: E501
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6, .7, .8, .9),  # noqa: E501
}  # fmt: skip

# nccl-tests' bus-bandwidth factor f(n): busbw = algbw x f(n).
BUSBW_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' factor from algorithm to bus bandwidth (doc/PERFORMANCE.md)."""
    kind = canonical_op(op) or "allreduce"
    f = BUSBW_FACTOR.get(kind, BUSBW_FACTOR["allreduce"])
    return float(f(int(n))) if n > 1 else 0.0


@dataclass(frozen=True)
class CollectiveEstimate:
    """Modelled time of one collective, how NCCL would run it, and what bounds it.

    ``bus_bandwidth_Bps``: nccl-tests' bus bandwidth of this time (algbw x f(n));
    ``ceiling_Bps``: the bottleneck link's bus bandwidth, which it never exceeds."""

    seconds: float
    algorithm: str
    protocol: str
    bus_bandwidth_Bps: float
    ceiling_Bps: float
    bottleneck: str
    ranks: int
    nodes: int
    ranks_per_node: int
    assumptions: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "seconds": self.seconds,
            "algorithm": self.algorithm,
            "protocol": self.protocol,
            "bus_bandwidth_Bps": self.bus_bandwidth_Bps,
            "ceiling_Bps": self.ceiling_Bps,
            "bottleneck": self.bottleneck,
            "ranks": self.ranks,
            "nodes": self.nodes,
            "ranks_per_node": self.ranks_per_node,
            "assumptions": list(self.assumptions),
        }


def _steps(kind: str, n: int, nodes: int) -> tuple[int, int]:
    """(ring steps, of which cross nodes), as NCCL's tuning model counts them."""
    if kind == "allreduce":
        return 2 * (n - 1), 2 * (nodes - 1)
    if kind in ("allgather", "reduce_scatter", "alltoall"):
        return n - 1, nodes - 1
    return n, nodes  # broadcast, reduce


def _wire_bytes(kind: str, nbytes: float, n: int) -> float:
    """The size NCCL's model divides by the algorithm bandwidth (nccl-tests' S): all-gather's
    is the gathered total (the trace records one rank's part)."""
    return float(nbytes) * n if kind in ("allgather", "gather") else float(nbytes)


def nccl_collective_s(
    op: str,
    nbytes: float,
    ranks: int,
    platform: Platform,
    ranks_per_node: int | None = None,
    *,
    algorithm: str | None = None,
    protocol: str | None = None,
    devices_per_process: int = 1,
) -> CollectiveEstimate:
    """Seconds of one NCCL collective of ``nbytes`` (what the trace records: the buffer of
    an all-reduce / broadcast / reduce, one rank's part of an all-gather, the input of a
    reduce-scatter) on ``ranks`` ranks of ``platform``, ``ranks_per_node`` per node (default:
    fill nodes of ``devices_per_node``). ``algorithm`` / ``protocol`` force NCCL's choice
    (as NCCL_ALGO / NCCL_PROTO do). ``devices_per_process`` > 1: one thread drives that many
    devices (nccl-tests ``-g``) and launches their kernels one after another
    (``platform.launch_s`` each)."""
    n = int(ranks)
    if n < 1:
        raise ValueError(f"ranks must be >= 1, got {ranks}")
    ppn = int(ranks_per_node or min(n, platform.devices_per_node))
    ppn = max(min(ppn, n), 1)
    nodes = -(-n // ppn)
    kind = canonical_op(op) or "allreduce"
    notes: list[str] = []
    if canonical_op(op) is None:
        notes.append(f"{op!r}: no NCCL model, costed as an all-reduce")
    if kind in ("gather", "scatter"):
        kind = "allgather" if kind == "gather" else "reduce_scatter"
        notes.append(f"{op}: costed as the NCCL ring collective with the same traffic")
    if kind == "barrier":
        kind, nbytes = "allreduce", 4
        notes.append("barrier: costed as a 4-byte all-reduce")
    if n == 1:
        return CollectiveEstimate(0.0, "none", "none", 0.0, 0.0, "none", 1, 1, 1, tuple(notes))

    # The bottleneck link's bus bandwidth.
    b_intra, intra_src = platform.intra_bandwidth(ppn)
    hw_intra = "pcie" if platform.intra_kind == "pcie" else "nvlink"
    ring_over_host = bool(
        platform.nvlinks
        and platform.host is not None
        and 1 < ppn <= len(platform.nvlinks)
        and ppn not in platform.intra_by_devices
        and ring_links(platform.nvlinks, ppn) == 0
    )
    if ring_over_host:
        hw_intra = "pcie"
    bottleneck = f"intra-node link, {b_intra / 1e9:.3g} GB/s bus bandwidth ({intra_src})"
    ceiling = b_intra if ppn > 1 else math.inf
    if nodes > 1:
        if platform.network is None:
            raise ValueError(
                f"platform {platform.name!r} has no network: {n} ranks at {ppn} per node "
                "span nodes; give a platform with a network (ailens calibrate "
                "--from-nccl-tests on a multi-node log, or a default label)"
            )
        nics = min(platform.nics_per_node, ppn)
        b_net = nics * platform.network.bandwidth_Bps
        if b_net < ceiling:
            ceiling = b_net
            bottleneck = (
                f"network, {nics} NIC(s) x {platform.network.bandwidth_Bps / 1e9:.3g} GB/s "
                f"per node ({platform.network.source})"
            )
        notes.append(
            f"{nodes} nodes x {ppn} ranks: inter-node steps at the network's latency "
            f"({platform.network.latency_s * 1e6:.3g} us per step, {platform.network.source})"
        )
    s_base = platform.base_latency_s / NCCL_BASE_S
    ref_intra = NCCL_PCI_STEP_S if platform.intra_kind == "pcie" else NCCL_NVLINK_STEP_S
    s_intra = platform.intra.latency_s / ref_intra
    if ring_over_host:
        s_intra = platform.host.latency_s / NCCL_PCI_STEP_S
    s_net = platform.network.latency_s / NCCL_NET_STEP_S if platform.network else 1.0
    nsteps, inter = _steps(kind, n, nodes)
    size = _wire_bytes(kind, nbytes, n)
    best = None
    algos = ALGORITHMS if kind == "allreduce" else ("ring",)
    for a in algos:
        if algorithm and a != algorithm.lower():
            continue
        for pi, p in enumerate(PROTOCOLS):
            if protocol and p.lower() != protocol.lower():
                continue
            if p == "LL128" and hw_intra != "nvlink":
                continue  # NCCL enables LL128 by default over NVLink only
            bus = ceiling
            if a == "ring" and p == "LL":
                bus *= 1 / 4 if (nodes > 1 or kind in ("allreduce", "reduce")) else 1 / 3
            elif a == "ring" and p == "LL128":
                bus *= 0.92 if ppn >= 2 else 0.7
            elif a == "tree":
                bus *= 0.9
                if p == "LL":
                    bus /= 3.8
                elif p == "LL128":
                    bus *= 7 / 9 if nodes == 1 else 0.915
            tune = platform.protocol_tuning(ppn, p)
            bus = min(bus * float(tune.get("bandwidth", 1.0)), ceiling)
            ratio = n / nsteps if a == "ring" else 0.5
            algbw = bus * ratio
            if a == "tree":
                log_size = int(math.log2(max(size, 64) / 64))
                if log_size < 22:
                    algbw *= _TREE_CORRECTION[p][log_size]
            intra_lat = _HW_US[hw_intra][a][pi] * s_intra * 1e-6
            if nodes > 1 and p == "LL":
                intra_lat *= 1.8  # as NCCL models LL across nodes
            net_lat = _HW_US["net"][a][pi] * s_net * 1e-6
            lat = _BASE_US[a][pi] * s_base * 1e-6 * float(tune.get("base_latency", 1.0))
            if a == "ring":
                if kind in ("broadcast", "reduce"):
                    lat += nsteps * (net_lat if nodes > 1 else intra_lat)
                else:
                    lat += (nsteps - inter) * intra_lat + inter * net_lat
                if p == "Simple" and nodes > 1 and kind == "allreduce" and size >= n / 16 * 65536:
                    lat *= 1.9  # NCCL's "plateau effect of ring" across nodes
            else:
                lat += 2 * ((ppn - 1) * intra_lat + math.log2(nodes) * net_lat)
            t = lat + size / algbw if math.isfinite(algbw) and algbw > 0 else math.inf
            if best is None or t < best[0]:
                best = (t, a, p)
    if best is None:
        raise ValueError(
            f"no NCCL algorithm/protocol for {op} with algorithm={algorithm!r}, "
            f"protocol={protocol!r} on {platform.name}"
        )
    t, a, p = best
    if devices_per_process > 1 and platform.launch_s > 0:
        t += (devices_per_process - 1) * platform.launch_s
        notes.append(
            f"one thread drives {devices_per_process} devices: "
            f"{devices_per_process - 1} more kernel launches of {platform.launch_s * 1e6:.3g} us"
        )
    bus_now = size / t * busbw_factor(kind, n) if t > 0 else 0.0
    if ring_over_host:
        notes.append(
            f"no ring over the first {ppn} devices closes over NVLink: at the host path's speed"
        )
    notes.append(f"platform {platform.name}: {platform.description or 'no description'}")
    return CollectiveEstimate(
        seconds=float(t),
        algorithm=a,
        protocol=p,
        bus_bandwidth_Bps=float(bus_now),
        ceiling_Bps=float(ceiling),
        bottleneck=bottleneck,
        ranks=n,
        nodes=nodes,
        ranks_per_node=ppn,
        assumptions=tuple(notes),
    )


# --------------------------------------------------------------------------- fit


def _nelder_mead(f, x0: np.ndarray, step: float = 0.3, iters: int = 1500) -> np.ndarray:
    """Minimise ``f`` from ``x0`` (a small, dependency-free Nelder-Mead)."""
    k = len(x0)
    pts = [np.array(x0, dtype=float)]
    for i in range(k):
        x = np.array(x0, dtype=float)
        x[i] += step
        pts.append(x)
    vals = [f(x) for x in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) <= 1e-10 * (abs(vals[0]) + 1e-12):
            break
        c = np.mean(pts[:-1], axis=0)
        xr = c + (c - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = c + 2 * (c - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, len(pts)):
                    pts[i] = pts[0] + 0.5 * (pts[i] - pts[0])
                    vals[i] = f(pts[i])
    return pts[int(np.argmin(vals))]


def _rows(tables: list[NcclTestsTable]):
    """(table, size, seconds) of every usable row: 2 ranks or more, positive times."""
    out = []
    for t in tables:
        if t.ranks < 2:
            continue
        for i, s in enumerate(t.sizes):
            sec = t.seconds(i)
            if s > 0 and sec > 0:
                out.append((t, s, sec))
    return out


# Protocol corrections the fit may change: (protocol, "latency" | "bandwidth"). LL's latency
# and Simple's bandwidth are the link figures themselves.
_TUNABLE = (("LL", "bandwidth"), ("LL128", "base_latency"), ("Simple", "base_latency"))


_PULL = 1e-6  # weight of the protocol corrections' distance from NCCL's constants (log)
# Sizes whose time is latency alone on every platform measured (the bandwidth term is < 2 %):
# they fit the latencies first.
_PURE_LATENCY_BYTES = 8 << 10


def _size_class(nbytes: float) -> int:
    """Latency-bound (<= 64 KiB), middle, bandwidth-bound (>= 64 MiB): each class of each
    table weighs the same in the fit, whatever its number of rows."""
    return 0 if nbytes <= 64 << 10 else (2 if nbytes >= 64 << 20 else 1)


def fit_platform(tables: list[NcclTestsTable], base: Platform, name: str | None = None):
    """The platform whose NCCL model best explains the tables (see the module docstring):
    least squares on log time, each size class of each table weighted alike."""
    rows = _rows(tables)
    if not rows:
        raise ValueError(
            "no nccl-tests row with 2 or more ranks: a 1-rank run moves no data, nothing to fit"
        )
    dpn = base.devices_per_node
    for t in tables:
        if t.nodes == 1 and t.ranks > dpn:
            raise ValueError(
                f"{t.source}: {t.ranks} ranks on one host but devices_per_node={dpn}; "
                "give --devices-per-node"
            )
    where = ", ".join(sorted({t.source for t in tables}))
    one_node = sorted({t.ranks_per_node for t in tables if t.nodes == 1})
    multi = [t for t in tables if t.nodes > 1]
    # Only multi-node logs: the intra-node link cannot be told from the network's; kept.
    fit_intra = bool(one_node)
    counts = sorted(set(one_node) | {t.ranks_per_node for t in multi if t.ranks_per_node > 1})
    # A log run with -g N (one thread, N devices) pays N kernel launches one after another.
    # With only such logs the launches and the intra-node step latency grow alike with the
    # devices (N - 1 against 2(N - 1)): the step latency then stays the base platform's.
    single = any(t.devices_per_process > 1 for t in tables)
    step_known = any(t.devices_per_process == 1 and t.ranks_per_node > 1 for t in tables)
    fit_step = fit_intra and (step_known or not single)
    names: list[str] = ["base"]
    x0: list[float] = [math.log(base.base_latency_s)]
    if single:
        names.append("launch")
        x0.append(math.log(max(base.launch_s, 2e-6)))
    if fit_step:
        names.append("intra_lat")
        x0.append(math.log(max(base.intra.latency_s, 1e-9)))
    if fit_intra:
        names += [f"bw{k}" for k in counts]
        x0 += [math.log(base.intra_bandwidth(k)[0]) for k in counts]
    net = base.network or Link(12.5e9, NCCL_NET_STEP_S, "assumed starting point")
    if multi:
        names += ["net_lat", "net_bw"]
        x0 += [math.log(max(net.latency_s, 1e-9)), math.log(net.bandwidth_Bps)]
    for k in counts:
        for proto, what in _TUNABLE:
            names.append(f"{k}:{proto}.{what}")
            x0.append(math.log(float(base.protocol_tuning(k, proto).get(what, 1.0))))
    x0 = np.array(x0)
    meas = np.log(np.array([r[2] for r in rows], dtype=float))
    groups: dict[tuple[str, int], int] = {}
    for t, s, _ in rows:
        key = (t.source, _size_class(s))
        groups[key] = groups.get(key, 0) + 1
    weight = np.array([1.0 / groups[(t.source, _size_class(s))] for t, s, _ in rows])
    weight /= weight.sum()
    fitted_by = f"fitted on {where}"

    def build(x: np.ndarray) -> Platform:
        v = dict(zip(names, np.exp(x), strict=True))
        kw: dict = {"base_latency_s": float(v["base"]), "base_latency_source": fitted_by}
        if single:
            kw["launch_s"] = float(v["launch"])
        if fit_intra:
            kw["intra_by_devices"] = {k: float(v[f"bw{k}"]) for k in counts}
            top = max(counts)
            lat = float(v["intra_lat"]) if fit_step else base.intra.latency_s
            kw["intra"] = Link(float(v[f"bw{top}"]), lat, fitted_by)  # sources: _sources
        if multi:
            kw["network"] = Link(float(v["net_bw"]), float(v["net_lat"]), fitted_by)
            kw["nics_per_node"] = base.nics_per_node or dpn
        per: dict = {}
        for k in counts:
            for proto, what in _TUNABLE:
                per.setdefault(k, {}).setdefault(proto, {"base_latency": 1.0, "bandwidth": 1.0})[
                    what
                ] = float(v[f"{k}:{proto}.{what}"])
        kw["protocols_by_devices"] = per
        return replace(base, **kw)

    classes = np.array([_size_class(s) for _, s, _ in rows])
    tunables = np.array([":" in n for n in names])

    def loss(x: np.ndarray, only: np.ndarray | None = None) -> float:
        if np.any(np.abs(x - x0) > 12):
            return 1e9
        p = build(x)
        use = range(len(rows)) if only is None else np.flatnonzero(only)
        err = 0.0
        for i in use:
            t, s, _ = rows[i]
            pred = nccl_collective_s(
                t.op, s, t.ranks, p, t.ranks_per_node, devices_per_process=t.devices_per_process
            ).seconds
            err += weight[i] * (math.log(pred) - meas[i]) ** 2
        # A protocol the rows never see choose would drift where it does not matter here but
        # does at another count: a slight pull towards NCCL's own constants.
        return err + _PULL * float(np.sum((x[tunables] - x0[tunables]) ** 2))

    # In stages, each on the rows that decide it: the latencies on the sizes that are latency
    # alone, the bandwidths on the bandwidth-bound ones, the protocol corrections on the rest.
    # (A joint search from there trades the latency rows for the middle ones.)
    x = x0.copy()
    tiny = np.array([s <= _PURE_LATENCY_BYTES for _, s, _ in rows])
    per_node = np.array([t.ranks_per_node for t, _, _ in rows])
    stages = [
        (("base", "launch", "intra_lat", "net_lat"), tiny),
        (tuple(n for n in names if n.startswith("bw")) + ("net_bw",), classes == 2),
    ] + [
        (tuple(f"{k}:{p}.{w}" for p, w in _TUNABLE), ~tiny & (classes < 2) & (per_node == k))
        for k in counts
    ]
    # A figure no row informs keeps the base platform's value (and its source).
    multi_row = np.array([t.nodes > 1 for t, _, _ in rows])
    informs = {
        "launch": tiny & np.array([t.devices_per_process > 1 for t, _, _ in rows]),
        "intra_lat": tiny & (per_node > 1),
        "net_lat": tiny & multi_row,
        "net_bw": (classes == 2) & multi_row,
    }
    informs.update({f"bw{k}": (classes == 2) & (per_node == k) for k in counts})
    done: set[str] = set()
    for wanted, only in stages:
        idx = [
            i for i, n in enumerate(names) if n in wanted and (only & informs.get(n, only)).any()
        ]
        if not idx:
            continue
        done.update(names[i] for i in idx)

        def sub(y: np.ndarray, idx=idx, only=only) -> float:
            z = x.copy()
            z[idx] = y
            return loss(z, only)

        # Several starts (the latencies trade off against each other: local minima).
        starts = [x[idx]] + [x[idx] + d for d in (-1.5, 1.0) if len(idx) > 1]
        best = min((_nelder_mead(sub, y, iters=400) for y in starts), key=sub)
        x[idx] = best
    fitted = _sources(build(x), base, done, fitted_by)
    rms = math.sqrt(loss(x))
    notes = list(base.notes) + [
        f"fitted on {len(rows)} rows of {where}: weighted RMS error "
        f"{100 * (math.exp(rms) - 1):.1f} % (log scale)"
    ]
    if single:
        notes.append(
            f"logs run with one thread driving several devices (-g N): {fitted.launch_s * 1e6:.3g}"
            " us per extra device's kernel launch fitted, not part of a job's collectives"
        )
    if fit_intra and not fit_step:
        notes.append(
            "every one-node log drives all devices from one thread: the intra-node step latency "
            f"cannot be told from the launches, kept from {base.name} ({base.intra.source})"
        )
    if not fit_intra:
        notes.append(
            f"no one-node log: intra-node link kept from {base.name} ({base.intra.source})"
        )
    if not multi and fitted.network is not None:
        notes.append(f"no multi-node log: network kept from {base.name} ({fitted.network.source})")
    return replace(
        fitted,
        name=name or base.name,
        description=(base.description or "") + f"; {fitted_by}",
        notes=tuple(notes),
    )


def _sources(p: Platform, base: Platform, done: set[str], fitted_by: str) -> Platform:
    """Say, per figure, whether it was fitted or kept from the base platform."""

    def what(bw: bool, lat: bool, kept: Link | None) -> str:
        if bw and lat:
            return fitted_by
        keep = kept.source if kept is not None else "assumed starting point"
        if bw:
            return f"bandwidth {fitted_by}; latency kept: {keep}"
        if lat:
            return f"latency {fitted_by}; bandwidth kept: {keep}"
        return keep

    kw: dict = {}
    if p.intra is not base.intra:
        bw = any(n.startswith("bw") for n in done)
        kw["intra"] = replace(p.intra, source=what(bw, "intra_lat" in done, base.intra))
    if p.network is not None and p.network is not base.network:
        kw["network"] = replace(
            p.network, source=what("net_bw" in done, "net_lat" in done, base.network)
        )
    if "base" not in done:
        kw["base_latency_source"] = base.base_latency_source
    return replace(p, **kw)
