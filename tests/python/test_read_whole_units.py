"""A slice that is exactly one whole chunk, or one whole inner chunk of a shard, is answered
from the decoded unit's own bytes (issue 14 point 2: no slab, no copy; large units take a share
of the answer budget). This checks that fast path end to end against what the general path and
numpy give, with real writers: zarr-python writes v3 arrays (zstd, uncompressed big endian,
sharded with zstd and with uncompressed inner chunks) and v2 arrays (C and F order, blosc and no
compressor, both byte orders), with units both under and over 1 MiB. Every whole unit inside
the array is read as raw and npy, next to selections one element off the unit (the general
path), and compared with numpy; a missing unit reads as the fill value (or, with
`fill_missing=false`, is an error naming its key), and a stored chunk of the wrong size is a 502
naming its key, never garbage.
"""

from __future__ import annotations

import io
import itertools
import json
import urllib.error
import urllib.request

import numpy as np
import pytest
import zarr
from numcodecs import Blosc
from numpy.testing import assert_array_equal
from zarr.codecs import BytesCodec, ZstdCodec

from zarrd_harness import start_zarrd

SHAPE = (150, 128, 80)
# 64×64×80 float32 is 1.25 MiB (a large answer); uint16 and int8 units are small ones.
CHUNKS = (64, 64, 80)
SHARDS = (128, 128, 80)
FILL = 7

ARRAYS = [
    # name, zarr format, dtype, codec kind, order (v2), sharded
    ("v3_f4_zstd", 3, "float32", "zstd", None, False),
    ("v3_u2_be", 3, "uint16", "bytes_be", None, False),
    ("v3_sharded_zstd", 3, "float32", "zstd", None, True),
    ("v3_sharded_raw", 3, "float64", "bytes_le", None, True),
    ("v2_f4_be_F_blosc", 2, ">f4", "blosc", "F", False),
    ("v2_i8_C_raw", 2, "<i8", None, "C", False),
    ("v2_u2_be_C_raw", 2, ">u2", None, "C", False),
]
# The unit left missing in every array (the fill value): the first chunk of the second row.
MISSING = (slice(64, 128), slice(0, 64), slice(0, 80))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("whole")
    rng = np.random.default_rng(142)
    arrays = {}
    for name, fmt, dtype, kind, order, sharded in ARRAYS:
        data = (rng.random(SHAPE) * 1000).astype(np.dtype(dtype).newbyteorder("="))
        if fmt == 3:
            serializer = BytesCodec(endian="big" if kind == "bytes_be" else "little")
            compressors = [ZstdCodec(level=1)] if kind == "zstd" else None
            a = zarr.create_array(
                root / name, shape=SHAPE, chunks=CHUNKS, dtype=dtype, compressors=compressors,
                serializer=serializer, fill_value=FILL, zarr_format=3,
                shards=SHARDS if sharded else None,
            )
        else:
            compressor = Blosc(cname="lz4", clevel=1, shuffle=Blosc.SHUFFLE) if kind == "blosc" else None
            a = zarr.create_array(
                root / name, shape=SHAPE, chunks=CHUNKS, dtype=dtype, compressors=compressor,
                filters=None, fill_value=FILL, zarr_format=2, order=order,
            )
        data[MISSING] = FILL
        a[...] = data
        arrays[name] = data
        # Writing the fill value over a whole unit leaves it unstored (zarr-python's default).
        assert (a[MISSING] == FILL).all()
        if not sharded:
            assert not (root / name / ("1.0.0" if fmt == 2 else "c/1/0/0")).exists()
    server = start_zarrd({"w": root.as_uri()}, log_path=root / "zarrd.log")
    yield server, root, arrays
    server.stop()


def get(server, name: str, sel: str, fmt: str, extra: str = "") -> bytes:
    url = f"{server.url}/api/v1/data/w/{name}?sel={sel}&format={fmt}{extra}"
    with urllib.request.urlopen(url, timeout=60) as r:
        body = r.read()
        assert r.headers["Content-Length"] == str(len(body))
        return body


def decode(body: bytes, fmt: str, like: np.ndarray) -> np.ndarray:
    if fmt == "npy":
        return np.load(io.BytesIO(body))
    return np.frombuffer(body, dtype=like.dtype.newbyteorder("<")).reshape(like.shape)


def units_inside() -> list[tuple[slice, ...]]:
    """Every whole unit (chunk, or inner chunk of a shard: the same shape here) inside SHAPE."""
    ranges = [range(0, n - c + 1, c) for n, c in zip(SHAPE, CHUNKS)]
    return [tuple(slice(s, s + c) for s, c in zip(start, CHUNKS)) for start in itertools.product(*ranges)]


def text(index: tuple[slice, ...]) -> str:
    return ",".join(f"{s.start}:{s.stop}" for s in index)


@pytest.mark.parametrize("name", [a[0] for a in ARRAYS])
def test_whole_units_equal_numpy_and_the_general_path(served, name):
    server, _, arrays = served
    data = arrays[name]
    units = units_inside()
    assert MISSING in units
    for i, index in enumerate(units):
        expected = data[index]
        for fmt in ("raw", "npy"):
            got = decode(get(server, name, text(index), fmt), fmt, expected)
            assert got.shape == expected.shape
            assert_array_equal(got, expected, err_msg=f"{name} sel={text(index)} {fmt}")
        # The same unit less one element on the last dimension, and shifted by one on the
        # first: the general path (slabs), which must agree with the fast one.
        shorter = index[:-1] + (slice(index[-1].start, index[-1].stop - 1),)
        shifted = (slice(index[0].start + 1, min(index[0].stop + 1, SHAPE[0])),) + index[1:]
        for other in (shorter, shifted):
            fmt = "npy" if i % 2 else "raw"
            got = decode(get(server, name, text(other), fmt), fmt, data[other])
            assert_array_equal(got, data[other], err_msg=f"{name} sel={text(other)}")
    # The edge units (past the end of the array) go the general way and are right too.
    edge = (slice(128, 150), slice(64, 128), slice(0, 80))
    assert_array_equal(decode(get(server, name, text(edge), "raw"), "raw", data[edge]), data[edge])


@pytest.mark.parametrize("name", [a[0] for a in ARRAYS])
def test_a_missing_whole_unit_is_the_fill_value_or_names_its_key(served, name):
    server, _, arrays = served
    got = decode(get(server, name, text(MISSING), "raw"), "raw", arrays[name][MISSING])
    assert (got == FILL).all()
    with pytest.raises(urllib.error.HTTPError) as e:
        get(server, name, text(MISSING), "raw", "&fill_missing=false")
    assert e.value.code == 404
    sharded = "sharded" in name
    key = {2: "1.0.0", 3: "c/0/0/0" if sharded else "c/1/0/0"}[2 if name.startswith("v2") else 3]
    message = json.loads(e.value.read())
    assert key in json.dumps(message), message


@pytest.mark.parametrize("name", ["v2_i8_C_raw", "v3_u2_be", "v3_f4_zstd"])
def test_a_stored_chunk_of_the_wrong_size_is_a_502_naming_its_key(served, name):
    server, root, _ = served
    key = "0.1.0" if name.startswith("v2") else "c/0/1/0"
    chunk = root / name / key
    stored = chunk.read_bytes()
    index = (slice(0, 64), slice(64, 128), slice(0, 80))
    try:
        for wrong in (stored[:-8], stored + b"\0" * 8):
            chunk.write_bytes(wrong)
            with pytest.raises(urllib.error.HTTPError) as e:
                get(server, name, text(index), "raw")
            assert e.value.code == 502
            assert f"{name}/{key}" in e.value.read().decode()
    finally:
        chunk.write_bytes(stored)
    assert len(get(server, name, text(index), "raw")) == int(np.prod(CHUNKS)) * np.dtype(
        dict((a[0], a[2]) for a in ARRAYS)[name]
    ).itemsize


def test_units_larger_than_an_ordinary_share_go_by_slabs(served):
    """A unit is answered from its decoded bytes only when it is no larger than the share an
    ordinary read takes (4 x read_slab_bytes): with 64 KiB slabs the 1.25 MiB units go the
    general way, by slabs, and are still exactly numpy's (every array, a stored and the
    missing unit, raw and npy)."""
    _, root, arrays = served
    small = start_zarrd(
        {"w": root.as_uri()},
        log_path=root / "zarrd-small-slabs.log",
        env={"ZARRD_LIMITS__READ_SLAB_BYTES": str(64 * 1024)},
    )
    try:
        for name, data in arrays.items():
            for index in (units_inside()[0], MISSING):
                for fmt in ("raw", "npy"):
                    got = decode(get(small, name, text(index), fmt), fmt, data[index])
                    assert_array_equal(got, data[index], err_msg=f"{name} sel={text(index)} {fmt}")
    finally:
        small.stop()
