"""The zarrd binary a benchmark measures, started on 127.0.0.1:0 with one local mount.

Shared by `slices.py` and `write_health.py`: the child gets the caller's environment without
any `ZARRD_*` variable (so a developer's settings never leak into a measurement), plus
RUST_LOG=warn and `env`; the URL is read from the "listening on" line zarrd prints first.
"""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import threading
import urllib.parse
from pathlib import Path

LISTENING = re.compile(r".*?(http://[0-9.]+:[0-9]+)")


class Server:
    def __init__(self, binary: Path, data: Path, env: dict[str, str]) -> None:
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("ZARRD_")}
        child_env.update({"RUST_LOG": "warn"} | env)
        self.proc = subprocess.Popen(
            [str(binary), "serve", "--bind", "127.0.0.1:0", "--mount", f"bench={data}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=child_env,
        )
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(30)
        m = LISTENING.match(line[0].decode()) if line else None
        if not m:
            self.stop()
            raise RuntimeError(f"zarrd did not start: {line!r}")
        self.url = m.group(1)
        u = urllib.parse.urlsplit(self.url)
        self.host, self.port = u.hostname, u.port

    def conn(self, timeout: float = 600) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def peak_rss_mib(self) -> float:
        """The process's peak resident memory (VmHWM) in MiB, NaN once it has exited."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
