"""The arrays zarr-python writes into a local directory before zarrd mounts it.

Layout of the directory (all written by zarr-python itself, never by hand):

    v3/<dtype>            Zarr v3 arrays, one per dtype, 37x23 in 10x8 chunks (partial edge chunks),
                          compressors blosc / zstd / gzip in turn, one chunk left at the fill value
                          (so it is not stored and must read as the fill value)
    v3/sep_dot            v3 with the "v2" chunk key encoding and "." separator
    v3/sharded            sharded v3 (shards 20x28 of inner chunks 5x7, index at the end):
                          partial edge shards, missing shards, missing inner chunks
    v3/sharded_start      the same with the shard index at the start and a float NaN fill value
    v2/<dtype>            Zarr v2 arrays, same dtypes and compressors
    v2/order_f            v2 in Fortran order
    v2/slash_sep          v2 with dimension_separator "/"
    tree3/...             a v3 group hierarchy with attributes on every node
    tree2/...             the same as Zarr v2
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import numcodecs
import numpy as np
from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ShardingCodec, ZstdCodec

import zarr

DTYPES = [
    "int8",
    "uint8",
    "uint16",
    "int32",
    "int64",
    "uint64",
    "float32",
    "float64",
    "bool",
    "complex64",
    "complex128",
]
COMPRESSORS = ["blosc", "zstd", "gzip"]
SHAPE = (37, 23)
CHUNKS = (10, 8)


@dataclass(frozen=True)
class ArrayCase:
    path: str  # path inside the mount
    zarr_format: int
    sharded: bool = False


def sample(dtype: str, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Deterministic test data covering the dtype's range (and NaN/inf for floats)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) > 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    if dt.kind == "f":
        out = (rng.standard_normal(shape) * 1e3).astype(dt)
        out.flat[1] = np.nan
        out.flat[2] = np.inf
        out.flat[3] = -np.inf
        return out
    if dt.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    raise AssertionError(dtype)


def fill_value_for(dtype: str):
    """A non-default fill value where the dtype allows one, to prove it is honoured."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return False
    if kind in "iu":
        return 7
    if kind == "f":
        return -1.5
    return 0


def _v3_compressor(name: str):
    return {
        "blosc": BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"),
        "zstd": ZstdCodec(level=3),
        "gzip": GzipCodec(level=5),
    }[name]


def _v2_compressor(name: str):
    return {
        "blosc": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
        "zstd": numcodecs.Zstd(level=3),
        "gzip": numcodecs.GZip(level=5),
    }[name]


def _write_dense(root: Path, path: str, zarr_format: int, dtype: str, seed: int, **kwargs) -> None:
    compressor = kwargs.pop("compressor")
    fill = fill_value_for(dtype)
    data = sample(dtype, SHAPE, seed)
    # The first chunk is all fill value: zarr-python does not store it, readers must fill it.
    data[: CHUNKS[0], : CHUNKS[1]] = fill
    arr = zarr.create_array(
        str(root / path),
        shape=SHAPE,
        chunks=CHUNKS,
        dtype=dtype,
        fill_value=fill,
        compressors=_v3_compressor(compressor) if zarr_format == 3 else _v2_compressor(compressor),
        zarr_format=zarr_format,
        attributes={"dtype": dtype, "compressor": compressor},
        **kwargs,
    )
    arr[...] = data


def write_fixtures(root: Path) -> list[ArrayCase]:
    """Write every fixture array under `root` with zarr-python; return `CASES`."""
    for i, dtype in enumerate(DTYPES):
        compressor = COMPRESSORS[i % len(COMPRESSORS)]
        for fmt in (3, 2):
            _write_dense(
                root, f"v{fmt}/{dtype}", fmt, dtype, seed=100 * fmt + i, compressor=compressor
            )

    # Chunk key encodings and memory order.
    _write_dense(
        root,
        "v3/sep_dot",
        3,
        "int32",
        seed=7,
        compressor="zstd",
        chunk_key_encoding={"name": "v2", "separator": "."},
    )
    _write_dense(root, "v2/order_f", 2, "float64", seed=8, compressor="blosc", order="F")
    _write_dense(
        root,
        "v2/slash_sep",
        2,
        "uint16",
        seed=9,
        compressor="gzip",
        chunk_key_encoding={"name": "v2", "separator": "/"},
    )
    _write_sharded(root)
    _write_tree(root, "tree3", 3)
    _write_tree(root, "tree2", 2)

    for case in CASES:
        meta = "zarr.json" if case.zarr_format == 3 else ".zarray"
        assert (root / case.path / meta).is_file(), f"CASES lists {case.path}, not written"
    return CASES


SHARD_SHAPE = (50, 70)
SHARDS = (20, 28)  # 3x3 shards, the last row and column partial
INNER = (5, 7)
MISSING_SHARDS = ["c/0/1", "c/2/0", "c/2/1", "c/2/2", "c/0/2", "c/1/2"]


def _write_sharded(root: Path) -> None:
    for name, dtype, fill, serializer in (
        ("sharded", "int32", -1, None),
        (
            "sharded_start",
            "float64",
            float("nan"),
            ShardingCodec(
                chunk_shape=INNER,
                codecs=[BytesCodec(), ZstdCodec(level=1)],
                index_location="start",
            ),
        ),
    ):
        kwargs = (
            {"chunks": INNER, "shards": SHARDS, "compressors": [ZstdCodec(level=1)]}
            if serializer is None
            else {"chunks": SHARDS, "serializer": serializer, "compressors": None}
        )
        arr = zarr.create_array(
            str(root / "v3" / name),
            shape=SHARD_SHAPE,
            dtype=dtype,
            fill_value=fill,
            attributes={"sharded": True},
            **kwargs,
        )
        data = sample(dtype, SHARD_SHAPE, seed=31)
        # Write only shards (0,0), (1,0) and (1,1); the others stay missing. Inside the
        # written shards a few inner chunks hold only the fill value, so the shard index
        # has empty entries too.
        region = data[0:40, 0:28].copy()
        region[0:5, 0:7] = fill
        region[25:30, 14:21] = fill
        arr[0:40, 0:28] = region
        arr[20:40, 28:56] = data[20:40, 28:56]
        for key in MISSING_SHARDS:
            assert not (root / "v3" / name / key).exists(), f"{name}/{key} should be missing"


TREE_ATTRS = {
    "": {"title": "a hierarchy", "nested": {"list": [1, 2.5, "three"], "none": None}},
    "a": {"level": 1, "unicode": "Größe µm"},
    "a/b": {"level": 2, "flags": [True, False]},
}


def _write_tree(root: Path, name: str, zarr_format: int) -> None:
    g = zarr.create_group(str(root / name), zarr_format=zarr_format, attributes=TREE_ATTRS[""])
    a = g.create_group("a", attributes=TREE_ATTRS["a"])
    b = a.create_group("b", attributes=TREE_ATTRS["a/b"])
    g.create_group("empty", attributes={"empty": True})
    t = g.create_array(
        "temperature",
        shape=(12, 9),
        chunks=(5, 4),
        dtype="float32",
        fill_value=0.0,
        attributes={"units": "K"},
    )
    t[...] = sample("float32", (12, 9), seed=1)
    c = a.create_array("counts", shape=(100,), chunks=(16,), dtype="int64", fill_value=0)
    c[...] = np.arange(100, dtype="int64") * 3
    m = b.create_array("mask", shape=(6, 6, 6), chunks=(4, 4, 4), dtype="bool", fill_value=False)
    m[...] = sample("bool", (6, 6, 6), seed=2)


# The cases, known at collection time (write_fixtures checks it wrote exactly these).
CASES: list[ArrayCase] = [
    *(ArrayCase(f"v{fmt}/{dtype}", fmt) for dtype in DTYPES for fmt in (3, 2)),
    ArrayCase("v3/sep_dot", 3),
    ArrayCase("v2/order_f", 2),
    ArrayCase("v2/slash_sep", 2),
    ArrayCase("v3/sharded", 3, sharded=True),
    ArrayCase("v3/sharded_start", 3, sharded=True),
    *(
        ArrayCase(f"{tree}/{path}", fmt)
        for tree, fmt in (("tree3", 3), ("tree2", 2))
        for path in ("temperature", "a/counts", "a/b/mask")
    ),
]

# Members of each group, as (arrays, groups), for listing checks.
TREE_MEMBERS = {
    "": ({"temperature"}, {"a", "empty"}),
    "a": ({"counts"}, {"b"}),
    "a/b": ({"mask"}, set()),
}


def random_box(rnd: random.Random, shape: tuple[int, ...]) -> tuple[str, tuple]:
    """A random non-empty box of an array of `shape`: zarrd's `sel=` text and numpy's index."""
    parts, index = [], []
    for n in shape:
        a, b = sorted(rnd.sample(range(n + 1), 2))
        parts.append(f"{a}:{b}")
        index.append(slice(a, b))
    return ",".join(parts), tuple(index)
