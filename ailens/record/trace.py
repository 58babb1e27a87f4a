"""Per-rank binary trace files: an append-only chunked format and its reader.

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
import stat
import struct
import zlib
from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class RankTrace:
    """One rank's recording: metadata, event and step columns, and how complete it is."""

    path: Path
    meta: dict
    ops: tuple[str, ...]
    events: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]
    info: dict
    complete: bool
    problems: tuple[str, ...] = ()
    exchanges: dict[str, np.ndarray] = field(default_factory=lambda: _concat([], EXCHANGE_COLUMNS))
    # Run-structure marks in order: sections ({"kind": "section", "name", "step",
    # "t_begin_ns", "t_end_ns"}) and schedules ({"kind": "schedule", "step", ...}).
    marks: tuple[dict, ...] = ()

    @property
    def rank(self) -> int:
        return int(self.meta["rank"])

    @property
    def n_events(self) -> int:
        return len(self.events["op"])


def _decompress(path: Path, offset: int, payload: bytes, expected: int) -> bytes:
    d = zlib.decompressobj()
    try:
        raw = d.decompress(payload, expected + 1)
    except zlib.error as e:
        raise TraceError(f"{path}: chunk at byte {offset} does not decompress ({e})") from None
    if len(raw) != expected or not d.eof:
        raise TraceError(
            f"{path}: chunk at byte {offset} holds {len(raw)} bytes, expected {expected}"
        )
    return raw


def _columns(raw: bytes, spec, rows: int) -> dict[str, np.ndarray]:
    out, pos = {}, 0
    for name, dt in spec:
        dtype = np.dtype(dt)
        size = dtype.itemsize * rows
        out[name] = np.frombuffer(raw, dtype=dtype, count=rows, offset=pos).astype(
            dtype.newbyteorder("=")
        )
        pos += size
    return out


def _read_header(path: Path, data: bytes) -> tuple[dict, int]:
    if data[: len(MAGIC)] != MAGIC[: len(data)]:
        raise TraceError(f"{path}: not an ailens trace (bad magic bytes)")
    if len(data) < len(MAGIC) + 8:
        raise _ShortHeader(f"{path}: {len(data)} bytes, too short for an ailens trace header")
    pos = len(MAGIC)
    (version,) = _U32.unpack_from(data, pos)
    if version not in READABLE_VERSIONS:
        raise TraceError(
            f"{path}: trace format version {version}, this ailens reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}; read it with the ailens version that "
            "wrote it"
        )
    (meta_len,) = _U32.unpack_from(data, pos + 4)
    pos += 8
    if meta_len > MAX_META_BYTES:
        raise TraceError(f"{path}: header declares {meta_len} bytes of metadata, over the limit")
    if pos + meta_len + 4 > len(data):
        have = len(data) - pos
        raise _ShortHeader(f"{path}: header declares {meta_len} bytes of metadata, file has {have}")
    body = data[pos : pos + meta_len]
    (crc,) = _U32.unpack_from(data, pos + meta_len)
    if zlib.crc32(body) != crc:
        raise TraceError(f"{path}: header metadata checksum mismatch (file corrupted)")
    try:
        meta = _json(body.decode())
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise TraceError(f"{path}: header metadata is not valid JSON ({e})") from None
    if not isinstance(meta, dict) or any(k not in meta for k in REQUIRED_META):
        raise TraceError(f"{path}: header metadata lacks one of {', '.join(REQUIRED_META)}")
    for key in ("rank", "world_size"):
        value = meta[key]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TraceError(f"{path}: header field {key}={value!r} is not a non-negative integer")
    rank, world = meta["rank"], meta["world_size"]
    if not 1 <= world <= MAX_WORLD or rank >= world:
        raise TraceError(f"{path}: rank {rank} does not fit world size {world}")
    # Consumers use these as strings, a mapping and an int; a hostile type must not crash
    # them later.
    if (
        not all(isinstance(meta[k], str) for k in ("counter", "run_id"))
        or not isinstance(meta.get("config", {}), dict)
        or type(meta.get("start_wall_ns", 0)) is not int
    ):
        raise TraceError(
            f"{path}: header fields counter/run_id/config/start_wall_ns have the wrong types"
        )
    return meta, pos + meta_len + 4


def _concat(parts: list[dict[str, np.ndarray]], spec) -> dict[str, np.ndarray]:
    if not parts:
        return {name: np.zeros(0, dtype=np.dtype(dt).newbyteorder("=")) for name, dt in spec}
    return {name: np.concatenate([p[name] for p in parts]) for name, _ in spec}


def read_trace(path: str | os.PathLike) -> RankTrace:
    """Read one rank's trace file.

    A file that ends mid-chunk (a killed rank) or whose later chunk is damaged reads back up
    to its last good chunk, with ``complete=False`` and the reason in ``problems``. A file whose
    header is unreadable raises TraceError naming the file.
    """
    path = Path(path)
    data = _read_regular_file(path)
    meta, pos = _read_header(path, data)
    events, steps, exchanges, problems = [], [], [], []
    ops: list[str] = []
    marks: list[dict] = []
    info: dict = {}
    while pos < len(data):
        if pos + _CHUNK_HEAD.size > len(data):
            problems.append(f"ends inside a chunk header at byte {pos} (writer was killed?)")
            break
        tag, rows, plen, crc = _CHUNK_HEAD.unpack_from(data, pos)
        start = pos + _CHUNK_HEAD.size
        if tag not in (b"EVTS", b"STEP", b"XCHG", b"OPS ", b"INFO", b"MARK"):
            problems.append(f"unknown chunk tag {tag!r} at byte {pos}; later chunks ignored")
            break
        row_bytes = _ROW_BYTES.get(tag, 0)
        bomb = rows * row_bytes > MAX_EXPANSION * plen + 4096
        if rows > MAX_CHUNK_ROWS or plen > MAX_PAYLOAD_BYTES or bomb:
            problems.append(
                f"chunk at byte {pos} declares {rows} rows / {plen} bytes, over the limits"
            )
            break
        if start + plen > len(data):
            problems.append(f"last chunk at byte {pos} is cut short (writer was killed?)")
            break
        payload = data[start : start + plen]
        if zlib.crc32(payload) != crc:
            problems.append(f"chunk at byte {pos} fails its checksum; it and later chunks ignored")
            break
        try:
            if tag == b"EVTS":
                raw = _decompress(path, pos, payload, rows * EVENT_ROW_BYTES)
                cols = _columns(raw, EVENT_COLUMNS, rows)
                t_begin = np.cumsum(cols["t_begin"])
                dur = cols["t_end"]
                cols["t_begin"] = t_begin
                cols["t_end"] = np.where(dur >= 0, t_begin + dur, -1)
                if ops and rows and int(cols["op"].max()) >= len(ops):
                    raise TraceError(f"{path}: chunk at byte {pos} uses an op id with no name")
                events.append(cols)
            elif tag == b"STEP":
                raw = _decompress(path, pos, payload, rows * STEP_ROW_BYTES)
                steps.append(_columns(raw, STEP_COLUMNS, rows))
            elif tag == b"XCHG":
                raw = _decompress(path, pos, payload, rows * EXCHANGE_ROW_BYTES)
                exchanges.append(_columns(raw, EXCHANGE_COLUMNS, rows))
            else:
                obj = _json(_decompress_json(path, pos, payload))
                if tag == b"OPS ":
                    if (
                        not isinstance(obj, list)
                        or len(obj) > MAX_OPS
                        or not all(isinstance(s, str) for s in obj)
                    ):
                        raise TraceError(
                            f"{path}: op-name chunk at byte {pos} is not a list of names"
                        )
                    ops = obj
                elif tag == b"MARK":
                    if not isinstance(obj, list) or not all(isinstance(m, dict) for m in obj):
                        raise TraceError(f"{path}: mark chunk at byte {pos} is not a record list")
                    marks += obj
                elif isinstance(obj, dict):
                    info = obj
        except ValueError as e:  # TraceError, JSONDecodeError, UnicodeDecodeError, ...
            problems.append(f"{str(e).removeprefix(f'{path}: ')}; it and later chunks ignored")
            break
        pos = start + plen
    ev = _concat(events, EVENT_COLUMNS)
    if len(ev["op"]) and int(ev["op"].max()) >= len(ops):
        problems.append("events reference op ids beyond the op-name list")
        ops = ops + [f"op{i}" for i in range(len(ops), int(ev["op"].max()) + 1)]
    if info.get("trace_incomplete"):  # the writer lost chunks to a full disk (see record/writer.py)
        problems.append(f"closed, but {info['trace_incomplete']}")
    complete = not problems and bool(info.get("closed"))
    if not problems and not info.get("closed"):
        problems.append(
            "no closing record: the rank did not call close() (killed or still running)"
        )
    return RankTrace(
        path,
        meta,
        tuple(ops),
        ev,
        _concat(steps, STEP_COLUMNS),
        info,
        complete,
        tuple(problems),
        _concat(exchanges, EXCHANGE_COLUMNS),
        tuple(marks),
    )


def _read_regular_file(path: Path) -> bytes:
    """The bytes of a regular file. O_NONBLOCK so a FIFO planted as a trace cannot block the
    open, and st_size bytes at most so /dev/zero or a growing file cannot exhaust memory."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise TraceError(f"{path}: not a regular file")
        parts, left = [], st.st_size
        while left > 0:
            part = os.read(fd, min(left, 1 << 26))
            if not part:
                break
            parts.append(part)
            left -= len(part)
        return b"".join(parts)
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror})") from None
    finally:
        os.close(fd)


def _decompress_json(path: Path, offset: int, payload: bytes) -> str:
    d = zlib.decompressobj()
    try:
        raw = d.decompress(payload, MAX_META_BYTES + 1)
    except zlib.error as e:
        raise TraceError(f"{path}: chunk at byte {offset} does not decompress ({e})") from None
    if len(raw) > MAX_META_BYTES:
        raise TraceError(
            f"{path}: JSON chunk at byte {offset} is larger than {MAX_META_BYTES} bytes"
        )
    return raw.decode()


@dataclass(frozen=True)
class Run:
    """A run directory: every rank's trace plus what is missing or partial."""

    path: Path
    ranks: tuple[RankTrace, ...]
    world_size: int
    missing_ranks: tuple[int, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    @property
    def meta(self) -> dict:
        """Metadata of the lowest rank present (the run's common keys agree on every rank)."""
        return self.ranks[0].meta

    @property
    def complete(self) -> bool:
        return not self.missing_ranks and all(r.complete for r in self.ranks)


_MUST_AGREE = ("run_id", "world_size", "counter", "format_version")


def _missing_warning(missing: tuple[int, ...]) -> str:
    """One line for any number of missing ranks: 'rank 2: ...' or 'ranks 2-5, 9: ...'."""
    if len(missing) == 1:
        return f"rank {missing[0]}: trace file missing"
    spans, start = [], missing[0]
    for a, b in zip(missing, missing[1:] + (None,), strict=True):
        if b != a + 1:
            spans.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    more = f", ... ({len(spans) - 20} more spans)" if len(spans) > 20 else ""
    return f"ranks {', '.join(spans[:20])}{more}: trace files missing ({len(missing)} of the world)"


def load_run(path: str | os.PathLike) -> Run:
    """Load every rank trace in a run directory (or a single trace file).

    Raises TraceError with one clear line naming the file when the directory holds no trace,
    a header is unreadable, or the ranks' key metadata (run id, world size, counter) differ.
    Partial runs load, with ``missing_ranks`` and ``warnings`` saying what is missing.
    """
    path = Path(path)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(path.glob(TRACE_GLOB))
        if not files:
            raise TraceError(
                f"{path}: no {TRACE_GLOB} trace files here; is this an ailens run directory?"
            )
    else:
        raise TraceError(f"{path}: no such run directory")
    traces, unreadable = [], []
    for f in files:
        try:
            traces.append(read_trace(f))
        except _ShortHeader as e:
            # A rank killed between creating its file and writing the header: it recorded
            # nothing, so it counts as missing rather than sinking the whole run.
            unreadable.append(f"{str(e).removeprefix(f'{f}: ')} ({f.name})")
    if not traces:
        raise TraceError(f"{path}: no readable trace; {unreadable[0]}")
    traces.sort(key=lambda t: t.rank)
    first = traces[0]
    for prev, t in zip(traces, traces[1:], strict=False):
        for key in _MUST_AGREE:
            if t.meta.get(key) != first.meta.get(key):
                raise TraceError(
                    f"{t.path}: {key}={t.meta.get(key)!r} but {first.path.name} has "
                    f"{first.meta.get(key)!r}; the files come from different runs — move the "
                    "stray file out or use a fresh run directory"
                )
        if t.rank == prev.rank:
            raise TraceError(f"{t.path}: a second trace for rank {t.rank}")
    world = int(first.meta["world_size"])
    present = {t.rank for t in traces}
    missing = tuple(r for r in range(world) if r not in present) if path.is_dir() else ()
    warnings = [_missing_warning(missing)] if missing else []
    warnings += [f"unreadable trace, counted as missing: {u}" for u in unreadable]
    for t in traces:
        warnings += [f"rank {t.rank} ({t.path.name}): {p}" for p in t.problems]
        if t.info.get("disabled"):
            warnings.append(f"rank {t.rank}: ailens disabled itself ({t.info['disabled']})")
    return Run(path, tuple(traces), world, missing, tuple(warnings))
