"""Generic tqdm progress bars (``45/100 [00:10<00:12, 4.50it/s]``), in a file that keeps
every redraw (carriage returns) or the last state of each line, possibly among other output:
the fallback for a training loop that shows its progress with tqdm and prints nothing this
registry reads more specifically (it comes after every other text format).

The training bar is the one that took longest (see ``_tqdm``): its count is the steps, its
elapsed time the clock; a bar created again for each epoch makes the epochs follow each other,
another bar between them (a validation) an "eval" section. The total is the bar's total when
one bar covers the run (a bar per epoch: give ``--epochs`` or ``--total-steps``). PyTorch
Lightning's console (``Epoch 3: 45%|... | 45/100 [00:10<00:12, 4.50it/s, v_num=0, ...]``, the
``Validation DataLoader 0`` bar inside the epoch) and NeMo 1's (the same bar with
``reduced_train_loss=..., train_step_timing in s=...``) are read the same way; Lightning's
```Trainer.fit` stopped: `max_epochs=K` reached`` ends the run and gives its epochs."""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Timeline
from ._base import LogFormat
from ._table import whole_lines
from ._tqdm import bars_timeline, count_bars

__all__ = ["FORMAT", "read_tqdm"]


_FIT_STOPPED = re.compile(r"`Trainer\.fit` stopped: `max_epochs=(\d+)` reached")


def read_tqdm(path: Path, text: str) -> Timeline:
    text = whole_lines(text)
    stopped = _FIT_STOPPED.search(text)
    return bars_timeline(
        path,
        text,
        source="tqdm",
        epochs=int(stopped.group(1)) if stopped else None,
        ended=stopped is not None,
        what="tqdm bars ('45/100 [00:10<00:12, 4.50it/s]')",
    )


def _detect(head: str) -> bool:
    return count_bars(head, 3) >= 3


FORMAT = LogFormat(
    name="tqdm",
    title="generic tqdm progress bars (N/M [elapsed<remaining, rate])",
    detect=_detect,
    read=read_tqdm,
    example=" 45%|████▌     | 45/100 [00:10<00:12,  4.50it/s]",
)
