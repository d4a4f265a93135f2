"""The raw transport's HTTP client (fabrika.llm.rawhttp) against scripted loopback servers."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import pytest

from fabrika.llm.rawhttp import RawHttpClient, Target, request_head

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    return head + await reader.readexactly(length)


async def serve(handler: Handler) -> tuple[asyncio.Server, Target]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, Target.parse(f"http://127.0.0.1:{port}/v1/chat/completions")


def client(**kw: float | None) -> RawHttpClient:
    return RawHttpClient(timeout_s=float(kw.get("timeout_s") or 5.0), connect_timeout_s=1.0,
                         read_timeout_s=kw.get("read_timeout_s"))


async def post(c: RawHttpClient, t: Target, body: bytes = b'{"q": 1}') -> tuple[int, dict[str, str], bytes]:
    return await c.post(t, request_head(t, {"Content-Type": "application/json", "x-fabrika-tag": "fc.user"},
                                        len(body)), body)


def test_target_parse_and_request_head() -> None:
    t = Target.parse("https://api.example.com/v1/chat/completions?x=1")
    assert (t.host, t.port, t.tls, t.path, t.host_header) == ("api.example.com", 443, True,
                                                              "/v1/chat/completions?x=1", "api.example.com")
    assert Target.parse("http://127.0.0.1:8000/v1").host_header == "127.0.0.1:8000"
    head = request_head(Target.parse("http://h:81/p"), {"Authorization": "Bearer k"}, 7)
    assert head == (b"POST /p HTTP/1.1\r\nHost: h:81\r\nAccept-Encoding: identity\r\nContent-Length: 7\r\n"
                    b"Authorization: Bearer k\r\n\r\n")
    with pytest.raises(ValueError, match="http"):
        Target.parse("unix:///tmp/sock")


async def test_keep_alive_reuses_one_connection_and_reads_chunked_and_split_answers() -> None:
    seen: list[bytes] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for i in range(3):
            seen.append(await read_request(reader))
            if i == 0:  # Content-Length, written in two pieces
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\nRetry-After: 2\r\n\r\n{\"a\":")
                await writer.drain()
                await asyncio.sleep(0.01)
                writer.write(b" 12345}")
            elif i == 1:  # chunked, with a trailer-free end
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"b\"\r\n3;ext=1\r\n:2}\r\n0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
        writer.close()

    server, t = await serve(handler)
    c = client()
    async with server:
        assert await post(c, t) == (200, {"content-length": "12", "retry-after": "2"}, b'{"a": 12345}')
        status, headers, body = await post(c, t)
        assert (status, body) == (200, b'{"b":2}') and headers["transfer-encoding"] == "chunked"
        assert (await post(c, t))[0] == 429
    c.close()
    assert c.opened == 1  # three requests on one keep-alive connection
    assert seen[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"x-fabrika-tag: fc.user\r\n" in seen[0] and seen[0].endswith(b'\r\n\r\n{"q": 1}')


async def test_an_idle_connection_the_server_closed_is_replaced_and_the_request_sent_again() -> None:
    answered = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        await read_request(reader)
        answered += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        writer.close()  # keep-alive refused after one answer, without saying so

    server, t = await serve(handler)
    c = client()
    async with server:
        assert (await post(c, t))[2] == b"{}"
        await asyncio.sleep(0.05)
        assert (await post(c, t))[2] == b"{}"
    c.close()
    assert answered == 2 and c.opened == 2


async def test_a_server_that_stops_mid_answer_is_a_connection_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"trunc")
        await writer.drain()
        writer.close()

    server, t = await serve(handler)
    async with server:
        with pytest.raises(ConnectionResetError, match="mid-answer"):
            await post(client(), t)


async def test_read_gap_and_whole_attempt_timeouts() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(2)

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n")
        for _ in range(40):  # a byte every 20 ms: never a 0.1 s gap, but no answer within 0.3 s
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(0.02)

    server, t = await serve(silent)
    async with server:
        with pytest.raises(TimeoutError, match="no byte"):
            await post(client(read_timeout_s=0.1), t)
    server, t = await serve(trickle)
    async with server:
        with pytest.raises(TimeoutError, match="within 0.3 s"):
            await post(client(read_timeout_s=0.1, timeout_s=0.3), t)


async def test_a_refused_connect_is_an_os_error_and_garbage_a_value_error() -> None:
    server, t = await serve(lambda r, w: asyncio.sleep(0))
    server.close()
    await server.wait_closed()
    with pytest.raises(OSError):
        await post(client(), t)

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH\r\n\r\n")
        await writer.drain()

    server, t = await serve(garbage)
    async with server:
        with pytest.raises(ValueError, match="not an HTTP"):
            await post(client(), t)


def test_head_parts_write_request_heads_bytes() -> None:
    from fabrika.llm.rawhttp import head_parts

    t = Target.parse("http://127.0.0.1:8000/v1/chat/completions")
    for headers in ({}, {"Authorization": "Bearer k", "Content-Type": "application/json"},
                    {"Authorization": "Bearer ключ", "x-fabrika-tag": "fc.user"}):
        before, lines = head_parts(t, headers)
        for length in (0, 7, 123456):
            assert before + b"%d\r\n" % length + lines + b"\r\n" == request_head(t, headers, length)
        extra = {**headers, "x-fabrika-routing-key": "ep-1"}
        assert before + b"9\r\n" + lines + b"x-fabrika-routing-key: ep-1\r\n\r\n" == request_head(t, extra, 9)


async def test_the_backends_raw_head_is_request_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The openai backend builds its head from parts kept per endpoint and tag: the bytes of request_head."""
    from fabrika.llm.config import LLMConfig
    from fabrika.llm.openai_compat import OpenAICompatBackend, _ascii
    from fabrika.llm.types import ChatRequest

    sent: list[tuple[bytes, bytes]] = []

    async def fake_post(self: RawHttpClient, t: Target, head: bytes, body: bytes) -> tuple[int, dict[str, str], bytes]:
        sent.append((head, body))
        return 200, {}, b'{"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]}'

    monkeypatch.setattr(RawHttpClient, "post", fake_post)
    cfg = LLMConfig(backend="openai", model="m", transport="raw", endpoints=[{"base_url": "http://127.0.0.1:9/v1"}])
    backend = OpenAICompatBackend(cfg)
    ep = backend.endpoints[0]
    requests = [ChatRequest(messages=({"role": "user", "content": "x"},)),
                ChatRequest(messages=({"role": "user", "content": "y"},), tag="fc.user"),
                ChatRequest(messages=({"role": "user", "content": "z"},), tag="fc.user", routing_key="эпизод-1"),
                ChatRequest(messages=({"role": "user", "content": "x"},), tag="роль", routing_key="e2")]
    for _ in range(2):  # the second round from the kept parts
        for r in requests:
            await backend.send(r)
    await backend.aclose()
    t = Target.parse(ep.url)
    for (head, body), r in zip(sent, requests * 2):
        headers = ep.headers if r.tag == "default" else {**ep.headers, "x-fabrika-tag": _ascii(r.tag)}
        if r.routing_key is not None:
            headers = {**headers, "x-fabrika-routing-key": _ascii(r.routing_key)}
        assert head == request_head(t, headers, len(body))
