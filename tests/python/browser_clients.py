"""JavaScript clients in headless Chromium, for the browser-client tests
(test_browser_zarrita.py, test_browser_pyramid.py).

zarrita.js and ome-zarr.js come from npm, pinned by tests/browser/package-lock.json and
installed into tests/browser/node_modules by scripts/test-all (`npm ci`, as Azurite is).
`bundle()` runs esbuild (from the same lock) over tests/browser/entry.js into one script that
sets `window.zarrita` and `window.omezarr`; `Origin` serves it with a test page from another
loopback port (another origin than zarrd's), so every read is a cross-origin fetch.

A page runs an async `run()` that returns a JSON-able value; the harness writes it into
`<pre id="out">` (or `error: ...`), and `run_page` reads it from `--dump-dom`. Chromium gets a
virtual time budget, so the page's fetches finish before the DOM is dumped, bounded in time
by test_browser.chromium's timeout. Virtual time waits for network fetches and main-thread
work, not for work on other threads (an image's `decode()`): pages leave that to the test.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import threading
from pathlib import Path

from test_browser import Dom, chromium

BROWSER_DIR = Path(__file__).resolve().parent.parent / "browser"
ESBUILD = BROWSER_DIR / "node_modules" / ".bin" / "esbuild"

PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>client</title></head><body>
<pre id="out">pending</pre>
<script src="/bundle.js"></script>
<script>
const ARGS = %(args)s;
%(script)s
run(ARGS).then(
  v => { document.getElementById("out").textContent = JSON.stringify(v); },
  e => { document.getElementById("out").textContent = "error: " + e + "\\n" + (e && e.stack); });
</script></body></html>
"""


def bundle(out_dir: Path) -> bytes:
    """tests/browser/entry.js and everything it imports, bundled into one IIFE script."""
    assert ESBUILD.is_file(), (
        f"{ESBUILD} is missing: install the pinned browser clients with "
        "`(cd tests/browser && npm ci)` (scripts/test-all does)"
    )
    out = out_dir / "bundle.js"
    r = subprocess.run(
        [str(ESBUILD), "entry.js", "--bundle", "--format=iife", f"--outfile={out}", "--log-level=warning"],
        cwd=BROWSER_DIR,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    data = out.read_bytes()
    assert b"zarrita" in data and len(data) > 100_000, len(data)
    return data


class Origin:
    """Python's http.server on another loopback port serving `/bundle.js` and pages."""

    def __init__(self, bundle_js: bytes) -> None:
        self.pages: dict[str, bytes] = {"/bundle.js": bundle_js}
        pages = self.pages

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                body = pages.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                kind = "text/javascript" if self.path.endswith(".js") else "text/html; charset=utf-8"
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def run_page(self, name: str, script: str, args, budget_ms: int = 30000):
        """Serve a page running `script` (defining `async function run(args)`) and return its result."""
        self.pages[f"/{name}.html"] = (PAGE % {"args": json.dumps(args), "script": script}).encode()
        # Chromium dumps the DOM when its virtual time budget runs out; on a loaded CI machine it
        # once did so before a page that passes in seconds had finished (the server had answered
        # every request it was sent). A page still "pending" is run once more, whole: a page that
        # finishes is checked in full either way, and one that never finishes still fails.
        for attempt in range(2):
            dom = Dom(chromium(f"{self.url}/{name}.html", f"--virtual-time-budget={budget_ms}", "--dump-dom"))
            text = dom.ids.get("out", "")
            if text != "pending":
                break
            print(f"page {name}: still pending when Chromium dumped the DOM (attempt {attempt + 1})")
        assert text != "pending", "the page had not finished when Chromium dumped the DOM, twice"
        assert text.startswith(("{", "[")), text[:4000]
        return json.loads(text)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
