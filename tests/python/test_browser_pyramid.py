"""Pyramids built by zarrd, read by browser clients: zarrd builds OME-Zarr multiscale groups
(`POST /api/v1/pyramids/...`: v3 sources, plain and sharded, give OME-Zarr 0.5, a v2 source
0.4) and, in headless Chromium on a page of another origin, over the store protocol
(`/zarr/{mount}/...`):

- zarrita.js reads the group's `multiscales`, every level's shape and a selection of every
  level; each equals TensorStore's `ts.downsample` of level 0 by the cumulative factors of the
  level's `scale` (with the pyramid's method), exactly;
- ome-zarr.js (`NgffImage.load`) opens the group and reports its version, levels, paths and
  scales and the shapes it derives; it picks a level for a thumbnail size and renders it: the
  RGBA pixels equal its documented rendering of that level's plane (no `omero` metadata: the
  plane's min and max map linearly to 0 and 255, white, alpha 255), recomputed here with
  numpy from TensorStore's values, and the PNG it makes holds the same pixels.

Both also read a pyramid on a token-protected mount given only a signed link to the group
(minted with a read token), as a viewer that cannot send `Authorization` does.
"""

from __future__ import annotations

import base64
import hashlib
import io
import secrets
import time

import numpy as np
import pytest
import requests
import tensorstore as ts
from PIL import Image

from browser_clients import Origin, bundle
from test_pyramid import build_pyramid, make_source, open_level
from zarrd_harness import start_zarrd

ADMIN_TOKEN = secrets.token_hex(32)
READ_TOKEN = secrets.token_hex(32)

SCRIPT = """
async function readLevels(url) {
  const group = await zarrita.open(zarrita.root(new zarrita.FetchStore(url)), {kind: "group"});
  const attrs = group.attrs;
  const ms = (attrs.ome ? attrs.ome.multiscales : attrs.multiscales)[0];
  const levels = [];
  for (const ds of ms.datasets) {
    const arr = await zarrita.open(group.resolve(ds.path), {kind: "array"});
    const sel = arr.shape.map(n => zarrita.slice(Math.floor(n / 3), Math.floor(n / 3) + 24));
    const got = await zarrita.get(arr, sel);
    levels.push({path: ds.path, shape: arr.shape, dtype: arr.dtype,
                 sel_shape: got.shape, values: Array.from(got.data, Number)});
  }
  return {attrs, levels};
}
async function omeZarr(url, targetSize) {
  const img = await omezarr.NgffImage.load(url);
  const shapes = await img.calcShapes();
  const path = await img.getPathForTargetSize(targetSize);
  const rgba = await img.renderRgba({targetSize});
  const png = await img.render({targetSize});
  return {version: img.getVersion(), zarr_version: img.getZarrVersion(), paths: img.paths,
          scales: img.scales, axes: img.axes.map(a => a.name), shapes, path,
          width: rgba.width, height: rgba.height, rgba: Array.from(rgba.data),
          png};
}
async function run(args) {
  const out = {};
  for (const c of args.groups) {
    const r = {};
    try { r.zarrita = await readLevels(c.url); } catch (e) { r.zarrita = {error: String(e) + " " + e.stack}; }
    try { r.omezarr = await omeZarr(c.url, c.target); } catch (e) { r.omezarr = {error: String(e) + " " + e.stack}; }
    out[c.name] = r;
  }
  return out;
}
"""

# (source, body, zarr version, OME-Zarr version, axes, thumbnail target size)
CASES = [
    ("vol", {"method": "mean", "factors": [1, 2, 2]}, 3, "0.5", ["z", "y", "x"], 60),
    ("plane", {"method": "max"}, 2, "0.4", ["y", "x"], 40),
    ("labels", {"method": "mode", "factors": [1, 2, 2]}, 3, "0.5", ["z", "y", "x"], 30),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("pyramid-browser")
    make_source(root, "vol", "float32", (12, 150, 200), [4, 32, 32])
    make_source(root, "plane", "uint16", (90, 130), [16, 16], version=2, fill=3)
    make_source(root, "labels", "uint8", (8, 64, 96), [2, 16, 16], shard=[4, 32, 32])
    logs = tmp_path_factory.mktemp("pyramid-browser-logs")
    server = start_zarrd({"p": root.as_uri()}, log_path=logs / "zarrd.log")
    for source, body, *_ in CASES:
        build_pyramid(server, "p", source, body)
    origin = Origin(bundle(tmp_path_factory.mktemp("pyramid-bundle")))
    yield server, origin, root
    origin.close()
    server.stop()


def ome_render(plane: np.ndarray) -> np.ndarray:
    """ome-zarr.js's rendering of one channel without `omero` metadata (renderTo8bitArray with
    the window of getMinMaxValues, whose maximum starts at 0; white): RGBA, alpha 255."""
    v = plane.astype(np.float64)
    lo, hi = v.min(), max(0.0, v.max())
    f = np.clip((v - lo) / (hi - lo), 0.0, 1.0)
    gray = np.trunc(f * 255).astype(np.uint8)
    return np.stack([gray, gray, gray, np.full_like(gray, 255)], axis=-1)


def check(got, case, root):
    """What zarrita.js and ome-zarr.js reported of one pyramid, against TensorStore."""
    source, body, zarr_version, ome_version, axes, _ = case
    assert "error" not in got["zarrita"], got["zarrita"]
    assert "error" not in got["omezarr"], got["omezarr"]
    attrs = got["zarrita"]["attrs"]
    ms = (attrs["ome"] if zarr_version == 3 else attrs)["multiscales"][0]
    if zarr_version == 3:
        assert attrs["ome"]["version"] == ome_version
    else:
        assert ms["version"] == ome_version
    assert [a["name"] for a in ms["axes"]] == axes
    level0 = open_level(root, f"{source}_pyramid", 0, zarr_version)
    levels = got["zarrita"]["levels"]
    assert len(levels) == len(ms["datasets"]) >= 3, (source, len(levels))
    factors = body.get("factors", [2] * len(axes))
    scales = []
    for k, (ds, level) in enumerate(zip(ms["datasets"], levels)):
        scale = [int(f) ** k for f in factors]
        assert ds["coordinateTransformations"] == [{"type": "scale", "scale": [float(s) for s in scale]}]
        scales.append(scale)
        expected = ts.downsample(level0, scale, body["method"]).read().result()
        assert level["path"] == str(k) and level["shape"] == list(expected.shape), (source, k, level["shape"])
        assert level["dtype"] == str(expected.dtype)
        index = tuple(slice(n // 3, n // 3 + 24) for n in expected.shape)
        want = expected[index]
        assert level["sel_shape"] == list(want.shape)
        np.testing.assert_array_equal(
            np.array(level["values"], dtype=want.dtype).reshape(want.shape), want, err_msg=f"{source} level {k}"
        )

    # ome-zarr.js: what it reports of the group, and the thumbnail it renders.
    om = got["omezarr"]
    assert om["version"] == ome_version and om["zarr_version"] == zarr_version, om["version"]
    assert om["paths"] == [str(k) for k in range(len(levels))]
    assert om["axes"] == axes
    assert om["scales"] == scales
    # ome-zarr.js derives the levels' shapes from level 0's and the scales, rounding down
    # (the levels themselves round up, as TensorStore's downsample does: a partial block at
    # the upper edge is reduced over the elements it has).
    assert om["shapes"] == [[n // f for n, f in zip(levels[0]["shape"], s)] for s in scales]
    k = int(om["path"])
    assert k > 0, "a thumbnail of a pyramid is rendered from a level above 0"
    level = open_level(root, f"{source}_pyramid", k, zarr_version).read().result()
    if len(axes) == 3:
        # The middle z of level 0, mapped onto the level (z is not downsampled here).
        z0 = level0.shape[0] // 2
        level = level[int(z0 / level0.shape[0] * level.shape[0])]
    assert [om["height"], om["width"]] == list(level.shape), (om["height"], om["width"], level.shape)
    rgba = np.array(om["rgba"], dtype=np.uint8).reshape(level.shape + (4,))
    np.testing.assert_array_equal(rgba, ome_render(level), err_msg=f"{source}: ome-zarr.js thumbnail")
    assert len(np.unique(rgba[..., 0])) > 3, "the thumbnail is not flat"
    # The PNG it renders (a data URL from a canvas) holds the same pixels. Decoded here, not in
    # the page: an image decode runs off the main thread, where virtual time does not wait.
    prefix = "data:image/png;base64,"
    assert om["png"].startswith(prefix), om["png"][:40]
    png = np.asarray(Image.open(io.BytesIO(base64.b64decode(om["png"][len(prefix):]))).convert("RGBA"))
    np.testing.assert_array_equal(png, rgba, err_msg=f"{source}: ome-zarr.js PNG")


def test_browser_clients_read_zarrd_pyramids(built):
    server, origin, root = built
    groups = [{"name": c[0], "url": f"{server.url}/zarr/p/{c[0]}_pyramid", "target": c[5]} for c in CASES]
    out = origin.run_page("pyramid", SCRIPT, {"groups": groups}, budget_ms=60000)
    for case in CASES:
        check(out[case[0]], case, root)


def test_browser_clients_read_a_protected_pyramid_through_a_signed_link(tmp_path_factory, built):
    """ome-zarr.js and zarrita.js given only a signed link (no header) to a pyramid on a
    token-protected mount: built with an admin token, the link minted with a read token."""
    _, origin, _ = built
    root = tmp_path_factory.mktemp("pyramid-secret")
    case = CASES[0]
    make_source(root, case[0], "float32", (12, 150, 200), [4, 32, 32])
    tokens = "[" + ", ".join(
        f'{{ name = "{n}", sha256 = "{hashlib.sha256(t.encode()).hexdigest()}", scopes = {{ sec = ["{s}"] }} }}'
        for n, t, s in (("admin", ADMIN_TOKEN, "admin"), ("reader", READ_TOKEN, "read"))
    ) + "]"
    env = {"ZARRD_AUTH__TOKENS": tokens, "ZARRD_AUTH__LINK_KEY": secrets.token_hex(32)}
    logs = tmp_path_factory.mktemp("pyramid-secret-logs")
    server = start_zarrd({"sec": root.as_uri()}, log_path=logs / "zarrd.log", env=env)
    try:
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        r = requests.post(f"{server.url}/api/v1/pyramids/sec/{case[0]}", json=case[1], headers=admin, timeout=30)
        assert r.status_code == 202, r.text
        job = f"{server.url}/api/v1/jobs/sec/{r.json()['id']}"
        for _ in range(2400):  # 120 s at most
            status = requests.get(job, headers=admin, timeout=30).json()
            if status["state"] != "running":
                break
            time.sleep(0.05)
        assert status["state"] == "completed", status
        group = f"{case[0]}_pyramid"
        assert requests.get(f"{server.url}/zarr/sec/{group}/zarr.json", timeout=30).status_code == 401
        r = requests.post(
            f"{server.url}/api/v1/links",
            json={"mount": "sec", "prefix": group, "expires_in": 600},
            headers={"Authorization": f"Bearer {READ_TOKEN}"},
            timeout=30,
        )
        assert r.status_code == 201, r.text
        # The link names the group itself: the clients are given its URL without the trailing slash.
        link = server.url + r.json()["path"].rstrip("/")
        out = origin.run_page("linked", SCRIPT, {"groups": [{"name": "linked", "url": link, "target": case[5]}]})
        check(out["linked"], case, root)
        assert "/s/…/0/" in server.log_tail(3000)
    finally:
        server.stop()
