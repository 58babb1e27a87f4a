"""What the Lens keeps up to date during training: phases, step times, signature, forecast.

Fed by the Lens after each cross-rank exchange (``on_batch``, identical on every rank) and
at each step end (``on_step``, local clock). The signature rule and forecast arithmetic live
in _forecast.py; this module holds the state they need in O(phases + window) memory and
writes the live ``forecast.json`` on rank 0.

The offline analysis replays a saved run through the same class (:func:`replay`): same
batches, same order, same arithmetic, so it reaches the same signature step and forecast.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._config import LensConfig
from ._forecast import (
    Forecast,
    StepStats,
    forecast_total,
    new_significant_phases,
    step_time_changed,
    step_time_precise,
    step_time_stable,
)
from .phases import SIZE_KEY_FACTOR, OnlinePhases

log = logging.getLogger("ailens")

# Live forecast.json: at most every this many steps and seconds (plus progress lines,
# signature and finish), so the file costs the training loop nothing measurable.
_WRITE_EVERY_STEPS = 100
_WRITE_EVERY_SECONDS = 2.0
# Forecast history kept for plots: thinned by half whenever it reaches this length.
_HISTORY_CAP = 512
# Exchange schedule runs kept for the offline replay: before / after the signature.
_SCHEDULE_CAP = 4096
_SCHEDULE_CAP_AFTER = 512


@dataclass(frozen=True)
class _Snap:
    """Phase totals after an exchange batch: at ``step`` steps done, over ``ticks`` ticks."""

    step: int
    ticks: int
    n_phases: int
    count: np.ndarray  # occurrences per phase (index i is phase i + 1)
    time: np.ndarray  # comm + compute seconds per phase


@dataclass(frozen=True)
class LiveForecast:
    """``Lens.forecast``: the prediction at ``step``; seconds since the Lens started."""

    step: int
    total_steps: int | None
    predicted_total_s: float | None
    interval_s: tuple[float, float] | None
    eta_s: float | None  # predicted seconds still to go
    elapsed_s: float
    step_time_s: float
    signature_ready: bool


class OnlineAnalysis:
    """Online phase table, step-time statistics, signature and forecast on one rank.

    ``signature_ready`` follows the rule of _forecast.py; the phase half of it uses the
    exchanged (identical) table, the step-time half this rank's clock, so ranks agree up to
    clock noise; the Lens takes rank 0's vote. ``total_steps`` may be set at any time.
    """

    def __init__(
        self, cfg: LensConfig, world_size: int, rank: int, op_names: list[str], *, live: bool = True
    ) -> None:
        self.cfg = cfg
        self.world_size = world_size
        self.rank = rank
        self.op_names = op_names  # shared with the Lens, grows as ops appear
        self.phases = OnlinePhases(tolerance=cfg.tolerance, min_share=cfg.min_phase_share)
        self.total_steps = cfg.total_steps
        self.disabled_ranks = 0
        self.live = live and rank == 0
        self.steps = 0
        self.last_t_ns = 0  # rank clock at the last step end (0 = Lens start)
        self._warm = cfg.warmup_steps
        self._recent: deque[int] = deque(maxlen=2 * cfg.signature_window)
        self._n = 0  # post-warm-up step times: count, sum, sum of squares (ns, exact ints)
        self._sum = 0
        self._sum2 = 0
        self._blocks = 0  # ... and per block of signature_window steps (batch means)
        self._bsum = 0
        self._bsum2 = 0
        self._block = 0
        self._block_len = 0
        self.regime_start = cfg.warmup_steps + 1  # first step in the statistics
        self.restarts = 0
        self._t_at_total: int | None = None
        self._count = np.zeros(0, dtype=np.int64)
        self._time = np.zeros(0)
        self._ticks = 0
        self._snaps: deque[_Snap] = deque()
        self._base: _Snap | None = None
        self.signature_ready = False
        self.signature_step: int | None = None
        self.signature_t_ns: int | None = None
        self._at_signature: dict | None = None
        self.history: list[tuple[int, float]] = []
        self.marks: list[dict] = []
        self.exchange_schedule: list[list[int]] = []
        self._history_stride = 1
        self._evaluations = 0
        self._last_write_step = 0
        self._last_write_time = time.monotonic()
        self._io_failed = False

    # ------------------------------------------------------------ feeding

    def on_step(self, step: int, t_ns: int) -> None:
        """Step ``step`` (0-based) ended at ``t_ns`` on this rank's clock."""
        self.steps = s = step + 1
        d = t_ns - self.last_t_ns
        self.last_t_ns = t_ns
        if self.total_steps is not None and s == self.total_steps:
            self._t_at_total = t_ns
        if s > self._warm:
            self._n += 1
            self._sum += d
            self._sum2 += d * d
            self._recent.append(d)
            self._block += d
            self._block_len += 1
            if self._block_len == self.cfg.signature_window:
                self._blocks += 1
                self._bsum += self._block
                self._bsum2 += self._block * self._block
                self._block = self._block_len = 0
        if self.live:
            self._live_output(s)

    def on_mark(self, mark: dict) -> None:
        """A run-structure mark (section or schedule) recorded by the Lens."""
        self.marks.append(mark)

    def live_forecast(self) -> LiveForecast | None:
        """The current prediction, cheap enough to read every step."""
        fields = self._forecast_fields()
        if fields is None:
            return None
        total = fields.get("predicted_total_s")
        elapsed = self.last_t_ns / 1e9
        return LiveForecast(
            step=self.steps,
            total_steps=self.total_steps,
            predicted_total_s=total,
            interval_s=fields.get("interval_s"),
            eta_s=None if total is None else max(total - elapsed, 0.0),
            elapsed_s=elapsed,
            step_time_s=fields["step_time_s"],
            signature_ready=self.signature_ready,
        )

    def on_batch(self, simo, key, comm_ns, compute_ns, disabled_ranks: int) -> None:
        """A batch of exchanged ticks (SIMO summed over ranks, comm/compute mean over ranks)."""
        self.disabled_ranks = max(self.disabled_ranks, disabled_ranks)
        key = np.asarray(key)
        comm_s = np.asarray(comm_ns) / 1e9
        compute_s = np.asarray(compute_ns) / 1e9
        op = key // SIZE_KEY_FACTOR if self.cfg.phase_key == "op+size" else None
        ids = self.phases.add(np.asarray(simo), key, comm_s, compute_s, op=op)
        n = self.phases.n_phases
        if n > len(self._count):
            grow = max(n, 2 * len(self._count)) - len(self._count)
            self._count = np.concatenate([self._count, np.zeros(grow, dtype=np.int64)])
            self._time = np.concatenate([self._time, np.zeros(grow)])
        if len(ids):
            self._count[:n] += np.bincount(ids, minlength=n + 1)[1:]
            self._time[:n] += np.bincount(ids, weights=comm_s + compute_s, minlength=n + 1)[1:]
        self._ticks += len(ids)
        self._record_exchange(self.steps, self._ticks)
        self._snapshot()
        self._evaluate()

    def _record_exchange(self, step: int, ticks: int) -> None:
        """Append (steps done, ticks covered) to the run-length-encoded exchange schedule
        (runs of [step, ticks, d_step, d_ticks, count]); the offline replay cuts its batches
        exactly here. Usually a handful of runs: the interval rarely changes."""
        runs = self.exchange_schedule
        # Exact up to the signature (the decision); a little beyond for the history; bounded
        # so the live forecast.json stays small.
        if len(runs) >= (_SCHEDULE_CAP if not self.signature_ready else _SCHEDULE_CAP_AFTER):
            return
        if runs:
            s0, t0, ds, dt, count = runs[-1]
            if count == 1:
                runs[-1] = [s0, t0, step - s0, ticks - t0, 2]
                return
            if s0 + count * ds == step and t0 + count * dt == ticks:
                runs[-1][4] += 1
                return
        runs.append([step, ticks, 0, 0, 1])

    def _snapshot(self) -> None:
        n = self.phases.n_phases
        snap = _Snap(self.steps, self._ticks, n, self._count[:n].copy(), self._time[:n].copy())
        if self._snaps and self._snaps[-1].step == snap.step:
            self._snaps.pop()
        self._snaps.append(snap)
        if self._base is None and snap.step >= self._warm:
            self._base = snap
        # Keep the newest snapshot at least one window old, and everything after it.
        horizon = self.steps - self.cfg.signature_window
        while len(self._snaps) > 1 and self._snaps[1].step <= horizon:
            self._snaps.popleft()

    def _reference(self) -> _Snap | None:
        """Latest snapshot at least one signature window before the current step."""
        horizon = self.steps - self.cfg.signature_window
        ref = self._snaps[0] if self._snaps else None
        return (
            ref if ref is not None and ref.step <= horizon and ref is not self._snaps[-1] else None
        )

    # ------------------------------------------------------------ signature

    def rule_holds(self) -> bool:
        """The signature rule now (see _forecast.py); does not latch."""
        cfg = self.cfg
        s, w = self.steps, cfg.signature_window
        if s < cfg.signature_min_steps or self._n < 2 * w or not self._snaps:
            return False
        if not step_time_stable(self._recent, w, cfg.signature_rel_tol):
            return False
        if not step_time_precise(self.step_stats(), cfg.signature_rel_tol):
            return False
        ref = self._reference()
        if ref is None:
            return False
        cur = self._snaps[-1]
        return not new_significant_phases(cur.time, ref.time, ref.n_phases, cfg.min_phase_share)

    def _restart_if_changed(self) -> None:
        """Restart the step-time statistics from the last W steps after a change of regime."""
        w, cfg = self.cfg.signature_window, self.cfg
        if self._n < 2 * w:
            return
        last = list(self._recent)[-w:]
        s1, s2 = sum(last), sum(x * x for x in last)
        older = StepStats(self._n - w, self._sum - s1, self._sum2 - s2)
        if not step_time_changed(older, last, cfg.signature_rel_tol):
            return
        self._n, self._sum, self._sum2 = w, s1, s2
        self._blocks = self._bsum = self._bsum2 = self._block = self._block_len = 0
        self.regime_start = self.steps - w + 1
        self.restarts += 1
        # The phase split of the forecast restarts too (from the latest table).
        self._base = self._snaps[-1] if self._snaps else None

    def _evaluate(self) -> None:
        self._restart_if_changed()
        if not self.signature_ready and self.rule_holds():
            self.signature_ready = True
            self.signature_step = self.steps
            self.signature_t_ns = self.last_t_ns
            self._at_signature = self._forecast_inputs()
            if self.live:
                self._announce_signature()
        fields = self._forecast_fields()
        if fields is not None and fields["predicted_total_s"] is not None:
            self._evaluations += 1
            if self._evaluations % self._history_stride == 0:
                self.history.append((self.steps, fields["predicted_total_s"]))
                if len(self.history) >= _HISTORY_CAP:
                    self.history = self.history[::2]
                    self._history_stride *= 2

    # ------------------------------------------------------------ forecast

    def _forecast_inputs(self) -> dict | None:
        """Everything the forecast arithmetic needs except total_steps (known later maybe)."""
        if self._n < 2:
            return None
        phase_step, kept = None, None
        cur = self._snaps[-1] if self._snaps else None
        base = self._base
        if cur is not None and base is not None and cur.step > base.step:
            then = np.zeros(cur.n_phases)
            then[: base.n_phases] = base.time
            phase_step = (cur.time - then) / (cur.step - base.step)
            kept = [p.id for p in self.phases.table().phases]
        return {
            "elapsed_s": self.last_t_ns / 1e9,
            "steps_done": self.steps,
            "stats": self.step_stats(),
            "regime_start_step": self.regime_start,
            "phase_step_s": phase_step,
            "kept": kept,
        }

    def step_stats(self) -> StepStats:
        """Step-time statistics of the current regime (after warm-up and any restart)."""
        return StepStats(
            self._n,
            self._sum,
            self._sum2,
            self._blocks,
            self._bsum,
            self._bsum2,
            self.cfg.signature_window,
        )

    def _forecast_fields(self, inputs: dict | None = None) -> dict | None:
        inputs = inputs or self._forecast_inputs()
        return None if inputs is None else forecast_total(**inputs, total_steps=self.total_steps)

    def forecast(self, actual_total_s: float | None = None) -> Forecast | None:
        """The forecast made at the signature step (or the latest one while there is no
        signature) for the current ``total_steps``; None until two step times after the
        warm-up exist."""
        fields = self._forecast_fields(self._at_signature)
        if fields is None:
            return None
        n = self.total_steps
        sig = self.signature_step
        return Forecast(
            **fields,
            signature_step=sig,
            signature_fraction=None if sig is None or not n else sig / n,
            actual_total_s=actual_total_s,
            history=tuple(self.history),
            signature_elapsed_s=None if self.signature_t_ns is None else self.signature_t_ns / 1e9,
            steps_done=self.steps,
        )

    @property
    def actual_total_s(self) -> float | None:
        """This rank's clock at the end of step ``total_steps`` once the run got there."""
        if self.total_steps is None or self.steps < self.total_steps or self._t_at_total is None:
            return None
        return self._t_at_total / 1e9

    def table(self):
        return self.phases.table(op_names=self.op_names)

    # ------------------------------------------------------------ output (rank 0)

    def _announce_signature(self) -> None:
        n = self.total_steps
        frac = f" ({100 * self.steps / n:.1f}% of {n} steps)" if n else ""
        _progress(f"ailens: signature ready at step {self.steps}{frac}")

    def _live_output(self, s: int) -> None:
        every = self.cfg.progress_every
        line = bool(every) and s % every == 0
        due = s - self._last_write_step >= _WRITE_EVERY_STEPS and (
            time.monotonic() - self._last_write_time >= _WRITE_EVERY_SECONDS
        )
        if not (line or due):
            return
        f = self.forecast()
        if line:
            _progress(self.progress_line(f))
        if f is not None:
            self._write_forecast(f, final=False)

    def progress_line(self, f: Forecast | None = None) -> str:
        """One line: step, % done, current forecast +/- interval, signature state."""
        f = f if f is not None else self.forecast()
        s, n = self.steps, self.total_steps
        head = f"ailens: step {s}/{n} ({100 * s / n:.1f}%)" if n else f"ailens: step {s}"
        sig = (
            f"signature ready at step {self.signature_step}"
            if self.signature_ready
            else "signature pending"
        )
        if f is None:
            return f"{head}  warming up  {sig}"
        latest = self._forecast_fields() or {}
        if latest.get("predicted_total_s") is not None:
            lo, hi = latest["interval_s"]
            body = f"forecast {_fmt(latest['predicted_total_s'])} ± {_fmt((hi - lo) / 2)}"
        else:
            lo, hi = f.step_time_interval_s
            body = f"step time {_fmt(f.step_time_s)} ± {_fmt((hi - lo) / 2)} (total steps unknown)"
        return f"{head}  {body}  {sig}"

    def _forecast_doc(self, f: Forecast, *, final: bool, actual: float | None = None) -> dict:
        latest = self._forecast_fields() or {}
        doc = {
            "source": "online",
            "final": final,
            "rank": self.rank,
            "world_size": self.world_size,
            "steps_done": self.steps,
            "elapsed_s": self.last_t_ns / 1e9,
            "early_stop": self.cfg.early_stop,
            "signature_rule": {
                "window": self.cfg.signature_window,
                "rel_tol": self.cfg.signature_rel_tol,
                "min_steps": self.cfg.signature_min_steps,
                "warmup_steps": self.cfg.warmup_steps,
                "min_phase_share": self.cfg.min_phase_share,
            },
            **f.to_dict(),
            "exchange_schedule": self.exchange_schedule,
            "latest": {
                "step": self.steps,
                "predicted_total_s": latest.get("predicted_total_s"),
                "interval_s": None
                if latest.get("interval_s") is None
                else list(latest["interval_s"]),
                "step_time_s": latest.get("step_time_s"),
            },
        }
        if actual is not None:
            doc["actual_total_s"] = actual
            doc["error_pct"] = f.error_pct
        return doc

    def _write_forecast(self, f: Forecast, *, final: bool) -> None:
        if self._io_failed:
            return
        try:
            write_json(Path(self.cfg.run_dir) / "forecast.json", self._forecast_doc(f, final=final))
        except OSError as e:
            # The forecast file is a convenience: note it once, keep training and tracing.
            self._io_failed = True
            log.warning("ailens: cannot write forecast.json (%s); live forecast off", e)
        self._last_write_step = self.steps
        self._last_write_time = time.monotonic()

    def finish(self, run_dir: Path, elapsed_ns: int) -> None:
        """Rank 0 writes the online phase table and the final forecast to the run directory."""
        if self.rank != 0:
            return
        doc = {
            "source": "online",
            "world_size": self.world_size,
            "disabled_ranks": self.disabled_ranks,
            "elapsed_s": elapsed_ns / 1e9,
            "steps": self.steps,
            "table": self.table().to_dict(),
            "op_names": list(self.op_names),
        }
        write_json(Path(run_dir) / "phases-online.json", doc)
        f = self.forecast(self.actual_total_s)
        if f is not None:
            fdoc = self._forecast_doc(f, final=True)
            fdoc["closed_s"] = elapsed_ns / 1e9
            write_json(Path(run_dir) / "forecast.json", fdoc)
            every = self.cfg.progress_every
            if self.live and every and self.steps % every:
                _progress(self.progress_line(f))


def _fmt(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    if s >= 3600:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    if s >= 60:
        return f"{int(s // 60)}m{s % 60:04.1f}s"
    if s >= 1:
        return f"{s:.2f}s"
    return f"{s * 1e3:.2f}ms"


def _progress(line: str) -> None:
    """Progress goes to the ``ailens`` logger when it is configured to show INFO, else to
    stderr (the user asked for these lines with ``progress_every``)."""
    if log.hasHandlers() and log.isEnabledFor(logging.INFO):
        log.info(line)
    else:
        print(line, file=sys.stderr, flush=True)


def write_json(path: Path, doc: dict) -> None:
    """Write JSON atomically (temp file + rename) so readers never see half a file."""
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    data = (json.dumps(doc, indent=2, sort_keys=False) + "\n").encode()
    try:
        # 0o644 & ~umask: never world-writable, even at umask 000.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk must not leave half-written temp files
        raise


# --------------------------------------------------------------------------- offline replay


_MAX_EXCHANGE_STEPS = 1000  # as Lens: the longest agreed interval between exchanges


def decode_schedule(runs) -> list[tuple[int, int]]:
    """(steps done, ticks covered) after each exchange batch, from its run-length form."""
    out = []
    for s0, t0, ds, dt, count in runs or ():
        out += [(int(s0 + j * ds), int(t0 + j * dt)) for j in range(int(count))]
    return out


def replay(
    cfg: LensConfig,
    world_size: int,
    op_names: list[str],
    step_t_ns: np.ndarray,
    tick_step: np.ndarray,
    simo: np.ndarray,
    key: np.ndarray,
    comm_ns: np.ndarray,
    compute_ns: np.ndarray,
    *,
    total_steps: int | None = None,
    schedule=None,
) -> OnlineAnalysis:
    """Feed a recorded run through :class:`OnlineAnalysis` as the Lens did.

    ``step_t_ns``: rank 0's step-end times; per tick: the step it began in, SIMO, phase key
    and comm/compute ns (mean over ranks). ``schedule``: the exchange schedule rank 0
    recorded (``exchange_schedule`` in forecast.json, run-length encoded): batches are cut
    exactly there, so the replay evaluates the rule at the same points with the same data.
    Past its end (a run killed before its last write) or without it, the Lens's cadence is
    simulated from the step times (``Lens._maybe_exchange``: at a step end, when
    ``exchange_ticks`` ticks are pending or the agreed interval passed; the interval is
    ``exchange_seconds`` worth of steps, first ``signature_window // 2``), which matches up
    to clock jitter around the interval's rounding.
    """
    oa = OnlineAnalysis(cfg, world_size, 0, list(op_names), live=False)
    if total_steps is not None:
        oa.total_steps = int(total_steps)
    k = cfg.exchange_ticks
    seconds = float(getattr(cfg, "exchange_seconds", 0.0))
    every = max(1, cfg.signature_window // 2)
    n_ticks = len(simo)
    t_steps = np.asarray(step_t_ns).tolist()
    through = np.searchsorted(np.asarray(tick_step), np.arange(1, len(t_steps) + 1), side="left")
    plan = [(s, min(t, n_ticks)) for s, t in decode_schedule(schedule)]
    plan_end = plan[-1][0] if plan else 0
    exchanged = at_exchange = 0

    def batch(upto: int) -> None:
        nonlocal exchanged
        if upto > exchanged:
            b = slice(exchanged, upto)
            oa.on_batch(simo[b], key[b], comm_ns[b], compute_ns[b], 0)
            exchanged = upto

    def simulate(upto: int, s: int) -> None:
        """All pending ticks, in Lens-sized batches; then the next interval (rank 0's)."""
        nonlocal at_exchange, every
        size = k if world_size > 1 else max(upto - exchanged, 1)
        steps = s - at_exchange
        if steps > 0:
            dt = (t_steps[s - 1] - (t_steps[at_exchange - 1] if at_exchange else 0)) / 1e9
            want = seconds / (dt / steps) if dt > 0 else _MAX_EXCHANGE_STEPS
            every = int(min(max(math.ceil(want), 1), _MAX_EXCHANGE_STEPS))
        while exchanged < upto:
            batch(min(exchanged + size, upto))
        at_exchange = s

    i_plan = 0
    for i, t in enumerate(t_steps):
        oa.on_step(i, int(t))
        s = i + 1
        ticks = min(int(through[i]), n_ticks)
        if s <= plan_end:
            while i_plan < len(plan) and plan[i_plan][0] == s:
                batch(plan[i_plan][1])
                i_plan += 1
                at_exchange = s
            continue
        pending = ticks - exchanged
        if pending >= k or (pending and s - at_exchange >= every):
            simulate(ticks, s)
    # Close: the Lens exchanges what is left.
    while i_plan < len(plan):
        batch(plan[i_plan][1])
        i_plan += 1
    if exchanged < n_ticks:
        simulate(n_ticks, len(t_steps))
    return oa
