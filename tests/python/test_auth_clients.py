"""Real clients with bearer tokens: zarr-python (fsspec, obstore) writes with a write token and
TensorStore reads with a read token, the way a user configures them; without a token, or
with the read token, writing is refused and nothing lands on disk.

The server is its own zarrd with `[auth]` tokens set through ZARRD_AUTH__TOKENS (only the
SHA-256 of each token is configured).
"""

from __future__ import annotations

import hashlib
import secrets

import aiohttp
import numpy as np
import pytest
import tensorstore as ts
import zarr
from numpy.testing import assert_array_equal
from obstore.store import HTTPStore
from zarr.storage import FsspecStore, ObjectStore

from clients import CLIENT_TIMEOUT_S
from zarrd_harness import start_zarrd

WRITE_TOKEN = secrets.token_hex(32)
READ_TOKEN = secrets.token_hex(32)


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture(scope="module")
def secured(tmp_path_factory, logs_dir):
    root = tmp_path_factory.mktemp("secured")
    tokens = (
        f'[{{ name = "writer", sha256 = "{_sha256(WRITE_TOKEN)}", scopes = {{ sec = ["write"] }} }},'
        f' {{ name = "reader", sha256 = "{_sha256(READ_TOKEN)}", scopes = {{ "*" = ["read"] }} }}]'
    )
    server = start_zarrd(
        {"sec": str(root)}, log_path=logs_dir / "zarrd-auth.log", env={"ZARRD_AUTH__TOKENS": tokens}
    )
    yield server, root
    server.stop()


def _fsspec(url: str, token: str | None) -> FsspecStore:
    client = {"timeout": aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)}
    if token is not None:
        # On the session, not as fsspec's `headers` option: fsspec sends that one on
        # reads but not on PUT.
        client["headers"] = {"Authorization": f"Bearer {token}"}
    options = {"client_kwargs": client, "use_listings_cache": False}
    return FsspecStore.from_url(url.rstrip("/"), read_only=False, storage_options=options)


def _ts_open(url: str, path: str, token: str | None):
    kvstore = {"driver": "http", "base_url": url, "path": path + "/"}
    if token is not None:
        kvstore["headers"] = [f"Authorization: Bearer {token}"]
    return ts.open({"driver": "zarr3", "kvstore": kvstore}, read=True).result(timeout=CLIENT_TIMEOUT_S)


def test_write_with_a_write_token_read_with_a_read_token(secured, unique):
    server, root = secured
    name = f"auth_{unique}"
    data = (np.arange(20 * 13, dtype="int32").reshape(20, 13) * 7) | 1
    arr = zarr.create_array(
        _fsspec(server.mount_url("sec") + name, WRITE_TOKEN),
        shape=data.shape,
        chunks=(8, 8),
        dtype="int32",
        fill_value=0,
    )
    arr[...] = data
    assert (root / name / "zarr.json").is_file()

    assert_array_equal(_ts_open(server.mount_url("sec"), name, READ_TOKEN).read().result(), data)
    back = zarr.open_array(_fsspec(server.mount_url("sec") + name, READ_TOKEN), mode="r")
    assert_array_equal(back[...], data)

    # Without a token even reading is refused (the mount has no anonymous_read).
    with pytest.raises(ValueError, match="401"):
        _ts_open(server.mount_url("sec"), name, None)


@pytest.mark.parametrize("token", [None, "read", "wrong"])
def test_writes_without_the_write_scope_store_nothing(secured, unique, token):
    server, root = secured
    name = f"refused_{unique}"
    value = {"read": READ_TOKEN, "wrong": secrets.token_hex(32), None: None}[token]
    with pytest.raises(Exception, match="40[13]"):
        arr = zarr.create_array(
            _fsspec(server.mount_url("sec") + name, value), shape=(4,), chunks=(2,), dtype="uint8"
        )
        arr[...] = np.arange(1, 5, dtype="uint8")
    assert not (root / name).exists()
    log = server.log_path.read_text(errors="replace")
    assert WRITE_TOKEN not in log and READ_TOKEN not in log


class _HTTPObjectStore(ObjectStore):
    """obstore's HTTP store refuses create-if-absent puts; check first (as the README shows)."""

    async def set_if_not_exists(self, key, value):
        if not await self.exists(key):
            await self.set(key, value)


def test_obstore_writes_and_deletes_with_a_write_token(secured, unique):
    server, root = secured

    def store(token: str) -> ObjectStore:
        http = HTTPStore.from_url(
            server.mount_url("sec").rstrip("/"),
            client_options={
                "allow_http": True,
                "timeout": f"{CLIENT_TIMEOUT_S}s",
                "default_headers": {"Authorization": f"Bearer {token}"},
            },
        )
        return _HTTPObjectStore(http, read_only=False)

    name = f"obstore_{unique}"
    group = zarr.open_group(store(WRITE_TOKEN), path=name, mode="w")
    arr = group.create_array("a", shape=(6, 6), chunks=(3, 3), dtype="float32", fill_value=0)
    arr[...] = np.full((6, 6), 2.5, dtype="float32")
    assert (root / name / "a" / "c" / "0" / "0").is_file()
    arr[:3, :3] = 0  # a chunk equal to the fill value is deleted
    assert not (root / name / "a" / "c" / "0" / "0").exists()
    assert_array_equal(zarr.open_array(store(READ_TOKEN), path=f"{name}/a", mode="r")[3:, 3:], 2.5)
    with pytest.raises(Exception, match="403|Forbidden"):
        zarr.open_array(store(READ_TOKEN), path=f"{name}/a", mode="r+")[...] = 1
