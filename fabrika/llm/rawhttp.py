"""A minimal HTTP/1.1 client on asyncio's Protocol API: the ``raw`` transport's wire (issue 30).

Why not aiohttp for every request: its per-request path (request and response objects, header
multidicts, cookie and trace hooks, timer contexts, a stream reader) cost ~0.4 ms of CPU per
request on the FC pipeline, the largest single client cost by profile. An LLM endpoint needs far
less: ``POST`` a JSON body on a keep-alive connection and read one JSON answer. This client does
exactly that — a pool of idle connections per (host, port, TLS), a prebuilt request head, one
parser that reads ``Content-Length`` or ``chunked`` bodies, one timer per request for the whole
attempt and the gap between bytes — and nothing else: no redirects, no cookies, no compression
(it asks for ``Accept-Encoding: identity``), no proxies (an endpoint behind a proxy keeps the
aiohttp transport, :mod:`fabrika.llm.openai_compat`).

Errors are the builtin ones :func:`fabrika.llm.retry.map_exception` maps: ``TimeoutError`` (the
attempt or the read gap ran out), ``ConnectionError`` / ``OSError`` (refused, reset, closed before
the answer), ``ValueError`` (an answer that is not HTTP); a connect that does not finish within
``connect_timeout_s`` is ``LLMError("connection")`` directly (it counts toward the breaker). A
request sent on a reused idle connection that the server had closed meanwhile (keep-alive races)
is sent once more on a fresh connection, as browsers and aiohttp do.
"""

from __future__ import annotations

import asyncio
import ssl as _ssl
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

from fabrika.errors import LLMError

_MAX_HEAD = 64 * 1024


@dataclass(frozen=True, slots=True)
class Target:
    """One URL parsed once: where to connect and the request line's path."""

    host: str
    port: int
    tls: bool
    path: str
    host_header: str

    @classmethod
    def parse(cls, url: str) -> "Target":
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"raw transport needs an http(s) URL, got {url!r}")
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        default = (tls and port == 443) or (not tls and port == 80)
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        return cls(parts.hostname, port, tls, path, host if default else f"{host}:{port}")


class _Conn(asyncio.Protocol):
    """One keep-alive connection; at most one request at a time."""

    __slots__ = ("transport", "buf", "waiter", "status", "headers", "length", "chunked", "body", "got",
                 "closed", "last", "keep", "loop")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, dict[str, str], bytes]] | None = None
        self.closed = False
        self.last = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] | None = None
        self.length = -1
        self.chunked = False
        self.body = bytearray()
        self.got = False
        self.keep = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        w = self.waiter
        if w is not None and not w.done():
            if self.headers is not None and self.length < 0 and not self.chunked:  # body delimited by close
                w.set_result((self.status, self.headers, bytes(self.body) + bytes(self.buf)))
            else:
                w.set_exception(ConnectionResetError(
                    f"server closed the connection {'mid-answer' if self.got else 'before answering'}"
                    + (f": {exc}" if exc else "")))

    def send(self, data: bytes, loop: asyncio.AbstractEventLoop) -> asyncio.Future[tuple[int, dict[str, str], bytes]]:
        self._reset()
        self.waiter = loop.create_future()
        assert self.transport is not None
        self.transport.write(data)
        return self.waiter

    def data_received(self, data: bytes) -> None:
        self.got = True
        self.last = self.loop.time()
        self.buf += data
        try:
            self._parse()
        except ValueError as exc:
            w = self.waiter
            if w is not None and not w.done():
                w.set_exception(exc)
            self.keep = False
            if self.transport is not None:
                self.transport.close()

    def _parse(self) -> None:
        buf = self.buf
        if self.headers is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD:
                    raise ValueError("HTTP answer head over 64 KiB")
                return
            lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
            del buf[:end + 4]
            proto, _, rest = lines[0].partition(" ")
            if not proto.startswith("HTTP/1."):
                raise ValueError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
            self.status = int(rest[:3])
            headers: dict[str, str] = {}
            for line in lines[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            self.headers = headers
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.chunked = True
            elif "content-length" in headers:
                self.length = int(headers["content-length"])
            if headers.get("connection", "").lower() == "close" or proto == "HTTP/1.0":
                self.keep = False
            if 100 <= self.status < 200:  # an interim answer (100 Continue): the real head follows
                self.headers = None
                return self._parse()
        if self.chunked:
            while True:
                nl = buf.find(b"\r\n")
                if nl < 0:
                    return
                size = int(bytes(buf[:nl]).split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:  # the last chunk; optional trailer lines, then an empty line
                    if buf[nl + 2:nl + 4] == b"\r\n":
                        del buf[:nl + 4]
                        return self._done()
                    end = buf.find(b"\r\n\r\n", nl + 2)
                    if end < 0:
                        return
                    del buf[:end + 4]
                    return self._done()
                if len(buf) < nl + 2 + size + 2:
                    return
                self.body += buf[nl + 2:nl + 2 + size]
                del buf[:nl + 2 + size + 2]
        if self.length >= 0:
            if len(buf) < self.length:
                return
            self.body = bytearray(buf[:self.length])
            del buf[:self.length]
            return self._done()
        self.body += buf  # no length: the body ends when the server closes
        buf.clear()

    def _done(self) -> None:
        w = self.waiter
        assert self.headers is not None
        if w is not None and not w.done():
            w.set_result((self.status, self.headers, bytes(self.body)))


class RawHttpClient:
    """Keep-alive ``POST`` of prebuilt bodies; one per backend, one event loop."""

    def __init__(self, *, timeout_s: float, connect_timeout_s: float, read_timeout_s: float | None) -> None:
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._idle: dict[tuple[str, int, bool], deque[_Conn]] = {}
        self._ssl: _ssl.SSLContext | None = None
        self.opened = 0  # connections opened (tests assert reuse)

    async def _connect(self, t: Target, loop: asyncio.AbstractEventLoop) -> _Conn:
        if t.tls and self._ssl is None:
            self._ssl = _ssl.create_default_context()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(_Conn, t.host, t.port, ssl=self._ssl if t.tls else None)
        except TimeoutError as exc:
            raise LLMError("connection", f"connect to {t.host}:{t.port} timed out after "
                           f"{self.connect_timeout_s:g} s") from exc
        self.opened += 1
        return conn

    async def post(self, t: Target, head: bytes, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """``(status, lower-cased headers, body)`` of one ``POST``; ``head`` ends with the blank line."""
        loop = asyncio.get_running_loop()
        key = (t.host, t.port, t.tls)
        idle = self._idle.get(key)
        if idle is None:
            idle = self._idle[key] = deque()
        deadline = loop.time() + self.timeout_s
        data = head + body
        conn = None
        while idle:
            c = idle.pop()
            if not c.closed and c.transport is not None and not c.transport.is_closing():
                conn = c
                break
        reused = conn is not None
        if conn is None:
            conn = await self._connect(t, loop)
        try:
            result = await self._exchange(conn, data, loop, deadline)
        except ConnectionResetError:
            if not reused or conn.got:
                raise
            conn = await self._connect(t, loop)  # the idle connection was closed by the server meanwhile
            result = await self._exchange(conn, data, loop, deadline)
        if conn.keep and not conn.closed and not conn.buf:
            conn.waiter = None
            idle.append(conn)
        elif conn.transport is not None:
            conn.transport.close()
        return result

    async def _exchange(self, conn: _Conn, data: bytes, loop: asyncio.AbstractEventLoop,
                        deadline: float) -> tuple[int, dict[str, str], bytes]:
        fut = conn.send(data, loop)
        read = self.read_timeout_s
        conn.last = loop.time()

        def check() -> None:  # one timer per request: the attempt's deadline and the gap between bytes
            if fut.done():
                return
            now = loop.time()
            if now >= deadline:
                fut.set_exception(TimeoutError(f"no complete answer within {self.timeout_s:g} s"))
            elif read is not None and now - conn.last >= read:
                fut.set_exception(TimeoutError(f"no byte of the answer for {read:g} s"))
            else:
                timer[0] = loop.call_at(deadline if read is None else min(deadline, conn.last + read), check)

        timer: list[asyncio.TimerHandle] = [
            loop.call_at(deadline if read is None else min(deadline, conn.last + read), check)]
        try:
            return await fut
        except BaseException:  # timed out, cancelled, reset, unreadable: this connection is done
            conn.keep = False
            if conn.transport is not None:
                conn.transport.abort()
            raise
        finally:
            timer[0].cancel()

    def close(self) -> None:
        for idle in self._idle.values():
            for c in idle:
                if c.transport is not None:
                    c.transport.close()
        self._idle.clear()


def request_head(t: Target, headers: dict[str, str], length: int) -> bytes:
    """The request line and headers of a ``POST`` to ``t`` with a body of ``length`` bytes."""
    lines = [f"POST {t.path} HTTP/1.1\r\nHost: {t.host_header}\r\nAccept-Encoding: identity\r\n"
             f"Content-Length: {length}\r\n"]
    for k, v in headers.items():
        lines.append(f"{k}: {v}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("latin-1", "replace")


def head_parts(t: Target, headers: dict[str, str]) -> tuple[bytes, bytes]:
    """:func:`request_head` cut around the length, to be built once per endpoint and header set:
    ``before + b"%d\\r\\n" % length + lines + b"\\r\\n"`` is ``request_head(t, headers, length)``, and more
    header lines (``b"k: v\\r\\n"``, latin-1) may go between ``lines`` and the blank line."""
    before = f"POST {t.path} HTTP/1.1\r\nHost: {t.host_header}\r\nAccept-Encoding: identity\r\nContent-Length: "
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return before.encode("latin-1", "replace"), lines.encode("latin-1", "replace")


__all__ = ["RawHttpClient", "Target", "head_parts", "request_head"]
