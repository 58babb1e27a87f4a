"""What a training script's own loop says about its length, read from its running frames.

The epochs: at the training data's first iteration (``_epochs.EpochWatch``), the innermost
loop around it, in the frame that iterates it or in one of its two callers (a method per
epoch, called from the loop), is the epoch loop (``epoch_loop``). When it is ``for NAME in
range(...)``, the only loop there and in the script's frames above, its bounds are read
from the script's bytecode and frame (names, attributes read without running code, a plain
dict's or list's items, constants, and ``+ - * //`` of them), and the epochs still to run,
the current one counted, are the schedule's ``epochs`` (``epochs_from`` in the run's info
says which loop).

The steps: a loop of steps (``for step in range(...)`` around the optimizer's step, its
data drawn with ``next``) says the total the same way (``step_loop``), once it moved one
element a step at ``STEP_LOOP_CHECKS`` step ends in a row (``total_steps_from``).

Anything else says nothing: a ``while`` loop (the search stops there), ``tqdm(range(...))``,
a bound from a call, a loop inside another (folds or trials around the epochs, the epochs
around a loop of steps: which one is the run's length is not known).
"""

from __future__ import annotations

import builtins
import dis
import inspect
import os
import sysconfig
from typing import Any

import ailens

# How far up from the frame that iterates the training data the epoch loop may be: that
# frame (``for epoch in range(E): for batch in loader:``), its caller (a method per epoch,
# the DDP tutorial's ``_run_epoch``) and the caller's (``main`` calling ``train(epoch)``).
# Further up a loop is likelier another thing's (trials, folds).
EPOCH_LOOP_DEPTH = 3
_BINARY = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "//": int.__floordiv__}
_BINARY_310 = {"BINARY_ADD": "+", "BINARY_SUBTRACT": "-", "BINARY_MULTIPLY": "*",
               "BINARY_FLOOR_DIVIDE": "//"}  # fmt: skip
_SKIP = {"PRECALL", "PUSH_NULL", "CACHE", "NOP", "EXTENDED_ARG", "NOT_TAKEN"}
_JUMPS = set(getattr(dis, "hasjump", ())) | set(dis.hasjrel) | set(dis.hasjabs)
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
    while frame is not None and not _script(frame):
        frame = frame.f_back
    return None if frame is None else innermost_loop(frame, depth)


def innermost_loop(frame: Any, depth: int = EPOCH_LOOP_DEPTH) -> tuple | None:
    """The innermost loop around ``frame``'s current instruction, or else around its
    callers' (``depth`` frames in all), when it is ``for NAME in range(...)`` with plain
    bounds and the only loop there and in the script's frames above: (the loop, its
    element's index, the elements left with the current one, where it is: ``for epoch in
    range(0, 50) in train() (script.py:72)``). None where there is none, where it is a
    ``while`` loop, ``tqdm(range(E))`` or a list (callers further up are not searched past
    it), where its bounds are not plain values, or where another loop encloses it (folds,
    trials, the epochs around a loop of steps: which loop the run's length is, is not
    known)."""
    for _ in range(depth):
        if frame is None:
            return None
        try:
            ins, loops = _enclosing_loops(frame)
            if loops:
                if len(loops) > 1 or loops[0] is None or _looped_above(frame.f_back):
                    return None
                return _range_position(frame, ins, loops[0])
        except Exception:  # noqa: BLE001 - bytecode of another Python: the loop says nothing
            return None
        frame = frame.f_back
    return None


def _enclosing_loops(frame: Any) -> tuple[list, list[int | None]]:
    """The frame's instructions and the loops around its current one, innermost first: the
    index of a ``for`` loop's FOR_ITER (it jumps forward past its body), None for a
    ``while`` loop (a jump goes back over the current instruction; a body that returns has
    none, and is no loop)."""
    at = frame.f_lasti
    # A big loop's jumps have an EXTENDED_ARG before them: only what computes values is kept
    # (dis gives the target on the jump itself).
    ins = [x for x in dis.get_instructions(frame.f_code) if x.opname not in _SKIP]
    starts: dict[int, int | None] = {}
    for i, x in enumerate(ins):
        if x.opcode not in _JUMPS or not isinstance(x.argval, int):
            continue
        if x.opname == "FOR_ITER" and x.offset < at < x.argval:
            starts[x.offset] = i
        elif x.argval <= at < x.offset:  # back to the start of a loop around
            k = next(k for k, y in enumerate(ins) if y.offset >= x.argval)
            starts.setdefault(ins[k].offset, k if ins[k].opname == "FOR_ITER" else None)
    return ins, [starts[o] for o in sorted(starts, reverse=True)]


def _script(frame: Any) -> bool:
    """Whether ``frame`` runs the script's code, not the standard library's, an installed
    package's or ailens's."""
    return not frame.f_code.co_filename.startswith(_LIBRARY)


def _looped_above(frame: Any) -> bool:
    """Whether a loop encloses the current instruction of a script frame from ``frame`` up
    (the standard library's, installed packages' and ailens's frames are not the script's)."""
    while frame is not None:
        if _script(frame) and _enclosing_loops(frame)[1]:
            return True
        frame = frame.f_back
    return False


def _range_position(frame: Any, ins: list, loop: int) -> tuple | None:
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
