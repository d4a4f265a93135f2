"""``fc.live_calls``: execute each sample's target calls on the user's own MCP server, and gate on the verdicts.

Tools imported from a server (``fc.tools_import``) are described by their schemas, but a
schema-valid call can still be one the server refuses: a city it does not know, a date in
the past, an id that does not exist. Such a call is a bad training target. This scorer
starts the server once (stdio, the MCP SDK), executes the calls of every sample's
completion (``history: true`` also those of its prompt) in one session, with renamed tools
put back through the run's ``tool_names.json``, and writes

``live_calls``
    calls executed (null: the sample has none, the score does not apply);
``live_rejected``
    calls the server refused: a JSON-RPC error (unknown tool, invalid params) or a result
    with ``isError``;
``live_errors``
    ``"name: what the server said"`` per refused call (JSON list), for the report.

The ``live_calls`` gate group (``filters.live_calls.max_rejected``, default 0) drops the
samples with more refused calls; samples without calls are kept (``keep_null``).

The calls really run: point ``command`` at a test instance, never at production. A server
that dies or does not answer within ``timeout_s`` leaves the item pending (an
infrastructure fault, retried); one that cannot be started stops the stage (exit 2, the
command named). Calls are made one at a time, so a stateful server's verdicts follow the
order in which items run.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, ClassVar

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from fabrika.errors import InputError, StageConfigError
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.generators.fc.tool_sources import CallVerdict, McpSession
from fabrika.generators.fc.tools_import import restore_call_names, run_name_mappings
from fabrika.pipeline.columns import Column, Contract
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage
from fabrika.schemas.messages import Message
from fabrika.schemas.tools import ToolCall

_NO_SCORE: dict[str, Any] = {"live_calls": None, "live_rejected": None, "live_errors": None}


class LiveCallsConfig(StageConfig):
    """Config of ``fc.live_calls`` (input: ``fc.samples`` or another table of FC samples)."""

    command: list[str] = Field(min_length=1, description="The MCP server to run over stdio, e.g. "
                               "[python, -m, my_server]. Its tools really run: use a test instance.")
    env: dict[str, str] | None = Field(default=None, description="Environment of the server process (None: "
                                       "the SDK's default, a minimal safe environment).")
    cwd: Path | None = Field(default=None, description="Working directory of the server (relative to the config).")
    timeout_s: float = Field(default=30.0, gt=0, description="Seconds for the server to start and for each call; "
                             "past it the item stays pending and is retried.")
    history: bool = Field(default=False, description="Also execute the calls in each sample's prompt (the dialogue "
                          "so far), not only the trained completion's.")


def sample_calls(row: Row, history: bool = False) -> list[ToolCall]:
    """The tool calls of a sample row's completion (and prompt, with ``history``), in order."""
    fields = ("prompt", "completion") if history else ("completion",)
    calls: list[ToolCall] = []
    for name in fields:
        for raw in _messages(row.get(name)):
            msg = raw if isinstance(raw, Message) else Message.model_validate(raw)
            calls.extend(msg.tool_calls or [])
    return calls


def _messages(value: Any) -> list[Any]:
    if isinstance(value, str):
        value = json.loads(value)
    return list(value or [])


@register_stage
class LiveCallsStage(Stage[LiveCallsConfig]):
    """Annotating stage: per sample, how many of its calls the user's live MCP server refused."""

    kind = "fc.live_calls"
    annotates: ClassVar[bool] = True
    calls_llm: ClassVar[bool] = False
    #: renders no prompt (the tool-name mapping it imports sits beside the import prompts)
    prompt_templates: ClassVar[tuple[Any, ...]] = ()
    reads = (Column("completion", list[Message]),)
    writes = (Column("live_calls", int, required=False), Column("live_rejected", int, required=False),
              Column("live_errors", list[str], required=False))

    @classmethod
    def contract(cls, config: LiveCallsConfig) -> Contract:
        reads = (Column("prompt", list[Message]), *cls.reads) if config.history else cls.reads
        return Contract(reads=reads, writes=cls.writes)

    async def setup(self) -> None:
        cfg = self.config
        cwd = self.ctx.pipeline.resolve_path(cfg.cwd) if cfg.cwd is not None else None
        try:
            self.session = await McpSession(cfg.command, env=cfg.env, cwd=cwd, timeout_s=cfg.timeout_s).start()
        except InputError as exc:
            raise StageConfigError(str(exc), fix=f"check stages.{self.name}.command (it must start an MCP server "
                                   "over stdio) and that the mcp SDK is installed") from exc
        self.mapping = run_name_mappings(self.ctx.run_dir)
        self.lock = asyncio.Lock()

    async def teardown(self) -> None:
        session = getattr(self, "session", None)
        if session is not None:
            await session.close()

    async def process(self, row: Row) -> list[Row]:
        calls = restore_call_names(sample_calls(row, self.config.history), self.mapping)
        if not calls:
            return [ok(self.item_id(row), **_NO_SCORE)]
        verdicts: list[CallVerdict] = []
        async with self.lock:  # one call at a time: the server's state follows one order
            for call in calls:
                verdicts.append(await self.session.call(call.name, dict(call.arguments)))
        refused = [v for v in verdicts if not v.ok]
        return [ok(self.item_id(row), live_calls=len(verdicts), live_rejected=len(refused),
                   live_errors=json.dumps([f"{v.name}: {v.detail}" for v in refused], ensure_ascii=False))]


class LiveCallsGate(BaseModel):
    """``filters.live_calls``: thresholds on what the live server said about a sample's calls."""

    model_config = ConfigDict(extra="forbid")

    max_rejected: int = Field(default=0, ge=0, description="Most calls of a sample the live server may refuse "
                              "(`live_rejected`); samples without calls are kept.")


def _live_calls(p: LiveCallsGate) -> list[GatePredicate]:
    return [GatePredicate("live_calls.max_rejected", pl.col("live_rejected") <= p.max_rejected, ("live_rejected",),
                          keep_null=True)]


register_gate_group("live_calls", LiveCallsGate, _live_calls)
