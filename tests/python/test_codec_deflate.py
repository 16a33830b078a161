"""gzip and zlib chunks (issue 14 point 3: zarrd's DEFLATE decoding moved to flate2's zlib-rs
backend, with gzip members read one by one) against zarr-python on the same stored bytes.

zarr-python writes v2 (numcodecs GZip, Zlib) and v3 (gzip, numcodecs.zlib) arrays, some
big-endian; zarrd reads every one of them equal to numpy. Then one stored chunk of each array is
replaced by the unusual and the broken encodings of its own bytes: several gzip members, zero
padding between and after them, trailing garbage, a wrong CRC-32 or ISIZE, a wrong Adler-32,
truncation, leading zeros. For each, zarr-python (numcodecs over Python's gzip and zlib modules)
and zarrd must agree: both read the same array, or zarr-python raises and zarrd answers a 502
naming the chunk's key and the codec (never other bytes, never a 500). Finally zarrd writes
gzip and zlib chunks (v2 and v3) that zarr-python and numcodecs read back.
"""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
import zlib

import numcodecs
import numcodecs.zarr3
import numpy as np
import pytest
import requests
import zarr
from numpy.testing import assert_array_equal
from zarr.codecs import BytesCodec, GzipCodec

from zarrd_harness import start_zarrd

SHAPE = (40, 30)
CHUNKS = (20, 15)
# The chunk whose stored bytes the variants replace, and the region that reads it.
KEY2, KEY3 = "0.1", "c/0/1"
REGION = (slice(0, 20), slice(15, 30))
SEL = "0:20,15:30"

# name, zarr format, dtype, kind ("gzip" or "zlib")
ARRAYS = [
    ("v2_gzip_u2", 2, "<u2", "gzip"),
    ("v2_zlib_be_i4", 2, ">i4", "zlib"),
    ("v3_gzip_f4", 3, "float32", "gzip"),
    ("v3_gzip_be_u8", 3, ">u8", "gzip"),
    ("v3_zlib_i2", 3, "int16", "zlib"),
]


def create(root, name: str, fmt: int, dtype: str, kind: str) -> zarr.Array:
    if fmt == 2:
        compressor = numcodecs.GZip(level=5) if kind == "gzip" else numcodecs.Zlib(level=1)
        return zarr.create_array(
            root / name, shape=SHAPE, chunks=CHUNKS, dtype=dtype, compressors=compressor,
            filters=None, fill_value=0, zarr_format=2,
        )
    big = np.dtype(dtype).byteorder == ">"
    compressor = GzipCodec(level=5) if kind == "gzip" else numcodecs.zarr3.Zlib(level=1)
    return zarr.create_array(
        root / name, shape=SHAPE, chunks=CHUNKS, dtype=np.dtype(dtype).newbyteorder("="),
        compressors=[compressor], serializer=BytesCodec(endian="big" if big else "little"),
        fill_value=0, zarr_format=3,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("deflate")
    rng = np.random.default_rng(14)
    arrays = {}
    for name, fmt, dtype, kind in ARRAYS:
        a = create(root, name, fmt, dtype, kind)
        data = (rng.random(SHAPE) * 5000).astype(np.dtype(dtype).newbyteorder("="))
        a[...] = data
        arrays[name] = data
    (root / "rw").mkdir()
    server = start_zarrd({"w": root.as_uri(), "rw": str(root / "rw")}, log_path=root / "zarrd.log")
    yield server, root, arrays
    server.stop()


def read_zarrd(server, name: str, sel: str, like: np.ndarray) -> np.ndarray:
    url = f"{server.url}/api/v1/data/w/{name}?sel={sel}&format=raw"
    with urllib.request.urlopen(url, timeout=60) as r:
        body = r.read()
    return np.frombuffer(body, dtype=like.dtype.newbyteorder("<")).reshape(like.shape)


@pytest.mark.parametrize("name", [a[0] for a in ARRAYS])
def test_zarrd_reads_what_zarr_python_wrote(served, name):
    server, _, arrays = served
    data = arrays[name]
    assert_array_equal(read_zarrd(server, name, "0:40,0:30", data), data)
    assert_array_equal(read_zarrd(server, name, "3:37:2,29:0:-3", data[3:37:2, 29:0:-3]), data[3:37:2, 29:0:-3])


def gzip_member(raw: bytes) -> bytes:
    return gzip.compress(raw, compresslevel=6, mtime=0)


def variants(kind: str, stored: bytes, raw: bytes) -> dict[str, bytes]:
    """The chunk's bytes, encoded otherwise or broken, by name."""
    half = len(raw) // 2
    if kind == "gzip":
        one = gzip_member(raw)
        return {
            "two members": gzip_member(raw[:half]) + gzip_member(raw[half:]),
            "three members, zero padding between and after": gzip_member(raw[:100]) + b"\0" * 3
            + gzip_member(raw[100:half]) + gzip_member(raw[half:]) + b"\0" * 9,
            "an empty member first": gzip_member(b"") + one,
            "trailing garbage": one + b"garbage",
            "a truncated second header": one + b"\x1f\x8b",
            "leading zeros": b"\0\0" + one,
            "wrong CRC-32": one[:-8] + bytes([one[-8] ^ 1]) + one[-7:],
            "wrong ISIZE": one[:-4] + (len(raw) + 1).to_bytes(4, "little"),
            "truncated trailer": one[:-3],
            "truncated stream": one[: len(one) // 2],
            "members too long together": gzip_member(raw) + gzip_member(raw[:1]),
        }
    one = zlib.compress(raw, 6)
    return {
        "level 9": zlib.compress(raw, 9),
        "trailing garbage": one + b"garbage",
        "trailing zeros": one + b"\0" * 5,
        "wrong Adler-32": one[:-1] + bytes([one[-1] ^ 1]),
        "truncated trailer": one[:-2],
        "truncated stream": one[: len(one) // 2],
        "a gzip stream": gzip_member(raw),
    }


@pytest.mark.parametrize("name", [a[0] for a in ARRAYS])
def test_unusual_and_broken_streams_as_zarr_python_reads_them(served, name):
    server, root, arrays = served
    fmt, kind = next((a[1], a[3]) for a in ARRAYS if a[0] == name)
    data = arrays[name]
    key = KEY2 if fmt == 2 else KEY3
    path = root / name / key
    stored = path.read_bytes()
    codec = numcodecs.GZip() if kind == "gzip" else numcodecs.Zlib()
    raw = bytes(codec.decode(stored))
    cases = variants(kind, stored, raw)
    outcomes = {}
    try:
        for label, encoded in cases.items():
            path.write_bytes(encoded)
            try:
                expected = zarr.open_array(root / name, mode="r")[REGION]
            except Exception as e:  # noqa: BLE001 - any failure of the reference reader
                expected = e
            try:
                got = read_zarrd(server, name, SEL, data[REGION])
            except urllib.error.HTTPError as e:
                got = e
            if isinstance(expected, Exception):
                assert isinstance(got, urllib.error.HTTPError), f"{label}: zarr-python raised {expected!r}, zarrd read it"
                assert got.code == 502, f"{label}: {got.code}"
                message = json.dumps(json.loads(got.read()))
                assert f"{name}/{key}" in message and kind in message, f"{label}: {message}"
                outcomes[label] = "error"
            else:
                assert not isinstance(got, Exception), f"{label}: zarr-python read it, zarrd: {got!r}"
                assert_array_equal(got, expected, err_msg=label)
                assert_array_equal(got, data[REGION], err_msg=label)
                outcomes[label] = "read"
    finally:
        path.write_bytes(stored)
    assert_array_equal(read_zarrd(server, name, SEL, data[REGION]), data[REGION])
    # The cases are what they say (Python's modules decide): a regression in the reference
    # would otherwise pass silently.
    if kind == "gzip":
        read = {"two members", "three members, zero padding between and after", "an empty member first"}
    else:
        read = {"level 9", "trailing garbage", "trailing zeros"}
    assert {k for k, v in outcomes.items() if v == "read"} == read, outcomes
    assert len(outcomes) == len(cases)


@pytest.mark.parametrize(("fmt", "kind"), [(2, "gzip"), (2, "zlib"), (3, "gzip"), (3, "zlib")])
def test_zarrd_writes_what_zarr_python_and_numcodecs_read(served, fmt, kind):
    server, root, _ = served
    name = f"written_v{fmt}_{kind}"
    a = create(root / "rw", name, fmt, ">u4" if kind == "zlib" else "<u2", kind)
    rng = np.random.default_rng(fmt * 10 + len(kind))
    data = (rng.random(SHAPE) * 60000).astype(a.dtype)
    r = requests.put(
        f"{server.url}/api/v1/data/rw/{name}", params={"sel": "0:40,0:30", "format": "raw"},
        data=data.astype(data.dtype.newbyteorder("<")).tobytes(),
        headers={"content-type": "application/octet-stream"}, timeout=60,
    )
    assert r.status_code == 204, r.text
    assert_array_equal(zarr.open_array(root / "rw" / name, mode="r")[...], data)
    # The stored chunk is a plain stream of its codec (one gzip member, or zlib), byte for
    # byte what numcodecs decodes.
    stored = (root / "rw" / name / (KEY2 if fmt == 2 else KEY3)).read_bytes()
    if kind == "gzip":
        assert stored[:3] == b"\x1f\x8b\x08", stored[:10]
    else:
        assert stored[0] == 0x78 and int.from_bytes(stored[:2], "big") % 31 == 0, stored[:2]
    codec = numcodecs.GZip() if kind == "gzip" else numcodecs.Zlib()
    order = ">" if (kind == "zlib") else "<"
    chunk = np.frombuffer(bytes(codec.decode(stored)), dtype=np.dtype(order + data.dtype.str[1:]))
    assert_array_equal(chunk.reshape(CHUNKS), data[REGION])
