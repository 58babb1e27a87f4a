"""The policy that picks the run's forecast and says when the signature is reached.

The signature, in PAS2P's sense, is reached when the run's structure is captured: at the
first evaluation, after ``min_steps`` steps (5 % of a run of tens of steps), at which every
part of the run has been seen and priced: the steady step level after the warm-up (known to
``part_precision``, its latest steps not off it on one side, not still settling), and each
recurring part the schedule announces or the run has shown (evaluations, checkpoints, epoch
ends, in-step extras) seen (an evaluation after its cold first occurrence, a learned period
twice), its time per occurrence known to within ``part_precision`` (the 95 % half-width of
its mean, relative to it), or what it still costs known to within ``rel_tol`` of the
predicted total (a cheap part need not be known closely; one announced and not seen yet,
priced from the schedule with a stated spread, only so). The forecast made there is the
run's, with its honest interval whatever its width. A run that never reached it has its
early forecast, the one made at ``EARLY_FRACTION`` of the steps, once it got there; else the
latest stands."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..._stats import NORMAL_95, t_quantile
from .forecaster import Forecaster
from .level import StepLevel
from .result import Forecast
from .snapshot import Prediction, Snapshot

# The first point a forecast is asked for: 5 % of the steps (a run of tens of steps has one).
EARLY_SHARE = 0.05
# The early forecast of a run that never reached its signature is the one made here.
EARLY_FRACTION = 0.10
# The step level is not steady while this many of the latest steps in a row are outliers on
# one side (``StepLevel.CHANGE_RUN`` of them start a new regime).
UNSTEADY_RUN = 2
# The level is still settling (a warm-up that fades over several steps) while a significant
# line through its latest ``SETTLE_STEPS`` steps (|t| > ``SETTLE_T``, as ``StepLevel.trend``)
# moves it by more than ``part_precision`` over them. On the development corpus (MLPerf
# RNN-T: blocks 35 % over the level after the warm-up, fading over 10 of 79) a signature at
# the first evaluation point was +15.7 % off (-3.6 % at block 12 with this); 4, 5, 8 or 10
# steps give the same signatures there, and 8 raises a false alarm at 2 % of the evaluation
# points of a steady run with 5 % noise (4 % with 5).
SETTLE_STEPS = 8
SETTLE_T = 3.0


@dataclass(frozen=True)
class CapturedPart:
    """One part of the run as the signature rule judged it: ``precision`` is the 95 %
    half-width of its time per occurrence relative to it (None: not known yet), ``captured``
    whether it met the rule, ``why`` what it still lacks ("" when captured)."""

    name: str
    seen: int
    remaining: int
    precision: float | None
    captured: bool
    why: str = ""


def structure(p: Prediction, rel_tol: float, part_precision: float) -> tuple[CapturedPart, ...]:
    """The run's parts at prediction ``p`` (the step level first) as the signature rule
    judges them."""
    total = p.predicted_total_s
    out = []
    for c in p.components:
        if c.remaining == 0 and c.name != "training steps":
            continue  # spent, or none of it in the run: nothing of it is still to come
        prec = c.precision
        stated = prec is None and _priced_unseen(c)
        if stated:
            # Announced, not seen, priced from the schedule with a stated spread: its cost
            # is known to that spread's 95 % half-width (the interval carries the same).
            prec = NORMAL_95 * c.sd_s / c.per_occurrence_s
        cost_known = (
            prec is not None and total is not None and prec * c.remaining_s <= rel_tol * total
        )
        # A price that was not measured is no signature of the part unless what the part
        # still costs is known within the tolerance: a prior narrower than part_precision
        # does not make it seen.
        ok = cost_known if stated else prec is not None and (prec <= part_precision or cost_known)
        why = ""
        if stated and not ok:
            why = (
                f"not seen yet: priced from the schedule to +/-{100 * prec:.0f} %, what it "
                f"still costs is not known to {100 * rel_tol:g} % of the total"
            )
        elif prec is None:
            why = (
                "not seen yet"
                if c.seen == 0
                else "warm-up steps only"
                if c.name == "training steps"
                else f"seen {c.seen}: its time per occurrence not known yet"
            )
            if c.source.startswith("assumed: every"):
                why = "seen once: its period is not known"
        elif not ok:
            why = f"known to +/-{100 * prec:.0f} % (needs {100 * part_precision:.0f} %)"
        out.append(CapturedPart(c.name, c.seen, c.remaining, prec, ok, why))
    if not out and p.step_time_s is not None:
        # The total is unknown: the step level alone.
        out.append(CapturedPart("training steps", 0, 0, None, False, "no level yet"))
    return tuple(out)


def _priced_unseen(c) -> bool:
    """``c`` is a part the schedule announces and the run has not shown yet, priced from
    what the schedule says of it (an evaluation's batches or samples, or the prior share of
    the training) with a stated spread; not one whose count is a guess (a section seen once
    with no period known)."""
    return (
        c.seen == 0
        and c.name != "training steps"
        and c.source.startswith("assumed:")
        and not c.source.startswith("assumed: every")
        and c.per_occurrence_s > 0
        and c.sd_s > 0
    )


def settling(level: StepLevel) -> float:
    """How much the step level moved over its latest ``SETTLE_STEPS`` steps (outliers out),
    relative to it, where a line through them is significant; else 0."""
    xs = [(i, x) for i, x in list(level.recent)[-SETTLE_STEPS:] if i not in level.spikes]
    k = len(xs)
    if k < 3:
        return 0.0
    mi = sum(i for i, _ in xs) / k
    mx = sum(x for _, x in xs) / k
    sxx = sum((i - mi) ** 2 for i, _ in xs)
    if sxx <= 0 or mx <= 0:
        return 0.0
    slope = sum((i - mi) * (x - mx) for i, x in xs) / sxx
    resid = sum((x - mx - slope * (i - mi)) ** 2 for i, x in xs) / (k - 2)
    # Steps a few percent apart are jitter (``StepLevel.MIN_SCALE``), as in its trend.
    resid = max(resid, (StepLevel.MIN_SCALE * mx) ** 2 / 4)
    if abs(slope) <= SETTLE_T * math.sqrt(resid / sxx):
        return 0.0
    return abs(slope) * k / mx


def _settling_why(moved: float) -> str:
    return f"still settling: its last {SETTLE_STEPS} steps moved it by {100 * moved:.0f} %"


class ForecastPolicy:
    """The signature rule and the choice of the run's forecast, for one run."""

    def __init__(self, *, rel_tol: float, part_precision: float, min_steps: int) -> None:
        self.rel_tol = rel_tol
        self.part_precision = part_precision
        self.min_steps = min_steps
        self.signature_ready = False
        self.signature_step: int | None = None
        self.at_signature: Snapshot | None = None
        self.early: Snapshot | None = None
        self.captured: tuple[CapturedPart, ...] = ()  # at the signature
        # What held the signature at the evaluation before it (why it was not earlier).
        self.waited_for: tuple[str, ...] = ()
        self._pending: tuple[str, ...] = ()

    def on_step(self, forecaster: Forecaster) -> None:
        """After a step end was fed: keep the snapshot at ``EARLY_FRACTION`` of the steps."""
        n = forecaster.schedule.total_steps
        if n and self.early is None and forecaster.steps == max(1, math.ceil(EARLY_FRACTION * n)):
            self.early = forecaster.snapshot()

    def on_evaluation(self, snap: Snapshot, p: Prediction, level: StepLevel) -> bool:
        """An evaluation point (``p`` is ``snap``'s evaluation); True when the signature is
        reached there, for the first time."""
        if self.signature_ready:
            return False
        parts = self.judge(p, level, snap.off_level)
        blockers = tuple(f"{c.name}: {c.why}" for c in parts if not c.captured)
        blockers += tuple(f"{what}: none passed yet" for what in snap.unseen_periods)
        if p.steps_done < self.signature_min_steps(p.total_steps):
            blockers = (f"fewer than {self.signature_min_steps(p.total_steps)} steps",) + blockers
        if blockers or not parts:
            self._pending = blockers
            return False
        self.signature_ready = True
        self.signature_step = p.steps_done
        self.at_signature = snap
        self.captured = parts
        self.waited_for = self._pending
        return True

    def judge(
        self, p: Prediction, level: StepLevel, off_level: int | None = None
    ) -> tuple[CapturedPart, ...]:
        """The run's parts as the signature rule judges them at ``p``. While the total is
        unknown, the step level alone (its mean's 95 % half-width within
        ``part_precision``)."""
        if p.step_time_s is None:
            return ()
        if p.total_steps:
            parts = structure(p, self.rel_tol, self.part_precision)
            off = len(level.run) if off_level is None else off_level
            if parts and parts[0].name == "training steps" and off >= UNSTEADY_RUN:
                # The latest steps are off the level on one side: a change of speed may be
                # under way (a recurring part that started to run beside the steps): the
                # level is not steady until it is adopted or they stop.
                why = f"the last {off} steps are off its level"
                parts = (replace(parts[0], captured=False, why=why), *parts[1:])
            elif parts and parts[0].name == "training steps" and parts[0].captured:
                moved = settling(level)
                if moved > self.part_precision:
                    why = _settling_why(moved)
                    parts = (replace(parts[0], captured=False, why=why), *parts[1:])
            return parts
        prec = None
        if p.step_time_sd_s is not None and level.n >= 2:
            var, _ = level.mean_var()
            prec = t_quantile(0.975, level.n - 1) * math.sqrt(var) / p.step_time_s
        ok = prec is not None and prec <= self.part_precision
        why = "" if ok else f"its mean not known to +/-{100 * self.part_precision:.0f} % yet"
        moved = settling(level) if ok else 0.0
        if moved > self.part_precision:
            ok, why = False, _settling_why(moved)
        return (CapturedPart("training steps", level.n, 0, prec, ok, why),)

    def converged(self, p: Prediction, level: StepLevel) -> bool:
        """The signature rule at ``p``: enough steps, and every part captured."""
        if p.steps_done < self.signature_min_steps(p.total_steps):
            return False
        parts = self.judge(p, level)
        return bool(parts) and all(c.captured for c in parts)

    def signature_min_steps(self, total_steps: int | None) -> int:
        """The steps a signature needs at least: ``min_steps``, or 5 % of a run of tens of
        steps (epochs, blocks: the parts decide there, not a count meant for runs of
        thousands); and at least ``EARLY_SHARE`` of any run, so that it spans a share of
        the run where its recurring parts show, not a fixed count of its first steps."""
        n, m = total_steps, self.min_steps
        if not n:
            return m
        share = max(math.ceil(EARLY_SHARE * n), 2)
        return max(min(m, share), share)

    def pick(self, latest: Snapshot) -> tuple[Snapshot, str]:
        """The snapshot the run's forecast is made from, and its basis."""
        if self.at_signature is not None:
            return self.at_signature, "signature"
        if self.early is not None:
            return self.early, "early"
        return latest, "latest"

    def forecast(
        self,
        latest: Snapshot,
        total_steps: int | None,
        *,
        history: tuple[tuple[int, float], ...],
        steps_done: int,
        actual_total_s: float | None = None,
        job_offset_s: float | None = None,
        actual_job_total_s: float | None = None,
    ) -> Forecast:
        """The run's forecast, evaluated for ``total_steps`` as known now (it may have been
        learned since the snapshot was taken)."""
        snap, basis = self.pick(latest)
        n = total_steps
        p = snap.evaluate(n)
        sig = self.signature_step
        note = ""
        if n is None:
            note = "total_steps unknown: per-step time only (set total_steps for a total)"
        return Forecast(
            predicted_total_s=p.predicted_total_s,
            interval_s=p.interval_s,
            signature_step=sig,
            signature_fraction=None if sig is None or not n else sig / n,
            actual_total_s=actual_total_s,
            history=history,
            made_at_step=p.steps_done,
            basis=basis,
            elapsed_s=p.elapsed_s,
            total_steps=n,
            naive_eta_s=None if p.naive_total_s is None else p.naive_total_s - p.elapsed_s,
            naive_total_s=p.naive_total_s,
            step_time_s=p.step_time_s,
            step_time_sd_s=p.step_time_sd_s,
            regime_start_step=p.regime_start_step,
            components=p.components,
            steps_done=steps_done,
            job_offset_s=job_offset_s,
            actual_job_total_s=actual_job_total_s,
            signature_rel_tol=self.rel_tol,
            note=note,
            signature_parts=self.captured,
            # Not reached: what it lacked at the last evaluation.
            signature_waited_for=self.waited_for if self.signature_ready else self._pending,
        )
