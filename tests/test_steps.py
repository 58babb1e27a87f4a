"""ailens.record.steps: where steps end in a sequence of collectives, on one rank and on two ranks
that must agree (two threads summing their votes, as the Lens's exchange does)."""

import threading

import numpy as np
import pytest

from ailens.record.steps import GIVE_UP, StepFinder

P, E = ("bcast", 0), ("barrier", 0)
A, B, C = ("allreduce", 8), ("allgather", 256), ("alltoall", 16)
# k-means: three allreduces told apart by their bytes (the adapter adds the calling line)
S, N, V = ("allreduce", 1024), ("allreduce", 32), ("allreduce", 0)


def steps(seq, finder=None) -> tuple[list[int], StepFinder]:
    """Observation indices before which a step ends, with the last one at close as len(seq)."""
    f = finder or StepFinder()
    ends = [i for i, key in enumerate(seq) if f.observe(key[0], key)]
    if f.ends_last_step():
        ends.append(len(seq))
    return ends, f


def test_loop_found_in_its_second_iteration():
    # k-means: a broadcast, then 3 collectives per iteration, 4 iterations: 4 steps. The
    # first ends one collective late (the loop is known at the 2nd key of iteration 2).
    ends, f = steps([P] + [S, N, V] * 4)
    assert ends == [5, 7, 10, 13] and (f.period, f.start, f.merged) == (3, 1, 0)
    # One collective per iteration: known at the second, on time.
    ends, f = steps([P] + [A] * 4)
    assert ends == [2, 3, 4, 5] and f.period == 1


def test_collectives_after_the_loop_stay_in_the_last_step():
    ends, _ = steps([P] + [A, B] * 4 + [E])
    assert ends == [4, 5, 7, 10]  # the barrier after the loop does not start a step
    ends, _ = steps([P] + [A, B] * 4 + [A])  # an epilogue like the loop's first op
    assert ends == [4, 5, 7, 9]  # ends the last iteration; itself no whole step


def test_an_interrupted_iteration_keeps_its_extra_collective():
    # Once followed, a barrier inside an iteration stays in its step: one step per A.
    seq = [P] + [A, B] * 8 + [A, E, B] + [A, B] * 3
    ends, _ = steps(seq)
    assert ends == [4, 5, 7, 9, 11, 13, 15, 17, 20, 22, 24, len(seq)]


def test_a_changed_loop_is_found_again():
    # 20 iterations of one loop, then 60 of another with other ops: 64 observations after
    # the last step end the search resumes (at 39 + 65), and commits at its next vote (past
    # 64 observations, every 8th), then follows the new loop to the end.
    seq = [P] + [A, B] * 20 + [E, C] * 60
    ends, f = steps(seq)
    assert (f.period, f.start) == (2, 104)
    assert ends[18:] == [39] + list(range(112, len(seq), 2))


def test_repeated_keys_inside_an_iteration_are_corrected():
    # A A A B: "A A" looks like a loop of one; the B that follows withdraws it.
    ends, f = steps([A, A, A, E] * 4)
    assert f.period == 4 and ends[-3:] == [8, 12, 16]
    assert len(ends) == 4 + 2  # two extra steps marked before the withdrawal, no more
    # A prologue of equal broadcasts: the same, then the loop is found.
    ends, f = steps([P] * 4 + [A, B, C] * 5)
    assert (f.period, f.start) == (3, 4) and ends[-4:] == [10, 13, 16, 19]
    ends, f = steps([A, B, A, C] * 4)  # a key repeating within the iteration: no false start
    assert ends == [5, 8, 12, 16] and f.period == 4


def test_no_pattern_gives_up_quietly():
    ends, f = steps([("ar", i) for i in range(GIVE_UP + 10)])
    assert ends == [] and not f.active and f.period == 0


def test_stop_ends_inference():
    f = StepFinder()
    f.stop()
    assert steps([A] * 10, f)[0] == [] and not f.active


def two_ranks(seq0, seq1):
    """Run two finders in lockstep threads; their votes are summed like an allreduce."""
    barrier = threading.Barrier(2)
    slots: list = [None, None]

    def agree_for(rank):
        def agree(values):
            slots[rank] = np.array(values)
            barrier.wait(timeout=10)
            total = slots[0] + slots[1]
            barrier.wait(timeout=10)
            return total

        return agree

    out: list = [None, None]

    def run(rank, seq):
        out[rank] = steps(seq, StepFinder(agree_for(rank)))

    threads = [threading.Thread(target=run, args=(r, s)) for r, s in enumerate((seq0, seq1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive(), "a rank waited on a vote the other never joined"
    return out


def test_ranks_commit_together():
    (e0, f0), (e1, f1) = two_ranks([P] + [A, B, C] * 6, [P] + [A, B, C] * 6)
    assert e0 == e1 == [5, 7, 10, 13, 16, 19] and f0.period == f1.period == 3


def test_ranks_that_disagree_mark_no_step_and_never_hang():
    # Rank 1's bytes differ every iteration (e.g. an uneven allgatherv): no common period.
    seq1 = [P] + [x for i in range(40) for x in (A, ("ar", 100 + i), C)]
    (e0, f0), (e1, f1) = two_ranks([P] + [A, B, C] * 40, seq1)
    assert e0 == e1 == [] and f0.period == f1.period == 0


@pytest.mark.parametrize("prologue", [1, 4])
def test_ranks_whose_keys_differ_outside_the_loop_agree_on_it(prologue):
    # The same ops on both ranks, but a pickled broadcast records 0 bytes on the non-root
    # rank: rank 0 alone sees "P P P P" as a loop of one; they agree only on the real loop.
    seq0 = [("bcast", 4)] * prologue + [A, B, C] * 8
    seq1 = [("bcast", 0)] * prologue + [A, B, C] * 8
    (e0, f0), (e1, f1) = two_ranks(seq0, seq1)
    assert e0 == e1 and (f0.period, f0.start) == (f1.period, f1.start) == (3, prologue)
    assert e0[-7:] == [prologue + 3 * i for i in range(2, 9)]
