"""The epoch-level forecast: when the current epoch ends, for a run whose total length nobody
said (a script that loops over its own ``range(epochs)``) as well as for one that did.

It is the run's model evaluated for a shorter "run": the steps up to the end of the current
epoch (``Snapshot.evaluate(epoch_end_step)``), so the same parts (the step level, the
recurring extras and sections due by then) and the same interval apply. It needs only the
steps per epoch: from the schedule (``len(loader)``, the framework's own count, or learned
from the first epoch boundary by the integration)."""

from __future__ import annotations

from dataclasses import dataclass

from .snapshot import Snapshot

# The line a run without a known total shows once: how to give the length.
LENGTH_HINT = (
    "the run's total steps are not known: pass total_steps=N (or steps_per_epoch= and "
    "epochs=) to the attach line, or call lens.set_schedule(total_steps=N)"
)


@dataclass(frozen=True)
class EpochForecast:
    """When the current epoch ends (seconds from the Lens start, like every total).

    ``epoch`` counts from 1; the epoch "running" after ``steps_per_epoch`` x k steps is the
    (k + 1)-th, whose end is ``epoch_end_step``."""

    epoch: int
    steps_per_epoch: int
    epoch_end_step: int
    predicted_end_s: float
    interval_s: tuple[float, float]
    eta_s: float  # seconds from the latest step end to the epoch's end
    step_time_s: float

    def to_dict(self) -> dict:
        return {
            "epoch": self.epoch,
            "steps_per_epoch": self.steps_per_epoch,
            "epoch_end_step": self.epoch_end_step,
            "predicted_end_s": self.predicted_end_s,
            "interval_s": list(self.interval_s),
            "eta_s": self.eta_s,
            "step_time_s": self.step_time_s,
        }


def epoch_forecast(snap: Snapshot, steps_per_epoch: int | None) -> EpochForecast | None:
    """The end of the epoch running at ``snap`` (None without steps per epoch or a step
    time)."""
    if not steps_per_epoch or steps_per_epoch < 1 or snap.level is None:
        return None
    s = snap.steps_done
    epoch = s // steps_per_epoch + 1
    end = epoch * steps_per_epoch
    p = snap.evaluate(end)
    if p.predicted_total_s is None or p.interval_s is None:
        return None
    return EpochForecast(
        epoch=epoch,
        steps_per_epoch=steps_per_epoch,
        epoch_end_step=end,
        predicted_end_s=p.predicted_total_s,
        interval_s=p.interval_s,
        eta_s=max(p.predicted_total_s - p.elapsed_s, 0.0),
        step_time_s=p.step_time_s,
    )
