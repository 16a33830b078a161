"""zarr-python through obstore's HTTPStore (zarr.storage.ObjectStore): create a group with arrays,
write data including chunks equal to the fill value (which zarr-python then DELETEs), list the
group's members (PROPFIND), and read everything back equal. On a file mount, a memory mount,
and an s3:// mount on moto; where the backing store is visible, check it directly too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import requests
import zarr
from numpy.testing import assert_array_equal
from zarr.codecs import BloscCodec, ZstdCodec
from zarr.core.group import GroupMetadata

from clients import obstore_store, ts_read
from fixture_data import sample
from zarrd_harness import HTTP_TIMEOUT_S, S3_BUCKET, s3_keys


@dataclass
class Target:
    mount_url: str
    # key (relative to the mount) -> stored? , by looking at the backing store itself
    stored: Callable[[str], bool]
    local_root: Path | None  # the mount's directory, for a file mount


@pytest.fixture(
    params=[
        pytest.param("file", id="file"),
        pytest.param("memory", id="memory"),
        pytest.param("s3", id="s3", marks=pytest.mark.s3),
    ]
)
def target(request, rw_dir) -> Target:
    if request.param == "file":
        server = request.getfixturevalue("zarrd")
        return Target(server.mount_url("rw"), lambda key: (rw_dir / key).is_file(), rw_dir)
    if request.param == "memory":
        server = request.getfixturevalue("zarrd")
        url = server.mount_url("mem")

        def stored_in_memory(key: str) -> bool:
            status = requests.head(url + key, timeout=HTTP_TIMEOUT_S).status_code
            assert status in (200, 404), f"HEAD {url + key} answered {status}"
            return status == 200

        return Target(url, stored_in_memory, None)
    server = request.getfixturevalue("zarrd_s3")
    s3 = request.getfixturevalue("s3")
    return Target(
        server.mount_url("s3rw"),
        lambda key: key in s3_keys(s3, S3_BUCKET, "rw"),
        None,
    )


def _chunk_key(zarr_format: int, *idx: int) -> str:
    return ("c/" + "/".join(map(str, idx))) if zarr_format == 3 else ".".join(map(str, idx))


def _array_metadata(zarr_format: int, **kwargs):
    """Array metadata as zarr-python builds it (in a throwaway in-memory store)."""
    return zarr.create_array(zarr.storage.MemoryStore(), zarr_format=zarr_format, **kwargs).metadata


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_obstore_round_trip(target: Target, zarr_format: int, unique: str):
    name = f"obstore_v{zarr_format}_{unique}"
    # Creating: zarr-python's create_group / Group.create_array write missing parents with a
    # create-only put (PutMode::Create), which object_store's HTTP store refuses client-side
    # (NotImplementedError), so the nodes are created with create_hierarchy (plain PUTs) on a
    # store rooted at the new group. Everything after that uses a store rooted at the mount,
    # as users configure it: HTTPStore.from_url("http://HOST:PORT/zarr/MOUNT") (no final "/").
    group_url = f"{target.mount_url}{name}/"
    nodes = {
        "": GroupMetadata(zarr_format=zarr_format, attributes={"client": "obstore"}),
        "sub": GroupMetadata(zarr_format=zarr_format, attributes={"depth": 1}),
        # Dense 2-D array, 4x3 chunks with partial edge chunks.
        "dense": _array_metadata(
            zarr_format,
            shape=(38, 27),
            chunks=(10, 10),
            dtype="int32",
            fill_value=0,
            compressors=ZstdCodec(level=2) if zarr_format == 3 else None,
            attributes={"kind": "dense"},
        ),
        "sub/floats": _array_metadata(
            zarr_format, shape=(50,), chunks=(16,), dtype="float64", fill_value=0.25
        ),
    }
    if zarr_format == 3:
        nodes["sharded"] = _array_metadata(
            3,
            shape=(24, 24),
            chunks=(4, 4),
            shards=(12, 12),
            dtype="uint8",
            fill_value=0,
            compressors=BloscCodec(cname="zstd", clevel=1),
        )
    created = dict(zarr.create_hierarchy(store=obstore_store(group_url), nodes=nodes))
    assert set(created) == set(nodes)

    group = zarr.open_group(obstore_store(target.mount_url), path=name, mode="r+")
    # At first every chunk holds data.
    dense = sample("int32", (38, 27), seed=41) | 1
    a = group["dense"]
    a[...] = dense
    floats = sample("float64", (50,), seed=42)
    f = group["sub/floats"]
    f[...] = floats

    for idx in [(0, 0), (1, 2), (3, 2)]:
        assert target.stored(f"{name}/dense/{_chunk_key(zarr_format, *idx)}"), idx

    # Overwrite two chunks (one of them a partial edge chunk) and part of a third with the
    # fill value: zarr-python deletes the first two keys, and rewrites the third.
    dense[0:10, 0:10] = 0
    a[0:10, 0:10] = 0
    dense[30:38, 20:27] = 0
    a[30:38, 20:27] = 0
    dense[10:15, 10:20] = 0
    a[10:15, 10:20] = 0
    floats[16:32] = 0.25
    f[16:32] = 0.25
    assert not target.stored(f"{name}/dense/{_chunk_key(zarr_format, 0, 0)}")
    assert not target.stored(f"{name}/dense/{_chunk_key(zarr_format, 3, 2)}")
    assert target.stored(f"{name}/dense/{_chunk_key(zarr_format, 1, 1)}")
    assert not target.stored(f"{name}/sub/floats/{_chunk_key(zarr_format, 1)}")

    if zarr_format == 3:
        sharded = sample("uint8", (24, 24), seed=43) | 1
        s = group["sharded"]
        s[...] = sharded
        sharded[12:24, 0:12] = 0  # a whole shard becomes fill value: its key is deleted
        s[12:24, 0:12] = 0
        sharded[0:4, 0:4] = 0  # one inner chunk: the shard is rewritten without it
        s[0:4, 0:4] = 0
        assert not target.stored(f"{name}/sharded/c/1/0")
        assert target.stored(f"{name}/sharded/c/0/0")

    # Listing through PROPFIND, on a fresh store so nothing is cached client-side.
    reopened = zarr.open_group(obstore_store(target.mount_url), path=name, mode="r")
    expected_arrays = {"dense", "sharded"} if zarr_format == 3 else {"dense"}
    assert set(reopened.array_keys()) == expected_arrays
    assert set(reopened.group_keys()) == {"sub"}
    assert set(reopened["sub"].array_keys()) == {"floats"}
    assert dict(reopened.attrs) == {"client": "obstore"}
    assert dict(reopened["sub"].attrs) == {"depth": 1}
    assert dict(reopened["dense"].attrs) == {"kind": "dense"}

    # Everything reads back equal, through obstore and through TensorStore.
    assert_array_equal(reopened["dense"][...], dense)
    assert_array_equal(reopened["sub/floats"][...], floats)
    assert_array_equal(ts_read(target.mount_url, f"{name}/dense", zarr_format), dense)
    assert_array_equal(ts_read(target.mount_url, f"{name}/sub/floats", zarr_format), floats)
    if zarr_format == 3:
        assert_array_equal(reopened["sharded"][...], sharded)
        assert_array_equal(ts_read(target.mount_url, f"{name}/sharded", 3), sharded)

    if target.local_root is not None:
        local = zarr.open_group(str(target.local_root / name), mode="r")
        assert_array_equal(local["dense"][...], dense)
        assert_array_equal(local["sub/floats"][...], floats)


def test_obstore_list_prefixes(zarrd, unique):
    """The raw listing calls obstore makes for zarr-python (PROPFIND Depth 1, via list_dir)."""
    import obstore

    store = obstore_store(zarrd.mount_url("mem")).store
    base = f"listing_{unique}"
    for key in ("a/blob", "a/b/c/0", "a/b/c/1", "top.bin"):
        obstore.put(store, f"{base}/{key}", b"\x01" * 10)
    result = obstore.list_with_delimiter(store, f"{base}")
    # object_store resolves each PROPFIND href against the store's URL and takes the whole
    # URL path as the key, so keys come back right only if hrefs resolve to /<key in mount>.
    paths = [o["path"] for o in result["objects"]] + list(result["common_prefixes"])
    assert all(p.startswith(f"{base}/") for p in paths), (
        f"listing {zarrd.mount_url('mem')}{base} gave keys that are not relative to the "
        f"store's URL: {paths}"
    )
    assert sorted(p.rstrip("/") for p in result["common_prefixes"]) == [f"{base}/a"]
    assert [(o["path"], o["size"]) for o in result["objects"]] == [(f"{base}/top.bin", 10)]
    result = obstore.list_with_delimiter(store, f"{base}/a/b")
    assert sorted(p.rstrip("/") for p in result["common_prefixes"]) == [f"{base}/a/b/c"]
    assert result["objects"] == []
    # The missing prefix lists as empty, not as an error.
    assert obstore.list_with_delimiter(store, f"{base}/nothing")["objects"] == []
