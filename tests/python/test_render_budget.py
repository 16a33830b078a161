"""Rendered images take their memory from one budget (`limits.render_budget_bytes`).

Found by review: a 4096²×4 float64 PNG took 1.87 GB for one request (the README said 32
bytes a pixel) and 16 of them at once 6.8 GB. Now each image counts
`values × (4 × element size + 12) + pixels × 8` bytes against the shared budget before it
gathers its selection (beyond the read's first slab): more than all of it is 413 naming the
limit, and images that fit wait for their share.
"""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest
import requests
import zarr

from zarrd_harness import start_zarrd

MIB = 1 << 20
BUDGET = 64 * MIB


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("render-budget")
    a = zarr.create_array(root / "img", shape=(1024, 1024), chunks=(256, 256), dtype="f8", zarr_format=3)
    a[:] = np.random.default_rng(1).random((1024, 1024))
    zarr.create_array(root / "tall", shape=(2048, 1024), chunks=(256, 256), dtype="f8", zarr_format=3)
    logs = tmp_path_factory.mktemp("render-budget-logs")
    s = start_zarrd({"a": root.as_uri()}, log_path=logs / "zarrd.log",
                    env={"ZARRD_LIMITS__RENDER_BUDGET_BYTES": str(BUDGET),
                         # Slabs of 1 MiB: a request waiting for its share holds one slab,
                         # not its whole selection.
                         "ZARRD_LIMITS__READ_SLAB_BYTES": str(MIB)})
    yield s
    s.stop()


def need(pixels: int, channels: int, es: int) -> int:
    return pixels * channels * (4 * es + 12) + pixels * 8


def test_an_image_over_the_budget_is_413_naming_it(server):
    assert need(2048 * 1024, 1, 8) > BUDGET
    r = requests.get(f"{server.url}/api/v1/data/a/img?format=png&sel=0:1024,0:1024&rescale=0,1", timeout=60)
    assert need(1024 * 1024, 1, 8) <= BUDGET and r.status_code == 200, r.text
    r = requests.get(f"{server.url}/api/v1/data/a/tall?format=png&rescale=0,1", timeout=60)
    assert r.status_code == 413 and "render_budget_bytes" in r.json()["error"]["message"], r.text


def test_concurrent_renders_wait_for_their_share(server):
    url = f"{server.url}/api/v1/data/a/img?format=png&sel=0:1024,0:1024"
    # Each needs 52 MiB of the 64 MiB budget: they render one at a time, none is refused.
    assert BUDGET // 2 < need(1024 * 1024, 1, 8) <= BUDGET
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda _: requests.get(url, timeout=120), range(12)))
    assert all(r.status_code == 200 for r in answers), [r.status_code for r in answers]
    assert len({r.content for r in answers}) == 1


def test_the_reviewed_image_is_refused_before_gathering_by_default(tmp_path):
    # 4096 x 4096 RGBA float64, nothing stored: 1.87 GB for one request before; now it
    # counts 3.1 GB, more than the default 2 GiB budget, and is refused at once.
    zarr.create_array(tmp_path / "rgba", shape=(4096, 4096, 4), chunks=(1024, 1024, 4), dtype="f8",
                      zarr_format=3)
    s = start_zarrd({"b": tmp_path.as_uri()}, log_path=tmp_path / "zarrd.log")
    try:
        s.reset_peak_rss()
        idle = s.rss_kib() * 1024
        r = requests.get(f"{s.url}/api/v1/data/b/rgba?format=png", timeout=60)
        assert r.status_code == 413 and "render_budget_bytes" in r.json()["error"]["message"], r.text
        assert s.peak_rss_kib() * 1024 - idle < 256 * MIB
    finally:
        s.stop()
