"""The browser's errors are pages too: a person who follows a link to a node whose stored
metadata is broken (or to a mount that does not exist) gets an HTML page with the status,
the error's code and its message (escaped, under the pages' Content-Security-Policy), not a
JSON envelope (found by review: /browse answered JSON 422)."""

from __future__ import annotations

import html

import requests

from zarrd_harness import start_zarrd


def test_errors_are_pages_naming_the_error(tmp_path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "zarr.json").write_text('{"zarr_format": 3, "node_type": "array", "shape": "<b>x</b>"}')
    s = start_zarrd({"data": tmp_path.as_uri()}, log_path=tmp_path / "zarrd.log")
    try:
        r = requests.get(f"{s.url}/browse/data/broken", timeout=30)
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in r.headers["content-security-policy"]
        assert 'id="error"' in r.text and "invalid_metadata" in r.text
        assert "<b>x</b>" not in r.text  # the stored text is escaped, never markup
        assert "broken" in html.unescape(r.text)
        r = requests.get(f"{s.url}/browse/nope/", timeout=30)
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/html"), r.text
        assert "unknown_mount" in r.text or "not_found" in r.text, r.text
        # A place with nothing there is 404 too, as the API answers (round 11, a black-box
        # attack: it was an empty "directory" page, 200); the mount's root and a folder with
        # something in it are directories.
        (tmp_path / "folder").mkdir()
        (tmp_path / "folder" / "note.txt").write_text("x")
        (tmp_path / "empty").mkdir()
        for path, status in [("no/such/place", 404), ("empty", 404), ("folder", 200), ("", 200)]:
            r = requests.get(f"{s.url}/browse/data/{path}", timeout=30)
            assert r.status_code == status and r.headers["content-type"].startswith("text/html"), (path, r.text)
            api = requests.get(f"{s.url}/api/v1/nodes/data/{path}".rstrip("/"), timeout=30)
            assert api.status_code == status, (path, api.text)
        assert "node_not_found" in requests.get(f"{s.url}/browse/data/no/such/place", timeout=30).text
        # An empty folder in a listing is named, never linked to that 404.
        page = requests.get(f"{s.url}/browse/data/", timeout=30).text
        assert "empty/" in page and "empty directory" in page, page
        assert 'href="/browse/data/empty' not in page and 'href="/browse/data/folder/"' in page, page
    finally:
        s.stop()
