"""Ultralytics YOLO's training console (YOLOv5, YOLOv8/11 before 8.3's new bar): ``Starting
training for K epochs...``, then for each epoch a header (``Epoch GPU_mem box_loss ...``; before
YOLOv5 v7.0 ``Epoch gpu_mem box obj cls ...``, in its 2020 releases ``... GIoU ...``; for
classification ``Epoch GPU_mem train_loss val_loss ...``, YOLOv8 ``Epoch GPU_mem loss ...``) and
the epoch's bar, ``  1/50  3.2G  1.206 ...  640: 100%|██████████| 120/120 [00:30<00:00,
3.9it/s]`` (from 8.3 Ultralytics' own bar: ``640: 100% ━━━━━━━━━━━━ 120/120 3.9it/s 30.5s``),
then the validation's bar (``Class Images Instances ... 100%| 4/4 [00:01<00:00,
...]``); ``K epochs completed in X hours.`` (YOLOv5 classification: ``Training complete (X
hours)``) at the end.

The steps are the batches (the bar's count, N per epoch, numbered on across epochs); each
epoch lasts its bar's elapsed time and its validation bar's is an "eval" section after it
(the bars print whole seconds); the total is K x N. A validation after every epoch is the
schedule where the printed arguments say so (YOLOv5's ``noval=False``, Ultralytics 8's
``val=True``)."""

from __future__ import annotations

import re
from pathlib import Path

from ...model.timeline import Timeline
from ._base import LogFormat, config_text
from ._table import whole_lines
from ._tqdm import bars_timeline, count_bars

__all__ = ["FORMAT", "read_yolo_console"]

# "Starting training for 3 epochs...", YOLOv5 classify's "Starting yolov5s-cls.pt training on
# imagenette160 dataset with 10 classes for 5 epochs..."
_EPOCHS = re.compile(r"Starting\b.*?\bfor (\d+) epochs")
# "3 epochs completed in 0.003 hours.", YOLOv5 classify's "Training complete (0.052 hours)"
_DONE = re.compile(r"\d+ epochs completed in [\d.]+ hours|Training complete \([\d.]+ hours\)")
# the epoch bar's line: "  1/50  3.2G  1.2 ... 640: 100%" (its description, numbers taken out)
_TRAIN_KEY = re.compile(r"^G?\s*$|^[A-Za-z]?\s*$")
# "Epoch GPU_mem box_loss ..." (YOLOv5 from v7.0, YOLOv8/11), "Epoch gpu_mem box obj cls ..."
# (YOLOv5 before v7.0), "Epoch gpu_mem GIoU obj cls total ..." (YOLOv5's first releases, 2020);
# classification: "Epoch GPU_mem train_loss val_loss top1_acc ..." (YOLOv5), "Epoch GPU_mem
# loss Instances Size" (YOLOv8/11)
_HEADER = re.compile(
    r"^\s*Epoch\s+gpu_mem\s+(?:box(?:_loss)?|GIoU|loss|train_loss)\s", re.MULTILINE | re.IGNORECASE
)


def read_yolo_console(path: Path, text: str) -> Timeline:
    text = whole_lines(text)
    m = _EPOCHS.search(text)
    return bars_timeline(
        path,
        text,
        source="yolo",
        train_key=_TRAIN_KEY,
        epochs=int(m.group(1)) if m else None,
        ended=_DONE.search(text) is not None,
        what="Ultralytics epoch bars ('  1/50  3.2G  1.206 ...  640: 100%| 120/120 [00:30<00:00')",
        schedule=_schedule(text),
    )


def _schedule(text: str) -> dict:
    """A validation after every epoch where the printed arguments say so: YOLOv5's
    ``noval=False``, Ultralytics 8's ``val=True`` (with ``noval`` / ``val=False`` only the
    last epoch's)."""
    every = config_text(text, "noval") == "False" or config_text(text, "val") == "True"
    return {"eval_every_epochs": 1} if every else {}


def _detect(head: str) -> bool:
    return bool(_HEADER.search(head)) and count_bars(head, 1) >= 1


FORMAT = LogFormat(
    name="yolo-console",
    title="Ultralytics YOLO console (Epoch GPU_mem box_loss ...; 1/50 ... 120/120 [00:30<00:00])",
    detect=_detect,
    read=read_yolo_console,
    example="        1/50      2.64G      1.206      1.496       1.27        199        640: 100%|"
    "██████████| 8/8 [00:01<00:00,  4.03it/s]",
)
