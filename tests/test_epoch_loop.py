"""The epochs a script's own loop says (``integrations._epochs.epoch_loop``, issue 30, 9): the
innermost ``for NAME in range(...)`` around the training data's iteration, in its frame or
up to two callers up, read from the running script's bytecode and frame. Real frames of
real functions; the integration's use of it runs under torchrun in
``test_integration_torch.py``."""

import argparse
import sys

from integrations._script_loop import epoch_loop

args = argparse.Namespace(epochs=4)


def here():
    """What the loop around the caller's current line says."""
    return epoch_loop(sys._getframe(1))


def test_the_loop_around_the_iteration_in_the_same_frame():
    seen = []
    for _epoch in range(1, args.epochs + 1):  # pytorch/examples' mnist
        seen.append(here())
    assert [s[0] for s in seen] == [4, 3, 2, 1]
    assert seen[0][1].startswith("for _epoch in range(1, 5) in test_the_loop_around")


class Trainer:
    """The DDP tutorial's shape: the epoch loop calls a method per epoch, which iterates."""

    def __init__(self, epochs_run: int) -> None:
        self.epochs_run = epochs_run

    def loop(self, max_epochs: int) -> list:
        seen = []
        for _epoch in range(self.epochs_run, max_epochs):
            seen.append(self._run_epoch())
        return seen

    def _run_epoch(self):
        return here()


def test_the_loop_in_a_caller_and_a_resumed_run_counts_the_epochs_left():
    seen = Trainer(epochs_run=2).loop(5)
    assert [s[0] for s in seen] == [3, 2, 1]
    assert seen[0][1].startswith("for _epoch in range(2, 5) in loop()")


def test_a_loop_inside_another_says_nothing():
    """Folds or trials around the epochs: which loop is the run's length is not known."""
    for _fold in range(3):
        for _epoch in range(10):
            assert here() is None
            return


def run_epoch():
    return here()


def test_a_loop_around_the_caller_of_the_epochs_loop_says_nothing():
    def epochs():
        for _epoch in range(10):
            return run_epoch()

    assert epochs()[0] == 10
    for _trial in range(2):
        assert epochs() is None
        break


def test_a_while_loop_ends_the_search():
    def epochs():
        epoch = 0
        while epoch < 3:  # the epochs' loop, unread
            epoch += 1
            found = run_epoch()
            if epoch == 1:
                return found

    for _trial in range(5):  # a caller's loop of another thing
        assert epochs() is None
        break


def test_what_is_not_a_plain_range_loop_says_nothing():
    epoch = 0
    while epoch < 3:  # a while loop
        assert here() is None
        epoch += 1
    for _e in enumerate(range(3)):  # not range itself
        assert here() is None
        break
    for _e in range(len(args.__dict__) + 2):  # a bound from a call
        assert here() is None
        break
    for _e in [0, 1]:
        assert here() is None
        break


def test_a_property_is_not_run():
    ran = []

    class Config:
        @property
        def epochs(self):
            ran.append(1)
            return 3

    cfg = Config()
    for _e in range(cfg.epochs):  # the property ran once, for the loop, not for ailens
        assert here() is None
    assert len(ran) == 1


def test_a_shadowed_range_is_not_a_range():
    def range(n):  # noqa: A001 - the script's own range
        return [0] * n

    for _e in range(2):
        assert here() is None


def test_no_further_than_two_callers_up():
    """(Its loop body is long enough in pytest's rewritten asserts for an EXTENDED_ARG before
    the FOR_ITER: the reader skips it.)"""

    def one():
        return two()

    def two():
        return three()

    def three():
        return here()

    for epoch in range(6):
        assert one() is None  # here() <- three <- two <- one: the loop is 4 frames up
        assert two()[0] == 6 - epoch
        break


def test_a_plain_dicts_item_is_read_and_a_mappings_is_not():
    config = {"train": {"epochs": 5}}
    for _epoch in range(config["train"]["epochs"]):
        assert here()[0] == 5
        break
    got = []

    class Config(dict):
        def __getitem__(self, key):
            got.append(key)
            return dict.__getitem__(self, key)

    custom = Config(epochs=5)
    for _epoch in range(custom["epochs"]):  # ran once, for the loop, not for ailens
        assert here() is None
        break
    assert got == ["epochs"]


def test_the_search_stops_at_the_first_loop_even_one_it_cannot_read():
    def run_epochs():
        for _epoch in iter(range(3)):  # the epochs' loop, not a plain range
            return here()

    for _trial in range(5):  # a caller's loop of another thing: not the epochs
        assert run_epochs() is None
        break
