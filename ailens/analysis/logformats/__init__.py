"""The log formats ``ailens forecast LOG`` reads, one small reader per format, in one place.

To add a format: write ``ailens/analysis/logformats/<name>.py`` with a ``FORMAT =
LogFormat(name=..., title=..., detect=..., read=..., example=...)`` whose ``read`` parses the
progress lines into :class:`Point` and hands them to :func:`timeline_from_points`; add it to
``FORMATS`` below (before any format whose ``detect`` would also take its files); add a real
public log of it under ``tests/data/logs/<name>/`` with a README (source, commit, licence)
and a test in ``tests/test_logformats.py`` (which checks every format has a sample, detected
as its own); a row in docs/internals.md and in docs/forecast.md's table of formats.
``read_log`` picks the format by content (the first of ``FORMATS`` whose ``detect`` takes the
file's head, then the whole text) or takes the one named.
"""

from __future__ import annotations

from pathlib import Path

from ...model.timeline import Timeline
from . import (
    composer,
    csv_steps,
    deepspeed,
    detectron2,
    fairseq,
    hf_trainer,
    hf_trainer_state,
    keras,
    keras_csv,
    lightning_csv,
    llamafactory,
    llmc,
    megatron,
    metriclogger,
    mlperf,
    mmengine,
    modded_nanogpt,
    nanogpt,
    nemo,
    paddle,
    pylogging,
    tensorflow_logs,
    timm,
    torchtitan,
    tqdm_bars,
    yolo,
    yolo_console,
)
from ._base import (
    CSV_FORM,
    HEAD_BYTES,
    LogError,
    LogFormat,
    Point,
    first_line,
    timeline_from_points,
)
from ._text import read_text
from .mlperf import parse_mlperf

__all__ = [
    "FORMATS",
    "LogError",
    "LogFormat",
    "Point",
    "detect_format",
    "format_names",
    "get_format",
    "parse_mlperf",
    "read_log",
    "read_text",
    "timeline_from_points",
]

# Detection order: the most specific formats first; the CSV form last.
FORMATS: tuple[LogFormat, ...] = (
    mlperf.FORMAT,
    megatron.FORMAT,  # before deepspeed: Megatron-DeepSpeed logs carry both
    nemo.FORMAT,
    deepspeed.FORMAT,
    torchtitan.FORMAT,
    modded_nanogpt.FORMAT,
    llmc.FORMAT,
    nanogpt.FORMAT,
    fairseq.FORMAT,
    hf_trainer_state.FORMAT,
    llamafactory.FORMAT,
    hf_trainer.FORMAT,
    mmengine.FORMAT,
    detectron2.FORMAT,
    paddle.FORMAT,
    metriclogger.FORMAT,
    timm.FORMAT,
    keras.FORMAT,
    composer.FORMAT,
    yolo.FORMAT,
    yolo_console.FORMAT,
    lightning_csv.FORMAT,
    keras_csv.FORMAT,
    tensorflow_logs.FORMAT,
    pylogging.FORMAT,  # generic: after every format whose lines it would also take
    tqdm_bars.FORMAT,  # generic: after every format whose logs carry tqdm bars
    csv_steps.FORMAT,
)


def format_names() -> list[str]:
    return [f.name for f in FORMATS]


def get_format(name: str) -> LogFormat:
    for f in FORMATS:
        if f.name == name:
            return f
    raise LogError(f"unknown log format {name!r}; known: {', '.join(format_names())}")


def detect_format(text: str) -> LogFormat | None:
    """The first format whose ``detect`` takes the text's head (then the whole text, for a
    log whose progress lines come after a long preamble); None when none does."""
    head = text[:HEAD_BYTES]
    for part in (head, text) if len(text) > len(head) else (head,):
        for f in FORMATS:
            if f.detect(part):
                return f
    return None


def read_log(path: Path, text: str | None = None, fmt: str | None = None) -> Timeline:
    """The timeline of the log at ``path``: in format ``fmt`` when named, else in the format
    its content is. A file no format takes gets one LogError line: what it looks like, the
    formats tried, the CSV form to convert it to."""
    text = read_text(path) if text is None else text
    if fmt is not None:
        return get_format(fmt).read(path, text)
    f = detect_format(text)
    if f is None:
        look = first_line(text)
        raise LogError(
            f"{path}: not a training log ailens reads (it begins {look!r}); tried "
            f"{', '.join(format_names())}; force one with --format NAME, or convert it to "
            f"{CSV_FORM}, e.g. '10,5.2' (MLPerf logs need :::MLLOG lines)"
            if look
            else f"{path}: empty file; not a training log (tried {', '.join(format_names())})"
        )
    return f.read(path, text)
