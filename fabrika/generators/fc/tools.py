"""``fc.tools`` (per topic, the LLM writes N tools) and ``fc.tools_dedup`` (global).

Every tool is untrusted LLM output: it must parse, have a snake_case name unique
in its topic, a valid parameters schema (``check_parameters_schema``: meta-schema,
required ⊆ properties, enums and defaults match their types), four non-empty
description tiers of increasing length, and descriptions in the topic's
language. Each failure is a rejected row with its reason.

Dedup choice: near-identical tools across topics (same name and same parameter
signature — names, types, required) are resolved by the separate global stage
``fc.tools_dedup``, which keeps the tool with the smallest id of each signature
(order-independent, so reruns agree) and rejects the rest as ``duplicate_of``.
It holds one dict entry per signature, not the tools themselves.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, AsyncIterator, ClassVar, Iterator

from pydantic import Field

import fabrika.generators.fc.columns as cols
from fabrika.agents.prompts import CATALOGUE, prompt_text
from fabrika.errors import InputError
from fabrika.generators.fc.common import parse_tool, response_error, signature
from fabrika.generators.fc.structured import response_format
from fabrika.inputs import iter_records, resolve_data_path, where
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, StageConfig, carry, ok, register_stage, rejected
from fabrika.schemas.ids import stable_id
from fabrika.textutil.answers import extract_json, is_failure

TOOL_COLUMNS = ("topic_id", "topic", "lang", "name", "signature", "spec")


def _tool_row(status_row: Row, **cols: Any) -> Row:
    return {**status_row, **{c: cols.get(c) for c in TOOL_COLUMNS}}


class ToolsConfig(StageConfig):
    """Config of ``fc.tools``."""

    tools_per_topic: int = Field(default=4, ge=1, le=20, description="How many tools the LLM writes per topic.")
    temperature: float = Field(default=0.8, ge=0, le=2, description="Sampling temperature of the tool writer.")
    max_tokens: int = Field(default=4096, ge=256, description="Completion budget of one tool-writing request.")
    topics_file: str | None = Field(
        default=None, description="jsonl of topic rows (id, topic, description, keywords, lang) used when `input` "
        "is not set; 'package://fc/topics_demo.jsonl' points into fabrika/data; relative paths resolve against "
        "the config file.")


@register_stage
class ToolsStage(Stage[ToolsConfig]):
    """Topic row (``id``, ``topic``, ``description``, ``keywords``, ``lang``) → tool rows."""

    kind = "fc.tools"
    prompt_templates: ClassVar[tuple[Any, ...]] = (CATALOGUE.select("tools"),)
    reads = cols.TOPIC_READS
    writes = cols.TOOL
    input_files = (cols.TOPICS_FILE,)

    @classmethod
    def check_config(cls, config: ToolsConfig, pipeline: Any) -> list[tuple[str, str]]:
        if config.input is not None or config.topics_file is None:
            return []
        path = resolve_data_path(config.topics_file, getattr(pipeline, "resolve_path", None))
        return [] if path.is_file() else [("topics_file", f"topics file not found: {path}")]

    def input_rows(self) -> Iterator[Row]:
        cfg = self.config
        if cfg.input is not None or cfg.topics_file is None:
            yield from super().input_rows()
            return
        path = resolve_data_path(cfg.topics_file, getattr(self.ctx.pipeline, "resolve_path", None))
        for n, row in iter_records(path, what="fc.tools.topics_file", hint="give a jsonl of topic rows"):
            if not row.get("topic"):
                raise InputError(f"{where(path, n)}: each topic row needs a 'topic'")
            row.setdefault("id", stable_id(row["topic"], row.get("lang", "ru"), prefix="topic-"))
            yield row

    def build_request(self, row: Row) -> ChatRequest:
        cfg = self.config
        view = cols.TopicRow.of(row)
        lang = view.lang or "ru"
        topic = {"topic": view.topic, "description": view.description or "", "keywords": view.keywords,
                 "lang": lang}
        content = prompt_text("tools", lang).format(n=cfg.tools_per_topic,
                                                    topic=json.dumps(topic, ensure_ascii=False, indent=1))
        return ChatRequest(messages=({"role": "user", "content": content},), temperature=cfg.temperature,
                           max_tokens=cfg.max_tokens, tag="fc.tools", response_format=response_format("fc_tools"))

    def parse(self, row: Row, text: str, reasoning: str | None = None) -> list[Row]:
        view = cols.TopicRow.of(row)
        topic_id, lang, topic = view.id, view.lang or "ru", view.topic
        data = extract_json(text, expect=dict, reasoning_content=reasoning)
        if is_failure(data):
            return [_tool_row(rejected(stable_id(topic_id, prefix="toolset-"), str(data)),
                              topic_id=topic_id, topic=topic, lang=lang)]
        raw_tools = data.get("tools")
        if not isinstance(raw_tools, list) or not raw_tools:
            return [_tool_row(rejected(stable_id(topic_id, prefix="toolset-"), "invalid_json: no 'tools' list"),
                              topic_id=topic_id, topic=topic, lang=lang)]
        out: list[Row] = []
        seen: set[str] = set()
        for i, raw in enumerate(raw_tools):
            spec, reason = parse_tool(raw, topic_id=topic_id, lang=lang)
            if spec is not None and spec.name in seen:
                reason = f"duplicate_name: {spec.name} appears twice in the topic"
                spec = None
            if spec is None:
                name = raw.get("name") if isinstance(raw, dict) else None
                out.append(_tool_row(rejected(stable_id(topic_id, i, prefix="tool-bad-"), str(reason)),
                                     topic_id=topic_id, topic=topic, lang=lang,
                                     name=name if isinstance(name, str) else None))
                continue
            seen.add(spec.name)
            out.append(_tool_row(ok(spec.id), topic_id=topic_id, topic=topic, lang=lang, name=spec.name,
                                 signature=signature(spec.tool), spec=spec.model_dump_json()))
        return out

    async def process(self, row: Row) -> list[Row]:
        request = self.build_request(row)
        resp = await self.ctx.llm.complete_one(request)
        err = response_error(resp)
        if err and err.startswith("truncated"):  # one more sample before giving up (truncation is a dice roll)
            resp = await self.ctx.llm.complete_one(dataclasses.replace(request, sample_index=1))
            err = response_error(resp)
        if err:
            view = cols.TopicRow.of(row)
            return [_tool_row(rejected(stable_id(view.id, prefix="toolset-"), err),
                              topic_id=view.id, topic=view.topic, lang=view.lang)]
        return self.parse(row, resp.text or "", resp.choices[0].reasoning)


class ToolsDedupConfig(StageConfig):
    """Config of ``fc.tools_dedup`` (no knobs: the signature is name + parameter names/types + required)."""


@register_stage
class ToolsDedupStage(Stage[ToolsDedupConfig]):
    """Keep one tool per signature (smallest id wins); reject the others as ``duplicate_of``."""

    kind = "fc.tools_dedup"
    prompt_templates: ClassVar[tuple[Any, ...]] = ()  # renders no prompt
    reads = cols.TOOL_READS
    writes = cols.TOOL
    global_stage: ClassVar[bool] = True

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:
        keeper: dict[str, str] = {}
        for row in rows:  # pass 1: one entry per signature
            tool = cols.ToolSignatureRow.of(row)
            if tool.signature and (tool.signature not in keeper or tool.id < keeper[tool.signature]):
                keeper[tool.signature] = tool.id
        chunk: list[Row] = []
        for row in self.input_rows():  # pass 2: stream the verdicts
            base = carry(row, TOOL_COLUMNS)
            tool = cols.ToolSignatureRow.of(row)
            winner = keeper.get(tool.signature or "")
            if winner is None or winner == tool.id:
                chunk.append(ok(tool.id, **base))
            else:
                chunk.append(rejected(tool.id, f"duplicate_of: {winner}", **base))
            if len(chunk) >= self.config.chunk_size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk
