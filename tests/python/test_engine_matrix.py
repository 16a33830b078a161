"""The engine fixture matrix against both real clients, in both directions.

`tests/fixtures/engine/matrix` (made by `tests/fixtures/engine/generate_matrix.py`)
holds arrays written by zarr-python, TensorStore and numpy + numcodecs, with the
values the writing client reads back (`<name>.expected.*`). `tests/engine_matrix.rs`
checks that the engine decodes them to those values. Here:

1. **Fixtures, TensorStore side.** TensorStore reads every fixture it supports to the
   same values (structured arrays field by field, as TensorStore opens them), and
   zarr-python reads the TensorStore-written fixtures it supports to TensorStore's
   values. Where a client does not support an array, the test asserts that it still
   refuses it, with the documented reason (`TS_UNSUPPORTED`, `ZARR_UNSUPPORTED`), so
   the lists cannot go stale.
2. **Write-back.** `examples/engine_write` (built next to the zarrd binary) writes every
   matrix array with the engine alone: its metadata serialisation, its codecs, two
   region writes per array (the second a read-modify-write), fill-valued chunks
   omitted. zarr-python and TensorStore then read each back element for element, and
   the engine stores exactly the chunk keys the original writer stored.

Client disagreements found while building the matrix are listed in `DISAGREEMENTS`
and asserted, so a client release that changes behaviour shows up here.
"""

from __future__ import annotations

import json
import re
import subprocess
import warnings
from pathlib import Path

import ml_dtypes
import numcodecs
import numpy as np
import pytest
import tensorstore as ts
import zarr

from zarrd_harness import REPO_ROOT, zarrd_binary

MATRIX = REPO_ROOT / "tests" / "fixtures" / "engine" / "matrix"
ENTRIES = json.loads((MATRIX / "matrix.json").read_text())["arrays"]
BY_NAME = {e["name"]: e for e in ENTRIES}

# Why TensorStore 0.1.86 refuses an array: a predicate on (entry, metadata) and the
# message TensorStore gives. Checked in order; the first match applies.
TS_UNSUPPORTED = [
    ("variable-length strings and bytes (no such dtype in zarr / zarr3)",
     lambda e, m: e["expected"] != "bin", r"data type|dtype|filters are not supported"),
    ("numcodecs.* codecs in zarr.json",
     lambda e, m: "numcodecs." in json.dumps(m.get("codecs", [])), r'"numcodecs\.\w+" is not registered'),
    ("zarr-python's v3 extension types other than structured and raw_bytes",
     lambda e, m: isinstance(m.get("data_type"), dict)
     and m["data_type"]["name"] in ("fixed_length_utf32", "null_terminated_bytes", "numpy.datetime64",
                                    "numpy.timedelta64"),
     r"data_type"),
    ("v2 datetime64 / timedelta64 / unicode dtypes",
     lambda e, m: isinstance(m.get("dtype"), str) and re.match(r"^[<>|][mMU]", m["dtype"]) is not None,
     r"Unsupported zarr dtype"),
    ("v2 nested structured dtypes",
     lambda e, m: isinstance(m.get("dtype"), list) and any(isinstance(f[1], list) for f in m["dtype"]),
     r"Expected string"),
    ("bytes -> bytes codecs after sharding_indexed (zarr-python writes and reads them)",
     lambda e, m: any(c.get("name") == "sharding_indexed" for c in m.get("codecs", [])[:-1]),
     r"not compatible with subsequent bytes -> bytes codecs"),
    ("the v2 lz4 and checksum compressors",
     lambda e, m: (m.get("compressor") or {}).get("id") in ("lz4", "crc32c", "crc32", "adler32"),
     r'"(lz4|crc32c|crc32|adler32)" is not registered'),
    ("v2 zstd with checksum", lambda e, m: "checksum" in (m.get("compressor") or {}),
     r'extra members: "checksum"'),
    # Checked after the compressor rules: TensorStore parses "compressor" first.
    ("v2 filters", lambda e, m: bool(m.get("filters")), r"filters are not supported"),
]

# Why zarr-python 3.1.6 refuses the arrays marked `"zarr_python": false` in matrix.json.
ZARR_UNSUPPORTED = ("TensorStore's bfloat16, int4 and float8 types; v2 records with subarray or nested fields",
                    r"No Zarr data type found")

# Arrays on which the clients disagree: name -> (what happens, regex of TensorStore's error).
DISAGREEMENTS = {
    # zarr-python writes b"xy" for a |S4 fill value as "eHk="; TensorStore requires exactly
    # 4 bytes. zarrd reads both and writes the padded "eHkAAA==", which both read.
    "v2_S4": ("TensorStore rejects zarr-python's short |S fill value", r"Expected 4 base64-encoded bytes"),
}


# Chunks the original writer stored and the engine does not, by array. The values read
# back equal either way (checked); only the storage of fill-valued chunks differs.
EXTRA_WRITER_KEYS = {
    # v2 `fill_value: null`: zarr-python and TensorStore store a chunk of zeros (empty
    # strings) written over a region; the engine reads null as zero, as TensorStore
    # does, so the chunk equals its fill value and is omitted.
    "v2_bytes": {"2.1"},
    "ts_v2_float8_e4m3b11fnuz": {"1.1"},
    # TensorStore writes the padding of an int4 edge chunk as whole bytes (0xff for -1)
    # next to nibbles (0x0f), and stores the all-fill edge chunk; the engine omits it.
    "ts_v3_int4_zstd": {"c/2/0"},
}


def metadata(root: Path, name: str) -> dict:
    v3 = root / name / "zarr.json"
    return json.loads((v3 if v3.exists() else root / name / ".zarray").read_text())


def np_dtype(spec) -> np.dtype:
    if "ml_dtypes" in spec:
        return np.dtype(getattr(ml_dtypes, spec["ml_dtypes"]))

    def conv(d):
        if isinstance(d, str):
            return d
        return [tuple([f[0], conv(f[1])] + ([tuple(f[2])] if len(f) > 2 else [])) for f in d]

    return np.dtype(conv(spec["descr"]))


def engine_layout(a: np.ndarray) -> bytes:
    """The engine's in-memory bytes of a client's array (as the generator writes them)."""
    a = np.asarray(a)
    if a.dtype.name == "int4":
        return np.ascontiguousarray(a.astype(np.int8)).tobytes()
    if a.dtype.name.startswith(("bfloat16", "float8")) or a.dtype.kind == "V" and not a.dtype.names:
        return np.ascontiguousarray(a).tobytes()
    return np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"))).tobytes()


def expected_items(entry) -> list:
    """Variable-length expected values, as zarr-python returns them."""
    items = json.loads((MATRIX / f"{entry['name']}.expected.json").read_text())
    return [bytes.fromhex(s) for s in items] if entry["expected"] == "bytes" else items


def ts_reason(entry, meta):
    for reason, applies, message in TS_UNSUPPORTED:
        if applies(entry, meta):
            return reason, message
    return None


def ts_open(root: Path, entry, field=None):
    spec = {"driver": "zarr3" if entry["zarr_format"] == 3 else "zarr",
            "kvstore": {"driver": "file", "path": str(root / entry["name"])}}
    if field is not None:
        spec["field"] = field
    return ts.open(spec, read=True).result()


def check_tensorstore(root: Path, entry) -> str:
    """TensorStore reads `root/<name>` to the expected values, or refuses it as documented."""
    name = entry["name"]
    meta = metadata(root, name)
    if name in DISAGREEMENTS and root == MATRIX:
        with pytest.raises(ValueError, match=DISAGREEMENTS[name][1]):
            ts_open(root, entry)
        return "disagreement"
    refused = ts_reason(entry, meta)
    if refused:
        with pytest.raises(ValueError, match=refused[1]):
            ts_open(root, entry, field=(entry.get("fields") or [{}])[0].get("name"))
        return "unsupported"
    if entry.get("fields"):
        for field in entry["fields"]:
            want = (MATRIX / f"{name}.field.{field['name']}.bin").read_bytes()
            ts_compare(ts_open(root, entry, field["name"]), field["shape"], np_dtype(field["dtype"]), want,
                       f"{name}.{field['name']}")
        return "fields"
    want = (MATRIX / f"{name}.expected.bin").read_bytes()
    ts_compare(ts_open(root, entry), entry["shape"], np_dtype(entry["dtype"]), want, name)
    return "read"


def ts_compare(store, shape, dtype: np.dtype, want: bytes, what: str):
    """TensorStore's values equal `want`. Byte-string and raw types TensorStore represents as
    `char`/`byte` arrays with the element size as an extra dimension, whose values its Python
    binding cannot export (numpy `V0`); for those only the shape and type are compared."""
    if store.dtype.name in ("byte", "char"):
        assert dtype.kind in "SV", what
        assert list(store.shape) == list(shape) + [dtype.itemsize], f"{what}: TensorStore shape {store.shape}"
        return
    assert list(store.shape) == list(shape), f"{what}: TensorStore shape {store.shape}"
    got = store.read().result()
    assert engine_layout(got) == want, f"{what}: TensorStore reads other values"


def check_zarr_python(root: Path, entry) -> str:
    """zarr-python reads `root/<name>` to the expected values, or refuses it as documented."""
    name = entry["name"]
    if entry.get("zarr_python") is False:
        with pytest.raises(ValueError, match=ZARR_UNSUPPORTED[1]):
            zarr.open_array(str(root / name), mode="r")
        return "unsupported"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = zarr.open_array(str(root / name), mode="r")[...]
    if entry["expected"] == "bin":
        assert engine_layout(got) == (MATRIX / f"{name}.expected.bin").read_bytes(), \
            f"{name}: zarr-python reads other values"
    else:
        assert [bytes(x) if isinstance(x, bytes) else str(x) for x in got.ravel()] == expected_items(entry), name
    return "read"


# ---------------------------------------------------------------------------
# 1. The committed fixtures.

@pytest.mark.parametrize("name", [e["name"] for e in ENTRIES])
def test_tensorstore_reads_fixture_like_its_writer(name):
    check_tensorstore(MATRIX, BY_NAME[name])


@pytest.mark.parametrize("name", [e["name"] for e in ENTRIES if e["writer"] != "zarr-python"])
def test_zarr_python_reads_non_zarr_python_fixture(name):
    check_zarr_python(MATRIX, BY_NAME[name])


def test_clients_cover_most_of_the_matrix():
    """Most arrays are checked by TensorStore too; the documented refusals stay a minority."""
    outcomes = {}
    for e in ENTRIES:
        meta = metadata(MATRIX, e["name"])
        outcomes[e["name"]] = "refused" if (ts_reason(e, meta) or e["name"] in DISAGREEMENTS) else "read"
    read = sum(1 for v in outcomes.values() if v == "read")
    assert read >= 100, f"TensorStore checks only {read} of {len(ENTRIES)} arrays"
    assert set(DISAGREEMENTS) <= set(BY_NAME)


# ---------------------------------------------------------------------------
# 2. What the engine writes.

def engine_write_binary() -> Path:
    """examples/engine_write, built by `cargo build --example engine_write` next to zarrd."""
    path = zarrd_binary().parent / "examples" / "engine_write"
    assert path.exists(), (
        f"{path} not found: build it with `cargo build --example engine_write` (scripts/test-all does)"
    )
    return path


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("engine-written")
    run = subprocess.run([str(engine_write_binary()), str(MATRIX), str(out)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert f"wrote {len(ENTRIES)} arrays" in run.stdout
    return out


def chunk_keys(root: Path) -> set[str]:
    skip = {"zarr.json", ".zarray", ".zattrs", ".zgroup"}
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name not in skip}


@pytest.mark.parametrize("name", [e["name"] for e in ENTRIES])
def test_engine_written_array_reads_back_in_both_clients(written, name):
    entry = BY_NAME[name]
    outcomes = {check_zarr_python(written, entry), check_tensorstore(written, entry)}
    if entry["writer"] == "numpy+numcodecs":
        outcomes.add(check_numpy_v2(written, entry))
    assert outcomes & {"read", "fields"}, f"{name}: no client could read the engine's array"
    # The engine stores exactly the chunks the original writer stored: fill-valued
    # chunks (and fill-valued inner chunks of shards) are omitted the same way.
    ours, theirs = chunk_keys(written / name), chunk_keys(MATRIX / name)
    assert ours <= theirs, f"{name}: the engine stored chunks the writer did not: {sorted(ours - theirs)}"
    assert theirs - ours == EXTRA_WRITER_KEYS.get(name, set()), name


def with_defaults(doc):
    """A metadata document with the defaults the engine writes out made explicit: the
    chunk key separator, sharding's `index_location`; and without the members it always
    writes (`attributes`, `storage_transformers`)."""
    doc = json.loads(json.dumps(doc))
    for key in ("attributes", "storage_transformers"):
        doc.pop(key, None)
    cke = doc.get("chunk_key_encoding")
    if isinstance(cke, dict):
        cke.setdefault("configuration", {}).setdefault("separator", "/" if cke["name"] == "default" else ".")

    def codecs(items):
        for c in items:
            if isinstance(c, dict) and c.get("name") == "sharding_indexed":
                c["configuration"].setdefault("index_location", "end")
                codecs(c["configuration"]["codecs"])
                codecs(c["configuration"]["index_codecs"])

    codecs(doc.get("codecs", []))
    return doc


def test_engine_metadata_is_the_writers(written):
    """The engine's serialisation of every fixture's metadata is the writer's document,
    member for member, once defaults are made explicit; the one documented exception is
    the padded |S fill value (see DISAGREEMENTS)."""
    for e in ENTRIES:
        ours = with_defaults(metadata(written, e["name"]))
        theirs = with_defaults(metadata(MATRIX, e["name"]))
        if e["name"] == "v2_S4":
            assert (theirs.pop("fill_value"), ours.pop("fill_value")) == ("eHk=", "eHkAAA==")
        assert ours == theirs, e["name"]


def check_numpy_v2(root: Path, entry) -> str:
    """Decodes a v2 array as zarr-python 2 did (numcodecs, then numpy in the chunk's order):
    the reader for the nested records neither current client opens."""
    meta = metadata(root, entry["name"])
    assert meta["fill_value"] is None and not meta["filters"], "only what the numpy writer writes"

    def dtype(d):
        return d if isinstance(d, str) else [tuple([f[0], dtype(f[1])] + ([tuple(f[2])] if len(f) > 2 else [])) for f in d]

    dt = np.dtype(dtype(meta["dtype"]))
    shape, chunks = meta["shape"], meta["chunks"]
    codec = numcodecs.get_codec(meta["compressor"]) if meta["compressor"] else None
    sep = meta.get("dimension_separator", ".")
    out = np.zeros(shape, dtype=dt)
    grid = [-(-s // c) for s, c in zip(shape, chunks)]
    for idx in np.ndindex(*grid):
        path = root / entry["name"] / sep.join(map(str, idx))
        if not path.exists():
            continue
        raw = path.read_bytes()
        raw = bytes(codec.decode(raw)) if codec else raw
        chunk = np.frombuffer(raw, dtype=dt).reshape(chunks, order=meta["order"])
        region = tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunks, shape))
        out[region] = chunk[tuple(slice(0, r.stop - r.start) for r in region)]
    want = (MATRIX / f"{entry['name']}.expected.bin").read_bytes()
    assert engine_layout(out) == want, f"{entry['name']}: numpy + numcodecs read other values"
    return "read"
