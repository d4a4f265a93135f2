"""The contract of a stage that asks the LLM once per item: ``requests`` and ``parse``.

A subclass builds the item's requests from its row and turns the answers into
rows; :class:`LLMStage` does everything in between, the same way for every stage:

* sends the requests in one ``ctx.llm.complete`` call (the engine batches,
  retries, caches and counts; an outage leaves the item pending, see
  :mod:`fabrika.pipeline.llm_wrap`);
* gives requests the ``response_format`` of the pydantic model the stage parses
  into (:attr:`LLMStage.answer_model`), so the server's constraint and the parser
  cannot disagree; the answer is still untrusted and ``parse`` still validates it;
* rejects an item whose answer failed, came back empty or was cut off, with the
  one wording every stage uses (:func:`answer_problem`) — unless the stage
  handles the answers one by one (:attr:`LLMStage.per_answer`, K samples of
  which one may fail) and asks :meth:`LLMStage.answer_problem` itself.

Stages that talk to the LLM over several dependent rounds (``fc.dialogues``,
``fc.plans``) keep :meth:`Stage.process`; they word their rejections with the
same :func:`~fabrika.llm.rejections.answer_problem` /
:func:`~fabrika.llm.rejections.llm_error_reason` (in ``llm`` so that layers below the
pipeline, such as ``rewards``, word them alike).
"""

from __future__ import annotations

import abc
import dataclasses
from functools import cache
from typing import Any, ClassVar, Sequence

from pydantic import BaseModel

from fabrika.llm.rejections import NO_CHOICES, TRUNCATED, answer_problem, llm_error_reason
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.stage import ConfigT, Row, Stage, rejected


@cache
def structured_format(model: type[BaseModel], name: str) -> dict[str, Any]:
    """The OpenAI ``response_format`` (``json_schema``) of answers parsed into ``model``."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": model.model_json_schema()}}


class LLMStage(Stage[ConfigT]):
    """A per-item stage that makes its requests from a row and its rows from the answers.

    Subclasses implement :meth:`requests` and :meth:`parse`; see the module docs for what
    the base class does between them. ``parse`` must not raise on bad answers: a reason
    it finds becomes a :func:`fabrika.pipeline.stage.rejected` row.
    """

    #: The pydantic model answers are parsed into: requests without a ``response_format`` get its JSON schema.
    answer_model: ClassVar[type[BaseModel] | None] = None
    #: Name of that schema in ``response_format`` (it is part of the cache key); default the kind, dots → ``_``.
    answer_schema_name: ClassVar[str | None] = None
    #: True: ``parse`` sees every answer, failed ones included, and rejects each itself (K independent samples).
    per_answer: ClassVar[bool] = False
    #: True: a cut-off answer reaches ``parse`` (which may keep what is complete in it).
    allow_truncated: ClassVar[bool] = False

    @abc.abstractmethod
    def requests(self, row: Row) -> list[ChatRequest]:
        """The item's requests (usually one; K for repeated samples). An empty list skips the call."""

    @abc.abstractmethod
    def parse(self, row: Row, responses: list[ChatResponse]) -> list[Row]:
        """Rows made of the answers, in request order: ``ok`` rows, or rejections with their reason."""

    def output_id(self, row: Row) -> str:
        """Id of the rejection row when an answer is unusable; default the input row's id (right for scorers)."""
        return str(row["id"])

    def rejection_columns(self, row: Row) -> dict[str, Any]:
        """Extra columns of that rejection row (scorers give their score columns as ``None``)."""
        return {}

    def answer_problem(self, response: ChatResponse) -> str | None:
        """The standard reason why ``response`` is unusable for this stage, else ``None``."""
        return answer_problem(response, allow_truncated=self.allow_truncated)

    def answer_format(self) -> dict[str, Any] | None:
        """The ``response_format`` given to requests that have none; default built from :attr:`answer_model`."""
        model = type(self).answer_model
        if model is None:
            return None
        return structured_format(model, type(self).answer_schema_name or self.kind.replace(".", "_"))

    def _structured(self, request: ChatRequest) -> ChatRequest:
        if request.response_format is not None:
            return request
        fmt = self.answer_format()
        return request if fmt is None else dataclasses.replace(request, response_format=fmt)

    async def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        """Send ``requests`` (with the stage's ``response_format``) in one engine call."""
        if not requests:
            return []
        return await self.ctx.llm.complete([self._structured(r) for r in requests])

    async def process(self, row: Row) -> list[Row]:
        responses = await self.complete(self.requests(row))
        if not self.per_answer:
            for response in responses:
                problem = self.answer_problem(response)
                if problem is not None:
                    return [rejected(self.output_id(row), problem, **self.rejection_columns(row))]
        return self.parse(row, responses)


__all__ = ["LLMStage", "NO_CHOICES", "TRUNCATED", "answer_problem", "llm_error_reason", "structured_format"]
