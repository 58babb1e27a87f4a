"""The cross-rank exchange: how ranks sum their per-tick summaries, and when.

Every rank sends the same int64 payload through the integration's own sum collective (an
allreduce of a small CPU array): a header, then three columns of ``k`` values (work magnitude,
comm ns, compute ns). ``k`` (:func:`payload_slots`) is the ticks of the batch rounded up to a
power of two, at most ``exchange_ticks``: every rank holds the same tick count at the
exchange, so every rank picks the same size, and a run sends a few hundred bytes per round
where it has few collectives per second, not ``exchange_ticks`` slots every time. The sum
gives every rank the same SIMO per tick and the comm/compute totals, so the online phase
tables are identical on every rank.

When: at a step end, once ``exchange_ticks`` ticks are pending or the agreed number of steps
has passed since the last exchange and a tick is pending (on one rank also with none). An
exchange that can run in the background (``Exchange.start``) is finished at the next step
end, and the sums reach the run model then. The
decision uses only tick and step counts, which every rank shares, so all ranks enter the
collective at the same step. Rank 0 proposes the next
interval in the header (enough steps to keep exchanges ``exchange_seconds`` apart, or
``exchange_elapsed_share`` of the run's elapsed time when that is longer), and the sum carries
its proposal to everyone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from .ticks import TickSummary

__all__ = [
    "Cadence",
    "Header",
    "Summed",
    "decode",
    "encode",
    "payload_slots",
    "summed",
]

Exchange = Callable[[np.ndarray], np.ndarray]
"""Sums an int64 array elementwise across all ranks and returns the sum (every rank).

It may also carry ``start``: ``exchange.start(a)`` starts the same sum without waiting and
returns ``finish``, whose call waits for the sum and returns it (a non-blocking allreduce:
torch ``async_op=True``, Horovod ``allreduce_async``, MPI ``Iallreduce``). The Lens then
starts a periodic round at one step end and finishes it at the next: the collective runs
beside the step's own collectives instead of as one more synchronising collective, and every
rank still finishes it at the same step end."""

# Exchanges never wait longer than this many steps.
MAX_INTERVAL_STEPS = 1000


class Header(IntEnum):
    """Payload slots before the columns; each is summed across ranks."""

    VALID = 0  # ticks in this batch (rank 0 writes it, others 0)
    DISABLED = 1  # 1 from each rank that contributes nothing (ailens disabled there)
    STOP = 2  # rank 0's early-stop vote
    INTERVAL = 3  # rank 0's proposal: steps until the next exchange (0: no proposal)


HEAD = len(Header)
# The smallest payload: column slots of a batch of few ticks.
MIN_SLOTS = 8


def payload_slots(n: int, cap: int) -> int:
    """Column slots of a payload for a batch of ``n`` ticks: ``n`` rounded up to a power of
    two (a few sizes, so a framework that keys its collectives by shape, such as Horovod,
    sees few), at least MIN_SLOTS, at most ``cap`` (``exchange_ticks``; ``n <= cap``)."""
    return min(cap, max(MIN_SLOTS, 1 << max(n - 1, 0).bit_length()))


def encode(
    k: int,
    batch: TickSummary | None,
    *,
    rank: int,
    stop_vote: bool = False,
    interval: int = 0,
) -> np.ndarray:
    """This rank's payload for a batch of ``k`` slots (``batch`` None: a disabled rank)."""
    payload = np.zeros(HEAD + 3 * k, dtype=np.int64)
    if batch is None:
        payload[Header.DISABLED] = 1
        return payload
    n = len(batch)
    if rank == 0:
        payload[Header.VALID] = n
        payload[Header.STOP] = int(stop_vote)
        payload[Header.INTERVAL] = interval
    payload[HEAD : HEAD + n] = batch.mag
    payload[HEAD + k : HEAD + k + n] = batch.comm_ns
    payload[HEAD + 2 * k : HEAD + 2 * k + n] = batch.compute_ns
    return payload


@dataclass(frozen=True)
class Summed:
    """What every rank reads from a summed payload."""

    simo: np.ndarray  # per tick, sum of magnitudes over the live ranks
    comm_ns: np.ndarray  # per tick, mean over the live ranks
    compute_ns: np.ndarray
    disabled_ranks: int
    stop: bool
    interval: int


def summed(
    simo: np.ndarray,
    comm_ns: np.ndarray,
    compute_ns: np.ndarray,
    *,
    world_size: int,
    disabled: int,
    stop: bool = False,
    interval: int = 0,
) -> Summed:
    """The exchange's arithmetic on columns already summed over the live ranks (integers):
    SIMO stays the sum, comm and compute become the mean over the live ranks. The Lens
    (``decode``) and the offline analysis (``ailens.analyze``) both use it."""
    live = max(world_size - disabled, 1)
    return Summed(
        simo=simo,
        comm_ns=comm_ns / live,
        compute_ns=compute_ns / live,
        disabled_ranks=disabled,
        stop=stop,
        interval=interval,
    )


def decode(total: np.ndarray, n: int, k: int, world_size: int) -> Summed:
    """The first ``n`` ticks of a summed payload of ``k`` slots."""
    return summed(
        total[HEAD : HEAD + n].copy(),
        total[HEAD + k : HEAD + k + n],
        total[HEAD + 2 * k : HEAD + 2 * k + n],
        world_size=world_size,
        disabled=int(total[Header.DISABLED]),
        stop=bool(total[Header.STOP] > 0),
        interval=int(total[Header.INTERVAL]),
    )


class Cadence:
    """When to exchange: a pure function of shared counts, plus rank 0's proposal."""

    def __init__(
        self,
        batch_ticks: int,
        seconds: float,
        first_interval: int,
        *,
        start_ns: int = 0,
        elapsed_share: float = 0.0,
    ) -> None:
        self.batch_ticks = batch_ticks
        self.seconds = seconds
        self.elapsed_share = elapsed_share  # also this share of the time since the start
        self.every = max(1, first_interval)  # steps between exchanges, as agreed
        self.ticks_done = 0  # ticks already exchanged
        self.step_at = 0  # steps done at the last exchange
        self.start_ns = start_ns  # rank 0's clock when the run started
        self.t_at = start_ns  # rank 0's clock at the last exchange (ns)

    def quiet_until(self) -> tuple[int, int]:
        """The step and tick counts below which :meth:`due` is False whatever else holds, so
        a step end can skip it with two comparisons (on cold caches after a training step
        the call itself cost ~15 us; issue 33)."""
        return self.step_at + self.every, self.ticks_done + self.batch_ticks

    def due(self, ticks: int, steps: int, *, alone: bool = False) -> bool:
        """An exchange now: a full batch is pending, or the agreed steps have passed with
        ticks pending. ``alone`` (one rank, no real collective): also with nothing pending,
        as the exchange is where the forecast is evaluated. With several ranks a batch waits
        for a tick: the framework's own collectives are what keep ranks in step, so an
        exchange without one could wait on a rank that left."""
        pending = ticks - self.ticks_done
        if pending >= self.batch_ticks:
            return True
        return steps - self.step_at >= self.every and (pending > 0 or alone)

    def propose(self, steps: int, now_ns: int) -> int:
        """Rank 0's proposal: ``seconds`` worth of steps at the pace since the last exchange,
        or ``elapsed_share`` of the time since the start when that is longer."""
        n = steps - self.step_at
        if n <= 0:
            return 0
        step_s = (now_ns - self.t_at) / 1e9 / n
        seconds = self.seconds
        if seconds > 0:
            seconds = max(seconds, self.elapsed_share * (now_ns - self.start_ns) / 1e9)
        want = seconds / step_s if step_s > 0 else MAX_INTERVAL_STEPS
        return int(min(max(math.ceil(want), 1), MAX_INTERVAL_STEPS))

    def done(self, ticks: int, steps: int, now_ns: int, agreed_interval: int) -> None:
        self.ticks_done = ticks
        self.step_at = steps
        self.t_at = now_ns
        if agreed_interval > 0:
            self.every = agreed_interval
