"""Stage classes with right and wrong ``calls_llm`` declarations (never registered), for test_calls_llm.py."""

from __future__ import annotations

from typing import ClassVar

from fabrika.generators.generic import CompleteStage
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, ok
from fabrika.textutil.answers import extract_json

from . import llm_use_helpers  # relative, as a plugin may import its helpers


async def ask(ctx, text: str) -> str:
    (resp,) = await ctx.llm.complete([ChatRequest(messages=({"role": "user", "content": text},))])
    return resp.text


class Judge:
    def __init__(self, stage: Stage) -> None:
        self.stage = stage

    async def verdict(self, text: str) -> str:
        return (await self.stage.ctx.llm.complete_one(ChatRequest(messages=({"role": "user", "content": text},)))).text


class DirectLiar(Stage):
    kind = "t.direct_liar"
    calls_llm: ClassVar[bool] = False

    async def process(self, row: Row) -> list[Row]:
        resp = await self.ctx.llm.complete_one(ChatRequest(messages=({"role": "user", "content": row["q"]},)))
        return [ok(row["id"], answer=resp.text)]


class HelperFunctionLiar(Stage):
    kind = "t.helper_function_liar"
    calls_llm: ClassVar[bool] = False

    async def process(self, row: Row) -> list[Row]:
        return [ok(row["id"], answer=await ask(self.ctx, row["q"]))]


class HelperClassLiar(Stage):
    kind = "t.helper_class_liar"
    calls_llm: ClassVar[bool] = False

    async def setup(self) -> None:
        self.judge = Judge(self)

    async def process(self, row: Row) -> list[Row]:
        return [ok(row["id"], verdict=await self.judge.verdict(row["q"]))]


class OtherModuleLiar(Stage):
    kind = "t.other_module_liar"
    calls_llm: ClassVar[bool] = False

    async def process(self, row: Row) -> list[Row]:
        return [ok(row["id"], answer=await llm_use_helpers.rephrase(self.ctx, row["q"]))]


class GetattrLiar(Stage):
    kind = "t.getattr_liar"
    calls_llm: ClassVar[bool] = False

    async def process(self, row: Row) -> list[Row]:
        client = getattr(self.ctx, "llm")  # noqa: B009 - the form under test
        return [ok(row["id"], answer=(await client.complete([]))[0].text)]


class InheritedLiar(CompleteStage):
    kind = "t.inherited_liar"
    calls_llm: ClassVar[bool] = False  # LLMStage.process calls the LLM


class CpuOnlyButDefault(Stage):
    """Never touches the LLM but keeps the default ``calls_llm = True``: it would silently stay in the driver."""

    kind = "t.cpu_default"

    async def process(self, row: Row) -> list[Row]:
        return [ok(row["id"], parsed=str(extract_json(row["q"])))]


class CpuOnlyDeclared(Stage):
    kind = "t.cpu_declared"
    calls_llm: ClassVar[bool] = False

    async def process(self, row: Row) -> list[Row]:
        return [ok(row["id"], n=llm_use_helpers.word_count(row["q"]), parsed=str(extract_json(row["q"])))]
