"""The OpenAPI document is valid OpenAPI, checked by openapi-spec-validator.

`tests/openapi.rs` checks that the committed `openapi/openapi.json` is what the code generates;
this checks that what it generates is a valid OpenAPI 3.1 document (structure, references, path
templates and their parameters), so generators and fuzzers (see test_generated_client.py and
test_schemathesis.py) can rely on it.
"""

from __future__ import annotations

import json

import pytest
import requests
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

from zarrd_harness import HTTP_TIMEOUT_S, REPO_ROOT, start_zarrd

DOCUMENT = REPO_ROOT / "openapi" / "openapi.json"


def _errors(doc: dict) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in OpenAPIV31SpecValidator(doc).iter_errors()
    ]


def test_committed_document_is_valid_openapi_3_1():
    doc = json.loads(DOCUMENT.read_text())
    assert doc["openapi"].startswith("3.1"), doc["openapi"]
    errors = _errors(doc)
    assert not errors, "openapi/openapi.json is not valid OpenAPI:\n" + "\n".join(errors)
    validate(doc)  # the library's one-call entry point agrees


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    logs = tmp_path_factory.mktemp("openapi-doc-logs")
    srv = start_zarrd({"mem": "memory://"}, log_path=logs / "zarrd.log")
    yield srv
    srv.stop()


def test_served_document_is_valid_openapi(server):
    r = requests.get(f"{server.url}/openapi.json", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    doc = r.json()
    errors = _errors(doc)
    assert not errors, "GET /openapi.json is not valid OpenAPI:\n" + "\n".join(errors)
    # Every operation has an id (generated clients name their functions after them) and they
    # are unique.
    ids = [
        op["operationId"]
        for item in doc["paths"].values()
        for method, op in item.items()
        if method in {"get", "put", "post", "delete", "patch", "head", "options"}
    ]
    assert len(ids) == len(set(ids)), sorted(ids)
