"""Signed links: a holder of a read token mints an expiring link to one prefix of a
token-protected mount, and clients that send no `Authorization` header read through it —
zarr-python (fsspec) and TensorStore (http kvstore) — as viewers append keys to its base URL.
An expired, tampered or re-keyed link is 403, writes through a link are refused, nothing
outside the prefix can be named, and the credential never appears in the log.
"""

from __future__ import annotations

import hashlib
import secrets
import time

import numpy as np
import pytest
import requests
import tensorstore as ts
import zarr

from zarrd_harness import start_zarrd

READ_TOKEN = secrets.token_hex(32)
LINK_KEY = secrets.token_hex(32)


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    root = tmp_path_factory.mktemp("linked")
    a = zarr.create_array(root / "proj" / "img", shape=(20, 30), chunks=(8, 8), dtype="uint16")
    a[...] = np.arange(600, dtype="uint16").reshape(20, 30)
    zarr.create_array(root / "other", shape=(4,), chunks=(4,), dtype="int8")[...] = 7
    tokens = f'[{{ name = "reader", sha256 = "{hashlib.sha256(READ_TOKEN.encode()).hexdigest()}", scopes = {{ sec = ["read"] }} }}]'
    logs = tmp_path_factory.mktemp("linked-logs")
    env = {"ZARRD_AUTH__TOKENS": tokens, "ZARRD_AUTH__LINK_KEY": LINK_KEY}
    s = start_zarrd({"sec": root.as_uri()}, log_path=logs / "zarrd.log", env=env)
    yield s, root
    s.stop()


def mint(server, prefix: str, expires_in: int, token: str | None = READ_TOKEN) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {"mount": "sec", "prefix": prefix, "expires_in": expires_in}
    return requests.post(f"{server.url}/api/v1/links", json=body, headers=headers, timeout=30)


def test_clients_read_a_protected_mount_through_a_link(secured):
    server, root = secured
    assert requests.get(f"{server.url}/zarr/sec/proj/img/zarr.json", timeout=30).status_code == 401
    r = mint(server, "proj", 3600)
    assert r.status_code == 201, r.text
    link = r.json()["path"]
    assert link.startswith("/s/") and link.endswith("/")
    base = server.url + link
    expected = np.arange(600, dtype="uint16").reshape(20, 30)
    # zarr-python over fsspec's HTTP store, no headers.
    got = zarr.open_array(base + "img", mode="r")[...]
    np.testing.assert_array_equal(got, expected)
    # TensorStore's http kvstore, no headers.
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "http", "base_url": base, "path": "img/"}}, read=True).result()
    np.testing.assert_array_equal(t[2:9, 5:17].read().result(), expected[2:9, 5:17])
    # Ranges and validators work as on the store protocol.
    r = requests.get(base + "img/zarr.json", headers={"Range": "bytes=0-9"}, timeout=30)
    assert r.status_code == 206 and len(r.content) == 10
    etag = requests.head(base + "img/zarr.json", timeout=30).headers["etag"]
    assert requests.get(base + "img/zarr.json", headers={"If-None-Match": etag}, timeout=30).status_code == 304
    # Read-only, and nothing outside the prefix can be named.
    assert requests.put(base + "img/zarr.json", data=b"{}", timeout=30).status_code in (403, 405)
    assert requests.get(base + "../other/zarr.json", timeout=30).status_code in (400, 403, 404)
    assert requests.get(base + "%2E%2E/other/zarr.json", timeout=30).status_code in (400, 403, 404)
    # Keys are decoded as the store protocol decodes them, and a link has no listings.
    r = requests.get(base + "img/%ff", timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_key", r.text
    r = requests.get(base + "img/zarr.json/", timeout=30)
    assert r.status_code == 404 and "reads objects only" in r.text, r.text
    # The credential is not in the log.
    secret_part = link.split("/")[2]
    assert secret_part not in server.log_tail(2000)
    assert "/s/…/img/zarr.json" in server.log_tail(2000)


def test_links_that_must_not_work(secured):
    server, _ = secured
    # Minting needs read on the mount.
    assert mint(server, "proj", 60, token=None).status_code in (401, 403)
    assert mint(server, "proj", 0).status_code == 400
    assert mint(server, "proj", 10**9).status_code == 400
    assert mint(server, "../x", 60).status_code == 400
    link = mint(server, "proj", 1).json()["path"]
    payload, tag = link.split("/")[2].split(".")
    forged = f"/s/{payload}.{tag[:-2]}AA/img/zarr.json"
    r = requests.get(server.url + forged, timeout=30)
    assert r.status_code == 403 and "signature" in r.json()["error"]["message"]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        r = requests.get(server.url + link + "img/zarr.json", timeout=30)
        if r.status_code == 403:
            break
        time.sleep(0.25)
    assert r.status_code == 403 and "expired" in r.json()["error"]["message"]


def test_minting_tells_no_one_without_rights_which_mounts_exist(secured):
    server, _ = secured

    def mint_on(mount: str, token: str | None) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        body = {"mount": mount, "prefix": "", "expires_in": 60}
        r = requests.post(f"{server.url}/api/v1/links", json=body, headers=headers, timeout=30)
        return r.status_code, r.json()["error"]["code"]

    # Anonymous: the existing, hidden mount and a made-up one answer alike.
    assert mint_on("sec", None) == mint_on("nope", None) == (403, "forbidden")
    # The reader has rights on `sec` only: another name is refused, not looked up.
    assert mint_on("nope", READ_TOKEN) == (403, "forbidden")


def test_rotating_the_key_revokes_links(secured, tmp_path_factory):
    server, root = secured
    link = mint(server, "proj", 3600).json()["path"]
    assert requests.get(server.url + link + "img/zarr.json", timeout=30).status_code == 200
    tokens = f'[{{ name = "reader", sha256 = "{hashlib.sha256(READ_TOKEN.encode()).hexdigest()}", scopes = {{ sec = ["read"] }} }}]'
    logs = tmp_path_factory.mktemp("rotated-logs")
    env = {"ZARRD_AUTH__TOKENS": tokens, "ZARRD_AUTH__LINK_KEY": secrets.token_hex(32)}
    rotated = start_zarrd({"sec": root.as_uri()}, log_path=logs / "zarrd.log", env=env)
    try:
        r = requests.get(rotated.url + link + "img/zarr.json", timeout=30)
        assert r.status_code == 403, r.text
    finally:
        rotated.stop()
