"""Corrupt and hostile trace files: the reader answers with a TraceError or a partial read
that says what is wrong — never another exception, a hang or unbounded memory.

A hypothesis fuzz test mutates a valid file (raw byte mutations, and mutations behind valid
checksums so they reach the decoders), plus one test per named hostile shape.
"""

import json
import os
import struct
import tracemalloc
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ailens import RankTrace, TraceError, load_run
from ailens.record.reader import read_trace
from ailens.record.trace import (
    EVENT_COLUMNS,
    EVENT_ROW_BYTES,
    MAGIC,
    MAX_CHUNK_ROWS,
    MAX_EXPANSION,
    STEP_COLUMNS,
    TraceWriter,
    encode_json,
)

CHUNK_HEAD = struct.Struct("<4sIII")
META = {
    "format_version": 1,
    "rank": 1,
    "world_size": 2,
    "counter": "cpu-ns",
    "run_id": "abc",
    "config": {"tolerance": 1},
    "host": "h",
}
# Memory the reader may use beyond MAX_EXPANSION x the file size (interpreter noise, the
# file's own bytes, small arrays).
SLACK = 4 << 20


def _events(n: int, start: int = 0) -> dict[str, np.ndarray]:
    i = np.arange(start, start + n)
    t = 1000 + i * 5000 + (i * 7919) % 311
    return {
        "op": (i % 3 == 0).astype(np.uint16),
        "step": (i // 3).astype(np.uint32),
        "nbytes": 4096 * (1 + i % 3),
        "t_begin": t,
        "t_end": t + 1200 + i % 97,
        "work": 100_000 + (i * 104729) % 5003,
    }


def valid_trace(path, meta=META, chunks=3, rows=40) -> bytes:
    """A small, complete trace written by the real writer: ops, events, steps, closing info."""
    w = TraceWriter(path, meta)
    w.write_ops(["allreduce", "broadcast"])
    for c in range(chunks):
        w.write_events(_events(rows, c * rows))
        w.write_steps(
            {
                "step": np.arange(c * 5, c * 5 + 5, dtype=np.uint32),
                "t_ns": np.arange(5) * 10**6 + c,
                "work": np.arange(5) * 7,
            }
        )
    w.write_info({"closed": True, "disabled": None, "ticks": chunks * rows})
    w.close()
    return path.read_bytes()


def chunk(
    tag: bytes, rows: int, payload: bytes, *, plen: int | None = None, crc: int | None = None
) -> bytes:
    plen = len(payload) if plen is None else plen
    crc = zlib.crc32(payload) if crc is None else crc
    return CHUNK_HEAD.pack(tag, rows, plen, crc) + payload


def header_raw(body: bytes, version: int = 1, meta_len: int | None = None) -> bytes:
    n = len(body) if meta_len is None else meta_len
    return MAGIC + struct.pack("<II", version, n) + body + struct.pack("<I", zlib.crc32(body))


def split_chunks(data: bytes) -> tuple[bytes, list[list]]:
    """Header bytes and [tag, rows, raw payload] of each chunk of a valid file."""
    (meta_len,) = struct.unpack_from("<I", data, len(MAGIC) + 4)
    pos = len(MAGIC) + 8 + meta_len + 4
    head, chunks = data[:pos], []
    while pos < len(data):
        tag, rows, plen, _ = CHUNK_HEAD.unpack_from(data, pos)
        payload = data[pos + 16 : pos + 16 + plen]
        chunks.append([tag, rows, zlib.decompress(payload)])
        pos += 16 + plen
    return head, chunks


def join_chunks(head: bytes, chunks: list[list]) -> bytes:
    return head + b"".join(chunk(tag, rows, zlib.compress(raw, 1)) for tag, rows, raw in chunks)


def read_checked(path, data: bytes) -> RankTrace | None:
    """Write ``data`` to ``path`` and read it: TraceError (None) or a consistent RankTrace,
    within MAX_EXPANSION x the file size of memory."""
    path.write_bytes(data)
    tracemalloc.start()
    try:
        trace = read_trace(path)
    except TraceError as e:
        assert str(path) in str(e)  # the message names the file
        trace = None
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak <= MAX_EXPANSION * len(data) + SLACK, (peak, len(data))
    if trace is not None:
        check_consistent(trace, len(data))
    return trace


def check_consistent(t: RankTrace, file_bytes: int) -> None:
    n = t.n_events
    for name, dt in EVENT_COLUMNS:
        assert len(t.events[name]) == n and t.events[name].dtype == np.dtype(dt).newbyteorder("=")
    ns = len(t.steps["step"])
    for name, dt in STEP_COLUMNS:
        assert len(t.steps[name]) == ns and t.steps[name].dtype == np.dtype(dt).newbyteorder("=")
    assert n * EVENT_ROW_BYTES <= MAX_EXPANSION * file_bytes + 4096 * (file_bytes // 16 + 1)
    if n:
        assert int(t.events["op"].max()) < len(t.ops)  # every op id has a name
    assert all(isinstance(o, str) for o in t.ops)
    assert isinstance(t.meta, dict) and 0 <= t.rank < t.meta["world_size"]
    assert isinstance(t.info, dict)
    assert not (t.complete and t.problems)
    assert t.complete or t.problems  # an incomplete trace says why


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    return d, valid_trace(d / "valid.ailens")


def test_valid_file_reads_complete(fuzz_dir):
    d, data = fuzz_dir
    t = read_checked(d / "copy.ailens", data)
    assert t is not None and t.complete and t.n_events == 120 and len(t.steps["step"]) == 15
    assert list(t.events["nbytes"][:3]) == [4096, 8192, 12288]


# ---------------------------------------------------------------- fuzzing

_raw_mutation = st.one_of(
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16)),
    st.tuples(st.just("flip"), st.integers(0, 1 << 16), st.integers(0, 7)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 16), st.integers(1, 64)),
    st.tuples(st.just("overwrite"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=16)),
)


def apply_raw(data: bytes, mutation) -> bytes:
    kind, at, *rest = mutation
    at %= len(data) + 1
    if kind == "truncate":
        return data[:at]
    if kind == "flip":
        if at == len(data):
            return data
        return data[:at] + bytes([data[at] ^ (1 << rest[0])]) + data[at + 1 :]
    if kind == "insert":
        return data[:at] + rest[0] + data[at:]
    if kind == "delete":
        return data[:at] + data[at + rest[0] :]
    return data[:at] + rest[0] + data[at + len(rest[0]) :]


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations=st.lists(_raw_mutation, min_size=1, max_size=4))
def test_fuzz_raw_mutations(fuzz_dir, mutations):
    d, data = fuzz_dir
    for m in mutations:
        data = apply_raw(data, m) or data[:0]
    read_checked(d / "raw.ailens", data)


# Mutations behind valid checksums: they reach the JSON parser, the decompressor and the
# column decoder instead of stopping at a CRC mismatch.
_field = st.sampled_from(["tag", "rows", "payload", "raw", "drop", "dup", "meta"])
_u32 = st.one_of(
    st.integers(0, 300),
    st.sampled_from([0xFFFFFFFF, 0x7FFFFFFF, MAX_CHUNK_ROWS, MAX_CHUNK_ROWS + 1, 1 << 24]),
)
_json_value = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    field=_field,
    index=st.integers(0, 20),
    value=_u32,
    blob=st.binary(max_size=48),
    key=st.sampled_from(
        [
            "rank",
            "world_size",
            "counter",
            "run_id",
            "config",
            "format_version",
            "start_wall_ns",
            "host",
        ]
    ),
    jvalue=_json_value,
)
def test_fuzz_behind_valid_checksums(fuzz_dir, field, index, value, blob, key, jvalue):
    d, data = fuzz_dir
    head, chunks = split_chunks(data)
    c = chunks[index % len(chunks)]
    if field == "tag":
        c[0] = blob[:4].ljust(4, b" ") if blob else b"EVTS"
    elif field == "rows":
        c[1] = value
    elif field == "payload":  # raw bytes replaced: decoders see arbitrary content
        c[2] = blob
    elif field == "raw":  # a byte flip inside the decompressed columns or JSON
        if c[2]:
            i = value % len(c[2])
            c[2] = c[2][:i] + bytes([c[2][i] ^ 0xFF]) + c[2][i + 1 :]
    elif field == "drop":
        chunks.remove(c)
    elif field == "dup":
        chunks.insert(index % len(chunks), list(c))
    else:
        meta = dict(META, **{key: jvalue})
        head = header_raw(json.dumps(meta).encode())
    read_checked(d / "structured.ailens", join_chunks(head, chunks))


def test_truncation_at_every_byte_reads_a_prefix(fuzz_dir):
    d, data = fuzz_dir
    full = read_trace(d / "valid.ailens")
    header_end = len(split_chunks(data)[0])
    for cut in range(len(data)):
        t = read_checked(d / "cut.ailens", data[:cut])
        if cut < header_end:
            assert t is None
            continue
        assert t is not None and not t.complete
        n = t.n_events
        for name, _ in EVENT_COLUMNS:  # what is read is exactly the written prefix
            assert np.array_equal(t.events[name], full.events[name][:n])


# ---------------------------------------------------------------- named hostile shapes


def _only_problem(t: RankTrace | None, text: str) -> None:
    assert t is not None and not t.complete
    assert any(text in p for p in t.problems), t.problems


def test_bit_flip_in_header_is_a_checksum_error(tmp_path):
    data = bytearray(valid_trace(tmp_path / "v.ailens"))
    data[len(MAGIC) + 12] ^= 0x01
    with pytest.raises(TraceError, match="checksum"):
        read_trace(_put(tmp_path / "x.ailens", bytes(data)))


def test_bit_flip_in_a_chunk_keeps_earlier_chunks(tmp_path):
    data = valid_trace(tmp_path / "v.ailens")
    head, chunks = split_chunks(data)
    first_two = len(head) + sum(16 + len(zlib.compress(c[2], 1)) for c in chunks[:3])
    bad = bytearray(data)
    bad[first_two + 20] ^= 0x10  # inside the 4th chunk's payload (second EVTS)
    t = read_checked(tmp_path / "x.ailens", bytes(bad))
    _only_problem(t, "checksum")
    assert t.n_events == 40


def test_wrong_version_names_both_versions(tmp_path):
    body = json.dumps(META).encode()
    with pytest.raises(TraceError, match="version 7.*reads versions 1, 2"):
        read_trace(_put(tmp_path / "x.ailens", header_raw(body, version=7)))


def test_mismatched_world_size_refuses_to_merge(tmp_path):
    valid_trace(tmp_path / "rank-00000.ailens", dict(META, rank=0, world_size=2))
    valid_trace(tmp_path / "rank-00001.ailens", dict(META, rank=1, world_size=4))
    with pytest.raises(TraceError, match="world_size=4.*different runs"):
        load_run(tmp_path)


def test_same_rank_twice_is_an_error(tmp_path):
    valid_trace(tmp_path / "rank-00000.ailens", dict(META, rank=0))
    valid_trace(tmp_path / "rank-00001.ailens", dict(META, rank=0))
    with pytest.raises(TraceError, match="second trace for rank 0"):
        load_run(tmp_path)


@pytest.mark.parametrize("meta_len", [0xFFFFFFFF, 0x80000000, (1 << 20) + 1])
def test_huge_metadata_length(tmp_path, meta_len):
    data = header_raw(b"{}", meta_len=meta_len)
    assert read_checked(tmp_path / "x.ailens", data) is None
    with pytest.raises(TraceError, match="metadata"):
        read_trace(tmp_path / "x.ailens")


@pytest.mark.parametrize(
    "rows,plen",
    [(0xFFFFFFFF, 10), (10, 0xFFFFFFFF), (MAX_CHUNK_ROWS + 1, 10), (0x7FFFFFFF, 0x7FFFFFFF)],
)
def test_huge_declared_chunk_sizes(tmp_path, rows, plen):
    data = valid_trace(tmp_path / "v.ailens", chunks=1)
    head, chunks = split_chunks(data)
    payload = zlib.compress(chunks[1][2], 1)
    hostile = join_chunks(head, chunks[:2]) + chunk(b"EVTS", rows, payload, plen=plen)
    t = read_checked(tmp_path / "x.ailens", hostile)
    assert t is not None and t.n_events == 40 and t.problems


def test_zip_bomb_event_chunk_is_refused_without_inflating(tmp_path):
    # 4 Mi rows x 38 bytes = 160 MB of zeros that deflate to ~160 KB.
    rows = MAX_CHUNK_ROWS
    c = zlib.compressobj(9)
    zeros = bytes(1 << 20)
    payload = b"".join(c.compress(zeros) for _ in range(rows * EVENT_ROW_BYTES >> 20)) + c.flush()
    data = header_raw(json.dumps(META).encode()) + chunk(b"EVTS", rows, payload)
    t = read_checked(tmp_path / "x.ailens", data)
    _only_problem(t, "over the limits")
    assert t.n_events == 0


@pytest.mark.parametrize("tag", [b"OPS ", b"INFO"])
def test_zip_bomb_json_chunk_is_refused(tmp_path, tag):
    c = zlib.compressobj(9)
    body = b"[" + b"0," * (4 << 20) + b"0]"  # 8 MB of JSON, over the 1 MiB cap
    payload = c.compress(body) + c.flush()
    data = header_raw(json.dumps(META).encode()) + chunk(tag, 0, payload)
    t = read_checked(tmp_path / "x.ailens", data)
    _only_problem(t, "larger than")


def test_op_ids_beyond_the_name_table(tmp_path):
    w = TraceWriter(tmp_path / "x.ailens", META)
    w.write_ops(["allreduce"])
    ev = _events(10)
    ev["op"] = np.full(10, 9, dtype=np.uint16)
    w.write_events(_events(10))  # ids 0 and 1: id 1 has no name either
    w.close()
    t = read_checked(tmp_path / "x.ailens", (tmp_path / "x.ailens").read_bytes())
    _only_problem(t, "op id")
    # Without any OPS chunk, ids get placeholder names and a problem says so.
    w = TraceWriter(tmp_path / "y.ailens", META)
    w.write_events(ev)
    w.write_info({"closed": True})
    w.close()
    t = read_checked(tmp_path / "y.ailens", (tmp_path / "y.ailens").read_bytes())
    _only_problem(t, "beyond the op-name list")
    assert t.n_events == 10 and t.ops[9] == "op9"


@pytest.mark.parametrize(
    "meta",
    [
        dict(META, rank=-1),
        dict(META, world_size=0),
        dict(META, rank=2, world_size=2),
        dict(META, rank=1.0),
        dict(META, rank=True),
        dict(META, rank="1"),
        dict(META, world_size=10**12),
        dict(META, rank=None),
        {k: v for k, v in META.items() if k != "run_id"},
        dict(META, run_id=["a"]),
        dict(META, counter=7),
        dict(META, config=[1, 2]),
        dict(META, start_wall_ns="x"),
        dict(META, start_wall_ns=1.5),
    ],
    ids=lambda m: repr(m)[:60],
)
def test_hostile_metadata_values(tmp_path, meta):
    assert read_checked(tmp_path / "x.ailens", header_raw(json.dumps(meta).encode())) is None


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 200_000 + b"]" * 200_000,  # recursion bomb
        b'{"rank": ' + b"9" * 5000 + b"}",  # int over the digit limit
        b"\xff\xfe{}",  # not UTF-8
        b"[1, 2, 3]",  # not an object
        b"NaN",
        b'{"rank": 1, "rank": 1',  # unterminated
        b"",
    ],
    ids=["nesting", "bigint", "utf8", "list", "nan", "unterminated", "empty"],
)
def test_json_oddities_in_the_header(tmp_path, body):
    assert read_checked(tmp_path / "x.ailens", header_raw(body)) is None


def test_nan_and_infinity_in_the_header_become_null(tmp_path):
    body = json.dumps(dict(META, host=float("nan"), config={"x": float("inf")})).encode()
    assert b"NaN" in body and b"Infinity" in body
    data = header_raw(body) + encode_json(b"INFO", {"closed": True})
    t = read_checked(tmp_path / "x.ailens", data)
    assert t is not None and t.complete and t.meta["host"] is None and t.meta["config"]["x"] is None


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000, b'{"closed": ' + b"1" * 6000 + b"}", b"\xff", b'"just a string"', b"[1, {}]"],
)
def test_json_oddities_in_chunks(tmp_path, body):
    for tag in (b"OPS ", b"INFO"):
        data = header_raw(json.dumps(META).encode()) + chunk(tag, 0, zlib.compress(body))
        t = read_checked(tmp_path / "x.ailens", data)
        assert t is not None and not t.complete


def test_unknown_chunk_tag_stops_with_a_problem(tmp_path):
    data = valid_trace(tmp_path / "v.ailens", chunks=1)
    head, chunks = split_chunks(data)
    hostile = join_chunks(head, chunks[:2]) + chunk(b"EVIL", 1, zlib.compress(b"x"))
    t = read_checked(tmp_path / "x.ailens", hostile)
    _only_problem(t, "unknown chunk tag")
    assert t.n_events == 40


def test_not_a_trace_at_all(tmp_path):
    for data in (b"", b"AIL", b"PK\x03\x04" + bytes(100), b"\x00" * 1000, MAGIC):
        p = _put(tmp_path / "x.ailens", data)
        with pytest.raises(TraceError):
            read_trace(p)


def test_fifo_and_device_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "rank-00000.ailens"
    os.mkfifo(fifo)
    with pytest.raises(TraceError, match="not a regular file"):
        read_trace(fifo)  # a plain open() would block here forever
    fifo.unlink()
    (tmp_path / "rank-00000.ailens").symlink_to("/dev/zero")
    with pytest.raises(TraceError, match="not a regular file"):
        load_run(tmp_path)  # a read_bytes() would never end
    (tmp_path / "rank-00000.ailens").unlink()
    (tmp_path / "rank-00000.ailens").mkdir()
    with pytest.raises(TraceError):
        load_run(tmp_path)


def test_empty_file_of_a_rank_killed_at_birth_counts_as_missing(tmp_path):
    valid_trace(tmp_path / "rank-00000.ailens", dict(META, rank=0, world_size=3))
    (tmp_path / "rank-00001.ailens").write_bytes(b"")
    (tmp_path / "rank-00002.ailens").write_bytes(MAGIC[:5])
    run = load_run(tmp_path)
    assert run.missing_ranks == (1, 2) and len(run.ranks) == 1
    assert any("ranks 1-2: trace files missing" in w for w in run.warnings)
    assert sum("unreadable" in w for w in run.warnings) == 2
    # A run of nothing but such files is still an error.
    (tmp_path / "rank-00000.ailens").unlink()
    with pytest.raises(TraceError, match="no readable trace"):
        load_run(tmp_path)


def test_large_world_with_missing_ranks_stays_one_line(tmp_path):
    valid_trace(tmp_path / "rank-00000.ailens", dict(META, rank=0, world_size=1 << 20))
    run = load_run(tmp_path)
    assert len(run.missing_ranks) == (1 << 20) - 1
    missing = [w for w in run.warnings if "missing" in w]
    assert missing == ["ranks 1-1048575: trace files missing (1048575 of the world)"]


def _put(path, data: bytes):
    path.write_bytes(data)
    return path


def _hostile_run(d, kind: str):
    d.mkdir()
    rng = np.random.default_rng(7)
    for r in range(2):
        p = d / f"rank-{r:05d}.ailens"
        data = valid_trace(p, dict(META, rank=r, world_size=2))
        head, chunks = split_chunks(data)
        if kind == "garbage-columns":  # structurally valid, values arbitrary
            for c in chunks:
                if c[0] in (b"EVTS", b"STEP"):
                    c[2] = rng.integers(0, 256, len(c[2]), dtype=np.uint8).tobytes()
            data = join_chunks(head, chunks)
        elif kind == "truncated" and r == 1:
            data = data[: len(data) // 2]
        elif kind == "flipped-header" and r == 1:
            data = data[:20] + bytes([data[20] ^ 1]) + data[21:]
        elif kind == "bomb" and r == 1:
            c = zlib.compressobj(9)
            payload = b"".join(c.compress(bytes(1 << 20)) for _ in range(64)) + c.flush()
            data = join_chunks(head, chunks[:2]) + chunk(b"EVTS", 1 << 20, payload)
        elif kind == "hostile-meta":
            head = header_raw(
                json.dumps(
                    dict(META, rank=r, host=[1], framework={"a": 1}, config={"tolerance": "x"})
                ).encode()
            )
            data = join_chunks(head, chunks)
        p.write_bytes(data)


@pytest.mark.parametrize(
    "kind", ["garbage-columns", "truncated", "flipped-header", "bomb", "hostile-meta"]
)
def test_cli_on_hostile_runs_answers_in_one_line_or_reports(tmp_path, kind, capsys):
    from ailens.cli import main

    _hostile_run(tmp_path / "run", kind)
    export = ["export", "-o", str(tmp_path / "t.json")]
    for cmd in (["report"], ["report", "--json"], ["predict"], export):
        code = main([cmd[0], str(tmp_path / "run"), *cmd[1:]])
        err = capsys.readouterr().err
        assert code in (0, 2), (cmd, err)
        assert "internal error" not in err and "Traceback" not in err, err
        if code == 2:
            assert err.startswith("ailens: error: ") and len(err.strip().splitlines()) == 1, err
