"""Platforms as data: a node's shape and links, and where every number came from.

A ``Platform`` says how many devices a node has, the intra-node link (NVLink, NVSwitch,
PCIe), the network (one NIC's bandwidth and latency, and how many NICs a node has) and the
software latency of one collective. It comes from:

* ``DEFAULT_PLATFORMS``: labelled defaults for common nodes (vendor datasheet values,
  latencies from NCCL's own tuning model), ``load_platform("dgx-a100")``;
* a JSON file (``platform_to_dict`` / ``platform_from_dict``, schema ``version`` 1),
  ``load_platform("PLATFORM.json")``, written by ``ailens calibrate --from-nccl-tests``;
* ``nccl_tests.platform_from_nccl_tests(text)``: the standard nccl-tests ``all_reduce_perf``
  table a user already has, fitted with the NCCL cost model (``nccl_fit.py``).

Units: bandwidths in bytes/s (10^9 B/s = 1 GB/s as nccl-tests prints), latencies in seconds.
``intra.bandwidth_Bps`` is the bus bandwidth one device's intra-node links sustain (one
direction, all of its links together); ``network.bandwidth_Bps`` is ONE NIC's bandwidth, the
node's injection bandwidth is ``nics_per_node`` times that. ``intra.latency_s`` and
``network.latency_s`` are the latency of one ring step over that link (NCCL's low-latency
protocol; the other protocols are scaled by NCCL's ratios).
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import permutations, product
from pathlib import Path
from typing import Any

from .._io import read_json_file

__all__ = [
    "DEFAULT_PLATFORMS",
    "PLATFORM_VERSION",
    "Link",
    "Platform",
    "load_platform",
    "platform_labels",
    "platform_from_dict",
    "platform_to_dict",
    "relayed_ring_links",
    "ring_links",
]

PLATFORM_VERSION = 1
GB = 1e9
_US = 1e-6
# NCCL's own default latencies (src/graph/tuning.cc, hwLat and baseLat, ring / LL): what a
# platform assumes until a calibration measured them.
NCCL_NVLINK_STEP_S = 0.47 * _US
NCCL_PCI_STEP_S = 1.0 * _US
NCCL_NET_STEP_S = 2.7 * _US
NCCL_BASE_S = 6.6 * _US
# NCCL's network post overhead (getNetOverhead in src/graph/tuning.cc): a ring that spans
# nodes pays at least this on every step, intra-node ones too (x3 with Simple); 1 us on Intel
# and other hosts, 2 us on AMD x86 hosts.
NCCL_NET_OVERHEAD_S = 1.0 * _US
NCCL_NET_OVERHEAD_AMD_S = 2.0 * _US
_NCCL_LAT = "NCCL's default latency model (src/graph/tuning.cc hwLat/baseLat, ring LL)"


@dataclass(frozen=True)
class Link:
    """One kind of link: bus bandwidth (bytes/s), latency of one ring step (s), and where
    the two numbers came from ("vendor datasheet value ...", "fitted on <file>")."""

    bandwidth_Bps: float
    latency_s: float
    source: str = ""

    def __post_init__(self) -> None:
        if not (self.bandwidth_Bps > 0 and math.isfinite(self.bandwidth_Bps)):
            raise ValueError(f"link bandwidth must be > 0 bytes/s, got {self.bandwidth_Bps!r}")
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise ValueError(f"link latency must be >= 0 s, got {self.latency_s!r}")


@dataclass(frozen=True)
class Platform:
    """A node type and its links (see the module docstring for units).

    ``intra_by_devices``: measured (or topology-derived) intra-node bus bandwidth when only
    ``k`` devices of a node take part, for nodes whose links are uneven (DGX-1's hybrid cube
    mesh) or where fewer devices reach less (keys: device counts). ``nvlinks``: links between
    device pairs (symmetric matrix), from which ``ring_links`` derives what a ring over the
    first ``k`` devices can use when ``intra_by_devices`` has no entry. ``host``: the path a
    ring takes where the intra-node links cannot close it (PCIe / CPU interconnect).
    """

    name: str
    devices_per_node: int
    intra: Link
    network: Link | None = None
    nics_per_node: int = 0
    base_latency_s: float = NCCL_BASE_S
    base_latency_source: str = _NCCL_LAT
    intra_kind: str = "nvlink"  # "nvlink" | "nvswitch" | "pcie": NCCL's latency class
    intra_by_devices: dict = field(default_factory=dict)  # {k: bus bandwidth B/s}
    nvlinks: tuple = ()  # ((links between device i and j) ...), devices_per_node square
    host: Link | None = None
    # Fitted corrections to NCCL's protocol constants: {"LL128": {"base_latency": x,
    # "bandwidth": y}, ...} multiply its per-protocol base latency and bandwidth factor.
    protocols: dict = field(default_factory=dict)
    # The same, fitted per number of devices per node ({k: {protocol: {...}}}); between the
    # measured counts log interpolated, outside them the nearest count's (``_by_devices``).
    protocols_by_devices: dict = field(default_factory=dict)
    # nccl-tests -g N drives N devices from one thread: every call pays the launch of N
    # kernels one after the other. Fitted when a log was run so; a job with one process per
    # device does not pay it.
    launch_s: float = 0.0
    # NCCL's network post overhead on this node's host CPU (NCCL_NET_OVERHEAD_S): the floor
    # of every step of a ring that spans nodes, so its latency grows with all the ranks.
    net_overhead_s: float = NCCL_NET_OVERHEAD_S
    # The most nodes an nccl-tests log behind the network's figures spanned (0: none, a
    # datasheet network): beyond it the network latency's growth with the nodes is NCCL's
    # model, with a range (nccl.latency_growth_beyond_measured).
    network_nodes: int = 0
    # Saturation: the bus bandwidth (B/s) nccl-tests measured at its largest message (in the
    # bandwidth band, SATURATION_MIN_BYTES and up) when k devices of one node took part
    # ({k: B/s}). Beyond the largest such k, large messages are priced at it (nccl.py).
    busbw_by_devices: dict = field(default_factory=dict)
    # The device and its peak dense throughput per precision ({"fp32": TFLOP/s, "tf32": ...,
    # "fp16": ...}, vendor datasheets): the far end of a device-speed interval when a job
    # measured elsewhere is predicted here ("same speed" is the other end).
    device: str = ""
    peak_tflops: dict = field(default_factory=dict)
    description: str = ""
    notes: tuple = ()

    def __post_init__(self) -> None:
        if self.devices_per_node < 1:
            raise ValueError(f"platform {self.name!r}: devices_per_node must be >= 1")
        if self.nvlinks and (
            len(self.nvlinks) != self.devices_per_node
            or any(len(r) != self.devices_per_node for r in self.nvlinks)
        ):
            raise ValueError(
                f"platform {self.name!r}: nvlinks must be a {self.devices_per_node} x "
                f"{self.devices_per_node} matrix (links between device pairs)"
            )
        if not (self.net_overhead_s >= 0 and math.isfinite(self.net_overhead_s)):
            raise ValueError(f"platform {self.name!r}: net_overhead_s must be >= 0 s")
        if self.network is not None and self.nics_per_node < 1:
            raise ValueError(f"platform {self.name!r}: a network needs nics_per_node >= 1")

    def intra_bandwidth(self, k: int) -> tuple[float, str]:
        """Intra-node bus bandwidth (B/s) when ``k`` devices of a node take part, and where
        it came from."""
        k = max(int(k), 1)
        table = {int(a): float(b) for a, b in self.intra_by_devices.items()}
        if k in table:
            return table[k], f"{self.intra.source} (measured at {k} devices per node)"
        if self.nvlinks and k <= len(self.nvlinks):
            got = ring_links(self.nvlinks, k)
            relay = ""
            if got == 0 and k > 2:
                got = relayed_ring_links(self.nvlinks, k)
                relay = " (no ring closes over direct NVLinks: hops relayed through a third device)"
            if got > 0:
                # Bandwidth per usable link: from the nearest measured count, else the full node.
                refs = {a: ring_links(self.nvlinks, a) for a in table if a <= len(self.nvlinks)}
                refs = {a: n for a, n in refs.items() if n > 0}
                if refs:
                    m = min(refs, key=lambda a: (abs(math.log(a / k)), -a))
                    bw, what = table[m] * got / refs[m], f"measured at {m} devices"
                    ref_links = refs[m]
                else:  # intra.bandwidth_Bps is all of one device's links
                    ref_links = float(max(sum(r) for r in self.nvlinks))
                    bw, what = self.intra.bandwidth_Bps * got / ref_links, "one device's links"
                return bw, (
                    f"{self.intra.source}; {got:g} links per device for rings over the first "
                    f"{k} devices{relay}, {ref_links:g} at {what}"
                )
            if self.host is not None:
                return self.host.bandwidth_Bps, (
                    f"{self.host.source} (no ring over the first {k} devices closes over "
                    "NVLink: it crosses the host path)"
                )
        if table:
            bw, how = _by_devices(table, k, extrapolate=True)
            return bw, f"{self.intra.source} ({how})"
        return self.intra.bandwidth_Bps, self.intra.source

    def protocol_tuning(self, k: int, protocol: str) -> dict:
        """Fitted corrections of one NCCL protocol at ``k`` devices per node
        ({"base_latency": x, "bandwidth": y}; empty: NCCL's own constants)."""
        per = {int(a): v[protocol] for a, v in self.protocols_by_devices.items() if protocol in v}
        if not per:
            return dict(self.protocols.get(protocol) or {})
        keys = sorted({w for v in per.values() for w in v})
        return {
            w: _by_devices({a: float(v.get(w, 1.0)) for a, v in per.items()}, k)[0] for w in keys
        }


def _by_devices(table: dict, k: int, *, extrapolate: bool = False) -> tuple[float, str]:
    """A per-device-count figure at ``k``: measured, log-log interpolated between the nearest
    measured counts, and outside them the nearest count's; with ``extrapolate`` the log-log
    line through the two nearest measured counts continued by at most their own span
    (``_extrapolated``), except at one device per node (no intra-node hop to follow)."""
    k = max(int(k), 1)
    if k in table:
        return float(table[k]), f"measured at {k} devices per node"
    lower = [a for a in table if a < k]
    upper = [a for a in table if a > k]
    if lower and upper:
        lo, hi = max(lower), min(upper)
        v = _log_line(table, lo, hi, k)
        return v, f"interpolated between {lo} and {hi} devices per node"
    side = sorted(lower)[-2:] if lower else sorted(upper)[:2]
    if extrapolate and len(side) == 2 and k >= 2:
        return _extrapolated(table, side[0], side[1], k)
    near = max(lower) if lower else min(upper)
    return float(table[near]), f"as measured at {near} devices per node"


def _extrapolated(table: dict, a: int, b: int, k: int) -> tuple[float, str]:
    """The log-log line through the figures at ``a`` < ``b`` devices, at ``k`` outside them.
    For the intra-node bus bandwidth: it grows with the devices on a ring in every public
    table alike (A100 NVSwitch 186 -> 213 -> 226 and 195 -> 221 -> 235 GB/s at 2 -> 4 -> 8
    GPUs), so the nearest count's figure is biased beyond it. (The fitted protocol
    corrections follow no such common trend and are not extrapolated.) Continued by at most
    the measured span (k from a^2/b to b^2/a), held there beyond it: a trend is not carried
    further than it was seen."""
    v = _log_line(table, a, b, k, w_min=-1.0, w_max=2.0)
    return v, f"extrapolated in log devices from {a} and {b} devices per node"


def _log_line(table: dict, a: int, b: int, k: int, w_min: float = 0.0, w_max: float = 1.0) -> float:
    """The figure at ``k`` on the log-log line through ``table[a]`` and ``table[b]``, its
    position ``w`` (0 at ``a``, 1 at ``b``) held within ``w_min`` .. ``w_max``."""
    w = (math.log(k) - math.log(a)) / (math.log(b) - math.log(a))
    w = min(max(w, w_min), w_max)
    return math.exp((1 - w) * math.log(table[a]) + w * math.log(table[b]))


@lru_cache(maxsize=64)
def ring_links(nvlinks: tuple, k: int) -> float:
    """Links per device that rings over the first ``k`` devices can use at once: the most
    directed Hamiltonian cycles (rings) that fit in the link capacities, each taking one link
    direction per hop, the way NCCL's search adds rings while capacity is left. 0 when no
    ring closes over these links."""
    k = int(k)
    if k < 2:
        return 0.0
    cap = {
        (i, j): int(nvlinks[i][j]) for i in range(k) for j in range(k) if i != j and nvlinks[i][j]
    }
    if k == 2:
        return float(min(cap.get((0, 1), 0), cap.get((1, 0), 0)))
    cycles = []
    for perm in permutations(range(1, k)):
        edges = [((0, *perm)[i], (0, *perm)[(i + 1) % k]) for i in range(k)]
        if all(e in cap for e in edges):
            cycles.append(tuple((e, 1) for e in edges))
    return _most_rings(cap, cycles, k)


def _most_rings(cap: dict, rings: list, k: int) -> float:
    """The most of ``rings`` (each a tuple of (link direction, uses)) that fit at once in the
    link capacities ``cap`` over ``k`` devices, found by a bounded depth-first search."""
    bound = min(sum(c for (i, _), c in cap.items() if i == v) for v in range(k))
    best = 0

    def search(start: int, count: int) -> bool:
        nonlocal best
        best = max(best, count)
        if best >= bound:
            return True
        for ri in range(start, len(rings)):
            ring = rings[ri]
            if all(cap[e] >= m for e, m in ring):
                for e, m in ring:
                    cap[e] -= m
                done = search(ri, count + 1)
                for e, m in ring:
                    cap[e] += m
                if done:
                    return True
        return False

    search(0, 0)
    return float(best)


_MAX_RELAYED_RINGS = 20000  # bounds the search on a large sparse mesh (a lower count then)


@lru_cache(maxsize=64)
def relayed_ring_links(nvlinks: tuple, k: int) -> float:
    """Links per device that rings over the first ``k`` devices can use at once when a hop
    between two devices with no NVLink of their own goes over NVLink through a third device
    of the set (NCCL's PATH_NVB paths, tried before PCIe when no ring closes over direct
    NVLinks): each such hop takes one link direction on both of its legs. 0 when no ring
    closes even so (the ring then crosses the host path)."""
    k = int(k)
    direct = ring_links(nvlinks, k)
    if k < 3 or direct > 0:  # NCCL relaxes the path type only when no ring closes
        return direct
    cap = {
        (i, j): int(nvlinks[i][j]) for i in range(k) for j in range(k) if i != j and nvlinks[i][j]
    }

    def routes(a: int, b: int) -> list[tuple]:
        if (a, b) in cap:  # NCCL takes the direct link where there is one
            return [((a, b),)]
        return [((a, c), (c, b)) for c in range(k) if (a, c) in cap and (c, b) in cap]

    rings: set = set()
    for perm in permutations(range(1, k)):
        order = (0, *perm)
        hops = [routes(order[i], order[(i + 1) % k]) for i in range(k)]
        if all(hops):
            for choice in product(*hops):
                rings.add(tuple(sorted(Counter(e for r in choice for e in r).items())))
                if len(rings) >= _MAX_RELAYED_RINGS:
                    break
    return _most_rings(cap, sorted(rings), k)


# --------------------------------------------------------------------------- defaults

_DGX1V_NVLINKS = (
    (0, 1, 1, 2, 2, 0, 0, 0),
    (1, 0, 2, 1, 0, 2, 0, 0),
    (1, 2, 0, 2, 0, 0, 1, 0),
    (2, 1, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 1, 1, 2),
    (0, 2, 0, 0, 1, 0, 2, 1),
    (0, 0, 1, 0, 1, 2, 0, 2),
    (0, 0, 0, 1, 2, 1, 2, 0),
)


def _ds(what: str) -> str:
    return f"vendor datasheet value: {what}"


DEFAULT_PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in (
        Platform(
            name="dgx1-v100",
            devices_per_node=8,
            intra=Link(
                6 * 25 * GB,
                NCCL_NVLINK_STEP_S,
                _ds("NVLink 2, 6 links x 25 GB/s per direction per V100 (NVIDIA DGX-1 V100)")
                + f"; latency: {_NCCL_LAT}",
            ),
            network=Link(
                12.5 * GB,
                NCCL_NET_STEP_S,
                _ds("EDR InfiniBand 100 Gb/s per NIC") + f"; latency: {_NCCL_LAT}",
            ),
            nics_per_node=4,
            intra_kind="nvlink",
            nvlinks=_DGX1V_NVLINKS,
            host=Link(
                10 * GB,
                NCCL_PCI_STEP_S,
                "assumed: PCIe gen3 x16 / CPU interconnect path, ~10 GB/s (not measured)",
            ),
            device="V100 SXM2 (vendor datasheet: 15.7 TFLOP/s FP32, 125 FP16 tensor)",
            peak_tflops={"fp32": 15.7, "tf32": 15.7, "fp16": 125.0},
            description="NVIDIA DGX-1 with 8 x V100: NVLink hybrid cube mesh, 4 x 100 Gb/s IB",
            notes=(
                "NVLink pairs of the hybrid cube mesh (NV1/NV2) as `nvidia-smi topo -m` prints "
                "them in pytorch/pytorch:benchmarks/distributed/ddp/README.md@bf69c14 (a DGX-1 "
                "with 8 x V100); check yours with nvidia-smi topo -m",
            ),
        ),
        Platform(
            name="dgx2-v100",
            devices_per_node=16,
            intra=Link(
                6 * 25 * GB,
                NCCL_NVLINK_STEP_S,
                _ds("NVSwitch, 6 NVLink 2 links x 25 GB/s per direction per V100 (DGX-2)")
                + f"; latency: {_NCCL_LAT}",
            ),
            network=Link(
                12.5 * GB,
                NCCL_NET_STEP_S,
                _ds("EDR InfiniBand 100 Gb/s per NIC") + f"; latency: {_NCCL_LAT}",
            ),
            nics_per_node=8,
            intra_kind="nvswitch",
            device="V100 SXM3 (vendor datasheet: 15.7 TFLOP/s FP32, 125 FP16 tensor)",
            peak_tflops={"fp32": 15.7, "tf32": 15.7, "fp16": 125.0},
            description="NVIDIA DGX-2 with 16 x V100: NVSwitch, 8 x 100 Gb/s IB",
        ),
        Platform(
            name="dgx-a100",
            devices_per_node=8,
            intra=Link(
                12 * 25 * GB,
                NCCL_NVLINK_STEP_S,
                _ds("NVLink 3 via NVSwitch, 12 links x 25 GB/s per direction per A100")
                + f"; latency: {_NCCL_LAT}",
            ),
            network=Link(
                25 * GB,
                NCCL_NET_STEP_S,
                _ds("HDR InfiniBand 200 Gb/s per NIC") + f"; latency: {_NCCL_LAT}",
            ),
            nics_per_node=8,
            intra_kind="nvswitch",
            net_overhead_s=NCCL_NET_OVERHEAD_AMD_S,  # host: 2 x AMD EPYC 7742 (DGX A100)
            device="A100 SXM4 (vendor datasheet: 19.5 TFLOP/s FP32, 156 TF32, 312 FP16 dense)",
            peak_tflops={"fp32": 19.5, "tf32": 156.0, "fp16": 312.0},
            description="NVIDIA DGX A100 / Azure ND A100 v4: 8 x A100 on NVSwitch, 8 x 200 Gb/s",
        ),
        Platform(
            name="dgx-h100",
            devices_per_node=8,
            intra=Link(
                18 * 25 * GB,
                NCCL_NVLINK_STEP_S,
                _ds("NVLink 4 via NVSwitch, 18 links x 25 GB/s per direction per H100")
                + f"; latency: {_NCCL_LAT}",
            ),
            network=Link(
                50 * GB,
                NCCL_NET_STEP_S,
                _ds("NDR InfiniBand 400 Gb/s per NIC") + f"; latency: {_NCCL_LAT}",
            ),
            nics_per_node=8,
            intra_kind="nvswitch",
            device="H100 SXM5 (vendor datasheet: 67 TFLOP/s FP32, 495 TF32, 990 FP16 dense)",
            peak_tflops={"fp32": 67.0, "tf32": 494.7, "fp16": 989.4},
            description="NVIDIA DGX H100: 8 x H100 on NVSwitch, 8 x 400 Gb/s",
        ),
        Platform(
            name="pcie-node",
            devices_per_node=8,
            intra=Link(
                16 * GB,
                NCCL_PCI_STEP_S,
                _ds("PCIe gen3 x16, ~16 GB/s per direction")
                + f"; latency: {_NCCL_LAT} (PCI class)",
            ),
            network=Link(
                12.5 * GB,
                NCCL_NET_STEP_S,
                _ds("100 Gb/s NIC") + f"; latency: {_NCCL_LAT}",
            ),
            nics_per_node=1,
            intra_kind="pcie",
            description="8 GPUs on PCIe gen3 x16 (no NVLink), one 100 Gb/s NIC",
        ),
    )
}
# The same node under the names people use for it.
DEFAULT_PLATFORMS["azure-nd-a100-v4"] = replace(
    DEFAULT_PLATFORMS["dgx-a100"],
    name="azure-nd-a100-v4",
    description="Azure ND A100 v4: 8 x A100 40 GB on NVSwitch, one 200 Gb/s HDR NIC per GPU",
    net_overhead_s=NCCL_NET_OVERHEAD_AMD_S,  # host: 2 x AMD EPYC 7V12
)
DEFAULT_PLATFORMS["ndv4"] = replace(DEFAULT_PLATFORMS["azure-nd-a100-v4"], name="ndv4")
DEFAULT_PLATFORMS["dgx1"] = replace(DEFAULT_PLATFORMS["dgx1-v100"], name="dgx1")
DEFAULT_PLATFORMS["dgx2"] = replace(DEFAULT_PLATFORMS["dgx2-v100"], name="dgx2")


# --------------------------------------------------------------------------- JSON


def _link_dict(link: Link | None) -> dict | None:
    if link is None:
        return None
    return {
        "bandwidth_Bps": link.bandwidth_Bps,
        "latency_s": link.latency_s,
        "source": link.source,
    }


def platform_to_dict(p: Platform) -> dict:
    """The platform as a JSON document (schema ``version`` 1)."""
    return {
        "version": PLATFORM_VERSION,
        "kind": "ailens.platform",
        "name": p.name,
        "description": p.description,
        "devices_per_node": p.devices_per_node,
        "intra_kind": p.intra_kind,
        "intra": _link_dict(p.intra),
        "intra_by_devices": {str(k): float(v) for k, v in sorted(p.intra_by_devices.items())},
        "nvlinks": [list(r) for r in p.nvlinks],
        "host": _link_dict(p.host),
        "network": _link_dict(p.network),
        "nics_per_node": p.nics_per_node,
        "base_latency_s": p.base_latency_s,
        "base_latency_source": p.base_latency_source,
        "protocols": {k: dict(v) for k, v in sorted(p.protocols.items())},
        "protocols_by_devices": {
            str(k): {proto: dict(v) for proto, v in sorted(d.items())}
            for k, d in sorted(p.protocols_by_devices.items())
        },
        "launch_s": p.launch_s,
        "net_overhead_s": p.net_overhead_s,
        "network_nodes": p.network_nodes,
        "busbw_by_devices": {str(k): float(v) for k, v in sorted(p.busbw_by_devices.items())},
        "device": p.device,
        "peak_tflops": {str(k): float(v) for k, v in sorted(p.peak_tflops.items())},
        "notes": list(p.notes),
    }


def _link_from(d: Any, where: str, what: str) -> Link | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ValueError(f"{where}: {what!r} must be an object with bandwidth_Bps and latency_s")
    try:
        return Link(float(d["bandwidth_Bps"]), float(d["latency_s"]), str(d.get("source", "")))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(
            f"{where}: {what!r} needs bandwidth_Bps > 0 and latency_s >= 0 (numbers): {e}"
        ) from None


def platform_from_dict(d: Any, where: str = "platform") -> Platform:
    """A Platform from its JSON document; a clear error naming ``where`` when malformed."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: not a platform document (a JSON object expected)")
    v = d.get("version")
    if v != PLATFORM_VERSION:
        raise ValueError(
            f"{where}: platform version {v!r} not understood (this ailens reads version "
            f"{PLATFORM_VERSION}); write it again with ailens calibrate --from-nccl-tests"
        )
    try:
        intra = _link_from(d.get("intra"), where, "intra")
        if intra is None:
            raise ValueError(f"{where}: 'intra' link missing")
        return Platform(
            name=str(d.get("name") or Path(where).stem),
            devices_per_node=int(d["devices_per_node"]),
            intra=intra,
            network=_link_from(d.get("network"), where, "network"),
            nics_per_node=int(d.get("nics_per_node") or 0),
            base_latency_s=float(d.get("base_latency_s", NCCL_BASE_S)),
            base_latency_source=str(d.get("base_latency_source", _NCCL_LAT)),
            intra_kind=str(d.get("intra_kind") or "nvlink"),
            intra_by_devices={
                int(k): float(b) for k, b in (d.get("intra_by_devices") or {}).items()
            },
            nvlinks=tuple(tuple(int(x) for x in r) for r in (d.get("nvlinks") or ())),
            host=_link_from(d.get("host"), where, "host"),
            protocols={
                str(k): {
                    "base_latency": float(v.get("base_latency", 1.0)),
                    "bandwidth": float(v.get("bandwidth", 1.0)),
                }
                for k, v in (d.get("protocols") or {}).items()
            },
            protocols_by_devices={
                int(k): {
                    str(proto): {str(w): float(x) for w, x in v.items()} for proto, v in per.items()
                }
                for k, per in (d.get("protocols_by_devices") or {}).items()
            },
            launch_s=float(d.get("launch_s") or 0.0),
            net_overhead_s=float(d.get("net_overhead_s", NCCL_NET_OVERHEAD_S)),
            network_nodes=int(d.get("network_nodes") or 0),
            busbw_by_devices={
                int(k): float(b) for k, b in (d.get("busbw_by_devices") or {}).items()
            },
            device=str(d.get("device") or ""),
            peak_tflops={str(k): float(v) for k, v in (d.get("peak_tflops") or {}).items()},
            description=str(d.get("description", "")),
            notes=tuple(str(x) for x in d.get("notes") or ()),
        )
    except (KeyError, TypeError) as e:
        raise ValueError(f"{where}: missing or malformed field {e}") from None
    except ValueError as e:
        if str(e).startswith(where):
            raise
        raise ValueError(f"{where}: {e}") from None


# Platforms fitted on public measurements (benchmarks/public_platforms.py writes them).
FITTED_DIR = Path(__file__).parent / "platform_data"


def platform_labels() -> list[str]:
    """The labels ``load_platform`` knows: datasheet defaults, then the fitted ones."""
    fitted = sorted(f.stem for f in FITTED_DIR.glob("*.json")) if FITTED_DIR.is_dir() else []
    return sorted(DEFAULT_PLATFORMS) + fitted


def load_platform(path_or_label: str | os.PathLike) -> Platform:
    """A platform from a JSON file, or a label: a datasheet default (``DEFAULT_PLATFORMS``)
    or one fitted on public measurements (``ailens/predict/platform_data/LABEL.json``)."""
    s = str(path_or_label)
    if s in DEFAULT_PLATFORMS:
        return DEFAULT_PLATFORMS[s]
    f = Path(s)
    if not f.exists() and re.fullmatch(r"[\w.-]+", s) and (FITTED_DIR / f"{s}.json").exists():
        f = FITTED_DIR / f"{s}.json"
    if not f.exists():
        raise ValueError(
            f"platform {s!r}: no such file and not a known label "
            f"(labels: {', '.join(platform_labels())})"
        )
    doc = read_json_file(f, what="platform", error=ValueError, fix="write it with ailens calibrate")
    return platform_from_dict(doc, str(f))
