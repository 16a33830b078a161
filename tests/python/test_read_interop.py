"""zarr-python writes arrays locally; zarrd serves them; zarr-python (fsspec HTTP) and TensorStore
(`http` kvstore, `zarr` and `zarr3` drivers) read every array through zarrd, and every element
equals a direct local read. Runs against a file mount and against an s3:// mount on moto that
holds a copy of the same directory.
"""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from numpy.testing import assert_array_equal

from clients import fsspec_store, local_array, ts_read
from fixture_data import CASES, SHARD_SHAPE, TREE_ATTRS, TREE_MEMBERS

MOUNTS = [
    pytest.param(("zarrd", "data"), id="file"),
    pytest.param(("zarrd_s3", "s3data"), id="s3", marks=pytest.mark.s3),
]


@pytest.fixture(params=MOUNTS)
def mount_url(request, array_cases) -> str:
    server_fixture, mount = request.param
    return request.getfixturevalue(server_fixture).mount_url(mount)


def _case_id(case) -> str:
    return case.path


def assert_same(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype, f"dtype {got.dtype} != {expected.dtype}"
    assert_array_equal(got, expected)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_zarr_python_reads_through_zarrd(mount_url, fixture_dir, case):
    local = local_array(fixture_dir, case.path)
    remote = zarr.open_array(fsspec_store(mount_url + case.path), mode="r")
    assert remote.metadata.zarr_format == case.zarr_format
    assert remote.shape == local.shape
    assert remote.chunks == local.chunks
    assert remote.fill_value == local.fill_value or (
        np.isnan(remote.fill_value) and np.isnan(local.fill_value)
    )
    assert dict(remote.attrs) == dict(local.attrs)
    assert_same(remote[...], local[...])


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_tensorstore_reads_through_zarrd(mount_url, fixture_dir, case):
    expected = local_array(fixture_dir, case.path)[...]
    assert_same(ts_read(mount_url, case.path, case.zarr_format), expected)


@pytest.mark.parametrize("name", ["sharded", "sharded_start"])
def test_tensorstore_reads_shard_subregions(mount_url, fixture_dir, name):
    """Regions that cut across shards, touch missing shards and partial edge shards."""
    expected = local_array(fixture_dir, f"v3/{name}")[...]
    rows, cols = SHARD_SHAPE
    for region in (
        np.s_[3:17, 30:50],  # inside one written and one missing shard
        np.s_[18:43, 25:60],  # across four shards
        np.s_[40:50, 56:70],  # only the missing partial corner shard
        np.s_[0:1, 0:1],  # one element of a fill-value inner chunk
        np.s_[rows - 1 : rows, 0:cols],  # last row, all partial edge shards
    ):
        got = ts_read(mount_url, f"v3/{name}", 3, region=region)
        assert_array_equal(got, expected[region])


@pytest.mark.parametrize("name", ["sharded", "sharded_start"])
def test_zarr_python_reads_shard_subregions(mount_url, fixture_dir, name):
    local = local_array(fixture_dir, f"v3/{name}")
    remote = zarr.open_array(fsspec_store(mount_url + f"v3/{name}"), mode="r")
    for region in (np.s_[3:17, 30:50], np.s_[18:43, 25:60], np.s_[40:50, 56:70]):
        assert_array_equal(remote[region], local[region])


@pytest.mark.parametrize("tree", ["tree3", "tree2"])
@pytest.mark.parametrize("group", ["", "a", "a/b"])
def test_zarr_python_group_hierarchy_through_zarrd(mount_url, fixture_dir, tree, group):
    """Attributes of every group, and its members as listed through zarrd's HTML index."""
    path = f"{tree}/{group}".rstrip("/")
    remote = zarr.open_group(fsspec_store(mount_url + path), mode="r")
    local = zarr.open_group(str(fixture_dir / path), mode="r")
    assert remote.metadata.zarr_format == local.metadata.zarr_format
    assert dict(remote.attrs) == TREE_ATTRS[group] == dict(local.attrs)
    arrays, groups = TREE_MEMBERS[group]
    assert set(remote.array_keys()) == arrays
    assert set(remote.group_keys()) == groups
    for name in arrays:
        assert_array_equal(remote[name][...], local[name][...])
