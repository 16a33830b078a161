"""zarrita.js (from npm, bundled at test time by esbuild) in headless Chromium, on a page of
another origin, reads arrays through zarrd as a viewer does: Zarr v2 (zlib, blosc, a
big-endian type), v3 (zstd), a sharded v3 array (shard indexes through suffix ranges) and
sparse arrays whose missing chunks read as the fill value, all via plain store URLs
(`/zarr/{mount}/...`); and a token-protected mount through a signed link minted with the
token, the page given only the link. The page also reads `WWW-Authenticate` from a 401 in
script. Every selection the page read is compared exactly with numpy's values of the same
selection of what zarr-python wrote.

zarr.js (npm `zarr`, the older client: Zarr v2 only, no zstd) reads the v2 arrays the same way,
the linked one included.
"""

from __future__ import annotations

import hashlib
import re
import secrets

import numcodecs
import numpy as np
import pytest
import requests
import zarr
from zarr.codecs import BloscCodec

from browser_clients import Origin, bundle
from zarrd_harness import start_zarrd

TOKEN = secrets.token_hex(32)
LINK_KEY = secrets.token_hex(32)

# Each case reads `sel` (per dimension [start, stop] or null for all) of the array at `url`
# with zarrita and reports the shape, data type and values (flat, C order).
SCRIPT = """
async function read(url, sel, version) {
  const store = new zarrita.FetchStore(url);
  const open = version === 2 ? zarrita.open.v2 : version === 3 ? zarrita.open.v3 : zarrita.open;
  const arr = await open(zarrita.root(store), {kind: "array"});
  const s = sel.map(d => d === null ? null : zarrita.slice(d[0], d[1]));
  const got = await zarrita.get(arr, s);
  return {array_shape: arr.shape, chunks: arr.chunks, dtype: arr.dtype,
          shape: got.shape, values: Array.from(got.data, Number)};
}
async function readZarrJs(url, sel) {
  const arr = await zarrjs.openArray({store: url, mode: "r"});
  const got = await arr.get(sel.map(d => d === null ? null : zarrjs.slice(d[0], d[1])));
  return {array_shape: arr.shape, chunks: arr.chunks, dtype: arr.dtype,
          shape: got.shape, values: Array.from(got.flatten(), Number)};
}
async function run(args) {
  const out = {cases: {}, zarrjs: {}};
  for (const c of args.cases) {
    try {
      out.cases[c.name] = await read(c.url, c.sel, c.version);
    } catch (e) {
      out.cases[c.name] = {error: String(e)};
    }
  }
  for (const c of args.zarrjs_cases) {
    try {
      out.zarrjs[c.name] = await readZarrJs(c.url, c.sel);
    } catch (e) {
      out.zarrjs[c.name] = {error: String(e)};
    }
  }
  // A protected mount without the link: a 401 whose challenge the script can read.
  const r = await fetch(args.protected_url + "/zarr.json");
  out.unauthorised = [r.status, r.headers.get("www-authenticate")];
  try {
    await zarrita.open(zarrita.root(new zarrita.FetchStore(args.protected_url)), {kind: "array"});
    out.protected_open = "opened";
  } catch (e) {
    out.protected_open = "refused: " + e;
  }
  return out;
}
"""


def make_arrays(root, secret):
    rng = np.random.default_rng(15)
    arrays = {}

    v2 = zarr.create_array(
        root / "v2_f8be", shape=(13, 17), chunks=(5, 6), dtype=">f8", zarr_format=2,
        compressors=numcodecs.Zlib(level=1), fill_value=0.0,
    )
    v2[...] = rng.normal(size=(13, 17)) * 1e6
    arrays["v2_f8be"] = v2[...]

    v2b = zarr.create_array(
        root / "v2_i2_blosc", shape=(9, 31), chunks=(4, 8), dtype="<i2", zarr_format=2,
        compressors=numcodecs.Blosc(cname="lz4", clevel=3, shuffle=numcodecs.Blosc.SHUFFLE), fill_value=0,
    )
    v2b[...] = rng.integers(-30000, 30000, size=(9, 31), dtype="int16")
    arrays["v2_i2_blosc"] = v2b[...]

    v3 = zarr.create_array(
        root / "grp" / "v3_u2", shape=(17, 23), chunks=(4, 5), dtype="uint16", dimension_names=["y", "x"],
    )
    v3[...] = rng.integers(0, 65535, size=(17, 23), dtype="uint16")
    arrays["v3_u2"] = v3[...]

    sh = zarr.create_array(
        root / "sharded", shape=(3, 20, 30), shards=(1, 10, 15), chunks=(1, 5, 5), dtype="int32",
        compressors=BloscCodec(cname="zstd", clevel=1),
    )
    sh[...] = rng.integers(-(2**31), 2**31 - 1, size=(3, 20, 30), dtype="int32")
    arrays["sharded"] = sh[...]

    # Sparse: most chunks (and, sharded, whole shards and inner chunks) never written.
    sp = zarr.create_array(root / "sparse_v3", shape=(40, 40), chunks=(8, 8), dtype="float32", fill_value=-1.5)
    sp[9:14, 20:30] = rng.normal(size=(5, 10)).astype("float32")
    arrays["sparse_v3"] = sp[...]
    sps = zarr.create_array(
        root / "sparse_sharded", shape=(32, 32), shards=(16, 16), chunks=(4, 4), dtype="int16", fill_value=-7,
    )
    sps[1:3, 17:30] = 5
    arrays["sparse_sharded"] = sps[...]
    sp2 = zarr.create_array(
        root / "sparse_v2", shape=(30, 30), chunks=(7, 7), dtype="<u1", zarr_format=2, fill_value=200,
        compressors=numcodecs.GZip(level=1),
    )
    sp2[20:23, 2:5] = 9
    arrays["sparse_v2"] = sp2[...]

    img = zarr.create_array(secret / "proj" / "img", shape=(20, 30), chunks=(8, 8), dtype="uint16")
    img[...] = np.arange(600, dtype="uint16").reshape(20, 30)
    arrays["linked"] = img[...]
    img2 = zarr.create_array(
        secret / "proj" / "img2", shape=(25, 18), chunks=(10, 10), dtype="<i4", zarr_format=2, fill_value=-3,
        compressors=numcodecs.Zlib(level=1),
    )
    img2[:12] = np.arange(12 * 18, dtype="int32").reshape(12, 18) * -1000
    arrays["linked_v2"] = img2[...]
    return arrays


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("zarrita-pub")
    secret = tmp_path_factory.mktemp("zarrita-secret")
    arrays = make_arrays(root, secret)
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    tokens = f'[{{ name = "t", sha256 = "{digest}", scopes = {{ "*" = ["admin"] }} }}]'
    env = {
        "ZARRD_AUTH__TOKENS": tokens,
        "ZARRD_AUTH__LINK_KEY": LINK_KEY,
        "ZARRD_MOUNTS__PUB__URL": root.as_uri(),
        "ZARRD_MOUNTS__PUB__ANONYMOUS_READ": "true",
    }
    logs = tmp_path_factory.mktemp("zarrita-logs")
    server = start_zarrd({"sec": secret.as_uri()}, log_path=logs / "zarrd.log", env=env)
    origin = Origin(bundle(tmp_path_factory.mktemp("zarrita-bundle")))
    yield server, origin, arrays
    origin.close()
    server.stop()


def selection(sel, ndim):
    return tuple(slice(None) if d is None else slice(d[0], d[1]) for d in sel) + (slice(None),) * (ndim - len(sel))


def test_zarrita_reads_v2_v3_sharded_sparse_and_linked_arrays(setup):
    server, origin, arrays = setup
    r = requests.post(
        f"{server.url}/api/v1/links",
        json={"mount": "sec", "prefix": "proj", "expires_in": 600},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    link = server.url + r.json()["path"]
    pub = f"{server.url}/zarr/pub"
    cases = [
        ("v2_f8be", f"{pub}/v2_f8be", [[2, 11], [3, 16]], 2),
        ("v2_f8be_all", f"{pub}/v2_f8be", [None, None], None),
        ("v2_i2_blosc", f"{pub}/v2_i2_blosc", [[1, 9], [5, 30]], 2),
        ("v3_u2", f"{pub}/grp/v3_u2", [[3, 16], [1, 22]], 3),
        ("v3_u2_all", f"{pub}/grp/v3_u2", [None, None], None),
        ("sharded", f"{pub}/sharded", [[1, 3], [4, 17], [9, 26]], 3),
        ("sparse_v3", f"{pub}/sparse_v3", [[0, 40], [15, 35]], 3),
        ("sparse_sharded", f"{pub}/sparse_sharded", [None, None], 3),
        ("sparse_v2", f"{pub}/sparse_v2", [[10, 30], None], 2),
        ("linked", f"{link}img", [[3, 19], [2, 29]], None),
    ]
    # zarr.js reads Zarr v2 only (and has no zstd: the v2 arrays use zlib, gzip and blosc).
    zarrjs_cases = [
        ("v2_f8be", f"{pub}/v2_f8be", [[2, 11], [3, 16]]),
        ("v2_i2_blosc", f"{pub}/v2_i2_blosc", [None, [5, 30]]),
        ("sparse_v2", f"{pub}/sparse_v2", [[10, 30], None]),
        ("linked_v2", f"{link}img2", [[5, 25], [1, 17]]),
    ]
    args = {
        "cases": [{"name": n, "url": u, "sel": s, "version": v} for n, u, s, v in cases],
        "zarrjs_cases": [{"name": n, "url": u, "sel": s} for n, u, s in zarrjs_cases],
        "protected_url": f"{server.url}/zarr/sec/proj/img",
    }
    # The page is given the link, never the token.
    assert TOKEN not in str(args)
    out = origin.run_page("zarrita", SCRIPT, args)

    dtypes = {"v2_f8be": "float64", "v2_i2_blosc": "int16", "v3_u2": "uint16", "sharded": "int32",
              "sparse_v3": "float32", "sparse_sharded": "int16", "sparse_v2": "uint8", "linked": "uint16"}
    for name, _, sel, _ in cases:
        got = out["cases"][name]
        assert "error" not in got, (name, got)
        key = name.removesuffix("_all")
        want = arrays[key][selection(sel, arrays[key].ndim)]
        assert got["array_shape"] == list(arrays[key].shape), (name, got["array_shape"])
        assert got["dtype"] == dtypes[key], (name, got["dtype"])
        assert got["shape"] == list(want.shape), (name, got["shape"], want.shape)
        np.testing.assert_array_equal(np.array(got["values"], dtype=want.dtype).reshape(want.shape), want, err_msg=name)
    for name, _, sel in zarrjs_cases:
        got = out["zarrjs"][name]
        assert "error" not in got, (name, got)
        want = arrays[name][selection(sel, arrays[name].ndim)]
        assert got["array_shape"] == list(arrays[name].shape), (name, got["array_shape"])
        assert got["dtype"] == arrays[name].dtype.str, (name, got["dtype"])
        assert got["shape"] == list(want.shape), (name, got["shape"], want.shape)
        np.testing.assert_array_equal(
            np.array(got["values"], dtype=want.dtype).reshape(want.shape), want, err_msg=f"zarr.js {name}"
        )
    assert out["zarrjs"]["linked_v2"]["values"].count(-3) > 0
    # The fill value really was read for missing chunks (the selections cross unwritten ones).
    assert out["cases"]["sparse_v3"]["values"].count(-1.5) > 0
    assert out["cases"]["sparse_sharded"]["values"].count(-7) > 0
    assert out["cases"]["sparse_v2"]["values"].count(200) > 0
    # zarrita reports the inner chunk shape of a sharded array.
    assert out["cases"]["sharded"]["chunks"] == [1, 5, 5]

    status, challenge = out["unauthorised"]
    assert status == 401 and challenge.startswith("Bearer"), out["unauthorised"]
    assert out["protected_open"].startswith("refused"), out["protected_open"]
    log = server.log_tail(2000)
    # Shards were read by ranges (zarrita reads a shard's index, then its inner chunks).
    assert re.search(r'path="/zarr/pub/sharded/c/[0-9/]+" status=206', log), log[-3000:]
    # zarrd logged the link's reads without its credential.
    assert "/s/…/img/zarr.json" in log
    assert r.json()["path"].split("/")[2] not in log
