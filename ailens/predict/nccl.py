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

``fit_platform`` (``nccl_fit.py``) fits the latencies (base, intra step, network step), the
intra-node bus bandwidth at each measured device count and the NIC bandwidth to nccl-tests
rows by least squares on log time (Nelder-Mead), starting from the base platform's values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .collectives import canonical_op
from .platforms import (
    NCCL_BASE_S,
    NCCL_NET_STEP_S,
    NCCL_NVLINK_STEP_S,
    NCCL_PCI_STEP_S,
    Platform,
    relayed_ring_links,
    ring_links,
)

__all__ = [
    "BUSBW_FACTOR",
    "SATURATION_MIN_BYTES",
    "CollectiveEstimate",
    "busbw_factor",
    "latency_growth_beyond_measured",
    "nccl_collective_s",
]

ALGORITHMS = ("ring", "tree")
# Messages from this size up run at the link's saturated bus bandwidth (on A100 and V100
# nodes nccl-tests reaches > 80 % of its peak at 64 MiB): beyond the largest device count
# measured, the measured bus bandwidth there is the estimate (Platform.busbw_by_devices).
SATURATION_MIN_BYTES = 64 << 20
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
    kind, nbytes, notes = _kind(op, nbytes)
    if n == 1:
        return CollectiveEstimate(0.0, "none", "none", 0.0, 0.0, "none", 1, 1, 1, tuple(notes))
    path = _path(platform, n, ppn, nodes, notes)
    t, a, p = _fastest(op, kind, nbytes, n, ppn, nodes, platform, path, algorithm, protocol)
    ceiling, bottleneck = path.ceiling, path.bottleneck
    if algorithm is None and protocol is None:
        t = _saturated(kind, nbytes, n, ppn, nodes, platform, ceiling, notes, t)
    if devices_per_process > 1 and platform.launch_s > 0:
        t += (devices_per_process - 1) * platform.launch_s
        notes.append(
            f"one thread drives {devices_per_process} devices: "
            f"{devices_per_process - 1} more kernel launches of {platform.launch_s * 1e6:.3g} us"
        )
    bus_now = _wire_bytes(kind, nbytes, n) / t * busbw_factor(kind, n) if t > 0 else 0.0
    if path.relayed:
        notes.append(
            f"no ring over the first {ppn} devices closes over direct NVLinks: hops relayed "
            "over NVLink through a third device (NCCL's NVB paths), PCI-class latency"
        )
    if path.ring_over_host:
        notes.append(
            f"no ring over the first {ppn} devices closes over NVLink: at the host path's speed"
        )
    grow = latency_growth_beyond_measured(platform, nodes) if nodes > 1 else 1.0
    if grow > 1.0:
        notes.append(
            f"{nodes} nodes, beyond the {max(platform.network_nodes, 2)} the network latency "
            "was measured or assumed at: NCCL's growth (a tree level per doubling); up to "
            f"x{grow:.3g} per network step if it grows with every node (interval)"
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


def latency_growth_beyond_measured(platform: Platform, nodes: int) -> float:
    """How much slower than NCCL's model the network's per-step latency may be at ``nodes``
    nodes, beyond the most nodes its figures were measured at (1.0 up to there): NCCL's tree
    adds a network level per doubling of the nodes (log2), the high end lets it grow with
    every node as a chain or a ring does, from the measured count (or 2 nodes for a
    datasheet network). The range of the step's interval, not a point estimate."""
    base = max(int(platform.network_nodes), 2)
    n = int(nodes)
    if n <= base:
        return 1.0

    def per_level(m: int) -> float:
        return (m - 1) / math.log2(m)

    return per_level(n) / per_level(base)


def _saturated(kind, nbytes, n, ppn, nodes, platform, ceiling, notes, t) -> float:
    """A large message on one node with more devices than any measured: the bus bandwidth
    measured at the largest count (saturated), times the ratio of the NVLink rings the two
    device sets can close on an uneven mesh; ``t`` (the model's) otherwise."""
    measured = platform.busbw_by_devices
    size = _wire_bytes(kind, nbytes, n)
    if nodes > 1 or not measured or size < SATURATION_MIN_BYTES or ppn <= max(measured):
        return t
    top = max(measured)
    bus, why = float(measured[top]), f"as measured at {top} devices"
    if platform.nvlinks and ppn <= len(platform.nvlinks):
        here = relayed_ring_links(platform.nvlinks, ppn)
        there = relayed_ring_links(platform.nvlinks, top)
        if here > 0 and there > 0:
            bus *= here / there
            why += f" x {here:g}/{there:g} NVLink rings"
    bus = min(bus, ceiling)
    f = busbw_factor(kind, n)
    if not (bus > 0 and f > 0):
        return t
    notes.append(
        f"{ppn} devices, more than any measured: saturated bus bandwidth "
        f"{bus / 1e9:.3g} GB/s ({why})"
    )
    return size * f / bus


def _kind(op: str, nbytes: float) -> tuple[str, float, list[str]]:
    """The NCCL collective that costs ``op`` (and its bytes), and what that assumed."""
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
    return kind, nbytes, notes


@dataclass(frozen=True, kw_only=True)
class _Path:
    """What the ranks' collectives cross: the intra-node hardware NCCL models (``nvlink`` or
    ``pcie``), whether the ring goes over the host, the bottleneck's bus bandwidth and name,
    and the platform's latencies over NCCL's (base, intra-node step, network step)."""

    hw_intra: str
    relayed: bool
    ring_over_host: bool
    ceiling: float
    bottleneck: str
    s_base: float
    s_intra: float
    s_net: float
    net_overhead: float


def _path(platform: Platform, n: int, ppn: int, nodes: int, notes: list[str]) -> _Path:
    """The links of ``n`` ranks, ``ppn`` per node (notes: what crossing nodes assumed)."""
    # The bottleneck link's bus bandwidth.
    b_intra, intra_src = platform.intra_bandwidth(ppn)
    hw_intra = "pcie" if platform.intra_kind == "pcie" else "nvlink"
    # No ring over direct NVLinks: NCCL relays hops through a third device over NVLink
    # (PATH_NVB; its latency class is PCI's, LL128 stays on), else crosses the host.
    no_direct_ring = bool(
        platform.nvlinks
        and 1 < ppn <= len(platform.nvlinks)
        and ppn not in platform.intra_by_devices
        and ring_links(platform.nvlinks, ppn) == 0
    )
    relayed = no_direct_ring and relayed_ring_links(platform.nvlinks, ppn) > 0
    ring_over_host = no_direct_ring and not relayed and platform.host is not None
    if no_direct_ring:
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
    return _Path(
        hw_intra=hw_intra,
        relayed=relayed,
        ring_over_host=ring_over_host,
        ceiling=ceiling,
        bottleneck=bottleneck,
        s_base=s_base,
        s_intra=s_intra,
        s_net=s_net,
        net_overhead=platform.net_overhead_s,
    )


# Bus bandwidth of each algorithm and protocol as a fraction of the bottleneck link's, as
# NCCL's tuning model keeps them: (algorithm, protocol) -> (on one node, across nodes).
_BUS_FACTOR = {
    ("ring", "LL"): (1 / 3, 1 / 4),  # all-reduce and reduce: 1/4 on one node too
    ("ring", "LL128"): (0.92, 0.92),  # 0.7 with one device per node
    ("ring", "Simple"): (1.0, 1.0),
    ("tree", "LL"): (0.9 / 3.8, 0.9 / 3.8),
    ("tree", "LL128"): (0.9 * 7 / 9, 0.9 * 0.915),
    ("tree", "Simple"): (0.9, 0.9),
}
_RING_LL_REDUCING = 1 / 4  # ring LL of all-reduce and reduce, on any number of nodes
_RING_LL128_ONE_PER_NODE = 0.7  # ring LL128 with one device per node


def _bus_factor(a: str, p: str, kind: str, ppn: int, nodes: int) -> float:
    """The table's factor of one algorithm and protocol here."""
    if a == "ring" and p == "LL" and kind in ("allreduce", "reduce"):
        return _RING_LL_REDUCING
    if a == "ring" and p == "LL128" and ppn < 2:
        return _RING_LL128_ONE_PER_NODE
    return _BUS_FACTOR[(a, p)][nodes > 1]


def _latency(a, p, pi, kind, n, nodes, ppn, size, path, tune) -> float:
    """NCCL's latency model of one algorithm and protocol, at the platform's latencies."""
    nsteps, inter = _steps(kind, n, nodes)
    intra_lat = _HW_US[path.hw_intra][a][pi] * path.s_intra * 1e-6
    if nodes > 1 and p == "LL":
        intra_lat *= 1.8  # as NCCL models LL across nodes
    net_lat = _HW_US["net"][a][pi] * path.s_net * 1e-6
    lat = _BASE_US[a][pi] * path.s_base * 1e-6 * float(tune.get("base_latency", 1.0))
    if a == "tree":
        return lat + 2 * ((ppn - 1) * intra_lat + math.log2(nodes) * net_lat)
    if kind in ("broadcast", "reduce"):
        return lat + nsteps * (net_lat if nodes > 1 else intra_lat)
    if nodes > 1:  # every step of a ring across nodes pays the network post (x3 Simple)
        intra_lat = max(intra_lat, path.net_overhead * (3 if p == "Simple" else 1))
    lat += (nsteps - inter) * intra_lat + inter * net_lat
    if p == "Simple" and nodes > 1 and kind == "allreduce" and size >= n / 16 * 65536:
        lat *= 1.9  # NCCL's "plateau effect of ring" across nodes
    return lat


def _fastest(op, kind, nbytes, n, ppn, nodes, platform, path, algorithm, protocol):
    """(seconds, algorithm, protocol) of NCCL's choice: the least modelled time."""
    ceiling = path.ceiling
    nsteps, _ = _steps(kind, n, nodes)
    size = _wire_bytes(kind, nbytes, n)
    best = None
    algos = ALGORITHMS if kind == "allreduce" else ("ring",)
    for a in algos:
        if algorithm and a != algorithm.lower():
            continue
        for pi, p in enumerate(PROTOCOLS):
            if protocol and p.lower() != protocol.lower():
                continue
            if p == "LL128" and path.hw_intra != "nvlink" and not path.relayed:
                continue  # NCCL enables LL128 by default over NVLink only
            tune = platform.protocol_tuning(ppn, p)
            bus = ceiling * _bus_factor(a, p, kind, ppn, nodes)
            bus = min(bus * float(tune.get("bandwidth", 1.0)), ceiling)
            algbw = bus * (n / nsteps if a == "ring" else 0.5)
            if a == "tree":
                log_size = int(math.log2(max(size, 64) / 64))
                if log_size < 22:
                    algbw *= _TREE_CORRECTION[p][log_size]
            lat = _latency(a, p, pi, kind, n, nodes, ppn, size, path, tune)
            t = lat + size / algbw if math.isfinite(algbw) and algbw > 0 else math.inf
            if best is None or t < best[0]:
                best = (t, a, p)
    if best is None:
        raise ValueError(
            f"no NCCL algorithm/protocol for {op} with algorithm={algorithm!r}, "
            f"protocol={protocol!r} on {platform.name}"
        )
    return best
