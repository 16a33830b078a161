"""Pyramids built by zarrd open in ome-zarr-py (PyPI `ome-zarr`), the OME-NGFF reference reader,
from the store URL a user would give it (`http://.../zarr/{mount}/{group}`, over HTTP).

zarrd builds OME-Zarr multiscale groups (`POST /api/v1/pyramids/...`): from a v3 source
(plain and sharded) OME-Zarr 0.5, from a v2 source 0.4. ome-zarr-py's `Reader` finds one image
node with the right number of levels, the axes (names and types), one `scale` transformation
per level (the cumulative factors), recognises the format version, and reads every level
(dask arrays) equal to TensorStore's `ts.downsample` of level 0 by the cumulative factors with
the pyramid's method.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorstore as ts
from ome_zarr.format import FormatV04, FormatV05
from ome_zarr.io import parse_url
from ome_zarr.reader import Multiscales, Reader

from test_pyramid import build_pyramid, make_source, open_level
from zarrd_harness import start_zarrd

# (source, body, zarr version, ome-zarr-py format, axes, expected levels)
CASES = [
    ("vol", {"method": "mean", "factors": [1, 2, 2]}, 3, FormatV05, ["z", "y", "x"], 4),
    ("labels", {"method": "mode", "levels": 3}, 3, FormatV05, ["z", "y", "x"], 3),
    ("plane", {"method": "min"}, 2, FormatV04, ["y", "x"], 5),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("pyramid-ome")
    make_source(root, "vol", "float32", (12, 150, 200), [4, 32, 32])
    make_source(root, "labels", "uint8", (16, 64, 96), [4, 16, 16], shard=[8, 32, 32])
    make_source(root, "plane", "int16", (90, 130), [16, 16], version=2, fill=3)
    logs = tmp_path_factory.mktemp("pyramid-ome-logs")
    server = start_zarrd({"p": root.as_uri()}, log_path=logs / "zarrd.log")
    for source, body, *_ in CASES:
        build_pyramid(server, "p", source, body)
    yield server, root
    server.stop()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_ome_zarr_py_opens_zarrd_pyramids_over_http(built, case):
    server, root = built
    source, body, zarr_version, fmt, axes, n_levels = case
    url = f"{server.url}/zarr/p/{source}_pyramid"
    location = parse_url(url, mode="r", fmt=fmt())
    assert location is not None, f"ome-zarr-py found no Zarr group at {url}"
    assert location.exists()
    assert type(location.fmt) is fmt, location.fmt
    assert location.version == fmt().version
    nodes = list(Reader(location)())
    assert nodes, "ome-zarr-py read no node"
    image = nodes[0]
    assert any(isinstance(spec, Multiscales) for spec in image.specs), image.specs
    meta = image.metadata
    assert [a["name"] for a in meta["axes"]] == axes
    assert [a["type"] for a in meta["axes"]] == ["space"] * len(axes)
    assert len(image.data) == n_levels
    transforms = meta["coordinateTransformations"]
    assert len(transforms) == n_levels

    factors = body.get("factors", [2] * len(axes))
    level0 = open_level(root, f"{source}_pyramid", 0, zarr_version)
    for k, (data, transform) in enumerate(zip(image.data, transforms)):
        scale = [f**k for f in factors]
        assert transform == [{"type": "scale", "scale": [float(s) for s in scale]}], (k, transform)
        expected = ts.downsample(level0, scale, body["method"]).read().result()
        got = np.asarray(data.compute())
        assert got.shape == expected.shape and got.dtype == expected.dtype, (k, got.shape, got.dtype)
        np.testing.assert_array_equal(got, expected, err_msg=f"{source} level {k}")
    # It read over HTTP from zarrd, chunks included.
    assert f'path="/zarr/p/{source}_pyramid/{n_levels - 1}/' in server.log_tail(5000)
    # Without `levels`, the pyramid goes down to one chunk along every downsampled dimension.
    if "levels" not in body:
        chunk = level0.chunk_layout.read_chunk.shape
        coarsest = image.data[-1].shape
        assert all(n <= c for n, c, f in zip(coarsest, chunk, factors) if f > 1), (coarsest, chunk)
