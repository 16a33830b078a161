"""The dataset browser in a real browser: headless Chromium (Debian's package; scripts/test-all
installs it when missing) opens `/`, walks by the links it finds to a mount, an OME-Zarr group
and an array, and the test checks the rendered DOM (`--dump-dom`) and a screenshot's size.

Also: values from stored documents are escaped (an attribute holding a script and an array
named with `<`, `"` and `'` render as text and run nothing); plain directories and files are
listed; a group's children come a page at a time; and with tokens configured, `/` lists what
each caller may read with its scope (anonymous, a read token, an admin token) and a place in
a mount needs `read` on it.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import struct
import subprocess
import tempfile
import urllib.parse
from html.parser import HTMLParser

import numpy as np
import pytest
import requests
import zarr

from zarrd_harness import start_zarrd

CHROMIUM = os.environ.get("ZARRD_TEST_CHROMIUM") or shutil.which("chromium") or "chromium"
CHROMIUM_TIMEOUT_S = 90
EVIL = "evil<b>\"'&"
SCRIPT_ATTR = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"
ADMIN_TOKEN = secrets.token_hex(32)
READ_TOKEN = secrets.token_hex(32)


def chromium(url: str, *extra: str) -> str:
    with tempfile.TemporaryDirectory(prefix="zarrd-chromium-") as profile:
        args = [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            *extra,
            url,
        ]
        r = subprocess.run(args, capture_output=True, timeout=CHROMIUM_TIMEOUT_S, check=False)
        assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
        return r.stdout.decode()


class Dom(HTMLParser):
    """Links (href -> text), element ids (id -> text) and every tag seen."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.links: dict[str, str] = {}
        self.ids: dict[str, str] = {}
        self.tags: list[tuple[str, dict]] = []
        self._open: list[tuple[str | None, str | None, list[str]]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag in ("img", "meta", "br", "link", "input"):
            return
        self._open.append((a.get("href") if tag == "a" else None, a.get("id"), []))

    def handle_data(self, data):
        for _, _, text in self._open:
            text.append(data)

    def handle_endtag(self, tag):
        if tag in ("img", "meta", "br", "link", "input") or not self._open:
            return
        href, ident, text = self._open.pop()
        if href is not None:
            self.links[href] = "".join(text)
        if ident is not None:
            self.ids[ident] = "".join(text)


def link_to(dom: Dom, text: str) -> str:
    for href, t in dom.links.items():
        if t.strip().rstrip("/") == text:
            return href
    raise AssertionError(f"no link `{text}` in {dom.links}")


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("browse")
    g = zarr.open_group(root / "images" / "cells.ome.zarr", mode="w")
    g.attrs["ome"] = {
        "version": "0.5",
        "multiscales": [
            {
                "name": "cells",
                "axes": [
                    {"name": "c", "type": "channel"},
                    {"name": "y", "type": "space", "unit": "micrometer"},
                    {"name": "x", "type": "space", "unit": "micrometer"},
                ],
                "datasets": [
                    {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 0.5, 0.5]}]},
                    {"path": "1", "coordinateTransformations": [{"type": "scale", "scale": [1, 1.0, 1.0]}]},
                ],
            }
        ],
    }
    rng = np.random.default_rng(3)
    for level, side in (("0", 128), ("1", 64)):
        a = g.create_array(level, shape=(2, side, side), chunks=(1, 32, 32), dtype="uint16")
        a[...] = rng.integers(0, 4000, size=(2, side, side), dtype="uint16")
    plain = root / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("not zarr")
    e = zarr.create_array(plain / EVIL, shape=(6, 7), chunks=(3, 7), dtype="float64", attributes={"x": SCRIPT_ATTR})
    e[...] = np.arange(42.0).reshape(6, 7)
    many = zarr.open_group(root / "many", mode="w")
    for i in range(150):
        many.create_group(f"g{i:03d}")
    (root / "other").mkdir()
    zarr.create_array(root / "other" / "x", shape=(4, 4), chunks=(4, 4), dtype="int8")[...] = 1
    return root


@pytest.fixture(scope="module")
def server(tree, tmp_path_factory):
    logs = tmp_path_factory.mktemp("browse-logs")
    s = start_zarrd({"data": tree.as_uri(), "other": (tree / "other").as_uri()}, log_path=logs / "zarrd.log")
    yield s
    s.stop()


def test_chromium_walks_from_the_front_page_to_an_ome_group_and_an_array(server, tree, tmp_path):
    front = Dom(chromium(f"{server.url}/", "--dump-dom"))
    assert "data" in front.ids.get("mounts", ""), front.ids
    mount_url = urllib.parse.urljoin(server.url + "/", link_to(front, "data"))
    assert mount_url.endswith("/browse/data/")
    mount = Dom(chromium(mount_url, "--dump-dom"))
    entries = mount.ids["entries"]
    assert "images" in entries and "plain" in entries and "directory" in entries
    images = Dom(chromium(urllib.parse.urljoin(mount_url, link_to(mount, "images")), "--dump-dom"))
    group_url = urllib.parse.urljoin(mount_url, link_to(images, "cells.ome.zarr"))
    group = Dom(chromium(group_url, "--dump-dom"))
    ms = group.ids["multiscales"]
    assert "OME-Zarr multiscales" in ms and "0.5" in ms
    assert "y (space, micrometer)" in ms and "c (channel)" in ms
    assert "[1,0.5,0.5]" in ms and "[1,1.0,1.0]" in ms
    assert "array v3" in group.ids["entries"] and "[2, 128, 128]" in group.ids["entries"]
    crumbs = [t for t, _ in group.tags if t == "nav"]
    assert crumbs, "breadcrumbs"
    array_url = urllib.parse.urljoin(group_url, link_to(group, "0"))
    page = Dom(chromium(array_url, "--dump-dom"))
    assert page.ids["shape"] == "[2, 128, 128]" and page.ids["dtype"] == "uint16"
    assert "zarr3://" in page.ids["neuroglancer"] or any("zarr3%3A%2F%2F" in h for h in page.links)
    assert "zarr.open_array(" in page.ids["snippet-zarr"]
    assert '"driver": "zarr3"' in page.ids["snippet-tensorstore"]
    assert "xr.open_zarr(" in page.ids["snippet-xarray"]
    assert "/api/v1/data/data/images/cells.ome.zarr/0?sel=0:2,0:10,0:10&format=json" in page.ids["snippet-curl"]
    img = [a for t, a in page.tags if t == "img" and a.get("id") == "preview"]
    assert img and img[0]["src"] == "/api/v1/preview/data/images/cells.ome.zarr/0"
    # The snippets work: the curl of a slice answers what zarr-python reads.
    curl = page.ids["snippet-curl"].split("'")[1]
    got = requests.get(curl, timeout=30).json()
    local = zarr.open_array(tree / "images" / "cells.ome.zarr" / "0", mode="r")
    np.testing.assert_array_equal(np.array(got), local[0:2, 0:10, 0:10])
    # The stored chunk count on request.
    stats = Dom(chromium(array_url + "?stats=true", "--dump-dom"))
    assert stats.ids["stored-chunks"] == "32"
    # A screenshot of the array page, preview included, at the asked size.
    shot = tmp_path / "array.png"
    chromium(array_url, f"--screenshot={shot}", "--window-size=1100,900", "--hide-scrollbars")
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (1100, 900)
    assert shot.stat().st_size > 20_000  # text, tables and the preview, not a blank page


def test_stored_values_are_escaped_and_run_nothing(server):
    name = urllib.parse.quote(EVIL, safe="")
    dump = chromium(f"{server.url}/browse/data/plain/{name}", "--dump-dom")
    dom = Dom(dump)
    # The title was not changed by a script, the attribute is text, no injected element exists.
    assert re.search(r"<title>evil&lt;b&gt;\"'&amp; · zarrd</title>", dump) or "evil&lt;b&gt;" in dump
    assert SCRIPT_ATTR in dom.ids["attributes"]
    assert not [a for t, a in dom.tags if t == "script"]
    assert not [a for t, a in dom.tags if t == "img" and a.get("src") == "x"]
    assert "pwned" not in dump.split("<body>")[0]
    r = requests.get(f"{server.url}/browse/data/plain/{name}", timeout=30)
    assert "<script>" not in r.text and "default-src 'none'" in r.headers["content-security-policy"]
    # The directory page lists the file and the array, whose link leads back to it.
    plain = Dom(chromium(f"{server.url}/browse/data/plain/", "--dump-dom"))
    assert "notes.txt" in plain.ids["entries"] and "file" in plain.ids["entries"]
    assert f"/browse/data/plain/{name}" in plain.links


def test_children_come_a_page_at_a_time(server):
    first = requests.get(f"{server.url}/browse/data/many/", timeout=30)
    assert first.status_code == 200 and first.headers["content-type"].startswith("text/html")
    dom = Dom(first.text)
    assert "1–100 of 150 entries" in dom.ids["pager"]
    assert "g000" in dom.ids["entries"] and "g099" in dom.ids["entries"] and "g100" not in dom.ids["entries"]
    nxt = link_to(dom, "next")
    second = Dom(requests.get(f"{server.url}/browse/data/many/{nxt}", timeout=30).text)
    assert "101–150 of 150" in second.ids["pager"] and "g149" in second.ids["entries"]
    assert "group v3" in second.ids["entries"]
    r = requests.get(f"{server.url}/browse/data/many/?page=x", timeout=30)
    assert r.status_code == 400
    r = requests.get(f"{server.url}/browse/data/many/?pages=1", timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_parameter"
    r = requests.get(f"{server.url}/browse/nowhere/", timeout=30)
    assert r.status_code == 404


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def secured(tree, tmp_path_factory):
    logs = tmp_path_factory.mktemp("browse-auth-logs")
    tokens = (
        f'[{{ name = "admin", sha256 = "{_sha256(ADMIN_TOKEN)}", scopes = {{ "*" = ["admin"] }} }},'
        f' {{ name = "reader", sha256 = "{_sha256(READ_TOKEN)}", scopes = {{ data = ["read"] }} }}]'
    )
    env = {
        "ZARRD_AUTH__TOKENS": tokens,
        "ZARRD_MOUNTS__PUB__URL": (tree / "other").as_uri(),
        "ZARRD_MOUNTS__PUB__ANONYMOUS_READ": "true",
    }
    s = start_zarrd({"data": tree.as_uri(), "hidden": (tree / "plain").as_uri()}, log_path=logs / "z.log", env=env)
    yield s
    s.stop()


def _mounts(server, token: str | None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    r = requests.get(f"{server.url}/", headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    rows = re.findall(r"<tr><td><a href=\"/browse/([^/]+)/\">[^<]*</a></td><td>[^<]*</td><td>(\w+)</td></tr>", r.text)
    return dict(rows)


def test_what_each_caller_sees_with_tokens(secured):
    assert _mounts(secured, None) == {"pub": "read"}
    assert _mounts(secured, READ_TOKEN) == {"data": "read"}  # a token brings its own scopes only
    assert _mounts(secured, ADMIN_TOKEN) == {"data": "admin", "hidden": "admin", "pub": "admin"}
    # Chromium, sending no token, sees the anonymous view and can open the public mount.
    front = Dom(chromium(f"{secured.url}/", "--dump-dom"))
    assert "pub" in front.ids["mounts"] and "hidden" not in front.ids["mounts"]
    assert "x" in Dom(chromium(f"{secured.url}/browse/pub/", "--dump-dom")).ids["entries"]
    # A place in a mount needs read on it.
    r = requests.get(f"{secured.url}/browse/data/", timeout=30)
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
    r = requests.get(f"{secured.url}/browse/hidden/", headers={"Authorization": f"Bearer {READ_TOKEN}"}, timeout=30)
    assert r.status_code == 403
    r = requests.get(f"{secured.url}/browse/data/", headers={"Authorization": f"Bearer {READ_TOKEN}"}, timeout=30)
    assert r.status_code == 200 and "images" in Dom(r.text).ids["entries"]
