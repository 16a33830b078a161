#!/usr/bin/env python3
"""Reference decode speeds for `cargo bench --bench codec_matrix`.

Writes one real 2 MiB chunk per codec case (compressed by numcodecs, as
zarr-python writes v2 arrays) plus its `.zarray` into a directory, times
numcodecs decoding each chunk and TensorStore reading the same one-chunk
array from memory (cache off), and records both in `manifest.json`. The Rust
bench then decodes the same bytes through zarrd's codec chain and prints the
table with the ratios. Data: the smooth-plus-noise signal of bench/table.py,
in 256×256×k chunks of 1, 2, 4 and 8-byte unsigned integers.

Run (bench/README.md, "Codecs"):
    ~/.cache/zarrd/venv/bin/python bench/codecs.py target/codec-bench
    ZARRD_CODEC_DIR=target/codec-bench cargo bench --bench codec_matrix
"""

from __future__ import annotations

import json
import os
from importlib.metadata import version
import statistics
import sys
import time
from pathlib import Path

import google_crc32c
import numcodecs
import numcodecs.blosc
import numpy as np
import tensorstore as ts

CHUNK_BYTES = 2 << 20
REPEAT = 15
DTYPES = {1: "u1", 2: "u2", 4: "u4", 8: "u8"}


def signal(itemsize: int) -> np.ndarray:
    """A 256×256×k chunk of bench/table.py's smooth signal with noise."""
    k = CHUNK_BYTES // (256 * 256 * itemsize)
    y = np.linspace(0, 8, 256, dtype=np.float32)[:, None]
    x = np.linspace(0, 4, 256, dtype=np.float32)[None, :]
    base = np.sin(y) * np.cos(x)
    rng = np.random.default_rng(itemsize)
    z = (np.arange(k, dtype=np.float32) / 100)[:, None, None]
    b = base[None] + z + rng.normal(0, 0.01, (k, 256, 256)).astype(np.float32)
    scale = {1: 20, 2: 1000, 4: 100000, 8: 1e9}[itemsize]
    return (b * scale + 4 * scale).astype(np.dtype(DTYPES[itemsize]))


def cases() -> list[tuple[str, int, dict | None, str, str]]:
    """(name, itemsize, compressor config, dtype byte order, order)."""
    out = []
    for cname in ("lz4", "zstd", "blosclz", "zlib"):
        for shuffle, sname in ((0, "noshuffle"), (1, "shuffle"), (2, "bitshuffle")):
            for size in (1, 2, 4, 8):
                cfg = {"id": "blosc", "cname": cname, "clevel": 5, "shuffle": shuffle, "blocksize": 0}
                out.append((f"blosc_{cname}_{sname}_u{size * 8}", size, cfg, "<", "C"))
    for level in (1, 3, 9):
        out.append((f"zstd_{level}_u16", 2, {"id": "zstd", "level": level}, "<", "C"))
    out.append(("gzip_5_u16", 2, {"id": "gzip", "level": 5}, "<", "C"))
    out.append(("zlib_5_u16", 2, {"id": "zlib", "level": 5}, "<", "C"))
    out.append(("lz4_u16", 2, {"id": "lz4", "acceleration": 1}, "<", "C"))
    out.append(("bz2_5_u16", 2, {"id": "bz2", "level": 5}, "<", "C"))
    out.append(("crc32c_u16", 2, {"id": "crc32c"}, "<", "C"))
    out.append(("raw_u16", 2, None, "<", "C"))
    for size in (2, 4, 8):
        out.append((f"bytes_be_u{size * 8}", size, None, ">", "C"))
    out.append(("transpose_f_u32", 4, None, "<", "F"))
    return out


def median_mbps(fn, nbytes: int, check=None, setup=None) -> float:
    times = []
    for _ in range(REPEAT):
        if setup is not None:
            setup()
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
        if check is not None:
            check(out)
        del out
    return nbytes / statistics.median(times) / 1e6


def file_bytes_read() -> int:
    """TensorStore's count of bytes its file kvstore has read (all opens)."""
    for m in ts.experimental_collect_matching_metrics("/tensorstore/kvstore/file/bytes_read"):
        return sum(v.get("value", 0) for v in m.get("values", []))
    return 0


def main() -> None:
    # One thread per decode, as TensorStore and zarrd's c-blosc column decode a chunk:
    # numcodecs' blosc otherwise splits a chunk over every core (2 here), which made its
    # column up to twice the per-core speed on the blosc zstd / blosclz cases.
    numcodecs.blosc.set_nthreads(1)
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "target/codec-bench")
    out.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name, size, cfg, endian, order in cases():
        data = signal(size)
        dtype = np.dtype(endian + DTYPES[size])
        stored = np.ascontiguousarray(data.astype(dtype)) if order == "C" else np.asfortranarray(data.astype(dtype))
        raw = stored.tobytes(order="A")
        codec = numcodecs.get_codec(dict(cfg)) if cfg else None
        # The array, not its bytes: numcodecs' blosc takes its typesize from the item size.
        chunk = codec.encode(stored) if codec else raw
        chunk = bytes(chunk)
        zarray = {
            "zarr_format": 2, "shape": list(data.shape), "chunks": list(data.shape), "dtype": dtype.str,
            "compressor": cfg, "fill_value": 0, "order": order, "filters": None,
        }
        (out / f"{name}.bin").write_bytes(chunk)
        if codec:
            assert bytes(codec.decode(chunk)) == raw, name
            numcodecs_mbps = median_mbps(lambda: codec.decode(chunk), len(raw))
        else:
            # No codec: the reference is numpy's own work on the same bytes (a
            # copy, a byte swap, or the F -> C reorder).
            view = np.frombuffer(chunk, dtype=dtype).reshape(data.shape, order=order)
            numcodecs_mbps = median_mbps(lambda: np.ascontiguousarray(view.astype(data.dtype)), len(raw))
        # TensorStore: the same chunk in an in-memory store, read whole with the cache off.
        ts_mbps = None
        try:
            # Files in the page cache: TensorStore's memory kvstore lives in one context.
            path = out / "ts" / name
            path.mkdir(parents=True, exist_ok=True)
            (path / ".zarray").write_text(json.dumps(zarray))
            (path / ".".join("0" * len(data.shape))).write_bytes(chunk)
            arr = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": str(path)},
                           "recheck_cached_data": True,
                           "context": {"cache_pool": {"total_bytes_limit": 0}}, "open": True}).result()
            assert np.array_equal(arr.read().result(), data), name
            chunk_file = path / ".".join("0" * len(data.shape))
            stamp = iter(range(10**18, 10**18 + 10 * REPEAT))

            def touch() -> None:
                # A new mtime before every read (untimed): with the pool at
                # 0 bytes TensorStore still kept the decoded chunk of slow
                # codecs (gzip, bz2, zstd 9) and revalidated it against an
                # unchanged file, answering from the cache at ~20 GB/s.
                t = next(stamp)
                os.utime(chunk_file, ns=(t, t))

            def same(out: np.ndarray) -> None:
                assert np.array_equal(out, data), name
            before = file_bytes_read()
            ts_mbps = median_mbps(lambda: arr.read().result(), len(raw), same, setup=touch)
            # Every timed read read the whole chunk from the file (so decoded it).
            read = file_bytes_read() - before
            assert read == REPEAT * len(chunk), f"{name}: TensorStore read {read} B, expected {REPEAT * len(chunk)}"
        except (ValueError, AssertionError) as e:  # a codec TensorStore's zarr driver lacks
            print(f"{name}: TensorStore: {str(e)[:120]}", file=sys.stderr)
        # What a reader must produce: C order, native (little-endian) bytes.
        expected = np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<")).tobytes()
        manifest.append({"name": name, "zarray": zarray, "decoded_bytes": len(raw), "stored_bytes": len(chunk),
                         "crc32c": google_crc32c.value(expected),
                         "numcodecs_mbps": round(numcodecs_mbps, 1),
                         "tensorstore_mbps": None if ts_mbps is None else round(ts_mbps, 1)})
        print(f"{name:32} {len(chunk):>9} B  numcodecs {numcodecs_mbps:8.0f} MB/s  "
              f"TensorStore {'-' if ts_mbps is None else f'{ts_mbps:.0f}':>6} MB/s", flush=True)
    (out / "manifest.json").write_text(json.dumps({
        "numcodecs": numcodecs.__version__, "tensorstore": version("tensorstore"), "cases": manifest}, indent=1))


if __name__ == "__main__":
    main()
