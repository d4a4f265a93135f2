"""A lean HTTP/1.1 server on asyncio's Protocol API, for the fake OpenAI server.

Why not ``aiohttp.web``: the throughput bench needs a server that costs far
less CPU per request than the clients it measures. Raw protocol callbacks
(no task per request; latency through ``loop.call_later``) serve tens of
thousands of small JSON requests per second on one core.

Only what OpenAI-style clients send is supported: ``Content-Length`` bodies,
keep-alive, requests answered in order per connection. ``Transfer-Encoding:
chunked`` request bodies get ``411``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 411: "Length Required",
            413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable"}

_MAX_BODY = 64 * 1024 * 1024


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass(slots=True)
class HttpReply:
    """What a handler returns. ``delay_s`` > 0 defers sending; ``hang_s`` > 0 never answers and
    closes the connection after that many seconds (the client times out first)."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    hang_s: float = 0.0


Handler = Callable[[HttpRequest], HttpReply]


class HttpProtocol(asyncio.Protocol):
    """One connection. Requests are parsed from a buffer and answered strictly in order."""

    __slots__ = ("handler", "on_start", "on_done", "transport", "buf", "queue", "busy", "timers", "loop", "__weakref__")

    def __init__(self, handler: Handler, on_start: Callable[[], None], on_done: Callable[[], None]) -> None:
        self.handler = handler
        self.on_start = on_start
        self.on_done = on_done
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.queue: deque[HttpRequest] = deque()
        self.busy = False
        self.timers: list[asyncio.TimerHandle] = []
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)  # a TCP server's connection: readable and writable
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        for t in self.timers:
            t.cancel()
        self.timers.clear()
        if self.busy:
            self.busy = False
            self.on_done()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            try:
                method, target, _ = lines[0].split(" ", 2)
            except ValueError:
                self._fail(400)
                return
            headers: dict[str, str] = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._fail(411)
                return
            length = int(headers.get("content-length", "0") or 0)
            if length > _MAX_BODY:
                self._fail(413)
                return
            total = end + 4 + length
            if len(self.buf) < total:
                return
            body = bytes(self.buf[end + 4:total])
            del self.buf[:total]
            self.queue.append(HttpRequest(method, target, headers, body))
            if not self.busy:
                self._next()

    def _fail(self, status: int) -> None:
        if self.transport is not None:
            self.transport.write(_render(HttpReply(status=status), close=True))
            self.transport.close()

    def _next(self) -> None:
        if not self.queue or self.transport is None:
            return
        req = self.queue.popleft()
        self.busy = True
        self.on_start()
        try:
            reply = self.handler(req)
        except Exception as exc:  # noqa: BLE001 - a handler bug must answer 500, not kill the connection silently
            reply = HttpReply(status=500, body=f'{{"error":{{"message":"fake server handler error: {type(exc).__name__}"}}}}'.encode())
        close = req.headers.get("connection", "").lower() == "close"
        if reply.hang_s > 0:
            self.timers.append(self.loop.call_later(reply.hang_s, self._hang_up))
        elif reply.delay_s > 0:
            self.timers.append(self.loop.call_later(reply.delay_s, self._send, reply, close))
        else:
            self._send(reply, close)

    def _hang_up(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _send(self, reply: HttpReply, close: bool) -> None:
        self.timers.clear()
        if self.transport is None:
            return
        self.transport.write(_render(reply, close))
        self.busy = False
        self.on_done()
        if close:
            self.transport.close()
            return
        if self.queue:
            self._next()


def _render(reply: HttpReply, close: bool = False) -> bytes:
    parts = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}\r\n",
             f"Content-Length: {len(reply.body)}\r\n"]
    if "Content-Type" not in reply.headers:
        parts.append("Content-Type: application/json\r\n")
    for k, v in reply.headers.items():
        parts.append(f"{k}: {v}\r\n")
    if close:
        parts.append("Connection: close\r\n")
    parts.append("\r\n")
    return "".join(parts).encode("latin-1") + reply.body
