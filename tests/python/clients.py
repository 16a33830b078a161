"""The real clients, configured the way a user would point them at zarrd (with bounded timeouts)."""

from __future__ import annotations

from datetime import timedelta

import aiohttp
import numpy as np
import tensorstore as ts
import zarr
from obstore.store import HTTPStore
from zarr.storage import FsspecStore, ObjectStore

CLIENT_TIMEOUT_S = 60


def fsspec_store(url: str, read_only: bool = True) -> FsspecStore:
    """zarr-python over fsspec's HTTP filesystem (reads with GET/Range, writes with PUT)."""
    return FsspecStore.from_url(
        url.rstrip("/"),
        read_only=read_only,
        storage_options={
            "client_kwargs": {"timeout": aiohttp.ClientTimeout(total=CLIENT_TIMEOUT_S)},
            # Listings must be fresh: tests change the store between two listings.
            "use_listings_cache": False,
        },
    )


def obstore_store(url: str, read_only: bool = False) -> ObjectStore:
    """zarr-python over obstore's HTTPStore (object_store's HTTP client: PUT, DELETE, PROPFIND)."""
    # No trailing slash: object_store appends keys as path segments after the URL's last
    # segment, so "…/zarr/data/" would request "…/zarr/data//key" (an empty segment).
    http = HTTPStore.from_url(
        url.rstrip("/"),
        client_options={
            "allow_http": True,
            "timeout": f"{CLIENT_TIMEOUT_S}s",
            "connect_timeout": "10s",
        },
        retry_config={"max_retries": 1, "retry_timeout": timedelta(seconds=30)},
    )
    return ObjectStore(http, read_only=read_only)


def ts_spec(mount_url: str, path: str, zarr_format: int) -> dict:
    """A TensorStore spec reading `path` under a zarrd mount through the `http` kvstore."""
    return {
        "driver": "zarr3" if zarr_format == 3 else "zarr",
        "kvstore": {"driver": "http", "base_url": mount_url, "path": path.strip("/") + "/"},
    }


def ts_read(mount_url: str, path: str, zarr_format: int, region=None) -> np.ndarray:
    """Open read-only with TensorStore and read everything (or `region`, an index expression)."""
    store = ts.open(ts_spec(mount_url, path, zarr_format), read=True).result(
        timeout=CLIENT_TIMEOUT_S
    )
    if region is not None:
        store = store[region]
    return store.read().result(timeout=CLIENT_TIMEOUT_S)


def local_array(root, path: str):
    return zarr.open_array(str(root / path), mode="r")
