"""Hostile metadata and data against the real binary, with the server's peak RSS measured
(issue 12, findings 4, 6-10): each request must be refused (or served) without raising the
server's peak RSS past a bound far below what it cost before the fixes (gigabytes, or an
abort).
"""

from __future__ import annotations

import concurrent.futures
import socket
import time
import gzip
import json

import pytest
import requests
import numcodecs
from zarrd_harness import PeakRss, start_zarrd

HTTP_TIMEOUT_S = 120
MIB = 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    logs = tmp_path_factory.mktemp("hostile-logs")
    s = start_zarrd({"data": root.as_uri()}, log_path=logs / "zarrd.log")
    s.root = root
    yield s
    s.stop()


def v3(shape, chunks, dtype="uint8", fill=0, codecs=None):
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": dtype,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill,
        "codecs": codecs or [{"name": "bytes", "configuration": {"endian": "little"}}],
        "attributes": {},
    }


def bound(rss: PeakRss, limit_kib: int, what: str) -> None:
    """Asserts the rise and reports it (`pytest -s` shows the figures)."""
    print(f"{what}: peak RSS rose {rss.rise_kib} KiB (bound {limit_kib} KiB)")
    rss.assert_below(limit_kib, what)


def behind(server, key: str, doc) -> None:
    """Writes a document straight into the mount's directory, as another tool would."""
    path = server.root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())


def put_data(server, path: str, sel: str, body: str) -> requests.Response:
    return requests.put(
        f"{server.url}/api/v1/data/data/{path}",
        params={"sel": sel},
        data=body,
        headers={"content-type": "application/json"},
        timeout=HTTP_TIMEOUT_S,
    )


def test_write_over_too_many_chunks_is_refused_in_bounded_memory(server):
    # Finding 4: 412 GB allocation (abort) and > 2.9 GB before.
    behind(server, "huge/zarr.json", v3([2**62, 2**62], [1, 1]))
    for sel in ["0:131072,0:131072", "0:4096,0:4096"]:
        with PeakRss(server) as rss:
            r = put_data(server, "huge", sel, "0")
        assert r.status_code == 413, r.text
        assert "limits.max_chunks_per_request" in r.json()["error"]["message"]
        bound(rss, 32 * MIB, f"write {sel}")
    with PeakRss(server) as rss:
        r = put_data(server, "huge", "0:100,0:100", "3")
    assert r.status_code == 204, r.text
    bound(rss, 64 * MIB, "write over 10,000 one-element chunks")


def test_one_element_write_into_absurd_chunks_is_refused(server):
    # Finding 6: 4 EiB allocation (abort) before.
    behind(server, "absurd/zarr.json", v3([2**31, 2**31], [2**31, 2**31]))
    with PeakRss(server) as rss:
        r = put_data(server, "absurd", "0,0", "1")
        g = requests.get(f"{server.url}/api/v1/data/data/absurd?sel=0,0&format=json", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 422 and g.status_code == 422, (r.text, g.text)
    assert "limits.max_decoded_chunk_bytes" in r.json()["error"]["message"]
    bound(rss, 16 * MIB, "one-element write into [2^31, 2^31] chunks")


def test_huge_fill_value_is_refused(server):
    # Finding 7: 5,000 elements of a 1 MiB fill aborted at 5.5 GB before.
    doc = v3([5000], [5000], "string", "f" * (1 << 20), [{"name": "vlen-utf8"}])
    behind(server, "fill/zarr.json", doc)
    with PeakRss(server) as rss:
        r = requests.get(f"{server.url}/api/v1/data/data/fill?sel=0:5000&format=json", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 422, r.text
    assert "limits.max_fill_value_bytes" in r.json()["error"]["message"]
    bound(rss, 32 * MIB, "JSON read of a 1 MiB fill value")


def test_huge_stored_document_is_not_parsed(server):
    # Finding 8: an 86 MiB zarr.json peaked at 2.7 GB; describing it aborted.
    attributes = {f"k{i}": [i, i + 1, i + 2] for i in range(3_000_000)}
    doc = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attributes}).encode()
    assert len(doc) > 80 * 1024 * 1024
    behind(server, "bigdoc/zarr.json", doc)
    with PeakRss(server) as rss:
        r = requests.get(f"{server.url}/api/v1/nodes/data/bigdoc", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 422, r.text
    assert "limits.max_body_bytes" in r.json()["error"]["message"]
    # Refused from its size: none of it is read (round 9; the first 2 x max_body_bytes + 1
    # were read before), nothing is parsed.
    bound(rss, 16 * MIB, "describing an 86 MiB zarr.json")
    with PeakRss(server) as rss:
        r = requests.put(f"{server.url}/zarr/data/bigdoc2/zarr.json", data=doc, timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 413, r.text
    bound(rss, 2 * len(doc) // 1024 + 16 * MIB, "raw PUT of an 86 MiB zarr.json")


def test_chain_bomb_stops_near_the_chunk_size(server):
    # Finding 9: a bytes->gzip->gzip chain decoded its outer layer up to 256 MiB.
    codecs = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "gzip", "configuration": {"level": 1}},
        {"name": "gzip", "configuration": {"level": 1}},
    ]
    behind(server, "chain/zarr.json", v3([1 << 20], [1 << 20], codecs=codecs))
    behind(server, "chain/c/0", gzip.compress(bytes(200 << 20), compresslevel=1))
    zcodecs = [codecs[0], {"name": "zstd", "configuration": {"level": 1, "checksum": False}}]
    behind(server, "zbomb/zarr.json", v3([64 << 20], [64 << 20], codecs=zcodecs))
    # Sixteen frames of 64 MiB of zeros: 1 GiB where 64 MiB is expected.
    frame = numcodecs.Zstd(level=1).encode(bytes(64 << 20))
    behind(server, "zbomb/c/0", frame * 16)

    def read(path):
        return requests.get(f"{server.url}/api/v1/data/data/{path}?sel=0:4&format=json", timeout=HTTP_TIMEOUT_S)

    with PeakRss(server) as rss:
        r = read("chain")
    assert r.status_code == 502 and "exceeds the expected size" in r.text, r.text
    bound(rss, 32 * MIB, "gzip->gzip bomb in a 1 MiB chunk")
    # Four concurrent zstd bombs in 64 MiB chunks: each stops at its 64 MiB cap.
    with PeakRss(server) as rss:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(read, ["zbomb"] * 4))
    assert all(x.status_code == 502 for x in replies), [x.text for x in replies]
    bound(rss, 4 * 2 * 64 * MIB + 64 * MIB, "four concurrent zstd bombs in 64 MiB chunks")


def test_oversized_stored_chunks_are_refused_before_they_are_read(server):
    # Round 9: a 3 GiB (sparse) file behind a 100-byte zstd chunk was read whole before zstd
    # refused it (peak RSS 3.1 GB, 14 s); a shard index claiming 3 GiB for a 4-byte inner
    # chunk, likewise. A stored chunk larger than any encoding of it is refused from its size.
    zstd = [{"name": "bytes"}, {"name": "zstd", "configuration": {"level": 1, "checksum": False}}]
    behind(server, "oversized/zarr.json", v3([10, 10], [10, 10], codecs=zstd))
    chunk = server.root / "oversized/c/0/0"
    chunk.parent.mkdir(parents=True, exist_ok=True)
    with open(chunk, "wb") as f:
        f.truncate(3 << 30)
    sharded = [{"name": "sharding_indexed", "configuration": {
        "chunk_shape": [1, 4], "codecs": [{"name": "bytes"}],
        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "index_location": "end"}}]
    behind(server, "oversized_shard/zarr.json", v3([2, 4], [2, 4], codecs=sharded))
    shard = server.root / "oversized_shard/c/0/0"
    shard.parent.mkdir(parents=True, exist_ok=True)
    data_end = 3 << 30
    with open(shard, "wb") as f:
        f.write(bytes([1, 2, 3, 4]))
        f.seek(data_end)
        for v in (0, 4, 4, data_end - 4):
            f.write(v.to_bytes(8, "little"))
    with PeakRss(server) as rss:
        r = requests.get(f"{server.url}/api/v1/data/data/oversized?format=json", timeout=HTTP_TIMEOUT_S)
        s = requests.get(f"{server.url}/api/v1/data/data/oversized_shard?sel=1,0:4&format=json",
                         timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 502 and r.json()["error"]["code"] == "corrupt_chunk", r.text
    assert "oversized/c/0/0: stored data is corrupt: 3221225472 bytes, more than" in r.text, r.text
    assert s.status_code == 502 and "inner chunk [1, 0]: nbytes 3221225468 is more than" in s.text, s.text
    bound(rss, 32 * MIB, "a 3 GiB file behind a 100-byte chunk, and a shard index claiming 3 GiB")
    # The store protocol serves the object as it is (streamed, never held whole).
    with requests.get(f"{server.url}/zarr/data/oversized/c/0/0", headers={"Range": "bytes=-16"},
                      timeout=HTTP_TIMEOUT_S) as got:
        assert got.status_code == 206 and got.content == bytes(16)


def test_oversized_consolidated_metadata_is_refused_unread(server):
    # Round 9: describing a v2 group's children and deleting a node under it read `.zmetadata`
    # whole, whatever its size (the parse limit came after the read): a 3 GiB (sparse) file
    # took the process to gigabytes. Now its size alone refuses it.
    behind(server, "consolidated/.zgroup", {"zarr_format": 2})
    behind(server, "consolidated/child/.zgroup", {"zarr_format": 2})
    with open(server.root / "consolidated/.zmetadata", "wb") as f:
        f.truncate(3 << 30)
    with PeakRss(server) as rss:
        r = requests.get(f"{server.url}/api/v1/nodes/data/consolidated", params={"depth": 1}, timeout=HTTP_TIMEOUT_S)
        d = requests.delete(f"{server.url}/api/v1/nodes/data/consolidated/child", timeout=HTTP_TIMEOUT_S)
    # The group is described, its children listed instead, and the document named.
    assert r.status_code == 200, r.text
    j = r.json()
    assert j["consolidated"] is False and [c["path"] for c in j["children"]] == ["consolidated/child"], j
    why = j["consolidated_error"]
    assert "consolidated/.zmetadata" in why and "the document is 3221225472 bytes, more than" in why, why
    # The delete goes ahead and leaves the unreadable consolidated document as it is.
    assert d.status_code == 204, d.text
    assert not (server.root / "consolidated/child/.zgroup").exists()
    assert (server.root / "consolidated/.zmetadata").stat().st_size == 3 << 30
    bound(rss, 32 * MIB, "a 3 GiB .zmetadata, described and under a delete")


def test_malformed_consolidated_metadata_is_named_and_the_children_listed(server):
    # Round 11: consolidated metadata whose `metadata` was not an object of documents was
    # passed over in silence (the children listed as if there were none), and entries that
    # were not documents were listed as groups. Now the document and the place are named in
    # `consolidated_error`, and the children come from listing.
    g2 = {"zarr_format": 2}
    g3 = {"zarr_format": 3, "node_type": "group", "attributes": {}}
    cases = {
        "v2_not_object": ("metadata: expected an object of documents, got", ".zmetadata", {"metadata": 5}),
        "v2_missing": ("metadata: missing", ".zmetadata", {"zarr_consolidated_format": 1}),
        "v2_entry": ("metadata.child/.zgroup: expected a document (an object), got",
                     ".zmetadata", {"metadata": {"child/.zgroup": 7}}),
    }
    for name, (_, doc_key, doc) in cases.items():
        behind(server, f"cm/{name}/.zgroup", g2)
        behind(server, f"cm/{name}/child/.zgroup", g2)
        behind(server, f"cm/{name}/{doc_key}", doc)
    # (A v3 group's inline consolidated metadata is part of its own document, which does not
    # open when it is malformed: the group is 422 and its parent lists it as unreadable.)
    # zarr-python's `null` for a group that is not consolidated is no error.
    behind(server, "cm/v3_null/zarr.json", {**g3, "consolidated_metadata": None})
    behind(server, "cm/v3_null/child/zarr.json", g3)
    for name, (want, doc_key, _) in [*cases.items(), ("v3_null", (None, None, None))]:
        r = requests.get(f"{server.url}/api/v1/nodes/data/cm/{name}", params={"depth": 1}, timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200, (name, r.text)
        j = r.json()
        assert j["consolidated"] is False, (name, j)
        assert [(c["path"], c["node_type"]) for c in j["children"]] == [(f"cm/{name}/child", "group")], (name, j)
        why = j.get("consolidated_error")
        if want is None:
            assert why is None, (name, why)
        else:
            assert why and f"cm/{name}/{doc_key}" in why and want in why, (name, why)


def test_oversized_node_documents_are_refused_unread_by_concurrent_describes(server):
    # Round 9 (found by an attack on main): a node's own documents were read up to
    # 2 x max_body_bytes + 1 (32 MiB) before their size was checked, so 32 concurrent
    # describes of a v2 array with a 3 GiB `.zarray` and `.zattrs` took the process from
    # 43 MB to 1.23 GB. Now each is refused from its stored size.
    (server.root / "v2big").mkdir(exist_ok=True)
    for name in (".zarray", ".zattrs"):
        with open(server.root / "v2big" / name, "wb") as f:
            f.truncate(3 << 30)

    def describe(_):
        return requests.get(f"{server.url}/api/v1/nodes/data/v2big", timeout=HTTP_TIMEOUT_S)

    with PeakRss(server) as rss:
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(describe, range(32)))
    for r in answers:
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_metadata", r.text
        assert "the document is 3221225472 bytes, more than" in r.text, r.text
    bound(rss, 16 * MIB, "32 describes of a v2 array with 3 GiB documents")


def test_one_oversized_child_leaves_its_group_describable(server):
    # A 3 GiB `zarr.json` under a group (anyone who can write below it can leave one) made
    # the group's description, its listing of children, a 422 naming that child: the mount's
    # root too when it is a group. Now the child is listed as unreadable with the reason,
    # its siblings as they are, and nothing of the large document is read.
    (server.root / "holder").mkdir(exist_ok=True)
    (server.root / "holder" / "zarr.json").write_text(json.dumps({"zarr_format": 3, "node_type": "group"}))
    behind(server, "holder/fine/zarr.json", v3([4], [2]))
    (server.root / "holder" / "huge").mkdir(exist_ok=True)
    with open(server.root / "holder" / "huge" / "zarr.json", "wb") as f:
        f.truncate(3 << 30)
    with PeakRss(server) as rss:
        r = requests.get(f"{server.url}/api/v1/nodes/data/holder", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 200, r.text
    children = {c["name"]: c for c in r.json()["children"]}
    assert children["fine"]["node_type"] == "array" and children["fine"]["shape"] == [4], children
    huge = children["huge"]
    assert huge["node_type"] == "unreadable" and "zarr_format" not in huge, huge
    assert "holder/huge/zarr.json" in huge["error"] and "the document is 3221225472 bytes" in huge["error"], huge
    bound(rss, 16 * MIB, "describing a group with a 3 GiB child document")
    # The child itself still answers its 422.
    r = requests.get(f"{server.url}/api/v1/nodes/data/holder/huge", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 422 and r.json()["error"]["message"] == huge["error"], r.text


def test_shard_index_limit(server):
    # Finding 10: 2^24 inner chunks per shard (a 256 MiB index) cost 1.3 GB per write.
    sharded = [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [1],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                "index_location": "end",
            },
        }
    ]
    behind(server, "shard/zarr.json", v3([1 << 24], [1 << 24], codecs=sharded))
    with PeakRss(server) as rss:
        r = put_data(server, "shard", "5", "1")
    assert r.status_code == 422 and "limits.max_inner_chunks_per_shard" in r.text, r.text
    bound(rss, 16 * MIB, "one-element write into a 2^24-chunk shard")
    behind(server, "shard16/zarr.json", v3([1 << 16], [1 << 16], codecs=sharded))
    with PeakRss(server) as rss:
        assert put_data(server, "shard16", "5", "1").status_code == 204
        r = requests.get(f"{server.url}/api/v1/data/data/shard16?sel=4:6&format=json", timeout=HTTP_TIMEOUT_S)
    assert r.json() == [0, 1]
    bound(rss, 32 * MIB, "one-element write and read in a 2^16-chunk shard")



def test_concurrent_document_bodies_share_the_parse_budget(tmp_path_factory):
    # Finding 8: concurrent creates held every parsed body at once while they waited for the
    # parse budget. Now a document request reserves its share before its body is read (the
    # budget here fits one 2 MiB body at a time), so eight at once cost about what one does.
    root = tmp_path_factory.mktemp("budget")
    logs = tmp_path_factory.mktemp("budget-logs")
    env = {
        "ZARRD_LIMITS__MAX_BODY_BYTES": str(2 * 1024 * 1024),
        "ZARRD_LIMITS__DOCUMENT_PARSE_BUDGET_BYTES": str(64 * 1024 * 1024),
    }
    s = start_zarrd({"data": root.as_uri()}, log_path=logs / "zarrd.log", env=env)
    try:
        pairs = [[i % 10, 1] for i in range(300_000)]

        def create(i: int) -> None:
            doc = {"zarr_format": 3, "node_type": "group", "attributes": {"pairs": pairs, "i": i}}
            body = json.dumps(doc, separators=(",", ":"))
            assert len(body) < 2 * 1024 * 1024
            r = requests.put(
                f"{s.url}/api/v1/nodes/data/g{i}",
                data=body,
                headers={"content-type": "application/json"},
                timeout=HTTP_TIMEOUT_S * 2,
            )
            assert r.status_code == 201, r.text

        create(0)  # warm up: the allocator's first growth is not the point
        with PeakRss(s) as one:
            create(1)
        with PeakRss(s) as eight:
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                list(pool.map(create, range(2, 10)))
        print(f"one 2 MiB create: +{one.rise_kib} KiB; eight at once: +{eight.rise_kib} KiB")
        # Eight parsed bodies held at once cost about 400 MiB (measured before the fix); one
        # create at a time, with the allocator's per-thread slack, stays well below 256 MiB.
        eight.assert_below(256 * MIB, "eight concurrent 2 MiB creates")
        r = requests.get(f"{s.url}/api/v1/attributes/data/g9", timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 200 and len(r.json()["pairs"]) == 300_000
    finally:
        s.stop()


def test_absurd_element_sizes_are_refused_before_any_allocation(server):
    # Found by review: a v2 fill value of the dtype's element size was built before any size
    # check (`<U200000000` with fill "" cost +2.1 GB; `|V1000000000000` was OOM-killed).
    doc = {
        "zarr_format": 2, "shape": [10], "chunks": [1], "dtype": "<U200000000",
        "compressor": None, "fill_value": "", "order": "C", "filters": None,
    }
    with PeakRss(server) as rss:
        r = requests.put(f"{server.url}/zarr/data/elem/.zarray", data=json.dumps(doc), timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 422, r.text
    assert "larger than zarrd supports" in r.json()["error"]["message"]
    bound(rss, 32 * MIB, "PUT of a <U200000000 .zarray")
    behind(server, "elem2/.zarray", dict(doc, dtype="|V1000000000000", fill_value=None))
    with PeakRss(server) as rss:
        r = requests.get(f"{server.url}/api/v1/nodes/data/elem2", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 422, r.text
    bound(rss, 32 * MIB, "describe a |V1000000000000 array written behind zarrd's back")


def vlen_utf8(strings) -> bytes:
    """numcodecs' vlen framing: a u32 count, then per item a u32 length and its bytes."""
    parts = [len(strings).to_bytes(4, "little")]
    for s in strings:
        b = s.encode() if isinstance(s, str) else s
        parts += [len(b).to_bytes(4, "little"), b]
    return b"".join(parts)


def stream_length(url: str) -> tuple[int, int, bytes]:
    """Status, body length and the first bytes of a GET, read in pieces (never whole)."""
    with requests.get(url, stream=True, timeout=HTTP_TIMEOUT_S * 3) as r:
        n, head = 0, b""
        for piece in r.iter_content(1 << 20):
            if len(head) < 64:
                head += piece[: 64 - len(head)]
            n += len(piece)
        return r.status_code, n, head


# README, "Memory bounds": a large answer holds at most its share of the answer budget,
# 4 x read_slab_bytes (128 MiB by default), plus one element larger than a slab and the
# units being decoded.
ANSWER_SHARE_KIB = 4 * 32 * MIB


def test_string_fill_value_is_never_copied_per_element(server):
    # Review: a 65,000-byte string fill value (the limit is 64 KiB), read as
    # sel=0:20000&format=json over missing chunks, peaked at 3.67 GB: the fill was copied
    # into every element, then escaped whole.
    fill = "f" * 65_000
    behind(server, "fill65k/zarr.json", v3([20000], [1000], "string", fill, [{"name": "vlen-utf8"}]))
    with PeakRss(server) as rss:
        status, n, head = stream_length(f"{server.url}/api/v1/data/data/fill65k?sel=0:20000&format=json")
    assert status == 200
    assert n == 2 + 20000 * (len(fill) + 2) + 19999 and head.startswith(b'["fff')
    bound(rss, ANSWER_SHARE_KIB + 32 * MIB, "JSON read of 20,000 elements of a 65,000-byte fill value (1.3 GB)")
    # The decoded-chunk face: one chunk of 1,000 of them.
    with PeakRss(server) as rss:
        status, n, _ = stream_length(f"{server.url}/api/v1/chunks/data/fill65k?coords=7&format=json")
    assert status == 200 and n == 2 + 1000 * (len(fill) + 2) + 999
    bound(rss, ANSWER_SHARE_KIB + 32 * MIB, "decoded chunk of 1,000 fill values")


def test_huge_stored_strings_are_read_in_bounded_memory(server):
    # Review: a vlen-utf8 chunk of 4 strings of 60 MiB, read whole, peaked at 7.4 GB
    # (decoded, cached, copied into the slab, escaped whole). Now slabs hold at most
    # read_slab_bytes of copies (one element when an element is larger), and the JSON
    # is written a piece at a time.
    size = 60 << 20
    strings = [chr(ord("a") + i) * size for i in range(3)] + ['"\n' * (size // 2)]
    behind(server, "strings/zarr.json", v3([4], [4], "string", "", [{"name": "vlen-utf8"}]))
    behind(server, "strings/c/0", vlen_utf8(strings))
    with PeakRss(server) as rss:
        status, n, head = stream_length(f"{server.url}/api/v1/data/data/strings?format=json")
    assert status == 200, head
    # Three plain strings, and one whose every character is escaped (two bytes each).
    assert n == 2 + 3 * (size + 2) + (2 * size + 2) + 3 and head.startswith(b'["aaa')
    # The stored chunk and its decoded form (240 MiB each, as the chunk cache keeps it), one
    # 60 MiB element copied, and the answer's share.
    bound(rss, 2 * 240 * MIB + 60 * MIB + ANSWER_SHARE_KIB + 64 * MIB, "JSON read of 4 strings of 60 MiB")
    # Sharded: the same strings as inner chunks of one shard.
    sharded = [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": [1],
                "codecs": [{"name": "vlen-utf8"}],
                "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "index_location": "end",
            },
        }
    ]
    inner = [vlen_utf8([s]) for s in strings]
    index, at = b"", 0
    for part in inner:
        index += at.to_bytes(8, "little") + len(part).to_bytes(8, "little")
        at += len(part)
    behind(server, "sstrings/zarr.json", v3([4], [4], "string", "", sharded))
    behind(server, "sstrings/c/0", b"".join(inner) + index)
    with PeakRss(server) as rss:
        status, n2, _ = stream_length(f"{server.url}/api/v1/data/data/sstrings?format=json")
    assert status == 200 and n2 == n
    bound(rss, 2 * 240 * MIB + 60 * MIB + ANSWER_SHARE_KIB + 64 * MIB, "JSON read of 4 sharded strings of 60 MiB")


def _stalled_get(url: str, path: str, close: bool = False, small_buffer: bool = True) -> socket.socket:
    """A connection that sends a GET (and, as the caller does, never reads: a small
    receive buffer, so the kernel absorbs little of the answer)."""
    host, port = url.removeprefix("http://").split(":")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if small_buffer:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(10)
    s.connect((host, int(port)))
    extra = "Connection: close\r\n" if close else ""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode())
    return s


def _drain(s: socket.socket, limit_s: float) -> tuple[int, bool]:
    """Reads until the server closes (bounded in time); bytes read, and whether it closed."""
    n, deadline = 0, time.monotonic() + limit_s
    s.settimeout(2)
    while time.monotonic() < deadline:
        try:
            piece = s.recv(1 << 20)
        except (ConnectionResetError, BrokenPipeError):
            return n, True
        except socket.timeout:
            continue
        if not piece:
            return n, True
        n += len(piece)
    return n, False


def test_stalled_readers_hold_bounded_memory(tmp_path_factory):
    # Review: 20 sockets that sent a large GET and never read took the process to 2 GB
    # (each answer kept ~3 slabs), with nothing limiting how many. Now started answers
    # share limits.read_answer_budget_bytes (64 MiB here: four large answers' shares), and a
    # connection whose client takes no bytes for limits.send_stall_timeout_seconds is closed.
    root = tmp_path_factory.mktemp("stall")
    logs = tmp_path_factory.mktemp("stall-logs")
    # 4 MiB slabs: the test's debug build fills 32 MiB slabs slowly enough to keep both
    # cores of the CPU pool busy; the shares (16 MiB each) are what is measured.
    budget_mib = 64
    env = {
        "ZARRD_LIMITS__READ_ANSWER_BUDGET_BYTES": str(budget_mib << 20),
        "ZARRD_LIMITS__READ_SLAB_BYTES": str(4 << 20),
        "ZARRD_LIMITS__SEND_STALL_TIMEOUT_SECONDS": "3",
    }
    s = start_zarrd({"data": root.as_uri()}, log_path=logs / "zarrd.log", env=env)
    sockets = []
    try:
        doc = v3([1 << 30], [1 << 24], "uint8", 7)
        (root / "big").mkdir()
        (root / "big" / "zarr.json").write_text(json.dumps(doc))
        big = "/api/v1/data/data/big?sel=0:1073741824"
        small = f"{s.url}/api/v1/data/data/big?sel=5:21"
        assert requests.get(small, timeout=HTTP_TIMEOUT_S).content == bytes([7] * 16)  # warm up
        with PeakRss(s) as rss:
            sockets = [_stalled_get(s.url, big) for _ in range(20)]
            worst = 0.0
            for _ in range(10):  # about 2 s, within the stall timeout
                for u in (f"{s.url}/healthz", small):
                    t = time.monotonic()
                    r = requests.get(u, timeout=HTTP_TIMEOUT_S)
                    worst = max(worst, time.monotonic() - t)
                    assert r.status_code == 200
                time.sleep(0.2)
        print(f"20 stalled readers: slowest /healthz or small read {worst * 1000:.0f} ms")
        assert worst < 2.0  # generous: a debug build on a shared machine
        # The budget, and per connection at most a few small messages and buffers.
        bound(rss, (budget_mib + 64) * MIB, "20 stalled 1 GiB readers")
        for k in sockets:
            k.close()
        sockets = []
        time.sleep(3)  # the answers waiting for a share find their clients gone
        # A stalled reader is cut off after the stall timeout: what the kernel buffered, then
        # the end (never the whole GiB).
        lone = _stalled_get(s.url, big)
        time.sleep(3 + 3)
        n, closed = _drain(lone, 60)
        lone.close()
        assert closed and n < 1 << 28, (n, closed)
        # A slow reader that keeps reading gets all of its answer, however long it takes:
        # 8 MiB in pieces of at most 256 KiB every 0.25 s.
        slow = _stalled_get(s.url, "/api/v1/data/data/big?sel=0:8388608", close=True, small_buffer=False)
        total, ended, deadline = 0, False, time.monotonic() + 120
        slow.settimeout(10)
        while time.monotonic() < deadline:
            piece = slow.recv(256 << 10)
            if not piece:
                ended = True
                break
            total += len(piece)
            time.sleep(0.25)
        slow.close()
        assert ended and total > 8 << 20, (total, ended)
    finally:
        for k in sockets:
            k.close()
        s.stop()


#: The slowest /healthz answer allowed while a hostile request runs: well under the
#: multi-second stalls of the regressions, well over a loaded machine's scheduling noise.
STALL_S = 2.0


class HealthProbe:
    """Polls /healthz from a thread while a `with` block runs; `worst_s` is the slowest answer.

    The bounds on it catch work on the async workers (the regressions these tests guard
    stalled /healthz for seconds); they are not latency targets: on a loaded 2-core CI
    machine a lone answer can take half a second, so the slowest answer is held to
    `STALL_S`."""

    def __init__(self, server) -> None:
        import threading

        self.server = server
        self.worst_s = 0.0
        self.answers = 0
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import time

        with requests.Session() as session:
            deadline = time.monotonic() + 300
            while not self._stop.is_set() and time.monotonic() < deadline:
                started = time.monotonic()
                r = session.get(f"{self.server.url}/healthz", timeout=30)
                assert r.status_code == 200, r.text
                took = time.monotonic() - started
                self.worst_s = max(self.worst_s, took)
                self.times.append(took)
                self.answers += 1
                self._stop.wait(0.02)

    def p95_s(self) -> float:
        ordered = sorted(self.times)
        return ordered[int(len(ordered) * 0.95)] if ordered else 0.0

    def __enter__(self) -> "HealthProbe":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def test_millions_of_dimensions_are_refused_before_any_per_dimension_work(server):
    # Found by review: a 1.9-million-dimensional array was created (+1 GB RSS), and describing
    # it stalled /healthz for more than 5 s. Rank is now refused past 32 by the parser, on every
    # face. What remains is the JSON parse of the 7.6 MB body itself (bounded by the document
    # parse budget), on the CPU pool.
    many = [1] * 1_900_000
    doc = v3(many, many)
    body = json.dumps(doc, separators=(",", ":"))
    with HealthProbe(server) as health:
        with PeakRss(server) as rss:
            r = requests.put(
                f"{server.url}/api/v1/nodes/data/rank_million",
                data=body,
                headers={"content-type": "application/json"},
                timeout=HTTP_TIMEOUT_S,
            )
        assert r.status_code == 422, r.text
        assert "1900000 dimensions" in r.json()["error"]["message"]
        bound(rss, 256 * MIB, "create of a 1.9-million-dimensional array")
        behind(server, "rank_million_behind/zarr.json", body.encode())
        with PeakRss(server) as rss:
            r = requests.get(f"{server.url}/api/v1/nodes/data/rank_million_behind", timeout=HTTP_TIMEOUT_S)
        assert r.status_code == 422, r.text
        assert "1900000 dimensions" in r.json()["error"]["message"]
        bound(rss, 256 * MIB, "describe of a 1.9-million-dimensional array")
    print(f"/healthz: {health.answers} answers, slowest {health.worst_s * 1000:.0f} ms")
    assert health.answers > 0 and health.worst_s < STALL_S, health.worst_s


def _indices_body(n: int, mode: str = "orthogonal") -> str:
    digits = ",".join(str(i % 10) for i in range(n))
    return '{"selection": [[' + digits + ']], "mode": "' + mode + '", "format": "raw"}'


def test_selection_bodies_cost_bytes_per_index_off_the_async_workers(server):
    # Found by review: a POST selection of 4 million indices cost +400 MB (a JSON tree per
    # index), and 6 at once stalled /healthz for 1.7 s. Lists are now parsed straight into
    # integers on the CPU pool (8 bytes per index), counted against 2^22 as they arrive.
    r = requests.put(
        f"{server.url}/api/v1/nodes/data/sel_body",
        json=v3([1 << 22], [1 << 16]),
        timeout=HTTP_TIMEOUT_S,
    )
    assert r.status_code == 201, r.text
    r = requests.put(
        f"{server.url}/api/v1/data/data/sel_body?sel=0:10",
        data=bytes(range(10)),
        headers={"content-type": "application/octet-stream"},
        timeout=HTTP_TIMEOUT_S,
    )
    assert r.status_code == 204, r.text
    n = 4_000_000
    body = _indices_body(n)
    post = lambda b: requests.post(  # noqa: E731
        f"{server.url}/api/v1/data/data/sel_body",
        data=b,
        headers={"content-type": "application/json"},
        timeout=HTTP_TIMEOUT_S,
    )
    with PeakRss(server) as rss:
        r = post(body)
    assert r.status_code == 200, r.text[:500]
    assert len(r.content) == n and r.content[:12] == bytes([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1])
    # Parsed lists (32 MB, checked against the shape in place), the read plan's order and the
    # 4 MB answer: well under half the 400 MB a JSON tree per index cost.
    bound(rss, 160 * MIB, "POST selection of 4,000,000 indices")
    with PeakRss(server) as rss:
        r = post(_indices_body((1 << 22) + 1))
    assert r.status_code == 413 and "4194304" in r.json()["error"]["message"], r.text
    bound(rss, 96 * MIB, "POST selection of 2^22 + 1 indices (refused)")
    with HealthProbe(server) as health:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            replies = list(pool.map(post, [body] * 6))
    assert all(x.status_code == 200 and len(x.content) == n for x in replies), [x.status_code for x in replies]
    print(
        f"six concurrent 4M-index selections: /healthz {health.answers} answers, "
        f"95th percentile {health.p95_s() * 1000:.0f} ms, slowest {health.worst_s * 1000:.0f} ms"
    )
    # Before: stalls of 1.7 s. The machine running the tests is shared (other builds), so the
    # slowest single answer gets room for the scheduler; 95 % must come within 200 ms.
    assert health.answers > 0 and health.p95_s() < 0.2, health.p95_s()
    assert health.worst_s < STALL_S, health.worst_s


def _json_rows_body(values) -> bytes:
    """Nested JSON lists of a 2-D integer array, each distinct row rendered once."""
    rendered: dict[bytes, bytes] = {}
    parts = []
    for row in values:
        key = row.tobytes()
        if key not in rendered:
            rendered[key] = ("[" + ",".join(map(str, row.tolist())) + "]").encode()
        parts.append(rendered[key])
    return b"[" + b",".join(parts) + b"]"


def test_healthz_answers_under_the_heaviest_slice_writes(tmp_path_factory):
    # Issue 13: slice writes decode their body, plan, and decode/place/encode every chunk
    # (sharded read-modify-write included) on the CPU pool, so /healthz keeps answering
    # while the largest bodies the server accepts are written from several clients at once.
    # The server's limits.max_put_bytes is 16 MiB here (the debug build is slow); every body
    # is within 1 % of it. bench/write_health.py measures the release build at 256 MiB.
    import io
    import threading

    import numpy as np

    limit = 16 << 20
    root = tmp_path_factory.mktemp("write-health")
    s = start_zarrd(
        {"data": root.as_uri()},
        log_path=tmp_path_factory.mktemp("write-health-logs") / "zarrd.log",
        env={"ZARRD_LIMITS__MAX_PUT_BYTES": str(limit)},
    )
    little = {"name": "bytes", "configuration": {"endian": "little"}}
    zstd = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}

    def shard(inner, cname, shuffle, typesize):
        blosc = {"name": "blosc", "configuration": {"cname": cname, "clevel": 3, "shuffle": shuffle,
                                                    "typesize": typesize, "blocksize": 0}}
        return [{"name": "sharding_indexed", "configuration": {
            "chunk_shape": inner, "codecs": [little, blosc],
            "index_codecs": [little, {"name": "crc32c"}], "index_location": "end"}}]

    def floats(rows, cols, variant):
        rng = np.random.default_rng(variant)
        y = np.linspace(0, 8, rows, dtype=np.float32)[:, None]
        x = np.linspace(0, 4, cols, dtype=np.float32)[None, :]
        return (np.sin(y + variant) * np.cos(x) + rng.normal(0, 0.01, (rows, cols))).astype("<f4")

    def ints(rows, cols, variant):
        i = np.arange(rows, dtype=np.uint32)[:, None]
        j = np.arange(cols, dtype=np.uint32)[None, :]
        return ((i * 3 + j + 7 * variant) % 100).astype("<u2")

    def npy(values):
        buf = io.BytesIO()
        np.save(buf, values, allow_pickle=False)
        return buf.getvalue()

    # (name, metadata, selection start, selection shape, values, body encoder, format)
    cases = [
        ("npy zstd partial", v3([1100, 4200], [128, 512], "float32", codecs=[little, zstd]),
         (5, 3), (1023, 4096), floats, npy, "npy"),
        ("npy blosc sharded partial", v3([1100, 4200], [256, 1024], "float32",
                                         codecs=shard([64, 128], "zstd", "shuffle", 4)),
         (7, 11), (1023, 4096), floats, npy, "npy"),
        ("json zstd partial", v3([1300, 4200], [128, 512], "uint16", codecs=[little, zstd]),
         (3, 5), (1280, 4096), ints, _json_rows_body, "json"),
        ("json blosc sharded whole", v3([1280, 4096], [256, 1024], "uint16",
                                        codecs=shard([128, 256], "lz4", "bitshuffle", 2)),
         (0, 0), (1280, 4096), ints, _json_rows_body, "json"),
    ]
    try:
        writers = []
        for n, (name, meta, start, shape, make, encode, fmt) in enumerate(cases):
            r = requests.put(f"{s.url}/api/v1/nodes/data/w{n}", json=meta, timeout=HTTP_TIMEOUT_S)
            assert r.status_code == 201, r.text
            bodies = [encode(make(*shape, v)) for v in range(2)]
            assert all(0.9 * limit < len(b) <= limit for b in bodies), (name, [len(b) for b in bodies])
            sel = ",".join(f"{a}:{a + d}" for a, d in zip(start, shape))
            writers.append({"n": n, "name": name, "sel": sel, "fmt": fmt, "shape": shape, "make": make,
                            "bodies": bodies, "done": 0, "last": None, "failed": []})

        deadline = time.monotonic() + 6.0

        def write_loop(w):
            with requests.Session() as session:
                i = 0
                # At least two writes each, then as many as fit before the deadline.
                while i < 2 or time.monotonic() < deadline:
                    variant = i % 2
                    i += 1
                    r = session.put(
                        f"{s.url}/api/v1/data/data/w{w['n']}",
                        params={"sel": w["sel"], "format": w["fmt"]},
                        data=w["bodies"][variant],
                        timeout=HTTP_TIMEOUT_S,
                    )
                    if r.status_code != 204:
                        w["failed"].append(f"{r.status_code} {r.text[:300]}")
                        return
                    w["done"] += 1
                    w["last"] = variant

        with HealthProbe(s) as health:
            threads = [threading.Thread(target=write_loop, args=(w,)) for w in writers]
            for t in threads:
                t.start()
            for t in threads:
                t.join(600)
        for w in writers:
            assert not w["failed"], (w["name"], w["failed"])
            assert w["done"] >= 2, (w["name"], w["done"])
            r = requests.get(f"{s.url}/api/v1/data/data/w{w['n']}",
                             params={"sel": w["sel"], "format": "raw"}, timeout=HTTP_TIMEOUT_S)
            assert r.status_code == 200, r.text[:300]
            expected = w["make"](*w["shape"], w["last"])
            got = np.frombuffer(r.content, dtype=expected.dtype).reshape(expected.shape)
            assert np.array_equal(got, expected), w["name"]
        writes = ", ".join(f"{w['name']} {w['done']}" for w in writers)
        print(
            f"heaviest writes ({writes}): /healthz {health.answers} answers, "
            f"95th percentile {health.p95_s() * 1000:.0f} ms, slowest {health.worst_s * 1000:.0f} ms"
        )
        # Debug build on a shared 2-core machine: generous; the release figure is the
        # benchmark's.
        assert health.answers > 10, health.answers
        assert health.worst_s < STALL_S, health.worst_s
    finally:
        s.stop()
