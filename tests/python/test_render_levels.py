"""Levels where they help: previews and `format=png&size=` of an OME-Zarr multiscale group.

zarr-python writes a 4 × 300 × 200 float32 volume (v3 with dimension names, and v2); zarrd
builds its pyramid (`POST /api/v1/pyramids`, mean, factor 2 on every space axis: levels
4×300×200, 2×150×100, 1×75×50, 1×38×25). The group's preview and a PNG of the group with
`size=` name the level they read (`X-Zarr-Level`, the coarsest that still gives `size`
pixels), and their pixels equal a numpy rendering of that level's stored data (read by
zarr-python) reduced as documented: the preview's plane strided, the PNG's box of level-0
elements mapped to the level and strided.
"""

from __future__ import annotations

import io
import math
import time
import urllib.parse

import matplotlib
import numpy as np
import pytest
import requests
import zarr
from PIL import Image

from zarrd_harness import start_zarrd

SHAPE = (4, 300, 200)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("levels")


@pytest.fixture(scope="module")
def server(root, tmp_path_factory):
    srv = start_zarrd({"data": str(root)}, log_path=tmp_path_factory.mktemp("logs") / "zarrd.log")
    yield srv
    srv.stop()


def build(server, root, fmt: int) -> tuple[str, np.ndarray]:
    name = f"vol{fmt}"
    rng = np.random.default_rng(fmt)
    data = (rng.random(SHAPE, dtype="float32") * 1000).astype("float32")
    kw = {"dimension_names": ["z", "y", "x"]} if fmt == 3 else {}
    a = zarr.create_array(str(root / name), shape=SHAPE, chunks=(2, 64, 64), dtype="float32", zarr_format=fmt, **kw)
    a[:] = data
    r = requests.post(f"{server.url}/api/v1/pyramids/data/{name}", json={"method": "mean"}, timeout=30)
    assert r.status_code == 202, r.text
    job = r.headers["location"]
    for _ in range(600):  # bounded: 60 s
        st = requests.get(f"{server.url}{job}", timeout=30).json()
        if st["state"] != "running":
            break
        time.sleep(0.1)
    assert st["state"] == "completed", st
    return f"{name}_pyramid", data


def level(root, group: str, k: int) -> np.ndarray:
    return zarr.open_array(str(root / group / str(k)), mode="r")[...]


def png(r) -> np.ndarray:
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "image/png"
    return np.asarray(Image.open(io.BytesIO(r.content)).convert("RGBA"))


def rendered(values: np.ndarray, cmap: str) -> np.ndarray:
    v = values.astype("float64")
    lo, hi = np.percentile(v[np.isfinite(v)], [2, 98])
    idx = np.round(255.0 * np.clip((v - lo) / (hi - lo), 0.0, 1.0)).astype("uint8")
    return np.round(matplotlib.colormaps[cmap](np.arange(256))[:, :3] * 255).astype("int16")[idx]


def block_mean(data: np.ndarray, f: int) -> np.ndarray:
    """TensorStore's mean downsampling by f on every axis (partial blocks over what they hold)."""
    out = data.astype("float64")
    for axis in range(out.ndim):
        n = out.shape[axis]
        pad = (-n) % f
        counts = np.ones(n)
        if pad:
            width = [(0, 0)] * out.ndim
            width[axis] = (0, pad)
            out = np.pad(out, width)
            counts = np.pad(counts, (0, pad))
        shape = out.shape[:axis] + (out.shape[axis] // f, f) + out.shape[axis + 1 :]
        c = counts.reshape(-1, f).sum(axis=1)
        out = out.reshape(shape).sum(axis=axis + 1) / c.reshape([-1 if i == axis else 1 for i in range(out.ndim)])
    return out


@pytest.mark.parametrize("fmt", [3, 2])
def test_group_preview_reads_the_coarsest_level_that_gives_the_size(server, root, fmt):
    group, data = build(server, root, fmt)
    # The stored levels are the documented reductions of the source.
    for k, f in [(1, 2), (2, 4), (3, 8)]:
        np.testing.assert_allclose(level(root, group, k), block_mean(data, f), rtol=1e-5)
    for size, k in [(64, 2), (75, 2), (76, 1), (150, 1), (151, 0), (38, 3), (10, 3)]:
        r = requests.get(f"{server.url}/api/v1/preview/data/{group}", params={"size": size, "colormap": "viridis"}, timeout=30)
        img = png(r)
        assert r.headers["x-zarr-level"] == str(k), (size, r.headers)
        lv = level(root, group, k)
        step = math.ceil(max(lv.shape[1:]) / size)
        assert r.headers["x-zarr-selection"] == f"{lv.shape[0] // 2},::{step},::{step}"
        plane = lv[lv.shape[0] // 2, ::step, ::step]
        assert img.shape[:2] == plane.shape and max(plane.shape) <= size
        assert np.abs(img[..., :3].astype("int16") - rendered(plane, "viridis")).max() <= 1, size


@pytest.mark.parametrize("fmt", [3])
def test_group_png_with_size_maps_the_selection_to_the_level(server, root, fmt):
    group = f"vol{fmt}_pyramid"
    if not (root / group).exists():
        build(server, root, fmt)
    # (level-0 selection, size) -> level, and the level's box [a, b) per dimension
    cases = [
        ("1,0:300,0:200", 80, 1, (0, (0, 150), (0, 100))),
        ("1,0:300,0:200", 40, 2, (0, (0, 75), (0, 50))),
        ("3,100:180,20:60", 20, 2, (0, (25, 45), (5, 15))),
        ("3,100:180,20:60", 21, 1, (1, (50, 90), (10, 30))),
        ("2,7:9,0:200", 25, 3, (0, (0, 2), (0, 25))),
    ]
    for sel, size, k, (i, (r0, r1), (c0, c1)) in cases:
        q = urllib.parse.urlencode({"sel": sel, "format": "png", "size": size, "colormap": "magma"})
        r = requests.get(f"{server.url}/api/v1/data/data/{group}?{q}", timeout=30)
        img = png(r)
        assert r.headers["x-zarr-level"] == str(k), (sel, size, r.headers)
        step = max(1, math.ceil(max(r1 - r0, c1 - c0) / size))
        box = level(root, group, k)[i, r0:r1:step, c0:c1:step]
        assert img.shape[:2] == box.shape and max(box.shape) <= size, (sel, size)
        assert np.abs(img[..., :3].astype("int16") - rendered(box, "magma")).max() <= 1, (sel, size)
