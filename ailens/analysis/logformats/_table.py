"""CSV tables the frameworks write (Ultralytics' results.csv, Lightning's metrics.csv): the
header's column names (stripped: Ultralytics 8.0 pads them) and the rows as dicts of floats
(empty or non-numeric cells left out); and the whole lines of a log still being written."""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

import numpy as np

from ._base import LogError

__all__ = ["elapsed", "header", "rows", "time_column", "whole_lines"]

# A column a script logged a time in: "time", "epoch_time", "train_time", "elapsed", ...
_TIME_COLUMN = re.compile(r"(?:^|[/_.\-])(?:time|elapsed|duration|wall)(?:_s|_sec|_secs)?$")


def time_column(names: list[str]) -> str | None:
    """The first column named like a time (not a data-loading time)."""
    return next((n for n in names if _TIME_COLUMN.search(n) and "data_time" not in n), None)


def elapsed(values: list[float]) -> tuple[list[float], bool]:
    """Seconds since the start at each row, and whether the column was a clock: a column
    that never decreases and grows well past its first value (the k-th reading ~ k times the
    first) is a clock; else it is a duration per row (an epoch's time), summed."""
    v = np.asarray(values, dtype=float)
    clock = len(v) > 1 and bool(np.all(np.diff(v) >= 0)) and v[-1] > 1.5 * v[0]
    return (v if clock else np.cumsum(v)).tolist(), clock


def whole_lines(text: str) -> str:
    """The text without a last line the writer has not finished (a log read while the job
    writes it, or a copy cut short): its numbers could be cut ("(0.1" of "(0.148s")."""
    if not text or text.endswith(("\n", "\r")):
        return text
    cut = max(text.rfind("\n"), text.rfind("\r"))
    return text[: cut + 1]


def header(text: str) -> list[str]:
    """The first line's column names, stripped and lower-cased."""
    first = text.lstrip("\ufeff").split("\n", 1)[0]
    try:
        return [c.strip().lower() for c in next(csv.reader([first]))]
    except (csv.Error, StopIteration):
        return []


def rows(path: Path, text: str) -> tuple[list[str], list[dict[str, float]]]:
    try:
        table = list(csv.reader(io.StringIO(whole_lines(text).lstrip("\ufeff"))))
    except csv.Error as e:
        raise LogError(f"{path}: not a CSV ({e})") from None
    if not table:
        raise LogError(f"{path}: empty file")
    names = [c.strip().lower() for c in table[0]]
    out = []
    for row in table[1:]:
        rec = {}
        for name, cell in zip(names, row, strict=False):  # a short row: its cells
            try:
                v = float(cell)
            except ValueError:
                continue
            if math.isfinite(v):
                rec[name] = v
        if rec:
            out.append(rec)
    return names, out
