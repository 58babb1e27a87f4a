"""Per-rank binary trace files: an append-only chunked format and its writer (the reader is
``reader.py``).

Layout of ``rank-NNNNN.ailens`` (all integers little-endian)::

    header : b"AILENS\\x00\\n" | u32 version | u32 meta_len | meta (UTF-8 JSON) | u32 crc32(meta)
    chunk* : 4-byte tag | u32 rows | u32 payload_len | u32 crc32(payload) | payload (zlib)

Chunk tags: ``EVTS`` collective events (columnar, see EVENT_COLUMNS), ``STEP`` step
boundaries, ``XCHG`` the cross-rank exchanges the online analysis was fed at (columnar, see
EXCHANGE_COLUMNS), ``OPS `` the op-name list (JSON, rewritten whenever a name is added),
``MARK`` run-structure marks (JSON list: sections such as evaluation, schedules, facts),
``INFO`` a JSON record (written at close: why and how the rank ended).

Every chunk is written with one ``write`` and flushed, so a rank killed with SIGKILL leaves
a file that reads back up to its last complete chunk. Nothing on the read path uses pickle,
eval or yaml: metadata is JSON, payloads are typed numpy columns.

Format history: version 1 — first release. Version 2 — ``XCHG`` and ``MARK`` chunks, so the
offline analysis feeds its forecast exactly what the online one was fed; version 1 files
still read (no exchanges: the offline forecast is then evaluated at every step).
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAGIC = b"AILENS\x00\n"
TRACE_GLOB = "rank-*.ailens"

# Column order on disk. t_begin is stored as the delta to the previous event's t_begin
# in the chunk and t_end as the duration, so the columns hold small numbers that zlib
# packs well (a long synthetic run stays far under 32 bytes per event).
EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("op", "<u2"),
    ("step", "<u4"),
    ("nbytes", "<i8"),
    ("t_begin", "<i8"),
    ("t_end", "<i8"),
    ("work", "<i8"),
)
STEP_COLUMNS: tuple[tuple[str, str], ...] = (("step", "<u4"), ("t_ns", "<i8"), ("work", "<i8"))
# One row per exchange batch this rank took part in: ``seq`` orders it among the marks,
# ``step`` is the steps done, ``ticks`` the ticks covered after the batch, ``live`` whether
# this rank contributed, ``disabled`` how many ranks did not, ``stop`` the agreed early stop.
EXCHANGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("seq", "<u4"),
    ("step", "<u4"),
    ("ticks", "<i8"),
    ("live", "<u1"),
    ("disabled", "<u4"),
    ("stop", "<u1"),
    ("t_ns", "<i8"),
)
EVENT_ROW_BYTES = sum(np.dtype(d).itemsize for _, d in EVENT_COLUMNS)
STEP_ROW_BYTES = sum(np.dtype(d).itemsize for _, d in STEP_COLUMNS)
EXCHANGE_ROW_BYTES = sum(np.dtype(d).itemsize for _, d in EXCHANGE_COLUMNS)
_ROW_BYTES = {b"EVTS": EVENT_ROW_BYTES, b"STEP": STEP_ROW_BYTES, b"XCHG": EXCHANGE_ROW_BYTES}

_CHUNK_HEAD = struct.Struct("<4sIII")
_U32 = struct.Struct("<I")
# Bounds that keep a hostile file from making the reader allocate without limit.
MAX_META_BYTES = 1 << 20
MAX_CHUNK_ROWS = 1 << 22
MAX_PAYLOAD_BYTES = 1 << 28
MAX_OPS = 4096
# A real world is far smaller; a hostile world_size would make load_run list every missing rank.
MAX_WORLD = 1 << 20
# Real chunks expand 3-10x (ns timings never compress away); a chunk declaring more than this
# is a zip bomb, so decoded memory stays under MAX_EXPANSION x the file size.
MAX_EXPANSION = 64

REQUIRED_META = ("format_version", "rank", "world_size", "counter", "run_id")


class TraceError(ValueError):
    """A trace file or run directory that cannot be read; the message names the file."""


class _ShortHeader(TraceError):
    """The file ends inside its header: a rank killed right after creating it."""


def _json(text: str | bytes):
    """Strict-enough JSON: NaN/Infinity become None; nesting or number-size bombs raise
    ValueError (json.loads raises RecursionError or ValueError for those)."""
    try:
        return json.loads(text, parse_constant=lambda _: None)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


# ---------------------------------------------------------------- writing


def _chunk(tag: bytes, rows: int, raw: bytes) -> bytes:
    payload = zlib.compress(raw, 1)
    return _CHUNK_HEAD.pack(tag, rows, len(payload), zlib.crc32(payload)) + payload


def encode_events(cols: dict[str, np.ndarray]) -> bytes:
    """Encode one chunk of event columns (absolute t_begin/t_end) as an EVTS chunk.

    Written into one buffer with ``out=`` arithmetic: this runs on the writer thread holding
    the GIL, so every temporary it avoids is time the training thread does not wait."""
    n = len(cols["op"])
    raw = np.empty(n * EVENT_ROW_BYTES, np.uint8)
    at = 0
    out = {}
    for name, dt in EVENT_COLUMNS:
        size = n * np.dtype(dt).itemsize
        out[name] = raw[at : at + size].view(dt)
        at += size
    t_begin = np.asarray(cols["t_begin"], dtype=np.int64)
    t_end = np.asarray(cols["t_end"], dtype=np.int64)
    for name in ("op", "step", "nbytes", "work"):
        out[name][:] = cols[name]
    if n:
        out["t_begin"][0] = t_begin[0]
        np.subtract(t_begin[1:], t_begin[:-1], out=out["t_begin"][1:])
    np.subtract(t_end, t_begin, out=out["t_end"])
    out["t_end"][t_end < 0] = -1  # an event that never ended keeps -1 as its duration
    return _chunk(b"EVTS", n, raw)


def _encode_columns(tag: bytes, spec, cols: dict[str, np.ndarray]) -> bytes:
    n = len(cols[spec[0][0]])
    raw = b"".join(np.asarray(cols[name], dtype=dt).tobytes() for name, dt in spec)
    return _chunk(tag, n, raw)


def encode_steps(cols: dict[str, np.ndarray]) -> bytes:
    return _encode_columns(b"STEP", STEP_COLUMNS, cols)


def encode_exchanges(cols: dict[str, np.ndarray]) -> bytes:
    return _encode_columns(b"XCHG", EXCHANGE_COLUMNS, cols)


def encode_json(tag: bytes, obj) -> bytes:
    return _chunk(tag, 0, json.dumps(obj, separators=(",", ":")).encode())


def encode_header(meta: dict) -> bytes:
    body = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
    return (
        MAGIC
        + _U32.pack(FORMAT_VERSION)
        + _U32.pack(len(body))
        + body
        + _U32.pack(zlib.crc32(body))
    )


class TraceWriter:
    """Appends chunks to one rank's trace file; each chunk is one write, then flushed."""

    def __init__(self, path: Path, meta: dict, *, file_wrapper=None) -> None:
        self.path = Path(path)
        # 0o644 & ~umask: the user's umask decides, and never world-writable, even at umask 000.
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._file = os.fdopen(fd, "wb", buffering=0)
        self.bytes_written = 0
        self.broken = False
        self._write(encode_header(meta))
        if file_wrapper is not None:  # after the header: a test's full disk takes chunks
            self._file = file_wrapper(self._file)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                n = self._file.write(view)
                view = view[n:]
        except OSError:
            # Disk full mid-chunk: cut the partial chunk off so the file stays a readable
            # prefix and a retry appends cleanly. If even that fails, later appends would sit
            # behind garbage: mark the file broken so the caller stops appending.
            try:
                os.ftruncate(self._file.fileno(), self.bytes_written)
                self._file.seek(self.bytes_written)
            except OSError:
                self.broken = True
            raise
        self.bytes_written += len(data)

    def write_raw(self, data: bytes) -> None:
        """Append an already encoded chunk (see encode_events, encode_steps, encode_json)."""
        self._write(data)

    def write_events(self, cols: dict[str, np.ndarray]) -> None:
        self._write(encode_events(cols))

    def write_steps(self, cols: dict[str, np.ndarray]) -> None:
        self._write(encode_steps(cols))

    def write_ops(self, names: list[str]) -> None:
        self._write(encode_json(b"OPS ", names))

    def write_info(self, info: dict) -> None:
        self._write(encode_json(b"INFO", info))

    def close(self) -> None:
        if not self._file.closed:
            try:
                os.fsync(self._file.fileno())
            except OSError:
                pass
            self._file.close()


# ---------------------------------------------------------------- reading
