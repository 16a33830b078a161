"""One-unit answers of a compressed unit: zarrd builds side by side (issue 14 point 2).

A slice that is exactly one 128×128×64 float32 zstd chunk (4 MiB), or one such inner chunk of a
sharded array, read again and again from each zarrd build given (caches off, so every read
decodes), the builds interleaved request by request, the unit cycling over the 16 chunks of a
(512, 512, 64) array written by zarr-python. Per build: median time of the whole answer (body
read into memory) and MB/s, median time to the first body byte, and the server's CPU time per
request (utime + stime from /proc, load-independent to first order).

    ~/.cache/zarrd/venv/bin/python bench/unit_stream.py BUILD [BUILD ...]      # REPS=100
    ENDPOINT=chunks ... bench/unit_stream.py BUILD ...   # the decoded-chunk endpoint instead
"""

from __future__ import annotations

import http.client
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))
from zarrd_harness import start_zarrd  # noqa: E402

SHAPE = (512, 512, 64)
CHUNK = (128, 128, 64)
UNIT = int(np.prod(CHUNK)) * 4


def write(root: Path) -> None:
    x = np.sin(np.arange(np.prod(SHAPE)) * 1e-3).reshape(SHAPE) * 100
    data = (x + np.random.default_rng(1).random(SHAPE)).astype("f4")
    for name, shards in (("zstd", None), ("sharded", SHAPE)):
        a = zarr.create_array(root / name, shape=SHAPE, chunks=CHUNK, shards=shards, dtype="f4",
                              compressors=[ZstdCodec(level=1)], zarr_format=3)
        a[...] = data


def one(conn: http.client.HTTPConnection, path: str, out: memoryview) -> tuple[float, float]:
    """One GET on a kept-alive connection, its body read into `out` (as table.py reads)."""
    t = time.perf_counter()
    conn.request("GET", path)
    r = conn.getresponse()
    assert r.status == 200, r.status
    got = r.readinto(out[:1])
    ttfb = time.perf_counter() - t
    while got < UNIT:
        k = r.readinto(out[got:UNIT])
        assert k, f"body cut short at {got}"
        got += k
    return time.perf_counter() - t, ttfb


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    builds = sys.argv[1:]
    reps = int(os.environ.get("REPS", "100"))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write(root)
        env = {"ZARRD_CACHE__CHUNK_BYTES": "0", "ZARRD_CACHE__OBJECT_BYTES": "0", "RUST_LOG": "warn"}
        servers = []
        try:
            for i, b in enumerate(builds):
                os.environ["ZARRD_TEST_BIN"] = b
                servers.append(start_zarrd({"w": root.as_uri()}, log_path=root / f"zarrd{i}.log", env=env))
            print(f"REPS={reps}; load average {os.getloadavg()[0]:.1f}")
            print("| array | build | median ms | MB/s | first byte ms | CPU ms / request |")
            print("|---|---|---:|---:|---:|---:|")
            out = memoryview(bytearray(UNIT))
            conns = []
            for s in servers:
                host, port = s.url.split("//")[1].split(":")
                conns.append(http.client.HTTPConnection(host, int(port)))
            for name in ("zstd", "sharded"):
                totals = [[] for _ in servers]
                firsts = [[] for _ in servers]
                before = [cpu_seconds(s.proc.pid) for s in servers]
                for r in range(reps):
                    i0, i1 = (r % 4) * 128, ((r // 4) % 4) * 128
                    path = f"/api/v1/data/w/{name}?sel={i0}:{i0 + 128},{i1}:{i1 + 128},0:64&format=raw"
                    if os.environ.get("ENDPOINT") == "chunks":
                        c0, c1 = i0 // 128, i1 // 128
                        at = f"coords=0,0,0&inner={c0},{c1},0" if name == "sharded" else f"coords={c0},{c1},0"
                        path = f"/api/v1/chunks/w/{name}?{at}&format=raw"
                    for j in range(len(servers)):
                        k = (j + r) % len(servers)
                        total, ttfb = one(conns[k], path, out)
                        totals[k].append(total)
                        firsts[k].append(ttfb)
                after = [cpu_seconds(s.proc.pid) for s in servers]
                for k, b in enumerate(builds):
                    med = statistics.median(totals[k])
                    print(f"| {name} | `{b}` | {med * 1e3:.2f} | {UNIT / med / 1e6:.0f} | "
                          f"{statistics.median(firsts[k]) * 1e3:.2f} | {(after[k] - before[k]) / reps * 1e3:.2f} |")
        finally:
            for s in servers:
                s.stop()


if __name__ == "__main__":
    main()
