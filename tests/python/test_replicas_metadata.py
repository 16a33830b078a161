"""Metadata read-modify-writes through three zarrd replicas on one Azurite container lose nothing
(issue 17, "What to build" 2).

Every request goes to the next replica in turn, many at once: attribute merges of distinct keys
(v3 `zarr.json` and v2 `.zattrs`), resizes racing merges on one array, consolidation racing child
creation and group attribute merges, and 32 creates of one node. The stored documents are then read
straight from Azurite (not through zarrd) and every acknowledged change must be in them. The merges
also run through three processes sharing one local directory (`If-Match` under the directory's
lock there).
"""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from azurite import BlobClient, start_replicas
from zarrd_harness import start_zarrd

REPLICAS = 3
MERGES = 160
WORKERS = 16
HTTP_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def container(azurite_endpoint):
    name = f"meta-{uuid.uuid4().hex[:8]}"
    BlobClient(azurite_endpoint).create_container(name)
    return name


@pytest.fixture(scope="module")
def replicas(azurite_endpoint, container, tmp_path_factory):
    servers = start_replicas(REPLICAS, azurite_endpoint, container, tmp_path_factory.mktemp("replica-logs"))
    yield servers
    for s in servers:
        s.stop()


class RoundRobin:
    """Sends each request to the next replica (thread-safe), one requests session per thread."""

    def __init__(self, servers) -> None:
        self.urls = [s.url for s in servers]
        self._next = itertools.count()
        self._lock = threading.Lock()
        self._local = threading.local()

    def __call__(self, method: str, path: str, **kw) -> requests.Response:
        with self._lock:
            url = self.urls[next(self._next) % len(self.urls)]
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session.request(method, f"{url}/api/v1/{path}", timeout=HTTP_TIMEOUT_S, **kw)


def stored_json(blob: BlobClient, container: str, key: str) -> dict:
    r = blob.get(container, key)
    assert r.status_code == 200, f"{key}: {r.status_code}"
    return json.loads(r.content)


def run_all(jobs, workers: int = WORKERS) -> list:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda job: job(), jobs))


def array_doc(shape: list[int], chunks: list[int]) -> dict:
    return {
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {"kept": True},
    }  # fmt: skip


@pytest.mark.parametrize("fmt", [3, 2])
def test_attribute_merges_of_distinct_keys_all_land(replicas, blob, container, fmt):
    api = RoundRobin(replicas)
    base = f"merge{fmt}-{uuid.uuid4().hex[:6]}"
    if fmt == 3:
        body, doc_key = array_doc([10], [5]), f"{base}/zarr.json"
    else:
        body = {"zarr_format": 2, "attributes": {"kept": True}}
        doc_key = f"{base}/.zattrs"
    assert api("PUT", f"nodes/az/{base}", json=body).status_code == 201

    def merge(i: int):
        return lambda: api("PATCH", f"attributes/az/{base}", json={f"k{i:03}": i})

    answers = run_all([merge(i) for i in range(MERGES)])
    codes = [r.status_code for r in answers]
    acknowledged = {f"k{i:03}" for i, r in enumerate(answers) if r.status_code == 200}
    assert codes.count(200) == MERGES, f"not every merge was acknowledged: {sorted(set(codes))}"
    doc = stored_json(blob, container, doc_key)
    attrs = doc["attributes"] if fmt == 3 else doc
    lost = acknowledged - attrs.keys()
    print(f"\nv{fmt}: {MERGES} merges through {REPLICAS} replicas, {len(acknowledged)} acknowledged, "
          f"{len(lost)} lost")  # fmt: skip
    assert not lost, f"{len(lost)} of {len(acknowledged)} acknowledged merges lost: {sorted(lost)[:10]}..."
    assert attrs["kept"] is True
    if fmt == 3:
        assert doc["shape"] == [10] and doc["node_type"] == "array"


def test_resize_racing_merges_loses_neither(replicas, blob, container):
    api = RoundRobin(replicas)
    base = f"resize-{uuid.uuid4().hex[:6]}"
    assert api("PUT", f"nodes/az/{base}", json=array_doc([100, 4], [10, 4])).status_code == 201
    resizes = 24
    merges = 96
    stop = threading.Event()

    def resizer() -> list[int]:
        # One after another, growing: the last one acknowledged is the shape that must stay.
        shapes = []
        try:
            for k in range(1, resizes + 1):
                r = api("POST", f"resize/az/{base}", json={"shape": [100 + k, 4], "expand_only": True})
                assert r.status_code == 200, r.text
                shapes.append(r.json()["shape"][0])
        finally:
            stop.set()
        return shapes

    def merge(i: int):
        return lambda: api("PATCH", f"attributes/az/{base}", json={f"m{i:03}": i})

    with ThreadPoolExecutor(WORKERS) as pool:
        shapes_f = pool.submit(resizer)
        merged = list(pool.map(lambda job: job(), [merge(i) for i in range(merges)]))
        shapes = shapes_f.result(timeout=120)
    assert [r.status_code for r in merged].count(200) == merges, {r.status_code for r in merged}
    assert shapes == [100 + k for k in range(1, resizes + 1)]
    doc = stored_json(blob, container, f"{base}/zarr.json")
    lost = {f"m{i:03}" for i in range(merges)} - doc["attributes"].keys()
    print(f"\nresize racing merges: {resizes} resizes, {merges} merges, final shape {doc['shape']}, "
          f"{len(lost)} merges lost")  # fmt: skip
    assert doc["shape"] == [100 + resizes, 4], "a merge wrote back an older shape"
    assert not lost, f"resizes lost {len(lost)} merges"


def test_consolidate_racing_child_creation_and_merges(replicas, blob, container):
    api = RoundRobin(replicas)
    base = f"cons-{uuid.uuid4().hex[:6]}"
    assert api("PUT", f"nodes/az/{base}", json={"zarr_format": 3, "node_type": "group"}).status_code == 201
    children, merges, consolidations = 36, 48, 24
    jobs = []
    for i in range(max(children, merges, consolidations)):
        if i < children:
            # Nested under a parent group created on demand by whichever create gets there first.
            jobs.append(lambda i=i: api("PUT", f"nodes/az/{base}/p{i % 4}/c{i:02}", json=array_doc([4], [2])))
        if i < merges:
            jobs.append(lambda i=i: api("PATCH", f"attributes/az/{base}", json={f"g{i:02}": i}))
        if i < consolidations:
            jobs.append(lambda: api("POST", f"consolidate/az/{base}"))
    answers = run_all(jobs)
    bad = [(r.request.method, r.url, r.status_code, r.text[:200]) for r in answers if r.status_code not in (200, 201)]
    assert not bad, bad[:5]
    doc = stored_json(blob, container, f"{base}/zarr.json")
    lost = {f"g{i:02}" for i in range(merges)} - doc["attributes"].keys()
    assert not lost, f"consolidations lost {len(lost)} group attribute merges"
    assert "consolidated_metadata" in doc, "a merge dropped the consolidated metadata"
    # Every child exists, each parent group was written once (as a group), and a consolidation made
    # now, with nothing racing it, lists them all.
    names = set(blob.list_names(container, f"{base}/"))
    for i in range(children):
        assert f"{base}/p{i % 4}/c{i:02}/zarr.json" in names
    for p in range(4):
        assert stored_json(blob, container, f"{base}/p{p}/zarr.json")["node_type"] == "group"
    assert api("POST", f"consolidate/az/{base}").status_code == 200
    listed = stored_json(blob, container, f"{base}/zarr.json")["consolidated_metadata"]["metadata"]
    assert len(listed) == children + 4
    assert {f"g{i:02}" for i in range(merges)} <= stored_json(blob, container, f"{base}/zarr.json")["attributes"].keys()
    print(f"\nconsolidate racing creation: {children} children, {merges} merges, {consolidations} "
          f"consolidations, 0 lost")  # fmt: skip


def test_creates_of_one_node_have_one_winner(replicas, blob, container):
    api = RoundRobin(replicas)
    base = f"once-{uuid.uuid4().hex[:6]}"
    start = threading.Barrier(32, timeout=30)

    def create(i: int):
        def job():
            start.wait()
            doc = array_doc([i + 1], [1])
            return api("PUT", f"nodes/az/{base}/a", json=doc)

        return job

    answers = run_all([create(i) for i in range(32)], workers=32)
    codes = sorted(r.status_code for r in answers)
    assert codes.count(201) == 1, codes
    assert codes.count(409) == 31, codes
    winner = next(i for i, r in enumerate(answers) if r.status_code == 201)
    assert stored_json(blob, container, f"{base}/a/zarr.json")["shape"] == [winner + 1]
    assert all(r.json()["error"]["code"] == "already_exists" for r in answers if r.status_code == 409)


def test_attribute_merges_through_three_processes_on_one_directory(tmp_path):
    data = tmp_path / "shared"
    data.mkdir()
    servers = []
    try:
        for i in range(REPLICAS):
            servers.append(start_zarrd({"d": str(data)}, log_path=tmp_path / f"zarrd-dir-{i}.log"))
        api = RoundRobin(servers)
        for path, body, doc in [
            ("v3", array_doc([10], [5]), "v3/zarr.json"),
            ("v2", {"zarr_format": 2, "attributes": {"kept": True}}, "v2/.zattrs"),
        ]:
            assert api("PUT", f"nodes/d/{path}", json=body).status_code == 201
            answers = run_all([lambda i=i, path=path: api("PATCH", f"attributes/d/{path}", json={f"k{i:03}": i})
                               for i in range(MERGES)])  # fmt: skip
            assert [r.status_code for r in answers].count(200) == MERGES, {r.status_code for r in answers}
            stored = json.loads((data / doc).read_text())
            attrs = stored["attributes"] if path == "v3" else stored
            lost = {f"k{i:03}" for i in range(MERGES)} - attrs.keys()
            print(f"\n{path} on one directory, {REPLICAS} processes: {MERGES} merges, {len(lost)} lost")
            assert not lost, f"{len(lost)} acknowledged merges lost on a shared directory"
    finally:
        for s in servers:
            s.stop()
