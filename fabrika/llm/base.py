"""The one interface the rest of fabrika uses to reach a model."""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from fabrika.llm.types import ChatRequest, ChatResponse


@runtime_checkable
class Backend(Protocol):
    """A transport to one kind of model server.

    ``send`` performs exactly one attempt and raises :class:`fabrika.errors.LLMError`
    (with its ``kind``) on failure; retries, cache and accounting belong to the engine.
    """

    name: str

    async def send(self, request: ChatRequest) -> ChatResponse: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class LLMClient(Protocol):
    """What generators, agents and scorers call.

    ``complete`` never raises for a single failed request: the failure comes back
    as a response with ``error`` set, in the same position as its request.
    """

    async def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]: ...

    async def complete_one(self, request: ChatRequest) -> ChatResponse: ...
