"""Compressed chunks decoded only as far as a selection needs (issue 14, unaligned boxes): with
the decoded-chunk cache off, a chunk of which a slice needs only its first rows is decoded up to
them (zstd: a prefix; blosc: the blocks they lie in). This checks the answers end to end with
real writers: TensorStore writes v3 zstd arrays (plain and as inner chunks of shards),
zarr-python v3 zstd big-endian and blosc, v2 blosc lz4 with shuffle and v2 zstd; zarrd serves
them with its caches off (and a second zarrd with its default caches, which decodes whole), and
seeded random boxes read through `/api/v1/data` equal numpy. A chunk cut short, or replaced by
a valid encoding of another size, answers the same error as a read that needs the whole chunk.
"""

from __future__ import annotations

import random
import urllib.error
import urllib.request

import numcodecs
import numpy as np
import pytest
import tensorstore as ts
import zarr
from numpy.testing import assert_array_equal
from zarr.codecs import BloscCodec, BytesCodec, ZstdCodec

from fixture_data import random_box
from zarrd_harness import start_zarrd

SHAPE = (96, 80, 64)
CHUNKS = (32, 40, 64)
SHARDS = (64, 80, 64)
BOXES = 40
COLD = {"ZARRD_CACHE__CHUNK_BYTES": "0", "ZARRD_CACHE__OBJECT_BYTES": "0"}


def ts_write(path, data, sharded: bool) -> None:
    zstd = [{"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 1, "checksum": False}}]
    codecs = zstd
    grid = list(CHUNKS)
    if sharded:
        grid = list(SHARDS)
        codecs = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": list(CHUNKS), "codecs": zstd,
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]}}]
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path) + "/"}, "create": True,
            "metadata": {"shape": list(SHAPE), "data_type": "float32", "fill_value": 0, "codecs": codecs,
                         "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid}}}}
    ts.open(spec).result().write(data).result()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("ranged")
    rng = np.random.default_rng(14)
    smooth = np.sin(np.arange(np.prod(SHAPE)) / 5000).reshape(SHAPE)
    noise = rng.normal(0, 0.01, SHAPE)
    f32 = (np.round((smooth + noise) * 4096) / 4096).astype(np.float32)
    u16 = ((smooth + noise) * 1000 + 4000).astype(np.uint16)
    arrays = {}
    ts_write(root / "ts_zstd", f32, sharded=False)
    arrays["ts_zstd"] = f32
    ts_write(root / "ts_sharded", f32, sharded=True)
    arrays["ts_sharded"] = f32
    a = zarr.create_array(root / "zp_zstd_be", shape=SHAPE, chunks=CHUNKS, dtype="float64", fill_value=0,
                          serializer=BytesCodec(endian="big"), compressors=ZstdCodec(level=3))
    a[...] = f32.astype(np.float64)
    arrays["zp_zstd_be"] = f32.astype(np.float64)
    a = zarr.create_array(root / "zp_blosc", shape=SHAPE, chunks=CHUNKS, dtype="uint16", fill_value=0,
                          compressors=BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle", blocksize=4096))
    a[...] = u16
    arrays["zp_blosc"] = u16
    a = zarr.create_array(root / "v2_blosc", shape=SHAPE, chunks=CHUNKS, dtype="<u2", fill_value=0,
                          zarr_format=2, filters=None,
                          compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE))
    a[...] = u16
    arrays["v2_blosc"] = u16
    a = zarr.create_array(root / "v2_zstd", shape=SHAPE, chunks=CHUNKS, dtype="<f4", fill_value=0,
                          zarr_format=2, filters=None, compressors=numcodecs.Zstd(level=1))
    a[...] = f32
    arrays["v2_zstd"] = f32
    cold = start_zarrd({"r": root.as_uri()}, log_path=root / "cold.log", env=COLD)
    warm = start_zarrd({"r": root.as_uri()}, log_path=root / "warm.log")
    yield {"cold": cold, "warm": warm}, root, arrays
    cold.stop()
    warm.stop()


def get(server, name: str, sel: str) -> bytes:
    url = f"{server.url}/api/v1/data/r/{name}?sel={sel}&format=raw"
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read()


def error_of(server, name: str, sel: str) -> tuple[int, str]:
    with pytest.raises(urllib.error.HTTPError) as e:
        get(server, name, sel)
    return e.value.code, e.value.read().decode()


@pytest.mark.parametrize("name", ["ts_zstd", "ts_sharded", "zp_zstd_be", "zp_blosc", "v2_blosc", "v2_zstd"])
def test_random_boxes_equal_numpy(served, name):
    servers, _, arrays = served
    whole = arrays[name]
    rnd = random.Random(name)
    fixed = [
        # The first rows of one chunk (a prefix of 5 %), of a chunk row, of every chunk.
        ("0:1,0:40,:", (slice(0, 1), slice(0, 40), slice(None))),
        ("30:34,3:77,5:60", (slice(30, 34), slice(3, 77), slice(5, 60))),
        ("0:96:32,:,:", (slice(0, 96, 32), slice(None), slice(None))),
        ("33:50,41:43,7", (slice(33, 50), slice(41, 43), 7)),
    ]
    for sel, index in fixed + [random_box(rnd, SHAPE) for _ in range(BOXES)]:
        expected = whole[index]
        for label, server in servers.items():
            raw = get(server, name, sel)
            got = np.frombuffer(raw, dtype=expected.dtype.newbyteorder("<")).reshape(expected.shape)
            assert_array_equal(got, expected, err_msg=f"{name} sel={sel} ({label} server)")


def chunk_path(root, name: str):
    return root / name / ("0.0.0" if name.startswith("v2") else "c/0/0/0")


@pytest.mark.parametrize("name", ["ts_zstd", "zp_blosc", "v2_blosc", "v2_zstd"])
def test_a_damaged_chunk_answers_as_a_whole_read(served, name):
    """The first rows of chunk (0, 0, 0) need a prefix of it; its whole rows need all of it.
    Cut short, or replaced by a valid encoding of one row less, both reads give the same error."""
    servers, root, arrays = served
    path = chunk_path(root, name)
    stored = path.read_bytes()
    dtype = arrays[name].dtype
    short_value = np.zeros((CHUNKS[0] - 1,) + CHUNKS[1:], dtype=dtype).tobytes()
    if "blosc" in name:
        other_size = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE,
                                     typesize=dtype.itemsize).encode(short_value)
    else:
        other_size = numcodecs.Zstd(level=1).encode(short_value)
    try:
        for damaged in (stored[: len(stored) // 2], stored[:-3], other_size):
            path.write_bytes(damaged)
            for server in servers.values():
                part = error_of(server, name, "0:2,0:40,:")
                full = error_of(server, name, "0:32,0:40,:")
                assert part[0] == 502, part
                assert part == full
                key = f"{name}/{'0.0.0' if name.startswith('v2') else 'c/0/0/0'}"
                assert key in part[1], part
    finally:
        path.write_bytes(stored)
    expected = arrays[name][0:2, 0:40, :]
    got = np.frombuffer(get(servers["cold"], name, "0:2,0:40,:"), dtype=expected.dtype.newbyteorder("<"))
    assert_array_equal(got.reshape(expected.shape), expected)


def test_a_damaged_inner_chunk_answers_as_a_whole_read(served):
    """An inner chunk of a shard replaced by a zstd frame of another size (the index updated):
    the same error for a read that needs its first row as for one that needs all of it."""
    servers, root, _ = served
    path = root / "ts_sharded" / "c" / "0" / "0" / "0"
    stored = path.read_bytes()
    n_inner = (SHARDS[0] // CHUNKS[0]) * (SHARDS[1] // CHUNKS[1])
    index_at = len(stored) - (16 * n_inner + 4)
    offset = int.from_bytes(stored[index_at : index_at + 8], "little")
    size = int.from_bytes(stored[index_at + 8 : index_at + 16], "little")
    frame = numcodecs.Zstd(level=1).encode(np.zeros(CHUNKS[0] * CHUNKS[1] * CHUNKS[2] - 1, dtype="<f4").tobytes())
    assert len(frame) <= size
    body = bytearray(stored)
    body[offset : offset + len(frame)] = frame
    body[index_at + 8 : index_at + 16] = len(frame).to_bytes(8, "little")
    index = bytes(body[index_at : len(body) - 4])
    body[len(body) - 4 :] = bytes(numcodecs.CRC32C(location="end").encode(index))[-4:]
    try:
        path.write_bytes(bytes(body))
        for server in servers.values():
            part = error_of(server, "ts_sharded", "0:2,0:40,:")
            full = error_of(server, "ts_sharded", "0:32,0:40,:")
            assert part[0] == 502, part
            assert part == full
            assert "ts_sharded/c/0/0/0" in part[1] and "inner chunk [0, 0, 0]" in part[1], part
    finally:
        path.write_bytes(stored)
