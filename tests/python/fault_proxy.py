"""A fault-injecting HTTP proxy between zarrd and a store server (Azurite), for the store-fault tests.

It listens on 127.0.0.1 (a free port) and forwards each HTTP/1.1 request to the upstream on a
connection of its own, answering with `Connection: close`. At the configured rate (seeded, so a run
is repeatable) a request gets one of these faults instead:

- `503`: answered `503 Server Busy` (Azure's throttling answer) without reaching the store;
- `reset_before`: the connection is closed before the request reaches the store;
- `reset_after`: the request reaches the store (a write takes effect) and the connection is closed
  before any answer: a lost reply;
- `stall`: nothing is answered for `stall_s`, then the connection is closed (a timeout, when
  `stall_s` is longer than zarrd's client timeout);
- `slow`: the answer is sent in small pieces with pauses (within the client's timeout);
- `truncate`: the answer's head and half its body are sent, then the connection is closed.

`counts` says how many of each were injected. Runs its own event loop on a daemon thread.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from urllib.parse import urlsplit

FAULTS = ("503", "reset_before", "reset_after", "stall", "slow", "truncate")
READ_TIMEOUT_S = 30.0
MAX_HEAD = 64 * 1024


class FaultProxy:
    def __init__(self, upstream: str, seed: int = 17) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.upstream_prefix = f"{parts.scheme}://{parts.netloc}"
        self.rate = 0.0
        self.faults: tuple[str, ...] = FAULTS
        self.stall_s = 4.0
        self.counts: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FaultProxy":
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._start(), self._loop)
        fut.result(timeout=10)
        return self

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            # Connections still open (idle keep-alives of the client) end here.
            pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def set(self, rate: float, faults: tuple[str, ...] = FAULTS) -> None:
        """Inject one of `faults` into a share `rate` (0 to 1) of requests from now on."""
        assert all(f in FAULTS for f in faults), faults
        with self._lock:
            self.rate, self.faults = rate, faults

    def _pick(self) -> str | None:
        with self._lock:
            if self.rate <= 0 or self._rng.random() >= self.rate:
                self.counts["none"] += 1
                return None
            fault = self._rng.choice(self.faults)
            self.counts[fault] += 1
            return fault

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(self._serve_one(reader, writer), timeout=READ_TIMEOUT_S + self.stall_s)
        except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass
        finally:
            writer.close()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD:
            return
        lines = head.decode("latin-1").split("\r\n")
        length = 0
        kept = [lines[0]]
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
            if name.strip().lower() in ("connection", "keep-alive"):
                continue
            kept.append(line)
        body = await reader.readexactly(length) if length else b""
        fault = self._pick()
        if fault == "503":
            msg = b"<?xml version=\"1.0\"?><Error><Code>ServerBusy</Code><Message>injected</Message></Error>"
            writer.write(b"HTTP/1.1 503 Server Busy\r\nContent-Type: application/xml\r\nConnection: close\r\n"
                         b"Content-Length: " + str(len(msg)).encode() + b"\r\n\r\n" + msg)  # fmt: skip
            await writer.drain()
            return
        if fault == "reset_before":
            _reset(writer)
            return
        if fault == "stall":
            await asyncio.sleep(self.stall_s)
            _reset(writer)
            return
        request = ("\r\n".join(kept) + "\r\nConnection: close\r\n\r\n").encode("latin-1") + body
        up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        try:
            up_writer.write(request)
            await up_writer.drain()
            answer = await asyncio.wait_for(up_reader.read(), timeout=READ_TIMEOUT_S)
        finally:
            up_writer.close()
        if fault == "reset_after":
            _reset(writer)
            return
        split = answer.find(b"\r\n\r\n")
        if split < 0:
            return
        # The answer closes the connection (we do), so the client does not try to reuse it.
        ahead = [ln for ln in answer[:split].split(b"\r\n") if not ln.lower().startswith(b"connection:")]
        ahead.append(b"Connection: close")
        out_head, out_body = b"\r\n".join(ahead) + b"\r\n\r\n", answer[split + 4 :]
        if fault == "truncate" and len(out_body) >= 2:
            writer.write(out_head + out_body[: len(out_body) // 2])
            await writer.drain()
            _reset(writer)
            return
        if fault == "slow":
            data = out_head + out_body
            step = max(1, len(data) // 8)
            for i in range(0, len(data), step):
                writer.write(data[i : i + step])
                await writer.drain()
                await asyncio.sleep(0.05)
            return
        writer.write(out_head + out_body)
        await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0) where possible."""
    import socket
    import struct

    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()
