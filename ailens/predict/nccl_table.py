"""One nccl-tests ``*_perf`` table as data: what the parser (``nccl_tests.py``) makes and the
fit (``nccl_fit.py``) reads, in a module of its own so that neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NcclTestsTable"]


@dataclass(frozen=True)
class NcclTestsTable:
    """The rows of one nccl-tests ``*_perf`` output: per size the out-of-place and in-place
    time (seconds), the rank count and hosts it ran on."""

    op: str  # canonical: allreduce, allgather, ...
    ranks: int
    hosts: tuple[str, ...]
    ranks_per_node: int
    sizes: tuple[int, ...]  # bytes, as nccl-tests prints (see nccl.NCCL_TESTS_BYTES)
    oop_s: tuple[float, ...]
    ip_s: tuple[float, ...]
    source: str = ""
    devices_per_process: int = 1  # nccl-tests' -g: devices one thread drives

    @property
    def nodes(self) -> int:
        return max(len(set(self.hosts)), 1) if self.hosts else -(-self.ranks // self.ranks_per_node)

    def seconds(self, i: int) -> float:
        """The time of row ``i``: the faster placement when both agree within 20 %, else
        the out-of-place one (a noisy in-place half is not evidence)."""
        a, b = self.oop_s[i], self.ip_s[i]
        if b > 0 and a > 0 and abs(a - b) <= 0.2 * a:
            return min(a, b)
        return a if a > 0 else b
