"""A slice that is exactly one compressed unit (a chunk, or an inner chunk of a shard) streams
when the decoded-chunk cache would not keep it (issue 14 point 2: decoding overlaps sending):
its stored frame is decoded a piece at a time, each piece sent while the next is decoded.

Checked end to end with the caches off (so every unit that can stream does), on arrays
written by zarr-python and TensorStore: zstd (with and without zstd's own checksum, with a
crc32c codec after it), sharded zstd with a crc32c index, v2 numcodecs zstd, and two that do
not stream (decoded whole, as before): big-endian zstd and gzip. Every whole unit inside the array equals numpy in
raw and npy; edge units and a missing unit are still right.

Stored bytes are never trusted, and a streamed answer's status line goes out before the whole
unit is decoded, so a frame found bad after its first piece ends the body with an error the
client sees (`requests` and `http.client` raise), never a short or padded 200; a frame
whose header does not declare exactly the unit's size is decoded whole, and its errors are an
ordinary 502 before any body. Each case below asserts which of the two happens. Clients that
disconnect mid-answer free their share of the answer budget.
"""

from __future__ import annotations

import http.client
import io
import itertools
import socket
import time
import urllib.parse

import numcodecs
import numpy as np
import pytest
import requests
import tensorstore as ts
import zarr
from numpy.testing import assert_array_equal
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ZstdCodec

from zarrd_harness import start_zarrd

SHAPE = (300, 256, 64)
# 128×128×64 float32: 4 MiB, four pieces of 1 MiB.
CHUNKS = (128, 128, 64)
SHARDS = (256, 256, 64)
FILL = 7
UNIT_BYTES = int(np.prod(CHUNKS)) * 4
# Left unstored in every array written by zarr-python: the fill value.
MISSING = (slice(128, 256), slice(0, 128), slice(0, 64))
HTTP_TIMEOUT_S = 60

# name, writer, codec kind, sharded, big endian
ARRAYS = [
    ("zp_zstd", "zarr", "zstd", False, False),
    ("zp_zstd_checked", "zarr", "zstd_checked", False, False),
    ("zp_zstd_be", "zarr", "zstd", False, True),
    ("zp_sharded_zstd", "zarr", "zstd", True, False),
    ("zp_gzip", "zarr", "gzip", False, False),
    ("zp_v2_zstd", "zarr2", "zstd", False, False),
    ("ts_zstd", "ts", "zstd", False, False),
    ("ts_sharded_zstd", "ts", "zstd", True, False),
]


def compressors(kind: str):
    return {
        "zstd": [ZstdCodec(level=1)],
        "zstd_checked": [ZstdCodec(level=1, checksum=True), Crc32cCodec()],
        "gzip": [GzipCodec(level=1)],
    }[kind]


def write(root, name, writer, kind, sharded, big, data):
    path = root / name
    if writer == "zarr":
        a = zarr.create_array(
            path, shape=SHAPE, chunks=CHUNKS, dtype="float32", compressors=compressors(kind),
            serializer=BytesCodec(endian="big" if big else "little"), fill_value=FILL,
            zarr_format=3, shards=SHARDS if sharded else None,
        )
        a[...] = data
    elif writer == "zarr2":
        a = zarr.create_array(
            path, shape=SHAPE, chunks=CHUNKS, dtype="<f4", compressors=numcodecs.Zstd(level=1),
            filters=None, fill_value=FILL, zarr_format=2,
        )
        a[...] = data
    else:
        inner = [{"name": "bytes", "configuration": {"endian": "little"}},
                 {"name": "zstd", "configuration": {"level": 1}}]
        codecs = inner
        chunk_shape = CHUNKS
        if sharded:
            chunk_shape = SHARDS
            codecs = [{"name": "sharding_indexed", "configuration": {
                "chunk_shape": list(CHUNKS), "codecs": inner,
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                                 {"name": "crc32c"}]}}]
        t = ts.open({
            "driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}, "create": True,
            "metadata": {
                "shape": list(SHAPE), "data_type": "float32", "fill_value": FILL,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk_shape)}},
                "chunk_key_encoding": {"name": "default"}, "codecs": codecs,
            },
        }).result()
        t[...] = data
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    rng = np.random.default_rng(1414)
    arrays = {}
    for name, writer, kind, sharded, big in ARRAYS:
        # Smooth plus noise: compressible as measured arrays are, never trivially.
        data = (np.sin(np.arange(np.prod(SHAPE)) * 1e-3).reshape(SHAPE) * 100
                + rng.random(SHAPE)).astype("float32")
        data[MISSING] = FILL
        write(root, name, writer, kind, sharded, big, data)
        arrays[name] = data
    # The caches off: no unit would be kept, so every compressed unit that can stream does.
    env = {"ZARRD_CACHE__CHUNK_BYTES": "0", "ZARRD_CACHE__OBJECT_BYTES": "0"}
    server = start_zarrd({"w": root.as_uri()}, log_path=root / "zarrd.log", env=env)
    yield server, root, arrays
    server.stop()


def url(server, name: str, index, fmt: str = "raw", extra: str = "") -> str:
    sel = ",".join(f"{s.start}:{s.stop}" for s in index)
    return f"{server.url}/api/v1/data/w/{name}?sel={urllib.parse.quote(sel)}&format={fmt}{extra}"


def get(server, name: str, index, fmt: str = "raw") -> bytes:
    r = requests.get(url(server, name, index, fmt), timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Length"] == str(len(r.content))
    return r.content


def decode(body: bytes, fmt: str, like: np.ndarray) -> np.ndarray:
    if fmt == "npy":
        return np.load(io.BytesIO(body))
    return np.frombuffer(body, dtype="<f4").reshape(like.shape)


def units_inside() -> list[tuple[slice, ...]]:
    ranges = [range(0, n - c + 1, c) for n, c in zip(SHAPE, CHUNKS)]
    return [tuple(slice(s, s + c) for s, c in zip(start, CHUNKS)) for start in itertools.product(*ranges)]


@pytest.mark.parametrize("name", [a[0] for a in ARRAYS])
def test_every_whole_unit_equals_numpy(served, name):
    server, _, arrays = served
    data = arrays[name]
    units = units_inside()
    assert MISSING in units and len(units) == 4
    for index in units:
        for fmt in ("raw", "npy"):
            got = decode(get(server, name, index, fmt), fmt, data[index])
            assert got.shape == CHUNKS
            assert_array_equal(got, data[index], err_msg=f"{name} {index} {fmt}")
    # Edge units (past the end of the array) go the general way.
    edge = (slice(256, 300), slice(128, 256), slice(0, 64))
    assert_array_equal(decode(get(server, name, edge), "raw", data[edge]), data[edge])


@pytest.mark.parametrize("name", ["zp_zstd", "zp_sharded_zstd"])
def test_a_missing_unit_is_the_fill_value_or_a_404(served, name):
    server, _, _ = served
    got = decode(get(server, name, MISSING), "raw", np.empty(CHUNKS))
    assert (got == FILL).all()
    r = requests.get(url(server, name, MISSING, extra="&fill_missing=false"), timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 404, r.text


def frame_header_len(frame: bytes) -> int:
    """The length of a zstd frame's header (magic, descriptor, window, dictionary, size)."""
    fhd = frame[4]
    single = bool(fhd & 0x20)
    fcs = {0: 1 if single else 0, 1: 2, 2: 4, 3: 8}[fhd >> 6]
    return 4 + 1 + (0 if single else 1) + [0, 1, 2, 4][fhd & 3] + fcs


def body_fails(u: str) -> str:
    """What a client makes of the answer at `u`: "error <status>" before any body, or
    "broken body" (200, then a transfer `requests` and `http.client` both report as failed)."""
    r = requests.get(u, timeout=HTTP_TIMEOUT_S, stream=True)
    if r.status_code != 200:
        assert r.status_code == 502, (r.status_code, r.text)
        assert "corrupt" in r.text.lower() or "zstd" in r.text, r.text
        return f"error {r.status_code}"
    assert r.headers["Content-Length"] == str(UNIT_BYTES)
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        for _ in r.iter_content(1 << 16):
            pass
    # A plain HTTP/1.1 client (the standard library's) sees a body cut short too.
    parts = urllib.parse.urlsplit(u)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=HTTP_TIMEOUT_S)
    try:
        conn.request("GET", f"{parts.path}?{parts.query}")
        resp = conn.getresponse()
        assert resp.status == 200
        with pytest.raises(http.client.IncompleteRead):
            resp.read()
    finally:
        conn.close()
    return "broken body"


def test_corrupt_frames_fail_before_the_body_or_break_it(served):
    server, root, arrays = served
    unit = units_inside()[1]
    key = "c/0/1/0"
    cases = {}
    for name in ("zp_zstd_checked", "zp_zstd"):
        chunk = root / name / key
        stored = chunk.read_bytes()
        cases[name] = (chunk, stored)
    chunk, stored = cases["zp_zstd"]
    data = arrays["zp_zstd"][unit]
    raw = np.ascontiguousarray(data).astype("<f4").tobytes()
    half = numcodecs.Zstd(level=1).encode(raw[: len(raw) // 2])
    fewer = stored[: frame_header_len(stored)] + half[frame_header_len(half):]
    huge = numcodecs.Zstd(level=1).encode(bytes(64 << 20))
    # The zstd frame with a checksum, behind a crc32c codec: flipping a byte of the frame
    # fails the crc32c before decoding starts.
    checked_chunk, checked = cases["zp_zstd_checked"]
    mid = len(checked) // 2
    bad_crc = checked[:mid] + bytes([checked[mid] ^ 0x40]) + checked[mid + 1:]
    expected = [
        # The stored bytes declare the unit's size: the first piece goes out, a later one fails.
        ("zp_zstd", "declares the size, holds half", fewer, "broken body"),
        # They do not (a truncated frame has no end to find): decoded whole, an ordinary 502.
        ("zp_zstd", "truncated", stored[:-100], "error 502"),
        ("zp_zstd", "bytes after the frame", stored + b"\0" * 8, "error 502"),
        ("zp_zstd", "declares 64 MiB", huge, "error 502"),
        ("zp_zstd", "half a header", stored[:5], "error 502"),
        ("zp_zstd_checked", "crc32c mismatch", bad_crc, "error 502"),
    ]
    # zstd's own checksum, the crc32c recomputed: only zstd can tell, at the frame's end.
    inner = checked[:-4]
    flipped = inner[: len(inner) // 2] + bytes([inner[len(inner) // 2] ^ 0x40]) + inner[len(inner) // 2 + 1:]
    crc = numcodecs.CRC32C()
    expected.append(("zp_zstd_checked", "zstd checksum mismatch", bytes(crc.encode(flipped)), "broken body"))
    seen = []
    try:
        for name, what, bad, outcome in expected:
            path, _ = cases[name]
            path.write_bytes(bad)
            got = body_fails(url(server, name, unit))
            seen.append((name, what, got))
            assert got == outcome, (name, what, got)
    finally:
        for path, good in cases.values():
            path.write_bytes(good)
    print(seen)
    for name in cases:
        assert_array_equal(decode(get(server, name, unit), "raw", data), arrays[name][unit])


def test_a_corrupt_inner_chunk_breaks_the_body(served):
    server, root, arrays = served
    name = "zp_sharded_zstd"
    shard = root / name / "c" / "0" / "0" / "0"
    stored = shard.read_bytes()
    unit = (slice(128, 256), slice(128, 256), slice(0, 64))
    # Inner chunk [1, 1, 0] replaced by a frame declaring 4 MiB whose blocks hold 2 MiB,
    # appended to the shard's data, with the index (4 entries of offset and size, then its
    # crc32c) pointing at it.
    raw = np.ascontiguousarray(arrays[name][unit]).astype("<f4").tobytes()
    full = numcodecs.Zstd(level=1).encode(raw)
    half = numcodecs.Zstd(level=1).encode(raw[: len(raw) // 2])
    fewer = full[: frame_header_len(full)] + half[frame_header_len(half):]
    index_len = 4 * 16 + 4
    data = stored[:-index_len]
    index = np.frombuffer(stored[-index_len:-4], dtype="<u8").reshape(2, 2, 1, 2).copy()
    index[1, 1, 0] = (len(data), len(fewer))
    bad = data + fewer + bytes(numcodecs.CRC32C().encode(index.tobytes()))
    try:
        shard.write_bytes(bad)
        assert body_fails(url(server, name, unit)) == "broken body"
        # The other inner chunks of the shard still read right.
        other = (slice(0, 128), slice(128, 256), slice(0, 64))
        assert_array_equal(decode(get(server, name, other), "raw", arrays[name][other]), arrays[name][other])
    finally:
        shard.write_bytes(stored)
    assert_array_equal(decode(get(server, name, unit), "raw", arrays[name][unit]), arrays[name][unit])


def chunk_url(server, name: str, coords, inner=None, fmt: str = "raw") -> str:
    q = f"coords={','.join(map(str, coords))}&format={fmt}"
    if inner is not None:
        q += f"&inner={','.join(map(str, inner))}"
    return f"{server.url}/api/v1/chunks/w/{name}?{q}"


@pytest.mark.parametrize("name", ["zp_zstd", "zp_sharded_zstd", "ts_zstd", "ts_sharded_zstd", "zp_zstd_be"])
def test_decoded_chunk_answers_stream_too(served, name):
    """`GET /api/v1/chunks/...` of one chunk (or one inner chunk) streams as the slice does."""
    server, _, arrays = served
    data = arrays[name]
    sharded = "sharded" in name
    for index in units_inside():
        at = [s.start // c for s, c in zip(index, CHUNKS)]
        coords, inner = ([0, 0, 0], at) if sharded else (at, None)
        for fmt in ("raw", "npy"):
            r = requests.get(chunk_url(server, name, coords, inner, fmt), timeout=HTTP_TIMEOUT_S)
            assert r.status_code == 200, r.text
            assert_array_equal(decode(r.content, fmt, data[index]), data[index], err_msg=f"{name} {at} {fmt}")


def test_a_corrupt_chunk_breaks_a_decoded_chunk_answer(served):
    server, root, arrays = served
    name, key = "zp_zstd", "c/0/1/0"
    chunk = root / name / key
    stored = chunk.read_bytes()
    unit = units_inside()[1]
    raw = np.ascontiguousarray(arrays[name][unit]).astype("<f4").tobytes()
    half = numcodecs.Zstd(level=1).encode(raw[: len(raw) // 2])
    fewer = stored[: frame_header_len(stored)] + half[frame_header_len(half):]
    try:
        chunk.write_bytes(fewer)
        assert body_fails(chunk_url(server, name, [0, 1, 0])) == "broken body"
        chunk.write_bytes(stored + b"\0" * 8)
        assert body_fails(chunk_url(server, name, [0, 1, 0])) == "error 502"
    finally:
        chunk.write_bytes(stored)
    r = requests.get(chunk_url(server, name, [0, 1, 0]), timeout=HTTP_TIMEOUT_S)
    assert_array_equal(decode(r.content, "raw", arrays[name][unit]), arrays[name][unit])


def _open_and_leave(server, u: str, take: int) -> socket.socket:
    parsed = urllib.parse.urlsplit(u)
    s = socket.create_connection((parsed.hostname, parsed.port), timeout=HTTP_TIMEOUT_S)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    s.sendall(f"GET {parsed.path}?{parsed.query} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    got = 0
    while got < take:
        piece = s.recv(take - got)
        assert piece
        got += len(piece)
    return s


def test_clients_leaving_mid_answer_free_the_budget(served):
    """With an answer budget of one unit's share, a streamed answer whose client leaves after
    its first bytes must give its share back: otherwise the next read would wait for it
    forever (here: past its timeout)."""
    _, root, arrays = served
    env = {
        "ZARRD_CACHE__CHUNK_BYTES": "0",
        "ZARRD_CACHE__OBJECT_BYTES": "0",
        "ZARRD_LIMITS__READ_ANSWER_BUDGET_BYTES": str(UNIT_BYTES),
    }
    s = start_zarrd({"w": root.as_uri()}, log_path=root / "zarrd-budget.log", env=env)
    try:
        unit = units_inside()[3]
        for name in ("zp_zstd", "zp_sharded_zstd"):
            for _ in range(4):
                k = _open_and_leave(s, url(s, name, unit), 256 << 10)
                k.close()
            # Each left answer frees its share when the server finds its client gone.
            deadline = time.monotonic() + 30
            body = None
            while body is None and time.monotonic() < deadline:
                try:
                    r = requests.get(url(s, name, unit), timeout=10)
                    body = r.content
                except requests.exceptions.Timeout:
                    continue
            assert body is not None, "the budget was not given back"
            assert_array_equal(decode(body, "raw", arrays[name][unit]), arrays[name][unit])
    finally:
        s.stop()
