"""Downsampled reads through zarrd equal TensorStore's `downsample` driver in-process.

TensorStore writes small arrays (plain and sharded, v3, one v2) into a directory that zarrd
mounts, leaving chunks (and inner chunks of shards) missing so the fill value takes part. For
every method x data type (uint8, int16, uint16, int32, float32, float64, bool), seeded random
factors (1, small, and beyond the extent) and random selections of the downsampled domain
(indices, slices with steps, negative steps, lists) are read through
`/api/v1/data/...?downsample=...&downsample_method=...` as raw, npy and JSON, and compared
with `ts.downsample(ts.open(same array), factors, method)` read whole and indexed by numpy.
Float arrays hold NaN for mean/min/max/stride (TensorStore's median and mode sort with `<`,
whose order with NaN is not defined: those are read over arrays without NaN).
"""

from __future__ import annotations

import io
import json
import random
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest
import tensorstore as ts

from zarrd_harness import start_zarrd

SHAPE = (23, 17, 9)
READ_CHUNK = [5, 4, 3]
WRITE_CHUNK = [10, 8, 6]
DTYPES = ["uint8", "int16", "uint16", "int32", "float32", "float64", "bool"]
METHODS = ["stride", "mean", "median", "mode", "min", "max"]
CASES_PER_METHOD = 6
# Small slabs, so answers come in several slabs, and a block larger than a slab answers 413.
SLAB_BYTES = 16 * 1024
FILL = {"bool": True, "float32": 1.5, "float64": -2.25}


def values(rng: np.random.Generator, dtype: str, nan: bool) -> np.ndarray:
    if dtype == "bool":
        return rng.random(SHAPE) < 0.5
    if dtype.startswith("float"):
        a = (rng.standard_normal(SHAPE) * 100).astype(dtype)
        if nan:
            a[rng.random(SHAPE) < 0.1] = np.nan
        return a
    if dtype in ("uint8", "int32"):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, SHAPE, dtype=np.int64, endpoint=True).astype(dtype)
    # Few distinct values, so modes have ties and real winners.
    lo = 0 if dtype.startswith("u") else -6
    return rng.integers(lo, 7, SHAPE, dtype=np.int64).astype(dtype)


def create(root, name: str, dtype: str, sharded: bool, version: int, data: np.ndarray):
    driver = "zarr3" if version == 3 else "zarr"
    layout = {"write_chunk": {"shape": WRITE_CHUNK if sharded else READ_CHUNK}, "read_chunk": {"shape": READ_CHUNK}}
    spec = {
        "driver": driver,
        "kvstore": {"driver": "file", "path": str(root / name)},
        "schema": {
            "dtype": dtype,
            "domain": {"shape": list(SHAPE)},
            "chunk_layout": layout,
            "fill_value": FILL.get(dtype, 3),
        },
        "create": True,
    }
    if version == 3:
        spec["metadata"] = {"dimension_names": ["z", "y", "x"]}
    t = ts.open(spec).result()
    # Only part of the array is stored: [0:12) along z and a box further on, so whole chunks,
    # whole shards and inner chunks of stored shards are missing.
    t[0:12].write(data[0:12]).result()
    t[14:19, 5:13, 2:8].write(data[14:19, 5:13, 2:8]).result()
    return t


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("downsample")
    logs = tmp_path_factory.mktemp("logs")
    rng = np.random.default_rng(16)
    arrays = []
    for dtype in DTYPES:
        for sharded in (False, True):
            name = f"{dtype}_{'sharded' if sharded else 'plain'}"
            nan = dtype.startswith("float")
            create(root, name, dtype, sharded, 3, values(rng, dtype, nan))
            methods = ["stride", "mean", "min", "max"] if nan else METHODS
            arrays.append((name, dtype, methods))
            if nan:
                clean = name + "_nonan"
                create(root, clean, dtype, sharded, 3, values(rng, dtype, False))
                arrays.append((clean, dtype, ["median", "mode"]))
    create(root, "v2_int16", "int16", False, 2, values(rng, "int16", False))
    arrays.append(("v2_int16", "int16", METHODS))
    server = start_zarrd(
        {"ds": root.as_uri()},
        log_path=logs / "zarrd-downsample.log",
        env={"ZARRD_LIMITS__READ_SLAB_BYTES": str(SLAB_BYTES)},
    )
    yield server, root, arrays
    server.stop()


def get(url: str):
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def reference(root, name: str, factors, method: str) -> np.ndarray:
    driver = "zarr" if name.startswith("v2") else "zarr3"
    base = ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(root / name)}}).result()
    return ts.downsample(base, factors, method).read().result()


def random_factor(rng: random.Random, extent: int) -> int:
    return rng.choice([1, 2, 2, 3, 4, 5, 7, extent, extent + rng.randint(1, 40)])


def random_selection(rng: random.Random, shape):
    """A selection text (`sel=`) and the numpy index that means the same."""
    items, index, lists = [], [], 0
    for n in shape:
        kind = rng.random()
        if kind < 0.15 and n > 0:
            i = rng.randrange(-n, n)
            items.append(str(i))
            index.append(i)
        elif kind < 0.3 and n > 0 and lists == 0:
            picks = [rng.randrange(n) for _ in range(rng.randint(1, 4))]
            items.append("[" + ",".join(map(str, picks)) + "]")
            index.append(picks)
            lists += 1
        else:
            start = rng.choice([None, rng.randrange(-n - 1, n + 2)])
            stop = rng.choice([None, rng.randrange(-n - 1, n + 2)])
            step = rng.choice([None, 1, 2, 3, -1, -2])
            text = ":".join("" if v is None else str(v) for v in (start, stop, step))
            items.append(text)
            index.append(slice(start, stop, step))
    return ",".join(items), index


def numpy_select(a: np.ndarray, index) -> np.ndarray:
    """Orthogonal indexing (zarr-python's oindex): lists do not zip."""
    out = a
    # Apply one dimension at a time from the last, so earlier integer indices do not shift later axes.
    for d in reversed(range(len(index))):
        sl = [slice(None)] * out.ndim
        sl[d] = index[d]
        out = out[tuple(sl)]
    return out


def decode(fmt: str, headers, body: bytes, dtype: str) -> np.ndarray:
    shape = tuple(int(x) for x in headers["x-zarr-shape"].split(",") if x)
    if fmt == "raw":
        return np.frombuffer(body, dtype=np.dtype(dtype).newbyteorder("<")).reshape(shape)
    if fmt == "npy":
        return np.load(io.BytesIO(body))
    value = json.loads(body)
    if dtype.startswith("float"):
        special = {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}

        def conv(v):
            return [conv(x) for x in v] if isinstance(v, list) else special.get(v, v)

        value = conv(value)
    return np.array(value, dtype=dtype).reshape(shape)


def test_downsampled_reads_equal_tensorstore(served):
    server, root, arrays = served
    rng = random.Random(1616)
    formats = ["raw", "npy", "json"]
    checked = too_large = 0
    for name, dtype, methods in arrays:
        for method in methods:
            for case in range(CASES_PER_METHOD):
                factors = [random_factor(rng, n) for n in SHAPE]
                if case == 0:
                    factors = [2, 2, 2]
                expected_whole = reference(root, name, factors, method)
                ds_shape = [-(-n // f) for n, f in zip(SHAPE, factors)]
                assert list(expected_whole.shape) == ds_shape
                if case == 0:
                    sel, index = "", [slice(None)] * 3
                else:
                    sel, index = random_selection(rng, ds_shape)
                expected = numpy_select(expected_whole, index)
                fmt = formats[(checked) % 3]
                query = {
                    "downsample": ",".join(map(str, factors)),
                    "downsample_method": method,
                    "format": fmt,
                }
                if sel:
                    query["sel"] = sel
                url = f"{server.url}/api/v1/data/ds/{name}?" + urllib.parse.urlencode(query)
                status, headers, body = get(url)
                block = np.dtype(dtype).itemsize * np.prod([min(f, n) for f, n in zip(factors, SHAPE)])
                if block > SLAB_BYTES:
                    assert status == 413, (url, body[:300])
                    assert "limits.read_slab_bytes" in json.loads(body)["error"]["message"]
                    too_large += 1
                    continue
                assert status == 200, (url, body[:300])
                got = decode(fmt, headers, body, dtype)
                assert got.shape == expected.shape, (url, got.shape, expected.shape)
                np.testing.assert_array_equal(got, expected, err_msg=url)
                checked += 1
    assert checked + too_large == sum(len(m) for _, _, m in arrays) * CASES_PER_METHOD
    assert checked > 10 * too_large > 0, (checked, too_large)


def test_factors_that_divide_the_chunks_reduce_whole_chunks_exactly(served):
    """Factors that divide the read chunks make every inner tile one whole chunk (or inner
    chunk of a shard) of the source: zarrd reduces the decoded unit's own bytes (no box copy)
    for stored units and reads missing ones as the fill value; edge tiles go the box way.
    Every array x method, whole array, raw, equal to TensorStore."""
    server, root, arrays = served
    checked = 0
    for name, dtype, methods in arrays:
        for method in methods:
            for factors in ([5, 4, 3], [5, 2, 1], [1, 4, 3]):
                expected = reference(root, name, factors, method)
                query = {"downsample": ",".join(map(str, factors)), "downsample_method": method, "format": "raw"}
                url = f"{server.url}/api/v1/data/ds/{name}?" + urllib.parse.urlencode(query)
                status, headers, body = get(url)
                assert status == 200, (url, body[:300])
                got = decode("raw", headers, body, dtype)
                np.testing.assert_array_equal(got, expected, err_msg=url)
                checked += 1
    assert checked == 3 * sum(len(m) for _, _, m in arrays)


def test_named_dimensions_and_post_bodies_address_the_downsampled_domain(served):
    server, root, _ = served
    expected = reference(root, "uint16_sharded", [3, 2, 4], "max")
    url = f"{server.url}/api/v1/data/ds/uint16_sharded?" + urllib.parse.urlencode(
        {"sel": "y=1:7:2,z=-1", "downsample": "3,2,4", "downsample_method": "max", "format": "npy"}
    )
    status, _, body = get(url)
    assert status == 200, body
    np.testing.assert_array_equal(np.load(io.BytesIO(body)), expected[-1, 1:7:2, :])
    req = urllib.request.Request(
        f"{server.url}/api/v1/data/ds/uint16_sharded",
        data=json.dumps(
            {"selection": [[0, 7, 2], "1:3", None], "mode": "orthogonal", "format": "npy",
             "downsample": "3,2,4", "downsample_method": "max"}
        ).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        got = np.load(io.BytesIO(r.read()))
    np.testing.assert_array_equal(got, expected[np.ix_([0, 7, 2], [1, 2], range(expected.shape[2]))])
    # A JSON body may give the factors as a list.
    status, body = post_json(
        f"{server.url}/api/v1/data/ds/uint16_sharded",
        {"selection": [-1, "1:7:2", None], "format": "npy", "downsample": [3, 2, 4], "downsample_method": "max"},
    )
    assert status == 200, body
    np.testing.assert_array_equal(np.load(io.BytesIO(body)), expected[-1, 1:7:2, :])


def post_json(url, document):
    req = urllib.request.Request(
        url, data=json.dumps(document).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.parametrize(
    "factors, status, words",
    [
        ([2, 0, 2], 400, "downsample: dimension 1: a factor is at least 1"),
        ([2, -2, 2], 400, "downsample: dimension 1: expected a positive integer factor, got `-2`"),
        ([2, 2, 1.5], 400, "downsample: dimension 2: expected a positive integer factor, got `1.5`"),
        ({"x": 2}, 400, "downsample: expected a list of positive integer factors"),
        ([2, 2], 400, "2 factors"),
    ],
)
def test_bad_factors_in_a_body_answer_400_naming_the_member(served, factors, status, words):
    server, _, _ = served
    got, body = post_json(
        f"{server.url}/api/v1/data/ds/int32_plain", {"downsample": factors, "downsample_method": "mean"}
    )
    assert got == status, body
    assert words in json.loads(body)["error"]["message"], body


def test_a_body_of_the_wrong_shape_names_the_member(served):
    server, _, _ = served
    got, body = post_json(f"{server.url}/api/v1/data/ds/int32_plain", {"format": "npy", "fill_missing": "yes"})
    assert got == 422, body
    assert json.loads(body)["error"]["message"].startswith("invalid request body: `fill_missing`: invalid type"), body


@pytest.mark.parametrize(
    "query, field, words",
    [
        ({"downsample": "2,0,2", "downsample_method": "mean"}, "downsample", "dimension 1"),
        ({"downsample": "2,2", "downsample_method": "mean"}, "downsample", "2 factors"),
        ({"downsample": "2,2,18446744073709551616", "downsample_method": "mean"}, "downsample", "dimension 2"),
        ({"downsample": "2,2,2", "downsample_method": "average"}, "downsample_method", "unknown method"),
        ({"downsample": "2,2,2"}, "downsample_method", "required"),
        ({"downsample_method": "mean"}, "downsample_method", "without"),
        ({"downsample": "2,2,2", "downsample_method": "mean", "sel": "12"}, None, "dimension 0"),
    ],
)
def test_bad_parameters_answer_400_naming_the_field(served, query, field, words):
    server, _, _ = served
    url = f"{server.url}/api/v1/data/ds/int32_plain?" + urllib.parse.urlencode(query)
    status, _, body = get(url)
    assert status == 400, body
    message = json.loads(body)["error"]["message"]
    assert words in message, message
    if field:
        assert message.startswith(field + ":"), message


def test_a_huge_factor_reduces_the_whole_dimension(served):
    server, root, _ = served
    # TensorStore refuses a factor this large (its index arithmetic overflows); a factor at
    # least the extent reduces the whole dimension, which the extent itself shows.
    expected = reference(root, "int32_plain", [SHAPE[0], 1, SHAPE[2]], "min")
    url = f"{server.url}/api/v1/data/ds/int32_plain?" + urllib.parse.urlencode(
        {"downsample": f"{2**62},1,{2**62}", "downsample_method": "min", "format": "npy"}
    )
    status, _, body = get(url)
    assert status == 200, body
    got = np.load(io.BytesIO(body))
    assert got.shape == (1, 17, 1)
    np.testing.assert_array_equal(got, expected)


def test_missing_chunks_with_fill_missing_false_answer_404_naming_the_key(served):
    server, _, _ = served
    url = f"{server.url}/api/v1/data/ds/uint16_plain?" + urllib.parse.urlencode(
        {"downsample": "2,2,2", "downsample_method": "mean", "fill_missing": "false", "sel": "10:12"}
    )
    status, _, body = get(url)
    assert status == 404, body
    error = json.loads(body)["error"]
    assert error["code"] == "missing_chunk" and "uint16_plain/c/" in error["message"], error
    # Where every chunk is stored, the same read answers.
    url = url.replace("sel=10%3A12", "sel=0%3A2")
    status, _, body = get(url)
    assert status == 200, body


def test_coordinate_selections_pick_points_of_the_downsampled_array(served):
    server, root, _ = served
    expected = reference(root, "float64_plain", [2, 3, 2], "max")
    points = [[0, 11, 5, 11], [0, 5, 2, 0], [4, 0, 1, 4]]
    req = urllib.request.Request(
        f"{server.url}/api/v1/data/ds/float64_plain",
        data=json.dumps(
            {"selection": points, "mode": "coordinate", "format": "npy", "downsample": "2,3,2", "downsample_method": "max"}
        ).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        got = np.load(io.BytesIO(r.read()))
    np.testing.assert_array_equal(got, expected[tuple(np.array(p) for p in points)])
