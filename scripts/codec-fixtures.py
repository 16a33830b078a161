"""Reference encodings for the bytes -> bytes codec tests
(src/zarr/codec/bytes_to_bytes/*.rs), made by numcodecs.

Pinned: numcodecs 0.16.6 (zarr-python 3.1.6's), numpy. Run with that venv:
    python scripts/codec-fixtures.py
and paste the hex constants into the tests. The input is
`(np.arange(1024) % 17).astype("<u4")` (4096 bytes), which the Rust tests
rebuild as `counting_u32()`.
"""
import numcodecs
import numpy as np
from numcodecs import BZ2, CRC32C, LZ4, Blosc, GZip, Zlib, Zstd

assert numcodecs.__version__ == "0.16.6", numcodecs.__version__
data = (np.arange(1024) % 17).astype("<u4").tobytes()

cases = {
    "GZIP_L1": GZip(level=1),
    "GZIP_L9": GZip(level=9),
    "ZLIB_L1": Zlib(level=1),
    "BZ2_L1": BZ2(level=1),
    "ZSTD_L1": Zstd(level=1),
    "ZSTD_CHECKSUM": Zstd(level=3, checksum=True),
    "LZ4": LZ4(),
    "BLOSC_LZ4_SHUFFLE": Blosc(cname="lz4", clevel=5, shuffle=Blosc.SHUFFLE),
    "BLOSC_ZSTD_BITSHUFFLE": Blosc(cname="zstd", clevel=5, shuffle=Blosc.BITSHUFFLE),
    "BLOSC_BLOSCLZ_NOSHUFFLE": Blosc(cname="blosclz", clevel=9, shuffle=Blosc.NOSHUFFLE),
    "BLOSC_ZLIB_AUTOSHUFFLE": Blosc(cname="zlib", clevel=1, shuffle=Blosc.AUTOSHUFFLE),
}
for name, codec in cases.items():
    enc = bytes(codec.encode(np.frombuffer(data, dtype="<u4")))
    assert bytes(codec.decode(enc)) == data
    print(f"// {codec!r}")
    print(f'const {name}: &str = "{enc.hex()}";')
# Empty inputs.
for name, codec in {"LZ4_EMPTY": LZ4(), "ZSTD_EMPTY": Zstd(), "GZIP_EMPTY": GZip()}.items():
    print(f'const {name}: &str = "{bytes(codec.encode(b"")).hex()}";')
# Checksums.
hello = np.frombuffer(b"hello zarr", dtype="u1")
print(f'const HELLO_END: &str = "{bytes(CRC32C().encode(hello)).hex()}";')
print(f'const HELLO_START: &str = "{bytes(CRC32C(location="start").encode(hello)).hex()}";')
