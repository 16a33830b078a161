"""Schemathesis fuzzes a live zarrd from the committed OpenAPI document.

Every operation of openapi/openapi.json is exercised by `schemathesis run` (pinned in
requirements.txt): its examples, the coverage phase (boundary and invalid values of every
parameter and body) and property-based fuzzing, with a bounded number of cases per operation. A
run fails on any finding of these checks:

- `not_a_server_error`: no 5xx answer (zarrd answers 5xx only for faults of its storage or of
  stored data, which a fresh directory and memory store never have);
- `status_code_conformance`: every status is documented for its operation;
- `content_type_conformance`: every answer's Content-Type is documented for its status;
- `response_schema_conformance`: every JSON answer matches its documented schema;
- `response_headers_conformance`: documented response headers are present and well-formed.

The server under test is started by the harness on 127.0.0.1 (ephemeral port) with no tokens
configured, so, bound to loopback, it lets this loopback client do everything (see README,
"Security"); schemathesis is told not to invent bearer tokens (any token would be a wrong one:
401 everywhere, testing nothing else). Mount `data` is a temporary directory and `mem` a memory
store, both holding a few nodes at the paths the document's examples name, so generated requests
reach real arrays and groups, not only 404s; `scratch` (memory) takes the raw key writes (see
CONFIG). Generated requests may create, overwrite, resize and delete anything.

No operation is excluded. The WebDAV methods (PROPFIND, MKCOL) are not in the document (OpenAPI
cannot describe methods outside HTTP's standard set), so schemathesis does not call them.

Bounded: at most `MAX_EXAMPLES` cases per operation and phase, small request limits on the
server (SERVER_LIMITS), and a timeout for the whole run; it takes about 20 s on two cores.
`ST_ZARRD_SEED` replays a run (the seed is printed in its output; `random` for a new one) and
`ST_ZARRD_EXAMPLES` changes the number of cases; without them the seed is fixed, so CI runs the
same cases every time.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
import requests

from zarrd_harness import HTTP_TIMEOUT_S, REPO_ROOT, start_zarrd

DOCUMENT = REPO_ROOT / "openapi" / "openapi.json"
MAX_EXAMPLES = int(os.environ.get("ST_ZARRD_EXAMPLES", "50"))
RUN_TIMEOUT_S = 240
SEED = os.environ.get("ST_ZARRD_SEED", "20261123")
# Small limits bound the work of one request. Generated requests may resize an array or
# create one with one-element chunks; a selection of them is then answered by reading (or
# writing) one chunk per element, which in a debug build takes tens of seconds for the default
# limits' hundreds of thousands of elements. Beyond these, requests are 413 (documented).
SERVER_LIMITS = {
    "ZARRD_LIMITS__MAX_SELECTION_BYTES": "16384",
    "ZARRD_LIMITS__MAX_JSON_ELEMENTS": "16384",
    "ZARRD_LIMITS__MAX_PUT_BYTES": "1048576",
}
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "response_headers_conformance",
]

# Values schemathesis draws parameters from (with the given probability; otherwise it generates
# them): the mounts, paths and keys of the nodes created below, and selections, formats and
# chunk coordinates that fit them, so reads and writes get past validation too.
CONFIG = """\
[dictionaries.mounts]
values = ["data", "mem"]

[dictionaries.paths]
values = ["climate", "climate/temperature", "arr", "v2", "missing/node"]

[dictionaries.keys]
values = ["arr/zarr.json", "arr/c/0/0", "climate/zarr.json", "climate/", "v2/.zarray", "v2/0.0", "zarr.json"]

[dictionaries.selections]
values = ["0:4,0:4", "...", "0", "-1,::2", "[0,2],1:3", "0,0,0:5", "z=0,y=1:3", "1:2,1:2,1:2"]

[dictionaries.formats]
values = ["raw", "npy", "json"]

[dictionaries.coords]
values = ["0,0", "1,0", "0,0,0", "1,1,1"]

[parameters]
"path.mount" = { dictionary = "mounts", probability = 0.8 }
"path.path" = { dictionary = "paths", probability = 0.6 }
"path.key" = { dictionary = "keys", probability = 0.6 }
"query.sel" = { dictionary = "selections", probability = 0.5 }
"query.format" = { dictionary = "formats", probability = 0.5 }
"query.coords" = { dictionary = "coords", probability = 0.5 }

# Deletes go to the memory mount: on `data` the examples phase alone (DELETE of the mount's
# root and of the example paths) would leave nothing for the other operations to reach.
[[operations]]
include-method = "DELETE"
parameters = { "path.mount" = "mem" }

# Raw key writes go to a mount of their own. The store protocol stores any bytes under a chunk
# key, as it must (clients write encoded chunks); random bytes there are a corrupt chunk, which a
# later slice read rightly answers 502 `corrupt_chunk` (documented): a fault of the stored data,
# not of the read, which would fail `not_a_server_error` without telling anything about zarrd.
[[operations]]
include-operation-id = "put_key"
parameters = { "path.mount" = "scratch" }
"""


def _seed_data(url: str, mount: str) -> None:
    """Nodes at the paths the document's examples and the dictionaries above name."""

    def put(path: str, body: dict) -> None:
        r = requests.put(f"{url}/api/v1/nodes/{mount}/{path}", json=body, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 201, (path, r.status_code, r.text)

    put("climate", {"zarr_format": 3, "node_type": "group", "attributes": {"title": "fixture"}})
    put(
        "climate/temperature",
        {
            "driver": "zarr3",
            "schema": {
                "dtype": "float32",
                "domain": {"shape": [20, 30, 40], "labels": ["z", "y", "x"]},
                "chunk_layout": {"read_chunk": {"shape": [5, 5, 5]}, "write_chunk": {"shape": [10, 10, 10]}},
            },
        },
    )
    put(
        "arr",
        {
            "zarr_format": 3,
            "node_type": "array",
            "shape": [8, 8],
            "data_type": "int16",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        },
    )
    put(
        "v2",
        {
            "zarr_format": 2,
            "shape": [4, 6],
            "chunks": [2, 3],
            "dtype": "<f8",
            "compressor": None,
            "fill_value": "NaN",
            "order": "C",
            "filters": None,
        },
    )
    for path, sel in [("climate/temperature", "0:10,0:10,0:10"), ("arr", "0:4,0:4"), ("v2", "0:2,0:3")]:
        r = requests.put(
            f"{url}/api/v1/data/{mount}/{path}",
            params={"sel": sel, "format": "json"},
            data="1",
            timeout=HTTP_TIMEOUT_S,
        )
        assert r.status_code == 204, (path, r.status_code, r.text)


@pytest.mark.timeout(RUN_TIMEOUT_S + 60)
def test_schemathesis_finds_nothing(tmp_path_factory):
    work = tmp_path_factory.mktemp("schemathesis")
    data = tmp_path_factory.mktemp("schemathesis-data")
    server = start_zarrd(
        {"data": str(data), "mem": "memory://", "scratch": "memory://"},
        log_path=work / "zarrd.log",
        env=SERVER_LIMITS,
    )
    try:
        for mount in ("data", "mem"):
            _seed_data(server.url, mount)
        config = work / "schemathesis.toml"
        config.write_text(CONFIG)
        cmd = [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "--config-file",
            str(config),
            "run",
            str(DOCUMENT),
            "--url",
            server.url,
            "--checks",
            ",".join(CHECKS),
            "--phases",
            "examples,coverage,fuzzing",
            "--max-examples",
            str(MAX_EXAMPLES),
            *([] if SEED == "random" else ["--seed", SEED]),
            "--workers",
            "1",
            "--generation-with-security-parameters",
            "false",
            "--generation-database",
            "none",
            "--request-timeout",
            "60",
            "--no-color",
        ]
        started = time.monotonic()
        try:
            # cwd: anything schemathesis might write stays out of the checkout.
            done = subprocess.run(
                cmd,
                cwd=work,
                capture_output=True,
                text=True,
                timeout=RUN_TIMEOUT_S,
                check=False,
                env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            )
        except subprocess.TimeoutExpired as e:
            partial = (
                (e.stdout or b"").decode(errors="replace")
                if isinstance(e.stdout, bytes)
                else (e.stdout or "")
            )
            pytest.fail(f"schemathesis did not finish within {RUN_TIMEOUT_S} s (seed {SEED}):\n{partial}")
        print(f"schemathesis took {time.monotonic() - started:.1f} s (seed {SEED}, {MAX_EXAMPLES} examples)")
        output = done.stdout + done.stderr
        assert done.returncode == 0, (
            f"schemathesis found problems (exit {done.returncode}, seed {SEED}):\n{output}\n"
            f"--- zarrd log (tail) ---\n{server.log_tail(40)}"
        )
        assert server.proc.poll() is None, f"zarrd exited during the run:\n{server.log_tail(60)}"
        # Every operation of the document was selected and tested.
        selected = re.search(r"Selected: (\d+)/(\d+)", output)
        tested = re.search(r"Tested: (\d+)", output)
        assert selected and tested, output
        assert selected.group(1) == selected.group(2) == tested.group(1), output
        print(output[output.find("Test cases:") :].strip())
    finally:
        server.stop()
