"""Process management for the interoperability suite: the zarrd binary and moto's S3 server.

Every wait here is bounded, and every process started here is stopped at teardown
(and, on Linux, also dies with the test process if that is killed).
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"^zarrd listening on (http://127\.0\.0\.1:(\d+))\s*$")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
HTTP_TIMEOUT_S = 30.0
HARNESS_ENV = {"ZARRD_TEST_BIN", "ZARRD_TEST_VENV"}


def zarrd_binary() -> Path:
    """The binary under test: $ZARRD_TEST_BIN, else ${CARGO_TARGET_DIR:-<repo>/target}/debug/zarrd."""
    explicit = os.environ.get("ZARRD_TEST_BIN")
    if explicit:
        return Path(explicit)
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target"))
    if not target.is_absolute():
        target = REPO_ROOT / target
    return target / "debug" / "zarrd"


def _die_with_parent() -> None:
    """Runs in the child before exec: ask the kernel to SIGTERM it if pytest dies.

    (The signal fires when the *thread* that started the child exits: start servers from
    the main thread, as pytest fixtures do.)"""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except OSError:
        pass


RUNNING: list["Zarrd"] = []  # started and not yet stopped, for failure reports


@dataclass
class Zarrd:
    """A running zarrd process and the base URL it printed."""

    proc: subprocess.Popen
    url: str
    log_path: Path
    _drain: threading.Thread | None = field(default=None, repr=False)

    def mount_url(self, mount: str) -> str:
        """Base URL of a mount's store protocol, with a trailing slash."""
        return f"{self.url}/zarr/{mount}/"

    def log_tail(self, n: int = 60) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:])

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL. Returns the exit code seen after SIGTERM
        (None if it had to be killed)."""
        if self in RUNNING:
            RUNNING.remove(self)
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=timeout)
            return None

    def rss_kib(self) -> int:
        """Resident set size now (`VmRSS`), in KiB."""
        return _proc_status_kib(self.proc.pid, "VmRSS")

    def peak_rss_kib(self) -> int:
        """Peak resident set size since start or the last `reset_peak_rss` (`VmHWM`), in KiB."""
        return _proc_status_kib(self.proc.pid, "VmHWM")

    def reset_peak_rss(self) -> None:
        """Reset `VmHWM` to the current RSS (Linux: write 5 to /proc/PID/clear_refs)."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")


class PeakRss:
    """Measures how far the server's peak RSS rises inside a `with` block.

    On entry the peak is reset to the current RSS; on exit `rise_kib` is the peak seen
    during the block minus the RSS at entry. `assert_below(kib, what)` fails with both
    figures named."""

    def __init__(self, server: Zarrd) -> None:
        self.server = server
        self.start_kib = 0
        self.rise_kib = 0

    def __enter__(self) -> "PeakRss":
        self.server.reset_peak_rss()
        self.start_kib = self.server.rss_kib()
        return self

    def __exit__(self, *exc) -> None:
        self.rise_kib = self.server.peak_rss_kib() - self.start_kib

    def assert_below(self, limit_kib: int, what: str) -> None:
        assert self.rise_kib <= limit_kib, (
            f"{what}: peak RSS rose by {self.rise_kib} KiB (from {self.start_kib} KiB), "
            f"bound is {limit_kib} KiB"
        )


def _proc_status_kib(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field_name} not in /proc/{pid}/status")


def start_zarrd(
    mounts: dict[str, str],
    log_path: Path,
    env: dict[str, str] | None = None,
    extra_args: list[str] | None = None,
) -> Zarrd:
    """Start `zarrd serve` on an ephemeral loopback port and wait for its `listening` line."""
    binary = zarrd_binary()
    if not binary.is_file():
        raise FileNotFoundError(
            f"zarrd binary not found at {binary}: build it with `cargo build` "
            "or point ZARRD_TEST_BIN at it"
        )
    args = [str(binary), "serve", "--bind", "127.0.0.1:0"]
    for name, url in mounts.items():
        args += ["--mount", f"{name}={url}"]
    args += extra_args or []
    # zarrd reads ZARRD_* variables as configuration; the harness's own are not.
    child_env = {k: v for k, v in os.environ.items() if k not in HARNESS_ENV}
    child_env.setdefault("RUST_LOG", "info")
    child_env.update(env or {})
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "wb")  # noqa: SIM115 - closed by the process's lifetime
    proc = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        env=child_env,
        preexec_fn=_die_with_parent,
    )
    log.close()

    # Read the first stdout line on a helper thread so the wait is bounded.
    first_line: list[bytes] = []
    got_line = threading.Event()

    def drain() -> None:
        assert proc.stdout is not None
        for i, line in enumerate(iter(proc.stdout.readline, b"")):
            if i == 0:
                first_line.append(line)
                got_line.set()
        got_line.set()

    reader = threading.Thread(target=drain, name="zarrd-stdout", daemon=True)
    reader.start()
    server = Zarrd(proc=proc, url="", log_path=log_path, _drain=reader)
    RUNNING.append(server)
    if not got_line.wait(START_TIMEOUT_S) or not first_line:
        server.stop()
        why = (
            f"exited with code {proc.returncode} before printing its listening line"
            if proc.returncode not in (None, -signal.SIGTERM)
            else f"did not print its listening line within {START_TIMEOUT_S}s"
        )
        raise RuntimeError(f"zarrd {why}; args={args}\n--- stderr ---\n{server.log_tail()}")
    text = first_line[0].decode(errors="replace")
    match = LISTENING.match(text)
    if not match:
        server.stop()
        raise RuntimeError(
            f"unexpected first stdout line from zarrd: {text!r}\n"
            f"--- stderr ---\n{server.log_tail()}"
        )
    server.url = match.group(1)
    _wait_healthy(server)
    return server


def _wait_healthy(server: Zarrd) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    last: object = None
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            break
        try:
            r = requests.get(f"{server.url}/healthz", timeout=5)
            if r.status_code == 200:
                return
            last = r.status_code
        except requests.RequestException as e:
            last = e
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"zarrd /healthz never answered 200 (last: {last})\n{server.log_tail()}")


# --- moto (an S3-compatible server) -------------------------------------------------------

S3_BUCKET = "zarrd-test"
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "zarrd-test",
    "AWS_SECRET_ACCESS_KEY": "zarrd-test-secret",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ALLOW_HTTP": "true",
}


class Moto:
    """moto's S3 server on 127.0.0.1 with an ephemeral port, in a thread of this process."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.endpoint = ""

    def start(self) -> None:
        start_error: list[BaseException] = []

        def run() -> None:
            try:
                self._server.start()
            except BaseException as e:  # noqa: BLE001 - reported below
                start_error.append(e)

        t = threading.Thread(target=run, name="moto-start", daemon=True)
        t.start()
        t.join(START_TIMEOUT_S)
        if t.is_alive() or start_error:
            raise RuntimeError(f"moto's server did not start: {start_error or 'timed out'}")
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def stop(self) -> None:
        t = threading.Thread(target=self._server.stop, name="moto-stop", daemon=True)
        t.start()
        t.join(STOP_TIMEOUT_S)

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=S3_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_ENV["AWS_SECRET_ACCESS_KEY"],
            region_name=S3_ENV["AWS_REGION"],
            config=Config(
                connect_timeout=10,
                read_timeout=30,
                retries={"max_attempts": 2},
                s3={"addressing_style": "path"},
            ),
        )

    def zarrd_env(self) -> dict[str, str]:
        """Environment for a zarrd whose s3:// mounts talk to this server."""
        return {**S3_ENV, "AWS_ENDPOINT_URL": self.endpoint}


def upload_tree(s3, bucket: str, root: Path, prefix: str) -> int:
    """Copy every file under `root` to `s3://bucket/prefix/...`; returns the count."""
    count = 0
    for path in sorted(root.rglob("*")):
        if path.is_file():
            key = f"{prefix.strip('/')}/{path.relative_to(root).as_posix()}"
            s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
            count += 1
    return count


def s3_keys(s3, bucket: str, prefix: str) -> set[str]:
    """All keys under `prefix/`, relative to it."""
    out: set[str] = set()
    p = prefix.strip("/") + "/"
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=p):
        for obj in page.get("Contents", []):
            out.add(obj["Key"][len(p) :])
    return out
