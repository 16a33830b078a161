"""A page served from another origin, in headless Chromium, talks to zarrd as a viewer does:
it reads `WWW-Authenticate` from a 401 in script, sends a preflighted request with headers of
its own choosing (`Cache-Control`, `X-Trace-Id`, `Range`) and reads the answer's `ETag`,
`Content-Range` and `X-Zarr-Shape`, and is refused writes by the preflight.

The page is plain HTML with an inline script, served by Python's http.server on another
loopback port (another origin); Chromium runs it with a virtual time budget so the fetches
finish before `--dump-dom` prints what the script wrote.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import secrets
import threading

import numpy as np
import pytest
import zarr

from test_browser import Dom, chromium
from zarrd_harness import start_zarrd

TOKEN = secrets.token_hex(32)

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>viewer</title></head><body>
<pre id="out">pending</pre>
<script>
const base = %(base)s;
const out = {};
async function run() {
  let r = await fetch(base + "/zarr/secret/a/zarr.json");
  out.unauthorised = [r.status, r.headers.get("www-authenticate")];
  r = await fetch(base + "/zarr/pub/a/c/0/0", {headers: {"Range": "bytes=0-3", "Cache-Control": "no-cache", "X-Trace-Id": "abc"}});
  out.ranged = [r.status, r.headers.get("content-range"), !!r.headers.get("etag")];
  r = await fetch(base + "/api/v1/data/pub/a?sel=0:2,0:3&format=json", {headers: {"X-Trace-Id": "abc"}});
  out.slice = [r.status, r.headers.get("x-zarr-shape"), await r.json()];
  try {
    r = await fetch(base + "/zarr/pub/a/c/0/0", {method: "PUT", body: "x"});
    out.write = ["sent", r.status];
  } catch (e) {
    out.write = ["refused by the browser"];
  }
  document.getElementById("out").textContent = JSON.stringify(out);
}
run().catch(e => { document.getElementById("out").textContent = "error: " + e; });
</script></body></html>
"""


@pytest.fixture(scope="module")
def zarrd_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("cors-pub")
    secret = tmp_path_factory.mktemp("cors-secret")
    for r in (root, secret):
        a = zarr.create_array(r / "a", shape=(4, 6), chunks=(4, 6), dtype="int32", compressors=None)
        a[...] = np.arange(24, dtype="int32").reshape(4, 6)
    tokens = f'[{{ name = "t", sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}", scopes = {{ "*" = ["admin"] }} }}]'
    env = {
        "ZARRD_AUTH__TOKENS": tokens,
        "ZARRD_MOUNTS__PUB__URL": root.as_uri(),
        "ZARRD_MOUNTS__PUB__ANONYMOUS_READ": "true",
    }
    logs = tmp_path_factory.mktemp("cors-logs")
    s = start_zarrd({"secret": secret.as_uri()}, log_path=logs / "zarrd.log", env=env)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def page_origin(zarrd_server):
    body = (PAGE % {"base": json.dumps(zarrd_server.url)}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_page_of_another_origin_reads_what_viewers_need(zarrd_server, page_origin):
    dom = Dom(chromium(f"{page_origin}/viewer.html", "--virtual-time-budget=10000", "--dump-dom"))
    text = dom.ids["out"]
    assert text.startswith("{"), text
    out = json.loads(text)
    status, challenge = out["unauthorised"]
    assert status == 401 and challenge.startswith("Bearer"), out
    assert out["ranged"] == [206, "bytes 0-3/96", True], out
    assert out["slice"] == [200, "2,3", [[0, 1, 2], [6, 7, 8]]], out
    # "*" lets every origin read, not write: the preflight of the PUT allows no PUT.
    assert out["write"] == ["refused by the browser"], out
    log = zarrd_server.log_tail(400)
    assert "preflight" in log and page_origin in log, log
