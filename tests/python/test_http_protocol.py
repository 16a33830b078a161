"""Plain-HTTP checks of the store-protocol behaviour that zarr-python, TensorStore and obstore
rely on, with `requests`, on a file mount, a memory mount and an s3:// mount on moto.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import requests

from zarrd_harness import HTTP_TIMEOUT_S, S3_BUCKET, start_zarrd

BODY = bytes(range(256)) * 4 + b"tail-of-the-object"  # 1042 bytes, all distinct prefixes
STRONG_ETAG = re.compile(r'^"[^"]*"$')


@dataclass
class Mount:
    url: str  # ends with "/"
    put: Callable[[str, bytes], None]  # store bytes under a key, bypassing zarrd where possible


@pytest.fixture(
    params=[
        pytest.param("file", id="file"),
        pytest.param("memory", id="memory"),
        pytest.param("s3", id="s3", marks=pytest.mark.s3),
    ]
)
def mount(request, rw_dir: Path) -> Mount:
    if request.param == "file":
        server = request.getfixturevalue("zarrd")

        def put_file(key: str, data: bytes) -> None:
            path = rw_dir / key
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)

        return Mount(server.mount_url("rw"), put_file)
    if request.param == "memory":
        server = request.getfixturevalue("zarrd")
        url = server.mount_url("mem")

        def put_http(key: str, data: bytes) -> None:
            r = requests.put(url + key, data=data, timeout=HTTP_TIMEOUT_S)
            assert r.status_code in (201, 204), f"PUT {url + key}: {r.status_code} {r.text}"

        return Mount(url, put_http)
    server = request.getfixturevalue("zarrd_s3")
    s3 = request.getfixturevalue("s3")

    def put_s3(key: str, data: bytes) -> None:
        s3.put_object(Bucket=S3_BUCKET, Key=f"rw/{key}", Body=data)

    return Mount(server.mount_url("s3rw"), put_s3)


@pytest.fixture
def obj(mount: Mount, unique: str) -> str:
    """URL of a fresh object holding BODY."""
    key = f"proto_{unique}/c/0/0"
    mount.put(key, BODY)
    return mount.url + key


def get(url: str, **headers: str) -> requests.Response:
    return requests.get(url, headers=headers, timeout=HTTP_TIMEOUT_S)


def head(url: str, **headers: str) -> requests.Response:
    return requests.head(url, headers=headers, timeout=HTTP_TIMEOUT_S)


def describe(r: requests.Response) -> str:
    return (
        f"{r.request.method} {r.url} {dict(r.request.headers)} -> {r.status_code} {dict(r.headers)}"
    )


# --- missing keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "range_header",
    [None, "bytes=-16", "bytes=0-15", "bytes=100-"],
    ids=["plain", "suffix", "range", "open"],
)
def test_missing_key_is_404(mount: Mount, unique: str, range_header):
    """Clients read 404 as "fill value"; a sharded array's missing shard is first read with a
    suffix range, so that must be 404 too (never 416 or 403)."""
    headers = {"Range": range_header} if range_header else {}
    # Missing in an existing "directory" and missing with no parent at all.
    mount.put(f"missing_{unique}/present", b"x")
    for key in (f"missing_{unique}/c/1/2", f"missing_{unique}/zarr.json", f"nothing_{unique}/c/0"):
        r = get(mount.url + key, **headers)
        assert r.status_code == 404, describe(r)
        r = head(mount.url + key, **headers)
        assert r.status_code == 404, describe(r)


# --- ranges ------------------------------------------------------------------------------------


def test_full_get_and_head(obj):
    r = get(obj)
    assert r.status_code == 200, describe(r)
    assert r.content == BODY
    assert r.headers.get("Accept-Ranges") == "bytes"
    assert STRONG_ETAG.match(r.headers.get("ETag", "")), describe(r)
    h = head(obj)
    assert h.status_code == 200, describe(h)
    assert h.headers.get("Content-Length") == str(len(BODY)), describe(h)
    assert h.headers.get("ETag") == r.headers["ETag"]


@pytest.mark.parametrize(
    "range_header, start, end",
    [
        ("bytes=10-19", 10, 19),
        ("bytes=0-0", 0, 0),
        ("bytes=1000-", 1000, len(BODY) - 1),
        ("bytes=-16", len(BODY) - 16, len(BODY) - 1),
        ("bytes=1030-99999", 1030, len(BODY) - 1),  # end past the object: clamped
        (f"bytes=-{len(BODY) + 50}", 0, len(BODY) - 1),  # suffix longer than the object
    ],
)
def test_range_is_206_with_content_range(obj, range_header, start, end):
    r = get(obj, Range=range_header)
    assert r.status_code == 206, describe(r)
    assert r.headers.get("Content-Range") == f"bytes {start}-{end}/{len(BODY)}", describe(r)
    assert r.content == BODY[start : end + 1]
    assert r.headers.get("Content-Length") == str(end + 1 - start), describe(r)


# ~5 MB: above the object cache's 1 MiB; whole and ranges over 4 MiB are read from the file as sent
LARGE = bytes(range(251)) * 20_000 + b"end"


@pytest.mark.parametrize(
    "range_header, start, end",
    [
        (None, 0, len(LARGE) - 1),
        ("bytes=7-2500006", 7, 2500006),
        ("bytes=10-4500009", 10, 4500009),
        ("bytes=-1000000", len(LARGE) - 1_000_000, len(LARGE) - 1),
        ("bytes=2999000-", 2999000, len(LARGE) - 1),
        ("bytes=100-199", 100, 199),
    ],
    ids=["whole", "inner", "streamed", "suffix", "open", "small"],
)
def test_large_objects_whole_and_ranged(mount: Mount, unique: str, range_header, start, end):
    key = f"large_{unique}/c/0"
    mount.put(key, LARGE)
    headers = {"Range": range_header} if range_header else {}
    for _ in range(2):  # the second read after the first left nothing behind
        r = get(mount.url + key, **headers)
        assert r.status_code == (206 if range_header else 200), describe(r)
        assert r.headers.get("Content-Length") == str(end + 1 - start), describe(r)
        assert r.content == LARGE[start : end + 1]
        if range_header:
            assert r.headers.get("Content-Range") == f"bytes {start}-{end}/{len(LARGE)}", describe(r)
    h = head(mount.url + key, **headers)
    assert h.status_code == r.status_code and h.content == b"", describe(h)
    assert h.headers.get("Content-Length") == str(end + 1 - start), describe(h)
    r304 = get(mount.url + key, **headers, **{"If-None-Match": r.headers["ETag"]})
    assert r304.status_code == 304 and r304.content == b"", describe(r304)


def test_a_large_object_changed_in_place_while_sent_fails_the_answer(zarrd, rw_dir: Path, unique: str):
    """A streamed GET (over 4 MiB) whose file another writer rewrites in place
    while it is being sent ends short of its Content-Length: never a mix of the
    two versions under the first one's ETag."""
    key = f"inplace_{unique}/c/0"
    path = rw_dir / key
    path.parent.mkdir(parents=True, exist_ok=True)
    size = 48 << 20
    path.write_bytes(b"a" * size)
    before = requests.get(zarrd.mount_url("rw") + key, timeout=HTTP_TIMEOUT_S)
    assert before.status_code == 200 and before.content == b"a" * size, describe(before)
    with requests.get(zarrd.mount_url("rw") + key, stream=True, timeout=HTTP_TIMEOUT_S) as r:
        assert r.status_code == 200 and r.headers["Content-Length"] == str(size), describe(r)
        first = r.raw.read(1 << 20)
        assert first == b"a" * (1 << 20)
        with path.open("r+b") as f:  # in place: same inode, same size
            f.seek(size - (1 << 20))
            f.write(b"b" * (1 << 20))
        got, error = len(first), None
        try:
            while piece := r.raw.read(1 << 20):
                got += len(piece)
        except Exception as e:  # the connection closed short: urllib3 reports it
            error = e
        assert got < size, f"a complete answer of {got} bytes after the file changed ({error!r})"


def test_unsatisfiable_range_is_416(obj):
    r = get(obj, Range=f"bytes={len(BODY)}-")
    assert r.status_code == 416, describe(r)
    assert r.headers.get("Content-Range") == f"bytes */{len(BODY)}", describe(r)


# --- conditional requests ----------------------------------------------------------------------


def test_if_none_match_is_304(obj):
    etag = get(obj).headers["ETag"]
    r = get(obj, **{"If-None-Match": etag})
    assert r.status_code == 304, describe(r)
    assert r.content == b""
    assert r.headers.get("ETag") == etag
    r = head(obj, **{"If-None-Match": etag})
    assert r.status_code == 304, describe(r)
    r = get(obj, **{"If-None-Match": '"some-other-etag"'})
    assert r.status_code == 200, describe(r)
    assert r.content == BODY


def test_if_match_mismatch_is_412(obj):
    etag = get(obj).headers["ETag"]
    r = get(obj, **{"If-Match": '"not-the-etag"'})
    assert r.status_code == 412, describe(r)
    r = get(obj, **{"If-Match": '"not-the-etag"', "Range": "bytes=0-9"})
    assert r.status_code == 412, describe(r)
    # TensorStore reads inner chunks of a shard with the index's ETag in If-Match.
    r = get(obj, **{"If-Match": etag, "Range": "bytes=0-9"})
    assert r.status_code == 206, describe(r)
    assert r.content == BODY[:10]
    r = get(obj, **{"If-Match": etag})
    assert r.status_code == 200, describe(r)


def test_put_if_match_mismatch_is_412(obj):
    r = requests.put(
        obj, data=b"new", headers={"If-Match": '"not-the-etag"'}, timeout=HTTP_TIMEOUT_S
    )
    assert r.status_code == 412, describe(r)
    r = requests.put(obj, data=b"new", headers={"If-None-Match": "*"}, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 412, describe(r)
    assert get(obj).content == BODY, "a failed conditional PUT changed the object"


def test_etag_changes_when_object_changes(obj):
    before = get(obj).headers["ETag"]
    r = requests.put(obj, data=b"changed", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 204, describe(r)
    after = get(obj)
    assert after.content == b"changed"
    assert after.headers["ETag"] != before
    r = get(obj, **{"If-None-Match": before})
    assert r.status_code == 200, describe(r)


# --- no Content-Encoding on chunks and ranges --------------------------------------------------


def test_no_content_encoding_on_ranges_and_chunks(mount: Mount, unique: str):
    """Clients compute lengths from raw bytes: never compress chunk or range responses."""
    key = f"enc_{unique}/c/0"
    body = b"\0" * 200_000 + b"compressible " * 10_000  # very compressible
    mount.put(key, body)
    for headers, status, expected in (
        ({"Range": "bytes=0-99999"}, 206, body[:100_000]),
        ({"Range": "bytes=-5000"}, 206, body[-5000:]),
        ({}, 200, body),
    ):
        r = requests.get(
            mount.url + key,
            headers={"Accept-Encoding": "gzip, deflate, br, zstd", **headers},
            timeout=HTTP_TIMEOUT_S,
            stream=True,
        )
        raw = r.raw.read(decode_content=False)
        r.close()
        assert r.status_code == status, describe(r)
        assert "Content-Encoding" not in r.headers, describe(r)
        assert raw == expected
        assert r.headers.get("Content-Length") == str(len(expected)), describe(r)


# --- writes ------------------------------------------------------------------------------------


def test_put_and_delete_statuses(mount: Mount, unique: str):
    url = mount.url + f"writes_{unique}/c/0/0"
    r = requests.put(url, data=b"one", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 201, describe(r)
    r = requests.put(url, data=b"two", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 204, describe(r)
    assert get(url).content == b"two"
    r = requests.delete(url, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 204, describe(r)
    assert get(url).status_code == 404
    r = requests.delete(url, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 204, describe(r)  # idempotent


def test_invalid_metadata_is_422(mount: Mount, unique: str):
    url = mount.url + f"meta_{unique}/zarr.json"
    r = requests.put(url, data=b"{not json", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 422, describe(r)
    assert get(url).status_code == 404, "an invalid metadata document was stored"
    group = {"zarr_format": 3, "node_type": "group", "attributes": {}}
    r = requests.put(url, data=json.dumps(group).encode(), timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 201, describe(r)


# --- listing -----------------------------------------------------------------------------------


def test_html_and_json_listing(mount: Mount, unique: str):
    base = f"list_{unique}"
    for key in ("zarr.json", "arr/zarr.json", "arr/c/0/0"):
        mount.put(f"{base}/{key}", b'{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    r = get(mount.url + f"{base}/")
    assert r.status_code == 200, describe(r)
    assert r.headers.get("Content-Type", "").startswith("text/html"), describe(r)
    hrefs = set(re.findall(r'<a\s[^>]*href="([^"]+)"', r.text))
    # fsspec joins relative links onto the listed URL.
    assert {"zarr.json", "arr/"} <= hrefs, r.text
    assert not any(h.startswith(("http:", "https:")) for h in hrefs), r.text
    j = get(mount.url + f"{base}/", Accept="application/json")
    assert j.status_code == 200, describe(j)
    assert j.headers.get("Content-Type", "").startswith("application/json"), describe(j)
    text = json.dumps(j.json())
    assert "zarr.json" in text and "arr" in text, text


@pytest.mark.parametrize("depth", ["0", "1"])
def test_propfind(mount: Mount, unique: str, depth: str):
    base = f"dav_{unique}"
    mount.put(f"{base}/zarr.json", b'{"zarr_format": 3, "node_type": "group", "attributes": {}}')
    mount.put(f"{base}/sub/c/0", b"chunk")
    r = requests.request(
        "PROPFIND", mount.url + base, headers={"Depth": depth}, timeout=HTTP_TIMEOUT_S
    )
    assert r.status_code == 207, describe(r)
    assert "multistatus" in r.text
    if depth == "1":
        assert "zarr.json" in r.text and "sub" in r.text, r.text
    else:
        assert "zarr.json" not in r.text, r.text
    r = requests.request("MKCOL", mount.url + f"{base}/newdir", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 201, describe(r)


# --- process -----------------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_graceful_shutdown(tmp_path: Path, sig):
    server = start_zarrd({"m": "memory://"}, log_path=tmp_path / "zarrd.log")
    try:
        assert get(f"{server.url}/healthz").status_code == 200
        server.proc.send_signal(sig)
        code = server.proc.wait(timeout=15)
        assert code == 0, f"exit code {code}\n{server.log_tail()}"
    except subprocess.TimeoutExpired:
        pytest.fail(f"zarrd did not exit within 15 s of {sig.name}\n{server.log_tail()}")
    finally:
        server.stop()
