"""Test stages that render prompts from a catalogue, for the lineage tests (kinds ``lin.*``)."""

from __future__ import annotations

import random
from typing import Any, ClassVar, Iterator

from fabrika.llm.sim import register_sim_responder
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage
from fabrika.prompts import PromptCatalogue
from fabrika.schemas.ids import stable_id

CATALOGUE = PromptCatalogue.from_mapping("lin", {
    "ask": {"ru": "Ответь на вопрос номер {{ i }}.", "en": "Answer question number {{ i }}."},
    "tail": {"ru": "Перескажи: {{ answer }}", "en": "Retell: {{ answer }}"},
})


class SourceConfig(StageConfig):
    n: int = 6


@register_stage
class SourceStage(Stage[SourceConfig]):
    """``n`` numbered items, no LLM."""

    kind = "lin.source"
    calls_llm = False
    prompt_templates: ClassVar[tuple[Any, ...]] = ()

    def input_rows(self) -> Iterator[Row]:
        for i in range(self.config.n):
            yield {"id": stable_id("lin", i), "i": i}

    async def process(self, row: Row) -> list[Row]:
        return [ok(row["id"], i=row["i"])]


async def _ask(stage: Stage[Any], key: str, row: Row, **variables: Any) -> str:
    content = CATALOGUE.text(key, "ru", **variables)
    resp = await stage.ctx.llm.complete_one(ChatRequest(messages=({"role": "user", "content": content},),
                                                        tag=f"lin.{key}"))
    return str(resp.text)


@register_stage
class AskStage(Stage[StageConfig]):
    """One call per row with the ``ask`` prompt."""

    kind = "lin.ask"
    prompt_templates: ClassVar[tuple[Any, ...]] = (CATALOGUE.select("ask"),)

    async def process(self, row: Row) -> list[Row]:
        return [ok(stable_id(row["id"], "ask"), i=row["i"], answer=await _ask(self, "ask", row, i=row["i"]))]


@register_stage
class TailStage(Stage[StageConfig]):
    """One call per answer with the ``tail`` prompt (downstream of ``lin.ask``)."""

    kind = "lin.tail"
    prompt_templates: ClassVar[tuple[Any, ...]] = (CATALOGUE.select("tail"),)

    async def process(self, row: Row) -> list[Row]:
        return [ok(stable_id(row["id"], "tail"), i=row["i"],
                   retold=await _ask(self, "tail", row, answer=row["answer"]))]


def answer_v1(request: ChatRequest, rng: random.Random) -> str:
    return f"v1: {request.messages[-1]['content']}"


register_sim_responder("lin", answer_v1)
