"""Where the ranks of a run sit: the what-if's inputs for one configuration."""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = ["Layout"]


@dataclass(frozen=True)
class Layout:
    """Where the ranks of a run sit: the what-if's inputs for one configuration.

    ``cores_per_node``: cores the ranks of one node may use (affinity and CPU quota).
    """

    ranks: int
    ranks_per_node: int
    threads_per_rank: int
    cores_per_node: float

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.ranks_per_node < 1 or self.threads_per_rank < 1:
            raise ValueError(f"{self}: ranks, ranks per node and threads must be >= 1")
        if not self.cores_per_node > 0:
            raise ValueError(f"{self}: cores per node must be > 0")

    @property
    def nodes(self) -> int:
        return -(-self.ranks // self.ranks_per_node)

    @property
    def ranks_on_node(self) -> int:
        """Ranks computing side by side on one (full) node."""
        return min(self.ranks, self.ranks_per_node)

    @property
    def cores_per_rank(self) -> float:
        """Cores one rank's threads get: its threads, or its share when they do not fit."""
        return min(float(self.threads_per_rank), self.cores_per_node / self.ranks_on_node)

    @property
    def busy_cores(self) -> float:
        """Cores of a node computing at once."""
        return min(float(self.ranks_on_node * self.threads_per_rank), self.cores_per_node)

    @property
    def oversubscribed(self) -> bool:
        return self.ranks_on_node * self.threads_per_rank > self.cores_per_node + 1e-9

    @property
    def links(self) -> str:
        """What the collectives cross: "none" (1 rank), "intra" or "inter" node."""
        if self.ranks == 1:
            return "none"
        return "inter" if self.nodes > 1 else "intra"

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            nodes=self.nodes,
            cores_per_rank=self.cores_per_rank,
            busy_cores=self.busy_cores,
            oversubscribed=self.oversubscribed,
            links=self.links,
        )
        return d
