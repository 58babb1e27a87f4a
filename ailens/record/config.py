"""The one frozen, keyword-only settings object every Lens is built from."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

COUNTER_CHOICES = ("auto", "instructions", "cpu-ns")
PHASE_KEYS = ("op", "op+size")


@dataclass(frozen=True, kw_only=True)
class LensConfig:
    """Settings of a Lens. Every field is keyword-only; unknown keys raise ``TypeError``.

    ``run_dir`` defaults to ``$AILENS_RUN_DIR`` or ``./ailens-run``.
    """

    run_dir: Path = field(
        default_factory=lambda: Path(os.environ.get("AILENS_RUN_DIR", "ailens-run"))
    )
    counter: str = "auto"
    # Events per flushed chunk: a killed rank loses at most this many events.
    chunk_events: int = 4096
    # Cross-rank SIMO exchange: at a step end, once exchange_ticks ticks are pending or the
    # agreed step interval has passed. Rank 0 sets that interval so that exchanges are at
    # least exchange_seconds apart (0: every step; the exchange and the online analysis cost
    # ~1 ms), and exchange_elapsed_share of the elapsed time once that is longer. The
    # tick cap is a bound on the payload (3 x 8 bytes a tick), set so that fast steps with
    # many collectives still exchange by time, not every few steps.
    exchange_ticks: int = 4096
    exchange_seconds: float = 1.0
    # A round costs every rank ~1.5-2 ms on cold caches (the sums, the online model's
    # evaluation; issue 33): at one a second, a floor of ~0.15-0.2 % of the run whatever its
    # step time. Spaced with the elapsed time, a run's rounds grow with the logarithm of its
    # length (after an hour, one every 18 s), and an early stop decided at a round comes at
    # most this share of the elapsed time late. 0: exchange_seconds alone.
    exchange_elapsed_share: float = 0.005
    tolerance: int = 1
    phase_key: str = "op"
    min_phase_share: float = 0.01
    # Total training steps when known (Keras epochs x steps, len(loader) x epochs).
    total_steps: int | None = None
    # Steps per epoch when known (len(loader)): evaluation and epoch-end work recur per epoch.
    steps_per_epoch: int | None = None
    # Signature (PAS2P): the first evaluation (at an exchange, after signature_min_steps
    # steps) at which the run's structure is captured: the step level and every recurring
    # part seen, each known to +/-10 % per occurrence or what it still costs to within
    # signature_rel_tol of the predicted total (docs/forecast.md, "The signature").
    # The first exchange comes signature_window // 2 steps after the start.
    signature_window: int = 10
    signature_rel_tol: float = 0.03
    # A part is captured when its time per occurrence is known to +/- this (95 %, relative).
    # On the development corpus (docs/forecast.md, "The signature") the step level of a
    # steady run gets there with 2 steps after the warm-up, a section after 4 warm
    # occurrences.
    signature_part_precision: float = 0.10
    signature_min_steps: int = 20
    # Stop training on all ranks once the signature is ready (integrations honour it).
    early_stop: bool = False
    # Rank 0 prints a progress/forecast line every N steps (0 = off).
    progress_every: int = 0
    # Steps excluded from the per-step estimate (first steps warm caches and allocators).
    warmup_steps: int = 2
    # Whether `ailens report RUN_DIR` may write RUN_DIR/signature.json (the run's signature
    # record, for `ailens history add`) when it is missing. The run itself never writes it:
    # closing costs milliseconds. False: report leaves the run directory as the run left it;
    # `history add RUN_DIR`, an explicit request, still makes and writes the record.
    signature_record: bool = True
    framework: str = "plain"
    backend: str = ""
    enabled: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "run_dir", Path(self.run_dir))
        if self.counter not in COUNTER_CHOICES:
            raise ValueError(
                f"counter={self.counter!r}: choose one of {', '.join(COUNTER_CHOICES)}"
            )
        if self.phase_key not in PHASE_KEYS:
            raise ValueError(f"phase_key={self.phase_key!r}: choose one of {', '.join(PHASE_KEYS)}")
        for name in ("chunk_events", "exchange_ticks", "signature_window", "signature_min_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.exchange_ticks > 1 << 16:
            raise ValueError(
                f"exchange_ticks must be <= 65536 (payload size), got {self.exchange_ticks}"
            )
        if self.exchange_seconds < 0:
            raise ValueError(f"exchange_seconds must be >= 0, got {self.exchange_seconds}")
        if not 0 <= self.exchange_elapsed_share < 1:
            raise ValueError(
                f"exchange_elapsed_share must be in [0, 1), got {self.exchange_elapsed_share}"
            )
        if self.tolerance < 0:
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance}")
        if not 0 <= self.min_phase_share < 1:
            raise ValueError(f"min_phase_share must be in [0, 1), got {self.min_phase_share}")
        for name in ("total_steps", "steps_per_epoch"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")

    def replace(self, **changes) -> LensConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["run_dir"] = str(self.run_dir)
        return d
