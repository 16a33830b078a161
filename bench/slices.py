#!/usr/bin/env python3
"""Slice read throughput: zarrd's /api/v1/data over loopback vs TensorStore in-process.

Run with the test venv's Python (numpy, tensorstore) after `cargo build --release`:

    ~/.cache/zarrd/venv/bin/python bench/slices.py            # ~3-5 min
    REPEATS=5 WRK_SECONDS=20 ~/.cache/zarrd/venv/bin/python bench/slices.py

What it does, in one run on one machine:

1. TensorStore writes a zstd (level 1) float32 array of shape (1024, 1024, 256) — 1 GiB
   decoded — in chunks of (32, 128, 256) (4 MiB) to a temporary directory (removed at
   the end). The values are a smooth field plus noise, so zstd compresses them about 1.3x.
2. Cold reads, cache off on both sides, each selection REPEATS times (median reported):
   - TensorStore in-process: `ts.open(..., context={"cache_pool": {"total_bytes_limit": 0}})`,
     `array[sel].read().result()` (decoded into a new numpy array);
   - zarrd (release build, `cache.chunk_bytes = 0`, `cache.object_bytes = 0`, RUST_LOG=warn):
     `GET /api/v1/data/bench/a?sel=...&format=raw` over a keep-alive loopback connection,
     the body read with `readinto` into a preallocated buffer (no parsing), then checked
     once against TensorStore's answer.
   Selections: the whole array; an aligned box (256 MiB, whole chunks); an unaligned box
   (128 MiB, cutting every chunk it touches); one 2-D plane `[:, :, 100]` (4 MiB of output,
   but it touches all 256 chunks, so 1 GiB is decoded).
   Throughput is output bytes / second (for the plane also the decoded bytes / second).
3. Hot tile: a second zarrd with the default configuration (decoded chunk cache on),
   `wrk` (16 connections, 2 threads, WRK_SECONDS) on one 256x256 tile `[5, 0:256, 0:256]`
   (256 KiB raw), after a warm-up request: requests per second and p99 latency.

Prints a markdown table. Needs `wrk` (apt-get install -y wrk) for step 3.

Before/after in one run: set ZARRD_BASELINE_BIN to another build (for example the
release binary of the previous commit, built into its own target dir). Every zarrd
measurement is then made for both binaries, interleaved (baseline first, per selection
and per wrk round; the hot tile gets ROUNDS rounds each, default 2, median reported), and
the table gains the baseline's figures and the ratio new / baseline:

    ZARRD_BASELINE_BIN=/tmp/zarrd-old ~/.cache/zarrd/venv/bin/python bench/slices.py
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import numpy as np
import tensorstore as ts
from bench_server import Server

ROOT = Path(__file__).resolve().parents[1]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
BIN = Path(os.environ.get("ZARRD_BIN", TARGET / "release" / "zarrd"))
BASELINE = Path(os.environ["ZARRD_BASELINE_BIN"]) if os.environ.get("ZARRD_BASELINE_BIN") else None
ROUNDS = int(os.environ.get("ROUNDS", "2"))
REPEATS = int(os.environ.get("REPEATS", "3"))
WRK_SECONDS = int(os.environ.get("WRK_SECONDS", "10"))
SHAPE = (1024, 1024, 256)
CHUNKS = (32, 128, 256)

SELECTIONS = [
    ("whole array", (slice(None), slice(None), slice(None)), ":,:,:"),
    ("aligned box", (slice(64, 576), slice(128, 640), slice(None)), "64:576,128:640,:"),
    ("unaligned box", (slice(37, 549), slice(61, 573), slice(13, 141)), "37:549,61:573,13:141"),
    ("2-D plane [:, :, 100]", (slice(None), slice(None), 100), ":,:,100"),
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def spec(path: Path) -> dict:
    return {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(path)},
        "context": {"cache_pool": {"total_bytes_limit": 0}},
        "recheck_cached_data": False,
    }


def write_array(path: Path) -> None:
    create = spec(path) | {
        "create": True,
        "metadata": {
            "shape": list(SHAPE),
            "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(CHUNKS)}},
            "codecs": [
                {"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "zstd", "configuration": {"level": 1, "checksum": False}},
            ],
            "fill_value": 0,
        },
    }
    arr = ts.open(create).result()
    rng = np.random.default_rng(0)
    y = np.linspace(0, 8, SHAPE[1], dtype=np.float32)[:, None]
    x = np.linspace(0, 4, SHAPE[2], dtype=np.float32)[None, :]
    base = np.sin(y) * np.cos(x)
    step = CHUNKS[0] * 4
    for z0 in range(0, SHAPE[0], step):
        block = base[None, :, :] + np.float32(z0) / 100 + rng.normal(0, 0.01, (step,) + SHAPE[1:]).astype(
            np.float32
        )
        arr[z0 : z0 + step].write(block.astype(np.float32)).result()


def read_raw(conn: http.client.HTTPConnection, sel: str, out: memoryview) -> int:
    try:
        return read_raw_once(conn, sel, out)
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        # zarrd closes a keep-alive connection left idle past its header
        # timeout (a slow TensorStore step on a loaded machine): once more,
        # on a fresh connection (the first read of a selection is untimed).
        conn.close()
        return read_raw_once(conn, sel, out)


def read_raw_once(conn: http.client.HTTPConnection, sel: str, out: memoryview) -> int:
    conn.request("GET", "/api/v1/data/bench/a?" + urllib.parse.urlencode({"sel": sel, "format": "raw"}))
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"{sel}: {resp.status} {resp.read()[:300]!r}")
    n = int(resp.getheader("content-length"))
    got = 0
    while got < n:
        k = resp.readinto(out[got:n])
        if not k:
            raise RuntimeError(f"{sel}: body cut short at {got} of {n} bytes")
        got += k
    return n


def median_time(fn) -> float:
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_wrk(url: str) -> tuple[float, str]:
    if not shutil.which("wrk"):
        return float("nan"), "wrk missing (apt-get install -y wrk)"
    out = subprocess.run(
        ["wrk", "-t2", "-c16", f"-d{WRK_SECONDS}s", "--latency", url],
        capture_output=True,
        text=True,
        timeout=WRK_SECONDS + 60,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    p99 = re.search(r"99%\s+(\S+)", out).group(1)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"wrk saw {errors.group(1)} error responses:\n{out}")
    return rps, p99


def main() -> None:
    if not BIN.is_file():
        sys.exit(f"no release binary at {BIN}: run `cargo build --release` (or set ZARRD_BIN)")
    tmp = Path(tempfile.mkdtemp(prefix="zarrd-bench-slices-"))
    try:
        data = tmp / "data"
        log(f"writing the 1 GiB array to {data} ...")
        t0 = time.perf_counter()
        write_array(data / "a")
        stored = sum(f.stat().st_size for f in (data / "a").rglob("*") if f.is_file())
        log(f"  written in {time.perf_counter() - t0:.1f} s, {stored / 2**20:.0f} MiB stored")
        arr = ts.open(spec(data / "a")).result()
        bins = [BIN] if BASELINE is None else [BASELINE, BIN]
        cold_env = {"ZARRD_CACHE__CHUNK_BYTES": "0", "ZARRD_CACHE__OBJECT_BYTES": "0"}
        colds = [Server(b, data, cold_env) for b in bins]
        rows = []
        try:
            conns = [http.client.HTTPConnection(c.host, c.port, timeout=300) for c in colds]
            buf = bytearray(4 * int(np.prod(SHAPE)))
            view = memoryview(buf)
            for name, key, sel in SELECTIONS:
                log(f"{name}: TensorStore ...")
                expected = arr[key].read().result()
                ts_t = median_time(lambda key=key: arr[key].read().result())
                times = []
                for b, conn in zip(bins, conns):
                    log(f"{name}: zarrd {b} ...")
                    n = read_raw(conn, sel, view)
                    got = np.frombuffer(buf, dtype="<f4", count=n // 4).reshape(expected.shape)
                    if not np.array_equal(got, expected):
                        raise RuntimeError(f"{name}: {b}'s answer differs from TensorStore's")
                    times.append(median_time(lambda sel=sel, conn=conn: read_raw(conn, sel, view)))
                rows.append((name, n, ts_t, times))
            for conn in conns:
                conn.close()
        finally:
            for c in colds:
                c.stop()
        hots = [Server(b, data, {}) for b in bins]
        tiles: list[list[tuple[float, str]]] = [[] for _ in bins]
        try:
            for h in hots:
                conn = http.client.HTTPConnection(h.host, h.port, timeout=60)
                read_raw(conn, "5,0:256,0:256", memoryview(bytearray(256 * 256 * 4)))
                conn.close()
            for r in range(ROUNDS if BASELINE else 1):
                for i, h in enumerate(hots):
                    log(f"hot tile: wrk {bins[i]} (round {r + 1}) ...")
                    tiles[i].append(run_wrk(h.url + "/api/v1/data/bench/a?sel=5,0:256,0:256&format=raw"))
        finally:
            for h in hots:
                h.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"zarrd {BIN}, {os.cpu_count()} CPUs, median of {REPEATS}, cache off on both sides")
    if BASELINE:
        print(f"baseline {BASELINE}, measured interleaved in the same run")
    print()
    head = "| selection | output MiB | TensorStore s | TensorStore MiB/s | zarrd s | zarrd MiB/s | zarrd / TensorStore |"
    rule = "|---|---:|---:|---:|---:|---:|---:|"
    if BASELINE:
        head += " baseline s | new / baseline (speed) |"
        rule += "---:|---:|"
    print(head)
    print(rule)
    for name, n, ts_t, times in rows:
        mib = n / 2**20
        z_t = times[-1]
        line = (
            f"| {name} | {mib:.0f} | {ts_t:.3f} | {mib / ts_t:.0f} | {z_t:.3f} | {mib / z_t:.0f} | "
            f"{ts_t / z_t:.2f} |"
        )
        if BASELINE:
            line += f" {times[0]:.3f} | {times[0] / z_t:.2f} |"
        print(line)

    def tile_figure(runs: list[tuple[float, str]]) -> tuple[float, str]:
        rps = statistics.median(r for r, _ in runs)
        return rps, ", ".join(p for _, p in runs)

    rps, p99 = tile_figure(tiles[-1])
    print(f"\nhot 256x256 float32 tile (default cache, wrk -t2 -c16 -d{WRK_SECONDS}s): "
          f"{rps:.0f} requests/s, p99 {p99}")
    if BASELINE:
        base_rps, base_p99 = tile_figure(tiles[0])
        print(f"baseline: {base_rps:.0f} requests/s, p99 {base_p99}; new / baseline {rps / base_rps:.2f} "
              f"(median of {ROUNDS} interleaved rounds each)")


if __name__ == "__main__":
    main()
