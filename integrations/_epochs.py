"""The steps per epoch of a script that never said them: the data it trains from says them.

The training data is the loader (a torch ``DataLoader``, a ``tf.data`` dataset iterated
eagerly) during whose iteration the first training step ends; its length (``len(loader)``,
the dataset's cardinality) is taken as the steps per epoch (one step a batch), and the steps
between its first two iterations replace that at the first epoch boundary (a loop that stops
early). A torch loader also says how many batches it handed out (its iterator's
``_num_yielded``, read at the first three step ends): a script that steps its optimizer once
every k batches (gradient accumulation) has len / k steps per epoch from its third step.
The loaders' ``__iter__`` is wrapped while attached (one call per epoch, nothing per batch).
A schedule the script or a framework gave is left as it is. The forecast then shows when
the current epoch ends (``lens.forecast.epoch``), and the run's total once the epochs are
known too.

The epochs, or the steps, where nothing said them: the script's own loop
(``_script_loop``).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

from ._base import named_like
from ._script_loop import STEP_LOOP_CHECKS, epoch_loop, step_loop


class EpochWatch:
    """Mixin of an :class:`~ailens.integrations._base.Attachment` (before it in the bases)."""

    # (id, steps at its start, len, the iterator: a weak reference, so that a loader's
    # worker processes end with the script's last reference to it, the epoch loop around
    # its iteration: epochs left and where)
    _pending_loader: (
        tuple[int, int, int | None, Callable[[], Any], tuple[int, str] | None] | None
    ) = None
    _train_loader: tuple[int, int] | None = None  # (id, steps at its first iteration)
    _spe_guess: int | None = None  # the steps per epoch this watch set from a length
    # The script's loop around its first steps, (loop, index, elements left, where) at each
    # step end, until it shows whether the loop is the steps' (``_step_loop_seen``).
    _step_probe: list[tuple] | None = None
    _spe_learned = False
    # The training iterator and the batches it had handed out at each step's end, until the
    # third step's end says the batches per step.
    _batches_probe: tuple[Callable[[], Any], list[int]] | None = None

    def watch_torch_loaders(self) -> None:
        """Wrap ``torch.utils.data.DataLoader.__iter__`` while attached."""
        from torch.utils.data import DataLoader

        self._watch(DataLoader, _torch_length)

    def watch_tf_datasets(self) -> None:
        """Wrap ``tf.data.Dataset.__iter__`` (eager iteration) while attached."""
        import tensorflow as tf

        self._watch(tf.data.Dataset, _tf_length)

    def _watch(self, cls: type, length) -> None:
        real = cls.__iter__

        def __iter__(loader):
            it = real(loader)
            if self.attached and not self._spe_learned:
                try:
                    caller = sys._getframe(1)  # the script's frame that iterates it
                    self._loader_began(id(loader), lambda: length(loader), _weak(it), caller)
                except Exception as e:  # noqa: BLE001 - fail open
                    self.lens.disable(e)
            return it

        self.patches.set(cls, "__iter__", named_like(__iter__, real))
        self._step_probe = []

    def _loader_began(self, key: int, length, it: Callable[[], Any], caller=None) -> None:
        steps = self.lens.steps
        train = self._train_loader
        if train is None:
            said = steps or self._length_said()
            loop = None if said or caller is None else epoch_loop(caller)
            self._pending_loader = (key, steps, length(), it, loop)
            return
        if train[0] != key or steps <= train[1]:
            return  # another loader (an evaluation), or the same epoch begun again (a peek)
        # The training loader's second epoch: the steps of the first one.
        self._spe_learned = True
        n = steps - train[1]
        if self.lens.steps_per_epoch in (None, self._spe_guess) and n != self._spe_guess:
            self.lens.set_schedule(steps_per_epoch=n)
            self.lens.describe(steps_per_epoch_from="the first epoch boundary")

    def _step_end(self) -> None:
        if self._step_probe is not None:  # before the step counts: a total known by then
            try:  # spares the line asking for it
                self._step_loop_seen()
            except Exception as e:  # noqa: BLE001 - fail open: inside the optimizer's step
                self._step_probe = None
                self.lens.disable(e)
        super()._step_end()
        if self._pending_loader is not None:
            self._loader_trains()
        elif self._batches_probe is not None:
            self._batches_per_step()

    def _step_loop_seen(self) -> None:
        """At the first step ends while nothing said the length: the innermost ``for`` loop
        around the script's step (``step_loop``). A plain ``range`` loop whose variable moved
        one element a step at ``STEP_LOOP_CHECKS`` step ends in a row is the steps' loop: its
        elements left, the one whose step is ending counted, are the steps from this one on.
        Anything else ends the probe."""
        probe = self._step_probe
        if self._length_said():
            self._step_probe = None
            return
        seen = step_loop(sys._getframe(1))  # from _step_end
        if seen is None or (probe and (probe[-1][0] != seen[0] or probe[-1][1] + 1 != seen[1])):
            self._step_probe = None
            return
        probe.append(seen)
        if len(probe) < STEP_LOOP_CHECKS:
            return
        self._step_probe = None
        _, _, left, where = seen
        self.lens.set_schedule(total_steps=self.lens.steps + left)
        self.lens.describe(total_steps_from=f"the script's loop {where}")
        self._loop_notice(f"{left - 1} steps to come", where)

    def _loader_trains(self) -> None:
        """The first step ended during the pending loader's iteration: it trains."""
        key, start, n, it, loop = self._pending_loader
        self._pending_loader = None
        self._train_loader = (key, start)
        if n and self.lens.steps_per_epoch is None:
            self._spe_guess = n
            self.lens.set_schedule(steps_per_epoch=n)
            self.lens.describe(steps_per_epoch_from="the training data's length")
            drawn = _batches_drawn(it())
            if drawn is not None:
                self._batches_probe = (it, [drawn])
        if loop is not None and not self._length_said():
            epochs, where = loop
            self.lens.set_schedule(epochs=epochs)
            self.lens.describe(epochs_from=f"the script's loop {where}")
            self._loop_notice(f"{epochs} epochs to run", where)

    def _length_said(self) -> bool:
        """Whether the run's length is known already: its total steps, or its epochs."""
        return self.lens.total_steps is not None or bool(self.lens.schedule.epochs)

    def _loop_notice(self, what: str, where: str) -> None:
        """Rank 0's line for a length read from the script's loop, and how to correct it."""
        self.notice(
            "ailens: %s, from the script's loop %s (not the run's length? pass "
            "total_steps=N to the attach line)",
            what,
            where,
        )

    def _batches_per_step(self) -> None:
        """The batches the second and third steps took: the same k > 1 (gradient
        accumulation; a step the optimizer skipped, as a mixed-precision scaler does after
        an overflow, takes more batches once, not twice alike) divides the loader's length,
        until the first epoch boundary says the steps themselves."""
        it, drawn = self._batches_probe
        n = _batches_drawn(it())
        if n is None or self._spe_learned:
            self._batches_probe = None
            return
        drawn.append(n)
        if len(drawn) < 3:
            return
        self._batches_probe = None
        k, again = drawn[1] - drawn[0], drawn[2] - drawn[1]
        guess = self._spe_guess
        if k > 1 and k == again and self.lens.steps_per_epoch == guess and guess // k >= 1:
            self._spe_guess = guess // k
            self.lens.set_schedule(steps_per_epoch=guess // k)
            self.lens.describe(
                steps_per_epoch_from=f"the training data's length over the {k} batches a step took"
            )


def _weak(it: Any) -> Callable[[], Any]:
    """A weak reference to ``it``: called, the iterator, or None once it is gone (always
    None for an object that takes no weak reference)."""
    try:
        return weakref.ref(it)
    except TypeError:
        return lambda: None


def _batches_drawn(it: Any) -> int | None:
    """The batches a loader's iterator has handed out: torch's ``_num_yielded`` (every
    ``DataLoader`` iterator since torch 1.2); None where the iterator does not count them."""
    n = getattr(it, "_num_yielded", None)
    return n if isinstance(n, int) else None


def _torch_length(loader: Any) -> int | None:
    try:
        return len(loader)
    except TypeError:  # an iterable dataset: no length
        return None


def _tf_length(dataset: Any) -> int | None:
    n = int(dataset.cardinality())  # -1: infinite, -2: unknown
    return n if n > 0 else None
