"""``fc.live_calls``: execute each sample's target calls on the user's own server, and gate on the verdicts.

Imported tools (``fc.tools_import``) are described by their schemas, but a schema-valid call can
still be one the server refuses: a city it does not know, a date in the past, an id that does not
exist, a value the spec's own schema forbids. Such a call is a bad training target. This scorer
executes the calls of every sample's completion (``history: true`` also those of its prompt), with
renamed tools put back through the run's ``tool_names.json``, through one
:class:`~fabrika.generators.fc.call_executor.CallExecutor`:

* ``command``: the user's MCP server over stdio (the MCP SDK, one session);
* ``openapi: {mock: true}``: each call as the HTTP request its OpenAPI operation defines, against a
  loopback mock built from the spec that validates the request
  (:mod:`fabrika.generators.fc.openapi_mock`); ``openapi: {base_url: ...}``: the same requests
  against a real server (:mod:`fabrika.generators.fc.live_openapi`). The operations come from the
  ``operations.json`` the run's ``fc.tools_import`` wrote, or from ``openapi.spec``; calls to tools the
  import took from an MCP or OpenAI source (``null`` there) have no request and are not executed.

It writes

``live_calls``
    calls executed (null: the sample has none, the score does not apply);
``live_rejected``
    calls the server refused: a JSON-RPC error or ``isError`` (MCP), a 4xx answer (HTTP), or a
    call that cannot be put on the wire (no such tool or operation, a path parameter missing);
``live_errors``
    ``"name: what the server said"`` per refused call (JSON list), for the report.

The ``live_calls`` gate group (``filters.live_calls.max_rejected``, default 0) drops the
samples with more refused calls; samples without calls are kept (``keep_null``).

The calls really run: point ``command`` or ``base_url`` at a test instance, never at production. A
server that dies, answers 5xx or does not answer within ``timeout_s`` leaves the item pending (an
infrastructure fault, retried); one that cannot be started or reached, or a spec that cannot be
served, stops the stage (exit 2, naming the problem and the field to fix). Calls are made one at a
time, so a stateful server's verdicts follow the order in which items run.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any, ClassVar

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fabrika.errors import InputError, StageConfigError
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.generators.fc.call_executor import CallExecutor, CallVerdict
from fabrika.generators.fc.tool_sources import McpSession, Operation, candidates_from, detect_format, load_document
from fabrika.generators.fc.tools_import import restore_call_names, run_name_mappings, run_operations
from fabrika.inputs import resolve_data_path
from fabrika.pipeline.columns import Column, Contract
from fabrika.pipeline.preflight import InputFile
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage
from fabrika.schemas.messages import Message
from fabrika.schemas.tools import ToolCall
from fabrika.store import atomic_write_json

#: Beside the stage's shards: what openapi-spec-validator found wrong with each mocked spec (served anyway).
SPEC_PROBLEMS_FILE = "openapi_spec_problems.json"
_NO_SCORE: dict[str, Any] = {"live_calls": None, "live_rejected": None, "live_errors": None}


class LiveOpenApiConfig(BaseModel):
    """``openapi`` of ``fc.live_calls``: execute calls as the HTTP requests of their OpenAPI operations."""

    model_config = ConfigDict(extra="forbid")

    mock: bool = Field(default=False, description="Serve each spec from a loopback mock that validates every "
                       "request against the spec (openapi-core) and answers with the spec's examples.")
    base_url: str | None = Field(default=None, description="A real server to send the requests to instead "
                                 "(http://host:port/prefix, the spec's paths appended); use a test instance.")
    spec: Path | None = Field(default=None, description="OpenAPI document whose operations the calls name "
                              "(relative to the config); default: the operations the run's fc.tools_import recorded.")
    headers: dict[str, str] = Field(default_factory=dict, description="Headers sent with every request "
                                    "(e.g. Authorization for base_url; the mock checks no credentials).")

    @model_validator(mode="after")
    def _one_target(self) -> "LiveOpenApiConfig":
        if self.mock == (self.base_url is not None):
            raise ValueError("give exactly one of 'mock: true' (a mock built from the spec) or 'base_url' "
                             "(a real server)")
        if self.base_url is not None and not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        return self


class LiveCallsConfig(StageConfig):
    """Config of ``fc.live_calls`` (input: ``fc.samples`` or another table of FC samples)."""

    command: list[str] | None = Field(default=None, min_length=1, description="The MCP server to run over stdio, "
                                      "e.g. [python, -m, my_server]. Its tools really run: use a test instance.")
    openapi: LiveOpenApiConfig | None = Field(default=None, description="Execute the calls as HTTP requests of "
                                              "the tools' OpenAPI operations (mock: true, or base_url) instead "
                                              "of on an MCP server.")
    env: dict[str, str] | None = Field(default=None, description="Environment of the server process (None: "
                                       "the SDK's default, a minimal safe environment).")
    cwd: Path | None = Field(default=None, description="Working directory of the server (relative to the config).")
    timeout_s: float = Field(default=30.0, gt=0, description="Seconds for the server to start and for each call; "
                             "past it the item stays pending and is retried.")
    history: bool = Field(default=False, description="Also execute the calls in each sample's prompt (the dialogue "
                          "so far), not only the trained completion's.")

    @model_validator(mode="after")
    def _one_server(self) -> "LiveCallsConfig":
        if (self.command is None) == (self.openapi is None):
            raise ValueError("give exactly one of 'command' (an MCP server) or 'openapi' (mock: true or base_url)")
        return self


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
    #: ``openapi.spec`` (an MCP ``command`` is a program, not a file; without a spec the operations come from
    #: the run's ``fc.tools_import``, whose sources are its own input files)
    input_files = (InputFile("openapi.spec", "OpenAPI document", format="document",
                             fix="point openapi.spec at an OpenAPI 3.0/3.1 JSON/YAML file"),)
    #: renders no prompt (the tool-name mapping it imports sits beside the import prompts)
    prompt_templates: ClassVar[tuple[Any, ...]] = ()
    reads = (Column("completion", list[Message]),)
    writes = (Column("live_calls", int, required=False), Column("live_rejected", int, required=False),
              Column("live_errors", list[str], required=False))

    @classmethod
    def contract(cls, config: LiveCallsConfig) -> Contract:
        reads = (Column("prompt", list[Message]), *cls.reads) if config.history else cls.reads
        return Contract(reads=reads, writes=cls.writes)

    @classmethod
    def check_config(cls, config: LiveCallsConfig, pipeline: Any) -> list[tuple[str, str]]:
        """Before any LLM call: the mock's library is installed and there are OpenAPI operations to call."""
        o = config.openapi
        if o is None:
            return []
        issues: list[tuple[str, str]] = []
        if o.mock and importlib.util.find_spec("openapi_core") is None:
            issues.append(("openapi.mock", "the OpenAPI mock needs openapi-core: pip install 'fabrika[openapi]'"))
        resolve = getattr(pipeline, "resolve_path", None)
        if o.spec is not None:
            path = resolve(o.spec) if resolve is not None else Path(o.spec)
            if path.is_file() and not _is_openapi(path):
                issues.append(("openapi.spec", f"{path} is not an OpenAPI 3.0/3.1 document"))
            return issues
        stages = getattr(pipeline, "stages", None)
        if stages is None:  # validated without a whole pipeline: nothing to look at
            return issues
        sources = [resolve_data_path(src.path, resolve) for st in stages if st.kind == "fc.tools_import"
                   for src in getattr(st, "sources", []) if src.path is not None]
        if not any(_is_openapi(path) for path in sources):
            issues.append(("openapi", "no fc.tools_import stage of this pipeline reads an OpenAPI document, so no "
                           "operation will be recorded to call; import the tools from an OpenAPI spec or set "
                           "openapi.spec"))
        return issues

    async def setup(self) -> None:
        self.mapping = run_name_mappings(self.ctx.run_dir)
        self.not_http: set[str] = set()
        self.lock = asyncio.Lock()
        self.executor: CallExecutor = self._executor()
        try:
            await self.executor.start()
        except InputError as exc:
            raise StageConfigError(str(exc), fix=self._start_fix()) from exc
        problems = {spec: m.spec_problems for spec, m in getattr(self.executor, "mocks", {}).items() if m.spec_problems}
        if problems:  # served all the same; the report and the user can see why a spec validator would not
            atomic_write_json(self.ctx.stage_dir(self.name) / SPEC_PROBLEMS_FILE, problems)

    def _executor(self) -> CallExecutor:
        cfg = self.config
        if cfg.openapi is None:
            cwd = self.ctx.pipeline.resolve_path(cfg.cwd) if cfg.cwd is not None else None
            return McpSession(cfg.command or [], env=cfg.env, cwd=cwd, timeout_s=cfg.timeout_s)
        from fabrika.generators.fc.live_openapi import MockedOpenApi, OpenApiExecutor

        ops = self._operations(cfg.openapi)
        if cfg.openapi.mock:
            return MockedOpenApi(ops, headers=cfg.openapi.headers, timeout_s=cfg.timeout_s)
        return OpenApiExecutor(ops, cfg.openapi.base_url or "", headers=cfg.openapi.headers, timeout_s=cfg.timeout_s)

    def _operations(self, cfg: LiveOpenApiConfig) -> dict[str, Operation]:
        where = f"stages.{self.name}.openapi"
        if cfg.spec is not None:
            path = self.ctx.pipeline.resolve_path(cfg.spec)
            try:
                cands = candidates_from(load_document(path), "openapi", path.stem, base_dir=path.parent,
                                        uri=path.resolve().as_uri())
            except InputError as exc:
                raise StageConfigError(f"{where}.spec: the OpenAPI document cannot be served: {exc}",
                                       fix=f"point {where}.spec at an OpenAPI 3.0/3.1 file") from exc
            raw: dict[str, dict[str, Any] | None] = {c.name: c.operation for c in cands if c.name and c.operation}
        else:
            raw = run_operations(self.ctx.run_dir)
        self.not_http = {name for name, op in raw.items() if op is None}  # imported from MCP/OpenAI sources
        if not any(raw.values()):
            raise StageConfigError(f"{where}: no OpenAPI operations to call (this run's fc.tools_import recorded "
                                   "none: its sources are not OpenAPI documents)",
                                   fix=f"import the tools from an OpenAPI spec in this run, or set {where}.spec")
        return {name: Operation.from_dict(op) for name, op in raw.items() if op is not None}

    def _start_fix(self) -> str:
        cfg, name = self.config, self.name
        if cfg.openapi is None:
            return (f"check stages.{name}.command (it must start an MCP server over stdio) and that the mcp SDK "
                    "is installed")
        if cfg.openapi.mock:
            return (f"fix or re-import the OpenAPI document (stages.{name}.openapi.spec or the import's sources), "
                    "and install the openapi extra (pip install 'fabrika[openapi]')")
        return f"start the server or correct stages.{name}.openapi.base_url"

    async def teardown(self) -> None:
        executor = getattr(self, "executor", None)
        if executor is not None:
            await executor.close()

    async def process(self, row: Row) -> list[Row]:
        calls = restore_call_names(sample_calls(row, self.config.history), self.mapping)
        calls = [c for c in calls if c.name not in self.not_http]  # tools of an MCP/OpenAI source: no request
        if not calls:
            return [ok(self.item_id(row), **_NO_SCORE)]
        verdicts: list[CallVerdict] = []
        async with self.lock:  # one call at a time: the server's state follows one order
            for call in calls:
                verdicts.append(await self.executor.call(call.name, dict(call.arguments)))
        refused = [v for v in verdicts if not v.ok]
        return [ok(self.item_id(row), live_calls=len(verdicts), live_rejected=len(refused),
                   live_errors=json.dumps([f"{v.name}: {v.detail}" for v in refused], ensure_ascii=False))]


def _is_openapi(path: Path) -> bool:
    try:
        return path.is_file() and detect_format(load_document(path)) == "openapi"
    except InputError:
        return False


class LiveCallsGate(BaseModel):
    """``filters.live_calls``: thresholds on what the live server said about a sample's calls."""

    model_config = ConfigDict(extra="forbid")

    max_rejected: int = Field(default=0, ge=0, description="Most calls of a sample the live server may refuse "
                              "(`live_rejected`); samples without calls are kept.")


def _live_calls(p: LiveCallsGate) -> list[GatePredicate]:
    return [GatePredicate("live_calls.max_rejected", pl.col("live_rejected") <= p.max_rejected, ("live_rejected",),
                          keep_null=True)]


register_gate_group("live_calls", LiveCallsGate, _live_calls)
