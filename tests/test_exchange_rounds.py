"""The cross-rank exchange's rounds (record/session.py, record/exchange.py): payloads sized to
the batch, and rounds that run in the background (``Exchange.start``) finished at the next
step end, with the same sums, phases and forecast as blocking rounds.

Two ranks are two Lenses on two threads of this process, summing through a barrier: the
core's ``Exchange`` contract (an int64 sum across ranks), which the adapters' tests exercise
on real frameworks."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from ailens import Lens, analyze, load_run
from ailens.record.exchange import HEAD, MIN_SLOTS, payload_slots


class ThreadSum:
    """An int64 sum across ``world`` threads; ``background``: also ``start``, whose sum is
    made when every rank finishes (a collective completing later). Records payload sizes."""

    def __init__(self, world: int, *, background: bool) -> None:
        self.world, self.background = world, background
        self.barrier = threading.Barrier(world, timeout=30)
        self.slots: list[np.ndarray | None] = [None] * world
        self.sizes: list[int] = []
        self.started = 0

    def _sum(self, rank: int, a: np.ndarray) -> np.ndarray:
        self.slots[rank] = np.array(a, dtype=np.int64)
        self.barrier.wait()
        total = np.sum(self.slots, axis=0)
        self.barrier.wait()
        return total

    def for_rank(self, rank: int):
        def exchange(a: np.ndarray) -> np.ndarray:
            if rank == 0:
                self.sizes.append(len(a))
            return self._sum(rank, a)

        if self.background:

            def start(a: np.ndarray):
                if rank == 0:
                    self.sizes.append(len(a))
                    self.started += 1
                a = np.array(a)
                return lambda: self._sum(rank, a)

            exchange.start = start
        return exchange


class Clock:
    """A clock the test moves (reads do not move it: both kinds of rounds read it a
    different number of times between collectives)."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Work:
    """A work counter the test drives (the same work in every run)."""

    kind, unit, fallback_reason = "cpu-ns", "ns", None

    def __init__(self) -> None:
        self.value = 0

    def read(self) -> int:
        return self.value

    def close(self) -> None:
        pass


def _train(run_dir, background: bool, steps: int = 120, **cfg) -> tuple[list[dict], ThreadSum]:
    """Two ranks, three collectives a step (the second one slower on rank 1), 20 ms steps
    (a fake clock each); returns each rank's outcome."""
    xs = ThreadSum(2, background=background)
    out: list[dict] = [{}, {}]

    def rank_main(rank: int) -> None:
        clock, work = Clock(), Work()
        lens = Lens(run_dir=run_dir, rank=rank, world_size=2, exchange=xs.for_rank(rank),
                    clock=clock, work_counter=work, exchange_seconds=0.1, **cfg)  # fmt: skip
        stopped_at, flights = None, 0
        for s in range(steps):
            for j, nbytes in enumerate((4096, 1 << 20, 64)):
                clock.now += 4_000_000 + (1_000_000 if rank == 1 and j == 1 else 0)
                work.value += (1 + j) * 1_000_000 * (1 + rank)
                lens.collective_begin("allreduce", nbytes)
                clock.now += 2_000_000
                lens.collective_end()
            lens.step_end()
            flights += lens.session.in_flight
            if lens.should_stop and stopped_at is None:
                stopped_at = s
                break
        exchanged_before_close = lens.exchanged_ticks
        lens.close()
        out[rank] = {
            "table": lens.online.table().to_dict(),
            "stopped_at": stopped_at,
            "flights": flights,
            "exchanged_before_close": exchanged_before_close,
            "ticks": lens.ticks,
            "signature_step": lens.online.signature_step,
            "history": list(lens.online.history),
            "disabled": lens.disabled,
        }

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a rank was left waiting"
    return out, xs


def test_payload_slots_are_few_sizes_that_fit_the_batch():
    for cap in (1, 7, 64, 4096):
        for n in range(0, cap + 1):
            k = payload_slots(n, cap)
            assert n <= k <= cap
            assert k == cap or k == MIN_SLOTS or (k & (k - 1)) == 0
            assert k < 2 * max(n, MIN_SLOTS)  # never more than twice what is needed
    assert len({payload_slots(n, 4096) for n in range(4097)}) <= 10


def test_rounds_in_the_background_give_the_blocking_rounds_sums_one_step_later(tmp_path):
    sync, sync_x = _train(tmp_path / "sync", background=False)
    bg, bg_x = _train(tmp_path / "bg", background=True)
    for r in (*sync, *bg):
        assert r["disabled"] is None
    # Identical phase tables: across ranks, and between blocking and background rounds.
    assert sync[0]["table"] == sync[1]["table"] == bg[0]["table"] == bg[1]["table"]
    assert sync[0]["table"]["phases"]
    # The periodic rounds ran in the background; close finished what was in flight.
    assert bg_x.started > 3 and sync_x.started == 0
    assert bg[0]["flights"] == bg_x.started
    assert bg[0]["exchanged_before_close"] < bg[0]["ticks"]
    # Small payloads: 3 ticks a step, a round every few steps (exchange_ticks is 4096).
    assert max(bg_x.sizes) <= HEAD + 3 * 64 and max(sync_x.sizes) <= HEAD + 3 * 64

    xchg = {name: load_run(tmp_path / name).ranks[0].exchanges for name in ("sync", "bg")}
    # The same rounds (ticks covered), each fed one step later in the background.
    assert list(xchg["sync"]["ticks"]) == list(xchg["bg"]["ticks"])
    periodic = slice(0, len(xchg["sync"]["step"]) - 1)  # the last round: at close, in both
    assert list(xchg["bg"]["step"][periodic]) == [s + 1 for s in xchg["sync"]["step"][periodic]]
    # Offline, the trace feeds the run model the same batches at the same steps: the same
    # signature as online (analyze warns when they differ).
    for name in ("sync", "bg"):
        online = json.loads((tmp_path / name / "phases-online.json").read_text())
        assert online["table"] == (sync if name == "sync" else bg)[0]["table"]
        a = analyze(tmp_path / name)
        assert not [w for w in a.warnings if "signature" in w], a.warnings
    # The evaluation points (signature, forecast history) come one step later.
    assert bg[0]["signature_step"] == sync[0]["signature_step"] + 1
    assert [s + 1 for s, _ in sync[0]["history"]] == [s for s, _ in bg[0]["history"]]


def test_early_stop_agreed_in_the_background_stops_every_rank_at_the_same_step(tmp_path):
    runs, xs = _train(tmp_path / "run", background=True, steps=400, early_stop=True,
                      signature_min_steps=10)  # fmt: skip
    assert xs.started > 0
    stops = {r["stopped_at"] for r in runs}
    assert len(stops) == 1 and None not in stops  # both ranks, the same step
    # The stop comes with the round after the one that carried rank 0's vote.
    assert runs[0]["signature_step"] is not None
    assert runs[0]["stopped_at"] + 1 > runs[0]["signature_step"]


def test_exit_with_a_round_in_flight_keeps_its_ticks_locally(tmp_path):
    exiting = []

    def exchange(a):
        return np.array(a) * 2  # as if a second, identical rank

    def start(a):
        a = np.array(a)

        def finish():
            assert not exiting, "at exit a round in flight must not be waited for"
            return a * 2

        return finish

    exchange.start = start
    lens = Lens(run_dir=tmp_path, rank=0, world_size=2, exchange=exchange, exchange_seconds=0)
    for i in range(40):
        lens.collective_begin("allreduce", 1024)
        lens.collective_end()
        lens.step_end()
        if i >= 8 and lens.session.in_flight:
            break
    assert lens.session.in_flight and lens.exchanged_ticks < lens.ticks
    exiting.append(True)
    lens._atexit()  # the interpreter exits: no collective any more
    assert lens.disabled is None
    assert lens.exchanged_ticks == lens.ticks == lens.steps
    assert lens.online.table().to_dict()["phases"]


def test_a_failing_background_round_disables_this_rank_and_training_goes_on(tmp_path, caplog):
    def exchange(a):
        return np.array(a) * 2

    def broken(a):
        def finish():
            raise RuntimeError("collective failed")

        return finish

    exchange.start = broken
    lens = Lens(run_dir=tmp_path, rank=0, world_size=2, exchange=exchange, exchange_seconds=0)
    for _ in range(10):
        lens.collective_begin("allreduce", 1024)
        lens.collective_end()
        lens.step_end()
    assert lens.disabled and "collective failed" in lens.disabled
    assert lens.session.exchange_fn is None and not lens.session.in_flight
    lens.close()
    assert lens.steps == 10 and lens.ticks == 10


@pytest.mark.parametrize("background", [False, True])
def test_a_disabled_rank_still_joins_every_round(tmp_path, background):
    xs = ThreadSum(2, background=background)
    done = [0, 0]

    def rank_main(rank: int) -> None:
        lens = Lens(run_dir=tmp_path, rank=rank, world_size=2, exchange=xs.for_rank(rank),
                    exchange_seconds=0)  # fmt: skip
        if rank == 1:
            lens.disable("injected")
        for _ in range(30):
            lens.collective_begin("allreduce", 256)
            lens.collective_end()
            lens.step_end()
        lens.close()
        done[rank] = lens.steps

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert done == [30, 30], "a rank was left waiting"


def test_rounds_space_out_with_the_elapsed_time(tmp_path):
    """Issue 33: a round costs every rank ~1.5-2 ms on cold caches, so rounds are also at
    least ``exchange_elapsed_share`` of the elapsed time apart: a long run's rounds grow with
    the logarithm of its length, not with it. A one-rank Lens on a simulated clock (100 ms
    steps, 2,000 s) exchanges at the steps the bare Cadence picks (the timeline replay's,
    too): one a second at first, then that share of the elapsed time apart."""
    from ailens.record.exchange import Cadence

    step_ns, steps = 100_000_000, 20_000
    clock = Clock()
    clock.now = 0
    lens = Lens(run_dir=tmp_path, clock=clock, exchange_seconds=1.0, total_steps=steps)
    share = lens.config.exchange_elapsed_share
    assert share == 0.005
    cadence = Cadence(1 << 62, 1.0, lens.config.signature_window // 2, elapsed_share=share)
    live, bare = [], []
    for k in range(1, steps + 1):
        clock.now = k * step_ns
        lens.step_end()
        if not live or lens.session.cadence.step_at != live[-1]:
            live.append(lens.session.cadence.step_at)
        if cadence.due(0, k, alone=True):
            cadence.done(0, k, clock.now, cadence.propose(k, clock.now))
            bare.append(k)
    lens.close()
    assert live[1:] == bare
    gaps = np.diff(bare)
    assert gaps[3] == 10  # 1 s of 100 ms steps while the share is below a second
    assert abs(gaps[-1] - share * 2000 / 0.1) <= 1  # 10 s apart at 2,000 s
    # each gap proposed at the exchange before it: at most the share of the elapsed time then
    assert all(g <= max(10, share * k) + 1 for g, k in zip(gaps, bare[:-1], strict=True))
    assert len(bare) < 2000 // 2  # 653; a 1 s cadence makes ~2,000
