"""``Forecast``: the run's forecast and how it was made (what ``ailens predict --json``
prints and ``forecast.json`` holds)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .snapshot import INTERVAL_LEVEL, Component


@dataclass(frozen=True)
class Forecast:
    """A total-time forecast and how it was made; ``to_dict()`` is ``ailens predict --json``.

    ``predicted_total_s``/``interval_s``: the forecast made at the signature step when the
    signature was reached (``basis`` "signature"), else the one made at a fixed early point
    (``basis`` "early", 10 % of the steps) once the run got there, else the latest. Totals
    are seconds from the Lens's start on rank 0 to the end of the run (its close); the
    ``job_*`` fields count from the process start instead. ``history`` holds (steps done,
    predicted total) at most once per step.
    """

    predicted_total_s: float | None
    interval_s: tuple[float, float] | None
    signature_step: int | None
    signature_fraction: float | None  # signature_step / total_steps
    actual_total_s: float | None
    history: tuple[tuple[int, float], ...]
    made_at_step: int
    basis: str  # "signature", "early" or "latest"
    elapsed_s: float  # rank 0's time at made_at_step
    total_steps: int | None
    naive_eta_s: float | None  # the progress-bar ETA (time still to go) at made_at_step
    naive_total_s: float | None  # elapsed + naive_eta_s
    step_time_s: float | None
    step_time_sd_s: float | None
    regime_start_step: int | None
    components: tuple[Component, ...] = ()
    steps_done: int = 0  # steps recorded by the end of the data
    job_offset_s: float | None = None  # process start -> Lens start
    actual_job_total_s: float | None = None  # process start -> process exit, when recorded
    signature_rel_tol: float | None = None
    level: float = INTERVAL_LEVEL
    note: str = ""
    # What the signature captured (the step level and each recurring part: occurrences seen,
    # the precision of its time per occurrence), and what held it at the evaluation before.
    signature_parts: tuple = ()
    signature_waited_for: tuple[str, ...] = ()

    @property
    def error_pct(self) -> float | None:
        """Signed error of the forecast against the actual total, in percent; None for a
        forecast made at the end of the run (it is never scored against itself)."""
        return None if self.basis == "latest" else _pct(self.predicted_total_s, self.actual_total_s)

    @property
    def naive_error_pct(self) -> float | None:
        """The same for the progress-bar ETA made at the same step."""
        return None if self.basis == "latest" else _pct(self.naive_total_s, self.actual_total_s)

    @property
    def covered(self) -> bool | None:
        """Whether the actual total fell inside the interval (None: not scored)."""
        if self.error_pct is None or self.interval_s is None:
            return None
        return self.interval_s[0] <= self.actual_total_s <= self.interval_s[1]

    @property
    def predicted_job_total_s(self) -> float | None:
        if self.predicted_total_s is None or self.job_offset_s is None:
            return None
        return self.job_offset_s + self.predicted_total_s

    def to_dict(self) -> dict:
        """JSON-ready dict (plain Python types)."""
        # Field by field, not asdict(self): that deep-copies the history point by point
        # (over a millisecond at its cap, at every live forecast.json); the nested fields
        # are converted below and the others are plain values.
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["interval_s"] = None if self.interval_s is None else list(self.interval_s)
        d["history"] = [[int(s), float(v)] for s, v in self.history]
        d["components"] = [asdict(c) for c in self.components]
        d["signature_parts"] = [asdict(c) for c in self.signature_parts]
        d["signature_waited_for"] = list(self.signature_waited_for)
        d["error_pct"] = self.error_pct
        d["naive_error_pct"] = self.naive_error_pct
        d["predicted_job_total_s"] = self.predicted_job_total_s
        d["covered"] = self.covered
        return d


def _pct(pred: float | None, actual: float | None) -> float | None:
    if pred is None or not actual:
        return None
    return 100.0 * (pred - actual) / actual
