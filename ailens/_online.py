"""What the Lens keeps up to date during training: the phase table and per-step timing.

Fed by the Lens after each cross-rank exchange (``on_batch``, identical on every rank) and
at each step end (``on_step``, local clock). Signature and forecast live in _forecast.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ._config import LensConfig
from .phases import OnlinePhases


class OnlineAnalysis:
    def __init__(self, cfg: LensConfig, world_size: int, rank: int, op_names: list[str]) -> None:
        self.cfg = cfg
        self.world_size = world_size
        self.rank = rank
        self.op_names = op_names  # shared with the Lens, grows as ops appear
        self.phases = OnlinePhases(tolerance=cfg.tolerance, min_share=cfg.min_phase_share)
        self.total_steps = cfg.total_steps
        self.disabled_ranks = 0
        self.step_t_ns: list[int] = []
        self.signature_ready = False

    def on_batch(self, simo, key, comm_ns, compute_ns, disabled_ranks: int) -> None:
        self.disabled_ranks = max(self.disabled_ranks, disabled_ranks)
        self.phases.add(np.asarray(simo), np.asarray(key), np.asarray(comm_ns) / 1e9, np.asarray(compute_ns) / 1e9)

    def on_step(self, step: int, t_ns: int) -> None:
        self.step_t_ns.append(t_ns)

    def table(self):
        return self.phases.table()

    def finish(self, run_dir: Path, elapsed_ns: int) -> None:
        """Rank 0 writes the online phase table to the run directory."""
        if self.rank != 0:
            return
        doc = {
            "source": "online",
            "world_size": self.world_size,
            "disabled_ranks": self.disabled_ranks,
            "elapsed_s": elapsed_ns / 1e9,
            "steps": len(self.step_t_ns),
            "table": self.table().to_dict(),
            "op_names": list(self.op_names),
        }
        write_json(Path(run_dir) / "phases-online.json", doc)


def write_json(path: Path, doc: dict) -> None:
    """Write JSON atomically (temp file + rename) so readers never see half a file."""
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
