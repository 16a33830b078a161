"""Slices of uncompressed arrays read only the byte ranges they need (issue 14 point 4); this
checks the answers end to end with real writers: zarr-python writes uncompressed arrays (v3
`bytes` little and big endian, v2 C order with no compressor in both byte orders) with chunks
large enough to be read by ranges (128 KiB and more; also as inner chunks of shards), zarrd serves the directory, and seeded
random selections read through `/api/v1/data` (raw and npy) equal numpy indexing of the local
array. A chunk file cut short or grown afterwards is a 502 naming its key, never wrong data.
"""

from __future__ import annotations

import io
import random
import urllib.error
import urllib.request

import numpy as np
import pytest
import zarr
from numpy.testing import assert_array_equal
from zarr.codecs import BytesCodec

from zarrd_harness import start_zarrd

SHAPE = (96, 80, 64)
CHUNKS = (32, 40, 64)
SELECTIONS = 60

ARRAYS = [
    ("v3_u16_le", 3, "uint16", "little"),
    ("v3_f64_be", 3, "float64", "big"),
    ("v3_sharded_u16", 3, "uint16", "little"),
    ("v2_f4_be", 2, ">f4", None),
    ("v2_i8_le", 2, "<i8", None),
]
# Shards of 2×2×1 inner chunks (the inner chunks read by ranges of the shard).
SHARDS = (64, 80, 64)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("partial")
    rng = np.random.default_rng(14)
    arrays = {}
    for name, fmt, dtype, endian in ARRAYS:
        data = (rng.random(SHAPE) * 1000).astype(np.dtype(dtype).newbyteorder("="))
        if fmt == 3:
            a = zarr.create_array(
                root / name, shape=SHAPE, chunks=CHUNKS, dtype=dtype, compressors=None,
                serializer=BytesCodec(endian=endian), fill_value=0, zarr_format=3,
                shards=SHARDS if "sharded" in name else None,
            )
        else:
            a = zarr.create_array(
                root / name, shape=SHAPE, chunks=CHUNKS, dtype=dtype, compressors=None,
                filters=None, fill_value=0, zarr_format=2, order="C",
            )
        a[...] = data
        # One chunk left missing: the fill value.
        zarr.open_array(root / name, mode="r+")[64:96, 40:80, :] = 0
        arrays[name] = data.copy()
        arrays[name][64:96, 40:80, :] = 0
    server = start_zarrd({"p": root.as_uri()}, log_path=root / "zarrd.log")
    yield server, root, arrays
    server.stop()


def get(server, name: str, sel: str, fmt: str) -> bytes:
    url = f"{server.url}/api/v1/data/p/{name}?sel={sel}&format={fmt}"
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read()


def random_selection(rnd: random.Random) -> tuple[str, tuple]:
    parts, index = [], []
    for n in SHAPE:
        kind = rnd.random()
        if kind < 0.3:
            i = rnd.randrange(n)
            parts.append(str(i))
            index.append(i)
        else:
            a, b = sorted(rnd.sample(range(n + 1), 2))
            step = 1 if kind < 0.8 else rnd.randint(2, 5)
            parts.append(f"{a}:{b}:{step}")
            index.append(slice(a, b, step))
    return ",".join(parts), tuple(index)


@pytest.mark.parametrize("name", [a[0] for a in ARRAYS])
def test_random_selections_equal_numpy(served, name):
    server, _, arrays = served
    expected_all = arrays[name]
    rnd = random.Random(name)
    fixed = [
        ("40,:,:", (40, slice(None), slice(None))),
        ("3:9,1:4,30:34", (slice(3, 9), slice(1, 4), slice(30, 34))),
        (":,:,9", (slice(None), slice(None), 9)),
    ]
    for i, (sel, index) in enumerate(fixed + [random_selection(rnd) for _ in range(SELECTIONS)]):
        expected = expected_all[index]
        if i % 2:
            got = np.load(io.BytesIO(get(server, name, sel, "npy")))
        else:
            raw = get(server, name, sel, "raw")
            got = np.frombuffer(raw, dtype=expected.dtype.newbyteorder("<")).reshape(expected.shape)
        assert_array_equal(got, expected, err_msg=f"{name} sel={sel}")


def test_a_chunk_of_the_wrong_length_is_a_502(served):
    server, root, _ = served
    chunk = root / "v2_i8_le" / "1.0.0"
    stored = chunk.read_bytes()
    try:
        for wrong in (stored[:-8], stored + b"\0" * 8):
            chunk.write_bytes(wrong)
            with pytest.raises(urllib.error.HTTPError) as e:
                get(server, "v2_i8_le", "40,2,3:7", "raw")
            assert e.value.code == 502
            assert "v2_i8_le/1.0.0" in e.value.read().decode()
    finally:
        chunk.write_bytes(stored)
    assert len(get(server, "v2_i8_le", "40,2,3:7", "raw")) == 4 * 8
