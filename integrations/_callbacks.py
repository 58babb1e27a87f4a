"""What the Lightning and Hugging Face callbacks share: the settings checked at the user's
line, the torch adapter attached when training starts (never breaking training), the Lens of
the last run, and the step end that may stop every rank at once."""

from __future__ import annotations

from typing import Any

import torch

from ailens import Lens, LensConfig

from . import torch as ailens_torch
from ._base import goes_on_without


class TorchCallback:
    """Mixin of a framework callback driving :func:`ailens.integrations.torch.attach`."""

    def _configure(self, config: dict[str, Any]) -> None:
        LensConfig(**config)  # a misspelt or invalid setting fails here, at the user's line
        self._config = config
        self._handle = None  # the torch adapter's handle once training began
        self._steps_from_optimizer = False

    @property
    def lens(self) -> Lens | None:
        """The Lens of the last run (closed once it ended), else None."""
        return None if self._handle is None else self._handle.lens

    @property
    def _open(self) -> Lens | None:
        lens = self.lens
        return None if lens is None or lens.closed else lens

    def _attach(self, framework: str, model: Any, optimizer: Any) -> bool:
        """Attach the torch adapter (``framework`` names the run, ``-ddp`` added for a DDP
        model); False, with a warning, when that fails: training goes on without it."""
        config = dict(self._config)
        is_ddp = isinstance(model, torch.nn.parallel.DistributedDataParallel)
        config.setdefault("framework", f"{framework}-ddp" if is_ddp else framework)
        try:
            self._handle = ailens_torch.attach(model, optimizer, **config)
        except Exception as e:  # noqa: BLE001 - never break training
            goes_on_without("LensCallback could not attach", e)
            return False
        self._steps_from_optimizer = optimizer is not None
        return True

    def _step_ended(self, lens: Lens) -> bool:
        """An optimizer step ended: mark it unless the optimizer hook does; whether every
        rank should stop now (``early_stop=True``)."""
        if not self._steps_from_optimizer:
            self._handle.step_end()
        return lens.should_stop
