#!/usr/bin/env python3
"""Rendered tiles and browser pages: requests per second and latency of the release zarrd.

Run with the test venv's Python (numpy, zarr) after `cargo build --release`:

    ~/.cache/zarrd/venv/bin/python bench/render.py          # ~1 min
    WRK_SECONDS=20 ~/.cache/zarrd/venv/bin/python bench/render.py

What it measures (one zarrd, default configuration, RUST_LOG=warn, on a temporary directory
removed at the end):

1. Hot PNG tile: a float32 array (2048 x 2048, chunks 256 x 256, zstd) written by zarr-python;
   `wrk` (16 connections, 2 threads, WRK_SECONDS, default 10) on one 256 x 256 tile rendered
   with a colormap, `sel=256:512,512:768&format=png&colormap=viridis`, after a warm-up
   request (its chunk then sits in the decoded chunk cache), both with `rescale=` given and
   with the default percentile range. Target: at least 3,000 requests/s on 2 cores.
2. Browser page of a group with 10,000 child groups (written as 10,000 `zarr.json`
   documents): the first page (`/browse/bench/big/`), cold (first request after start: the
   listing and 100 metadata reads) and warm (median of 50 requests over one keep-alive
   connection). Target: under 100 ms.

Each answer is checked once (a PNG of the right size; a page listing the first children)
before it is timed. Prints a markdown table. Needs `wrk` (apt-get install -y wrk).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import Server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BINARY = Path(os.environ.get("ZARRD_BIN_UNDER_TEST", ROOT / "target" / "release" / "zarrd"))
WRK_SECONDS = int(os.environ.get("WRK_SECONDS", "10"))
CHILDREN = 10_000


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_wrk(url: str) -> tuple[float, str]:
    out = subprocess.run(
        ["wrk", "-t2", "-c16", f"-d{WRK_SECONDS}s", "--latency", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"wrk saw {errors.group(1)} error responses:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    p99 = re.search(r"99%\s+(\S+)", out).group(1)
    return rps, p99


def write_data(root: Path) -> None:
    rng = np.random.default_rng(14)
    y, x = np.mgrid[0:2048, 0:2048].astype("float32")
    field = np.sin(x / 97.0) * np.cos(y / 53.0) + rng.normal(0, 0.1, size=(2048, 2048)).astype("float32")
    a = zarr.create_array(root / "f", shape=field.shape, chunks=(256, 256), dtype="float32")
    a[...] = field
    big = root / "big"
    big.mkdir()
    (big / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
    doc = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}})
    for i in range(CHILDREN):
        d = big / f"g{i:05d}"
        d.mkdir()
        (d / "zarr.json").write_text(doc)


def main() -> None:
    if not BINARY.is_file():
        sys.exit(f"{BINARY} not found: cargo build --release (or set ZARRD_BIN_UNDER_TEST)")
    if not shutil.which("wrk"):
        sys.exit("wrk missing: apt-get install -y wrk")
    tmp = Path(tempfile.mkdtemp(prefix="zarrd-bench-render-"))
    try:
        log("writing the array and 10,000 groups ...")
        write_data(tmp)
        server = Server(BINARY, tmp, {})
        try:
            rows = []
            # The browser page first: its first request is the cold one.
            conn = server.conn()
            times = []
            for i in range(51):
                t = time.perf_counter()
                conn.request("GET", "/browse/bench/big/")
                r = conn.getresponse()
                body = r.read()
                times.append(time.perf_counter() - t)
                if i == 0:
                    assert r.status == 200, body[:500]
                    assert b"g00000" in body and b"g00099" in body and b"g00100" not in body
                    assert b"of 10000 entries" in body
            rows.append(("browser: first page of a 10,000-child group, cold", f"{times[0] * 1000:.1f} ms", "< 100 ms"))
            rows.append(
                ("browser: same page, warm (median of 50)", f"{statistics.median(times[1:]) * 1000:.1f} ms", "< 100 ms")
            )
            for label, query in [
                ("PNG tile 256x256 float32, viridis, rescale given", "&rescale=-1,1"),
                ("PNG tile 256x256 float32, viridis, percentile range", ""),
            ]:
                path = f"/api/v1/data/bench/f?sel=256:512,512:768&format=png&colormap=viridis{query}"
                # A new connection: zarrd closes idle ones while wrk runs.
                conn.close()
                conn = server.conn()
                conn.request("GET", path)
                r = conn.getresponse()
                png = r.read()
                assert r.status == 200 and png[:8] == b"\x89PNG\r\n\x1a\n", png[:300]
                assert int.from_bytes(png[16:20], "big") == 256 and int.from_bytes(png[20:24], "big") == 256
                log(f"wrk {label} ...")
                rps, p99 = run_wrk(server.url + path)
                rows.append((f"{label} ({len(png)} B)", f"{rps:,.0f} req/s (p99 {p99})", ">= 3,000 req/s"))
            conn.close()
        finally:
            server.stop()
        cores = os.cpu_count()
        print(f"\nzarrd {BINARY} on {cores} cores, wrk -t2 -c16 -d{WRK_SECONDS}s (client on the same machine)\n")
        print("| case | figure | target |\n|---|---|---|")
        for case, figure, target in rows:
            print(f"| {case} | {figure} | {target} |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
