#!/usr/bin/env python3
"""The floor under a plane through the fastest dimension of an uncompressed array: what any
server that reads files with read() must do, against TensorStore in-process.

Issue 14 asks for planes through the uncompressed array at 3x TensorStore in-process. The plane
`[:, :, 7]` of table.py's uncompressed array (float32, 128x128x64 C-order chunks) needs 4 bytes
of every 256: every page of every chunk it crosses holds part of it, so a reader that uses
read()/pread() must have the kernel copy each of those chunks whole (4 million 4-byte preads
would cost far more). This script measures, on the same files, in rounds with the methods
interleaved:

- `ts`: TensorStore in-process (file kvstore, cache pool 0) reading the plane;
- `pread1` / `pread2`: every chunk the plane crosses read with os.preadv into a reused 4 MiB
  buffer, on one and on two threads (the kernel's copy alone: the floor for any read()-based
  reader on this machine, before it gathers a single element);
- `pread2+gather`: the same plus gathering the plane out of each buffer (numpy), i.e. the
  least a read()-based server does before sending;
- `mmap+gather`: each chunk file mapped (numpy memmap) and the plane gathered from the mapping:
  no copy of whole chunks. Shown for the arithmetic only: zarrd does not map stored files,
  since a file truncated in place by another writer (zarr-python's local store writes that way)
  raises SIGBUS in the reader, which would kill the server.

Run with the test venv (after nothing: it writes its own array with TensorStore):

    ~/.cache/zarrd/venv/bin/python bench/read_floor.py            # 2048x2048x64 (1 GiB), 5 rounds
    SCALE=4 N=3 ~/.cache/zarrd/venv/bin/python bench/read_floor.py  # 512x512x64, quick

It prints MB/s of the plane's bytes (10^6 B/s, medians) and each method's time relative to TS.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tensorstore as ts

SCALE = int(os.environ.get("SCALE", "1"))
N = int(os.environ.get("N", "5"))
SHAPE = (2048 // SCALE, 2048 // SCALE, 64)
CHUNK = (128, 128, 64)
Z = 7


def write(path: Path) -> None:
    meta = {
        "shape": list(SHAPE),
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(CHUNK)}},
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "fill_value": 0,
    }
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}
    arr = ts.open(spec | {"create": True, "metadata": meta}).result()
    rng = np.random.default_rng(7)
    for x0 in range(0, SHAPE[0], 256):
        block = rng.random((min(256, SHAPE[0] - x0), SHAPE[1], SHAPE[2]), dtype=np.float32)
        arr[x0 : x0 + block.shape[0]].write(block).result()


def chunk_files(path: Path) -> list[Path]:
    nx, ny = SHAPE[0] // CHUNK[0], SHAPE[1] // CHUNK[1]
    return [path / "c" / str(i) / str(j) / "0" for i in range(nx) for j in range(ny)]


def pread_all(files: list[Path], threads: int, gather: np.ndarray | None) -> None:
    """Reads every file whole into a reused buffer per thread; gathers the plane when asked."""
    nbytes = CHUNK[0] * CHUNK[1] * CHUNK[2] * 4
    ny = SHAPE[1] // CHUNK[1]

    def work(part: list[tuple[int, Path]]) -> None:
        buf = bytearray(nbytes)
        view = memoryview(buf)
        arr = np.frombuffer(buf, dtype=np.float32).reshape(CHUNK)
        for k, f in part:
            fd = os.open(f, os.O_RDONLY)
            try:
                got = os.preadv(fd, [view], 0)
            finally:
                os.close(fd)
            if got != nbytes:
                raise SystemExit(f"{f}: read {got} of {nbytes} bytes")
            if gather is not None:
                i, j = divmod(k, ny)
                gather[i * CHUNK[0] : (i + 1) * CHUNK[0], j * CHUNK[1] : (j + 1) * CHUNK[1]] = arr[:, :, Z]

    items = list(enumerate(files))
    parts = [items[t::threads] for t in range(threads)]
    pool = [threading.Thread(target=work, args=(p,)) for p in parts]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def mmap_gather(files: list[Path], out: np.ndarray) -> None:
    ny = SHAPE[1] // CHUNK[1]
    for k, f in enumerate(files):
        i, j = divmod(k, ny)
        m = np.memmap(f, dtype=np.float32, mode="r", shape=CHUNK)
        out[i * CHUNK[0] : (i + 1) * CHUNK[0], j * CHUNK[1] : (j + 1) * CHUNK[1]] = m[:, :, Z]
        del m


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="zarrd-floor-"))
    try:
        path = tmp / "raw"
        write(path)
        files = chunk_files(path)
        spec = {
            "driver": "zarr3",
            "kvstore": {"driver": "file", "path": str(path)},
            "context": {"cache_pool": {"total_bytes_limit": 0}},
        }
        arr = ts.open(spec).result()
        want = arr[:, :, Z].read().result()
        out_bytes = want.nbytes
        plane = np.empty(SHAPE[:2], dtype=np.float32)
        # Every method's plane equals TensorStore's once before timing.
        pread_all(files, 2, plane)
        assert np.array_equal(plane, want), "pread gather differs from TensorStore"
        plane[:] = 0
        mmap_gather(files, plane)
        assert np.array_equal(plane, want), "mmap gather differs from TensorStore"
        methods = {
            "ts": lambda: arr[:, :, Z].read().result(),
            "pread1": lambda: pread_all(files, 1, None),
            "pread2": lambda: pread_all(files, 2, None),
            "pread2+gather": lambda: pread_all(files, 2, plane),
            "mmap+gather": lambda: mmap_gather(files, plane),
        }
        times: dict[str, list[float]] = {m: [] for m in methods}
        names = list(methods)
        for r in range(N):
            for m in names[r % len(names) :] + names[: r % len(names)]:
                t0 = time.perf_counter()
                methods[m]()
                times[m].append(time.perf_counter() - t0)
        chunk_mib = len(files) * CHUNK[0] * CHUNK[1] * CHUNK[2] * 4 / 2**20
        print(f"plane [:, :, {Z}] of {SHAPE} float32 in {CHUNK} uncompressed chunks: "
              f"{out_bytes / 1e6:.1f} MB out of {len(files)} chunks ({chunk_mib:.0f} MiB); medians of {N} rounds\n")
        print("| method | s | plane MB/s | chunk bytes GB/s | time / TS |")
        print("|---|---:|---:|---:|---:|")
        t_ts = statistics.median(times["ts"])
        for m in names:
            t = statistics.median(times[m])
            print(f"| {m} | {t:.4f} | {out_bytes / t / 1e6:.0f} | {chunk_mib * 2**20 / t / 1e9:.2f} | {t / t_ts:.2f} |")
        t_floor = statistics.median(times["pread2"])
        print(f"\n3x TS in-process needs {t_ts / 3:.4f} s; the kernel's copy of the chunks alone takes "
              f"{t_floor:.4f} s on 2 threads ({t_floor / (t_ts / 3):.2f}x that budget).")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
