"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests and benches.

It speaks ``POST /v1/chat/completions`` (tool calls, ``n``, usage,
``response_format``) and ``GET /v1/models`` over real sockets, so the real
``openai`` client, retries, timeouts and connection pools are exercised.

Usage (sync or async tests alike — the server runs on its own thread and loop)::

    from fabrika.testing import FakeOpenAIServer

    with FakeOpenAIServer(latency_ms=0) as srv:
        srv.script(match="Ты — планировщик", responses=['{"steps": []}'], name="planner")
        srv.script(tag="fc.user", responder=lambda req: "Привет!")
        srv.faults(rate=0.3, kinds=["rate_limit", "server"], seed=1)   # seeded, per request+attempt
        srv.faults(match="сломай меня", kind="bad_args", times=1)       # one specific request
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="x")
        ...
        assert srv.served == 10 and srv.counts["faults"]["rate_limit"] == 2
        prompts = srv.requests_for("fc.user")   # bodies one role sent (contract 8 over HTTP)
        assert not srv.errors                    # tracebacks of responders that raised (answered 500)

Scripts are tried in registration order; ``match`` is a substring of any
message content (or a callable on the request JSON), ``tag`` a prefix of the
``x-fabrika-tag`` header that fabrika's engine sends. A script answers from its
``responses`` list in order (``cycle=True`` repeats it; otherwise an exhausted
script stops matching) or from ``responder(request_json)`` every time.

A response spec is a ``str`` (text), or a dict with any of ``content``,
``tool_calls`` (``[{"name", "arguments": dict | str}]``), ``finish_reason``,
``choices`` (a list of specs, for ``n > 1``), ``usage``, ``latency_ms``,
``fault`` (one of :data:`FAULT_KINDS`) and ``retry_after`` — or a raw HTTP answer,
``{"http_status": 502, "body": "...", "headers": {...}}``. Without a matching
script the default answer follows the ``sim`` fallback with ``"[fake]"`` marks
(schema-valid JSON for ``response_format``, a schema-valid tool call when tools
are given, else short text).

Faults (:data:`FAULT_KINDS`): ``rate_limit`` (429 + ``Retry-After`` in
seconds), ``rate_limit_date`` (429 + ``Retry-After`` as an HTTP date),
``server`` (500), ``bad_gateway_html`` (502 with nginx's HTML page),
``overloaded`` (503), ``abort`` (200 with ``finish_reason: "abort"``, as vLLM
answers a request it dropped), ``hang`` (no answer; the client must time out),
``bad_request`` (400), ``auth`` (401), ``not_found`` (404), ``context_length``
(400, ``context_length_exceeded``), and 200-answers with bad content:
``truncated_json``, ``length`` (``finish_reason="length"``), ``unknown_tool``,
``bad_args`` (arguments breaking the schema), ``wrong_language`` (English text).
Rate faults are decided by a hash of (seed, request body, attempt number), so
they are reproducible however requests interleave.

``served`` counts chat requests (not ``GET /models``, which a run's probe sends).
``GET /v1/models`` lists ``models`` (default: ``[model]``); a chat request
naming any other model gets vLLM's ``404 model_not_found``. :meth:`stop` then
:meth:`start` (or :meth:`restart`) brings the server back on the same port,
as a restarted vLLM would.

With ``vllm=SimVLLMConfig(slots=64, ...)`` it behaves like a vLLM server under
load: sequence slots with a queue beyond them, a prefix cache, answer times from
a cost model, ``n > 1`` sharing one prefill, and ``GET /v1/stats`` (``POST``
resets) reporting busy time, queue wait and prompt tokens prefilled vs served
from the cache (see :mod:`fabrika.testing.sim_vllm` for the model and how it
compares with a real vLLM).

With ``replay=True`` it records every 200 answer by request (tag and body bytes) until
``POST /v1/replay`` (or :meth:`FakeOpenAIServer.replay_serve`) switches it to serving them back as
prebuilt bytes, without parsing or answering anew; ``GET /v1/replay`` reports recorded, hits and
misses (see :mod:`fabrika.testing.replay`). For deterministic responders only (the sim's): a
replayed request gets its first recorded answer, takes ``latency_ms`` and meets no faults.

For benches run it as a process: ``python -m fabrika.testing.fake_server
--port 0 --latency-ms 200`` prints ``READY <port>`` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import weakref
from typing import Any

from fabrika.testing.fake_app import FAULT_KINDS, RETRYABLE_FAULTS, FakeOpenAIApp, break_arguments
from fabrika.testing.http import HttpProtocol
from fabrika.testing.sim_vllm import SimVLLMConfig

__all__ = ["FAULT_KINDS", "RETRYABLE_FAULTS", "FakeOpenAIApp", "FakeOpenAIServer", "SimVLLMConfig", "break_arguments",
           "main"]


class FakeOpenAIServer:
    """The fake server on a background thread (see module docstring). Context manager, sync or async."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, latency_ms: float = 0.0,
                 model: str = "fake", seed: int = 0, hang_s: float = 30.0, retry_after: float = 0.05,
                 models: list[str] | None = None, vllm: "SimVLLMConfig | None" = None, replay: bool = False) -> None:
        self.app = FakeOpenAIApp(latency_ms=latency_ms, model=model, seed=seed, hang_s=hang_s, retry_after=retry_after,
                                 models=models, vllm=vllm, replay=replay)
        self.host = host
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._conns: weakref.WeakSet[HttpProtocol] = weakref.WeakSet()

    # configuration delegates (thread-safe enough: list appends are atomic, requests read them in order)
    def script(self, **kwargs: Any) -> "FakeOpenAIServer":
        self.app.script(**kwargs)
        return self

    def faults(self, **kwargs: Any) -> "FakeOpenAIServer":
        self.app.faults(**kwargs)
        return self

    def clear(self) -> None:
        self.app.clear()

    def reset_counts(self) -> None:
        self.app.reset_counts()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def served(self) -> int:
        return self.app.served

    @property
    def max_in_flight(self) -> int:
        return self.app.max_in_flight

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Request bodies received (JSON), in arrival order (first 10,000)."""
        return self.app.requests

    def requests_for(self, tag_prefix: str) -> list[dict[str, Any]]:
        """Recorded request bodies whose ``x-fabrika-tag`` starts with ``tag_prefix`` (assert on prompts per role)."""
        return [r for r, t in zip(self.app.requests, self.app.request_tags) if t.startswith(tag_prefix)]

    def sim_stats(self) -> dict[str, Any]:
        """The vLLM mode's counters (what ``GET /stats`` answers); requires ``vllm=SimVLLMConfig(...)``."""
        if self.app.sim is None:
            raise RuntimeError("sim_stats() needs FakeOpenAIServer(vllm=SimVLLMConfig(...))")
        return self.app.sim.snapshot()

    def replay_serve(self) -> dict[str, Any]:
        """Switch the replay book from recording to serving (what ``POST /v1/replay`` does); its counters."""
        if self.app.replay is None:
            raise RuntimeError("replay_serve() needs FakeOpenAIServer(replay=True)")
        self.app.replay.serving = True
        return self.app.replay.snapshot()

    @property
    def errors(self) -> list[str]:
        """Tracebacks of exceptions raised by scripted responders (each answered 500)."""
        return self.app.errors

    @property
    def counts(self) -> dict[str, Any]:
        return {"total": self.app.served, "routes": dict(self.app.routes), "faults": dict(self.app.fault_counts),
                "status": dict(self.app.status_counts), "max_in_flight": self.app.max_in_flight}

    def start(self) -> "FakeOpenAIServer":
        """Start serving (again after :meth:`stop`: the same port, so clients see a restarted server)."""
        self._ready = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, name="fake-openai-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fake OpenAI server did not start within 10 s")
        if self._error is not None:
            raise RuntimeError(f"fake OpenAI server failed to start on {self.host}:{self.port}") from self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        app = self.app
        conns = self._conns

        def factory() -> HttpProtocol:
            proto = HttpProtocol(app.handle, app.on_start, app.on_done)
            conns.add(proto)
            return proto

        try:
            self._server = loop.run_until_complete(loop.create_server(factory, self.host, self.port, backlog=4096))
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as exc:  # noqa: BLE001 - handed to the starting thread, which re-raises it
            self._error = exc
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            self._server.close()
            loop.close()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            loop = self._loop

            def _shutdown() -> None:
                assert self._server is not None
                self._server.close()
                for proto in list(self._conns):
                    if proto.transport is not None:
                        proto.transport.abort()  # like a killed process: open connections are reset
                # let the close callbacks run (loop.stop() alone would skip them and leave the sockets open,
                # so clients with keep-alive connections would hang until their timeout)
                loop.call_later(0.02, loop.stop)

            loop.call_soon_threadsafe(_shutdown)
            self._thread.join(10)
        self._thread = None

    def restart(self) -> "FakeOpenAIServer":
        """Stop and start on the same port (counters and scripts stay)."""
        self.stop()
        return self.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> "FakeOpenAIServer":
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()


async def _serve_forever(args: argparse.Namespace) -> None:
    app = FakeOpenAIApp(latency_ms=args.latency_ms, model=args.model, seed=args.seed, replay=args.replay)
    if args.fault_rate > 0:
        app.faults(rate=args.fault_rate, kinds=args.fault_kinds.split(","), seed=args.seed)
    app.record_limit = 0
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpProtocol(app.handle, app.on_start, app.on_done),
                                      args.host, args.port, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(f"READY {port}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """``python -m fabrika.testing.fake_server``: run the fake server in the foreground."""
    p = argparse.ArgumentParser(description="fabrika's fake OpenAI-compatible server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed as 'READY <port>')")
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--model", default="fake")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fault-rate", type=float, default=0.0)
    p.add_argument("--fault-kinds", default="rate_limit,server")
    p.add_argument("--replay", action="store_true", help="record answers until POST /v1/replay, then replay them")
    args = p.parse_args(argv)
    try:
        asyncio.run(_serve_forever(args))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
