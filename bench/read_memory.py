#!/usr/bin/env python3
"""Bounded memory: reading a 4 GiB selection keeps zarrd's RSS near its idle RSS.

    ~/.cache/zarrd/venv/bin/python bench/read_memory.py     # ~1 min after `cargo build --release`

A float32 array of shape (32768, 32768) — 4 GiB decoded — in (1024, 1024) chunks with
zstd, fill value 1.5. TensorStore writes the first two chunk rows (64 chunks, 256 MiB
decoded, random data so zstd cannot shrink it to nothing); the other 960 chunks are not
stored and read as the fill value (written into every slab element by element, the slow
path). A release zarrd with the default configuration (decoded chunk cache 256 MiB,
object cache 256 MiB, 32 MiB slabs) serves it; the script reads the whole array as raw
bytes over loopback (discarding them as they arrive, in 8 MiB reads), checks the size and
spot values, and samples the server's VmRSS from /proc every 10 ms.

Prints idle RSS (after one small read), peak RSS during the read, and the difference; exits
1 when the difference is 512 MiB or more.
"""

from __future__ import annotations

import http.client
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np
import tensorstore as ts

ROOT = Path(__file__).resolve().parents[1]
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
BIN = Path(os.environ.get("ZARRD_BIN", TARGET / "release" / "zarrd"))
SHAPE = (32768, 32768)
CHUNK = 1024
LIMIT_MIB = 512
LISTENING = re.compile(r".*?(http://[0-9.]+:[0-9]+)")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    if not BIN.is_file():
        sys.exit(f"no release binary at {BIN}: run `cargo build --release` (or set ZARRD_BIN)")
    tmp = Path(tempfile.mkdtemp(prefix="zarrd-bench-memory-"))
    proc = None
    try:
        path = tmp / "data" / "big"
        arr = ts.open(
            {
                "driver": "zarr3",
                "kvstore": {"driver": "file", "path": str(path)},
                "create": True,
                "metadata": {
                    "shape": list(SHAPE),
                    "data_type": "float32",
                    "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [CHUNK, CHUNK]}},
                    "codecs": [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1}}],
                    "fill_value": 1.5,
                },
            }
        ).result()
        rng = np.random.default_rng(1)
        stored = rng.random((2 * CHUNK, SHAPE[1]), dtype=np.float32)
        arr[: 2 * CHUNK].write(stored).result()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRD_")} | {"RUST_LOG": "warn"}
        proc = subprocess.Popen(
            [str(BIN), "serve", "--bind", "127.0.0.1:0", "--mount", f"m={tmp / 'data'}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        m = LISTENING.match(proc.stdout.readline().decode())
        if not m:
            sys.exit("zarrd did not start")
        u = urllib.parse.urlsplit(m.group(1))
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        conn.request("GET", "/api/v1/data/m/big?sel=0:4,0:4")
        r = conn.getresponse()
        assert r.status == 200 and len(r.read()) == 64
        time.sleep(0.5)
        idle = rss_kib(proc.pid)

        peak = [idle]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], rss_kib(proc.pid))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.perf_counter()
        conn.request("GET", "/api/v1/data/m/big?format=raw")
        r = conn.getresponse()
        assert r.status == 200, r.read()[:300]
        total = int(r.getheader("content-length"))
        buf = bytearray(8 << 20)
        view = memoryview(buf)
        got = 0
        first = None
        while got < total:
            k = r.readinto(view[: min(len(buf), total - got)])
            if not k:
                sys.exit(f"body cut short at {got} of {total} bytes")
            if first is None:
                first = np.frombuffer(buf, dtype="<f4", count=min(k, len(buf)) // 4).copy()
            got += k
        last = np.frombuffer(buf, dtype="<f4", count=k // 4)
        elapsed = time.perf_counter() - t0
        done.set()
        sampler.join()
        assert got == total == 4 * SHAPE[0] * SHAPE[1], (got, total)
        assert np.array_equal(first[: SHAPE[1]], stored[0, : min(SHAPE[1], first.size)]), "first row differs"
        assert np.all(last == 1.5), "the end of the array is not the fill value"
        grown = (peak[0] - idle) / 1024
        print(f"4 GiB raw read in {elapsed:.1f} s ({total / 2**20 / elapsed:.0f} MiB/s)")
        print(f"zarrd RSS: idle {idle / 1024:.0f} MiB, peak {peak[0] / 1024:.0f} MiB, growth {grown:.0f} MiB "
              f"(limit {LIMIT_MIB} MiB)")
        if grown >= LIMIT_MIB:
            sys.exit(1)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
