"""One interface for whatever executes generated tool calls for ``fc.live_calls``.

Two implementations: :class:`~fabrika.generators.fc.tool_sources.McpSession` (the user's MCP
server over stdio) and :class:`~fabrika.generators.fc.live_openapi.OpenApiExecutor` (each call as
the HTTP request its OpenAPI operation defines, against a mock built from the spec or a given base
URL). Both follow the failure taxonomy (``fabrika/pipeline/taxonomy.py``) the same way:

* :meth:`CallExecutor.call` returns a :class:`CallVerdict` when the server *said something about
  the call* — accepted, or refused with its reason (a JSON-RPC error / ``isError``; a 4xx);
* it raises :class:`~fabrika.errors.TransientError` when nothing was learned (the server died,
  timed out, answered 5xx): the item stays pending and is retried;
* :meth:`CallExecutor.start` raises :class:`~fabrika.errors.InputError` naming the problem when
  the server cannot be started or reached; the stage turns it into a config stop (exit 2).
"""

from __future__ import annotations

from typing import Any, Protocol

from fabrika.generators.fc.tool_sources import CallVerdict

__all__ = ["CallExecutor", "CallVerdict"]


class CallExecutor(Protocol):
    """Executes tool calls one at a time and reports the server's verdict on each."""

    @property
    def label(self) -> str:
        """What is being called, for messages (``python -m my_server``, ``http://127.0.0.1:8080``)."""
        ...

    async def start(self) -> "CallExecutor":
        """Start or reach the server; :class:`~fabrika.errors.InputError` when that is impossible."""
        ...

    async def call(self, name: str, arguments: dict[str, Any]) -> CallVerdict:
        """The server's verdict on one call; :class:`~fabrika.errors.TransientError` when it gave none."""
        ...

    async def close(self) -> None:
        """Stop what :meth:`start` started (idempotent)."""
        ...
