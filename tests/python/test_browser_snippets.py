"""The array page's snippets are code people paste and run: a node name chosen by
whoever wrote the data (quotes, brackets, `;`, a newline-free Python statement)
and a `Host` header chosen by the client must stay data inside them.

Each snippet is parsed with Python's own parser: it must be exactly the
statements the page promises (an import and one assignment) with the names and
URLs as string constants, and those URLs must lead to the array.
"""

from __future__ import annotations

import ast
import html
import urllib.parse

import numpy as np
import pytest
import requests
import zarr

from test_browser import Dom
from zarrd_harness import start_zarrd

HOSTILE = 'x"]; __import__("os").system("echo PWNED > pwned.txt"); _ = da["x'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("snippets")
    zarr.open_group(root / "grp", mode="w", zarr_format=3)
    a = zarr.create_array(root / "grp" / HOSTILE, shape=(4, 4), chunks=(2, 2), dtype="i4", zarr_format=3)
    a[:] = np.arange(16, dtype="i4").reshape(4, 4)
    logs = tmp_path_factory.mktemp("logs")
    s = start_zarrd({"data": root.as_uri()}, log_path=logs / "zarrd.log")
    yield s
    s.stop()


def _snippets(server, headers=None) -> dict[str, ast.Module]:
    url = f"{server.url}/browse/data/grp/{urllib.parse.quote(HOSTILE, safe='')}"
    r = requests.get(url, headers=headers or {}, timeout=30)
    assert r.status_code == 200, r.text
    dom = Dom(r.text)
    return {k: ast.parse(html.unescape(dom.ids[f"snippet-{k}"])) for k in ("zarr", "tensorstore", "xarray")}


def _only_import_and_assignment(tree: ast.Module) -> ast.expr:
    kinds = [type(s).__name__ for s in tree.body]
    assert kinds == ["Import", "Assign"], f"{kinds}: {ast.dump(tree)}"
    return tree.body[1].value


def test_a_hostile_name_stays_a_string_in_every_snippet(server):
    snips = _snippets(server)
    xarray = _only_import_and_assignment(snips["xarray"])
    assert isinstance(xarray, ast.Subscript), ast.dump(xarray)
    assert isinstance(xarray.slice, ast.Constant) and xarray.slice.value == HOSTILE
    parent = xarray.value.args[0]
    assert isinstance(parent, ast.Constant) and parent.value == f"{server.url}/zarr/data/grp"

    store = _only_import_and_assignment(snips["zarr"]).args[0]
    assert isinstance(store, ast.Constant)
    # The URL in the snippet leads to the array (its name percent-encoded).
    doc = requests.get(store.value + "/zarr.json", timeout=30)
    assert doc.status_code == 200 and doc.json()["shape"] == [4, 4], store.value

    spec = _only_import_and_assignment(snips["tensorstore"]).func.value.args[0]
    spec = ast.literal_eval(spec)
    assert spec == {"driver": "zarr3", "kvstore": store.value + "/"}


def test_a_hostile_host_header_does_not_reach_the_snippets(server):
    for host in ['evil"); import os; ("', "a b", "x'y"]:
        snips = _snippets(server, headers={"Host": host})
        store = _only_import_and_assignment(snips["zarr"]).args[0]
        assert isinstance(store, ast.Constant) and store.value.startswith("http://127.0.0.1/zarr/data/grp/"), store.value
