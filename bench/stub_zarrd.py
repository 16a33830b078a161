#!/usr/bin/env python3
"""Plumbing stub for bench/store_get.sh -- NOT a benchmark target.

Mimics just enough of the zarrd contract to debug the benchmark script
before a release build of zarrd exists:

    stub_zarrd.py serve --bind 127.0.0.1:PORT --mount data=/abs/dir [--mount ...]

serves GET/HEAD /zarr/<mount>/<key> from the mounted directory (404 when the
key is missing) and prints "zarrd listening on http://HOST:PORT" on stdout.

Use:  ZARRD=bench/stub_zarrd.py DURATION=2 bench/store_get.sh
"""
import argparse
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["serve"])
    ap.add_argument("--bind", required=True)
    ap.add_argument("--mount", action="append", default=[])
    args = ap.parse_args()

    mounts = {}
    for m in args.mount:
        name, _, path = m.partition("=")
        mounts[name] = os.path.realpath(path)
    host, _, port = args.bind.rpartition(":")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = 1 << 16  # one write per response (avoids Nagle stalls)

        def log_message(self, *a):  # quiet, like RUST_LOG=warn
            pass

        def _resolve(self):
            parts = self.path.split("?", 1)[0].split("/", 3)
            if len(parts) != 4 or parts[1] != "zarr" or parts[2] not in mounts:
                return None
            root = mounts[parts[2]]
            full = os.path.realpath(os.path.join(root, parts[3]))
            if not full.startswith(root + os.sep) or not os.path.isfile(full):
                return None
            return full

        def _send(self, head_only):
            full = self._resolve()
            if full is None:
                body = b'{"error":{"code":"not_found","message":"no such key"}}'
                self.send_response(404)
                self.send_header("Content-Type", "application/json")
            else:
                with open(full, "rb") as f:
                    body = f.read()
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head_only:
                self.wfile.write(body)

        def do_GET(self):
            self._send(False)

        def do_HEAD(self):
            self._send(True)

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            pass  # wrk closing keep-alive connections at the end of a run

    srv = Server((host, int(port)), Handler)
    print(f"zarrd listening on http://{host}:{srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
