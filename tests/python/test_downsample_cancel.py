"""A downsampled read stops computing when its client goes away.

Found by review: one slab of a downsampled answer can stand for any amount of source (a
1 MiB answer of a (2^40, 2^40) region, 2^20 source chunks), and a client that hung up (or a
request that timed out) left the CPU pool reducing for minutes. The producer now stops
between source tiles when the answer's receiver is gone.

Checked through the process's CPU time (/proc/PID/stat): after the client hangs up, the
server goes idle within seconds (its CPU time stops growing), where the old build kept both
cores busy for minutes.
"""

from __future__ import annotations

import json
import os
import time

import pytest
import requests

from zarrd_harness import start_zarrd

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


@pytest.fixture
def server(tmp_path):
    doc = {"zarr_format": 3, "node_type": "array", "shape": [2**40, 2**40], "data_type": "uint8",
           "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1024, 1024]}},
           "chunk_key_encoding": {"name": "default"}, "fill_value": 3, "codecs": [{"name": "bytes"}]}
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "zarr.json").write_text(json.dumps(doc))
    s = start_zarrd({"a": tmp_path.as_uri()}, log_path=tmp_path / "zarrd.log")
    yield s
    s.stop()


def test_a_client_that_hangs_up_stops_the_reduction(server):
    url = (f"{server.url}/api/v1/data/a/big?downsample=1024,1024&downsample_method=mean"
           "&format=raw&sel=0:1024,0:1024")
    pid = server.proc.pid
    start = cpu_seconds(pid)
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(url, timeout=2)
    busy = cpu_seconds(pid) - start
    assert busy > 0.5, f"the read did not start working ({busy:.2f} s of CPU)"
    # Idle within a few seconds of the hang-up: at most 0.3 s of CPU over 2 s, checked
    # for up to 20 s (the old build stayed at ~2 s of CPU per 2 s for minutes).
    deadline = time.monotonic() + 20
    while True:
        before = cpu_seconds(pid)
        time.sleep(2)
        used = cpu_seconds(pid) - before
        if used < 0.3:
            break
        assert time.monotonic() < deadline, f"still {used:.2f} s of CPU per 2 s after the client left"
    assert requests.get(f"{server.url}/healthz", timeout=10).status_code == 200
