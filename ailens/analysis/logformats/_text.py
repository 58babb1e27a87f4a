"""The text of a log as the job printed it, whatever carried it here: compressed (gzip,
bzip2, xz), saved as UTF-16 by Windows PowerShell, coloured by a console logger, prefixed
per line by a launcher with each rank's number, printed twice by a doubled logger, or with a
hole a failed node left. Every reader gets the text from :func:`read_text`, one place.
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import lzma
import re
from pathlib import Path

from ._base import CSV_FORM, HEAD_BYTES, LogError

__all__ = ["one_rank", "read_text", "without_colour", "without_repeats"]


def read_text(path: Path) -> str:
    """The file's text as the job printed it (gzip, bzip2 or xz accepted; UTF-8, or UTF-16
    with a byte-order mark; NUL holes, colour codes, a launcher's rank prefixes and a
    doubled logger's repeats taken off); a LogError naming the file for a missing file, a
    broken compressed file, or bytes that are not text."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise LogError(
            f"{path}: no such file or directory (give an ailens run directory, a training "
            f"log or {CSV_FORM})"
        ) from None
    except OSError as e:
        raise LogError(f"{path}: cannot be read ({e.strerror or e})") from None
    for magic, kind, decompress in _COMPRESSED:
        if magic.match(raw):
            try:
                raw = decompress(raw)
            except (OSError, EOFError, ValueError, lzma.LZMAError) as e:
                raise LogError(
                    f"{path}: a {kind} file that does not decompress ({e}); re-fetch it"
                ) from None
            break
    # Windows PowerShell 5's ``>`` and ``Tee-Object`` write UTF-16 with a byte-order mark;
    # a log still being written may end inside a character (replaced, as for UTF-8).
    utf16 = raw[:2] in _UTF16_BOMS
    if not utf16 and b"\x00" in raw:
        # A node that failed mid-write leaves a hole of NUL bytes in a log on a network
        # file system; scattered NULs stay (binary data).
        raw = _NUL_HOLE.sub(b"", raw)
    text = raw.decode("utf-16" if utf16 else "utf-8-sig", errors="replace")
    head = text[:HEAD_BYTES]
    if _binary(head.encode() if utf16 else raw[:HEAD_BYTES], head):
        raise LogError(
            f"{path}: not a training log (binary data, not text); give the text log the job "
            f"printed, an ailens run directory or {CSV_FORM}"
        )
    return without_repeats(one_rank(without_colour(text)))


# Colour and cursor codes a console logger writes: CSI (``ESC [ ... letter``), OSC
# (``ESC ] ... BEL``) and the two-character escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


def without_colour(text: str) -> str:
    """``text`` without the colour and cursor codes a console logger writes (a log captured
    from a terminal, ``FORCE_COLOR``, Ultralytics' and Detectron2's coloured lines)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


# The per-line prefix a launcher puts on each rank's output, its rank captured: Open MPI's
# ``--tag-output`` (``[1,0]<stdout>:``, Horovod's ``horovodrun`` too), Horovod's Gloo
# launcher (``[0]<stdout>:``), torchrun's ``--tee`` (``[default0]:``, ``[rank0]:``), Slurm's
# ``srun --label`` (`` 0: ``, padded to one width), MPICH's ``-prepend-rank`` and Intel MPI's
# ``-l`` (``[0] ``); and pdsh's host (``worker-1: ``, ``10.0.0.2: ``: DeepSpeed's multi-node
# launcher), a name with a digit, dot or dash in it (a log's own ``INFO: `` or ``loss: `` is
# not one), the hosts in the order of their names.
_RANK_PREFIXES = tuple(
    re.compile(p)
    for p in (
        r"\[\d+,(\d+)\]<std(?:out|err)>:",
        r"\[(\d+)\]<std(?:out|err)>:",
        r"\[(?:default|rank)(\d+)\]:",
        r" *(\d+): ",
        r"\[(\d+)\] ",
    )
)
_HOST_PREFIX = re.compile(r"(?=[\w.-]*[\d.-])([A-Za-z0-9][\w.-]*): ")
_LAUNCHER_PREFIXES = (*_RANK_PREFIXES, _HOST_PREFIX)
# A prefix is the launcher's when at least this share of the log's non-empty lines (of the
# first LAUNCHER_LINES) begin with it: the launcher's own lines and a job's unbuffered
# fragments carry none.
LAUNCHER_SHARE = 0.5
LAUNCHER_LINES = 5000


def _head_lines(text: str) -> list[str]:
    """The lines a share of the log is judged on: its first 2 x ``LAUNCHER_LINES`` (blank
    lines among them), without splitting the rest of a long log."""
    return text.split("\n", 2 * LAUNCHER_LINES)[: 2 * LAUNCHER_LINES]


def one_rank(text: str) -> str:
    """The log without the launcher's per-line prefix (``_LAUNCHER_PREFIXES``), where a
    launcher put one on most lines, each line printed once: a rank whose lines of the log's
    second half mostly have the shape (digits aside) of those a lower rank prints there
    repeats that rank (every rank printing the same progress line, its own loss in it) and
    is left out; the lines only one rank prints are kept (Megatron's iteration lines on the
    last pipeline rank beside its arguments on rank 0), with the launcher's own unprefixed
    lines. Text with no such prefix is returned as it is."""
    sample = list(itertools.islice((x for x in _head_lines(text) if x.strip()), LAUNCHER_LINES))
    if not sample:
        return text
    best, hits = None, 0
    for prefix in _LAUNCHER_PREFIXES:
        n = sum(1 for ln in sample if prefix.match(ln))
        if n > hits:
            best, hits = prefix, n
    if best is None or hits < LAUNCHER_SHARE * len(sample):
        return text
    numbered = best is not _HOST_PREFIX  # ranks, else host names
    ranked = [
        (None, ln) if m is None else (int(m[1]) if numbered else m[1], ln[m.end() :])
        for ln in text.split("\n")
        for m in (best.match(ln),)
    ]
    tagged = [i for i, (r, _) in enumerate(ranked) if r is not None]
    late: dict[int | str, set[str]] = {}
    for i in tagged[len(tagged) // 2 :]:
        r, ln = ranked[i]
        if ln.strip():
            late.setdefault(r, set()).add(_DIGITS.sub("#", ln))
    printed: set[str] = set()
    repeats = set()
    for r in sorted(late):
        shapes = late[r]
        if len(shapes & printed) >= REPEAT_SHARE * len(shapes):
            repeats.add(r)
        else:
            printed |= shapes
    return "\n".join(ln for r, ln in ranked if r not in repeats)


_DIGITS = re.compile(r"\d+")
# A rank repeats a lower one when at least this share of its late line shapes are the
# lower ranks'.
REPEAT_SHARE = 0.5


# A log whose lines come twice is doubled when at least this share of its non-empty lines
# (of its head lines) repeat the line before them.
DOUBLED_SHARE = 0.3


def without_repeats(text: str) -> str:
    """``text`` without the lines that repeat the one before them, where that is systematic
    (``DOUBLED_SHARE``): a logger with two handlers on one stream (a named logger's and the
    root's), or two unprefixed ranks printing the same lines, prints each line twice; a
    progress or evaluation line read twice would count twice. Text where few lines repeat
    (a separator printed twice) is returned as it is."""
    head = _head_lines(text)
    sample = [(a, b) for a, b in zip(head, head[1:], strict=False) if b.strip()][:LAUNCHER_LINES]
    if not sample or sum(a == b for a, b in sample) < DOUBLED_SHARE * len(sample):
        return text
    lines = text.split("\n")
    return "\n".join(
        b for a, b in zip([None, *lines], lines, strict=False) if b != a or not b.strip()
    )


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
# A run of NUL bytes this long in a text log is a hole (a block the file system allocated
# and nobody wrote), not data.
_NUL_HOLE = re.compile(rb"\x00{16,}")
# Compressed logs, by their magic bytes: (magic, what it is, how to decompress).
_COMPRESSED = (
    (re.compile(rb"\x1f\x8b"), "gzip", gzip.decompress),
    (re.compile(rb"BZh[1-9]1AY&SY"), "bzip2", bz2.decompress),
    (re.compile(rb"\xfd7zXZ\x00"), "xz", lzma.decompress),
)

_CONTROL = re.compile(r"[\x00-\x07\x0e-\x1a\x1c-\x1f\x7f]")


def _binary(raw: bytes, text: str) -> bool:
    """Bytes that are not a text log: NUL bytes, or more than 1 % undecodable or control
    characters (escape sequences, tabs, form feeds and carriage returns are text)."""
    if not raw:
        return False
    if b"\x00" in raw:
        return True
    odd = text.count("\ufffd") + len(_CONTROL.findall(text))
    return odd > 0.01 * max(len(text), 1)
