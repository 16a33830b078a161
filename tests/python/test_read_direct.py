"""Uncompressed chunks wholly (or mostly) inside a selection are read by zarrd straight into
their places in the answer (one preadv per chunk file, no buffer of the whole chunk and no copy
out of it; issue 14 point 2). This checks the answers end to end with real writers: zarr-python
writes uncompressed arrays (v3 `bytes` little and big endian, v2 C order, one chunk missing),
zarrd serves the directory with its decoded-chunk cache off (reads that would fill the cache
decode whole units to keep them), and whole arrays, chunk-aligned boxes, boxes covering most of
their chunks and random boxes read through `/api/v1/data` (raw and npy) equal numpy indexing. A
checksummed (`crc32c`) array takes the ordinary path beside them. A chunk file cut short or grown
afterwards is a 502 naming its key, never wrong data, for every selection that touches it (or,
when the chunk is not in the answer's first slab, a body cut short: the headers went first).
"""

from __future__ import annotations

import http.client
import io
import random
import urllib.error
import urllib.request

import numpy as np
import pytest
import zarr
from numpy.testing import assert_array_equal
from zarr.codecs import BytesCodec, Crc32cCodec

from zarrd_harness import start_zarrd

SHAPE = (96, 80, 64)
# Rows of 40 x 64 elements: 5-20 KiB runs per chunk row.
CHUNKS = (32, 40, 64)
BOXES = 30

ARRAYS = [
    ("v3_u16_le", 3, "uint16", "little"),
    ("v3_f64_be", 3, "float64", "big"),
    ("v2_i8_le", 2, "<i8", None),
    ("v3_crc32c", 3, "float32", "little"),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("direct")
    rng = np.random.default_rng(21)
    arrays = {}
    for name, fmt, dtype, endian in ARRAYS:
        data = (rng.random(SHAPE) * 1000).astype(np.dtype(dtype).newbyteorder("="))
        if fmt == 3:
            a = zarr.create_array(
                root / name, shape=SHAPE, chunks=CHUNKS, dtype=dtype,
                compressors=[Crc32cCodec()] if "crc32c" in name else None,
                serializer=BytesCodec(endian=endian), fill_value=7, zarr_format=3,
            )
        else:
            a = zarr.create_array(
                root / name, shape=SHAPE, chunks=CHUNKS, dtype=dtype, compressors=None,
                filters=None, fill_value=7, zarr_format=2, order="C",
            )
        a[...] = data
        arrays[name] = data
    # One chunk of each array missing: the fill value.
    for name, fmt, _, _ in ARRAYS:
        key = root / name / ("c/2/1/0" if fmt == 3 else "2.1.0")
        key.unlink()
        arrays[name][64:96, 40:80, :] = 7
    env = {"ZARRD_CACHE__CHUNK_BYTES": "0", "ZARRD_CACHE__OBJECT_BYTES": "0"}
    server = start_zarrd({"d": root.as_uri()}, log_path=root / "zarrd.log", env=env)
    yield server, root, arrays
    server.stop()


def get(server, name: str, sel: str, fmt: str) -> bytes:
    url = f"{server.url}/api/v1/data/d/{name}?sel={sel}&format={fmt}"
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read()


def check(server, name: str, expected_all: np.ndarray, sel: str, index: tuple, npy: bool) -> None:
    expected = expected_all[index]
    if npy:
        got = np.load(io.BytesIO(get(server, name, sel, "npy")))
    else:
        raw = get(server, name, sel, "raw")
        got = np.frombuffer(raw, dtype=expected.dtype.newbyteorder("<")).reshape(expected.shape)
    assert_array_equal(got, expected, err_msg=f"{name} sel={sel}")


def boxes(rnd: random.Random) -> list[tuple[str, tuple]]:
    out = [
        (":,:,:", (slice(None),) * 3),
        ("32:64,40:80,:", (slice(32, 64), slice(40, 80), slice(None))),
        ("0:64,0:40,:", (slice(0, 64), slice(0, 40), slice(None))),
        # Most of each chunk: the last dimension cut a little.
        ("5:90,3:77,0:60", (slice(5, 90), slice(3, 77), slice(0, 60))),
    ]
    for _ in range(BOXES):
        parts, index = [], []
        for d, n in enumerate(SHAPE):
            if d == 2 and rnd.random() < 0.7:
                a, b = 0, n  # whole rows: runs long enough to read directly
            else:
                a, b = sorted(rnd.sample(range(n + 1), 2))
            parts.append(f"{a}:{b}")
            index.append(slice(a, b))
        out.append((",".join(parts), tuple(index)))
    return out


@pytest.mark.parametrize("name", [a[0] for a in ARRAYS])
def test_boxes_equal_numpy(served, name):
    server, _, arrays = served
    rnd = random.Random(name)
    for i, (sel, index) in enumerate(boxes(rnd)):
        check(server, name, arrays[name], sel, index, npy=bool(i % 2))


@pytest.mark.parametrize("name", ["v3_u16_le", "v2_i8_le"])
def test_a_chunk_of_the_wrong_length_is_a_502_for_every_selection(served, name):
    server, root, arrays = served
    chunk = root / name / ("c/1/0/0" if name.startswith("v3") else "1.0.0")
    key = f"{name}/c/1/0/0" if name.startswith("v3") else f"{name}/1.0.0"
    stored = chunk.read_bytes()
    # Whole array and the chunk alone (read directly), a sliver of it (by ranges).
    sels = [":,:,:", "32:64,0:40,:", "40,2,3:7"]
    try:
        for wrong in (stored[:-2], stored + b"\0" * 2, stored[: len(stored) // 2]):
            chunk.write_bytes(wrong)
            for sel in sels:
                try:
                    body = get(server, name, sel, "raw")
                except urllib.error.HTTPError as e:
                    assert e.code == 502, sel
                    assert key in e.read().decode(), sel
                except http.client.IncompleteRead:
                    # Found after the headers were sent: the body is cut short.
                    assert sel == ":,:,:", sel
                else:
                    pytest.fail(f"{sel}: {len(body)} bytes of a damaged chunk answered")
    finally:
        chunk.write_bytes(stored)
    check(server, name, arrays[name], ":,:,:", (slice(None),) * 3, npy=False)
