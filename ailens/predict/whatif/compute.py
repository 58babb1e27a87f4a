"""How one rank's compute speed depends on its cores and its node's load.

``speed = S(cores one rank's threads get) / I(cores busy on the node)``; the what-if's
compute factor is the source's speed over the target's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .calibration import compute_probe
from .features import RunFeatures
from .layout import Layout

__all__ = ["ComputeModel", "compute_model"]


@dataclass(frozen=True)
class ComputeModel:
    """How one rank's compute speed depends on its cores and its node's load.

    ``speedup``: cores -> speed-up of the intra-op threads over 1 core (measured points,
    interpolated; Amdahl with ``serial`` beyond). ``corun``: busy cores of the node ->
    slowdown of each core (1 at one busy core).
    """

    speedup: tuple[tuple[float, float], ...] = ((1.0, 1.0),)
    serial: float = 0.0
    corun: tuple[tuple[float, float], ...] = ((1.0, 1.0),)
    threads_source: str = ""
    corun_source: str = ""

    def S(self, cores: float) -> float:
        if cores <= 1:
            return max(cores, 1e-6)
        xs = [c for c, _ in self.speedup]
        ys = [s for _, s in self.speedup]
        if cores <= xs[-1] and len(xs) > 1:
            return float(np.interp(cores, xs, ys))
        top_c, top_s = xs[-1], ys[-1]
        s = self.serial
        amdahl = lambda c: 1.0 / (s + (1.0 - s) / c)  # noqa: E731
        return top_s * amdahl(cores) / amdahl(top_c)

    def I(self, busy: float) -> float:  # noqa: E743 - the model's name for it
        xs = [c for c, _ in self.corun]
        ys = [s for _, s in self.corun]
        if len(xs) == 1:
            return 1.0
        return float(np.interp(busy, xs, ys))

    def speed(self, layout: Layout) -> float:
        """Work per second of one rank relative to one thread alone on the node."""
        return self.S(layout.cores_per_rank) / self.I(layout.busy_cores)


def compute_model(feats: RunFeatures, cal: dict | None) -> tuple[ComputeModel, list[str]]:
    """The run's compute model: the calibration's probe where it measured, else the run's
    CPU-time parallelism, else labelled assumptions (the notes say which)."""
    speedup, corun, t_src, c_src = compute_probe(cal)
    serial = 0.0
    if speedup is not None:
        c_top, s_top = speedup[-1]
        serial = _amdahl_serial(s_top, c_top)
    lay = feats.layout
    if speedup is None:
        eff = lay.cores_per_rank
        if feats.parallelism is not None and eff > 1.05:
            p = min(feats.parallelism, eff)
            serial = _amdahl_serial(p, eff)
            speedup = ((1.0, 1.0), (eff, p))
            t_src = (
                f"from this run's CPU-time parallelism {feats.parallelism:.2f} on "
                f"{eff:g} cores (an upper bound when idle threads spin)"
            )
        else:
            speedup = ((1.0, 1.0),)
            t_src = "assumed: intra-op threads scale perfectly up to the cores (not measured)"
    if corun is None:
        corun = ((1.0, 1.0),)
        c_src = "not modelled: memory bandwidth and caches shared by ranks on a node (not measured)"
    notes = [f"thread speed-up: {t_src}", f"ranks sharing a node: {c_src}"]
    return ComputeModel(speedup, serial, corun, t_src, c_src), notes


def _amdahl_serial(speedup: float, cores: float) -> float:
    """Serial fraction s with 1 / (s + (1 - s) / cores) = speedup (clipped to [0, 1])."""
    if cores <= 1 or speedup <= 0:
        return 0.0
    return float(min(max((cores / speedup - 1) / (cores - 1), 0.0), 1.0))
