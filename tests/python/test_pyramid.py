"""OME-Zarr pyramids built by zarrd as jobs, checked against TensorStore and the OME schemas.

TensorStore writes the source arrays (v3 plain and sharded, v2) with chunks missing; zarrd
builds the pyramid (`POST /api/v1/pyramids/...`, then `GET /api/v1/jobs/...` until it ends).
Checked: the group's `multiscales` metadata validates against the OME-Zarr 0.5 (v3) or 0.4
(v2) JSON Schema (tests/fixtures/ome) with the right levels, axes and scales; every level's
array carries the axes as `dimension_names` (v3); level 0's chunks are the source's bytes, key
for key; every level equals `ts.downsample(level 0, cumulative factors, method)` read
in-process; zarr-python opens every level. Then `kill -9` of the server in the middle of a
build, a restart, and the same request: the job resumes (chunks found done are skipped) and
every level equals the reference. Cancelling by DELETE stops a job; the same request resumes it.
"""

from __future__ import annotations

import io
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import referencing
import tensorstore as ts
import zarr

from zarrd_harness import start_zarrd

SCHEMAS = Path(__file__).resolve().parents[1] / "fixtures" / "ome"
POLL_S = 0.05
MAX_POLLS = 2400  # 120 s at most per job


def request(method: str, url: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, json.loads(e.read() or b"null")


def wait(server, status):
    url = f"{server.url}/api/v1/jobs/{status['mount']}/{status['id']}"
    for _ in range(MAX_POLLS):
        code, _, status = request("GET", url)
        assert code == 200, status
        if status["state"] != "running":
            return status
        time.sleep(POLL_S)
    raise AssertionError(f"the job did not end: {status}")


def build_pyramid(server, mount: str, source: str, body: dict) -> dict:
    """POSTs a pyramid request and waits for the job to complete; its final status."""
    code, _, status = request("POST", f"{server.url}/api/v1/pyramids/{mount}/{source}", body)
    assert code == 202, status
    done = wait(server, status)
    assert done["state"] == "completed", done
    return done


def make_source(root: Path, name: str, dtype: str, shape, chunk, version=3, shard=None, fill=0):
    layout = {"read_chunk": {"shape": chunk}, "write_chunk": {"shape": shard or chunk}}
    spec = {
        "driver": "zarr3" if version == 3 else "zarr",
        "kvstore": {"driver": "file", "path": str(root / name)},
        "schema": {"dtype": dtype, "domain": {"shape": list(shape)}, "chunk_layout": layout, "fill_value": fill},
        "create": True,
    }
    if version == 3:
        spec["metadata"] = {"dimension_names": ["z", "y", "x"][3 - len(shape):]}
        spec["schema"]["codec"] = {"driver": "zarr3", "codecs": [{"name": "bytes"}, {"name": "zstd"}]} if not shard else None
        if spec["schema"]["codec"] is None:
            del spec["schema"]["codec"]
    t = ts.open(spec).result()
    rng = np.random.default_rng(len(name))
    if dtype.startswith("float"):
        data = (rng.standard_normal(shape) * 50).astype(dtype)
    else:
        data = rng.integers(0, 9, shape).astype(dtype)
    # The last part along the first dimension stays missing: the fill value takes part.
    stored = shape[0] * 2 // 3
    t[:stored].write(data[:stored]).result()
    return t


def validate(attrs: dict, version: str):
    schema = json.loads((SCHEMAS / f"ome-zarr-{version}-image.schema.json").read_text())
    version_schema = referencing.Resource.from_contents(
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "string", "enum": ["0.5"]}
    )
    registry = referencing.Registry().with_resource(
        "https://ngff.openmicroscopy.org/0.5/schemas/_version.schema", version_schema
    )
    jsonschema.Draft202012Validator(schema, registry=registry).validate(attrs)


def open_level(root: Path, group: str, level: int, version: int):
    driver = "zarr3" if version == 3 else "zarr"
    return ts.open({"driver": driver, "kvstore": {"driver": "file", "path": str(root / group / str(level))}}).result()


def check_pyramid(root: Path, source: str, group: str, method: str, factors, version: int, n_levels=None):
    """The group's metadata and every level against TensorStore's downsample of level 0.

    `factors`: one list for every level, or one list per level after level 0."""
    g = zarr.open_group(str(root / group), mode="r")
    if version == 3:
        attrs = dict(g.attrs)
        validate(attrs, "0.5")
        ms = attrs["ome"]["multiscales"][0]
        assert attrs["ome"]["version"] == "0.5"
    else:
        attrs = dict(g.attrs)
        validate(attrs, "0.4")
        ms = attrs["multiscales"][0]
        assert ms["version"] == "0.4"
    datasets = ms["datasets"]
    if n_levels is not None:
        assert len(datasets) == n_levels
    steps = factors if isinstance(factors[0], list) else [factors] * (len(datasets) - 1)
    assert len(steps) == len(datasets) - 1
    rank = len(steps[0])
    assert [a["name"] for a in ms["axes"]] == ["z", "y", "x"][3 - rank:]
    assert all(a["type"] == "space" for a in ms["axes"])
    level0 = open_level(root, group, 0, version)
    src = ts.open({"driver": "zarr3" if version == 3 else "zarr",
                   "kvstore": {"driver": "file", "path": str(root / source)}}).result()
    np.testing.assert_array_equal(level0.read().result(), src.read().result())
    # Level 0 is the source's chunks, key for key (never re-encoded).
    src_files = {p.relative_to(root / source): p.read_bytes() for p in (root / source).rglob("*")
                 if p.is_file() and p.name not in ("zarr.json", ".zarray", ".zattrs")}
    dst_files = {p.relative_to(root / group / "0"): p.read_bytes() for p in (root / group / "0").rglob("*")
                 if p.is_file() and p.name not in ("zarr.json", ".zarray", ".zattrs")}
    assert src_files == dst_files and src_files
    cumulative = [1] * rank
    for k, ds in enumerate(datasets):
        assert ds["path"] == str(k)
        assert ds["coordinateTransformations"] == [{"type": "scale", "scale": [float(c) for c in cumulative]}]
        level = open_level(root, group, k, version)
        expected = ts.downsample(level0, cumulative, method).read().result()
        got = level.read().result()
        assert got.shape == expected.shape, (k, got.shape, expected.shape)
        np.testing.assert_array_equal(got, expected, err_msg=f"level {k}")
        if version == 3:
            assert zarr.open_array(str(root / group / str(k)), mode="r").metadata.dimension_names == tuple(
                ["z", "y", "x"][3 - rank:]
            )
        # zarr-python reads the level too.
        np.testing.assert_array_equal(zarr.open_array(str(root / group / str(k)), mode="r")[...], got)
        if k < len(steps):
            cumulative = [c * f for c, f in zip(cumulative, steps[k])]
    return datasets


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("pyramids")


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    return tmp_path_factory.mktemp("logs")


def test_pyramids_of_v3_v2_and_sharded_arrays_equal_tensorstore(root, logs):
    make_source(root, "vol", "float32", (37, 70, 51), [8, 16, 16])
    make_source(root, "counts", "uint16", (30, 41), [8, 8], version=2, fill=7)
    make_source(root, "labels", "uint8", (20, 40, 36), [4, 8, 8], shard=[8, 16, 16])
    server = start_zarrd({"p": root.as_uri()}, log_path=logs / "zarrd-pyramid.log")
    try:
        cases = [
            ("vol", "mean", {"method": "mean"}, [2, 2, 2], 3, 4),
            ("counts", "min", {"method": "min", "levels": 3, "destination": "counts_ms"}, [2, 2], 2, 3),
            ("labels", "mode", {"method": "mode", "factors": [1, 2, 2]}, [1, 2, 2], 3, None),
        ]
        for source, method, body, factors, version, levels in cases:
            code, headers, status = request("POST", f"{server.url}/api/v1/pyramids/p/{source}", body)
            assert code == 202, status
            assert headers["location"] == f"/api/v1/jobs/p/{status['id']}"
            done = wait(server, status)
            assert done["state"] == "completed", done
            assert done["chunks_done"] == done["chunks_total"] > 0
            assert done["bytes_written"] > 0 and done["elapsed_seconds"] > 0
            group = body.get("destination", f"{source}_pyramid")
            datasets = check_pyramid(root, source, group, method, factors, version, levels)
            assert done["levels"] == len(datasets)
            # The same request again: the same job runs again and finds everything done.
            code, _, again = request("POST", f"{server.url}/api/v1/pyramids/p/{source}", body)
            assert code == 202 and again["id"] == status["id"], again
            again = wait(server, again)
            assert again["state"] == "completed", again
            stored = [p for p in (root / group).rglob("*")
                      if p.is_file() and p.name not in ("zarr.json", ".zarray", ".zattrs", ".zgroup")]
            # Every stored chunk is found done; only chunks never stored (all fill) are looked at again.
            assert again["chunks_skipped"] == len(stored) > 0, (again, len(stored))
            assert again["chunks_total"] == done["chunks_total"]
        # level= reads a level of the multiscale group (v3 0.5 and v2 0.4), selections included.
        for group, version, level, sel in [("vol_pyramid", 3, 2, "1:7,::2,3"), ("counts_ms", 2, 1, "2:9,-3:")]:
            url = f"{server.url}/api/v1/data/p/{group}?level={level}&format=npy&sel={sel}"
            with urllib.request.urlopen(url, timeout=30) as r:
                got = np.load(io.BytesIO(r.read()))
            whole = open_level(root, group, level, version).read().result()
            index = tuple(
                int(p) if ":" not in p else slice(*[int(x) if x else None for x in p.split(":")]) for p in sel.split(",")
            )
            np.testing.assert_array_equal(got, whole[index])
        for target, words in [("vol_pyramid?level=4", "level 4: the group has 4 levels (0 to 3)"),
                              ("vol?level=0", "is an array"), ("vol_pyramid/1?level=0", "is an array")]:
            code, _, answer = request("GET", f"{server.url}/api/v1/data/p/{target}")
            assert code == 400 and answer["error"]["message"].startswith("level:"), answer
            assert words in answer["error"]["message"], answer
        # Jobs are in the metrics.
        with urllib.request.urlopen(f"{server.url}/metrics", timeout=30) as r:
            metrics = r.read().decode()
        assert 'zarrd_jobs{state="completed"} 3' in metrics and "zarrd_job_chunks_done " in metrics, metrics[-2000:]
        # Level chunks of nothing but the fill value (the sources' missing thirds) are not
        # written, nor deleted: they were found missing (a delete per chunk on S3 before).
        deletes = [line for line in metrics.splitlines()
                   if line.startswith("zarrd_storage_operation_duration_seconds_count") and 'op="delete' in line]
        assert all(line.endswith(" 0") for line in deletes), deletes
    finally:
        server.stop()


def test_request_options_per_level_factors_coarsest_chunks_and_codecs(root, logs):
    """Per-level factors, a coarsest size, the levels' chunk shape and codecs: the levels have the
    requested layout (zarr-python and TensorStore read it) and still equal TensorStore's downsample
    of level 0 by the cumulative factors."""
    make_source(root, "opt_vol", "float32", (37, 70, 51), [8, 16, 16])
    make_source(root, "opt_counts", "int16", (30, 41), [8, 8], version=2, fill=7)
    make_source(root, "opt_labels", "uint8", (20, 40, 36), [4, 8, 8], shard=[8, 16, 16])
    server = start_zarrd({"p": root.as_uri()}, log_path=logs / "zarrd-pyramid-options.log")
    zstd = [{"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 5, "checksum": False}}]
    inner = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "gzip", "configuration": {"level": 3}}]
    sharding = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [2, 4, 4], "codecs": inner,
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
        "index_location": "end"}}]
    cases = [
        # Per-level factors, other chunks and codecs (v3).
        ("opt_vol", "mean", {"factors": [[1, 2, 2], [2, 2, 2], [3, 1, 2]], "chunks": [5, 12, 9], "codecs": zstd},
         [[1, 2, 2], [2, 2, 2], [3, 1, 2]], 3, 4, [5, 12, 9]),
        # A coarsest size: every dimension at most 10 (37 -> 19 -> 10, 70 -> 35 -> 18 -> 9).
        ("opt_vol", "median", {"method": "median", "coarsest": 10, "destination": "opt_vol_c10"},
         [2, 2, 2], 3, 4, [8, 16, 16]),
        # v2: chunks, compressor and filters.
        ("opt_counts", "max", {"method": "max", "factors": [[2, 3], [2, 2]], "chunks": [6, 5],
                               "compressor": {"id": "zlib", "level": 4}, "filters": None},
         [[2, 3], [2, 2]], 2, 3, [6, 5]),
        # Sharded: another shard shape and another sharding codec (inner chunks, codecs).
        ("opt_labels", "mode", {"method": "mode", "factors": [1, 2, 2], "levels": 3, "chunks": [4, 8, 8],
                                "codecs": sharding},
         [1, 2, 2], 3, 3, [4, 8, 8]),
    ]
    try:
        for source, method, body, factors, version, levels, chunks in cases:
            code, _, status = request("POST", f"{server.url}/api/v1/pyramids/p/{source}", body)
            assert code == 202, status
            done = wait(server, status)
            assert done["state"] == "completed", done
            assert done["levels"] == levels, done
            group = body.get("destination", f"{source}_pyramid")
            check_pyramid(root, source, group, method, factors, version, levels)
            for k in range(1, levels):
                arr = zarr.open_array(str(root / group / str(k)), mode="r")
                level = open_level(root, group, k, version)
                if version == 3:
                    meta = json.loads((root / group / str(k) / "zarr.json").read_text())
                    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == chunks, meta
                    assert meta["codecs"] == body.get("codecs", meta["codecs"])
                    assert list(level.chunk_layout.write_chunk.shape) == chunks
                    if "codecs" in body and "sharding" in json.dumps(body["codecs"]):
                        assert list(level.chunk_layout.read_chunk.shape) == [2, 4, 4]
                        assert arr.shards == tuple(chunks) and arr.chunks == (2, 4, 4)
                    else:
                        assert arr.chunks == tuple(chunks)
                        assert [c["name"] for c in meta["codecs"]] == [c["name"] for c in body.get("codecs", zstd)] \
                            or "codecs" not in body
                else:
                    meta = json.loads((root / group / str(k) / ".zarray").read_text())
                    assert meta["chunks"] == chunks and meta["compressor"] == {"id": "zlib", "level": 4}, meta
                    assert arr.chunks == tuple(chunks)
                    assert list(level.chunk_layout.read_chunk.shape) == chunks
            # Level 0 keeps the source's layout.
            src_meta = (root / source / ("zarr.json" if version == 3 else ".zarray")).read_text()
            lvl0_meta = json.loads((root / group / "0" / ("zarr.json" if version == 3 else ".zarray")).read_text())
            key = "chunk_grid" if version == 3 else "chunks"
            assert lvl0_meta[key] == json.loads(src_meta)[key]
        # Another layout into an existing pyramid is refused, not mixed in.
        code, _, status = request("POST", f"{server.url}/api/v1/pyramids/p/opt_vol",
                                  {"factors": [[1, 2, 2], [2, 2, 2], [3, 1, 2]], "chunks": [5, 12, 10], "codecs": zstd})
        assert code == 409 and "another request" in status["error"]["message"], status
    finally:
        server.stop()


def test_one_pass_streams_holds_and_falls_back_exactly(root, logs):
    """One pass over level 0 with a small slab (limits.read_slab_bytes = 16 KiB): on a
    (40, 100, 100) float32 array in (4, 8, 8) chunks with factors [1, 2, 2] and 6 levels,
    blocks are level 2's chunk footprint (4, 32, 32) = 16 KiB, so levels 1-2 are written block
    by block, level 3 (27 KiB) is held in memory (two slabs: 32 KiB), and levels 4-5 are
    computed afterwards through the downsampled view. Every level equals TensorStore's
    downsample of level 0 (mean: from level 0; max: chained), edges and missing chunks included."""
    make_source(root, "pass_vol", "float32", (40, 100, 100), [4, 8, 8])
    server = start_zarrd({"p": root.as_uri()}, log_path=logs / "zarrd-pyramid-onepass.log",
                         env={"ZARRD_LIMITS__READ_SLAB_BYTES": "16384"})
    try:
        for method in ["mean", "max", "median"]:
            body = {"method": method, "factors": [1, 2, 2], "levels": 6, "destination": f"pass_{method}"}
            code, _, status = request("POST", f"{server.url}/api/v1/pyramids/p/pass_vol", body)
            assert code == 202, status
            done = wait(server, status)
            assert done["state"] == "completed", done
            assert done["chunks_done"] == done["chunks_total"] > 0, done
            check_pyramid(root, "pass_vol", f"pass_{method}", method, [1, 2, 2], 3, 6)
    finally:
        server.stop()
    # The three ways were taken: levels 1-2 streamed in (4, 32, 32) blocks, level 3 held.
    log = (logs / "zarrd-pyramid-onepass.log").read_text()
    passes = [line for line in log.splitlines() if "one pass over level 0" in line]
    assert len(passes) == 3 and all("streamed=2" in p and "held=3" in p and "[4, 32, 32]" in p for p in passes), passes


@pytest.mark.parametrize(
    "body, field",
    [
        ({"factors": [2, 2]}, "factors"),
        ({"factors": [2, 0, 2]}, "factors[1]"),
        ({"factors": [2, 2, 2**40]}, "factors[2]"),
        ({"levels": 0}, "levels"),
        ({"levels": 33}, "levels"),
        ({"method": "average"}, "request body: `method`: unknown variant `average`"),
        ({"destination": "../x"}, "destination"),
        ({"destination": "bad_src"}, "destination"),
        ({"factors": [[2, 2, 2], [2, 2]]}, "factors[1]: 2 factors"),
        ({"factors": [[2, 2, 2], [2, 2**62, 2]]}, "factors[1][1]"),
        ({"factors": [[2, 2, 2]] * 1000}, "factors: 1000 levels"),
        ({"factors": [[2, 2, 2]], "levels": 3}, "levels"),
        ({"coarsest": 0}, "coarsest"),
        ({"coarsest": [4, 4]}, "coarsest: 2 extents"),
        ({"coarsest": 4, "levels": 2}, "coarsest"),
        ({"chunks": [3, 3, 0]}, "chunks[2]"),
        ({"chunks": [2**40, 2**40, 2**40]}, "chunks: "),
        ({"codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "lz4hc"}]}, "codecs: "),
        ({"codecs": [{"name": "crc32c"}] * 100}, "codecs: 100 entries"),
        ({"codecs": "zstd"}, "codecs: "),
        ({"compressor": {"id": "zlib"}}, "compressor: a Zarr v3 source"),
    ],
)
def test_bad_requests_answer_400_naming_the_member(root, logs, body, field):
    make_source(root, "bad_src", "int32", (6, 6, 6), [3, 3, 3]) if not (root / "bad_src").exists() else None
    server = start_zarrd({"p": root.as_uri()}, log_path=logs / "zarrd-pyramid-bad.log")
    try:
        code, _, answer = request("POST", f"{server.url}/api/v1/pyramids/p/bad_src", body)
        assert code == 400, answer
        assert answer["error"]["message"].startswith(field), answer
    finally:
        server.stop()


def test_kill_9_in_the_middle_then_the_same_request_resumes(root, logs):
    shape = (48, 192, 192)
    make_source(root, "big", "float32", shape, [8, 32, 32])
    body = {"method": "mean"}
    # A 1 MiB slab: level 1 is written block by block, levels 2-4 are held until the pass ends.
    slab = {"ZARRD_LIMITS__READ_SLAB_BYTES": str(1 << 20)}
    server = start_zarrd({"p": root.as_uri()}, log_path=logs / "zarrd-pyramid-kill.log", env=slab)
    killed_at = None
    try:
        code, _, status = request("POST", f"{server.url}/api/v1/pyramids/p/big", body)
        assert code == 202, status
        url = f"{server.url}/api/v1/jobs/p/{status['id']}"
        for _ in range(MAX_POLLS):
            _, _, st = request("GET", url)
            if st["state"] != "running" or st["level"] >= 1 and st["chunks_done"] > st["chunks_total"] * 0.8:
                break
            time.sleep(0.01)
        assert st["state"] == "running", f"the build ended before it could be killed: {st}"
        killed_at = st
        server.proc.kill()  # SIGKILL: no shutdown, no cleanup
        server.proc.wait(timeout=30)
    finally:
        server.stop()
    group = root / "big_pyramid"
    assert "ome" not in json.loads((group / "zarr.json").read_text()).get("attributes", {}), "not complete yet"
    server = start_zarrd({"p": root.as_uri()}, log_path=logs / "zarrd-pyramid-resume.log", env=slab)
    try:
        code, _, status = request("POST", f"{server.url}/api/v1/pyramids/p/big", body)
        assert code == 202, status
        done = wait(server, status)
        assert done["state"] == "completed", done
        # What the first server finished was found in the store, not redone.
        assert done["chunks_skipped"] >= killed_at["chunks_done"] // 2 > 0, (killed_at, done)
    finally:
        server.stop()
    check_pyramid(root, "big", "big_pyramid", "mean", [2, 2, 2], 3)


def test_cancel_stops_a_job_and_the_same_request_resumes_it(root, logs):
    make_source(root, "cancel_me", "int16", (40, 160, 160), [8, 32, 32])
    server = start_zarrd({"p": root.as_uri()}, log_path=logs / "zarrd-pyramid-cancel.log")
    try:
        body = {"method": "max"}
        code, _, status = request("POST", f"{server.url}/api/v1/pyramids/p/cancel_me", body)
        assert code == 202, status
        url = f"{server.url}/api/v1/jobs/p/{status['id']}"
        code, _, cancelled = request("DELETE", url)
        assert code == 200 and cancelled["state"] == "cancelled", cancelled
        _, _, after = request("GET", url)
        assert after["state"] == "cancelled"
        code, _, again = request("GET", f"{server.url}/api/v1/jobs/p/pyramid-0000000000000000")
        assert code == 404
        code, _, resumed = request("POST", f"{server.url}/api/v1/pyramids/p/cancel_me", body)
        assert code == 202 and resumed["id"] == status["id"]
        done = wait(server, resumed)
        assert done["state"] == "completed", done
    finally:
        server.stop()
    check_pyramid(root, "cancel_me", "cancel_me_pyramid", "max", [2, 2, 2], 3)
