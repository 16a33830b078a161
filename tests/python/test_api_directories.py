"""Plain directories through `/api/v1/nodes`, as curl (plain HTTP) sees them.

A directory mount holds arrays and groups written by zarr-python inside folders that are no
Zarr groups, plain files, and a folder of 250 files. The mount's root and every plain folder
are described (`node_type` `directory`) with their children classified as zarr-python wrote
them; the children come a page at a time, and walking the pages gives every entry once, in
order; a chunk folder inside an array is no node (404); the browser page of the same folder
still lists it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import requests
import zarr

from zarrd_harness import start_zarrd

FILES = 250


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("dirs")
    a = zarr.create_array(str(root / "plain" / "a"), shape=(6, 8), chunks=(3, 4), dtype="int16", zarr_format=3)
    a[:] = np.arange(48, dtype="int16").reshape(6, 8)
    zarr.open_group(str(root / "plain" / "b"), mode="w", zarr_format=2)
    # zarr-python makes no parent groups here: `plain` and the root stay plain folders.
    assert not (root / "plain" / "zarr.json").exists() and not (root / "zarr.json").exists()
    (root / "docs").mkdir()
    (root / "docs" / "readme.txt").write_bytes(b"x" * 17)
    many = root / "many"
    many.mkdir()
    for i in range(FILES):
        (many / f"f{i:03d}").write_bytes(b"")
    return root


@pytest.fixture(scope="module")
def server(tree, tmp_path_factory):
    srv = start_zarrd({"m": str(tree)}, log_path=tmp_path_factory.mktemp("logs") / "zarrd.log")
    yield srv
    srv.stop()


def get(server, path: str, **params) -> requests.Response:
    return requests.get(f"{server.url}{path}", params=params, timeout=30)


def test_root_and_plain_folders_are_directories(server):
    r = get(server, "/api/v1/nodes/m")
    assert r.status_code == 200, r.text
    root = r.json()
    assert (root["node_type"], root["path"], root["children_total"]) == ("directory", "", 3)
    assert [(c["name"], c["node_type"]) for c in root["children"]] == [
        ("docs", "directory"),
        ("many", "directory"),
        ("plain", "directory"),
    ]
    plain = get(server, "/api/v1/nodes/m/plain").json()
    assert plain["node_type"] == "directory"
    assert plain["children"] == [
        {"name": "a", "path": "plain/a", "node_type": "array", "zarr_format": 3, "shape": [6, 8], "data_type": "int16"},
        {"name": "b", "path": "plain/b", "node_type": "group", "zarr_format": 2},
    ]
    docs = get(server, "/api/v1/nodes/m/docs").json()
    assert docs["children"] == [{"name": "readme.txt", "path": "docs/readme.txt", "node_type": "file", "size": 17}]
    # The array and the group are described as nodes, as before.
    assert get(server, "/api/v1/nodes/m/plain/a").json()["shape"] == [6, 8]
    assert get(server, "/api/v1/nodes/m/plain/b").json()["node_type"] == "group"


def test_pages_cover_every_entry_once(server):
    names = []
    for page in range(FILES // 40 + 2):  # bounded: one page past the last
        j = get(server, "/api/v1/nodes/m/many", page=page, per_page=40).json()
        assert (j["children_total"], j["per_page"], j["page"]) == (FILES, 40, page)
        if not j["children"]:
            break
        assert len(j["children"]) <= 40
        names += [c["name"] for c in j["children"]]
    assert names == [f"f{i:03d}" for i in range(FILES)]
    r = get(server, "/api/v1/nodes/m/many", per_page=1001)
    assert r.status_code == 400 and "per_page" in r.json()["error"]["message"]


def test_chunk_folders_and_missing_paths_are_not_nodes(server):
    for path in ("plain/a/c", "plain/a/c/0", "nothing", "docs/readme.txt"):
        r = get(server, f"/api/v1/nodes/m/{path}")
        assert r.status_code == 404, (path, r.text)
        assert r.json()["error"]["code"] == "node_not_found"


def test_browser_page_of_a_plain_folder(server):
    r = get(server, "/browse/m/plain/")
    assert r.status_code == 200
    assert "directory" in r.text and 'href="/browse/m/plain/a"' in r.text and "int16" in r.text
