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

With `FLOORS=box` (default `FLOORS="plane box"`) it also measures the floors under the whole
array and the aligned box `[512:1024, 512:1024, :]` (table.py's "whole" and "aligned" on the same
uncompressed array), the transport ceiling issue 14 sets 0.9x of, one connection each, the client
receiving into a preallocated buffer, rounds interleaved:

- `ceiling`: nginx (sendfile) serving a static file of the answer's size (as table.py);
- `read+gather`: a minimal server process (two threads: one producing slabs of one row of chunks,
  one sending them; three reused slab buffers) that preads each chunk whole into a reused buffer,
  copies it into its places in the slab (numpy) and writes the slab to a loopback socket: the
  least any read()-based server that gathers does (kernel->user, user->user, user->socket);
- `preadv`: the same server reading each chunk with one preadv straight into its rows' places in
  the slab (one iovec per 32 KiB row run): no gather copy.

The client (this process) reads the body into a preallocated buffer; CPU seconds of the serving
process(es) and of the client are shown per read.

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
import socket
import struct
import sys
import threading
import time
import multiprocessing
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


# ---------------------------------------------------------------- whole and aligned floors

# name -> the box (chunk-grid ranges of dims 0 and 1; dim 2 is one chunk).
BOXES = {
    "whole": ((0, SHAPE[0] // CHUNK[0]), (0, SHAPE[1] // CHUNK[1])),
    "aligned": ((512 // SCALE // CHUNK[0], 1024 // SCALE // CHUNK[0]), (512 // SCALE // CHUNK[1], 1024 // SCALE // CHUNK[1])),
}


def box_bytes(box: str) -> int:
    (i0, i1), (j0, j1) = BOXES[box]
    return (i1 - i0) * (j1 - j0) * CHUNK[0] * CHUNK[1] * CHUNK[2] * 4


def serve_floor(listener: socket.socket, path: str) -> None:
    """The minimal server (a child process): per request (`<mode> <box>\n`), slabs of one row of
    chunks produced on one thread and sent on another (three reused slab buffers), length first."""
    import queue

    root = Path(path)
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    chunk_bytes = CHUNK[0] * CHUNK[1] * CHUNK[2] * 4
    row_run = CHUNK[1] * CHUNK[2] * 4  # one chunk row's bytes, contiguous in the slab
    rfile = conn.makefile("rb")
    cbuf = bytearray(chunk_bytes)
    cview = memoryview(cbuf)
    carr = np.frombuffer(cbuf, dtype=np.uint8).reshape(CHUNK[0], row_run)
    slabs: dict[int, list[bytearray]] = {}
    while True:
        line = rfile.readline()
        if not line:
            return
        mode, box = line.decode().split()
        (i0, i1), (j0, j1) = BOXES[box]
        nj = j1 - j0
        slab_len = CHUNK[0] * nj * row_run
        pool = slabs.setdefault(slab_len, [bytearray(slab_len) for _ in range(3)])
        free: queue.Queue = queue.Queue()
        for b in pool:
            free.put(b)
        full: queue.Queue = queue.Queue(maxsize=1)

        def produce() -> None:
            for i in range(i0, i1):
                slab = free.get()
                sview = memoryview(slab)
                sarr = np.frombuffer(slab, dtype=np.uint8).reshape(CHUNK[0], nj, row_run)
                for j in range(j0, j1):
                    fd = os.open(root / "c" / str(i) / str(j) / "0", os.O_RDONLY)
                    try:
                        if mode == "gather":
                            got = os.preadv(fd, [cview], 0)
                            sarr[:, j - j0, :] = carr
                        else:
                            # Row r of the chunk goes to slab[r, j - j0, :].
                            views = [sview[(r * nj + (j - j0)) * row_run : (r * nj + (j - j0) + 1) * row_run] for r in range(CHUNK[0])]
                            got = os.preadv(fd, views, 0)
                    finally:
                        os.close(fd)
                    if got != chunk_bytes:
                        raise SystemExit(f"chunk {i},{j}: read {got} of {chunk_bytes} bytes")
                full.put(slab)
            full.put(None)

        conn.sendall(struct.pack("<Q", (i1 - i0) * slab_len))
        t = threading.Thread(target=produce)
        t.start()
        while (slab := full.get()) is not None:
            conn.sendall(slab)
            free.put(slab)
        t.join()


def floor_client(sock: socket.socket, mode: str, box: str, out: memoryview) -> int:
    sock.sendall(f"{mode} {box}\n".encode())
    head = bytearray(8)
    got = 0
    while got < 8:
        got += sock.recv_into(memoryview(head)[got:])
    (n,) = struct.unpack("<Q", head)
    got = 0
    while got < n:
        k = sock.recv_into(out[got:n])
        if not k:
            raise RuntimeError(f"floor server: body cut short at {got} of {n}")
        got += k
    return n


def box_floors(tmp: Path, path: Path, arr) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import table  # nginx, the ceiling read and the CPU clocks, as table.py measures them

    for box in BOXES:
        table.write_random(path / "ceiling" / f"{box}.bin", box_bytes(box))
    os.chmod(tmp, 0o755)
    nginx = table.Nginx(tmp, path)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    server = multiprocessing.get_context("fork").Process(target=serve_floor, args=(listener, str(path)), daemon=True)
    server.start()
    try:
        sock = socket.create_connection(listener.getsockname())
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        nconn = table.http.client.HTTPConnection("127.0.0.1", nginx.port, timeout=600)
        out = bytearray(box_bytes("whole"))
        view = memoryview(out)
        nginx_pids = [nginx.proc.pid] + table.children(nginx.proc.pid)
        methods = {
            "ceiling": (lambda box: table.get_into(nconn, f"/data/ceiling/{box}.bin", view), nginx_pids),
            "read+gather": (lambda box: floor_client(sock, "gather", box, view), [server.pid]),
            "preadv": (lambda box: floor_client(sock, "preadv", box, view), [server.pid]),
        }
        # Each floor server's answer equals TensorStore's before timing.
        for box in BOXES:
            (i0, i1), (j0, j1) = BOXES[box]
            want = arr[i0 * CHUNK[0] : i1 * CHUNK[0], j0 * CHUNK[1] : j1 * CHUNK[1], :].read().result()
            for m in ("read+gather", "preadv"):
                view[: want.nbytes] = bytes(want.nbytes)
                n = methods[m][0](box)
                got = np.frombuffer(out, dtype=np.float32, count=n // 4).reshape(want.shape)
                assert n == want.nbytes and np.array_equal(got, want), f"{m} {box} differs from TensorStore"
        names = list(methods)
        print(f"\nwhole and aligned floors of {SHAPE} float32 in {CHUNK} uncompressed chunks; medians of {N} rounds\n")
        print("| selection | MB out | method | MB/s | / ceiling | server CPU ms | client CPU ms |")
        print("|---|---:|---|---:|---:|---:|---:|")
        for box in BOXES:
            times: dict[str, list[tuple[float, float, float]]] = {m: [] for m in names}
            for r in range(N):
                for m in names[r % len(names) :] + names[: r % len(names)]:
                    fn, pids = methods[m]
                    times[m].append(table.cpu_timed(lambda: fn(box), pids))
            nb = box_bytes(box)
            ceil = statistics.median(t for t, _, _ in times["ceiling"])
            for m in names:
                t = statistics.median(x[0] for x in times[m])
                c = statistics.median(x[1] for x in times[m])
                s = statistics.median(x[2] for x in times[m])
                print(f"| {box} | {nb / 1e6:.0f} | {m} | {nb / t / 1e6:.0f} | {ceil / t:.2f} | {s * 1e3:.0f} | {c * 1e3:.0f} |")
        sock.close()
    finally:
        server.kill()
        nginx.stop()


def main() -> None:
    floors = os.environ.get("FLOORS", "plane box").split()
    tmp = Path(tempfile.mkdtemp(prefix="zarrd-floor-"))
    try:
        path = tmp / "raw"
        write(path)
        if "box" in floors:
            spec = {
                "driver": "zarr3",
                "kvstore": {"driver": "file", "path": str(path)},
                "context": {"cache_pool": {"total_bytes_limit": 0}},
            }
            box_floors(tmp, path, ts.open(spec).result())
        if "plane" not in floors:
            return
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
