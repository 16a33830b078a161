#!/usr/bin/env python3
"""Soak: mixed reads and writes through two zarrd replicas on one Azurite container, for a bounded
time, reporting throughput, latency, errors and each replica's RSS over time (issue 17).

Run with the test venv's Python after `cargo build --release` (Azurite is installed from npm into
tests/azurite on first use, as the tests do):

    ~/.cache/zarrd/venv/bin/python bench/soak.py                   # 10 minutes
    DURATION=120 WORKERS=8 ~/.cache/zarrd/venv/bin/python bench/soak.py

What it does:

1. Starts Azurite (blob service, in memory, loopback, free port) and REPLICAS (default 2) release
   zarrd processes (`ZARRD_BIN`, default `$CARGO_TARGET_DIR/release/zarrd`, RUST_LOG=warn), each
   mounting the same container as `az` with the defaults for object stores (every cached chunk
   and document revalidated by ETag before use).
2. Creates a 1024x1024 uint16 array (64x64 chunks, no compression) and a sharded one (256x256
   shards of 64x64 inner chunks), and fills both.
3. Runs WORKERS (default 8) client threads for DURATION seconds (default 600), each sending its
   requests to the replicas in turn, one at a time on its own keep-alive connections:
   | share | request |
   |---|---|
   | 45% | slice read of a random 128x128 box (raw), either array |
   | 20% | slice write of a random 48x48 box inside the worker's own band of rows (partial chunks: read-modify-write) |
   | 25% | store GET of a random chunk key |
   | 10% | attribute merge of the worker's own key (the document stays small) |
   Each worker keeps its band's expected contents; at the end every band is read back through
   each replica and compared (no acknowledged write lost).
4. Every SAMPLE seconds (default 10) records, per interval: requests, errors, p50/p99 latency
   per kind, and each replica's RSS (VmRSS).

Prints a markdown table per interval and a first-minute / last-minute comparison (throughput,
p50, p99, RSS per replica). Memory and latency should stay flat: RSS bounded by the caches'
configured sizes, latency without a trend.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

DURATION = float(os.environ.get("DURATION", "600"))
WORKERS = int(os.environ.get("WORKERS", "8"))
REPLICAS = int(os.environ.get("REPLICAS", "2"))
SAMPLE = float(os.environ.get("SAMPLE", "10"))
SIZE, CHUNK, SHARD = 1024, 64, 256
TIMEOUT_S = 60


def release_binary() -> Path:
    # Read, then removed: zarrd would take any ZARRD_* variable for configuration.
    explicit = os.environ.pop("ZARRD_BIN", None)
    if explicit:
        return Path(explicit)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return (target if target.is_absolute() else ROOT / target) / "release" / "zarrd"


def array_doc(sharded: bool) -> dict:
    data = {"name": "bytes", "configuration": {"endian": "little"}}
    codecs = [data]
    chunks = [CHUNK, CHUNK]
    if sharded:
        chunks = [SHARD, SHARD]
        codecs = [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": [CHUNK, CHUNK], "codecs": [data], "index_codecs": [data, {"name": "crc32c"}],
            "index_location": "end"}}]  # fmt: skip
    return {
        "zarr_format": 3, "node_type": "array", "shape": [SIZE, SIZE], "data_type": "uint16",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": codecs, "attributes": {},
    }  # fmt: skip


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lat: dict[str, list[float]] = defaultdict(list)
        self.errors: dict[str, int] = defaultdict(int)
        self.seen: dict[str, int] = defaultdict(int)  # every error by kind, status and code

    def add(self, kind: str, seconds: float, ok: bool, what: str = "") -> None:
        with self.lock:
            self.lat[kind].append(seconds)
            if not ok:
                self.errors[kind] += 1
                self.seen[f"{kind}: {what}"] += 1

    def take(self) -> tuple[dict[str, list[float]], dict[str, int]]:
        with self.lock:
            lat, err = self.lat, self.errors
            self.lat, self.errors = defaultdict(list), defaultdict(int)
        return lat, err


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


def main() -> int:
    binary = release_binary()
    if not binary.is_file():
        print(f"no release binary at {binary}: run `cargo build --release` first", file=sys.stderr)
        return 2
    os.environ["ZARRD_TEST_BIN"] = str(binary)
    os.environ["RUST_LOG"] = "warn"
    from azurite import Azurite, BlobClient, start_replicas

    # Blobs on disk: in memory, Azurite's extents of overwritten blobs pile up and it slows
    # to a crawl near its memory limit within ten minutes of this load.
    azurite = Azurite(on_disk=True).start()
    logs = Path(tempfile.mkdtemp(prefix="zarrd-soak-"))
    servers = []
    try:
        BlobClient(azurite.endpoint).create_container("soak")
        servers = start_replicas(REPLICAS, azurite.endpoint, "soak", logs)
        return run(servers)
    finally:
        for s in servers:
            s.stop()
        azurite.stop()
        for f in logs.iterdir():
            f.unlink()
        logs.rmdir()


def run(servers) -> int:
    urls = [s.url for s in servers]
    setup = requests.Session()
    rng0 = np.random.default_rng(0)
    models = {}
    for name in ("plain", "sharded"):
        r = setup.put(f"{urls[0]}/api/v1/nodes/az/{name}", json=array_doc(name == "sharded"), timeout=TIMEOUT_S)
        assert r.status_code == 201, r.text
        data = rng0.integers(0, 65535, size=(SIZE, SIZE), dtype="<u2")
        r = setup.put(f"{urls[0]}/api/v1/data/az/{name}", params={"sel": ":,:"}, data=data.tobytes(),
                      headers={"content-type": "application/octet-stream"}, timeout=TIMEOUT_S)  # fmt: skip
        assert r.status_code == 204, r.text
        models[name] = data
    band = SIZE // WORKERS
    stats = Stats()
    stop_at = time.monotonic() + DURATION
    failures: list[str] = []

    def worker(w: int) -> None:
        rng = random.Random(w)
        sessions = [requests.Session() for _ in urls]
        own = {name: m[w * band : (w + 1) * band].copy() for name, m in models.items()}
        n = 0
        while time.monotonic() < stop_at:
            i = n % len(urls)
            base, session = urls[i], sessions[i]
            n += 1
            name = rng.choice(("plain", "sharded"))
            roll = rng.random()
            t0 = time.perf_counter()
            r, what = None, ""
            try:
                if roll < 0.45:
                    kind = "read"
                    y, x = rng.randrange(0, SIZE - 128), rng.randrange(0, SIZE - 128)
                    r = session.get(f"{base}/api/v1/data/az/{name}", timeout=TIMEOUT_S,
                                    params={"sel": f"{y}:{y + 128},{x}:{x + 128}", "format": "raw"})  # fmt: skip
                    ok = r.status_code == 200 and len(r.content) == 128 * 128 * 2
                elif roll < 0.65:
                    kind = "write"
                    y, x = rng.randrange(0, band - 48), rng.randrange(0, SIZE - 48)
                    box = np.full((48, 48), rng.randrange(1, 65535), dtype="<u2")
                    r = session.put(f"{base}/api/v1/data/az/{name}", data=box.tobytes(), timeout=TIMEOUT_S,
                                    params={"sel": f"{w * band + y}:{w * band + y + 48},{x}:{x + 48}"},
                                    headers={"content-type": "application/octet-stream"})  # fmt: skip
                    ok = r.status_code == 204
                    if ok:
                        own[name][y : y + 48, x : x + 48] = box
                elif roll < 0.9:
                    kind = "key"
                    if name == "plain":
                        key = f"plain/c/{rng.randrange(SIZE // CHUNK)}/{rng.randrange(SIZE // CHUNK)}"
                    else:
                        key = f"sharded/c/{rng.randrange(SIZE // SHARD)}/{rng.randrange(SIZE // SHARD)}"
                    r = session.get(f"{base}/zarr/az/{key}", timeout=TIMEOUT_S)
                    ok = r.status_code == 200
                else:
                    kind = "attrs"
                    r = session.patch(f"{base}/api/v1/attributes/az/{name}", json={f"w{w}": n}, timeout=TIMEOUT_S)
                    ok = r.status_code == 200
            except requests.RequestException as e:
                ok, r = False, None
                what = type(e).__name__
            if not ok and r is not None:
                try:
                    what = f"{r.status_code} {r.json()['error']['code']}"
                except (ValueError, KeyError, TypeError):
                    what = str(r.status_code)
            stats.add(kind, time.perf_counter() - t0, ok, what if not ok else "")
        for name, expected in own.items():
            for base in urls:
                r = requests.get(f"{base}/api/v1/data/az/{name}", timeout=TIMEOUT_S,
                                 params={"sel": f"{w * band}:{(w + 1) * band},:", "format": "raw"})  # fmt: skip
                got = np.frombuffer(r.content, dtype="<u2").reshape(expected.shape) if r.status_code == 200 else None
                if got is None or not np.array_equal(got, expected):
                    diff = "no answer" if got is None else f"{int(np.count_nonzero(got != expected))} elements differ"
                    failures.append(f"worker {w} band of {name} via {base}: {diff}")

    threads = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(WORKERS)]
    started = time.monotonic()
    for t in threads:
        t.start()
    rows = []
    kinds = ("read", "write", "key", "attrs")
    print(f"soak: {REPLICAS} replicas, {WORKERS} workers, {DURATION:.0f} s, sample every {SAMPLE:.0f} s\n")
    header = "| t (s) | req/s | errors | " + " | ".join(f"{k} p50/p99 ms" for k in kinds) + " | " + \
        " | ".join(f"RSS r{i} MiB" for i in range(len(servers))) + " |"  # fmt: skip
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    def sample() -> None:
        lat, err = stats.take()
        elapsed = time.monotonic() - started
        span = elapsed - (rows[-1]["t"] if rows else 0)
        count = sum(len(v) for v in lat.values())
        row = {"t": elapsed, "rps": count / span if span > 0 else 0, "errors": sum(err.values()),
               "lat": lat, "rss": [rss_mib(s.proc.pid) for s in servers]}  # fmt: skip
        rows.append(row)
        cells = [f"{pct(lat[k], 0.5):.1f}/{pct(lat[k], 0.99):.1f}" for k in kinds]
        print(f"| {elapsed:.0f} | {row['rps']:.0f} | {row['errors']} | " + " | ".join(cells) + " | "
              + " | ".join(f"{r:.0f}" for r in row["rss"]) + " |", flush=True)  # fmt: skip

    while time.monotonic() + SAMPLE <= stop_at + 0.5:
        time.sleep(SAMPLE)
        sample()
    for t in threads:
        # Each worker stops at the deadline, then reads its bands back through every replica.
        t.join(timeout=TIMEOUT_S * 2 * REPLICAS)

    def window(sel) -> dict:
        picked = [r for r in rows if sel(r)]
        every = [x for r in picked for v in r["lat"].values() for x in v]
        return {
            "rps": statistics.mean(r["rps"] for r in picked) if picked else float("nan"),
            "p50": pct(every, 0.5), "p99": pct(every, 0.99),
            "errors": sum(r["errors"] for r in picked),
            "rss": [max(r["rss"][i] for r in picked) if picked else float("nan") for i in range(len(servers))],
        }  # fmt: skip

    end = rows[-1]["t"] if rows else 0
    first = window(lambda r: r["t"] <= 60 + SAMPLE / 2)
    last = window(lambda r: r["t"] > end - 60 - SAMPLE / 2)
    print("\n| window | req/s | p50 ms (all) | p99 ms (all) | errors | " +
          " | ".join(f"max RSS r{i} MiB" for i in range(len(servers))) + " |")  # fmt: skip
    print("|---|---|---|---|---|" + "---|" * len(servers))
    for label, w in (("first minute", first), ("last minute", last)):
        print(f"| {label} | {w['rps']:.0f} | {w['p50']:.1f} | {w['p99']:.1f} | {w['errors']} | "
              + " | ".join(f"{x:.0f}" for x in w["rss"]) + " |")  # fmt: skip
    total_errors = sum(r["errors"] for r in rows)
    if stats.seen:
        print("\nerrors by request kind, status and code: " + ", ".join(f"{k} x{v}" for k, v in sorted(stats.seen.items())))
    print(f"\nerrors: {total_errors}; bands checked through every replica: "
          f"{'all intact' if not failures else '; '.join(failures)}")  # fmt: skip
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
