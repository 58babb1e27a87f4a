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

The epochs: where nothing said them, the script's own loop says them. At the training
data's first iteration, the innermost ``for`` loop around it, in the frame that iterates it
or in one of its two callers (a method per epoch, called from the loop), is the epoch loop
(``epoch_loop``). When it is ``for NAME in range(...)``, its bounds are read from the
script's bytecode and frame (names, attributes read without running code, a plain dict's
or list's items, constants, and ``+ - * //`` of them), and the epochs still to run, the
current one counted, are the schedule's ``epochs`` (``epochs_from`` in the run's info says
which loop). Anything else (a ``while`` loop, ``tqdm(range(...))``, a bound from a call)
says nothing, and no loop further up is taken for it. A loop of steps
(``for step in range(...)`` around the optimizer's step, its data drawn with ``next``) says
the total the same way once it moved one element a step at ``STEP_LOOP_CHECKS`` step ends
in a row (``total_steps_from``).
"""

from __future__ import annotations

import builtins
import dis
import inspect
import os
import sys
import sysconfig
import weakref
from collections.abc import Callable
from typing import Any

import ailens

from ._base import named_like


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
            said = steps or self.lens.total_steps is not None or self.lens.schedule.epochs
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
        super()._step_end()
        if self._pending_loader is not None:
            self._loader_trains()
        elif self._batches_probe is not None:
            self._batches_per_step()
        if self._step_probe is not None:
            self._step_loop_seen()

    def _step_loop_seen(self) -> None:
        """At the first step ends while nothing said the length: the innermost ``for`` loop
        around the script's step (``step_loop``). A plain ``range`` loop whose variable moved
        one element a step at ``STEP_LOOP_CHECKS`` step ends in a row is the steps' loop: its
        elements left are the steps to come. Anything else ends the probe."""
        probe = self._step_probe
        if self.lens.total_steps is not None or self.lens.schedule.epochs:
            self._step_probe = None
            return
        seen = step_loop(sys._getframe(1))
        if seen is None or (probe and (probe[-1][0] != seen[0] or probe[-1][1] + 1 != seen[1])):
            self._step_probe = None
            return
        probe.append(seen)
        if len(probe) < STEP_LOOP_CHECKS:
            return
        self._step_probe = None
        _, _, left, where = seen
        self.lens.set_schedule(total_steps=self.lens.steps + left - 1)
        self.lens.describe(total_steps_from=f"the script's loop {where}")
        self.notice(
            "ailens: %d steps to come, from the script's loop %s (not the run's length? pass "
            "total_steps=N to the attach line)",
            left - 1,
            where,
        )

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
        if loop is not None and self.lens.total_steps is None and not self.lens.schedule.epochs:
            epochs, where = loop
            self.lens.set_schedule(epochs=epochs)
            self.lens.describe(epochs_from=f"the script's loop {where}")
            self.notice(
                "ailens: %d epochs to run, from the script's loop %s (not the run's length? "
                "pass total_steps=N to the attach line)",
                epochs,
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


# How far up from the frame that iterates the training data the epoch loop may be: that
# frame (``for epoch in range(E): for batch in loader:``), its caller (a method per epoch,
# the DDP tutorial's ``_run_epoch``) and the caller's (``main`` calling ``train(epoch)``).
# Further up a loop is likelier another thing's (trials, folds).
EPOCH_LOOP_DEPTH = 3
_BINARY = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "//": int.__floordiv__}
_BINARY_310 = {"BINARY_ADD": "+", "BINARY_SUBTRACT": "-", "BINARY_MULTIPLY": "*",
               "BINARY_FLOOR_DIVIDE": "//"}  # fmt: skip
_SKIP = {"PRECALL", "PUSH_NULL", "CACHE", "NOP", "EXTENDED_ARG", "NOT_TAKEN"}
# A step's loop at this many step ends in a row, one element a step, is the steps' loop.
STEP_LOOP_CHECKS = 3
# Where code is not the script's: the standard library, installed packages, ailens.
_LIBRARY = tuple(
    {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {os.path.dirname(os.path.abspath(__file__)) + os.sep,
       os.path.dirname(os.path.abspath(ailens.__file__)) + os.sep}
)  # fmt: skip


def epoch_loop(frame: Any, depth: int = EPOCH_LOOP_DEPTH) -> tuple[int, str] | None:
    """The epochs still to run, the current one counted, of the script's epoch loop around
    ``frame`` (``innermost_loop``), with where it is."""
    found = innermost_loop(frame, depth)
    return None if found is None else (found[2], found[3])


def step_loop(frame: Any, depth: int = EPOCH_LOOP_DEPTH) -> tuple | None:
    """``innermost_loop`` around the script's frame that ``frame`` was called from (the first
    one up that is not the standard library's, an installed package's or ailens's: the
    framework's step, its hooks and wrappers are between)."""
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARY):
        frame = frame.f_back
    return None if frame is None else innermost_loop(frame, depth)


def innermost_loop(frame: Any, depth: int = EPOCH_LOOP_DEPTH) -> tuple | None:
    """The innermost ``for NAME in range(...)`` loop around ``frame``'s current instruction,
    or else around its callers' (``depth`` frames in all): (the loop, its element's index,
    the elements left with the current one, where it is: ``for epoch in range(0, 50) in
    train() (script.py:72)``); None where there is none, where the innermost loop is not a plain
    ``range`` (``tqdm(range(E))``, a list: the epochs' loop, unread; callers further up are
    not searched past it) or its bounds are not plain values."""
    for _ in range(depth):
        if frame is None:
            return None
        try:
            looped, found = _range_loop(frame)
        except Exception:  # noqa: BLE001 - bytecode of another Python: the loop says nothing
            return None
        if looped:  # the innermost loop around the iteration: the epochs', read or not
            return found
        frame = frame.f_back
    return None


def _range_loop(frame: Any) -> tuple[bool, tuple | None]:
    """Whether a ``for`` loop encloses the frame's current instruction, and what the
    innermost one says when it is a plain ``range`` loop."""
    code, at = frame.f_code, frame.f_lasti
    # A big loop's FOR_ITER has an EXTENDED_ARG before it (dis gives the target on the
    # FOR_ITER): only what computes values is kept.
    ins = [x for x in dis.get_instructions(code) if x.opname not in _SKIP]
    loop = None  # the innermost: loops nest, so the last enclosing one in the code
    for i, x in enumerate(ins):
        if x.opname == "FOR_ITER" and isinstance(x.argval, int) and x.offset < at < x.argval:
            loop = i
    if loop is None:
        return False, None
    return True, _range_epochs(frame, ins, loop)


def _range_epochs(frame: Any, ins: list, loop: int) -> tuple | None:
    """The loop at ``ins[loop]`` (its FOR_ITER), when it is ``for NAME in range(...)`` with
    plain bounds: (the loop, the index of its element, the elements left, where)."""
    code = frame.f_code
    if loop < 3 or ins[loop - 1].opname != "GET_ITER":
        return None
    bounds = _range_args(frame, ins[: loop - 1])
    store = ins[loop + 1]
    if bounds is None or not store.opname.startswith("STORE_"):
        return None
    current = _value(frame, store.argval, local=store.opname != "STORE_GLOBAL")
    r = range(*bounds)
    if not isinstance(current, int) or isinstance(current, bool) or current not in r:
        return None
    line = getattr(getattr(ins[loop], "positions", None), "lineno", None) or frame.f_lineno
    file = code.co_filename.rsplit("/", 1)[-1]
    where = (
        f"for {store.argval} in range({', '.join(map(str, bounds))}) in {code.co_name}() "
        f"({file}:{line})"
    )
    index = r.index(current)
    return (
        (code.co_filename, code.co_firstlineno, ins[loop].offset, bounds),
        index,
        len(r) - index,
        where,
    )


def _range_args(frame: Any, before: list) -> tuple[int, ...] | None:
    """The arguments of the ``range(...)`` call that ``before`` ends with: the nearest load
    of the builtin ``range``, then plain loads and arithmetic up to the call."""
    start = next(
        (k for k in range(len(before) - 1, -1, -1)
         if before[k].opname in ("LOAD_GLOBAL", "LOAD_NAME") and before[k].argval == "range"),
        None,
    )  # fmt: skip
    if start is None:
        return None
    if _value(frame, "range", local=before[start].opname == "LOAD_NAME") is not range:
        return None  # the script's own range
    stack: list = []
    for x in before[start + 1 :]:
        op = x.opname
        if op in ("CALL", "CALL_FUNCTION"):
            if x is not before[-1] or x.arg != len(stack) or not 1 <= len(stack) <= 3:
                return None
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in stack):
                return None
            return tuple(stack)
        if op in ("LOAD_CONST", "LOAD_SMALL_INT"):
            stack.append(x.argval)
        elif op.startswith("LOAD_FAST") or op == "LOAD_DEREF":
            names = x.argval if isinstance(x.argval, tuple) else (x.argval,)
            stack.extend(_value(frame, n, local=True) for n in names)
        elif op in ("LOAD_GLOBAL", "LOAD_NAME"):
            stack.append(_value(frame, x.argval, local=op == "LOAD_NAME"))
        elif op == "LOAD_ATTR" and stack:
            stack.append(_attribute(stack.pop(), x.argval))
        elif (op == "BINARY_SUBSCR" or x.argrepr == "[]") and len(stack) >= 2:
            key = stack.pop()
            stack.append(_item(stack.pop(), key))
        elif (op == "BINARY_OP" or op in _BINARY_310) and len(stack) >= 2:
            b, a = stack.pop(), stack.pop()
            fn = _BINARY.get(_BINARY_310.get(op, x.argrepr))
            ok = fn and all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b))
            stack.append(fn(a, b) if ok and (b or fn is not int.__floordiv__) else None)
        else:
            return None
    return None


_MISSING = object()


def _value(frame: Any, name: str, *, local: bool) -> Any:
    """``name`` as the frame sees it: a local (or a module's name), a global, a builtin."""
    if local:
        v = frame.f_locals.get(name, _MISSING)
        if v is not _MISSING:
            return v
    v = frame.f_globals.get(name, _MISSING)
    if v is not _MISSING:
        return v
    return frame.f_builtins.get(name, getattr(builtins, name, None))


def _item(container: Any, key: Any) -> Any:
    """``container[key]`` of a plain dict, list or tuple (no code of the script runs)."""
    if type(container) is dict:
        return container.get(key)
    if (
        type(container) in (list, tuple)
        and type(key) is int
        and -len(container) <= key < len(container)
    ):
        return container[key]
    return None


def _attribute(obj: Any, name: str) -> Any:
    """``obj.name`` without running code (a property or ``__getattr__`` gives None)."""
    try:
        v = inspect.getattr_static(obj, name)
    except AttributeError:
        return None
    return None if hasattr(v, "__get__") and not isinstance(v, int) else v
