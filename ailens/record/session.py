"""The exchange session of one rank: per-tick summaries waiting to be exchanged, the cadence,
and the rounds through the integration's own sum collective (see ``exchange.py``).

The session only counts and sums. What the sums feed (the run model) and what the rounds
leave in the trace (the recorder's exchange rows) are the caller's: ``run`` hands each summed
batch back through ``on_batch``.

A disabled rank still joins every round, flagged as disabled, so no rank waits on a
collective that never comes; a failing collective ends the exchange on this rank only.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np

from .buffer import EventBuffer
from .config import LensConfig
from .exchange import Cadence, Exchange, Summed, decode, encode, payload_slots
from .ticks import TickSummary, summarise

__all__ = ["ExchangeSession"]

Batch = Callable[[Summed, TickSummary, np.ndarray, int], None]
"""``(summed, own batch, tick steps, ticks exchanged so far) -> None``"""


class ExchangeSession:
    """Pending summaries and the exchange rounds of one rank. ``fault(exc)`` disables ailens
    on this rank (the Lens's fail-open); ``disabled()`` says whether it is."""

    def __init__(
        self,
        cfg: LensConfig,
        rank: int,
        world_size: int,
        exchange: Exchange | None,
        *,
        clock: Callable[[], int],
        fault: Callable[[BaseException], None],
        disabled: Callable[[], bool],
    ) -> None:
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        self.exchange_fn = exchange if world_size > 1 else None
        self._clock, self._fault, self._disabled = clock, fault, disabled
        # The cadence exists even when this rank is disabled: it still joins.
        self.cadence = Cadence(
            cfg.exchange_ticks if self.exchange_fn is not None else 1 << 62,
            cfg.exchange_seconds,
            cfg.signature_window // 2,
            start_ns=clock(),
            elapsed_share=cfg.exchange_elapsed_share,
        )
        self.stop_agreed = False
        # The buffer whose ticks are exchanged: until recording starts (or when it never
        # does), a placeholder that only counts them.
        self.buf = EventBuffer(1, clock=clock, read_work=lambda: 0, t0=0, work0=0,
                               intern=lambda op: 0, on_fault=fault)  # fmt: skip
        self._prev_end = 0  # latest collective end summarised so far
        self._summarised = 0  # ticks summarised (tick number of the next one)
        self._pending: list[tuple[TickSummary, np.ndarray]] = []  # summaries not yet exchanged
        self._pending_n = 0
        # The round whose collective runs in the background: (finish, n, width, batch,
        # tick steps, ticks done after it), or None.
        self._in_flight: tuple | None = None

    @property
    def alone(self) -> bool:
        """No real collective: one rank, or the exchange ended on this rank."""
        return self.exchange_fn is None

    def agree_run_id(self) -> str:
        """One run id for every rank: rank 0's random bits, summed across ranks."""
        # 52 random bits (os.urandom: the secrets module costs ~4 ms of import at start-up)
        mine = int.from_bytes(os.urandom(7), "big") >> 4 if self.rank == 0 else 0
        if self.exchange_fn is None:
            env_id = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("AILENS_RUN_ID")
            return env_id or f"{mine:013x}"
        total = self.exchange_fn(np.array([mine], dtype=np.int64))
        return f"{int(np.asarray(total)[0]):013x}"

    # ------------------------------------------------------------ pending summaries

    def summarise(self, stop: int) -> list[int]:
        """Per-tick summaries of buffer rows [already summarised, stop) for the exchange
        (called under the buffer's lock, before the rows leave it). Returns the ticks still
        open, summarised as ending at their begin (see ``ticks.py``): the offline side must
        know them."""
        buf = self.buf
        start = self._summarised - buf.base
        if stop <= start:
            return []
        cols = buf.columns(start, stop)
        open_rows = np.flatnonzero(cols["t_end"] < 0)
        open_ticks = (open_rows + self._summarised).tolist() if len(open_rows) else []
        summary, self._prev_end = summarise(
            cols["op"],
            cols["nbytes"],
            cols["t_begin"],
            cols["t_end"],
            cols["work"],
            by_size=self.cfg.phase_key == "op+size",
            prev_end=self._prev_end,
        )
        self._pending.append((summary, cols["step"].astype(np.int64)))
        self._pending_n += len(summary)
        self._summarised += len(summary)
        return open_ticks

    def _take(self, n: int, summarise_rest: Callable[[], None]) -> tuple[TickSummary, np.ndarray]:
        if n == 0:
            empty = np.zeros(0, dtype=np.int64)
            return TickSummary(empty.astype(np.int8), empty, empty, empty), empty
        if self._pending_n < n:
            summarise_rest()
        parts = self._pending
        fields = TickSummary.__dataclass_fields__
        cat = [np.concatenate([getattr(p[0], f) for p in parts]) for f in fields]
        steps = np.concatenate([p[1] for p in parts])
        rest = TickSummary(*(c[n:] for c in cat))
        self._pending = [(rest, steps[n:])] if len(rest) else []
        self._pending_n = len(rest)
        return TickSummary(*(c[:n] for c in cat)), steps[:n]

    # ------------------------------------------------------------ rounds

    def run(
        self,
        steps: int,
        *,
        vote: Callable[[], bool],
        on_batch: Batch,
        summarise_rest: Callable[[], None],
        evaluate: bool = False,
        start: bool = True,
        final: bool = False,
    ) -> None:
        """Finish the round in flight (if any), then, with ``start``, send every pending tick
        through the exchange in batches of ``exchange_ticks``; with ``evaluate``, at least one
        (possibly empty) batch: an evaluation point of the run model even in a run without
        collectives. ``vote()``: this rank's early-stop vote now; ``summarise_rest()``
        summarises the rows still in the buffer.

        Where the exchange can run in the background (``exchange.start``, see
        ``exchange.py``) and one batch holds every pending tick, that batch's collective is
        started and left in flight: it completes beside the next step's own collectives, and
        :attr:`in_flight` says the next step end must finish it (every rank finishes it at the
        same step end). ``final`` (close): everything completes here.

        All ranks hold the same tick count here, so they make the same number of calls with
        the same payload sizes."""
        self._finish(on_batch)
        if not start:
            return
        cadence, buf = self.cadence, self.buf
        k = self.cfg.exchange_ticks if self.exchange_fn is not None else None
        rounds = 0
        while cadence.ticks_done < buf.ticks or (evaluate and rounds == 0):
            rounds += 1
            n = min(k or buf.ticks, buf.ticks - cadence.ticks_done)
            width = payload_slots(n, k) if k else max(n, 1)
            batch, tick_steps, interval = None, None, 0
            if not self._disabled():
                try:
                    batch, tick_steps = self._take(n, summarise_rest)
                    if self.rank == 0:
                        interval = cadence.propose(steps, self._clock())
                except Exception as e:  # noqa: BLE001
                    self._fault(e)
                    batch = None
            payload = encode(width, batch, rank=self.rank, stop_vote=vote(), interval=interval)
            done = cadence.ticks_done + n
            starter = getattr(self.exchange_fn, "start", None)
            if starter is not None and not final and done == buf.ticks:
                finish = self._start_round(starter, payload)
                if finish is not None:
                    # The cadence moves on now (so the next step end does not start it
                    # again); the agreed interval arrives with the sum.
                    cadence.done(done, steps, self._clock(), 0)
                    self._in_flight = (finish, n, width, batch, tick_steps, done)
                    return
            total = self._call(payload)
            summed = None if total is None else decode(total, n, width, self.world_size)
            cadence.done(done, steps, self._clock(), summed.interval if summed else 0)
            self._summed(summed, batch, tick_steps, done, on_batch)

    def quiet_until(self) -> tuple[int, int]:
        """The step and tick counts below which no step end has a round to run: none while a
        round is in flight (the next step end finishes it), else the cadence's. Valid until
        the next :meth:`run`."""
        return (0, 0) if self._in_flight is not None else self.cadence.quiet_until()

    @property
    def in_flight(self) -> bool:
        """Whether a round's collective is running in the background."""
        return self._in_flight is not None

    @property
    def exchanged_ticks(self) -> int:
        """Ticks whose sums have arrived (the online phase table covers these)."""
        flight = self._in_flight
        return self.cadence.ticks_done - (flight[1] if flight is not None else 0)

    def abandon(self) -> None:
        """Leave the round in flight unfinished (interpreter exit: the other ranks may be
        gone, so nothing is waited for); its ticks are pending again, for a local round."""
        flight, self._in_flight = self._in_flight, None
        if flight is None:
            return
        _, n, _, batch, tick_steps, _ = flight
        self.cadence.ticks_done -= n
        if batch is not None:
            self._pending.insert(0, (batch, tick_steps))
            self._pending_n += n

    def _start_round(self, starter, payload: np.ndarray):
        try:
            return starter(payload)
        except Exception as e:  # noqa: BLE001 - as a failing collective in _call
            self._fault(e)
            self.exchange_fn = None
            return None

    def _finish(self, on_batch: Batch) -> None:
        flight, self._in_flight = self._in_flight, None
        if flight is None:
            return
        finish, n, width, batch, tick_steps, done = flight
        try:
            total = np.asarray(finish(), dtype=np.int64)
        except Exception as e:  # noqa: BLE001
            self._fault(e)
            self.exchange_fn = None
            total = None
        summed = None if total is None else decode(total, n, width, self.world_size)
        if summed is not None and summed.interval > 0:
            self.cadence.every = summed.interval
        self._summed(summed, batch, tick_steps, done, on_batch)

    def _summed(self, summed: Summed | None, batch, tick_steps, done: int, on_batch) -> None:
        if summed is not None and summed.stop:
            # Also on a disabled rank: every rank must stop at the same step, or the
            # ranks that go on wait forever on the framework's next collective.
            self.stop_agreed = True
        if summed is None or self._disabled() or batch is None:
            return
        try:
            on_batch(summed, batch, tick_steps, done)
        except Exception as e:  # noqa: BLE001
            self._fault(e)

    def _call(self, payload: np.ndarray) -> np.ndarray | None:
        if self.exchange_fn is None:
            return payload
        try:
            return np.asarray(self.exchange_fn(payload), dtype=np.int64)
        except Exception as e:  # noqa: BLE001
            # The framework's own collective failed: nothing more we can do in sync, so stop
            # exchanging on this rank (the framework will report its own error).
            self._fault(e)
            self.exchange_fn = None
            return None
