"""Files and durations, written one way everywhere: the JSON readers (a run's optional side
files; a file the user named, checked), the atomic writer (temp file + rename: a reader never
sees half a file), and the duration formatter of every output."""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["atomic_file", "fmt_s", "read_json", "read_json_file", "write_json", "write_text"]


def read_json(path: Path) -> dict | None:
    """A JSON object file, or None when it is missing, unreadable or not an object (the
    optional side files of a run: forecast.json, calibration.json)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def read_json_file(
    path: str | os.PathLike, *, what: str, error: type[Exception], fix: str | None = None
) -> dict[str, Any]:
    """The JSON object in a file the user named (a platform, a job description, a model...),
    or ``error`` with one message naming the file, what is wrong and ``fix``: "P: cannot
    read WHAT (strerror)", "P: not a WHAT: not JSON (parser's message)" or "P: not a WHAT:
    a JSON array where a JSON object is expected", each followed by "; FIX"."""
    p = Path(path)
    tail = f"; {fix}" if fix else ""
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise error(f"{p}: cannot read {what} ({e.strerror or e}){tail}") from None
    except (ValueError, RecursionError) as e:  # bad UTF-8 too; RecursionError: nested too deep
        raise error(f"{p}: not a {what}: not JSON ({e}){tail}") from None
    if not isinstance(doc, dict):
        raise error(
            f"{p}: not a {what}: a JSON {_json_kind(doc)} where a JSON object is expected{tail}"
        )
    return doc


def _json_kind(doc: object) -> str:
    if isinstance(doc, bool):
        return "boolean"
    if isinstance(doc, (int, float)):
        return "number"
    return {list: "array", str: "string"}.get(type(doc), "null")


def write_json(path: Path, doc: dict, *, indent: int | None = 2, sort_keys: bool = False) -> None:
    """Write ``doc`` as JSON, atomically."""
    write_text(path, json.dumps(doc, indent=indent, sort_keys=sort_keys) + "\n")


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) atomically: to a temp file beside ``path``, then renamed."""
    data = text.encode()
    with atomic_file(path, "wb") as f:
        f.write(data)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w"):
    """A file to write in a ``with`` block: a temp file beside ``path`` (mode 0o644 less the
    umask), renamed onto ``path`` when the block ends, removed when it fails (a full disk
    leaves no half-written temp files)."""
    path = Path(path)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        # 0o644 & ~umask: never world-writable, even at umask 000.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def fmt_s(seconds: float | None, style: str = "text") -> str:
    """A duration a person reads at a glance, in the style of the output it goes in:

    - ``"text"`` (reports, ``ailens predict``): 350 µs, 12.4 ms, 3.21 s, 4 min 05 s,
      2 h 03 min; ``n/a`` for None or not finite;
    - ``"compact"`` (progress lines, ``ailens forecast``): 12.34ms, 3.21s, 4m05.3s, 2h03m;
      ``?`` when not finite;
    - ``"clock"`` (beside tqdm's own times): 41.2us, 41.2ms, 3.2s, 4:05, 2:03:00.
    """
    if style == "compact":
        return _compact(seconds)
    if style == "clock":
        return _clock(seconds)
    if style != "text":
        raise ValueError(f"fmt_s: unknown style {style!r} (text, compact or clock)")
    return _text(seconds)


def _text(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    s = abs(seconds)
    sign = "-" if seconds < 0 else ""
    if s < 1e-3:
        return f"{sign}{s * 1e6:.0f} µs"
    if s < 1:
        return f"{sign}{_sig3(s * 1e3)} ms"
    if s < 100:
        return f"{sign}{_sig3(s)} s"
    if s < 3600:
        m, sec = divmod(round(s), 60)
        return f"{sign}{m} min {sec:02d} s"
    h, rest = divmod(round(s), 3600)
    return f"{sign}{h} h {rest // 60:02d} min"


def _sig3(x: float) -> str:
    # Three significant digits, trailing zeros kept (1.30, 12.0, 718) so columns read evenly.
    return f"{x:#.3g}".rstrip(".")


def _compact(s: float) -> str:
    if not math.isfinite(s):
        return "?"
    if s < 0:  # an interval's end below zero: the sign, then the same units
        return "-" + _compact(-s)
    if s >= 3600:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    if s >= 60:
        return f"{int(s // 60)}m{s % 60:04.1f}s"
    if s >= 1:
        return f"{s:.2f}s"
    return f"{s * 1e3:.2f}ms"


def _clock(seconds: float) -> str:
    # h:mm:ss / m:ss like tqdm's own times; under 10 s with a unit (41.2ms).
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g}us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g}ms"
    if seconds < 10:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
