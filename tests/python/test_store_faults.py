"""A misbehaving store server (issue 17, "What to build" 4): zarrd on Azurite through a proxy that
injects faults (503 throttling, resets before and after the store acted, stalls past the client's
timeout, slow and truncated answers) into a share of the store requests.

Every answer must be correct or a clear 502/503/504 (503 and 504 with `Retry-After`); no
acknowledged write may be lost and no chunk torn (a chunk holds one writer's value throughout);
and once the faults stop, zarrd answers everything again. The mount's retry and timeout settings
(`retry`, `options.timeout`) keep each failing request short.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests

from azurite import BlobClient, start_replicas
from fault_proxy import FaultProxy

CHUNK = 16
CHUNKS = 16
THREADS = 4
OPS_PER_THREAD = 30
FAULT_RATE = 0.3
HTTP_TIMEOUT_S = 60
ERRORS = {502, 503, 504}


@pytest.fixture(scope="module")
def container(azurite_endpoint):
    name = f"faults-{uuid.uuid4().hex[:8]}"
    BlobClient(azurite_endpoint).create_container(name)
    return name


@pytest.fixture(scope="module")
def proxy(azurite_endpoint):
    p = FaultProxy(azurite_endpoint, seed=1717).start()
    p.stall_s = 2.5
    yield p
    p.stop()


@pytest.fixture(scope="module")
def server(proxy, container, tmp_path_factory):
    (s,) = start_replicas(
        1, proxy.endpoint, container, tmp_path_factory.mktemp("fault-logs"),
        mount={"retry": {"max_retries": 2, "timeout_ms": 4000, "initial_backoff_ms": 20, "max_backoff_ms": 200},
               "options": {"timeout": "1s", "connect_timeout": "1s"}},
    )  # fmt: skip
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def healthy_after(proxy):
    yield
    proxy.set(0.0)


def array_doc(shape, chunks) -> dict:
    return {
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "uint32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "attributes": {},
    }  # fmt: skip


def check_error(r: requests.Response, seen: Counter) -> None:
    seen[r.status_code] += 1
    assert r.status_code in ERRORS, f"{r.status_code}: {r.text[:300]}"
    body = r.json()["error"]
    assert body["code"] in ("storage_unavailable", "storage_timeout", "write_conflict", "corrupt_chunk",
                            "timeout"), body  # fmt: skip
    if r.status_code in (503, 504):
        assert r.headers.get("Retry-After"), f"{r.status_code} without Retry-After: {body}"


def wait_ready(server, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if requests.get(f"{server.url}/readyz", timeout=10).status_code == 200:
            return
        time.sleep(0.2)
    raise AssertionError("zarrd did not become ready after the faults stopped")


def test_slice_writes_and_reads_under_store_faults(server, proxy, blob, container):
    path = f"arr-{uuid.uuid4().hex[:6]}"
    r = requests.put(f"{server.url}/api/v1/nodes/az/{path}", json=array_doc([CHUNK * CHUNKS], [CHUNK]),
                     timeout=HTTP_TIMEOUT_S)  # fmt: skip
    assert r.status_code == 201, r.text
    # What each chunk may hold: its last acknowledged value, or the value of a failed write made
    # after it (a failed write may or may not have reached the store).
    allowed: dict[int, set[int]] = {c: {0} for c in range(CHUNKS)}
    answers: Counter = Counter()
    proxy.set(FAULT_RATE)

    def worker(t: int) -> None:
        session = requests.Session()
        mine = [c for c in range(CHUNKS) if c % THREADS == t]
        for i in range(OPS_PER_THREAD):
            c = mine[i % len(mine)]
            v = 1 + t * 10_000 + i
            w = session.put(f"{server.url}/api/v1/data/az/{path}", params={"sel": f"{c * CHUNK}:{(c + 1) * CHUNK}"},
                            data=np.full(CHUNK, v, dtype="<u4").tobytes(),
                            headers={"content-type": "application/octet-stream"}, timeout=HTTP_TIMEOUT_S)  # fmt: skip
            if w.status_code == 204:
                answers["write 204"] += 1
                allowed[c] = {v}
            else:
                check_error(w, answers)
                allowed[c].add(v)
            rd = session.get(f"{server.url}/api/v1/data/az/{path}", timeout=HTTP_TIMEOUT_S,
                             params={"sel": f"{c * CHUNK}:{(c + 1) * CHUNK}", "format": "raw"})  # fmt: skip
            if rd.status_code == 200:
                answers["read 200"] += 1
                got = np.frombuffer(rd.content, dtype="<u4")
                assert len(got) == CHUNK and len(set(got.tolist())) == 1, f"chunk {c} torn: {got.tolist()}"
                assert int(got[0]) in allowed[c], f"chunk {c}: read {int(got[0])}, allowed {allowed[c]}"
            else:
                check_error(rd, answers)
            key = session.get(f"{server.url}/zarr/az/{path}/c/{c}", timeout=HTTP_TIMEOUT_S)
            if key.status_code == 200:
                answers["key 200"] += 1
                got = np.frombuffer(key.content, dtype="<u4")
                assert len(key.content) == CHUNK * 4, f"a truncated chunk was served: {len(key.content)} bytes"
                assert len(set(got.tolist())) == 1 and int(got[0]) in allowed[c], got.tolist()
            elif key.status_code != 404:
                check_error(key, answers)

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(worker, range(THREADS)))
    injected = {k: v for k, v in proxy.counts.items() if k != "none"}
    proxy.set(0.0)
    print(f"\nstore faults at rate {FAULT_RATE}: injected {injected} into "
          f"{sum(proxy.counts.values())} store requests; answers {dict(answers)}")  # fmt: skip
    assert sum(injected.values()) > 20 and len(injected) == 6, f"too few faults to prove anything: {injected}"
    assert answers["write 204"] > 0 and answers["read 200"] > 0
    assert sum(answers[s] for s in ERRORS) > 0, "no fault ever reached a client: the retries hid them all"

    # Recovery: ready again, and the store (read directly, and through zarrd) holds, for every
    # chunk, its last acknowledged value or a later failed write's, whole.
    wait_ready(server)
    final = requests.get(f"{server.url}/api/v1/data/az/{path}", params={"format": "raw"}, timeout=HTTP_TIMEOUT_S)
    assert final.status_code == 200, final.text
    through = np.frombuffer(final.content, dtype="<u4").reshape(CHUNKS, CHUNK)
    for c in range(CHUNKS):
        d = blob.get(container, f"{path}/c/{c}")
        direct = np.frombuffer(d.content, dtype="<u4") if d.status_code == 200 else np.zeros(CHUNK, "<u4")
        for got in (direct, through[c]):
            assert len(set(got.tolist())) == 1, f"chunk {c} torn: {got.tolist()}"
            assert int(got[0]) in allowed[c], f"chunk {c}: {int(got[0])} not in {allowed[c]} (acknowledged write lost)"
    # And writes work again.
    w = requests.put(f"{server.url}/api/v1/data/az/{path}", params={"sel": ":"}, timeout=HTTP_TIMEOUT_S,
                     data=np.full(CHUNK * CHUNKS, 7, dtype="<u4").tobytes(),
                     headers={"content-type": "application/octet-stream"})  # fmt: skip
    assert w.status_code == 204, w.text


def test_attribute_merges_under_store_faults(server, proxy, blob, container):
    path = f"attrs-{uuid.uuid4().hex[:6]}"
    r = requests.put(f"{server.url}/api/v1/nodes/az/{path}", json=array_doc([4], [4]), timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 201, r.text
    proxy.set(FAULT_RATE, ("503", "reset_before", "reset_after", "stall", "truncate"))
    acked, failed, seen = [], [], Counter()
    for i in range(40):
        m = requests.patch(f"{server.url}/api/v1/attributes/az/{path}", json={f"a{i:02}": i}, timeout=HTTP_TIMEOUT_S)
        if m.status_code == 200:
            acked.append(f"a{i:02}")
        else:
            check_error(m, seen)
            failed.append(f"a{i:02}")
    proxy.set(0.0)
    wait_ready(server)
    attrs = BlobClient(blob.endpoint).get(container, f"{path}/zarr.json").json()["attributes"]
    lost = [k for k in acked if k not in attrs]
    print(f"\nmerges under faults: {len(acked)} acknowledged, {len(failed)} answered {dict(seen)}, "
          f"{len(lost)} acknowledged lost")  # fmt: skip
    assert acked and not lost, f"acknowledged merges lost: {lost}"
    # After the faults, a merge works again.
    m = requests.patch(f"{server.url}/api/v1/attributes/az/{path}", json={"after": 1}, timeout=HTTP_TIMEOUT_S)
    assert m.status_code == 200 and m.json()["after"] == 1


def test_a_store_that_stops_answering_is_a_timeout_not_a_hang(server, proxy):
    path = f"stall-{uuid.uuid4().hex[:6]}"
    r = requests.put(f"{server.url}/api/v1/nodes/az/{path}", json=array_doc([4], [4]), timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 201, r.text
    proxy.set(1.0, ("stall",))
    started = time.monotonic()
    rd = requests.get(f"{server.url}/zarr/az/{path}/zarr.json", timeout=HTTP_TIMEOUT_S)
    took = time.monotonic() - started
    assert rd.status_code == 504, rd.text
    assert rd.json()["error"]["code"] == "storage_timeout" and rd.headers["Retry-After"]
    # One try and two retries of 1 s timeouts within the 4 s retry window: bounded by the settings.
    assert took < 15, f"took {took:.1f} s"
    proxy.set(1.0, ("503",))
    rd = requests.get(f"{server.url}/zarr/az/{path}/zarr.json", timeout=HTTP_TIMEOUT_S)
    assert rd.status_code == 503 and rd.json()["error"]["code"] == "storage_unavailable" and rd.headers["Retry-After"]
    assert requests.get(f"{server.url}/readyz", timeout=HTTP_TIMEOUT_S).status_code == 503
    proxy.set(0.0)
    wait_ready(server)
    assert requests.get(f"{server.url}/zarr/az/{path}/zarr.json", timeout=HTTP_TIMEOUT_S).status_code == 200


def test_creates_whose_answer_is_lost_still_answer_created(server, proxy, blob, container):
    """A create's write that reaches the store but whose answer is lost (reset after the store
    acted) is retried by the storage client and refused as existing; zarrd then finds the node
    stored exactly as asked and answers 201, never 409 for a node nobody else created."""
    base = f"create-{uuid.uuid4().hex[:6]}"
    proxy.set(0.35, ("reset_after", "503"))
    codes: Counter = Counter()
    created = []
    for i in range(30):
        r = requests.put(f"{server.url}/api/v1/nodes/az/{base}/n{i:02}", json=array_doc([i + 1], [4]),
                         timeout=HTTP_TIMEOUT_S)  # fmt: skip
        codes[r.status_code] += 1
        if r.status_code == 201:
            created.append(i)
        else:
            check_error(r, Counter())
    injected = {k: v for k, v in proxy.counts.items() if k in ("reset_after", "503")}
    proxy.set(0.0)
    print(f"\ncreates under lost answers: {dict(codes)}; faults injected so far {injected}")
    assert codes[409] == 0, f"a create answered 409 for a node only it created: {dict(codes)}"
    wait_ready(server)
    for i in created:
        got = blob.get(container, f"{base}/n{i:02}/zarr.json")
        assert got.status_code == 200 and got.json()["shape"] == [i + 1], f"n{i:02}: acknowledged create lost"
