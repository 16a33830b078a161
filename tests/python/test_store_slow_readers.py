"""A large object on an object store, streamed to a client slower than the store's request timeout.

Object-store GETs over 4 MiB are handed on as the store sends them, so the
upstream request lasts as long as the client takes to read. The store
client's request timeout (object_store's `timeout`, 30 s by default) and
retry budget (`retry.timeout_ms`, 3 min) then run out long before a slow
client is done; every byte must still arrive, from the version the answer
started with. Here the timeout is 2 s and the budget 1 retry in 2 s, and
the client reads for about 8 s.
"""

from __future__ import annotations

import hashlib
import socket
import threading
import time
import uuid

import pytest

from azurite import write_config
from zarrd_harness import start_zarrd

BUCKET = "slow-readers"
SIZE = 24 * 1024 * 1024
READ_BYTES_PER_S = 3 * 1024 * 1024
PIECE = 64 * 1024
DEADLINE_S = 60


@pytest.fixture(scope="module")
def store(moto, logs_dir):
    s3 = moto.client()
    s3.create_bucket(Bucket=BUCKET)
    config = write_config(
        logs_dir / "zarrd-slow-readers.toml",
        {
            "lake": {
                "url": f"s3://{BUCKET}/lake",
                "retry": {"max_retries": 1, "timeout_ms": 2000},
                "options": {"timeout": "2s"},
            }
        },
    )
    server = start_zarrd(
        {}, log_path=logs_dir / "zarrd-slow-readers.log", env=moto.zarrd_env(), extra_args=["--config", str(config)]
    )
    yield server, s3
    server.stop()


def slow_get(base: str, key: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET over one raw socket, reading the body at READ_BYTES_PER_S (a client on a slow link)."""
    host, port = base.removeprefix("http://").split("/", 1)[0].split(":")
    path = "/" + base.removeprefix("http://").split("/", 1)[1] + key
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, PIECE)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{extra}\r\n".encode())
    raw = b""
    while b"\r\n\r\n" not in raw:
        got = sock.recv(PIECE)
        assert got, "the connection closed before the headers"
        raw += got
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    fields = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    want = int(fields["content-length"])
    started = time.monotonic()
    parts = [body]
    have = len(body)
    while have < want and time.monotonic() - started < DEADLINE_S:
        got = sock.recv(PIECE)
        if not got:
            break
        parts.append(got)
        have += len(got)
        # Keep to the pace: sleep until the bytes so far are due.
        ahead = have / READ_BYTES_PER_S - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
    sock.close()
    return status, fields, b"".join(parts)


def test_a_client_slower_than_the_store_timeout_gets_every_byte(store):
    server, s3 = store
    key = f"big-{uuid.uuid4().hex[:8]}.bin"
    data = bytes(range(256)) * (SIZE // 256)
    s3.put_object(Bucket=BUCKET, Key=f"lake/{key}", Body=data)
    started = time.monotonic()
    status, fields, body = slow_get(server.mount_url("lake"), key)
    took = time.monotonic() - started
    assert status == 200
    assert int(fields["content-length"]) == SIZE
    # Slower than the store's 2 s request timeout and its 2 s retry budget.
    assert took > 5, f"the read took {took:.1f} s, not slow enough to outlast the store's timeout"
    assert len(body) == SIZE, f"{len(body)} of {SIZE} bytes arrived in {took:.1f} s"
    assert hashlib.sha256(body).digest() == hashlib.sha256(data).digest()


def test_a_slow_ranged_read_gets_its_range(store):
    server, s3 = store
    key = f"big-{uuid.uuid4().hex[:8]}.bin"
    data = bytes(range(256)) * (SIZE // 256)
    s3.put_object(Bucket=BUCKET, Key=f"lake/{key}", Body=data)
    first, last = 1000, SIZE - 3001
    status, fields, body = slow_get(server.mount_url("lake"), key, {"Range": f"bytes={first}-{last}"})
    assert status == 206
    assert fields["content-range"] == f"bytes {first}-{last}/{SIZE}"
    assert body == data[first : last + 1]


def test_an_object_replaced_while_slowly_sent_ends_the_answer_short(store):
    """The rest of an answer never comes from another version of the object."""
    server, s3 = store
    key = f"big-{uuid.uuid4().hex[:8]}.bin"
    data = bytes(range(256)) * (SIZE // 256)
    s3.put_object(Bucket=BUCKET, Key=f"lake/{key}", Body=data)
    other = bytes(255 - b for b in data[:4096]) * (SIZE // 4096)

    def replace_later() -> None:
        time.sleep(3)
        s3.put_object(Bucket=BUCKET, Key=f"lake/{key}", Body=other)

    t = threading.Thread(target=replace_later, daemon=True)
    t.start()
    status, fields, body = slow_get(server.mount_url("lake"), key)
    t.join()
    assert status == 200
    assert int(fields["content-length"]) == SIZE
    assert len(body) < SIZE, "the whole answer arrived although the object was replaced midway"
    assert body == data[: len(body)], "bytes of the replacing version were sent"
