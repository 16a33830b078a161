#!/usr/bin/env python3
"""Pyramid builds and downsampled reads: zarrd against TensorStore in-process, same machine, same run.

    cargo build --release
    ~/.cache/zarrd/venv/bin/python bench/pyramid.py            # 1 GiB, a few minutes
    SHAPE=256,512,256 ~/.cache/zarrd/venv/bin/python bench/pyramid.py   # 128 MiB, quick

A float32 array (default shape (512, 1024, 512): 1 GiB decoded) in (64, 128, 128) chunks
(4 MiB) with zstd level 1, random values (so zstd cannot shrink it to nothing), written by
TensorStore. Then, alternating which goes first over `ROUNDS` rounds (default 2):

1. **Pyramid.** zarrd (release, default configuration) builds the OME-Zarr pyramid
   (`POST /api/v1/pyramids`, method mean, factor 2 per level, levels until one fits in a
   chunk), polled until done; its RSS is sampled from /proc every 10 ms (peak above idle).
   TensorStore does the same in-process: level 0 copied file for file (as zarrd does, key
   for key), and each level k written from `ts.downsample(level 0, 2^k, "mean")` into an
   array with the same chunks and codecs (zarrd's levels equal TensorStore's downsample of
   level 0 too; it computes them all in one pass over level 0; the script checks the
   coarsest level is equal).
2. **Downsampled read.** The whole array read by 4x4x4 mean: zarrd's
   `GET /api/v1/data/...?downsample=4,4,4&downsample_method=mean&format=raw` against
   `ts.downsample(array, [4, 4, 4], "mean").read()`; the two results are compared.

`ZARRD_BASELINE_BIN=/path/to/zarrd` adds a second zarrd (say main's release build) to every
round: its pyramid and downsampled read, measured the same way right after this build's, so
two builds compare in one run.

CPU seconds are the load-independent figures: zarrd's from /proc/<pid>/stat, TensorStore's
from `getrusage` of this process (its threads run in it), for the pyramid and the read.

Prints a table of seconds per round and the medians, and per round zarrd's CPU seconds
(/proc/<pid>/stat) and idle RSS during its build, the load average and the page cache's
dirty and writeback MiB before it (/proc/meminfo); the targets (issue 16) are zarrd's
pyramid at least as fast as TensorStore's with peak RSS under 512 MiB above idle, and the
downsampled read at least 1.0x TensorStore's.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import resource
import shutil
import statistics
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
BASELINE = os.environ.get("ZARRD_BASELINE_BIN")
SHAPE = tuple(int(x) for x in os.environ.get("SHAPE", "512,1024,512").split(","))
CHUNK = (64, 128, 128)
ROUNDS = int(os.environ.get("ROUNDS", "2"))
LIMIT_MIB = 512
LISTENING = re.compile(r".*?(http://[0-9.]+:[0-9]+)")
CODECS = [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1}}]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    """User + system CPU time of this process (TensorStore's threads included)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def meminfo_mib(*keys: str) -> dict:
    """Fields of /proc/meminfo, in MiB (page cache, dirty pages)."""
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        k, v = line.split(":", 1)
        if k in keys:
            out[k] = int(v.split()[0]) // 1024
    return out


def create(path: Path, shape) -> ts.TensorStore:
    return ts.open(
        {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(path)},
            "create": True,
            "delete_existing": True,
            "metadata": {
                "shape": list(shape),
                "data_type": "float32",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(CHUNK)}},
                "codecs": CODECS,
                "fill_value": 0,
                "dimension_names": ["z", "y", "x"],
            },
        }
    ).result()


def level_shapes():
    shapes = [SHAPE]
    while not all(s <= c for s, c in zip(shapes[-1], CHUNK)):
        shapes.append(tuple(-(-s // 2) for s in shapes[-1]))
    return shapes


def tensorstore_pyramid(src: Path, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    out.mkdir(parents=True)
    (out / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    shutil.copytree(src, out / "0")
    base = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(out / "0")}}).result()
    for k, shape in enumerate(level_shapes()[1:], start=1):
        level = create(out / str(k), shape)
        level.write(ts.downsample(base, [2**k] * 3, "mean")).result()
    return time.perf_counter() - t0


class Server:
    def __init__(self, data: Path, binary: Path = BIN):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRD_")} | {"RUST_LOG": "warn"}
        self.proc = subprocess.Popen(
            [str(binary), "serve", "--bind", "127.0.0.1:0", "--mount", f"m={data}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        m = LISTENING.match(self.proc.stdout.readline().decode())
        if not m:
            sys.exit("zarrd did not start")
        u = urllib.parse.urlsplit(m.group(1))
        self.host, self.port = u.hostname, u.port

    def request(self, method: str, path: str, body=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=3600)
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"content-type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def zarrd_pyramid(server: Server, name: str) -> tuple[float, float, float, float]:
    """Seconds, peak RSS above idle (MiB), CPU seconds, idle RSS before (MiB)."""
    idle = rss_kib(server.proc.pid)
    cpu0 = cpu_seconds(server.proc.pid)
    peak = [idle]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_kib(server.proc.pid))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    code, body = server.request("POST", f"/api/v1/pyramids/m/src", {"method": "mean", "destination": name})
    assert code == 202, body
    job = json.loads(body)
    for _ in range(36000):
        code, body = server.request("GET", f"/api/v1/jobs/m/{job['id']}")
        st = json.loads(body)
        if st["state"] != "running":
            break
        time.sleep(0.05)
    elapsed = time.perf_counter() - t0
    done.set()
    sampler.join()
    assert st["state"] == "completed", st
    return elapsed, (peak[0] - idle) / 1024, cpu_seconds(server.proc.pid) - cpu0, idle / 1024


def main() -> None:
    if not BIN.is_file():
        sys.exit(f"no release binary at {BIN}: run `cargo build --release` (or set ZARRD_BIN)")
    tmp = Path(tempfile.mkdtemp(prefix="zarrd-bench-pyramid-"))
    server = None
    try:
        data = tmp / "data"
        src = create(data / "src", SHAPE)
        rng = np.random.default_rng(16)
        for z in range(0, SHAPE[0], CHUNK[0]):
            block = rng.random((min(CHUNK[0], SHAPE[0] - z),) + SHAPE[1:], dtype=np.float32)
            src[z : z + block.shape[0]].write(block).result()
        gib = np.prod(SHAPE) * 4 / 2**30
        print(f"source: float32 {SHAPE} ({gib:.2f} GiB), chunks {CHUNK}, zstd 1; levels {level_shapes()}",
              file=sys.stderr)
        server = Server(data)
        code, _ = server.request("GET", "/api/v1/data/m/src?sel=0:2,0:2,0:2")
        assert code == 200
        if BASELINE:
            base_server = Server(data, Path(BASELINE))
            assert base_server.request("GET", "/api/v1/data/m/src?sel=0:2,0:2,0:2")[0] == 200
        time.sleep(0.5)
        rows = []
        for r in range(ROUNDS):
            order = ["zarrd", "ts"] if r % 2 == 0 else ["ts", "zarrd"]
            times = {}
            for who in order:
                if who == "zarrd":
                    shutil.rmtree(data / f"z{r}", ignore_errors=True)
                    times["mem"] = meminfo_mib("Cached", "Dirty", "Writeback", "MemAvailable")
                    times["load"] = os.getloadavg()[0]
                    times["zarrd"], times["rss"], times["cpu"], times["idle"] = zarrd_pyramid(server, f"z{r}")
                else:
                    c0 = own_cpu_seconds()
                    times["ts"] = tensorstore_pyramid(data / "src", tmp / f"ts{r}")
                    times["ts_cpu"] = own_cpu_seconds() - c0
            last = len(level_shapes()) - 1
            a = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(data / f"z{r}" / str(last))}}).result()
            b = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(tmp / f"ts{r}" / str(last))}}).result()
            assert np.array_equal(a.read().result(), b.read().result()), "the coarsest levels differ"
            # The downsampled read, both ways.
            for who in order:
                t0, c0, z0 = time.perf_counter(), own_cpu_seconds(), cpu_seconds(server.proc.pid)
                if who == "zarrd":
                    code, body = server.request(
                        "GET", "/api/v1/data/m/src?downsample=4,4,4&downsample_method=mean&format=raw"
                    )
                    assert code == 200, body[:300]
                    got = np.frombuffer(body, dtype="<f4")
                    times["zarrd_read"] = time.perf_counter() - t0
                    times["zarrd_read_cpu"] = cpu_seconds(server.proc.pid) - z0
                else:
                    base = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(data / "src")}}).result()
                    expected = ts.downsample(base, [4, 4, 4], "mean").read().result()
                    times["ts_read"] = time.perf_counter() - t0
                    times["ts_read_cpu"] = own_cpu_seconds() - c0
            assert np.array_equal(got, expected.ravel()), "the downsampled reads differ"
            if BASELINE:
                shutil.rmtree(data / f"b{r}", ignore_errors=True)
                times["base"], times["base_rss"], times["base_cpu"], _ = zarrd_pyramid(base_server, f"b{r}")
                shutil.rmtree(data / f"b{r}", ignore_errors=True)
                t0, z0 = time.perf_counter(), cpu_seconds(base_server.proc.pid)
                code, body = base_server.request(
                    "GET", "/api/v1/data/m/src?downsample=4,4,4&downsample_method=mean&format=raw"
                )
                assert code == 200 and np.array_equal(np.frombuffer(body, dtype="<f4"), got)
                times["base_read"] = time.perf_counter() - t0
                times["base_read_cpu"] = cpu_seconds(base_server.proc.pid) - z0
            shutil.rmtree(tmp / f"ts{r}", ignore_errors=True)
            shutil.rmtree(data / f"z{r}", ignore_errors=True)
            rows.append(times)
            print(f"round {r}: " + ", ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                                             for k, v in times.items()), file=sys.stderr)
        med = {k: statistics.median(t[k] for t in rows) for k in rows[0] if k != "mem"}
        print(f"| measure | zarrd | TensorStore | TensorStore / zarrd |")
        print(f"|---|---|---|---|")
        print(f"| pyramid, {gib:.2f} GiB float32 zstd, mean, {len(level_shapes())} levels (s) "
              f"| {med['zarrd']:.2f} | {med['ts']:.2f} | {med['ts'] / med['zarrd']:.2f}x |")
        print(f"| whole array downsampled 4x4x4 mean (s) | {med['zarrd_read']:.2f} | {med['ts_read']:.2f} "
              f"| {med['ts_read'] / med['zarrd_read']:.2f}x |")
        print(f"| zarrd peak RSS above idle during the pyramid (MiB) | {max(t['rss'] for t in rows):.0f} "
              f"| | limit {LIMIT_MIB} |")
        print(f"| zarrd pyramid per round: seconds / CPU seconds / idle RSS MiB | "
              + "; ".join(f"{t['zarrd']:.1f} / {t['cpu']:.1f} / {t['idle']:.0f}" for t in rows) + " | | |")
        print(f"| TensorStore pyramid per round (s) | | " + "; ".join(f"{t['ts']:.1f}" for t in rows) + " | |")
        print(f"| CPU seconds, pyramid (median) | {med['cpu']:.2f} | {med['ts_cpu']:.2f} | {med['ts_cpu'] / med['cpu']:.2f}x |")
        print(f"| CPU seconds, downsampled read (median) | {med['zarrd_read_cpu']:.2f} | {med['ts_read_cpu']:.2f} "
              f"| {med['ts_read_cpu'] / med['zarrd_read_cpu']:.2f}x |")
        if BASELINE:
            print(f"| baseline zarrd ({BASELINE}): pyramid s / CPU s / peak RSS above idle MiB (max) "
                  f"| {med['base']:.2f} / {med['base_cpu']:.2f} / {max(t['base_rss'] for t in rows):.0f} | | |")
            print(f"| baseline zarrd: downsampled read s / CPU s | {med['base_read']:.2f} / {med['base_read_cpu']:.2f} | | |")
    finally:
        if server is not None:
            server.stop()
        if BASELINE and "base_server" in locals():
            base_server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
