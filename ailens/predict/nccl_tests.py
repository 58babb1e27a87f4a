"""nccl-tests output as data: the standard ``*_perf`` tables a user already has
(``parse_nccl_tests``), and a platform fitted on them (``platform_from_nccl_tests``, with
the NCCL cost model's fit of ``nccl_fit.py``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from .nccl_fit import fit_platform
from .nccl_table import NcclTestsTable
from .platforms import GB, NCCL_NET_STEP_S, NCCL_NVLINK_STEP_S, Link, Platform, load_platform

__all__ = ["NcclTestsTable", "parse_nccl_tests", "platform_from_nccl_tests"]


_OP_OF_BINARY = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reduce_scatter": "reduce_scatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "alltoall",
}
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


@dataclass
class _Header:
    """What the ``#`` lines of an nccl-tests output said so far."""

    kind: str | None  # the op: given, else from the binary's name
    hosts: list[str] = field(default_factory=list)  # one per rank
    ngpus: int | None = None
    nthread: int | None = None
    has_root: bool = False  # the table has a root column

    def read(self, s: str) -> None:
        m = re.search(r"Rank\s+\d+.*?\bon\s+(\S+)\s+device", s)
        if m:
            self.hosts.append(m.group(1))
        m = re.search(r"nGpus\s+(\d+)", s)
        if m:
            self.ngpus = int(m.group(1))
        m = re.search(r"nThread\s+(\d+)", s)
        if m:
            self.nthread = int(m.group(1))
        if re.search(r"\bredop\s+root\b", s) or re.search(r"\btype\s+root\b", s):
            self.has_root = True
        if self.kind is None:
            for b, o in _OP_OF_BINARY.items():
                if re.search(rf"\b{b}_perf\b", s):
                    self.kind = o

    def ranks(self, ratios: list[float], kind: str, source: str) -> int:
        """The rank count: the device lines; else all-reduce's busbw / algbw = 2(n-1)/n (an
        MPI run's header says nGpus 1 per process); else nGpus x nThread of a single process."""
        if self.hosts:
            return len(self.hosts)
        if ratios and kind == "allreduce" and sorted(ratios)[len(ratios) // 2] < 1.999:
            return int(round(2 / (2 - sorted(ratios)[len(ratios) // 2])))
        if self.ngpus is not None:
            return self.ngpus * (self.nthread or 1)
        raise ValueError(
            f"{source}: the number of ranks is not in the output (no '# Rank ... on HOST "
            "device' lines, no nGpus header): keep the whole nccl-tests output"
        )


def _table_row(tok: list[str], has_root: bool) -> tuple[int, float, float, float, float] | None:
    """(bytes, out-of-place us, in-place us, algbw, busbw) of a table line's tokens; None when
    the line is not a row."""
    if len(tok) < 10 or not tok[0].isdigit() or not tok[1].isdigit():
        return None
    # size count type [redop] [root] time algbw busbw wrong time algbw busbw wrong
    nums = [t for t in tok[2:] if re.fullmatch(_NUM, t) or t == "N/A"]
    vals = nums[1:] if has_root else nums
    if re.fullmatch(r"-?\d+", tok[4] if len(tok) > 4 else "") and not has_root:
        # a "root" column without the header line (broadcast/reduce tables)
        vals = nums[1:] if len(nums) >= 9 else nums
    if len(vals) < 7:
        return None
    try:
        t_oop, algbw, busbw = float(vals[0]), float(vals[1]), float(vals[2])
        t_ip = float(vals[4])
    except ValueError:
        return None
    return int(tok[0]), t_oop, t_ip, algbw, busbw


# Open MPI's ``mpirun --tag-output`` (and launchers that wrap it) prefix every line with the
# job and rank and stream: ``[1,0]<stdout>:``, sometimes after a launcher's own prefix.
_MPI_TAG = re.compile(r"^.*?\[(\d+),(\d+)\]<(stdout|stderr|stddiag)>:")


def _untagged_lines(text: str) -> list[str]:
    """The output's lines without ``mpirun --tag-output`` prefixes. Only the rank that printed
    the table is kept (an nccl-tests built without MPI prints one 1-rank table per process;
    only rank 0 prints the header and the rows of an MPI run), with the untagged lines."""
    lines, table_tag = [], None
    tagged: list[tuple[tuple[str, str] | None, str]] = []
    for line in text.splitlines():
        m = _MPI_TAG.match(line)
        if m is None:
            tagged.append((None, line))
            continue
        rest = line[m.end() :]
        tag = (m.group(1), m.group(2))
        tagged.append((tag if m.group(3) == "stdout" else ("stderr", ""), rest))
        if table_tag is None and m.group(3) == "stdout" and _table_row(rest.split(), False):
            table_tag = tag
    for tag, rest in tagged:
        if tag is None or tag == table_tag:
            lines.append(rest)
    return lines


def parse_nccl_tests(text: str, *, source: str = "nccl-tests output", op: str | None = None):
    """The table of an nccl-tests output (``all_reduce_perf`` and friends): both halves of
    every line, ranks and hosts from the ``# Rank ... on HOST device ...`` lines (else from
    the ``nGpus`` header or busbw/algbw). Logs of ``mpirun --tag-output`` (``[1,0]<stdout>:``
    prefixes) are read as the rank that printed the table wrote them. Raises ValueError
    naming ``source`` when no row is found."""
    head = _Header(op)
    sizes, oop, ip = [], [], []
    ratios = []
    for line in _untagged_lines(text):
        s = line.strip()
        if not s:
            continue
        if s.startswith("#"):
            head.read(s)
            continue
        row = _table_row(s.split(), head.has_root)
        if row is None:
            continue
        size, t_oop, t_ip, algbw, busbw = row
        sizes.append(size)
        oop.append(t_oop * 1e-6)
        ip.append(t_ip * 1e-6)
        if algbw >= 1 and busbw > 0:  # printed to 0.01 GB/s: precise enough from 1 GB/s
            ratios.append(busbw / algbw)
    if not sizes:
        raise ValueError(
            f"{source}: no nccl-tests table found (expected lines like "
            "'  1048576  262144  float  sum  72.53 ...' from all_reduce_perf)"
        )
    kind = head.kind or "allreduce"
    ranks = head.ranks(ratios, kind, source)
    hosts = head.hosts
    per_host = max(hosts.count(h) for h in set(hosts)) if hosts else ranks
    return NcclTestsTable(
        op=kind,
        ranks=ranks,
        hosts=tuple(hosts),
        ranks_per_node=per_host,
        sizes=tuple(sizes),
        oop_s=tuple(oop),
        ip_s=tuple(ip),
        source=source,
        devices_per_process=max(head.ngpus or 1, 1),
    )


def platform_from_nccl_tests(
    text: str | list[str],
    *,
    devices_per_node: int | None = None,
    base: Platform | str | None = None,
    name: str | None = None,
    sources: list[str] | None = None,
) -> Platform:
    """A platform fitted on one or more nccl-tests outputs (``all_reduce_perf`` tables).

    Logs on one node fit the intra-node link (and, with several device counts, its bandwidth
    per count); logs spanning nodes fit the network (one NIC = the node's injection bandwidth
    / ``nics_per_node``). What no log measured is kept from ``base`` (a default label or a
    Platform; default: a generic node with ``devices_per_node`` devices), and said so."""
    texts = [text] if isinstance(text, str) else list(text)
    names = list(sources or [f"nccl-tests log {i + 1}" for i in range(len(texts))])
    tables = [parse_nccl_tests(t, source=s) for t, s in zip(texts, names, strict=True)]
    if isinstance(base, str):
        base = load_platform(base)
    if devices_per_node is None:
        devices_per_node = base.devices_per_node if base is not None else None
    if devices_per_node is None:
        devices_per_node = max(t.ranks_per_node for t in tables)
    # A table without device lines does not say where its ranks ran: nodes filled in order.
    tables = [
        t if t.hosts else replace(t, ranks_per_node=min(t.ranks, int(devices_per_node)))
        for t in tables
    ]
    if base is None:
        base = _generic(devices_per_node)
    elif base.devices_per_node != devices_per_node:
        base = replace(base, devices_per_node=int(devices_per_node))
    return fit_platform(tables, base, name=name)


def _generic(devices_per_node: int) -> Platform:
    """What a fit starts from when no platform label was given."""
    return Platform(
        name="fitted",
        devices_per_node=int(devices_per_node),
        intra=Link(100 * GB, NCCL_NVLINK_STEP_S, "assumed starting point (not measured)"),
        network=Link(
            12.5 * GB, NCCL_NET_STEP_S, "assumed: 100 Gb/s per NIC, one per device (not measured)"
        ),
        nics_per_node=int(devices_per_node),
        intra_kind="nvlink",
        description="fitted on nccl-tests output",
    )
