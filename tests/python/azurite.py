"""Azurite (Microsoft's Azure Blob Storage emulator, from npm) for the replica and store-fault tests.

`scripts/test-all` installs it (`npm ci` in tests/azurite) and starts one instance for the whole
run, exporting its endpoint as ZARRD_TEST_AZURITE_ENDPOINT; without that variable the `azurite`
fixture starts its own (installing it first if tests/azurite/node_modules is missing). Either way
it listens on 127.0.0.1 on a free port, blob service only, in memory.

`BlobClient` talks to it directly with the emulator's well-known development account, signing
requests with Shared Key (Azure's documented HMAC scheme), so the tests can check what the store
itself holds and race conditional writes against it without going through zarrd or object_store.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path

import requests

from zarrd_harness import REPO_ROOT, START_TIMEOUT_S, STOP_TIMEOUT_S, Zarrd, _die_with_parent, start_zarrd

AZURITE_DIR = REPO_ROOT / "tests" / "azurite"
AZURITE_BIN = AZURITE_DIR / "node_modules" / ".bin" / "azurite-blob"
ENDPOINT_ENV = "ZARRD_TEST_AZURITE_ENDPOINT"
# The emulator's published development account (the same in every Azurite installation).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
API_VERSION = "2021-08-06"
LISTENS = re.compile(r"Azurite Blob service successfully listens on (http://127\.0\.0\.1:\d+)")
NPM_TIMEOUT_S = 300.0


def install() -> None:
    """`npm ci` in tests/azurite when Azurite is not installed there yet (pinned by its lock file)."""
    if AZURITE_BIN.exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is needed to install Azurite (tests/azurite): install Node.js 20+")
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=AZURITE_DIR,
        check=True,
        timeout=NPM_TIMEOUT_S,
    )


class Azurite:
    """One Azurite blob service on 127.0.0.1 and a free port, stopped by `stop()`.

    In memory by default (the tests); `on_disk=True` keeps blobs in its temporary directory
    instead, for long runs: in memory, Azurite keeps every overwritten blob's extents until
    `--extentMemoryLimit` and slows to a crawl near it (seen after ~9 minutes of the soak).
    """

    def __init__(self, on_disk: bool = False) -> None:
        self.on_disk = on_disk
        self.proc: subprocess.Popen | None = None
        self.endpoint = ""
        self._dir = tempfile.TemporaryDirectory(prefix="zarrd-azurite-")

    def start(self) -> "Azurite":
        install()
        args = [
            str(AZURITE_BIN),
            "--blobHost", "127.0.0.1",
            "--blobPort", "0",
            "--skipApiVersionCheck",
            "--loose",
            "--disableProductStyleUrl",
            "--disableTelemetry",
        ]  # fmt: skip
        if self.on_disk:
            args += ["--location", self._dir.name]
        else:
            args += ["--inMemoryPersistence", "--extentMemoryLimit", "2048"]
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=self._dir.name,  # anything it writes stays out of the checkout
            preexec_fn=_die_with_parent,
        )
        found: list[str] = []
        seen: list[str] = []
        ready = threading.Event()

        def drain() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for raw in iter(self.proc.stdout.readline, b""):
                line = raw.decode(errors="replace")
                if len(seen) < 50:
                    seen.append(line)
                m = LISTENS.search(line)
                if m and not found:
                    found.append(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=drain, name="azurite-stdout", daemon=True).start()
        if not ready.wait(START_TIMEOUT_S) or not found:
            self.stop()
            raise RuntimeError("Azurite did not start:\n" + "".join(seen))
        self.endpoint = found[0]
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        self._dir.cleanup()


class BlobClient:
    """Direct Blob REST calls to Azurite, signed with the development account's Shared Key."""

    def __init__(self, endpoint: str, timeout: float = 30.0) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()

    def _sign(self, method: str, path: str, query: dict[str, str], headers: dict[str, str]) -> str:
        lower = {k.lower(): v for k, v in headers.items()}
        length = lower.get("content-length", "")
        standard = [
            lower.get("content-encoding", ""),
            lower.get("content-language", ""),
            "" if length == "0" else length,
            lower.get("content-md5", ""),
            lower.get("content-type", ""),
            "",  # Date: x-ms-date is sent instead
            lower.get("if-modified-since", ""),
            lower.get("if-match", ""),
            lower.get("if-none-match", ""),
            lower.get("if-unmodified-since", ""),
            lower.get("range", ""),
        ]
        ms = "".join(f"{k}:{v}\n" for k, v in sorted(lower.items()) if k.startswith("x-ms-"))
        resource = f"/{ACCOUNT}{path}" + "".join(f"\n{k.lower()}:{v}" for k, v in sorted(query.items()))
        to_sign = "\n".join([method, *standard]) + "\n" + ms + resource
        mac = hmac.new(base64.b64decode(ACCOUNT_KEY), to_sign.encode(), hashlib.sha256).digest()
        return f"SharedKey {ACCOUNT}:{base64.b64encode(mac).decode()}"

    def request(
        self,
        method: str,
        container: str,
        key: str = "",
        *,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> requests.Response:
        path = f"/{ACCOUNT}/{container}" + (f"/{urllib.parse.quote(key)}" if key else "")
        query = query or {}
        h = {
            "x-ms-date": email.utils.formatdate(usegmt=True),
            "x-ms-version": API_VERSION,
            "Content-Length": str(len(body)),
            **(headers or {}),
        }
        h["Authorization"] = self._sign(method, path, query, h)
        url = self.endpoint + path + ("?" + urllib.parse.urlencode(query) if query else "")
        return self.session.request(method, url, headers=h, data=body, timeout=self.timeout)

    def create_container(self, container: str) -> None:
        r = self.request("PUT", container, query={"restype": "container"})
        assert r.status_code in (201, 409), f"create container {container}: {r.status_code} {r.text}"

    def put(self, container: str, key: str, body: bytes, *, if_match: str | None = None,
            if_none_match: str | None = None) -> requests.Response:  # fmt: skip
        headers = {"x-ms-blob-type": "BlockBlob"}
        if if_match is not None:
            headers["If-Match"] = if_match
        if if_none_match is not None:
            headers["If-None-Match"] = if_none_match
        return self.request("PUT", container, key, headers=headers, body=body)

    def get(self, container: str, key: str) -> requests.Response:
        return self.request("GET", container, key)

    def list_names(self, container: str, prefix: str = "") -> list[str]:
        """Every blob name under `prefix` (one page: the tests hold far fewer than 5000)."""
        query = {"restype": "container", "comp": "list", "maxresults": "5000"}
        if prefix:
            query["prefix"] = prefix
        r = self.request("GET", container, query=query)
        assert r.status_code == 200, r.text
        return re.findall(r"<Name>([^<]*)</Name>", r.text)


def mount_options(endpoint: str) -> dict[str, str]:
    """The `options` of a zarrd `az://` mount on this Azurite (the development account over HTTP)."""
    return {
        "account_name": ACCOUNT,
        "access_key": ACCOUNT_KEY,
        "endpoint": f"{endpoint.rstrip('/')}/{ACCOUNT}",
        "allow_http": "true",
    }


def toml_value(v: object) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_config(path: Path, mounts: dict[str, dict], extra: str = "") -> Path:
    """A zarrd configuration file with these mounts: {name: {"url": ..., "options": {...}, ...}}."""
    lines = [extra.strip(), ""] if extra.strip() else []
    for name, spec in mounts.items():
        lines.append(f"[mounts.{name}]")
        for k, v in spec.items():
            if k != "options":
                lines.append(f"{k} = {toml_value(v)}")
        if spec.get("options"):
            lines.append(f"[mounts.{name}.options]")
            lines += [f"{k} = {toml_value(v)}" for k, v in spec["options"].items()]
        lines.append("")
    path.write_text("\n".join(lines))
    return path


def start_replicas(
    n: int,
    endpoint: str,
    container: str,
    logs_dir: Path,
    *,
    name: str = "az",
    prefix: str = "",
    mount: dict | None = None,
    extra_config: str = "",
) -> list[Zarrd]:
    """`n` zarrd processes, each mounting `az://container/prefix` on this Azurite as `name`."""
    url = f"az://{container}/{prefix}".rstrip("/")
    mount = dict(mount or {})
    spec = {"url": url, "options": {**mount_options(endpoint), **mount.pop("options", {})}, **mount}
    servers: list[Zarrd] = []
    try:
        for i in range(n):
            tag = f"{container}-{name}-{i}"
            config = write_config(logs_dir / f"zarrd-{tag}.toml", {name: spec}, extra_config)
            servers.append(
                start_zarrd({}, log_path=logs_dir / f"zarrd-{tag}.log", extra_args=["--config", str(config)])
            )
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers


def endpoint_from_env() -> str | None:
    return os.environ.get(ENDPOINT_ENV) or None


def wait_until(predicate, timeout_s: float, interval_s: float = 0.05) -> bool:
    """Polls `predicate` until it holds or `timeout_s` passes (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
