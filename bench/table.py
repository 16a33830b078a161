#!/usr/bin/env python3
"""Issue 14's table: zarrd's slice endpoint against TensorStore in-process, TensorStore via
nginx and the transport ceiling, on four array kinds, plus store GETs against nginx with wrk.

Run with the test venv's Python after `cargo build --release` (see bench/README.md):

    ~/.cache/zarrd/venv/bin/python bench/table.py                     # ~15 min at full size
    SCALE=4 N=1 WRK_SECONDS=2 ~/.cache/zarrd/venv/bin/python bench/table.py   # a quick check
    ZARRD_BASELINE_BIN=/path/to/old/zarrd ~/.cache/zarrd/venv/bin/python bench/table.py

1. Real clients write four arrays of shape (2048/SCALE, 2048/SCALE, 64) into a temporary
   directory: TensorStore the three v3 ones (float32 in 128x128x64 chunks with zstd level 1;
   the same without compression; 512x512x64 shards of 128x128x64 zstd inner chunks with a
   crc32c index) and zarr-python the v2 one (uint16 in 256x256x16 chunks, blosc lz4 with byte
   shuffle). The values are a smooth field plus noise, the floats quantised to 1/8192 (zstd level 1
   turns a 4 MiB chunk into about 2.5 MB).
   For the wrk section they also write a small-chunk array (8x8 uint8 chunks of tens of bytes
   after zstd), an array with no chunks stored (missing keys) and 256 small arrays (metadata).
2. nginx (static files, sendfile, no logs, loopback, its configuration in the temp dir) and
   the release zarrd with its caches off (`cache.chunk_bytes = cache.object_bytes = 0`) serve
   the same directory.
3. For each kind x selection, N rounds, the methods interleaved in every round (their order
   rotated from round to round), each one read timed:
   - zarrd: `GET /api/v1/data/bench/<array>?sel=...&format=raw` on a keep-alive connection,
     the body read with `readinto` into a preallocated buffer;
   - TS in-process: TensorStore (cache pool 0) on the file kvstore, `arr[sel].read()`;
   - TS via nginx: the same over TensorStore's http kvstore from nginx;
   - ceiling: a static file of the answer's size from nginx, read like zarrd's answer: what one
     client can receive over one connection at all.
   Every method's answer is compared once with TensorStore's before timing.
   The figure is MB/s of returned bytes (10^6 B), the median of N.
   Around every timed read the CPU each side spent is taken too (`cpu_timed`): the serving
   process's (zarrd's, or nginx's master and workers) from Linux's process CPU clock, and the
   measuring process's own (`time.process_time`: every thread, so TensorStore's included). A
   second table gives per cell zarrd's server CPU against TensorStore in-process's, and the
   bound the cores set: (zarrd server + client CPU) / cores against TensorStore's wall.
4. wrk (2 threads, WRK_CONNS connections, WRK_SECONDS per run after a WRK_WARMUP s warmup with
   a per-response status check) cycling through up to 256 keys of each case against nginx and
   zarrd (default configuration: caches on), alternating which goes first, WRK_ROUNDS rounds;
   median requests/s. Cases: small chunk objects, metadata documents (zarr.json), missing
   keys (404), 2.5 MB chunks (the zstd array's), ranged reads of inner chunks (Range requests
   into the sharded array's shards, offsets from their indexes), and the hot tile (one
   256x256 float32 chunk of a 2048x2048 zstd image read again and again as a slice,
   `format=raw`, from the decoded-chunk cache; nginx serves a static file of its size).

Targets (issue 14), bold where missed: zarrd >= 1.0x TS via nginx and >= 0.8x TS in-process
(>= 1.0x for unaligned boxes and planes); uncompressed whole/aligned >= 0.9x the ceiling, the
uncompressed plane >= 3x TS in-process; wrk: small objects, metadata and 404 >= 1.0x nginx,
large chunks and ranged reads >= 1.2x; the hot tile >= 10,000 req/s.

Knobs (environment): SCALE (1, 2 or 4; divides the first two dimensions and the selections),
N (rounds, default 3), KINDS (e.g. "zstd raw"), SELS (e.g. "whole plane"), WRK=0 (skip wrk),
WRK_CONNS ("16 64"), WRK_SECONDS (5), WRK_WARMUP (1), WRK_ROUNDS (1), WRK_CASES, ZARRD_BIN,
ZARRD_BASELINE_BIN (a second build measured interleaved: the table gains its figures and the
ratio new / baseline), OUT (also write the report there), KEEP_TMP=1, TMPDIR.
"""

from __future__ import annotations

import http.client
import json
import os
import platform
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import numcodecs
import numpy as np
import tensorstore as ts
import zarr
from bench_server import Server

ROOT = Path(__file__).resolve().parent.parent
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
BIN = Path(os.environ.get("ZARRD_BIN", TARGET / "release" / "zarrd"))
BASELINE = Path(os.environ["ZARRD_BASELINE_BIN"]) if os.environ.get("ZARRD_BASELINE_BIN") else None
SCALE = int(os.environ.get("SCALE", "1"))
N = int(os.environ.get("N", "3"))
WRK = os.environ.get("WRK", "1") != "0"
WRK_CONNS = [int(c) for c in os.environ.get("WRK_CONNS", "16 64").split()]
WRK_SECONDS = int(os.environ.get("WRK_SECONDS", "5"))
WRK_WARMUP = int(os.environ.get("WRK_WARMUP", "1"))
WRK_ROUNDS = int(os.environ.get("WRK_ROUNDS", "1"))
NGINX = os.environ.get("NGINX", shutil.which("nginx") or "/usr/sbin/nginx")

if SCALE not in (1, 2, 4):
    sys.exit("SCALE must be 1, 2 or 4 (the aligned box must stay on chunk boundaries)")
S = 2048 // SCALE
SHAPE = (S, S, 64)


def sc(x: int) -> int:
    return x // SCALE


# name, label, zarr version, dtype
KINDS = {
    "zstd": ("v3 f32, 128×128×64 chunks, zstd 1", np.float32),
    "raw": ("v3 f32, same chunks, no compression", np.float32),
    "sharded": ("v3 sharded: 512×512×64 shards of 128×128×64 zstd inner chunks, crc32c index", np.float32),
    "blosc": ("v2 u16, 256×256×16 chunks, blosc lz4 shuffle", np.uint16),
}
KIND_ORDER = [k for k in os.environ.get("KINDS", "zstd raw sharded blosc").split() if k in KINDS]

# name, label, numpy index, zarrd sel=, smaller than the chunks it touches
SELECTIONS = {
    "whole": ("whole", (slice(None),) * 3, ":,:,:", False),
    "aligned": (
        f"aligned {sc(512)}×{sc(512)}×64",
        (slice(sc(512), sc(1024)), slice(sc(512), sc(1024)), slice(None)),
        f"{sc(512)}:{sc(1024)},{sc(512)}:{sc(1024)},:",
        False,
    ),
    "unaligned": (
        f"unaligned [{sc(100)}:{sc(1100)},{sc(200)}:{sc(1200)},3:50]",
        (slice(sc(100), sc(1100)), slice(sc(200), sc(1200)), slice(3, 50)),
        f"{sc(100)}:{sc(1100)},{sc(200)}:{sc(1200)},3:50",
        True,
    ),
    "plane": ("plane [:, :, 7]", (slice(None), slice(None), 7), ":,:,7", True),
    # Not in the default SELS: a plane across the slowest dimension (a
    # sliver of each chunk it touches, contiguous in C order).
    "plane0": ("plane [7, :, :]", (7, slice(None), slice(None)), "7,:,:", True),
}
SEL_ORDER = [s for s in os.environ.get("SELS", "whole aligned unaligned plane").split() if s in SELECTIONS]

OUT_LINES: list[str] = []


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def emit(line: str = "") -> None:
    print(line, flush=True)
    OUT_LINES.append(line)


# ---------------------------------------------------------------- writing the arrays


def block(z0: int, rows: int, dtype) -> np.ndarray:
    """Rows z0..z0+rows of the data: a smooth field plus noise, the same for every run."""
    y = np.linspace(0, 8, SHAPE[1], dtype=np.float32)[:, None]
    x = np.linspace(0, 4, SHAPE[2], dtype=np.float32)[None, :]
    base = np.sin(y) * np.cos(x)
    rng = np.random.default_rng(z0)
    z = (np.arange(z0, z0 + rows, dtype=np.float32) / 100)[:, None, None]
    b = base[None] + z + rng.normal(0, 0.01, (rows,) + SHAPE[1:]).astype(np.float32)
    if dtype == np.uint16:
        return (b * 1000 + 4000).astype(np.uint16)
    # Quantised to 1/8192: zstd level 1 then makes about 2.5 MB of a 4 MiB chunk.
    return (np.round(b * 8192) / 8192).astype(np.float32)


def file_spec(path: Path, driver: str = "zarr3") -> dict:
    return {
        "driver": driver,
        "kvstore": {"driver": "file", "path": str(path) + "/"},
        "context": {"cache_pool": {"total_bytes_limit": 0}},
        "recheck_cached_data": False,
    }


def http_spec(base: str, name: str, driver: str) -> dict:
    return {
        "driver": driver,
        "kvstore": {"driver": "http", "base_url": f"{base}/data/{name}/"},
        "context": {"cache_pool": {"total_bytes_limit": 0}},
        "recheck_cached_data": False,
    }


ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}
BYTES = {"name": "bytes", "configuration": {"endian": "little"}}


def v3_metadata(kind: str) -> dict:
    grid = [128, 128, 64]
    codecs = [BYTES, ZSTD] if kind == "zstd" else [BYTES]
    if kind == "sharded":
        grid = [512, 512, 64]
        codecs = [
            {
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": [128, 128, 64],
                    "codecs": [BYTES, ZSTD],
                    "index_codecs": [BYTES, {"name": "crc32c"}],
                    "index_location": "end",
                },
            }
        ]
    return {
        "shape": list(SHAPE),
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": grid}},
        "codecs": codecs,
        "fill_value": 0,
    }


def write_kind(data: Path, kind: str) -> None:
    path = data / kind
    step = 512 if kind == "sharded" else 256
    step = min(step, SHAPE[0])
    if kind == "blosc":
        # zarr-python, v2 format: blosc lz4 with byte shuffle (numcodecs).
        arr = zarr.create_array(
            store=str(path),
            shape=SHAPE,
            chunks=(256, 256, 16),
            dtype="uint16",
            zarr_format=2,
            compressors=numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
            fill_value=0,
        )
        for z0 in range(0, SHAPE[0], step):
            arr[z0 : z0 + step] = block(z0, step, np.uint16)
        return
    arr = ts.open(file_spec(path) | {"create": True, "metadata": v3_metadata(kind)}).result()
    for z0 in range(0, SHAPE[0], step):
        arr[z0 : z0 + step].write(block(z0, step, np.float32)).result()


def write_wrk_data(data: Path) -> None:
    """The small-chunk array (256 chunks of tens of bytes), an empty one (missing keys), and
    256 small arrays (their zarr.json)."""
    meta = {
        "shape": [128, 128],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8, 8]}},
        "codecs": [BYTES, ZSTD],
        "fill_value": 0,
    }
    small = ts.open(file_spec(data / "small") | {"create": True, "metadata": meta}).result()
    yy, xx = np.mgrid[0:128, 0:128]
    small.write(((yy * 3 + xx * 7) % 251 + 1).astype(np.uint8)).result()
    ts.open(file_spec(data / "empty") | {"create": True, "metadata": meta}).result()
    # The hot tile: a 2048×2048 float32 image in 256×256 zstd chunks; one
    # chunk-aligned tile read again and again (decoded-chunk cache), and a
    # static file of the answer's size for nginx (the transport reference).
    tile_meta = meta | {"shape": [2048, 2048], "data_type": "float32",
                        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [256, 256]}}}
    tile = ts.open(file_spec(data / "tile") | {"create": True, "metadata": tile_meta}).result()
    yy, xx = np.mgrid[0:2048, 0:2048]
    tile.write(((yy * 2048 + xx) % 65521).astype(np.float32)).result()
    write_random(data / "tile-reference.bin", TILE_BYTES)
    for i in range(256):
        ts.open(
            file_spec(data / "meta" / f"a{i}")
            | {"create": True, "metadata": meta | {"attributes": {"index": i, "note": "bench/table.py"}}}
        ).result()


# ---------------------------------------------------------------- nginx


def free_port() -> int:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Nginx:
    def __init__(self, tmp: Path, data: Path) -> None:
        self.dir = tmp / "nginx"
        for d in ("tmp", "logs"):
            (self.dir / d).mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        user = f"user {_user()};" if os.geteuid() == 0 else ""
        conf = f"""
daemon off;
master_process on;
worker_processes auto;
pid {self.dir}/nginx.pid;
error_log {self.dir}/logs/error.log warn;
{user}
events {{ worker_connections 1024; }}
http {{
    access_log off;
    log_not_found off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 65;
    keepalive_requests 1000000;
    server_tokens off;
    default_type application/octet-stream;
    types {{ application/json json; }}
    client_body_temp_path {self.dir}/tmp/body;
    proxy_temp_path {self.dir}/tmp/proxy;
    fastcgi_temp_path {self.dir}/tmp/fastcgi;
    uwsgi_temp_path {self.dir}/tmp/uwsgi;
    scgi_temp_path {self.dir}/tmp/scgi;
    server {{
        listen 127.0.0.1:{self.port};
        location /data/ {{ alias {data}/; }}
        location / {{ return 404; }}
    }}
}}
"""
        (self.dir / "nginx.conf").write_text(conf)
        args = [NGINX, "-p", f"{self.dir}/", "-c", f"{self.dir}/nginx.conf", "-e", f"{self.dir}/logs/error.log"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(300):
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/data/zarr.json")
                if c.getresponse().status == 200:
                    c.close()
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"nginx did not start: {(self.dir / 'logs/error.log').read_text()}")

    def version(self) -> str:
        return subprocess.run([NGINX, "-v"], capture_output=True, text=True).stderr.strip()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _user() -> str:
    import grp
    import pwd

    return f"{pwd.getpwuid(os.getuid()).pw_name} {grp.getgrgid(os.getgid()).gr_name}"


# ---------------------------------------------------------------- reading


def get_into(conn: http.client.HTTPConnection, path: str, out: memoryview) -> int:
    try:
        return get_into_once(conn, path, out)
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, http.client.CannotSendRequest):
        # A keep-alive connection closed while idle (a slow step on a loaded machine).
        conn.close()
        return get_into_once(conn, path, out)


def get_into_once(conn: http.client.HTTPConnection, path: str, out: memoryview) -> int:
    conn.request("GET", path)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"GET {path}: {resp.status} {resp.read()[:300]!r}")
    n = int(resp.getheader("content-length"))
    got = 0
    while got < n:
        k = resp.readinto(out[got:n])
        if not k:
            raise RuntimeError(f"GET {path}: body cut short at {got} of {n} bytes")
        got += k
    return n


def zarrd_path(kind: str, sel: str) -> str:
    return f"/api/v1/data/bench/{kind}?" + urllib.parse.urlencode({"sel": sel, "format": "raw"})


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# ---------------------------------------------------------------- CPU accounting


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread, the exited ones included) of another process.

    Linux's process CPU clock (`clock_gettime` on the clock id `(~pid << 3) | CPUCLOCK_SCHED`,
    readable for any process) has nanosecond resolution; /proc/<pid>/stat's utime + stime, the
    fallback, counts in clock ticks (10 ms), as coarse as a whole small read."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (nginx's workers)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def cpu_timed(fn, server_pids: list[int]) -> tuple[float, float, float]:
    """(wall s, this process's CPU s, the servers' CPU s) of one call. `time.process_time` is
    the whole client process (TensorStore's own threads included), not the calling thread."""
    s0 = sum(process_cpu(p) for p in server_pids)
    c0 = time.process_time()
    t0 = time.perf_counter()
    fn()
    t = time.perf_counter() - t0
    c = time.process_time() - c0
    s = sum(process_cpu(p) for p in server_pids) - s0
    return t, c, s


def measure_table(data: Path, nginx: Nginx, zarrds: list[tuple[str, Server]]) -> dict:
    """Per (kind, selection): output bytes and per method the list of times."""
    results: dict = {}
    largest = 4 * int(np.prod(SHAPE))
    buf = bytearray(largest)
    view = memoryview(buf)
    conns = {name: s.conn(timeout=600) for name, s in zarrds}
    nconn = http.client.HTTPConnection("127.0.0.1", nginx.port, timeout=600)
    arrays = {}
    for kind in KIND_ORDER:
        driver = "zarr" if kind == "blosc" else "zarr3"
        arrays[kind] = (
            ts.open(file_spec(data / kind, driver)).result(),
            ts.open(http_spec(nginx.url, kind, driver)).result(),
        )
    # Checks (untimed; they also warm every path): every method's answer equals TensorStore's.
    ceiling_files: dict[int, str] = {}
    for kind in KIND_ORDER:
        local, remote = arrays[kind]
        dtype = KINDS[kind][1]
        for sel in SEL_ORDER:
            _, index, zsel, _ = SELECTIONS[sel]
            log(f"check {kind} {sel} ...")
            expected = local[index].read().result()
            if not np.array_equal(remote[index].read().result(), expected):
                raise RuntimeError(f"{kind} {sel}: TensorStore via nginx differs from TensorStore in-process")
            for name, _ in zarrds:
                n = get_into(conns[name], zarrd_path(kind, zsel), view)
                got = np.frombuffer(buf, dtype=np.dtype(dtype).newbyteorder("<"), count=n // expected.itemsize)
                if n != expected.nbytes or not np.array_equal(got.reshape(expected.shape), expected):
                    raise RuntimeError(f"{kind} {sel}: {name}'s answer differs from TensorStore's")
            nbytes = expected.nbytes
            del expected
            if nbytes not in ceiling_files:
                rel = f"ceiling/{nbytes}.bin"
                write_random(data / rel, nbytes)
                ceiling_files[nbytes] = rel
            if get_into(nconn, f"/data/{ceiling_files[nbytes]}", view) != nbytes:
                raise RuntimeError("the ceiling file came back with the wrong size")
            results[(kind, sel)] = {"bytes": nbytes, "times": {}, "client_cpu": {}, "server_cpu": {}}
    methods = [name for name, _ in zarrds] + ["TS in-process", "TS via nginx", "ceiling"]
    server_pids = {name: [s.proc.pid] for name, s in zarrds}
    nginx_pids = [nginx.proc.pid] + children(nginx.proc.pid)
    for r in range(N):
        for kind in KIND_ORDER:
            local, remote = arrays[kind]
            for sel in SEL_ORDER:
                _, index, zsel, _ = SELECTIONS[sel]
                cell = results[(kind, sel)]
                order = methods[r % len(methods) :] + methods[: r % len(methods)]
                log(f"round {r + 1}/{N}: {kind} {sel}")
                for m in order:
                    if m == "TS in-process":
                        t, c, s = cpu_timed(lambda: local[index].read().result(), [])
                    elif m == "TS via nginx":
                        t, c, s = cpu_timed(lambda: remote[index].read().result(), nginx_pids)
                    elif m == "ceiling":
                        path = f"/data/{ceiling_files[cell['bytes']]}"
                        t, c, s = cpu_timed(lambda: get_into(nconn, path, view), nginx_pids)
                    else:
                        t, c, s = cpu_timed(lambda: get_into(conns[m], zarrd_path(kind, zsel), view), server_pids[m])
                    cell["times"].setdefault(m, []).append(t)
                    cell["client_cpu"].setdefault(m, []).append(c)
                    cell["server_cpu"].setdefault(m, []).append(s)
    for c in conns.values():
        c.close()
    nconn.close()
    return results


def write_random(path: Path, n: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    piece = os.urandom(1 << 20)
    with open(path, "wb") as f:
        left = n
        while left > 0:
            k = min(left, len(piece))
            f.write(piece[:k])
            left -= k


# ---------------------------------------------------------------- wrk

# The hot tile case: zarrd's slice `TILE_SEL` of the `tile` array (one whole
# chunk, from the decoded-chunk cache after the first read) against nginx
# serving a static file of the answer's size.
TILE_SEL = "256:512,512:768"
TILE_SEL_UNALIGNED = "128:384,640:896"
TILE_BYTES = 256 * 256 * 4


def wrk_cases(data: Path) -> list[tuple[str, int, list[tuple[str, str]]]]:
    """(label, expected status, [(key, range)]) for every wrk case, up to 256 keys each."""

    def keys(arr: str, grid: tuple[int, ...], suffix: str = "") -> list[str]:
        out = []
        for idx in np.ndindex(*grid):
            out.append(f"{arr}/c/" + "/".join(str(i) for i in idx) + suffix)
            if len(out) == 256:
                break
        return out

    cases = []
    small = keys("small", (16, 16))
    assert all((data / k).is_file() for k in small)
    sizes = sorted((data / k).stat().st_size for k in small)
    cases.append(("small", f"small chunk objects ({sizes[0]}–{sizes[-1]} B)", 200, [(k, "") for k in small]))
    meta = [f"meta/a{i}/zarr.json" for i in range(256)]
    msize = (data / meta[0]).stat().st_size
    cases.append(("meta", f"metadata documents (zarr.json, {msize} B)", 200, [(k, "") for k in meta]))
    empty = keys("empty", (16, 16))
    assert not any((data / k).exists() for k in empty)
    cases.append(("404", "missing keys (404)", 404, [(k, "") for k in empty]))
    if "zstd" in KIND_ORDER:
        big = [k for k in keys("zstd", (S // 128, S // 128, 1)) if (data / k).is_file()]
        mb = statistics.mean((data / k).stat().st_size for k in big) / 1e6
        cases.append(("large", f"large chunks (zstd array, {mb:.1f} MB)", 200, [(k, "") for k in big]))
    if "sharded" in KIND_ORDER:
        ranged = []
        for shard in keys("sharded", (S // 512, S // 512, 1)):
            raw = (data / shard).read_bytes()
            n_inner = 16
            index = raw[len(raw) - (16 * n_inner + 4) : len(raw) - 4]
            for j in range(n_inner):
                off, size = struct.unpack_from("<QQ", index, 16 * j)
                if off != 2**64 - 1:
                    ranged.append((shard, f"bytes={off}-{off + size - 1}"))
        ranged = ranged[:256]
        kb = statistics.mean(int(r.split("-")[1]) - int(r.split("=")[1].split("-")[0]) + 1 for _, r in ranged) / 1e3
        cases.append(("ranged", f"ranged inner-chunk reads ({kb:.0f} kB)", 206, ranged))
    # Full paths per server (the key list is not the same on both sides).
    cases.append(("tile", f"hot 256×256 float32 tile, format=raw ({TILE_BYTES // 1024} KiB; nginx: a static file)", 200,
                  {"nginx": [("/data/tile-reference.bin", "")],
                   "zarrd": [(f"/api/v1/data/bench/tile?sel={TILE_SEL}&format=raw", "")]}))
    cases.append(("tileu", f"hot unaligned 256×256 float32 tile (4 chunks), format=raw ({TILE_BYTES // 1024} KiB)", 200,
                  {"nginx": [("/data/tile-reference.bin", "")],
                   "zarrd": [(f"/api/v1/data/bench/tile?sel={TILE_SEL_UNALIGNED}&format=raw", "")]}))
    wanted = os.environ.get("WRK_CASES")
    if wanted:
        cases = [c for c in cases if c[0] in wanted.split()]
    return cases


def run_wrk(url: str, reqfile: Path, conns: int, seconds: int, status: int, check: bool) -> dict:
    env = os.environ | {"BENCH_REQS": str(reqfile), "EXPECT_STATUS": str(status), "BENCH_CHECK": "1" if check else "0"}
    cmd = ["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "--latency", "-s", str(ROOT / "bench" / "table.lua"), url]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=seconds + 60).stdout
    m = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    if not m:
        raise RuntimeError(f"wrk printed no rate:\n{out}")
    total = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = int(re.search(r"Non-2xx or 3xx responses: (\d+)", out).group(1)) if "Non-2xx" in out else 0
    sock = re.search(r"Socket errors: (.*)", out)
    problems = []
    if sock:
        problems.append(f"socket errors: {sock.group(1)}")
    if status < 400 and non2xx:
        problems.append(f"{non2xx} responses not 2xx/3xx")
    if status >= 400 and non2xx != total:
        problems.append(f"{total - non2xx} of {total} responses were not errors")
    chk = re.search(r"BENCH_RESULT checked=(\d+) mismatched=(\d+)", out)
    if check and chk and int(chk.group(2)):
        problems.append(f"{chk.group(2)} of {chk.group(1)} responses were not {status}")
    # The "Latency Distribution" line; a thread statistic's "89.99%" must not match.
    p99 = re.search(r"^\s*99%\s+(\S+)", out, re.M)
    return {"rps": float(m.group(1)), "p99": p99.group(1) if p99 else "?", "problems": problems}


def measure_wrk(tmp: Path, data: Path, nginx: Nginx, zarrds: list[tuple[str, Server]]) -> list:
    if not shutil.which("wrk"):
        raise RuntimeError("wrk is missing: apt-get install -y wrk")
    rows = []
    for case, label, status, reqs in wrk_cases(data):
        servers = [("nginx", nginx.url + "/data/")] + [(n, s.url + "/zarr/bench/") for n, s in zarrds]
        files = {}
        for name, prefix in servers:
            f = tmp / f"wrk-{case}-{name.replace(' ', '_')}.txt"
            if isinstance(reqs, dict):
                lines = reqs["nginx" if name == "nginx" else "zarrd"]
                f.write_text("".join(f"{p}\t{r}\n" for p, r in lines))
            else:
                path = urllib.parse.urlsplit(prefix).path
                f.write_text("".join(f"{path}{k}\t{r}\n" for k, r in reqs))
            files[name] = f
        for conns in WRK_CONNS:
            got: dict[str, list[dict]] = {name: [] for name, _ in servers}
            for r in range(WRK_ROUNDS):
                order = servers if r % 2 == 0 else servers[::-1]
                for name, prefix in order:
                    base = prefix.split("/", 3)
                    url = f"{base[0]}//{base[2]}/"
                    log(f"wrk {case} {conns} conns: {name} (round {r + 1}/{WRK_ROUNDS})")
                    if WRK_WARMUP:
                        warm = run_wrk(url, files[name], conns, WRK_WARMUP, status, True)
                        if warm["problems"]:
                            raise RuntimeError(f"wrk {case} {name}: {warm['problems']}")
                    got[name].append(run_wrk(url, files[name], conns, WRK_SECONDS, status, False))
            rows.append((case, label, len(reqs) if isinstance(reqs, list) else 1, conns, got))
    return rows


# ---------------------------------------------------------------- the report


def fmt_ratio(x: float, target: float | None) -> str:
    s = f"{x:.2f}"
    return f"**{s}**" if target is not None and x < target else s


def report(results: dict, wrk_rows: list, zarrd_names: list[str], nginx: Nginx, stored: dict) -> None:
    new = zarrd_names[-1]
    emit(f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; host: {os.cpu_count()} CPUs, "
         f"{platform.machine()}, Linux {platform.release()}")
    emit(f"- zarrd: `{BIN}`" + (f"; baseline: `{BASELINE}` (same run, interleaved)" if BASELINE else ""))
    emit(f"- {nginx.version()} (sendfile, tcp_nopush, no logs); TensorStore {ts_version()}, zarr-python "
         f"{zarr.__version__}, numpy {np.__version__}")
    emit(f"- shape {SHAPE} (SCALE={SCALE}); median of N={N} rounds, methods interleaved in every round; "
         "caches off on every side (zarrd: cache.chunk_bytes = cache.object_bytes = 0; TensorStore: cache pool 0)")
    emit("- stored: " + ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in stored.items()))
    emit("- MB/s of returned bytes (10^6 B/s). Bold: below the issue's target.")
    emit()
    head = ("| array | selection | MB out | TS in-process | TS via nginx | transport ceiling | zarrd | "
            "zarrd / TS via nginx | zarrd / TS in-process | zarrd / ceiling |")
    rule = "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    if BASELINE:
        head += " zarrd before | after / before |"
        rule += "---:|---:|"
    emit(head)
    emit(rule)
    for kind in KIND_ORDER:
        for i, sel in enumerate(SEL_ORDER):
            cell = results[(kind, sel)]
            label, _, _, small = SELECTIONS[sel]
            mb = cell["bytes"] / 1e6
            rate = {m: mb / statistics.median(t) for m, t in cell["times"].items()}
            z, tsl, tsn, ceil = rate[new], rate["TS in-process"], rate["TS via nginx"], rate["ceiling"]
            uncompressed = kind == "raw"
            local_target = 3.0 if (uncompressed and sel.startswith("plane")) else (1.0 if small else 0.8)
            ceil_target = 0.9 if (uncompressed and sel in ("whole", "aligned")) else None
            line = (
                f"| {KINDS[kind][0] if i == 0 else ''} | {label} | {mb:.0f} | {tsl:.0f} | {tsn:.0f} | {ceil:.0f} | "
                f"{z:.0f} | {fmt_ratio(z / tsn, 1.0)} | {fmt_ratio(z / tsl, local_target)} | "
                f"{fmt_ratio(z / ceil, ceil_target)} |"
            )
            if BASELINE:
                b = rate[zarrd_names[0]]
                line += f" {b:.0f} | {z / b:.2f} |"
            emit(line)
    report_cpu(results, zarrd_names)
    if not wrk_rows:
        return
    emit()
    emit(f"Store GETs with wrk (2 threads, {WRK_SECONDS} s after a {WRK_WARMUP} s warmup that checks every status, "
         f"cycling through the keys; zarrd with its default caches; median of {WRK_ROUNDS} round(s), "
         "nginx and zarrd alternating). Bold: below 1.0× nginx (small answers) or 1.2× (large, ranged).")
    emit()
    head = "| case | keys | conns | nginx req/s | zarrd req/s | zarrd / nginx | nginx p99 | zarrd p99 |"
    rule = "|---|---:|---:|---:|---:|---:|---:|---:|"
    if BASELINE:
        head += " before req/s | before / nginx | after / before |"
        rule += "---:|---:|---:|"
    emit(head + " check |")
    emit(rule + "---|")
    for case, label, nkeys, conns, got in wrk_rows:
        med = {n: statistics.median(r["rps"] for r in runs) for n, runs in got.items()}
        p99 = {n: "/".join(r["p99"] for r in runs) for n, runs in got.items()}
        problems = sorted({p for runs in got.values() for r in runs for p in r["problems"]})
        target = 1.2 if case in ("large", "ranged") else 1.0
        ng, z = med["nginx"], med[new]
        line = (f"| {label} | {nkeys} | {conns} | {ng:.0f} | {z:.0f} | {fmt_ratio(z / ng, target)} | "
                f"{p99['nginx']} | {p99[new]} |")
        if BASELINE:
            b = med[zarrd_names[0]]
            line += f" {b:.0f} | {fmt_ratio(b / ng, target)} | {z / b:.2f} |"
        emit(line + f" {'; '.join(problems) or 'ok'} |")


def report_cpu(results: dict, zarrd_names: list[str]) -> None:
    """Per cell, medians of N, in ms: wall, and the CPU each side spent (see `cpu_timed`)."""
    new = zarrd_names[-1]
    cores = os.cpu_count() or 1
    emit()
    emit(f"CPU per read (ms, medians of N={N}): **srv** the serving process (zarrd; nginx's master and workers "
         "for TS via nginx and the ceiling), **cli** the measuring Python process (TensorStore's threads included, "
         "so TS in-process's cli is all its work). zarrd srv / TS CPU: the server's work against TensorStore's "
         f"(bold above 1.0). Bound: (zarrd srv + cli) / {cores} cores, the shortest wall the cores allow zarrd at "
         "this CPU cost; TS wall / bound: the best zarrd / TS in-process the cores allow (bold below the target). "
         "Client CPU includes reading the body into a buffer (a copy of every byte) and Python's request overhead.")
    emit()
    head = ("| array | selection | TS in-process wall | TS in-process CPU | zarrd wall | zarrd srv | zarrd cli | "
            "zarrd srv / TS CPU | bound | TS wall / bound | TS via nginx cli | nginx srv (TS) | "
            "ceiling cli | nginx srv (ceiling) |")
    rule = "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    if BASELINE:
        head += " before srv | before cli | srv after / before |"
        rule += "---:|---:|---:|"
    emit(head)
    emit(rule)
    for kind in KIND_ORDER:
        for i, sel in enumerate(SEL_ORDER):
            cell = results[(kind, sel)]
            label, _, _, small = SELECTIONS[sel]
            med = {k: {m: 1e3 * statistics.median(v) for m, v in cell[k].items()}
                   for k in ("times", "client_cpu", "server_cpu")}
            wall, cli, srv = med["times"], med["client_cpu"], med["server_cpu"]
            ts_wall, ts_cpu = wall["TS in-process"], cli["TS in-process"]
            bound = (srv[new] + cli[new]) / cores
            target = 3.0 if (kind == "raw" and sel.startswith("plane")) else (1.0 if small else 0.8)
            ratio = srv[new] / ts_cpu if ts_cpu > 0 else float("nan")
            line = (
                f"| {KINDS[kind][0] if i == 0 else ''} | {label} | {ts_wall:.1f} | {ts_cpu:.1f} | "
                f"{wall[new]:.1f} | {srv[new]:.1f} | {cli[new]:.1f} | "
                f"{f'**{ratio:.2f}**' if ratio > 1.0 else f'{ratio:.2f}'} | {bound:.1f} | "
                f"{fmt_ratio(ts_wall / bound, target) if bound > 0 else '∞'} | "
                f"{cli['TS via nginx']:.1f} | {srv['TS via nginx']:.1f} | {cli['ceiling']:.1f} | "
                f"{srv['ceiling']:.1f} |"
            )
            if BASELINE:
                old = zarrd_names[0]
                line += f" {srv[old]:.1f} | {cli[old]:.1f} | {srv[new] / srv[old]:.2f} |" if srv[old] > 0 else " | | |"
            emit(line)


def ts_version() -> str:
    try:
        from importlib.metadata import version

        return version("tensorstore")
    except Exception:  # noqa: BLE001
        return "?"


def main() -> None:
    for b in [BIN] + ([BASELINE] if BASELINE else []):
        if not b.is_file():
            sys.exit(f"no zarrd binary at {b}: run `cargo build --release` (or set ZARRD_BIN)")
    tmp = Path(tempfile.mkdtemp(prefix="zarrd-bench-table-"))
    nginx = None
    servers: list[Server] = []
    try:
        data = tmp / "data"
        data.mkdir()
        (data / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}))
        stored = {}
        for kind in KIND_ORDER:
            log(f"writing {kind} {SHAPE} ...")
            t0 = time.perf_counter()
            write_kind(data, kind)
            stored[kind] = sum(f.stat().st_size for f in (data / kind).rglob("*") if f.is_file())
            log(f"  {time.perf_counter() - t0:.0f} s, {stored[kind] / 1e6:.0f} MB stored")
        write_wrk_data(data)
        os.chmod(tmp, 0o755)
        nginx = Nginx(tmp, data)
        names = (["zarrd before"] if BASELINE else []) + ["zarrd"]
        bins = ([BASELINE] if BASELINE else []) + [BIN]
        cold_env = {"ZARRD_CACHE__CHUNK_BYTES": "0", "ZARRD_CACHE__OBJECT_BYTES": "0"}
        cold = [(n, Server(b, data, cold_env)) for n, b in zip(names, bins)]
        servers += [s for _, s in cold]
        results = measure_table(data, nginx, cold)
        for _, s in cold:
            s.stop()
        wrk_rows = []
        if WRK:
            warm = [(n, Server(b, data, {})) for n, b in zip(names, bins)]
            servers += [s for _, s in warm]
            wrk_rows = measure_wrk(tmp, data, nginx, warm)
        report(results, wrk_rows, names, nginx, stored)
        if os.environ.get("OUT"):
            Path(os.environ["OUT"]).write_text("\n".join(OUT_LINES) + "\n")
    finally:
        for s in servers:
            s.stop()
        if nginx:
            nginx.stop()
        if os.environ.get("KEEP_TMP") == "1":
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
