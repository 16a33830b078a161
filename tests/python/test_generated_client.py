"""A client generated from openapi/openapi.json drives a live zarrd.

openapi-python-client (pinned in requirements.txt) generates a Python package from the committed
document into a temporary directory at test time (nothing generated is committed); the tests
import it and use it against a zarrd on 127.0.0.1 (ephemeral port, a temporary directory and a
memory mount): create an array, write a slice, read it back, describe the node, and the rest of
the REST API. What a generated client can do is what a user of the document gets, so a document
that generates a broken client fails here.

Generator limitations worked around here, each at its use:

- `application/x-npy` is not a content type it knows; `content_type_overrides` makes it treat
  it as the binary (`application/octet-stream`) type it is.
- An operation taking several request content types (`PUT /api/v1/data/...`: JSON, raw, .npy)
  becomes a function that dispatches on `isinstance(body, Any)`, which Python refuses at call
  time. Those requests go through the generated client's own httpx client (same base URL,
  timeout and headers), which is what the generated function would do.
- A response with several content types is parsed as the first (`File`, the raw bytes): a JSON
  answer is decoded from it here.
"""

from __future__ import annotations

import importlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zarrd_harness import REPO_ROOT, start_zarrd

DOCUMENT = REPO_ROOT / "openapi" / "openapi.json"
PACKAGE = "zarrd_generated_client"
GENERATOR_CONFIG = """\
# No formatter run after generating (ruff is not needed to import the package).
post_hooks: []
content_type_overrides:
  application/x-npy: application/octet-stream
  image/png: application/octet-stream
"""


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    """Generates the client package from the committed document and imports it."""
    out = tmp_path_factory.mktemp("generated-client")
    config = out / "generator.yaml"
    config.write_text(GENERATOR_CONFIG)
    cmd = [
        sys.executable,
        "-m",
        "openapi_python_client",
        "generate",
        "--path",
        str(DOCUMENT),
        "--meta",
        "none",
        "--output-path",
        str(out / PACKAGE),
        "--config",
        str(config),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"openapi-python-client failed:\n{output}"
    # Every part of the document must generate: a warning means an operation or a body was
    # left out of the client.
    assert "Warning" not in output and "WARNING" not in output, f"generator warnings:\n{output}"
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("generated-client-data")
    logs = tmp_path_factory.mktemp("generated-client-logs")
    srv = start_zarrd({"disk": str(root), "mem": "memory://"}, log_path=logs / "zarrd.log")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(gen, server):
    # A plain Client: with no tokens configured and a loopback bind, loopback callers may do
    # everything, and any Authorization header would be a wrong token (401). The generated
    # functions of admin and write operations are typed to take an AuthenticatedClient, but
    # only use its httpx client.
    c = gen.Client(base_url=server.url, timeout=30.0, raise_on_unexpected_status=True)
    with c:
        yield c


def _module(gen, dotted: str):
    return importlib.import_module(f"{gen.__name__}.api.{dotted}")


def test_health_and_mounts(gen, client):
    health = _module(gen, "operations.healthz").sync(client=client)
    assert isinstance(health, gen.models.Health)
    assert health.status == "ok"
    mounts = _module(gen, "nodes.list_mounts").sync(client=client)
    assert isinstance(mounts, gen.models.MountList)
    assert {(m.name, m.read_only) for m in mounts.mounts} == {("disk", False), ("mem", False)}


@pytest.mark.parametrize("mount", ["disk", "mem"])
def test_create_write_read_describe(gen, client, mount, unique):
    path = f"gen/{unique}/temperature"
    put_node = _module(gen, "nodes.put_node")
    get_node = _module(gen, "nodes.get_node")
    get_data = _module(gen, "data.get_data")
    models = gen.models

    # Create (PUT node) from a TensorStore spec.
    spec = {
        "driver": "zarr3",
        "schema": {
            "dtype": "float32",
            "domain": {"shape": [6, 8], "labels": ["y", "x"]},
            "chunk_layout": {"read_chunk": {"shape": [2, 4]}, "write_chunk": {"shape": [4, 8]}},
            "fill_value": -1.0,
        },
    }
    created = put_node.sync_detailed(mount, path, client=client, body=models.CreateBody.from_dict(spec))
    assert created.status_code == 201, created.content
    assert isinstance(created.parsed, models.NodeInfo)
    assert created.parsed.shape == [6, 8]
    assert created.headers["location"] == f"/api/v1/nodes/{mount}/{path}"
    # Again with open=true: the node as it is (200).
    opened = put_node.sync_detailed(
        mount, path, client=client, body=models.CreateBody.from_dict(spec), open_=True
    )
    assert opened.status_code == 200, opened.content
    # And without: 409, parsed as the error envelope.
    again = put_node.sync_detailed(mount, path, client=client, body=models.CreateBody.from_dict(spec))
    assert again.status_code == 409
    assert isinstance(again.parsed, models.ErrorBody)
    assert again.parsed.error.code == "already_exists"

    # Write a slice (PUT data). Generator limitation (see the module docstring): the generated
    # put_data cannot send any body, so the request goes through its httpx client.
    block = np.arange(12, dtype="<f4").reshape(3, 4) * 1.5
    http = client.get_httpx_client()
    r = http.put(
        f"/api/v1/data/{mount}/{path}",
        params={"sel": "1:4,2:6"},
        content=block.tobytes(),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 204, r.text
    r = http.put(
        f"/api/v1/data/{mount}/{path}",
        params={"sel": "5,::2", "format": "json"},
        content=json.dumps([7, 8, 9, 10]),
    )
    assert r.status_code == 204, r.text

    expected = np.full((6, 8), -1.0, dtype="<f4")
    expected[1:4, 2:6] = block
    expected[5, ::2] = [7, 8, 9, 10]

    # Read it back (GET data), raw: the 200 answer is a File of the bytes.
    got = get_data.sync_detailed(mount, path, client=client, format_="raw")
    assert got.status_code == 200, got.content
    assert isinstance(got.parsed, gen.types.File)
    assert got.headers["x-zarr-shape"] == "6,8"
    assert got.headers["x-zarr-dtype"] == "<f4"
    assert got.headers["x-zarr-order"] == "C"
    whole = np.frombuffer(got.parsed.payload.read(), dtype="<f4").reshape(6, 8)
    np.testing.assert_array_equal(whole, expected)

    # A selection as JSON (the File holds the JSON text).
    got = get_data.sync_detailed(mount, path, client=client, sel="1:4,2:6", format_="json")
    assert got.status_code == 200, got.content
    assert got.headers["content-type"].startswith("application/json")
    assert json.loads(got.content) == block.tolist()

    # As .npy.
    got = get_data.sync_detailed(mount, path, client=client, sel="5", format_="npy")
    assert got.status_code == 200
    np.testing.assert_array_equal(np.load(io.BytesIO(got.content)), expected[5])

    # The same selection read with a JSON body (POST data, the DataBody model).
    post_data = _module(gen, "data.post_data")
    body = models.DataBody(selection=[[1, 3], "2:6:2"], mode="orthogonal", format_="json")
    got = post_data.sync_detailed(mount, path, client=client, body=body)
    assert got.status_code == 200, got.content
    assert json.loads(got.content) == expected[[1, 3]][:, 2:6:2].tolist()

    # Describe it (GET node): the NodeInfo model.
    info = get_node.sync(mount, path, client=client, stats=True)
    assert isinstance(info, models.NodeInfo), info
    assert (info.mount, info.path, info.node_type, info.zarr_format) == (mount, path, "array", 3)
    assert info.shape == [6, 8]
    assert info.data_type == "float32"
    assert info.fill_value == -1.0
    assert info.chunk_shape == [4, 8]
    assert info.shard_shape == [4, 8]
    assert info.inner_chunk_shape == [2, 4]
    assert info.dimension_names == ["y", "x"]
    assert info.order == "C"
    assert info.metadata["shape"] == [6, 8]
    assert info.stats.stored_chunks == 2  # both shards hold written elements
    # A missing node: 404 in the envelope.
    missing = get_node.sync_detailed(mount, f"gen/{unique}/nope", client=client)
    assert missing.status_code == 404
    assert missing.parsed.error.code == "node_not_found"


def test_group_attributes_resize_consolidate_delete(gen, client, unique):
    models = gen.models
    mount = "mem"
    group = f"g{unique}"
    arr = f"{group}/a"
    put_node = _module(gen, "nodes.put_node")
    created = put_node.sync_detailed(
        mount,
        group,
        client=client,
        body=models.CreateBody.from_dict(
            {"zarr_format": 3, "node_type": "group", "attributes": {"title": "t"}}
        ),
    )
    assert created.status_code == 201, created.content
    zarr_json = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [10],
        "data_type": "int16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {"units": "K"},
    }
    created = put_node.sync_detailed(mount, arr, client=client, body=models.CreateBody.from_dict(zarr_json))
    assert created.status_code == 201, created.content

    # Attributes: read, replace, merge.
    attrs = _module(gen, "nodes.get_attributes").sync(mount, arr, client=client)
    assert attrs.to_dict() == {"units": "K"}
    replaced = _module(gen, "nodes.put_attributes").sync(
        mount, arr, client=client, body=models.PutAttributesBody.from_dict({"units": "degC", "scale": 2})
    )
    assert replaced.to_dict() == {"units": "degC", "scale": 2}
    merged = _module(gen, "nodes.patch_attributes").sync(
        mount,
        arr,
        client=client,
        body=models.PatchAttributesBody.from_dict({"scale": None, "long_name": "T"}),
    )
    assert merged.to_dict() == {"units": "degC", "long_name": "T"}

    # Write the whole array, resize it, and see the chunks outside go.
    http = client.get_httpx_client()
    r = http.put(
        f"/api/v1/data/{mount}/{arr}", params={"format": "json"}, content=json.dumps(list(range(1, 11)))
    )
    assert r.status_code == 204, r.text
    resized = _module(gen, "nodes.resize").sync(
        mount, arr, client=client, body=models.ResizeRequest(shape=[5], shrink_only=True)
    )
    assert isinstance(resized, models.ResizeResult), resized
    assert (resized.shape, resized.deleted_chunks) == ([5], 1)

    # Consolidate the group, then describe it: children from the consolidated metadata.
    done = _module(gen, "nodes.consolidate").sync(mount, group, client=client)
    assert isinstance(done, models.ConsolidateResult), done
    assert (done.key, done.nodes) == (f"{group}/zarr.json", 1)
    info = _module(gen, "nodes.get_node").sync(mount, group, client=client)
    assert info.node_type == "group"
    assert info.consolidated is True
    assert [(c.name, c.node_type, c.shape) for c in info.children] == [("a", "array", [5])]

    # The store protocol: the array's zarr.json as stored (a File of its bytes).
    doc = _module(gen, "store.get_key").sync_detailed(mount, f"{arr}/zarr.json", client=client)
    assert doc.status_code == 200
    assert json.loads(doc.content)["shape"] == [5]

    # Decoded chunk 1 of the resized array: elements 4..7, as stored (the edge chunk is whole).
    chunk = _module(gen, "data.get_chunk").sync_detailed(
        mount, arr, client=client, coords="1", format_="json"
    )
    assert chunk.status_code == 200, chunk.content
    assert json.loads(chunk.content) == [5, 6, 7, 8]

    # Delete: the non-empty group needs recursive=true.
    delete_node = _module(gen, "nodes.delete_node")
    refused = delete_node.sync_detailed(mount, group, client=client)
    assert refused.status_code == 409
    assert refused.parsed.error.code == "not_empty"
    gone = delete_node.sync_detailed(mount, group, client=client, recursive=True)
    assert gone.status_code == 204
    after = _module(gen, "nodes.get_node").sync_detailed(mount, group, client=client)
    assert after.status_code == 404


def test_generated_package_covers_every_operation(gen):
    """Every operation of the document has a generated function."""
    doc = json.loads(DOCUMENT.read_text())
    api_root = Path(gen.__file__).parent / "api"
    generated = {p.stem for p in api_root.rglob("*.py") if p.stem != "__init__"}
    expected = {
        op["operationId"]
        for item in doc["paths"].values()
        for method, op in item.items()
        if method in {"get", "put", "post", "delete", "patch"}
    }
    assert expected <= generated, sorted(expected - generated)
