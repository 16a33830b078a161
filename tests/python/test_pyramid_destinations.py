"""A pyramid job writes only into what it made, from a source that did not change under it.

Found by review: a pyramid requested into an existing group or array wrote its levels into
them (an existing array's elements overwritten); a second request with another method into
a finished pyramid skipped every chunk and labelled the first method's levels with its own;
levels of factors 1 made full copies; a source whose grid overflowed 64 bits "completed"
with no data; and data written to the source during a job ended up mixed into level 0.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr

from test_pyramid import make_source, request, wait
from zarrd_harness import PeakRss, start_zarrd


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("destinations")
    make_source(root, "img", "uint16", (16, 64, 64), [4, 16, 16])
    logs = tmp_path_factory.mktemp("destinations-logs")
    server = start_zarrd({"p": root.as_uri()}, log_path=logs / "zarrd.log")
    yield server, root
    server.stop()


def post(server, path: str, body: dict):
    return request("POST", f"{server.url}/api/v1/pyramids/p/{path}", body)


def test_existing_nodes_and_data_are_never_written_into(served):
    server, root = served
    victim = zarr.create_array(root / "victim" / "0", shape=(16, 64, 64), chunks=(4, 16, 16), dtype="uint16")
    victim[0:4, 0:16, 0:16] = 7
    zarr.open_group(root / "victim", mode="a").attrs["note"] = "keep me"
    (root / "loose").mkdir()
    (root / "loose" / "notes.txt").write_text("mine")
    before = {p: p.read_bytes() for p in (root / "victim").rglob("*") if p.is_file()}
    for destination, what in [("victim", "existing group"), ("victim/0", "existing array"), ("loose", "stored objects")]:
        code, _, body = post(server, "img", {"levels": 2, "destination": destination})
        assert code == 409 and what in body["error"]["message"], (destination, body)
    after = {p: p.read_bytes() for p in (root / "victim").rglob("*") if p.is_file()}
    assert after == before
    assert (root / "loose" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (root / "loose").iterdir()) == ["notes.txt"]


def test_a_finished_pyramid_is_resumed_only_by_its_own_request(served):
    server, root = served
    code, _, status = post(server, "img", {"levels": 2, "destination": "own"})
    assert code == 202, status
    assert wait(server, status)["state"] == "completed"
    level1 = np.asarray(zarr.open_array(root / "own" / "1", mode="r")[...])
    # The same request again: everything is skipped, still complete.
    code, _, again = post(server, "img", {"levels": 2, "destination": "own"})
    assert code == 202, again
    done = wait(server, again)
    assert done["state"] == "completed" and done["chunks_skipped"] > 0 and done["bytes_written"] == 0, done
    # Another method into it is refused; the levels and their label are untouched.
    code, _, other = post(server, "img", {"levels": 2, "destination": "own", "method": "max"})
    assert code == 409 and "another request" in other["error"]["message"], other
    np.testing.assert_array_equal(zarr.open_array(root / "own" / "1", mode="r")[...], level1)
    attrs = json.loads((root / "own" / "zarr.json").read_text())["attributes"]
    assert attrs["ome"]["multiscales"][0]["type"] == "mean"


def test_requests_racing_for_one_destination_build_one_pyramid(served):
    """Round 12, a black-box attack: four requests with different methods for one destination,
    sent at once, all "completed", and the levels were a mix of three methods."""
    import threading

    server, root = served
    answers = {}

    def go(method):
        answers[method] = post(server, "img", {"levels": 3, "destination": "raced", "method": method})

    threads = [threading.Thread(target=go, args=(m,)) for m in ("mean", "max", "min", "stride")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [m for m, (code, _, _) in answers.items() if code == 202]
    assert len(won) == 1, answers
    for method, (code, _, body) in answers.items():
        if method != won[0]:
            assert code == 409 and body["error"]["code"] == "conflict", (method, body)
    assert wait(server, answers[won[0]][2])["state"] == "completed"
    attrs = json.loads((root / "raced" / "zarr.json").read_text())["attributes"]
    assert attrs["ome"]["multiscales"][0]["type"] == won[0]
    # Level 1 is the winner's reduction of level 0, everywhere.
    level0 = np.asarray(zarr.open_array(root / "raced" / "0", mode="r")[...]).astype("float64")
    blocks = level0.reshape(8, 2, 32, 2, 32, 2)
    expect = {"mean": None, "max": blocks.max(axis=(1, 3, 5)), "min": blocks.min(axis=(1, 3, 5)),
              "stride": level0[::2, ::2, ::2]}[won[0]]
    level1 = np.asarray(zarr.open_array(root / "raced" / "1", mode="r")[...])
    if expect is not None:
        np.testing.assert_array_equal(level1, expect)


def test_a_destination_inside_an_array_is_refused_before_the_job(served):
    server, root = served
    zarr.create_array(root / "solid", shape=(4,), chunks=(4,), dtype="uint8")
    code, _, body = post(server, "img", {"levels": 2, "destination": "solid/inside"})
    assert code == 400 and "inside the array `solid`" in body["error"]["message"], body
    assert sorted(p.name for p in (root / "solid").iterdir()) == ["zarr.json"]


def test_levels_that_do_not_shrink_and_overflowing_grids_are_refused(served):
    server, root = served
    code, _, body = post(server, "img", {"levels": 3, "factors": [1, 1, 1], "destination": "ones"})
    assert code == 400 and "levels" in body["error"]["message"] and "smaller" in body["error"]["message"], body
    code, _, body = post(server, "img", {"factors": [[2, 2, 2], [1, 1, 1]], "destination": "ones"})
    assert code == 400 and "smaller" in body["error"]["message"], body
    # Round 11 (a black-box attack): one list of 1s with the levels left to it was a
    # one-level "pyramid", a copy of level 0 (202).
    code, _, body = post(server, "img", {"factors": [1, 1, 1], "destination": "ones"})
    assert code == 400 and "factors" in body["error"]["message"] and "smaller" in body["error"]["message"], body
    # So were the default factors of an array without `space` axes (1 everywhere).
    zarr.create_array(root / "rowcol", shape=(64, 64), chunks=(16, 16), dtype="uint8", dimension_names=["row", "col"])
    code, _, body = post(server, "rowcol", {})
    assert code == 400 and "give `factors`" in body["error"]["message"], body
    code, _, status = post(server, "rowcol", {"factors": [2, 2]})
    assert code == 202, status
    assert wait(server, status)["state"] == "completed"
    # A destination inside the source array was accepted and failed in the job.
    code, _, body = post(server, "img", {"levels": 2, "destination": "img/sub"})
    assert code == 400 and "beside the source" in body["error"]["message"], body
    assert not (root / "ones").exists() and not (root / "img" / "sub").exists()
    huge = {"zarr_format": 3, "node_type": "array", "shape": [2**32, 2**32], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 1]}},
            "chunk_key_encoding": {"name": "default"}, "fill_value": 0, "codecs": [{"name": "bytes"}],
            "dimension_names": ["y", "x"]}
    (root / "huge").mkdir()
    (root / "huge" / "zarr.json").write_text(json.dumps(huge))
    code, _, body = post(server, "huge", {"levels": 1, "method": "stride"})
    assert code == 400 and "chunks" in body["error"]["message"], body
    assert not (root / "huge_pyramid").exists()


def test_a_source_written_during_the_job_fails_it(served):
    server, root = served
    code, _, status = post(server, "img", {"levels": 2, "destination": "moving"})
    assert code == 202, status
    assert wait(server, status)["state"] == "completed"
    # Written after the job started (here: after it ended): the same request resumes,
    # finds every chunk done, and must not call the mix complete.
    zarr.open_array(root / "img", mode="a")[0:4, 0:16, 0:16] = 9
    code, _, again = post(server, "img", {"levels": 2, "destination": "moving"})
    assert code == 202, again
    failed = wait(server, again)
    assert failed["state"] == "failed" and "changed while its pyramid was built" in failed["error"], failed
    assert "delete `moving`" in failed["error"]


def test_a_stored_chunk_larger_than_any_encoding_of_it_fails_the_job_unread(served):
    # Round 9: level 0's copy read every source chunk whole: a 3 GiB (sparse) file behind one
    # 4x16x16 uint16 chunk took the process to gigabytes. Now its size alone fails the job.
    server, root = served
    make_source(root, "bloated", "uint16", (8, 32, 32), [4, 16, 16])
    chunk = root / "bloated" / "c" / "1" / "1" / "0"
    assert chunk.is_file()
    with open(chunk, "wb") as f:
        f.truncate(3 << 30)
    with PeakRss(server) as rss:
        code, _, status = post(server, "bloated", {"levels": 2, "destination": "bloated_pyramid"})
        assert code == 202, status
        failed = wait(server, status)
    assert failed["state"] == "failed", failed
    assert "bloated/c/1/1/0: stored data is corrupt: 3221225472 bytes, more than" in failed["error"], failed
    rss.assert_below(64 * 1024, "a pyramid over a 3 GiB chunk file")
