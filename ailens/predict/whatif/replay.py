"""The replay: a step's collective groups against the compute that overlaps them.

Each group's collectives run one at a time in one queue, each entering when the compute
reaches its begin offset; while one runs beside the compute, the rank's cores are shared
fairly between the compute threads and the transport's threads (``Cpu``). ``unstretch``
finds the offsets the source's groups would have had without its own contention, once per
run; ``replay`` plays them on a target (durations, CPU and cores of the target). A long run
replays ``REPLAY_STEPS`` evenly spaced steps (``replay_sample``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .layout import Layout
from .steps import Steps

__all__ = [
    "REPLAY_STEPS",
    "Cpu",
    "Replay",
    "cpu_of",
    "replay_target",
    "replay_sample",
    "measured_spans",
    "steps_at",
    "unstretch",
]


@dataclass(frozen=True)
class Cpu:
    """How one rank's cores are shared between its compute threads and its transport's
    threads (the scheduler shares a core fairly between the threads that want it)."""

    cores: float  # cores the rank has (its share of the node)
    threads: int  # compute threads, each wanting a core
    background: float  # CPU s per s the transport burns even while idle

    def rates(self, demand: float) -> tuple[float, float]:
        """(compute speed, collective speed), 1 = as if alone, while a collective wants
        ``demand`` cores: max-min fair shares of the rank's cores."""
        items = [1.0] * self.threads + [demand, self.background]
        got = _waterfill(self.cores, items)
        alone = min(float(self.threads), self.cores)
        compute = sum(got[: self.threads]) / alone if alone > 0 else 1.0
        comm = got[self.threads] / demand if demand > 0 else 1.0
        return min(compute, 1.0), min(comm, 1.0)

    def rate(self, demand: float) -> float:
        return self.rates(demand)[0]


def _waterfill(capacity: float, demands: list[float]) -> list[float]:
    """Max-min fair allocation of ``capacity`` to ``demands``."""
    order = sorted(range(len(demands)), key=lambda i: demands[i])
    out = [0.0] * len(demands)
    left, n = capacity, len(demands)
    for k, i in enumerate(order):
        out[i] = min(demands[i], left / (n - k)) if n > k else 0.0
        left -= out[i]
    return out


def cpu_of(layout: Layout, background: float) -> Cpu:
    return Cpu(layout.cores_per_node / layout.ranks_on_node, layout.threads_per_rank, background)


def _group(off: np.ndarray, dur: np.ndarray, cpu: np.ndarray, share: Cpu) -> tuple[float, float]:
    """One group of collectives against the compute that overlaps it: they run one at a
    time in one queue, each entering when the compute reaches its begin offset. While one
    runs beside the compute, it wants ``cpu[:, 0] / dur`` cores and the rank's cores are
    shared fairly between it and the compute threads (``share``); on a rank with no spare
    core the collective goes at the speed ailens calibrate measured beside computing ranks
    (``cpu[:, 1]``) when known. Returns (wall time at which
    the compute reached the last offset, wall time at which the queue emptied), from the
    group's first begin."""
    n = len(off)
    last = float(off[-1])
    cpu, lspeed = cpu[:, 0], cpu[:, 1]
    # Measured with the ranks computing on every core: applies when this rank has no spare.
    measured = share.cores <= share.threads + 1e-9
    plain = not cpu.any() and not (measured and np.isfinite(lspeed).any())
    if plain and share.rate(0.0) == 1.0:  # no contention: a plain queue
        free = 0.0
        for o, d in zip(off.tolist(), dur.tolist(), strict=True):
            free = max(free, o) + d
        return last, free
    tau = x = 0.0  # wall time, compute progress
    done = None if last > 0 else 0.0  # wall time the compute reached the last offset
    nxt = 0  # next collective to enter the queue
    queue: list[int] = []
    active, left = -1, 0.0
    while True:
        while nxt < n and off[nxt] <= x + 1e-15:
            queue.append(nxt)
            nxt += 1
        if active < 0 and queue:
            active = queue.pop(0)
            left = float(dur[active])
        if active < 0 and done is not None and nxt >= n:
            return done, max(tau, done)
        demand = float(cpu[active] / dur[active]) if active >= 0 and dur[active] > 0 else 0.0
        if done is None and active >= 0 and measured and np.isfinite(lspeed[active]):
            rate, speed = share.rates(demand)[0], float(lspeed[active])
        elif done is None:
            rate, speed = share.rates(demand)
        else:  # the caller waits: the collective has the cores to itself
            rate, speed = 0.0, replace(share, threads=0).rates(demand)[1]
        dt = (float(off[nxt]) if nxt < n else last) - x
        dt = dt / rate if done is None and rate > 0 else math.inf
        if active >= 0 and speed > 0:
            dt = min(dt, left / speed)
        if not math.isfinite(dt):
            return (done if done is not None else tau), tau
        tau += dt
        x += rate * dt
        if active >= 0:
            left -= speed * dt
            if left <= 1e-15:
                active = -1
        if done is None and x >= last - 1e-15:
            x, done = last, tau


@dataclass(frozen=True)
class _Flat:
    """Every step's collective groups, one row each in replay order: the step it belongs
    to, its first tick, whether it is a lone collective (those are replayed all at once by
    :func:`_lone_queue`), and the others as (row, ticks, offsets) for :func:`_group`."""

    step: np.ndarray
    tick: np.ndarray
    single: np.ndarray
    multi: tuple


def _flatten(groups: list) -> _Flat:
    step, tick, single, multi = [], [], [], []
    for k, gl in enumerate(groups):
        for ticks, off in gl:
            if len(ticks) != 1:
                multi.append((len(step), ticks, off))
            step.append(k)
            tick.append(int(ticks[0]))
            single.append(len(ticks) == 1)
    return _Flat(
        np.array(step, dtype=np.int64),
        np.array(tick, dtype=np.int64),
        np.array(single, dtype=bool),
        tuple(multi),
    )


@dataclass
class Replay:
    """The source's collective groups with their compute offsets as they would be without
    the contention the source had, and what the model says the source waited."""

    flat: _Flat  # the groups (multi-collective ones with their uncontended offsets)
    span_meas: np.ndarray  # per step: measured compute inside group spans
    span_pure: np.ndarray
    exposed: np.ndarray  # per step: modelled exposed comm at the source


def _lone_queue(dur: np.ndarray, cpu: np.ndarray, share: Cpu) -> np.ndarray:
    """When each queue emptied, for many one-collective groups at once: :func:`_group` with
    a single offset 0 (the compute reaches it at once, so the collective has the rank's
    cores to itself with the transport's idle threads). The same floating-point operations
    as :func:`_group`, so the same figures; NaN where it cannot tell (replay with it)."""
    d = np.asarray(dur, dtype=np.float64)
    measured = share.cores <= share.threads + 1e-9
    plain = not cpu.any() and not (measured and np.isfinite(cpu[:, 1]).any())
    if plain and share.rate(0.0) == 1.0:
        return 0.0 + d
    # _waterfill of the rank's cores between the collective's demand and the background.
    c, bg = share.cores, share.background
    with np.errstate(divide="ignore", invalid="ignore"):
        demand = np.where(d > 0, cpu[:, 0] / d, 0.0)
        got = np.where(
            demand <= bg, np.minimum(demand, c / 2), np.minimum(demand, c - min(bg, c / 2))
        )
        speed = np.minimum(np.where(demand > 0, got / demand, 1.0), 1.0)
        dt = d / speed
        done = d - speed * dt <= 1e-15  # one pass of _group's event loop finishes it
        w = np.where(speed > 0, np.maximum(0.0 + dt, 0.0), 0.0)
    w[(speed > 0) & ~done | np.isnan(speed) | ~(d >= 0)] = np.nan
    return w


def _queues(fl: _Flat, dur: np.ndarray, cpu: np.ndarray, share: Cpu, f: float = 1.0):
    """(compute reached the last offset, queue emptied) of every group of ``fl`` with its
    offsets x ``f`` (see :func:`_group`)."""
    xs = np.zeros(len(fl.step))
    ws = np.zeros(len(fl.step))
    t = fl.tick[fl.single]
    ws[fl.single] = _lone_queue(dur[t], cpu[t], share)
    for i in np.flatnonzero(np.isnan(ws)).tolist():
        ticks = fl.tick[i : i + 1]
        xs[i], ws[i] = _group(np.zeros(1) * f, dur[ticks], cpu[ticks], share)
    for i, ticks, off in fl.multi:
        xs[i], ws[i] = _group(off * f, dur[ticks], cpu[ticks], share)
    return xs, ws


def _per_step_sum(fl: _Flat, per: int, values: np.ndarray) -> np.ndarray:
    """Per step, the sum of its groups' values, added in replay order (as a loop adds)."""
    out = np.zeros(per)
    np.add.at(out, fl.step, values)
    return out


def unstretch(steps: Steps, dur: np.ndarray, cpu: np.ndarray, share: Cpu) -> Replay:
    """Find each group's uncontended offsets (a scale such that the contended replay ends
    the compute where the run did) and the modelled exposed comm of the source."""
    per = len(steps.idx)
    fl = _flatten(steps.groups)
    # A lone collective's offset is 0: nothing to scale. The others one by one.
    xs, ws = _queues(replace(fl, multi=()), dur, cpu, share)
    last = np.zeros(len(fl.step))
    lam = np.ones(len(fl.step))
    multi = []
    for i, ticks, off in fl.multi:
        last[i] = float(off[-1])
        d, u = dur[ticks], cpu[ticks]
        x, w = _group(off, d, u, share)
        for _ in range(6):
            if last[i] <= 0 or x <= 0 or abs(x - last[i]) <= 1e-4 * last[i]:
                break
            lam[i] *= last[i] / x
            x, w = _group(off * lam[i], d, u, share)
        xs[i], ws[i] = x, w
        multi.append((i, ticks, off * lam[i]))
    return Replay(
        replace(fl, multi=tuple(multi)),
        _per_step_sum(fl, per, last),
        _per_step_sum(fl, per, last * lam),
        _per_step_sum(fl, per, np.maximum(ws - xs, 0.0)),
    )


def replay_target(rep: Replay, dur: np.ndarray, cpu: np.ndarray, f: float, share: Cpu):
    """Per step (compute inside group spans, exposed comm) on the target."""
    per = len(rep.span_meas)
    xs, ws = _queues(rep.flat, dur, cpu, share, f)
    return _per_step_sum(rep.flat, per, xs), _per_step_sum(rep.flat, per, np.maximum(ws - xs, 0.0))


# Steps the what-if replays at most (a run with more replays this many, evenly spaced).
REPLAY_STEPS = 4000


def replay_sample(steps: int, cap: int | None = None) -> np.ndarray | None:
    """Which of a run's ``steps`` training steps the what-if replays against each target:
    None (all of them) up to ``cap`` (default :data:`REPLAY_STEPS`), else ``cap`` evenly
    spaced ones, first and last included. The replay gives each step's modelled comm and
    compute inside collective groups; the prediction takes their mean over the sample (the
    measured compute and comm are still means over every step). Every step has the same
    chance to be in the sample whatever its value, so the sample's mean estimates the
    mean over all steps without bias (unless the steps' times repeat with a period that
    is a multiple of the spacing), within about sd / sqrt(cap) of it: the cost of the
    replay stays bounded however long the run was."""
    cap = REPLAY_STEPS if cap is None else int(cap)
    if steps <= cap:
        return None
    return np.unique(np.round(np.linspace(0, steps - 1, cap)).astype(np.int64))


def steps_at(steps: Steps, rows: np.ndarray) -> Steps:
    return Steps(
        idx=steps.idx[rows],
        wall0=steps.wall0[rows],
        comp_mean=steps.comp_mean[rows],
        comp_max=steps.comp_max[rows],
        groups=[steps.groups[i] for i in rows.tolist()],
    )


def measured_spans(steps: Steps) -> np.ndarray:
    """Per step: the measured compute inside its collective groups (as :func:`unstretch`
    adds it up)."""
    out = np.zeros(len(steps.idx))
    for k, gl in enumerate(steps.groups):
        for _, off in gl:
            out[k] += float(off[-1])
    return out
