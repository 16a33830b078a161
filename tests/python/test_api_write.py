"""Slice writes through zarrd's REST API (`PUT /api/v1/data/{mount}/{path}`): random regions
(partial chunks, strides, negative steps, integer indices, orthogonal lists, coordinate
points, broadcast scalars) on v2 and v3 arrays, sharded and not, of several data types,
in raw, .npy and JSON bodies. zarr-python and TensorStore then read the directory zarrd
wrote to, and both equal a numpy model with the same writes applied.
"""

from __future__ import annotations

import io
import json
import zlib

import numcodecs
import numpy as np
import pytest
import requests
import tensorstore as ts
import zarr
from numpy.testing import assert_array_equal
from zarr.codecs import GzipCodec, ZstdCodec

HTTP_TIMEOUT_S = 60
WRITES = 14

# name, zarr_format, dtype, shape, chunks, shards, compressors, fill value
CASES = [
    ("v3_u16_zstd", 3, "uint16", (23, 31), (6, 7), None, ZstdCodec(level=1), 0),
    ("v3_f32_sharded", 3, "float32", (24, 20), (4, 5), (12, 10), None, -1.5),
    ("v3_i64_sharded_edges", 3, "int64", (19, 13), (3, 4), (6, 8), GzipCodec(level=1), 7),
    ("v3_u8_3d", 3, "uint8", (7, 9, 5), (3, 4, 2), None, None, 0),
    ("v2_i32_blosc", 2, "int32", (17, 13), (5, 4), None, numcodecs.Blosc(cname="lz4"), 0),
    ("v2_f64_zlib", 2, "float64", (9, 11, 5), (4, 3, 5), None, numcodecs.Zlib(level=1), 0.25),
]


def _values(rng: np.random.Generator, dtype: np.dtype, shape) -> np.ndarray:
    if dtype.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)


def _dim(rng: np.random.Generator, n: int, kind: str):
    """One dimension's selection: (text for sel=, Python index, indices it selects)."""
    if kind == "int":
        i = int(rng.integers(-n, n))
        return str(i), i, [i % n]
    if kind == "list":
        k = int(rng.integers(1, min(n, 5) + 1))
        idx = [int(x) for x in rng.choice(n, size=k, replace=False)]
        return "[" + ",".join(map(str, idx)) + "]", idx, idx
    a, b = sorted(int(x) for x in rng.integers(0, n + 1, size=2))
    step = int(rng.choice([1, 1, 2, 3])) if kind == "slice" else int(rng.choice([-1, -2, 2, 3]))
    if step < 0:
        a, b = (b - 1 if b > 0 else None), (a - 1 if a > 0 else None)
    s = slice(a, b, step)
    text = f"{'' if a is None else a}:{'' if b is None else b}:{step}"
    return text, s, list(range(*s.indices(n)))


def _body(rng: np.random.Generator, values: np.ndarray, dtype: np.dtype):
    """The values as a body in a random format: (format, content type, bytes)."""
    fmt = str(rng.choice(["raw", "npy", "json"]))
    if fmt == "raw":
        return fmt, "application/octet-stream", values.astype(dtype.newbyteorder("<")).tobytes()
    if fmt == "npy":
        buf = io.BytesIO()
        # Either byte order: zarrd swaps a big-endian .npy.
        order = "<" if rng.random() < 0.7 else ">"
        np.save(buf, np.asarray(values, dtype=dtype.newbyteorder(order)))
        return fmt, "application/x-npy", buf.getvalue()
    return fmt, "application/json", json.dumps(values.tolist()).encode()


def _put(url: str, sel: str, mode: str, fmt: str, content_type: str, body: bytes) -> None:
    params = {"sel": sel, "format": fmt}
    if mode != "basic":
        params["mode"] = mode
    r = requests.put(
        url, params=params, data=body, headers={"content-type": content_type}, timeout=HTTP_TIMEOUT_S
    )
    assert r.status_code == 204, f"PUT {sel} ({mode}, {fmt}): {r.status_code} {r.text}"


def _one_write(rng, url: str, model: np.ndarray, dtype: np.dtype) -> None:
    shape = model.shape
    if rng.random() < 0.2:
        # Coordinate points (distinct, so the order of assignment does not matter).
        k = int(rng.integers(1, 12))
        flat = rng.choice(model.size, size=min(k, model.size), replace=False)
        points = np.unravel_index(flat, shape)
        sel = ",".join("[" + ",".join(str(int(i)) for i in p) + "]" for p in points)
        values = _values(rng, dtype, (len(flat),))
        fmt, ct, body = _body(rng, values, dtype)
        _put(url, sel, "coordinate", fmt, ct, body)
        model[points] = values
        return
    kinds = [str(rng.choice(["slice", "slice", "step", "int", "list"])) for _ in shape]
    dims = [_dim(rng, n, kind) for n, kind in zip(shape, kinds)]
    sel = ",".join(d[0] for d in dims)
    lists = [d[2] for d in dims]
    result_shape = tuple(len(d[2]) for d, kind in zip(dims, kinds) if kind != "int")
    mode = "orthogonal" if "list" in kinds else "basic"
    if rng.random() < 0.2:
        scalar = _values(rng, dtype, ())
        fmt = str(rng.choice(["raw", "npy", "json"]))
        if fmt == "raw":
            body, ct = np.asarray(scalar, dtype=dtype.newbyteorder("<")).tobytes(), "application/octet-stream"
        elif fmt == "npy":
            buf = io.BytesIO()
            np.save(buf, np.asarray(scalar, dtype=dtype))
            body, ct = buf.getvalue(), "application/x-npy"
        else:
            body, ct = json.dumps(scalar.item()).encode(), "application/json"
        _put(url, sel, mode, fmt, ct, body)
        if all(lists):
            model[np.ix_(*lists)] = scalar
        return
    values = _values(rng, dtype, result_shape)
    fmt, ct, body = _body(rng, values, dtype)
    _put(url, sel, mode, fmt, ct, body)
    if all(lists):
        model[np.ix_(*lists)] = values.reshape(tuple(len(l) for l in lists))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_slice_writes_read_back_by_zarr_python_and_tensorstore(zarrd, rw_dir, unique, case):
    name, zarr_format, dtype_name, shape, chunks, shards, compressors, fill = case
    dtype = np.dtype(dtype_name)
    path = f"slices_{name}_{unique}"
    kwargs = {"compressors": compressors} if compressors is not None else {"compressors": None}
    if shards is not None:
        kwargs["shards"] = shards
    zarr.create_array(
        str(rw_dir / path),
        shape=shape,
        chunks=chunks,
        dtype=dtype,
        fill_value=fill,
        zarr_format=zarr_format,
        **kwargs,
    )
    model = np.full(shape, fill, dtype=dtype)
    url = f"{zarrd.url}/api/v1/data/rw/{path}"
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for _ in range(WRITES):
        _one_write(rng, url, model, dtype)

    local = zarr.open_array(str(rw_dir / path), mode="r")
    assert_array_equal(local[...], model)
    spec = {
        "driver": "zarr3" if zarr_format == 3 else "zarr",
        "kvstore": {"driver": "file", "path": str(rw_dir / path) + "/"},
    }
    store = ts.open(spec, read=True).result(timeout=HTTP_TIMEOUT_S)
    assert_array_equal(store.read().result(timeout=HTTP_TIMEOUT_S), model)


def test_chunks_equal_to_the_fill_value_are_deleted(zarrd, rw_dir, unique):
    path = f"slices_empty_{unique}"
    zarr.create_array(str(rw_dir / path), shape=(8, 8), chunks=(4, 4), dtype="int16", fill_value=0)
    url = f"{zarrd.url}/api/v1/data/rw/{path}"
    _put(url, ":,:", "basic", "json", "application/json", b"3")
    assert (rw_dir / path / "c" / "0" / "0").is_file()
    _put(url, "0:4,0:4", "basic", "json", "application/json", b"0")
    assert not (rw_dir / path / "c" / "0" / "0").exists()
    expected = np.full((8, 8), 3, dtype="int16")
    expected[:4, :4] = 0
    assert_array_equal(zarr.open_array(str(rw_dir / path), mode="r")[...], expected)
