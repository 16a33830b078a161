"""Rendered images: `format=png` on the slice endpoint and the preview endpoint.

Arrays are written with zarr-python (v3, and v2 big-endian) into a directory one zarrd
serves; every PNG is decoded with PIL and compared pixel for pixel with a numpy rendering
of the same selection by the documented formula:

    v -> round(255 * clip((v - lo) / (hi - lo), 0, 1))    (numpy's round: half to even)

with `lo, hi` from `rescale=` or else numpy's 2nd and 98th percentiles of the finite values
(the full range for bool and uint8), NaN (and with `transparent_fill=true` the fill value)
transparent, and colormaps compared with matplotlib's tables of the same name (within 1 of
255). The preview is compared with its documented reduction: the last two dimensions at the
middle index of the others, every s-th row and column, s = ceil(max(rows, cols) / size).
"""

from __future__ import annotations

import io
import math
import urllib.parse

import matplotlib
import numpy as np
import pytest
import requests
import zarr
from PIL import Image

from zarrd_harness import start_zarrd

MAX_PIXELS = 100_000
# Largest difference (of 255) from matplotlib's table: viridis, magma, inferno and plasma are
# matplotlib's own 256 entries; cividis and turbo are d3-scale-chromatic's polynomial fits
# (the colorous crate), which no permissively licensed crate yet replaces (see the README).
COLORMAPS = {"viridis": 1, "magma": 1, "inferno": 1, "plasma": 1, "cividis": 18, "turbo": 32}


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    root = tmp_path_factory.mktemp("render")
    rng = np.random.default_rng(15)
    data = {}

    f = rng.normal(100.0, 30.0, size=(64, 96)).astype("float32")
    f[rng.random(f.shape) < 0.05] = np.nan
    f[0, 0] = np.inf
    f[0, 1] = -np.inf
    data["f32"] = f
    a = zarr.create_array(root / "f32", shape=f.shape, chunks=(32, 32), dtype="float32", fill_value=np.nan)
    a[...] = f

    i = rng.integers(-3000, 3000, size=(50, 70), dtype="int16")
    i[10:20, 10:20] = -7
    data["i16"] = i
    a = zarr.create_array(root / "i16", shape=i.shape, chunks=(16, 16), dtype="int16", fill_value=-7)
    a[...] = i

    be = rng.normal(0.0, 1.0, size=(40, 30)).astype(">f8")
    data["be_f8"] = be
    a = zarr.create_array(root / "be_f8", shape=be.shape, chunks=(16, 16), dtype=">f8", zarr_format=2)
    a[...] = be
    bi = rng.integers(-(2**30), 2**30, size=(33, 17), dtype="int32").astype(">i4")
    data["be_i4"] = bi
    a = zarr.create_array(root / "be_i4", shape=bi.shape, chunks=(8, 8), dtype=">i4", zarr_format=2)
    a[...] = bi

    grad = np.arange(256, dtype="uint8").reshape(1, 256)
    data["grad"] = grad
    zarr.create_array(root / "grad", shape=grad.shape, chunks=(1, 256), dtype="uint8")[...] = grad

    rgb = rng.integers(0, 256, size=(20, 30, 3), dtype="uint8")
    data["rgb"] = rgb
    zarr.create_array(root / "rgb", shape=rgb.shape, chunks=(10, 10, 3), dtype="uint8")[...] = rgb

    b = rng.random((12, 13)) < 0.5
    data["bool"] = b
    zarr.create_array(root / "bool", shape=b.shape, chunks=(12, 13), dtype="bool")[...] = b

    cube = rng.normal(0.0, 1.0, size=(5, 300, 200)).astype("float32")
    data["cube"] = cube
    zarr.create_array(root / "cube", shape=cube.shape, chunks=(1, 100, 100), dtype="float32")[...] = cube

    big = np.zeros((400, 300), dtype="uint8")
    zarr.create_array(root / "big", shape=big.shape, chunks=(100, 100), dtype="uint8")[...] = big
    zarr.create_array(root / "line", shape=(10,), chunks=(10,), dtype="float32")[...] = np.arange(10)
    zarr.create_array(root / "cplx", shape=(4, 4), chunks=(4, 4), dtype="complex64")
    return root, data


@pytest.fixture(scope="module")
def server(arrays, tmp_path_factory):
    root, _ = arrays
    logs = tmp_path_factory.mktemp("render-logs")
    s = start_zarrd(
        {"data": root.as_uri()},
        log_path=logs / "zarrd.log",
        env={"ZARRD_LIMITS__MAX_IMAGE_PIXELS": str(MAX_PIXELS)},
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def http():
    with requests.Session() as s:
        yield s


def get_png(http, server, path, headers=None, **query):
    url = f"{server.url}/api/v1/data/data/{path}?{urllib.parse.urlencode(query)}"
    r = http.get(url, headers=headers or {}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    return np.asarray(Image.open(io.BytesIO(r.content)).convert("RGBA"))


def scaled(v, lo, hi):
    v = np.asarray(v, dtype="float64")
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.clip((v - lo) / (hi - lo), 0.0, 1.0)
    return np.round(255.0 * np.nan_to_num(t, nan=0.0)).astype("uint8")


def default_range(v):
    finite = np.asarray(v, dtype="float64")[np.isfinite(v)]
    lo, hi = np.percentile(finite, [2, 98])
    return lo, hi


def gray_rgba(idx, transparent):
    out = np.empty(idx.shape + (4,), dtype="uint8")
    out[..., 0] = out[..., 1] = out[..., 2] = idx
    out[..., 3] = 255
    out[transparent] = 0
    return out


def cmap_table(name):
    return np.round(matplotlib.colormaps[name](np.arange(256))[:, :3] * 255).astype("int16")


def test_float_with_nan_gray_by_percentiles(http, server, arrays):
    _, data = arrays
    f = data["f32"][5:60, 3:90]
    img = get_png(http, server, "f32", sel="5:60,3:90", format="png")
    lo, hi = default_range(f)
    expect = gray_rgba(scaled(f, lo, hi), np.isnan(f))
    assert img.shape == (55, 87, 4)
    np.testing.assert_array_equal(img, expect)
    assert (img[..., 3] == 0).sum() == np.isnan(f).sum() > 0
    # +inf and -inf clamp to white and black.
    full = get_png(http, server, "f32", format="png")
    assert tuple(full[0, 0]) == (255, 255, 255, 255)
    assert tuple(full[0, 1]) == (0, 0, 0, 255)


def test_integer_with_a_colormap_against_matplotlib(http, server, arrays):
    _, data = arrays
    i = data["i16"]
    img = get_png(http, server, "i16", format="png", colormap="viridis", rescale="-2000,2500")
    table = cmap_table("viridis")
    expect = table[scaled(i, -2000.0, 2500.0)]
    assert img.shape == (50, 70, 4)
    assert np.abs(img[..., :3].astype("int16") - expect).max() <= 1
    assert (img[..., 3] == 255).all()
    # Percentiles, and the fill value transparent on request.
    img = get_png(http, server, "i16", format="png", colormap="magma", transparent_fill="true")
    lo, hi = default_range(i)
    expect = cmap_table("magma")[scaled(i, lo, hi)]
    fill = i == -7
    assert (img[..., 3][fill] == 0).all() and (img[..., 3][~fill] == 255).all()
    assert np.abs(img[..., :3][~fill].astype("int16") - expect[~fill]).max() <= 1


def test_every_colormap_is_matplotlibs(http, server):
    # A uint8 gradient 0..255 renders at its full range: pixel k is table entry k.
    for name, bound in COLORMAPS.items():
        img = get_png(http, server, "grad", format="png", colormap=name)
        diff = np.abs(img[0, :, :3].astype("int16") - cmap_table(name))
        assert diff.max() <= bound, (name, int(diff.max()), int(diff.argmax()))
    gray = get_png(http, server, "grad", format="png")
    np.testing.assert_array_equal(gray[0, :, 0], np.arange(256))


@pytest.mark.parametrize("name", ["be_f8", "be_i4"])
def test_big_endian_v2(http, server, arrays, name):
    _, data = arrays
    v = data[name]
    img = get_png(http, server, name, format="png", sel="1:30:2,::-1")
    sel = v[1:30:2, ::-1]
    lo, hi = default_range(sel)
    np.testing.assert_array_equal(img, gray_rgba(scaled(sel, lo, hi), np.zeros(sel.shape, bool)))
    img = get_png(http, server, name, format="png", rescale="0,1e3")
    np.testing.assert_array_equal(img[..., 0], scaled(v, 0.0, 1000.0))


def test_rgb_bool_and_accept(http, server, arrays):
    _, data = arrays
    rgb = data["rgb"]
    img = get_png(http, server, "rgb", format="png")
    np.testing.assert_array_equal(img[..., :3], rgb)
    # Channels first: the same pixels from a (3, rows, cols) selection of a transposed read
    # is not possible by selection, so check the size-1 squeeze instead: one row kept as 1 x W x 3.
    img = get_png(http, server, "rgb", format="png", sel="4:5")
    np.testing.assert_array_equal(img[..., :3], rgb[4:5])
    # Its preview is the picture in colour (rows x columns x channels), not a 30 x 3 strip.
    r = http.get(f"{server.url}/api/v1/preview/data/rgb?size=15", timeout=30)
    assert r.status_code == 200 and r.headers["x-zarr-selection"] == "::2,::2,:", r.text
    preview = np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"))
    np.testing.assert_array_equal(preview, rgb[::2, ::2])
    b = data["bool"]
    img = get_png(http, server, "bool", format="png")
    np.testing.assert_array_equal(img[..., 0], np.where(b, 255, 0))
    # Accept: image/png, and a browser's <img> Accept, choose PNG without format=.
    img = get_png(http, server, "bool", headers={"Accept": "image/png"})
    np.testing.assert_array_equal(img[..., 0], np.where(b, 255, 0))
    get_png(http, server, "bool", headers={"Accept": "image/avif,image/webp,image/*,*/*;q=0.8"})
    # Accept of another image type only: 406 naming it.
    r = http.get(f"{server.url}/api/v1/data/data/bool", headers={"Accept": "image/jpeg"}, timeout=30)
    assert r.status_code == 406 and r.json()["error"]["code"] == "not_acceptable", r.text
    assert "image/jpeg" in r.json()["error"]["message"]
    r = http.get(f"{server.url}/api/v1/data/data/bool", headers={"Accept": "image/jpeg, application/json"}, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    "path,query,status,code,needle",
    [
        ("line", {"format": "png"}, 400, "unsupported_format", "not an image"),
        ("cube", {"format": "png", "sel": "0:2"}, 400, "unsupported_format", "not an image"),
        ("cplx", {"format": "png"}, 400, "unsupported_format", "complex64"),
        ("rgb", {"format": "png", "colormap": "viridis"}, 400, "unsupported_format", "channels"),
        ("f32", {"format": "png", "colormap": "jet"}, 400, "invalid_query", "jet"),
        ("f32", {"format": "png", "rescale": "1"}, 400, "invalid_query", "rescale"),
        ("f32", {"format": "png", "rescale": "nan,1"}, 400, "invalid_query", "rescale"),
        ("f32", {"rescale": "0,1"}, 400, "unsupported_format", "rescale"),
        ("f32", {"format": "raw", "colormap": "gray"}, 400, "unsupported_format", "colormap"),
        ("big", {"format": "png"}, 413, "selection_too_large", "max_image_pixels"),
        ("f32", {"format": "PNG", "field": "x"}, 400, "unsupported_format", "field"),
    ],
)
def test_refusals_name_the_problem(http, server, path, query, status, code, needle):
    r = http.get(f"{server.url}/api/v1/data/data/{path}?{urllib.parse.urlencode(query)}", timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and needle in err["message"], err


def test_preview_is_its_documented_reduction_cached_and_tagged(http, server, arrays):
    root, data = arrays
    cube = data["cube"]
    url = f"{server.url}/api/v1/preview/data/cube?size=64&colormap=plasma"
    r = http.get(url, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    step = math.ceil(max(300, 200) / 64)
    assert r.headers["x-zarr-selection"] == f"2,::{step},::{step}"
    img = np.asarray(Image.open(io.BytesIO(r.content)).convert("RGBA"))
    plane = cube[2, ::step, ::step]
    assert img.shape[:2] == plane.shape == (60, 40)
    lo, hi = default_range(plane)
    expect = cmap_table("plasma")[scaled(plane, lo, hi)]
    assert np.abs(img[..., :3].astype("int16") - expect).max() <= 1
    # The same as the slice read it names.
    same = get_png(http, server, "cube", sel=r.headers["x-zarr-selection"], format="png", colormap="plasma")
    np.testing.assert_array_equal(img, same)
    etag = r.headers["etag"]
    assert etag.startswith('"') and etag.endswith('"')
    again = http.get(url, timeout=30)
    assert again.headers["etag"] == etag and again.content == r.content
    r304 = http.get(url, headers={"If-None-Match": etag}, timeout=30)
    assert r304.status_code == 304 and r304.content == b""
    # Weak comparison, as RFC 9110 asks of If-None-Match (and the store protocol does).
    weak = http.get(url, headers={"If-None-Match": f'"other", W/{etag}'}, timeout=30)
    assert weak.status_code == 304, weak.status_code
    # Default size 256: the largest side at most 256 (300 rows, stride 2).
    d = http.get(f"{server.url}/api/v1/preview/data/cube", timeout=30)
    assert Image.open(io.BytesIO(d.content)).size == (100, 150)

    # A write through zarrd changes the preview and its tag.
    body = np.full((300, 200), 50.0, dtype="<f4")
    w = http.put(
        f"{server.url}/api/v1/data/data/cube?sel=2",
        data=body.tobytes(),
        headers={"Content-Type": "application/octet-stream"},
        timeout=30,
    )
    assert w.status_code in (200, 204), w.text
    changed = http.get(url, headers={"If-None-Match": etag}, timeout=30)
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    # ...and so does a write by another program (a local mount rechecks by default).
    zarr.open_array(root / "cube", mode="r+")[2, :, :] = cube[2]
    back = http.get(url, timeout=30)
    assert back.headers["etag"] == etag and back.content == r.content


def test_preview_refusals(http, server):
    for path, query, status, needle in [
        ("cube", "size=0", 400, "size"),
        ("cube", "size=5000", 400, "size"),
        ("cube", "colormap=rainbow", 400, "rainbow"),
        ("line", "", 400, "two or more dimensions"),
        ("nothing", "", 404, "nothing"),
    ]:
        r = http.get(f"{server.url}/api/v1/preview/data/{path}?{query}", timeout=30)
        assert r.status_code == status, (path, query, r.text)
        assert needle in r.json()["error"]["message"], r.text
