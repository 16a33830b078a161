"""Slice reads of blosc arrays whose slabs cut chunks, with missing chunks (issue 14, the blosc
aligned box): slab buffers are no longer zeroed before a read writes them (every element is a
copied unit's or a filled missing unit's), so this checks, end to end, that every element of
every answer is written. zarr-python writes v2 blosc lz4 (byte shuffle) and v3 blosc zstd (bit
shuffle) arrays, one with half its chunks missing (fill value 7) and one with every other chunk
missing (fill value 0); zarrd serves them with its caches off and tiny slabs (4 KiB: every chunk
cut by several slabs, parts decoded by blocks or whole), and a second zarrd with its default
caches and slabs (chunks decoded whole); whole arrays, aligned boxes, planes and seeded random
boxes read through `/api/v1/data` in raw, npy and JSON equal numpy.
"""

from __future__ import annotations

import io
import json
import random
import urllib.request

import numcodecs
import numpy as np
import pytest
from numpy.testing import assert_array_equal
from zarr.codecs import BloscCodec
from fixture_data import random_box
from zarrd_harness import start_zarrd

import zarr

SHAPE = (64, 64, 48)
CHUNKS = (32, 32, 16)
BOXES = 20
COLD = {
    "ZARRD_CACHE__CHUNK_BYTES": "0",
    "ZARRD_CACHE__OBJECT_BYTES": "0",
    "ZARRD_LIMITS__READ_SLAB_BYTES": "4096",
}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("cut")
    rng = np.random.default_rng(7)
    smooth = np.sin(np.arange(np.prod(SHAPE)) / 3000).reshape(SHAPE)
    u16 = ((smooth + rng.normal(0, 0.01, SHAPE)) * 1000 + 4000).astype(np.uint16)
    arrays = {}
    a = zarr.create_array(root / "v2_lz4", shape=SHAPE, chunks=CHUNKS, dtype="<u2", fill_value=0,
                          zarr_format=2, filters=None,
                          compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE,
                                                      blocksize=2048))
    a[...] = u16
    arrays["v2_lz4"] = u16
    a = zarr.create_array(root / "v3_zstd", shape=SHAPE, chunks=CHUNKS, dtype="uint16", fill_value=7,
                          compressors=BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle", blocksize=1024))
    # Only the first half along the first dimension is written: the rest are missing chunks (7).
    a[:32] = u16[:32]
    v3 = np.full(SHAPE, 7, dtype=np.uint16)
    v3[:32] = u16[:32]
    arrays["v3_zstd"] = v3
    a = zarr.create_array(root / "v2_sparse", shape=SHAPE, chunks=CHUNKS, dtype="<u2", fill_value=0,
                          zarr_format=2, filters=None,
                          compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE))
    # Every other chunk along the last dimension is missing (zero).
    sparse = np.zeros(SHAPE, dtype=np.uint16)
    for z in range(0, SHAPE[2], 2 * CHUNKS[2]):
        a[:, :, z:z + CHUNKS[2]] = u16[:, :, z:z + CHUNKS[2]]
        sparse[:, :, z:z + CHUNKS[2]] = u16[:, :, z:z + CHUNKS[2]]
    arrays["v2_sparse"] = sparse
    cold = start_zarrd({"r": root.as_uri()}, log_path=root / "cold.log", env=COLD)
    warm = start_zarrd({"r": root.as_uri()}, log_path=root / "warm.log")
    yield {"cold": cold, "warm": warm}, arrays
    cold.stop()
    warm.stop()


def get(server, name: str, sel: str, fmt: str = "raw") -> bytes:
    url = f"{server.url}/api/v1/data/r/{name}?sel={sel}&format={fmt}"
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read()


FIXED = [
    (":,:,:", (slice(None),) * 3),
    # Aligned boxes: whole chunks, cut by the slabs.
    ("32:64,32:64,16:48", (slice(32, 64), slice(32, 64), slice(16, 48))),
    ("0:32,0:32,:", (slice(0, 32), slice(0, 32), slice(None))),
    # Planes through every dimension.
    (":,:,7", (slice(None), slice(None), 7)),
    (":,40,:", (slice(None), 40, slice(None))),
    ("33,:,:", (33, slice(None), slice(None))),
]


@pytest.mark.parametrize("name", ["v2_lz4", "v3_zstd", "v2_sparse"])
def test_boxes_and_planes_equal_numpy(served, name):
    servers, arrays = served
    whole = arrays[name]
    rnd = random.Random(name)
    for sel, index in FIXED + [random_box(rnd, SHAPE) for _ in range(BOXES)]:
        expected = whole[index]
        for label, server in servers.items():
            raw = get(server, name, sel)
            got = np.frombuffer(raw, dtype="<u2").reshape(expected.shape)
            assert_array_equal(got, expected, err_msg=f"{name} sel={sel} ({label} server)")


@pytest.mark.parametrize("name", ["v2_lz4", "v3_zstd"])
def test_npy_and_json_answers_equal_numpy(served, name):
    servers, arrays = served
    sel, index = "1:63,5:60,3:45", (slice(1, 63), slice(5, 60), slice(3, 45))
    expected = arrays[name][index]
    for label, server in servers.items():
        got = np.load(io.BytesIO(get(server, name, sel, "npy")))
        assert_array_equal(got, expected, err_msg=f"{name} npy ({label} server)")
        doc = json.loads(get(server, name, sel, "json"))
        data = doc["data"] if isinstance(doc, dict) else doc
        assert_array_equal(np.array(data, dtype=np.uint16), expected, err_msg=f"{name} json ({label} server)")
