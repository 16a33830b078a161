#!/usr/bin/env python3
"""/healthz latency while the server runs the heaviest slice writes it allows.

Run with the test venv's Python (numpy) after `cargo build --release`:

    ~/.cache/zarrd/venv/bin/python bench/write_health.py          # ~1 min, ~8 GiB of RAM
    SECONDS_UNDER_LOAD=60 WRITERS=8 ~/.cache/zarrd/venv/bin/python bench/write_health.py

Issue 13's acceptance point: "under a load of the heaviest allowed slice writes, /healthz
still answers within 100 ms". What it does, in one run:

1. Starts the release binary (`ZARRD_BIN`, default `$CARGO_TARGET_DIR/release/zarrd`) on
   127.0.0.1:0 with a temporary local mount (removed at the end), default configuration,
   RUST_LOG=warn.
2. Builds, per case, bodies as large as `limits.max_put_bytes` (256 MiB by default, the
   largest array-data body the server accepts; `MAX_PUT_BYTES` changes both the server's
   limit and the bodies) — two bodies per case, alternated, so every write changes data:
   | case | body | codecs | write |
   |---|---|---|---|
   | npy zstd whole | npy float32 | bytes + zstd | whole chunks (aligned box, nothing read) |
   | npy blosc sharded partial | npy float32 | sharding (bytes + blosc zstd/shuffle) | unaligned box: every shard read-modify-written, edge inner chunks decoded and merged |
   | json zstd partial | JSON uint16 | bytes + zstd | unaligned box: edge chunks read-modify-written |
   | json blosc sharded whole | JSON uint16 | sharding (bytes + blosc lz4/bitshuffle) | whole shards |
   A JSON body is nested lists of numbers; the server parses it, places it and encodes it.
3. Runs WRITERS writer threads (default 4, one per case; writer i runs case i mod 4 on an
   array of its own, so writers never wait for each other's chunk locks), each on its own
   keep-alive connection, writing back to back for SECONDS_UNDER_LOAD (default 20 s). The
   server admits up to `limits.max_concurrent_requests` (1024) such writes; what they
   share is the CPU pool (one thread per core) and `limits.decode_budget_bytes`, so more
   writers than cores only add memory (a 256 MiB write holds its body, its decoded
   elements and up to 256 MiB of chunks in flight; a JSON body's parsed tree is the
   largest part, about 32 bytes per number).
4. Meanwhile a separate process (no shared interpreter lock with the writers) sends
   `GET /healthz` on its own keep-alive connection every ~20 ms and records each answer's
   latency; a few seconds of the same polling before the load gives the idle figure.
5. After the load, every array's last written region is read back (format=raw) and
   compared with the body that was written last.

Prints a markdown table: writes done (and failed), body MB/s, /healthz answers and
p50 / p99 / max latency, idle and under load.
"""

from __future__ import annotations

import http.client
import io
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np
from bench_server import Server

ROOT = Path(__file__).resolve().parents[1]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
BIN = Path(os.environ.get("ZARRD_BIN", TARGET / "release" / "zarrd"))
SECONDS_UNDER_LOAD = float(os.environ.get("SECONDS_UNDER_LOAD", "20"))
WRITERS = int(os.environ.get("WRITERS", "4"))
MAX_PUT_BYTES = int(os.environ.get("MAX_PUT_BYTES", str(256 * 1024 * 1024)))
CASES = os.environ.get("CASES", "")  # e.g. "0,2": only those cases (0-based, table order)
IDLE_SECONDS = 3.0
POLL_INTERVAL_S = 0.02


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---- the cases --------------------------------------------------------------------------


def zstd() -> dict:
    return {"name": "zstd", "configuration": {"level": 1, "checksum": False}}


def blosc(cname: str, shuffle: str, typesize: int) -> dict:
    return {
        "name": "blosc",
        "configuration": {"cname": cname, "clevel": 3, "shuffle": shuffle, "typesize": typesize, "blocksize": 0},
    }


def little() -> dict:
    return {"name": "bytes", "configuration": {"endian": "little"}}


def sharded(inner: list[int], compressor: dict) -> list[dict]:
    return [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": inner,
                "codecs": [little(), compressor],
                "index_codecs": [little(), {"name": "crc32c"}],
                "index_location": "end",
            },
        }
    ]


def metadata(shape: list[int], chunks: list[int], dtype: str, codecs: list[dict]) -> dict:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": codecs,
        "attributes": {},
    }


class Case:
    """One kind of write: an array's metadata, a selection (a box) and two bodies for it."""

    def __init__(self, name: str, fmt: str, meta: dict, box: tuple[slice, ...]) -> None:
        self.name, self.fmt, self.meta, self.box = name, fmt, meta, box
        self.sel = ",".join(f"{s.start}:{s.stop}" for s in box)
        self.shape = tuple(s.stop - s.start for s in box)
        self.dtype = np.dtype("<f4" if meta["data_type"] == "float32" else "<u2")
        self.bodies: list[bytes] = []

    def build(self, limit: int) -> None:
        for variant in range(2):
            values = self.make(variant)
            body = npy_body(values) if self.fmt == "npy" else json_body(values)
            if len(body) > limit:
                raise SystemExit(f"{self.name}: body of {len(body)} bytes exceeds limits.max_put_bytes = {limit}")
            self.bodies.append(body)

    def make(self, variant: int) -> np.ndarray:
        rows, cols = self.shape
        if self.dtype.kind == "f":
            # A smooth field plus noise (zstd/blosc compress it a little, as real data).
            rng = np.random.default_rng(variant)
            y = np.linspace(0, 8, rows, dtype=np.float32)[:, None]
            x = np.linspace(0, 4, cols, dtype=np.float32)[None, :]
            field = np.sin(y + variant) * np.cos(x) + rng.normal(0, 0.01, (rows, cols)).astype(np.float32)
            return field.astype(self.dtype)
        i = np.arange(rows, dtype=np.uint32)[:, None]
        j = np.arange(cols, dtype=np.uint32)[None, :]
        return ((i * 3 + j + 7 * variant) % self.modulus).astype(self.dtype)

    modulus = 100


def npy_body(values: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, values, allow_pickle=False)
    return buf.getvalue()


def json_body(values: np.ndarray) -> bytes:
    """Nested lists, built row by row from the few distinct rows the pattern has."""
    rows: dict[bytes, bytes] = {}
    parts = []
    for row in values:
        key = row.tobytes()
        text = rows.get(key)
        if text is None:
            text = ("[" + ",".join(map(str, row.tolist())) + "]").encode()
            rows[key] = text
        parts.append(text)
    return b"[" + b",".join(parts) + b"]"


def cases(limit: int) -> list[Case]:
    """Four cases whose bodies come as close to `limit` as their shapes allow."""
    # float32 npy: rows x 16384 columns, the npy header (128 bytes) included.
    cols = 16384
    f_rows = (limit - 128) // (cols * 4)
    whole_rows = max(f_rows // 127 * 127, 127)  # whole chunks of 127 rows
    # uint16 JSON with values below 100: ~2.9 bytes per element.
    u_rows = int(limit / (cols * 2.95))
    shard_rows = max(u_rows // 256 * 256, 256)
    out = [
        Case(
            "npy zstd whole",
            "npy",
            metadata([whole_rows, cols], [127, 2048], "float32", [little(), zstd()]),
            (slice(0, whole_rows), slice(0, cols)),
        ),
        Case(
            "npy blosc sharded partial",
            "npy",
            metadata(
                [f_rows + 64, cols + 64], [1024, 4096], "float32", sharded([256, 256], blosc("zstd", "shuffle", 4))
            ),
            (slice(13, 13 + f_rows), slice(7, 7 + cols)),
        ),
        Case(
            "json zstd partial",
            "json",
            metadata([u_rows + 100, cols + 100], [256, 1024], "uint16", [little(), zstd()]),
            (slice(37, 37 + u_rows), slice(45, 45 + cols)),
        ),
        Case(
            "json blosc sharded whole",
            "json",
            metadata(
                [shard_rows, cols], [256, 4096], "uint16", sharded([128, 512], blosc("lz4", "bitshuffle", 2))
            ),
            (slice(0, shard_rows), slice(0, cols)),
        ),
    ]
    return out


# ---- the server ---------------------------------------------------------------------------


def request(conn: http.client.HTTPConnection, method: str, path: str, body=None, headers=None) -> bytes:
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status >= 300:
        raise RuntimeError(f"{method} {path}: {resp.status} {data[:300]!r}")
    return data


# ---- /healthz, from its own process --------------------------------------------------------


def poll_health(host: str, port: int, seconds: float, interval: float, stop, out) -> None:
    """Polls /healthz on one keep-alive connection for `seconds` or until `stop` is set;
    sends back (latencies, failures)."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    times: list[float] = []
    failures = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.is_set():
        t0 = time.perf_counter()
        try:
            conn.request("GET", "/healthz")
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 200
        except OSError:
            ok = False
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=30)
        took = time.perf_counter() - t0
        if ok:
            times.append(took)
        else:
            failures += 1
        time.sleep(max(0.0, interval - took))
    conn.close()
    out.send((times, failures))
    out.close()


class Poller:
    """/healthz polling in its own process (so the writers' threads never delay it)."""

    def __init__(self, server: Server, seconds: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stop = ctx.Event()
        self.recv, send = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(
            target=poll_health, args=(server.host, server.port, seconds, POLL_INTERVAL_S, self.stop, send)
        )
        self.proc.start()
        send.close()

    def finish(self) -> tuple[list[float], int]:
        self.stop.set()
        result = self.recv.recv()
        self.proc.join(30)
        return result


def percentile(sorted_times: list[float], q: float) -> float:
    if not sorted_times:
        return float("nan")
    return sorted_times[min(len(sorted_times) - 1, int(len(sorted_times) * q))]


# ---- the load -----------------------------------------------------------------------------


class Writer(threading.Thread):
    def __init__(self, server: Server, case: Case, path: str, until: float) -> None:
        super().__init__(daemon=True)
        self.server, self.case, self.path, self.until = server, case, path, until
        self.done = 0
        self.failed: list[str] = []
        self.bytes = 0
        self.last: int | None = None
        self.durations: list[float] = []

    def run(self) -> None:
        conn = self.server.conn()
        query = urllib.parse.urlencode({"sel": self.case.sel, "format": self.case.fmt})
        n = 0
        while time.monotonic() < self.until:
            variant = n % 2
            n += 1
            body = self.case.bodies[variant]
            t0 = time.perf_counter()
            try:
                conn.request("PUT", f"/api/v1/data/bench/{self.path}?{query}", body=body)
                resp = conn.getresponse()
                text = resp.read()
            except OSError as e:
                self.failed.append(f"{type(e).__name__}: {e}")
                conn.close()
                conn = self.server.conn()
                continue
            if resp.status != 204:
                self.failed.append(f"{resp.status} {text[:200]!r}")
                continue
            self.durations.append(time.perf_counter() - t0)
            self.done += 1
            self.bytes += len(body)
            self.last = variant
        conn.close()


def check_back(server: Server, writer: Writer) -> None:
    if writer.last is None:
        return
    case = writer.case
    conn = server.conn()
    query = urllib.parse.urlencode({"sel": case.sel, "format": "raw"})
    raw = request(conn, "GET", f"/api/v1/data/bench/{writer.path}?{query}")
    conn.close()
    got = np.frombuffer(raw, dtype=case.dtype).reshape(case.shape)
    if not np.array_equal(got, case.make(writer.last)):
        raise RuntimeError(f"{writer.path} ({case.name}): the data read back differs from the last body written")


def main() -> None:
    if not BIN.is_file():
        sys.exit(f"no release binary at {BIN}: run `cargo build --release` (or set ZARRD_BIN)")
    all_cases = cases(MAX_PUT_BYTES)
    log(f"building two bodies per case (each at most {MAX_PUT_BYTES} bytes) ...")
    for c in all_cases:
        t0 = time.perf_counter()
        c.build(MAX_PUT_BYTES)
        log(f"  {c.name}: {c.fmt} body {len(c.bodies[0]) / 2**20:.1f} MiB, sel {c.sel} ({time.perf_counter() - t0:.1f} s)")
    tmp = Path(tempfile.mkdtemp(prefix="zarrd-bench-write-health-"))
    server = Server(BIN, tmp / "data", {"ZARRD_LIMITS__MAX_PUT_BYTES": str(MAX_PUT_BYTES)})
    try:
        conn = server.conn()
        chosen = [all_cases[int(i)] for i in CASES.split(",")] if CASES else all_cases
        writers_cases = [chosen[i % len(chosen)] for i in range(WRITERS)]
        for i, c in enumerate(writers_cases):
            request(conn, "PUT", f"/api/v1/nodes/bench/w{i}", body=json.dumps(c.meta),
                    headers={"content-type": "application/json"})
        conn.close()

        log(f"idle /healthz for {IDLE_SECONDS:.0f} s ...")
        poller = Poller(server, IDLE_SECONDS)
        time.sleep(IDLE_SECONDS)
        idle, idle_failures = poller.finish()

        log(f"{WRITERS} writers for {SECONDS_UNDER_LOAD:.0f} s (and until their last writes end) ...")
        # Polled until every writer's last write has ended: the whole load.
        poller = Poller(server, 3600)
        t0 = time.monotonic()
        until = t0 + SECONDS_UNDER_LOAD
        writers = [Writer(server, c, f"w{i}", until) for i, c in enumerate(writers_cases)]
        for w in writers:
            w.start()
        for w in writers:
            w.join()
        elapsed = time.monotonic() - t0
        loaded, loaded_failures = poller.finish()
        peak = server.peak_rss_mib()

        log("reading every array's last write back ...")
        for w in writers:
            check_back(server, w)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    failed = [f for w in writers for f in w.failed]
    print(f"zarrd {BIN}, {os.cpu_count()} CPUs, limits.max_put_bytes = {MAX_PUT_BYTES}, {WRITERS} writers, "
          f"{SECONDS_UNDER_LOAD:.0f} s under load (last writes finished after {elapsed:.1f} s), "
          f"server peak RSS {peak:.0f} MiB")
    print()
    print("| case | writers | body MiB | writes done | failed | body MB/s | median write s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for c in all_cases:
        ws = [w for w in writers if w.case is c]
        if not ws:
            continue
        done = sum(w.done for w in ws)
        durations = [d for w in ws for d in w.durations]
        print(
            f"| {c.name} | {len(ws)} | {len(c.bodies[0]) / 2**20:.0f} | {done} | {sum(len(w.failed) for w in ws)} | "
            f"{sum(w.bytes for w in ws) / 1e6 / elapsed:.0f} | "
            f"{statistics.median(durations) if durations else float('nan'):.2f} |"
        )
    total = sum(w.bytes for w in writers)
    print(f"| all | {WRITERS} | | {sum(w.done for w in writers)} | {len(failed)} | {total / 1e6 / elapsed:.0f} | |")
    print()
    print("| /healthz | answers | failed | p50 ms | p99 ms | max ms | over 100 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, times, failures in [("idle", idle, idle_failures), ("under load", loaded, loaded_failures)]:
        s = sorted(times)
        print(
            f"| {name} | {len(s)} | {failures} | {percentile(s, 0.5) * 1000:.1f} | {percentile(s, 0.99) * 1000:.1f} | "
            f"{(s[-1] if s else float('nan')) * 1000:.1f} | {sum(t > 0.1 for t in s)} |"
        )
    if failed:
        print("\nfailed writes:\n" + "\n".join(f"- {f}" for f in failed[:10]))
        sys.exit(1)
    if loaded_failures or not loaded:
        sys.exit(1)


if __name__ == "__main__":
    main()
