"""zarr-python writes new arrays *through* zarrd with fsspec's HTTP store (PUT), and the files
that land on disk are read by zarr-python locally and equal what was written.

fsspec's HTTP store cannot delete, so the data written here never has a chunk equal to the
fill value (zarr-python would try to delete it), and nothing is overwritten.
"""

from __future__ import annotations

import json

import numcodecs
import numpy as np
import zarr
from numpy.testing import assert_array_equal
from zarr.codecs import BloscCodec, GzipCodec, ZstdCodec

from clients import fsspec_store, ts_read
from fixture_data import sample


def _assert_local_equal(path, expected: np.ndarray, attrs: dict, zarr_format: int) -> None:
    local = zarr.open_array(str(path), mode="r")
    assert local.metadata.zarr_format == zarr_format
    assert dict(local.attrs) == attrs
    assert local.dtype == expected.dtype
    assert_array_equal(local[...], expected)


def test_v3_group_and_arrays_written_through_zarrd(zarrd, rw_dir, unique):
    name = f"fsspec_v3_{unique}"
    store = fsspec_store(zarrd.mount_url("rw") + name, read_only=False)
    group = zarr.create_group(store, zarr_format=3, attributes={"writer": "fsspec", "n": 1})

    plain = sample("float32", (30, 21), seed=11)
    a = group.create_array(
        "plain",
        shape=plain.shape,
        chunks=(8, 8),
        dtype="float32",
        fill_value=np.float32(12345.5),
        compressors=ZstdCodec(level=3),
        attributes={"units": "m"},
    )
    a[...] = plain

    ints = sample("int64", (17, 9, 5), seed=12)
    b = group.create_array(
        "ints",
        shape=ints.shape,
        chunks=(4, 4, 5),
        dtype="int64",
        fill_value=0,
        compressors=BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle"),
    )
    b[...] = ints | 1  # never equal to the fill value

    sharded = sample("uint16", (40, 30), seed=13) | 1
    s = group.create_array(
        "sharded",
        shape=sharded.shape,
        chunks=(5, 5),
        shards=(20, 15),
        dtype="uint16",
        fill_value=0,
        compressors=GzipCodec(level=4),
    )
    s[...] = sharded

    root = rw_dir / name
    assert json.loads((root / "zarr.json").read_text())["node_type"] == "group"
    assert dict(zarr.open_group(str(root), mode="r").attrs) == {"writer": "fsspec", "n": 1}
    _assert_local_equal(root / "plain", plain, {"units": "m"}, 3)
    _assert_local_equal(root / "ints", ints | 1, {}, 3)
    _assert_local_equal(root / "sharded", sharded, {}, 3)
    assert (root / "plain" / "c" / "3" / "2").is_file()  # the partial edge chunk
    assert (root / "sharded" / "c" / "1" / "1").is_file()

    # And what zarrd stored reads back through zarrd with TensorStore too.
    assert_array_equal(ts_read(zarrd.mount_url("rw"), f"{name}/sharded", 3), sharded)


def test_v2_arrays_written_through_zarrd(zarrd, rw_dir, unique):
    name = f"fsspec_v2_{unique}"
    store = fsspec_store(zarrd.mount_url("rw") + name, read_only=False)
    group = zarr.create_group(store, zarr_format=2, attributes={"writer": "fsspec"})

    data = sample("int16", (25, 33), seed=21)
    data[data == 0] = 1
    a = group.create_array(
        "blosc",
        shape=data.shape,
        chunks=(10, 10),
        dtype="int16",
        fill_value=0,
        compressors=numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.SHUFFLE),
        attributes={"long_name": "ints"},
    )
    a[...] = data

    cplx = sample("complex128", (9, 4), seed=22)
    c = group.create_array(
        "complex",
        shape=cplx.shape,
        chunks=(4, 4),
        dtype="complex128",
        fill_value=0,
        compressors=numcodecs.GZip(level=6),
        order="F",
    )
    c[...] = cplx

    root = rw_dir / name
    assert json.loads((root / ".zgroup").read_text()) == {"zarr_format": 2}
    assert json.loads((root / ".zattrs").read_text()) == {"writer": "fsspec"}
    assert json.loads((root / "blosc" / ".zarray").read_text())["compressor"]["id"] == "blosc"
    _assert_local_equal(root / "blosc", data, {"long_name": "ints"}, 2)
    _assert_local_equal(root / "complex", cplx, {}, 2)
    assert (root / "blosc" / "2.3").is_file()

    assert_array_equal(ts_read(zarrd.mount_url("rw"), f"{name}/blosc", 2), data)
