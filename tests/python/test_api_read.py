"""Slice reads through zarrd's REST API equal numpy indexing of a local read.

Every array under tests/fixtures/engine (whatever the fixture generators put there: the set
grows) is copied into a directory that one zarrd serves. For each array, several hundred
seeded random selections — basic (indices, negative indices, slices with any start, stop and
step, negative steps, `...`, missing trailing dimensions), orthogonal (`oindex`: per-dimension
lists) and coordinate (`vindex`: point lists) — are read through `/api/v1/data` as raw bytes,
`.npy` and JSON (the format rotates, and the first selections are read in all three), by GET
with `sel=` or by POST with a JSON body, and compared with numpy indexing of zarr-python's
local read of the same array (TensorStore's where zarr-python refuses the array).

One server and one keep-alive connection serve everything, so the module takes a minute or two.
`ZARRD_TEST_API_READ_SELECTIONS` sets the number of selections per array (default 300, and 40
for each of the 200+ matrix arrays).
"""

from __future__ import annotations

import ast
import base64
import http.client
import io
import json
import os
import random
import shutil
import urllib.parse
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tensorstore as ts
import zarr
from numpy.testing import assert_array_equal

from zarrd_harness import start_zarrd

ENGINE = Path(__file__).resolve().parents[1] / "fixtures" / "engine"
# The matrix (200+ arrays, one per type x codec combination) gets fewer selections per array
# so the module stays within a couple of minutes on a debug build; set the variable to run
# the full count everywhere.
SELECTIONS = int(os.environ.get("ZARRD_TEST_API_READ_SELECTIONS", "0"))


def selections_for(rel: str) -> int:
    if SELECTIONS:
        return SELECTIONS
    return 40 if rel.startswith("matrix/") else 300
ALL_FORMATS_FIRST = 12


def _find_arrays(root: Path) -> list[str]:
    found = []
    for meta in sorted(root.rglob("*")):
        if meta.name == ".zarray":
            found.append(meta.parent)
        elif meta.name == "zarr.json":
            try:
                if json.loads(meta.read_text()).get("node_type") == "array":
                    found.append(meta.parent)
            except (OSError, ValueError):
                continue
    # Nested arrays inside a matched array directory do not exist in the fixtures; keep all.
    return sorted(str(p.relative_to(root)) for p in found)


ARRAYS = _find_arrays(ENGINE)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine")
    shutil.copytree(ENGINE, root, dirs_exist_ok=True)
    logs = tmp_path_factory.mktemp("logs")
    server = start_zarrd({"eng": root.as_uri()}, log_path=logs / "zarrd-api-read.log")
    yield server, root
    server.stop()


class Client:
    """One keep-alive HTTP/1.1 connection (re-opened if the server closes it)."""

    def __init__(self, base: str) -> None:
        u = urllib.parse.urlsplit(base)
        self.host, self.port = u.hostname, u.port
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def request(self, method: str, path: str, body: bytes | None = None, headers=None):
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=body, headers=headers or {})
                resp = self.conn.getresponse()
                data = resp.read()
                return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def client(served):
    server, _ = served
    c = Client(server.url)
    yield c
    c.conn.close()


def matrix_dtype(spec) -> np.dtype:
    if "ml_dtypes" in spec:
        return np.dtype(getattr(ml_dtypes, spec["ml_dtypes"]))

    def conv(d):
        if isinstance(d, str):
            return d
        return [tuple([f[0], conv(f[1])] + ([tuple(f[2])] if len(f) > 2 else [])) for f in d]

    return np.dtype(conv(spec["descr"]))


def local_read(root: Path, rel: str) -> np.ndarray:
    """The whole array as zarr-python reads it locally; TensorStore's where zarr-python refuses
    it; for matrix arrays both refuse, the values their writer recorded (`.expected.bin`)."""
    path = root / rel
    try:
        return np.asarray(zarr.open_array(str(path), mode="r")[...])
    except Exception:  # noqa: BLE001 - the fallback is the other real client
        pass
    driver = "zarr3" if (path / "zarr.json").exists() else "zarr"
    try:
        spec = {"driver": driver, "kvstore": {"driver": "file", "path": str(path)}}
        return ts.open(spec, read=True).result().read().result()
    except Exception:  # noqa: BLE001
        entries = json.loads((ENGINE / "matrix" / "matrix.json").read_text())["arrays"]
        entry = next(e for e in entries if e["name"] == Path(rel).name)
        dt = matrix_dtype(entry["dtype"]).newbyteorder("<")
        raw = (ENGINE / "matrix" / f"{entry['name']}.expected.bin").read_bytes()
        return np.frombuffer(raw, dtype=dt).reshape(entry["shape"])


def engine_bytes(a: np.ndarray) -> bytes:
    """An array's bytes in zarrd's layout: little-endian, int4 as one byte per element."""
    a = np.asarray(a)
    if a.dtype.name in ("int4", "uint4"):
        return np.ascontiguousarray(a.astype(np.int8 if a.dtype.name == "int4" else np.uint8)).tobytes()
    if a.dtype.name.startswith(("bfloat16", "float8")):
        return np.ascontiguousarray(a).tobytes()
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"))).tobytes()


def special(dt: np.dtype) -> bool:
    """Types compared byte for byte (records, ml_dtypes types)."""
    return dt.names is not None or dt.name.startswith(("bfloat16", "float8", "int4", "uint4"))


# ---- random selections -------------------------------------------------------------------


def rand_index(rng: random.Random, n: int) -> int:
    i = rng.randrange(n)
    return i - n if rng.random() < 0.3 else i


def rand_slice(rng: random.Random, n: int) -> slice:
    def bound():
        r = rng.random()
        if r < 0.25:
            return None
        if r < 0.4:
            return rng.randint(-n - 3, -1) if n else -1
        return rng.randint(0, n + 3)

    step = rng.choice([None, None, 1, 1, 2, 3, 5, -1, -2, -3])
    return slice(bound(), bound(), step)


def slice_text(s: slice) -> str:
    parts = ["" if v is None else str(v) for v in (s.start, s.stop, s.step)]
    return ":".join(parts) if s.step is not None else ":".join(parts[:2])


def rand_list(rng: random.Random, n: int, length: int) -> list[int]:
    return [rand_index(rng, n) for _ in range(length)]


def make_selection(rng: random.Random, shape: tuple[int, ...]):
    """(kind, items, ellipsis position or None); items per dimension."""
    rank = len(shape)
    nonzero = all(n > 0 for n in shape)
    r = rng.random()
    if rank > 0 and nonzero and r < 0.2:
        length = rng.randint(1, 12)
        items = []
        for n in shape:
            items.append([rand_index(rng, n)] if rng.random() < 0.15 else rand_list(rng, n, length))
        return "coordinate", items, None
    if rank > 0 and nonzero and r < 0.4:
        items = []
        for n in shape:
            c = rng.random()
            if c < 0.5:
                items.append(rand_list(rng, n, rng.randint(0, 6)))
            elif c < 0.65:
                items.append(rand_index(rng, n))
            else:
                items.append(rand_slice(rng, n))
        if not any(isinstance(i, list) for i in items):
            items[0] = rand_list(rng, shape[0], 3)
        return "orthogonal", items, None
    items = []
    for n in shape:
        if n > 0 and rng.random() < 0.25:
            items.append(rand_index(rng, n))
        else:
            items.append(rand_slice(rng, n))
    # Sometimes leave trailing dimensions out, or replace a run of them with `...`.
    ellipsis = None
    if rank and rng.random() < 0.2:
        items = items[: rng.randint(0, rank)]
    elif rank and rng.random() < 0.2:
        a = rng.randint(0, rank)
        b = rng.randint(a, rank)
        items = items[:a] + items[b:]
        ellipsis = a
    return "basic", items, ellipsis


def reference(full: np.ndarray, kind: str, items, ellipsis):
    if kind == "coordinate":
        n = max(len(i) for i in items)
        idx = tuple(np.array(i * n if len(i) == 1 else i, dtype=np.intp) for i in items)
        return full[idx]
    if kind == "orthogonal":
        out = full
        for d in reversed(range(len(items))):
            it = items[d]
            if isinstance(it, list):
                out = np.take(out, np.array(it, dtype=np.intp), axis=d)
            elif isinstance(it, int):
                out = np.take(out, it, axis=d)
            else:
                out = out[(slice(None),) * d + (it,)]
        return out
    key = list(items)
    if ellipsis is not None:
        key.insert(ellipsis, Ellipsis)
    return full[tuple(key)]


def text_item(it) -> str:
    if isinstance(it, list):
        return "[" + ",".join(map(str, it)) + "]"
    if isinstance(it, int):
        return str(it)
    return slice_text(it)


def json_item(it):
    if isinstance(it, slice):
        return {"start": it.start, "stop": it.stop, "step": it.step}
    return it


# ---- decoding answers --------------------------------------------------------------------


def parse_dtype(h: str) -> np.dtype:
    return np.dtype(ast.literal_eval(h)) if h.startswith("[") else np.dtype(h)


def shape_of(headers) -> tuple[int, ...]:
    h = headers["x-zarr-shape"]
    return tuple(int(x) for x in h.split(",")) if h else ()


def check_json_records(obj, expected: np.ndarray) -> None:
    flat = np.array(obj, dtype=object).reshape(-1) if expected.shape else [obj]
    for got, want in zip(flat, expected.reshape(-1), strict=True):
        for name, value in got.items():
            w = want
            for part in name.split("."):
                w = w[part]
            w = np.asarray(w)
            g = np.asarray(from_json(value, w, w.shape))
            assert_array_equal(g, w.astype(w.dtype.newbyteorder("<")), err_msg=name)


def from_json(obj, expected: np.ndarray, shape):
    kind = expected.dtype.kind
    name = expected.dtype.name
    if name in ("int4", "uint4"):
        return np.array(obj, dtype=np.int16).reshape(shape).astype(expected.dtype)
    if name.startswith(("bfloat16", "float8")):
        kind = "f"

    def floats(x):
        if isinstance(x, list):
            return [floats(v) for v in x]
        if isinstance(x, str):
            return {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}[x]
        return x

    if kind in "biu":
        return np.array(obj, dtype=expected.dtype).reshape(shape)
    if kind == "f":
        return np.array(floats(obj), dtype=np.float64).astype(expected.dtype).reshape(shape)
    if kind == "c":
        pairs = np.array(floats(obj), dtype=np.float64).reshape(shape + (2,))
        out = np.empty(shape, dtype=expected.dtype)
        out.real, out.imag = pairs[..., 0], pairs[..., 1]
        return out
    if kind in "Mm":
        return np.array(obj, dtype=np.int64).reshape(shape).view(expected.dtype.newbyteorder("<"))
    if kind == "S":
        flat = [base64.b64decode(v) for v in np.array(obj, dtype=object).reshape(-1)]
        return np.array(flat, dtype=expected.dtype).reshape(shape)
    if kind == "V":
        flat = np.array(obj, dtype=object).reshape(-1) if shape else [obj]
        return np.array([base64.b64decode(v) for v in flat], dtype=expected.dtype).reshape(shape)
    if kind in "UTO":
        arr = np.empty(int(np.prod(shape)), dtype=object)
        flat = np.array(obj, dtype=object).reshape(-1) if shape else [obj]
        as_bytes = any(isinstance(v, bytes) for v in expected.reshape(-1))
        for i, v in enumerate(flat):
            arr[i] = base64.b64decode(v) if as_bytes else v
        return arr.reshape(shape)
    raise AssertionError(f"no JSON comparison for dtype {expected.dtype}")


def check(expected: np.ndarray, status, headers, body, fmt: str, what: str) -> None:
    variable = expected.dtype.kind in "OT"
    if variable and fmt != "json":
        assert status == 400, f"{what}: {status} {body[:200]!r}"
        err = json.loads(body)["error"]
        assert "format=json" in err["message"], err
        return
    assert status == 200, f"{what}: {status} {body[:300]!r}"
    shape = shape_of(headers)
    assert shape == expected.shape, f"{what}: shape {shape} != {expected.shape}"
    assert headers["x-zarr-order"] == "C"
    if fmt == "raw":
        assert headers["content-type"] == "application/octet-stream"
        assert int(headers["content-length"]) == len(body)
        if special(expected.dtype):
            assert body == engine_bytes(expected), what
            return
        got = np.frombuffer(body, dtype=parse_dtype(headers["x-zarr-dtype"])).reshape(shape)
        assert got.dtype == expected.dtype.newbyteorder("<") or expected.dtype.kind == "b"
    elif fmt == "npy":
        assert headers["content-type"] == "application/x-npy"
        got = np.load(io.BytesIO(body), allow_pickle=False)
        assert got.shape == expected.shape
        if special(expected.dtype):
            assert got.tobytes() == engine_bytes(expected), what
            return
    else:
        assert headers["content-type"] == "application/json"
        if expected.dtype.names is not None:
            check_json_records(json.loads(body), expected)
            return
        got = from_json(json.loads(body), expected, shape)
        if special(expected.dtype):
            assert_array_equal(got.astype(np.float64), expected.astype(np.float64), err_msg=what)
            return
    if variable:
        assert [v for v in got.reshape(-1)] == [v for v in expected.reshape(-1)], what
    else:
        assert_array_equal(got, expected.astype(expected.dtype.newbyteorder("<")), err_msg=what)


@pytest.mark.parametrize("rel", ARRAYS)
def test_random_selections_equal_numpy(served, client, rel):
    _, root = served
    full = local_read(root, rel)
    rng = random.Random(f"api-read:{rel}")
    path = "/api/v1/data/eng/" + urllib.parse.quote(rel)
    formats = ["raw", "npy", "json"]
    checked = 0
    count = selections_for(rel)
    for i in range(count):
        kind, items, ellipsis = make_selection(rng, full.shape)
        try:
            expected = np.asarray(reference(full, kind, items, ellipsis), dtype=full.dtype)
        except IndexError:
            continue  # numpy refuses it too (an empty list broadcast against points)
        for fmt in formats if i < ALL_FORMATS_FIRST else [formats[i % 3]]:
            use_post = kind == "coordinate" or (kind == "orthogonal" and rng.random() < 0.5)
            if use_post:
                sel = [json_item(it) for it in items]
                if ellipsis is not None:
                    sel.insert(ellipsis, "...")
                body = json.dumps({"selection": sel, "mode": kind, "format": fmt}).encode()
                what = f"{rel} POST {body.decode()}"
                status, headers, data = client.request(
                    "POST", path, body, {"Content-Type": "application/json"}
                )
            else:
                texts = [text_item(it) for it in items]
                if ellipsis is not None:
                    texts.insert(ellipsis, "...")
                query = urllib.parse.urlencode({"sel": ",".join(texts), "format": fmt})
                what = f"{rel} GET ?{query}"
                status, headers, data = client.request("GET", f"{path}?{query}")
            check(expected, status, headers, data, fmt, what)
            checked += 1
    assert checked >= count


@pytest.mark.parametrize("rel", [a for a in ARRAYS if "sharded" in a][:3] or ARRAYS[:1])
def test_decoded_chunks_equal_the_array(served, client, rel):
    """Every chunk (inner chunk for sharded arrays) by coordinates, decoded, in all formats."""
    _, root = served
    full = local_read(root, rel)
    meta_path = root / rel / "zarr.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else None
    if meta is not None:
        outer = meta["chunk_grid"]["configuration"]["chunk_shape"]
        sharding = next((c for c in meta["codecs"] if c["name"] == "sharding_indexed"), None)
        inner = sharding["configuration"]["chunk_shape"] if sharding else None
    else:
        outer = json.loads((root / rel / ".zarray").read_text())["chunks"]
        inner = None
    unit = inner or outer
    grid = [-(-n // c) for n, c in zip(full.shape, unit)]
    for coords in np.ndindex(*grid):
        region = tuple(slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(coords, unit, full.shape))
        if inner:
            shard = [i * u // o for i, u, o in zip(coords, unit, outer)]
            within = [(i * u % o) // u for i, u, o in zip(coords, unit, outer)]
            query = {"coords": ",".join(map(str, shard)), "inner": ",".join(map(str, within))}
        else:
            query = {"coords": ",".join(map(str, coords))}
        for fmt in ["raw", "npy", "json"]:
            q = urllib.parse.urlencode({**query, "format": fmt})
            status, headers, data = client.request("GET", f"/api/v1/chunks/eng/{rel}?{q}")
            if full.dtype.kind in "OT" and fmt != "json":
                assert status == 400
                continue
            assert status == 200, (rel, q, data[:200])
            shape = shape_of(headers)
            assert list(shape) == list(unit)
            part = tuple(slice(0, r.stop - r.start) for r in region)
            expected = full[region]
            if special(full.dtype) and fmt != "json":
                raw = data if fmt == "raw" else np.load(io.BytesIO(data)).tobytes()
                size = len(raw) // int(np.prod(shape))
                got = np.frombuffer(raw, dtype=np.uint8).reshape(tuple(shape) + (size,))[part]
                assert got.tobytes() == engine_bytes(expected), (rel, q)
                continue
            if fmt == "raw":
                got = np.frombuffer(data, dtype=parse_dtype(headers["x-zarr-dtype"])).reshape(shape)
            elif fmt == "npy":
                got = np.load(io.BytesIO(data))
            elif full.dtype.names is not None:
                objs = np.array(json.loads(data), dtype=object).reshape(shape)
                check_json_records(objs[part].tolist(), expected)
                continue
            else:
                got = from_json(json.loads(data), full, shape)
            if full.dtype.kind in "OT":
                assert list(got[part].reshape(-1)) == list(expected.reshape(-1))
            elif special(full.dtype):
                assert_array_equal(got[part].astype(np.float64), expected.astype(np.float64))
            else:
                assert_array_equal(got[part], expected.astype(expected.dtype.newbyteorder("<")))
