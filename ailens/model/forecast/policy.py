"""The policy that picks the run's forecast and says when the signature is reached.

The signature is the first evaluation at which the forecast's interval is within
``rel_tol`` of the predicted total (of the step time, while the total is unknown), after
``min_steps`` steps; the forecast made there is the run's. A run that never reached it has
its early forecast, the one made at ``EARLY_FRACTION`` of the steps, once it got there; else
the latest stands."""

from __future__ import annotations

import math

from .forecaster import Forecaster
from .level import StepLevel
from .result import Forecast
from .snapshot import Prediction, Snapshot
from .stats import t_quantile

# The first point a forecast is asked for: 5 % of the steps (a run of tens of steps has one).
EARLY_SHARE = 0.05
# The early forecast of a run that never reached its signature is the one made here.
EARLY_FRACTION = 0.10


class ForecastPolicy:
    """The signature rule and the choice of the run's forecast, for one run."""

    def __init__(self, *, rel_tol: float, min_steps: int) -> None:
        self.rel_tol = rel_tol
        self.min_steps = min_steps
        self.signature_ready = False
        self.signature_step: int | None = None
        self.at_signature: Snapshot | None = None
        self.early: Snapshot | None = None

    def on_step(self, forecaster: Forecaster) -> None:
        """After a step end was fed: keep the snapshot at ``EARLY_FRACTION`` of the steps."""
        n = forecaster.schedule.total_steps
        if n and self.early is None and forecaster.steps == max(1, math.ceil(EARLY_FRACTION * n)):
            self.early = forecaster.snapshot()

    def on_evaluation(self, snap: Snapshot, p: Prediction, level: StepLevel) -> bool:
        """An evaluation point (``p`` is ``snap``'s evaluation); True when the signature is
        reached there, for the first time."""
        if self.signature_ready or not self.converged(p, level):
            return False
        self.signature_ready = True
        self.signature_step = p.steps_done
        self.at_signature = snap
        return True

    def converged(self, p: Prediction, level: StepLevel) -> bool:
        """The signature rule: enough steps, and the forecast's interval within the tolerance
        (the step time's, while the total is unknown)."""
        if p.steps_done < self.signature_min_steps(p.total_steps) or p.step_time_s is None:
            return False
        rel = p.half_width_rel
        if rel is None and p.step_time_sd_s is not None and level.n >= 2:
            var, _ = level.mean_var()
            rel = t_quantile(0.975, level.n - 1) * math.sqrt(var) / p.step_time_s
        return rel is not None and rel <= self.rel_tol

    def signature_min_steps(self, total_steps: int | None) -> int:
        """``min_steps``, or 5 % of a run of tens of steps (epochs, blocks): the interval
        decides there, not a count of steps meant for runs of thousands."""
        n, m = total_steps, self.min_steps
        return min(m, max(math.ceil(EARLY_SHARE * n), 2)) if n else m

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
        )
