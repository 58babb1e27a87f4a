"""The training-step level: a robust local level of the step time, one step at a time.

A step far from the level (> ``Z_OUT`` robust sd) is left out of it, so a one-off outlier (a
GC pause, a burst from another process) does not move the forecast; ``CHANGE_RUN`` such steps
in a row on the same side, or a drift that a CUSUM test catches, start a new regime: a lasting
change of speed is adopted within a few steps."""

from __future__ import annotations

import math
from collections import deque

from ..._stats import chi2_quantile


class StepLevel:
    """The training-step time of the current regime, one step at a time in O(1).

    The regime's sums hold every step since it began, so their mean is what the steps cost,
    heavy tail included. Besides, a robust centre (the mean of the steps within ``Z_OUT``
    robust sd of it) and scale classify each step: an outlier is kept in ``spikes`` (step ->
    seconds over the centre, < 0 for a fast one), from which the forecast takes out one-offs
    and recurring extras. ``CHANGE_RUN`` consistent outliers in a row on one side, or a CUSUM
    alarm, start a new regime from where the change began, when the speed moved by at least
    ``MIN_CHANGE``.
    """

    Z_OUT = 4.0
    CHANGE_RUN = 4
    MIN_CHANGE = 0.05
    CUSUM_K = 0.5
    CUSUM_H = 10.0
    CUSUM_AFTER = 10  # accepted steps before the CUSUM test starts (the scale settles first)
    BLOCK = 10
    KEEP = 64
    START = 3  # steps taken as they come at the start of a regime
    EW = 0.05  # weight of a new step in the robust scale
    MIN_SCALE = 0.01
    MAX_SPIKES = 256  # outliers kept for the forecast to classify (the most recent)
    MAX_RUN = 16  # a run of same-side outliers is judged on its most recent ones: O(1) a step

    def __init__(self) -> None:
        self.regime_start: int | None = None
        self.changes: list[tuple[int, float, float]] = []  # (step, level before, after)
        self.spikes: dict[int, float] = {}
        # Outliers of the current regime dropped from ``spikes`` (their count and time over
        # the centre), still in its sums.
        self.retired_n, self.retired_sum = 0, 0.0
        self.all_n, self.all_sum = 0, 0.0  # every step since the warm-up, across regimes
        # A coarse clock's error on one step (its resolution shared over the steps between
        # two readings): no step is an outlier, nor a change of speed, by that much.
        self.quantum_s = 0.0
        self._reset([])

    def _reset(self, values: list[tuple[int, float]]) -> None:
        self.retired_n, self.retired_sum = 0, 0.0
        self.n = 0
        self.sum = 0.0
        self.wsum = self.wsum2 = 0.0  # winsorised at the centre +/- Z_OUT scale: the spread
        self.acc_n, self.acc_sum = 0, 0.0  # the steps that were not outliers: the centre
        self.acc_obs = 0  # and the observations they came in (the CUSUM waits for the scale)
        self.dev = 0.0
        self.recent: deque[tuple[int, float]] = deque(maxlen=self.KEEP)
        self.run: list[tuple[int, float]] = []  # the outliers' steps in a row on one side
        self.run_sign = 0
        self.run_sizes: list[int] = []  # the run's observations: steps in each
        self._start: list[tuple[int, float]] = []  # the steps taken as they came
        self._start_obs = 0
        self.cusum = [0.0, 0.0]  # up, down
        self.cusum_from: list[int | None] = [None, None]
        self.block_sum, self.block_n = 0.0, 0
        self.blocks, self.bsum, self.bsum2 = 0, 0.0, 0.0
        self.si = self.sii = self.siw = 0.0  # for the regime's linear trend
        if values:
            self.regime_start = values[0][0]
            xs = sorted(x for _, x in values)
            mid = xs[len(xs) // 2]
            dev = max(sum(abs(x - mid) for x in xs) / len(xs), 0.002 * mid)
            # A regime restarted from where its change began may reach back over an outlier
            # (the first evaluation inside a step, just after an epoch end): it stays a spike,
            # as it was, not a step of the new regime's level (that made the forecast jump
            # by tens of percent twice: in when the regime began, out when the next did).
            limit = self.Z_OUT * max(1.2533 * dev, self.MIN_SCALE * mid)
            keep = [x for _, x in values if abs(x - mid) <= limit]
            if len(keep) < self.START:
                keep, limit = xs, math.inf
            self.dev = max(sum(abs(x - mid) for x in keep) / len(keep), 0.002 * mid)
            for i, x in values:
                if abs(x - mid) > limit:
                    self.spikes[i] = x - mid
                    self._add_to_sums(i, x, mid + math.copysign(limit, x - mid))
                    continue
                self._add_to_sums(i, x, x)
                self.acc_n += 1
                self.acc_sum += x
            self.acc_obs = self.acc_n

    @property
    def center(self) -> float | None:
        return self.acc_sum / self.acc_n if self.acc_n else None

    @property
    def mean(self) -> float | None:
        return self.sum / self.n if self.n else None

    @property
    def scale(self) -> float:
        """Robust sd of one step, floored at ``MIN_SCALE`` of the centre: steps a few percent
        off are ordinary jitter, not outliers or spikes worth scheduling."""
        c = self.center or 0.0
        return max(1.2533 * self.dev, self.MIN_SCALE * c, self.quantum_s, 1e-9)

    def add(self, i: int, x: float, k: int = 1) -> None:
        """Step ``i`` took ``x`` seconds of training (sections left out); with ``k > 1``, the
        ``k`` steps up to ``i`` took ``x`` each: one clock reading over ``k`` steps (a log
        line every ``k`` steps, a coarse clock), its time shared evenly. Its steps all count
        in the regime's sums, but it is judged as one observation (outlier or not, the
        scale, the CUSUM, a run of outliers): ``k`` equal shares are not ``k`` independent
        steps, and judged one by one a slightly slow interval of 10 steps read as a change
        of speed (issue 30: a forecast interval of +/- 130 % on a LLaMA-Factory log)."""
        ids = range(i - k + 1, i + 1)
        self.all_n += k
        self.all_sum += k * x
        if self.n < self.START:
            # Taken as they come (the scale is not known yet), but counted: the level of the
            # first steps is their mean.
            if self.n == 0:
                self.regime_start = ids[0]
            self._start.extend((j, x) for j in ids)
            for j in ids:
                self._add_to_sums(j, x, x)
            self.acc_n += k
            self.acc_sum += k * x
            self._start_obs += 1
            if self._start_obs >= self.START:
                self._reset(self._start)
            return
        c, s = self.center, self.scale
        z = (x - c) / s
        if abs(z) > self.Z_OUT:
            sign = 1 if z > 0 else -1
            if sign != self.run_sign:
                self.run, self.run_sign, self.run_sizes = [], sign, []
            self.run.extend((j, x) for j in ids)
            self.run_sizes.append(k)
            if len(self.run_sizes) > self.MAX_RUN:  # outliers on one side that never agree
                del self.run[: self.run_sizes.pop(0)]
            for j in ids:
                self.spikes[j] = x - c
                self._add_to_sums(j, x, c + sign * self.Z_OUT * s)
            while len(self.spikes) > self.MAX_SPIKES:
                # Only recent outliers are classified. An older one's time stays in the
                # regime's sums: count it apart (``retired``), so the forecast takes it out
                # of the level in the share the kept ones are explained (a periodic extra
                # must not be charged both in the level and on its schedule).
                j = next(iter(self.spikes))
                v = self.spikes.pop(j)
                if j >= (self.regime_start or 0) and v > 0:
                    self.retired_n += 1
                    self.retired_sum += v
            if len(self.run_sizes) >= self.CHANGE_RUN and self._consistent(self.run, c):
                self._restart(list(self.run))
            return
        self.run, self.run_sign, self.run_sizes = [], 0, []
        self.dev += self.EW * (abs(x - c) - self.dev)
        self.acc_n += k
        self.acc_sum += k * x
        for j in ids:
            self._add_to_sums(j, x, x)
        self.acc_obs += 1
        if self.acc_obs >= self.CUSUM_AFTER:
            self._cusum(ids[0], z)

    def _consistent(self, run: list[tuple[int, float]], c: float) -> bool:
        """Outliers that agree with each other and sit a material distance from the centre."""
        xs = sorted(x for _, x in run)
        shift = abs(xs[len(xs) // 2] - c)
        return xs[-1] - xs[0] <= 0.5 * shift and shift >= self.MIN_CHANGE * c

    def _cusum(self, i: int, z: float) -> None:
        for side, zz in ((0, z), (1, -z)):
            before = self.cusum[side]
            self.cusum[side] = max(0.0, before + zz - self.CUSUM_K)
            if before == 0.0 and self.cusum[side] > 0.0:
                self.cusum_from[side] = i
            if self.cusum[side] > self.CUSUM_H:
                start = self.cusum_from[side]
                values = [(j, x) for j, x in self.recent if j >= start]
                self.cusum = [0.0, 0.0]
                new = sum(x for _, x in values) / max(len(values), 1)
                if len(values) >= self.START and abs(new - self.center) >= self.MIN_CHANGE * new:
                    self._restart(values)
                return

    def _add_to_sums(self, i: int, x: float, w: float) -> None:
        self.n += 1
        self.sum += x
        self.wsum += w
        self.wsum2 += w * w
        j = i - (self.regime_start or 0)
        self.si += j
        self.sii += j * j
        self.siw += j * w
        self.recent.append((i, x))
        self.block_sum += w
        self.block_n += 1
        if self.block_n == self.BLOCK:
            self.blocks += 1
            self.bsum += self.block_sum
            self.bsum2 += self.block_sum * self.block_sum
            self.block_sum, self.block_n = 0.0, 0

    def _restart(self, values: list[tuple[int, float]]) -> None:
        before = self.center
        for j, _ in values:
            self.spikes.pop(j, None)
        self._reset(values)
        self.changes.append((values[0][0], before or 0.0, self.center or 0.0))

    def sd(self) -> float:
        """Step-to-step sd of the regime's steps, winsorised (outliers are counted apart)."""
        n = self.n
        if n < 2:
            return self.scale
        return math.sqrt(max((self.wsum2 - self.wsum * self.wsum / n) / (n - 1), 0.0))

    def trend(self) -> float:
        """Seconds per step per step of a linear trend in the regime's steps, when it is
        significant (|t| > 3), else 0."""
        n = self.n
        sxx = self.sii - self.si * self.si / n if n > 2 else 0.0
        if sxx <= 0:
            return 0.0
        slope = (self.siw - self.si * self.wsum / n) / sxx
        # The spread around the line, not around the mean (which holds the trend itself).
        sww = self.wsum2 - self.wsum * self.wsum / n
        resid = max(
            (sww - slope * slope * sxx) / (n - 2),
            (self.MIN_SCALE * self.center) ** 2 / 4,
            # A coarse clock's error is shared by the steps between two readings (about
            # centre / quantum of them): their spread around the line is no independent noise.
            self.quantum_s * self.center,
        )
        return slope if abs(slope) > 3 * math.sqrt(resid / sxx) else 0.0

    def mean_var(self) -> tuple[float, float]:
        """(variance of the regime's mean step from its spread, excess variance of the batch
        means per step^2: slow swings beyond the step-to-step noise)."""
        n, sd = self.n, self.sd()
        var = sd * sd / max(n, 1)
        excess = 0.0
        k = self.blocks
        if k >= 5 and sd > 0:
            b = self.BLOCK
            var_b = max((self.bsum2 - self.bsum * self.bsum / k) / (k - 1), 0.0) / (b * b)
            # Slow swings: batch means that vary significantly more than the step-to-step
            # noise allows (chi-square test at 99 %) set the level's uncertainty instead.
            if (k - 1) * var_b / (sd * sd / b) > chi2_quantile(0.99, k - 1):
                var = max(var, var_b / k)
                excess = var_b - sd * sd / b
        return var, excess
