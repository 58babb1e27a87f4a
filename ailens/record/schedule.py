"""The run's schedule: what the framework or script says the run will do (``Lens.set_schedule``),
the one spelling of its keys. The Lens records it as a ``schedule`` mark
(:meth:`Schedule.mark`), the forecast reads it back from the marks (:meth:`Schedule.merged`),
a log's timeline carries it (``model.timeline.Timeline.schedule``, keys :data:`SCHEDULE_KEYS`);
:class:`EvalPlan` says where its evaluations come."""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["SCHEDULE_KEYS", "EvalPlan", "Schedule", "keyword_signature"]


@dataclass(frozen=True)
class EvalPlan:
    """Where the announced evaluations come, in steps done (an evaluation "at k" runs after
    the k-th step ends): every ``period`` steps from ``start`` (``period`` may be fractional:
    each lands on the nearest step), and at the listed steps ``at``; the union."""

    period: float | None = None
    start: float = 0.0
    at: tuple[int, ...] = ()

    def _j_range(self, lo: int, hi: int) -> tuple[int, int]:
        # Position j is floor(start + j * period + 0.5): j's whose position is in [lo, hi].
        p, eps = self.period, 1e-9
        j_lo = max(0, math.ceil((lo - 0.5 - self.start) / p - eps))
        j_hi = math.ceil((hi + 0.5 - self.start) / p - eps) - 1
        return j_lo, j_hi

    def periodic_at(self, k: int) -> bool:
        if not self.period:
            return False
        j_lo, j_hi = self._j_range(k, k)
        return j_hi >= j_lo

    def count(self, lo: int, hi: int) -> int:
        """Announced evaluations at steps ``lo..hi`` (inclusive)."""
        if hi < lo:
            return 0
        n = 0
        if self.period:
            j_lo, j_hi = self._j_range(lo, hi)
            n = max(j_hi - j_lo + 1, 0)
        return n + sum(lo <= k <= hi and not self.periodic_at(k) for k in self.at)

    def spacing(self) -> float:
        """Steps between two evaluations, on average."""
        if self.period:
            return self.period
        return self.at[-1] / len(self.at) if self.at and self.at[-1] > 0 else 1.0

    def describe(self) -> str:
        parts = []
        if self.period:
            period = f"{self.period:g}"
            parts.append(
                f"every {period} steps"
                + (f" from step {self.start:g}" if self.start != self.period else "")
            )
        if self.at:
            shown = ", ".join(str(k) for k in self.at[:4]) + (", ..." if len(self.at) > 4 else "")
            parts.append(f"at steps {shown}")
        return " and ".join(parts)


# Kinds of keys: step counts (whole, > 0), lists, starts (may be 0), fractional values.
_LISTS = ("eval_at_steps", "eval_at_epochs")
_STARTS = ("eval_start_step", "eval_start_epoch")
_FLOATS = ("eval_every_epochs", "eval_start_epoch", "eval_at_epochs")


@dataclass(frozen=True)
class Schedule:
    """What the framework or script said the run will do (None or empty: unknown). These
    fields are the keywords of ``Lens.set_schedule``, the keys of a ``schedule`` mark in the
    trace and of a timeline's schedule.

    Evaluation positions count steps done: an evaluation "at step k" runs after the k-th step
    ends; "at epoch e" after ``e x steps_per_epoch`` steps. Periodic evaluations come every
    ``eval_every_steps`` steps or ``eval_every_epochs`` epochs (a float: a period that is not
    a whole number of steps lands on the nearest step), from ``eval_start_step`` /
    ``eval_start_epoch`` (default: one period in); listed ones at ``eval_at_steps`` /
    ``eval_at_epochs``. Both may be given: the union is scheduled. ``eval_samples`` (samples
    one evaluation runs) and ``samples_per_step`` (training samples per step: the global
    batch) price an evaluation not seen yet from the training's cost per sample;
    ``checkpoint_bytes`` (the state one checkpoint writes: the model's weights and buffers,
    the optimizer's state) a checkpoint not seen yet from a stated write rate."""

    total_steps: int | None = None
    steps_per_epoch: int | None = None
    epochs: int | None = None
    eval_every_epochs: float | None = None
    eval_every_steps: int | None = None
    eval_steps: int | None = None  # batches per evaluation
    checkpoint_every_steps: int | None = None
    eval_start_step: int | None = None
    eval_start_epoch: float | None = None
    eval_at_steps: tuple[int, ...] = ()
    eval_at_epochs: tuple[float, ...] = ()
    eval_samples: int | None = None  # samples one evaluation runs
    samples_per_step: int | None = None  # training samples per step (the global batch)
    checkpoint_bytes: int | None = None  # bytes one checkpoint writes

    @classmethod
    def of(cls, **keys) -> Schedule:
        """The schedule a caller said (``Lens.set_schedule``'s keywords): None, 0 and empty
        values stay unknown (starts may be 0); raises ValueError naming a bad value and
        TypeError naming an unknown key. Steps per epoch x epochs give the total when it is
        not said."""
        unknown = sorted(set(keys) - set(SCHEDULE_KEYS))
        if unknown:
            raise TypeError(
                f"set_schedule: unknown keyword(s) {', '.join(unknown)}; known: "
                f"{', '.join(SCHEDULE_KEYS)}"
            )
        out: dict = {}
        for key, value in keys.items():
            if value is None:
                continue
            whole = key not in _FLOATS
            if key in _LISTS:
                out[key] = tuple(sorted({_number(key, v, whole=whole) for v in value}))
            elif key in _STARTS:
                out[key] = _number(key, value, whole=whole)
            elif value and whole:
                out[key] = int(value)  # a count: 0 says nothing
            elif value:
                out[key] = _number(key, value)
        s = cls(**out)
        if s.total_steps is None and s.steps_per_epoch and s.epochs:
            s = dataclasses.replace(s, total_steps=s.steps_per_epoch * s.epochs)
        return s

    def merged(self, mark: Mapping) -> Schedule:
        """This schedule with what a recorded ``schedule`` mark (or a timeline's schedule)
        says on top; values that are not valid are ignored, as a trace of another version
        may hold them."""
        new: dict = {}
        for key in SCHEDULE_KEYS:
            value = mark.get(key)
            if value is None or isinstance(value, bool):
                continue
            if key in _LISTS:
                if isinstance(value, (list, tuple)):
                    new[key] = tuple(sorted(v for v in value if _num(v) and v >= 0))
            elif _num(value) and (value > 0 or (key in _STARTS and value == 0)):
                new[key] = float(value) if key in _FLOATS else int(value)
        s = dataclasses.replace(self, **new)
        if s.steps_per_epoch and s.epochs and not mark.get("total_steps"):
            s = dataclasses.replace(s, total_steps=s.steps_per_epoch * s.epochs)
        return s

    def to_dict(self) -> dict:
        """The keys that are known, as JSON keeps them (lists for the listed positions)."""
        out: dict = {}
        for key in SCHEDULE_KEYS:
            value = getattr(self, key)
            if key in _LISTS:
                if value:
                    out[key] = list(value)
            elif value is not None:
                out[key] = value
        return out

    def mark(self) -> dict | None:
        """The ``schedule`` mark the Lens records (None when nothing is known)."""
        d = self.to_dict()
        return {"kind": "schedule", **d} if d else None

    def epoch_steps(self) -> int | None:
        """Steps per epoch: as said, or following from the total and the epochs when they
        divide evenly."""
        if self.steps_per_epoch:
            return self.steps_per_epoch
        n, e = self.total_steps, self.epochs
        return n // e if n and e and n % e == 0 and n >= e else None

    def eval_plan(self) -> EvalPlan | None:
        """Where the announced evaluations come, or None when the schedule does not say."""
        spe = self.epoch_steps()
        period = None
        if self.eval_every_steps:
            period = float(self.eval_every_steps)
        elif spe and self.eval_every_epochs:
            period = spe * self.eval_every_epochs
        at = set(self.eval_at_steps)
        if spe:
            at |= {math.floor(e * spe + 0.5) for e in self.eval_at_epochs}
        if period is None and not at:
            return None
        start = period or 0.0
        if self.eval_start_epoch is not None and spe:
            start = self.eval_start_epoch * spe
        elif self.eval_start_step is not None:
            start = float(self.eval_start_step)
        return EvalPlan(period, start, tuple(sorted(at)))

    def eval_period(self) -> int | None:
        """Whole steps between periodic evaluations starting at a multiple of them, when the
        schedule says (the in-step extras' periods)."""
        plan = self.eval_plan()
        if not plan or not plan.period or plan.period != int(plan.period):
            return None
        return int(plan.period)

    def periods(self) -> dict[int, str]:
        """Step periods the schedule names, with what they are."""
        out: dict[int, str] = {}
        if self.checkpoint_every_steps:
            out[self.checkpoint_every_steps] = "checkpoint"
        if self.eval_period():
            out[self.eval_period()] = "evaluation"
        if self.epoch_steps():
            out.setdefault(self.epoch_steps(), "epoch end")
        return out


# The keys, in one place: the fields of Schedule.
SCHEDULE_KEYS = tuple(f.name for f in dataclasses.fields(Schedule))


def keyword_signature(method) -> inspect.Signature:
    """``method(self, **schedule)``'s signature with the schedule's keys spelled out as
    keyword-only parameters (default None), so ``help`` and editors list them."""
    hints = {f.name: f.type for f in dataclasses.fields(Schedule)}
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [
        inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=hints[k])
        for k in SCHEDULE_KEYS
    ]
    return inspect.Signature(params, return_annotation=inspect.signature(method).return_annotation)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _number(key: str, value, *, whole: bool = False) -> int | float:
    """A schedule value: a finite number >= 0 (a whole one for step counts), as JSON keeps it."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if not math.isfinite(x) or x < 0 or (whole and x != int(x)):
        kind = "a whole number" if whole else "a number"
        raise ValueError(f"set_schedule: {key} must be {kind} >= 0, got {value!r}")
    return int(x) if whole or x == int(x) else x
