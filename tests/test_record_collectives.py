"""``Lens.record_collectives``: collectives timed elsewhere (inside a TF graph) recorded after
the fact, in tick order, with their own times, steps and a share of the work; fail-open."""

import logging

import numpy as np
from test_lens import FakeClock, FakeCounter

from ailens import Lens, load_run


def test_recorded_collectives_keep_their_times_steps_and_share_the_work(tmp_path):
    clock, counter = FakeClock(), FakeCounter()
    with Lens(run_dir=tmp_path, clock=clock, work_counter=counter, chunk_events=4) as lens:
        t0 = clock.now
        lens.collective_begin("broadcast", 8)  # an eager one first, through the hot path
        lens.collective_end()
        lens.step_end()
        lens.step_end()
        counter.value += 3_000  # the work since that broadcast
        # Two calls of a graph with two collectives each, timed by the graph; the second
        # collective of each call began while the first ran (no time before it).
        b = np.array([1_000, 1_500, 5_000, 5_200]) + t0
        e = np.array([2_000, 2_500, 6_000, 6_500]) + t0
        lens.record_collectives(
            ["allreduce", "allgather"] * 2, np.array([16, 32, 16, 32]), b, e, np.array([0, 0, 1, 1])
        )
        assert lens.ticks == 5
    ev = load_run(tmp_path).ranks[0].events
    assert list(ev["step"]) == [0, 0, 0, 1, 1]
    assert list(ev["nbytes"]) == [8, 16, 32, 16, 32]
    # Times as given, on the Lens clock (t_begin relative to the Lens start, like the rest).
    assert list(ev["t_end"][1:] - ev["t_begin"][1:]) == [1_000, 1_000, 1_000, 1_300]
    assert list(np.diff(ev["t_begin"][1:])) == [500, 3_500, 200]
    # The 3_000 of work since the last counter read, split by the time before each (from the
    # latest end recorded this way, at first the Lens start); none to those begun inside
    # the previous one.
    gap0, gap2 = int(ev["t_begin"][1]), 5_000 - 2_500
    share = ev["work"][1:]
    assert share[1] == share[3] == 0 and 2_998 <= share.sum() <= 3_000
    assert abs(share[0] - 3_000 * gap0 / (gap0 + gap2)) <= 1
    assert abs(share[2] - 3_000 * gap2 / (gap0 + gap2)) <= 1


def test_a_fault_in_recording_disables_but_counts_every_tick(tmp_path, caplog):
    counter = FakeCounter()
    lens = Lens(run_dir=tmp_path, work_counter=counter)
    times = np.arange(3, dtype=np.int64)
    lens.record_collectives(["allreduce"] * 3, times, times, times + 1)
    counter.fail_after = counter.reads  # the counter breaks: ailens must not
    with caplog.at_level(logging.WARNING, logger="ailens"):
        lens.record_collectives(["allreduce"] * 4, times[:1].repeat(4), times[:1].repeat(4),
                                times[:1].repeat(4))  # fmt: skip
        lens.record_collectives(["allreduce"] * 2, times[:2], times[:2], times[:2])
        lens.close()
    assert "boom" in lens.disabled and lens.ticks == 9  # still counted for the exchange
    assert len([r for r in caplog.records if "disabled" in r.getMessage()]) == 1
    assert load_run(tmp_path).ranks[0].n_events == 3  # what was recorded before is kept
