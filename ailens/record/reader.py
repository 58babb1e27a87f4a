"""Reading trace files back: one rank's file (``read_trace``) and a run directory
(``load_run``). The format is ``trace.py``'s; every bound there keeps a hostile or damaged
file from making the reader allocate without limit, and nothing here executes file content.
"""

from __future__ import annotations

import os
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .trace import (
    _CHUNK_HEAD,
    _ROW_BYTES,
    _U32,
    EVENT_COLUMNS,
    EVENT_ROW_BYTES,
    EXCHANGE_COLUMNS,
    EXCHANGE_ROW_BYTES,
    MAGIC,
    MAX_CHUNK_ROWS,
    MAX_EXPANSION,
    MAX_META_BYTES,
    MAX_OPS,
    MAX_PAYLOAD_BYTES,
    MAX_WORLD,
    READABLE_VERSIONS,
    REQUIRED_META,
    STEP_COLUMNS,
    STEP_ROW_BYTES,
    TRACE_GLOB,
    TraceError,
    _json,
    _ShortHeader,
)

__all__ = ["RankTrace", "Run", "load_run", "read_trace"]


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
    chunks = _Chunks(path)
    problems = chunks.problems
    while pos < len(data):
        problem = _chunk_problem(data, pos)
        if problem:
            problems.append(problem)
            break
        tag, rows, plen, _ = _CHUNK_HEAD.unpack_from(data, pos)
        start = pos + _CHUNK_HEAD.size
        try:
            chunks.add(tag, rows, pos, data[start : start + plen])
        except ValueError as e:  # TraceError, JSONDecodeError, UnicodeDecodeError, ...
            problems.append(f"{str(e).removeprefix(f'{path}: ')}; it and later chunks ignored")
            break
        pos = start + plen
    ops, info = chunks.ops, chunks.info
    ev = _concat(chunks.events, EVENT_COLUMNS)
    if len(ev["op"]) and int(ev["op"].max()) >= len(ops):
        problems.append("events reference op ids beyond the op-name list")
        ops = ops + [f"op{i}" for i in range(len(ops), int(ev["op"].max()) + 1)]
    if info.get("trace_incomplete"):  # the writer lost chunks to a full disk (see writer.py)
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
        _concat(chunks.steps, STEP_COLUMNS),
        info,
        complete,
        tuple(problems),
        _concat(chunks.exchanges, EXCHANGE_COLUMNS),
        tuple(chunks.marks),
    )


def _chunk_problem(data: bytes, pos: int) -> str | None:
    """Why the chunk at ``pos`` cannot be read (it and later chunks are then ignored)."""
    if pos + _CHUNK_HEAD.size > len(data):
        return f"ends inside a chunk header at byte {pos} (writer was killed?)"
    tag, rows, plen, crc = _CHUNK_HEAD.unpack_from(data, pos)
    start = pos + _CHUNK_HEAD.size
    if tag not in (b"EVTS", b"STEP", b"XCHG", b"OPS ", b"INFO", b"MARK"):
        return f"unknown chunk tag {tag!r} at byte {pos}; later chunks ignored"
    row_bytes = _ROW_BYTES.get(tag, 0)
    bomb = rows * row_bytes > MAX_EXPANSION * plen + 4096
    if rows > MAX_CHUNK_ROWS or plen > MAX_PAYLOAD_BYTES or bomb:
        return f"chunk at byte {pos} declares {rows} rows / {plen} bytes, over the limits"
    if start + plen > len(data):
        return f"last chunk at byte {pos} is cut short (writer was killed?)"
    if zlib.crc32(data[start : start + plen]) != crc:
        return f"chunk at byte {pos} fails its checksum; it and later chunks ignored"
    return None


class _Chunks:
    """What the chunks of one file add up to, decoded one by one (raises ValueError on a
    chunk that is not what its tag says)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[dict[str, np.ndarray]] = []
        self.steps: list[dict[str, np.ndarray]] = []
        self.exchanges: list[dict[str, np.ndarray]] = []
        self.problems: list[str] = []
        self.ops: list[str] = []
        self.marks: list[dict] = []
        self.info: dict = {}

    def add(self, tag: bytes, rows: int, pos: int, payload: bytes) -> None:
        path = self.path
        if tag == b"EVTS":
            raw = _decompress(path, pos, payload, rows * EVENT_ROW_BYTES)
            cols = _columns(raw, EVENT_COLUMNS, rows)
            t_begin = np.cumsum(cols["t_begin"])
            dur = cols["t_end"]
            cols["t_begin"] = t_begin
            cols["t_end"] = np.where(dur >= 0, t_begin + dur, -1)
            if self.ops and rows and int(cols["op"].max()) >= len(self.ops):
                raise TraceError(f"{path}: chunk at byte {pos} uses an op id with no name")
            self.events.append(cols)
        elif tag == b"STEP":
            raw = _decompress(path, pos, payload, rows * STEP_ROW_BYTES)
            self.steps.append(_columns(raw, STEP_COLUMNS, rows))
        elif tag == b"XCHG":
            raw = _decompress(path, pos, payload, rows * EXCHANGE_ROW_BYTES)
            self.exchanges.append(_columns(raw, EXCHANGE_COLUMNS, rows))
        else:
            self._add_json(tag, pos, _json(_decompress_json(path, pos, payload)))

    def _add_json(self, tag: bytes, pos: int, obj) -> None:
        if tag == b"OPS ":
            if (
                not isinstance(obj, list)
                or len(obj) > MAX_OPS
                or not all(isinstance(s, str) for s in obj)
            ):
                raise TraceError(f"{self.path}: op-name chunk at byte {pos} is not a list of names")
            self.ops = obj
        elif tag == b"MARK":
            if not isinstance(obj, list) or not all(isinstance(m, dict) for m in obj):
                raise TraceError(f"{self.path}: mark chunk at byte {pos} is not a record list")
            self.marks += obj
        elif isinstance(obj, dict):
            self.info = obj


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
    def run_info(self) -> dict:
        """What the run said of itself: its attach line's facts (the header's ``run``: a GPU
        run's accelerator), then what it learned after the start (``Lens.describe``: the
        lowest rank's ``info`` marks in order, a later value replacing an earlier one; the
        torch adapter's batch size at the first forward)."""
        info = dict(self.meta.get("run") or {})
        for m in self.ranks[0].marks:
            if m.get("kind") == "info":
                info.update((k, v) for k, v in m.items() if k not in _MARK_KEYS)
        return info

    @property
    def complete(self) -> bool:
        return not self.missing_ranks and all(r.complete for r in self.ranks)


_MUST_AGREE = ("run_id", "world_size", "counter", "format_version")
# What the recorder adds to every mark (``Recorder.log_mark``), not the run's.
_MARK_KEYS = ("kind", "seq", "step", "at_step")


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
