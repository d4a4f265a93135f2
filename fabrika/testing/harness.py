"""A stage-test harness: a scripted model behind the real engine, and a real-enough stage context.

Like httpx's ``MockTransport``, :class:`ScriptedLLM` replaces only the wire. It is a
:class:`fabrika.llm.base.Backend` whose answers come from a ``handler(request)``; the
requests go through the real :class:`fabrika.llm.engine.LLMEngine`, so defaults, the
cache, retries, ``n > 1`` grouping, truncation (``finish_reason: length``), unfinished
answers and error classification are the production code paths::

    from fabrika.testing import ScriptedLLM, llm_error, run_stage, stage_context

    def handler(request):
        if request.tag == "fc.planner":
            return '```json\\n{"steps": []}\\n```'             # text, as a model wraps it
        if "длинный" in request.messages[-1]["content"]:
            return {"content": "обрыв", "finish_reason": "length"}
        return llm_error("rate_limit")                       # retried, then the item stays pending

    llm = ScriptedLLM(handler)
    async with stage_context(llm=llm, rows={"upstream": rows}) as ctx:
        result = await run_stage(MyStage, MyConfig(input="upstream"), ctx)
    assert result.reasons() == {"invalid_json": 1} and result.pending == [...]
    assert "Планировщик" in llm.tagged("fc.planner")[0].messages[0]["content"]

What a handler may return (or raise, for errors):

* ``str`` — the content of one choice, ``finish_reason="stop"``;
* ``dict`` — ``content``, ``tool_calls`` (``[{"name", "arguments": dict | str, "id"?}]``),
  ``finish_reason`` (default ``"tool_calls"`` with calls, else ``"stop"``), ``reasoning``,
  ``usage`` (``{"prompt_tokens", "completion_tokens"}``), ``model``;
* a :class:`~fabrika.llm.types.Choice` or a :class:`~fabrika.llm.types.ChatResponse`;
* a list of the above — several choices in one answer (a server that answers the wrong
  number of choices for ``n`` is a retried ``server`` error, as with a real one);
* an :class:`~fabrika.errors.LLMError` (returned or raised; :func:`llm_error` builds one with
  the status code and message a real server sends) — the engine retries the retryable kinds
  and the runner's rules decide pending (outage) vs rejected (``bad_request``,
  ``context_length``).

The handler sees single-sample requests: an ``n=K`` request (the engine groups samples when
``supports_n=True``; a stage may ask for ``n`` itself) calls it once per sample with ``n=1`` and that
sample's ``sample_index`` (``split_samples=False``: once, with the ``n=K`` request); :attr:`ScriptedLLM.requests`
records what actually reached the backend (the ``n=K`` request). Any other exception from the
handler is a bug in the test: it is recorded in :attr:`ScriptedLLM.handler_errors` and re-raised by
:meth:`ScriptedLLM.complete` and by :func:`run_stage`, instead of hiding as a failed request.

:func:`stage_context` builds a :class:`HarnessContext` (the runner's
:class:`~fabrika.pipeline.context.StageContext`: rows per upstream stage, gated by status and the
pipeline's gate thresholds — or, with ``stored=True`` / ``annotators=``, written to a real run store and
read back with the scorers' columns joined —, the runner's per-item RNG, ``resource``, ``report``,
``stage_dir``) and
:func:`run_stage` runs one stage over it with the runner's item execution
(:func:`fabrika.pipeline.executors.process_item`): ``no_output``, stage failures, pending items,
``input_id``/``llm_backend`` columns, resume by item id and ``max_items``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence

from fabrika.errors import LLMError, LLMErrorKind
from fabrika.llm.types import ChatRequest, ChatResponse, Choice, Usage
from fabrika.pipeline.context import SharedContextParts

if TYPE_CHECKING:
    from fabrika.pipeline.stage import Stage, StageConfig

__all__ = [
    "HarnessContext",
    "ScriptedLLM",
    "StageInternalError",
    "StageRun",
    "UnscriptedRequest",
    "by_tag",
    "llm_error",
    "run_stage",
    "sequence",
    "stage_context",
]

Answer = str | Mapping[str, Any] | Choice | ChatResponse | LLMError | Sequence[Any]
Handler = Callable[[ChatRequest], Answer | Awaitable[Answer]]
Row = dict[str, Any]


class UnscriptedRequest(AssertionError):
    """A request no script answers (a test that forgot a role, or a stage that asks what it should not)."""


class StageInternalError(AssertionError):
    """:func:`run_stage` (strict): the stage raised where the runner would stop it (a bug or a
    configuration problem, :mod:`fabrika.pipeline.taxonomy`)."""


# -- errors as a real server sends them ------------------------------------------------------------

_STATUS = {"rate_limit": 429, "server": 503, "bad_request": 400, "context_length": 400, "auth": 401,
           "not_found": 404}
_MESSAGES = {
    "rate_limit": "HTTP 429: Rate limit reached for requests; please retry after a moment",
    "timeout": "request timed out (ReadTimeout)",
    "connection": "cannot connect: [Errno 111] Connection refused",
    "server": "HTTP 503: Service Unavailable",
    "bad_request": "HTTP 400: 'messages' must contain at least one message",
    "context_length": "HTTP 400: This model's maximum context length is 32768 tokens. However, you requested "
                      "33017 tokens (32017 in the messages, 1000 in the completion).",
    "auth": "HTTP 401: Incorrect API key provided",
    "not_found": "HTTP 404: The model `scripted` does not exist (model_not_found)",
    "unavailable": "the backend is unavailable",
}


def llm_error(kind: LLMErrorKind, message: str | None = None, *, status_code: int | None = None,
              retry_after: float | None = None) -> LLMError:
    """An :class:`LLMError` of ``kind`` with the status code and wording a real server gives."""
    return LLMError(kind, message or _MESSAGES.get(kind, kind),
                    status_code=status_code if status_code is not None else _STATUS.get(kind),
                    retry_after=retry_after)


def _fresh(err: LLMError) -> LLMError:
    """A new exception per attempt (the retry loop annotates the one it sees)."""
    return LLMError(err.kind, err.message, status_code=err.status_code, retry_after=err.retry_after)


# -- handler helpers ------------------------------------------------------------------------------

def by_tag(scripts: Mapping[str, Any]) -> Handler:
    """A handler that answers by the longest prefix of ``request.tag`` in ``scripts``.

    A value is a handler (called with the request) or a fixed answer; no match raises
    :class:`UnscriptedRequest`.
    """
    def handler(request: ChatRequest) -> Any:
        prefix = max((p for p in scripts if request.tag.startswith(p)), key=len, default=None)
        if prefix is None:
            raise UnscriptedRequest(f"no script for tag {request.tag!r} (scripted: {sorted(scripts)})")
        value = scripts[prefix]
        return value(request) if callable(value) else value

    return handler


def sequence(*answers: Any) -> Handler:
    """A handler that gives ``answers`` in call order, then repeats the last one."""
    if not answers:
        raise ValueError("sequence() needs at least one answer")
    calls = [0]

    def handler(_request: ChatRequest) -> Any:
        out = answers[min(calls[0], len(answers) - 1)]
        calls[0] += 1
        return out

    return handler


# -- the scripted backend ---------------------------------------------------------------------------

def _tokens(text: str) -> int:
    return (len(text) + 3) // 4


def _prompt_tokens(request: ChatRequest) -> int:
    chars = sum(len(m["content"]) if isinstance(m.get("content"), str) else len(json.dumps(m.get("content"),
                ensure_ascii=False, default=str)) for m in request.messages)
    if request.tools:
        chars += len(json.dumps(request.tools, ensure_ascii=False))
    return max(1, (chars + 3) // 4)


_DICT_KEYS = {"content", "tool_calls", "finish_reason", "reasoning", "usage", "model"}


def _choice_from_dict(answer: Mapping[str, Any], index: int) -> Choice:
    unknown = set(answer) - _DICT_KEYS
    if unknown:
        raise TypeError(f"scripted answer has unknown keys {sorted(unknown)}; allowed: {sorted(_DICT_KEYS)}")
    calls = []
    for j, call in enumerate(answer.get("tool_calls") or ()):
        args = call.get("arguments", {})
        calls.append({"id": call.get("id") or f"call_{index}_{j}", "name": call["name"],
                      "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)})
    finish = answer.get("finish_reason") or ("tool_calls" if calls else "stop")
    return Choice(content=answer.get("content"), tool_calls=tuple(calls), finish_reason=finish,
                  reasoning=answer.get("reasoning"))


@dataclass
class _Answer:
    choices: list[Choice]
    usage: Usage | None = None
    model: str | None = None


def _interpret(answer: Any, request: ChatRequest, index: int) -> _Answer:
    if isinstance(answer, LLMError):
        raise _fresh(answer)
    if isinstance(answer, str):
        return _Answer([Choice(content=answer)])
    if isinstance(answer, Choice):
        return _Answer([answer])
    if isinstance(answer, ChatResponse):
        if answer.error is not None:
            raise _fresh(answer.error)
        return _Answer(list(answer.choices), answer.usage, answer.model or None)
    if isinstance(answer, Mapping):
        usage = answer.get("usage")
        return _Answer([_choice_from_dict(answer, index)],
                       Usage(int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)))
                       if usage else None, answer.get("model"))
    if isinstance(answer, (list, tuple)):
        out = _Answer([])
        for a in answer:
            out.choices.extend(_interpret(a, request, index).choices)
        return out
    raise TypeError(f"scripted handler returned {type(answer).__name__} for tag {request.tag!r}; return a str, "
                    "a dict, a Choice, a ChatResponse, a list of those, or an LLMError")


class ScriptedLLM:
    """A backend answered by ``handler`` (see the module docstring), with the real engine on top.

    Use it as the client (``await llm.complete(requests)``, ``ctx.llm`` via :func:`stage_context`,
    ``run_pipeline(config, engine=llm)``) or plug it into an engine of your own
    (``LLMEngine(llm, config=…, cache=…)``): it implements :class:`fabrika.llm.base.Backend`.

    Args:
        handler: ``handler(request) -> answer`` (sync or async), or a mapping of tag prefixes
            to handlers/answers (:func:`by_tag`).
        name: the backend name; answers and rows are labelled with it (``llm_backend``).
        model: the model the engine fills into requests that name none.
        supports_n: answer ``n=K`` requests, so the engine groups repeated samples (as it does
            for an OpenAI-compatible server).
        split_samples: call the handler once per sample of an ``n=K`` request (with ``n=1`` and the
            sample's ``sample_index``); ``False`` calls it once with the ``n=K`` request itself and its
            answer (a list for several choices) is the whole answer — e.g. a server that ignores ``n``.
        delay_s: ``asyncio.sleep`` per attempt (for concurrency and crash-window tests).
        config: the engine's :class:`~fabrika.llm.config.LLMConfig` (retries, defaults, ``cache_only``…);
            the fields it does not set explicitly keep the real defaults, except ``model`` (the
            argument above) and the backoff waits (zero: retries happen, instantly).
        cache: an SQLite file for the engine's response cache (off by default).
    """

    def __init__(self, handler: Handler | Mapping[str, Any], *, name: str = "scripted", model: str = "scripted",
                 supports_n: bool = False, split_samples: bool = True, delay_s: float = 0.0, config: Any = None,
                 cache: str | Path | None = None) -> None:
        from fabrika.llm.config import LLMConfig

        self.handler: Handler = by_tag(handler) if isinstance(handler, Mapping) else handler
        self.name = name
        self.model = model
        self.supports_n = supports_n
        self.split_samples = split_samples
        self.delay_s = delay_s
        quick = {"model": model, "backoff_initial_s": 0.0, "backoff_max_s": 0.0, "backoff_jitter_s": 0.0,
                 "retry_after_max_s": 0.0}
        config = config if config is not None else LLMConfig()
        self.config = config.model_copy(update={k: v for k, v in quick.items() if k not in config.model_fields_set})
        self.cache_path = Path(cache) if cache is not None else None
        #: every request that reached the backend, one per attempt, after the engine's defaults
        self.requests: list[ChatRequest] = []
        #: exceptions other than LLMError that the handler raised (bugs in the test's script)
        self.handler_errors: list[BaseException] = []
        #: most attempts at the backend at the same time
        self.peak_in_flight = 0
        self._in_flight = 0
        self._engine: Any = None
        self._engine_loop: asyncio.AbstractEventLoop | None = None
        self._reported = 0

    # -- Backend ----------------------------------------------------------------------------------
    async def send(self, request: ChatRequest) -> ChatResponse:
        """One attempt: the handler's answer as a real backend returns it (or raises it)."""
        self.requests.append(request)
        self._in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            samples = [request] if request.n <= 1 or not self.split_samples else [
                dataclasses.replace(request, n=1, sample_index=request.sample_index + j) for j in range(request.n)]
            choices: list[Choice] = []
            usage: Usage | None = Usage(0, 0)
            model = None
            for j, sample in enumerate(samples):
                try:
                    raw = self.handler(sample)
                    if inspect.isawaitable(raw):
                        raw = await raw
                    ans = _interpret(raw, sample, j)
                except LLMError:
                    raise
                except Exception as exc:
                    self.handler_errors.append(exc)
                    raise
                choices.extend(ans.choices)
                model = model or ans.model
                if usage is not None and ans.usage is not None:
                    usage = Usage(usage.prompt_tokens + ans.usage.prompt_tokens,
                                  usage.completion_tokens + ans.usage.completion_tokens)
                elif ans.usage is None:
                    usage = None
            if usage is None or usage == Usage(0, 0):
                completion = sum(_tokens(c.content or "") + sum(_tokens(t.get("arguments", "")) + 2
                                                               for t in c.tool_calls) for c in choices)
                usage = Usage(_prompt_tokens(request), completion)
            return ChatResponse(choices=tuple(choices), usage=usage, model=model or request.model or self.model,
                                backend=self.name)
        finally:
            self._in_flight -= 1

    # -- client facade over the real engine --------------------------------------------------------
    @property
    def engine(self) -> Any:
        """The real :class:`~fabrika.llm.engine.LLMEngine` over this backend (one per event loop)."""
        from fabrika.llm.engine import LLMEngine

        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self._engine is None or self._engine.closed or (loop is not None and self._engine_loop is not loop):
            if self._engine is not None and not self._engine.closed and self._engine.cache is not None:
                self._engine.cache.close()  # the previous event loop's engine: flush its answers to disk
            cache = None
            if self.cache_path is not None:
                from fabrika.llm.cache import ResponseCache

                cache = ResponseCache(self.cache_path)
            self._engine = LLMEngine(self, config=self.config, cache=cache)
            self._engine_loop = loop
        return self._engine

    @property
    def backend_name(self) -> str:
        return self.name

    @property
    def accounting(self) -> Any:
        return self.engine.accounting

    @property
    def cache_misses(self) -> int:
        return int(self.engine.cache_misses)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def raise_handler_errors(self) -> None:
        """Re-raise the first handler exception not reported yet (a test bug must fail the test)."""
        if len(self.handler_errors) > self._reported:
            exc = self.handler_errors[self._reported]
            self._reported = len(self.handler_errors)
            raise exc

    async def complete(self, requests: Sequence[ChatRequest]) -> list[ChatResponse]:
        out = await self.engine.complete(requests)
        self.raise_handler_errors()
        return out

    async def complete_one(self, request: ChatRequest) -> ChatResponse:
        return (await self.complete((request,)))[0]

    def flush(self) -> None:
        if self._engine is not None:
            self._engine.flush()

    def stats(self) -> dict[str, Any]:
        return dict(self.engine.stats())

    async def aclose(self) -> None:
        """Close the engine this object built (the engine's own close of its backend lands here too)."""
        engine, self._engine = self._engine, None
        if engine is not None and not engine.closed:
            await engine.aclose()

    # -- assertions -------------------------------------------------------------------------------
    @property
    def calls(self) -> int:
        """Attempts that reached the backend (cache hits and coalesced requests are not calls)."""
        return len(self.requests)

    def tagged(self, prefix: str) -> list[ChatRequest]:
        """The recorded requests whose tag starts with ``prefix``."""
        return [r for r in self.requests if r.tag.startswith(prefix)]


# -- the stage context ------------------------------------------------------------------------------

class HarnessContext(SharedContextParts):
    """A :class:`~fabrika.pipeline.context.StageContext` over in-memory upstream rows.

    ``llm`` is the engine as a stage sees it in a run (:class:`fabrika.pipeline.llm_wrap.StageLLM`:
    requests stamped with the stage, per-item pending/terminal failures noted for the runner's
    rules). ``reports`` holds what the stage reported; ``stats`` the runner's counters of the stage.
    Close it (``await ctx.aclose()`` or ``async with``) to close shared resources, as the runner does.
    """

    def __init__(self, llm: Any, rows: Mapping[str, Iterable[Row]], resources: Mapping[str, Any], seed: int | None,
                 run_dir: Path | None, pipeline: Any, stage: str | None, backend_name: str | None,
                 stored: bool = False, annotators: Mapping[str, Sequence[str]] | None = None) -> None:
        from fabrika.pipeline.outcome import StageStats

        self.rows = {name: list(rs) for name, rs in rows.items()}
        #: annotating stages (scorers) by the table they score: their rows are joined on ``id`` when read
        self.annotators = {name: list(a) for name, a in (annotators or {}).items()}
        self.stored = stored or bool(self.annotators)
        self._written: set[str] = set()
        self.resources: dict[str, Any] = dict(resources)
        #: where ``stage_dir`` lives; without one, a fresh name under the temporary directory (made on first use)
        self.run_dir = Path(run_dir) if run_dir is not None else Path(tempfile.gettempdir()) / (
            f"fabrika-harness-{uuid.uuid4().hex[:12]}")
        self.pipeline = pipeline if pipeline is not None else self._default_pipeline(seed, run_dir)
        self.seed = int(seed if seed is not None else getattr(self.pipeline, "seed", 0))
        self.stage_name = stage or "test"
        self._stage_fixed = stage is not None
        self.stats = StageStats()
        self.reports = self.stats.report
        self._client = llm
        self.llm: Any = None
        self.backend_name = backend_name or _backend_name(llm)
        self._wrap()

    def _default_pipeline(self, seed: int | None, run_dir: Path | None) -> Any:
        from fabrika.pipeline.config import PipelineConfig

        return PipelineConfig(name="harness", seed=seed or 0, stages=[], run_dir=run_dir)

    def _wrap(self) -> None:
        from fabrika.pipeline.llm_wrap import StageLLM

        self.llm = StageLLM(self._client, self.stage_name, self.stats.llm) if self._client is not None else None

    def new_run(self) -> None:
        """Fresh counters for the next stage run (as the runner gives each stage); reports made so far stay."""
        from fabrika.pipeline.outcome import StageStats

        reports = dict(self.reports)
        self.stats = StageStats()
        self.stats.report.update(reports)
        self.reports = self.stats.report
        self._wrap()

    def bind(self, stage_name: str) -> None:
        """Act for ``stage_name`` (its RNG, its ``meta["stage"]``), unless the context was built for a stage."""
        if not self._stage_fixed and stage_name != self.stage_name:
            self.stage_name = stage_name
            self._wrap()

    @property
    def filters(self) -> Mapping[str, Any]:
        return getattr(self.pipeline, "filters", None) or {}

    def iter_rows(self, stage_name: str, *, gated: bool = True, columns: list[str] | None = None) -> Iterator[Row]:
        """The rows given for ``stage_name``; ``gated``: only ``ok`` rows that pass the pipeline's gates."""
        if stage_name not in self.rows:
            raise KeyError(f"no rows given for upstream stage {stage_name!r}; pass "
                           f"stage_context(rows={{{stage_name!r}: [...]}}) (given: {sorted(self.rows)})")
        if self.stored:
            yield from self._stored_rows(stage_name, gated, columns)
            return
        rows = self.rows[stage_name]
        names = list(dict.fromkeys(k for r in rows for k in r))  # a table's rows all have its columns
        if gated and rows:
            rows = self._gate(stage_name, rows)
        for r in rows:
            full = {k: r.get(k) for k in names}
            yield {k: full[k] for k in columns if k in full} if columns is not None else full

    def _gate(self, stage_name: str, rows: list[Row]) -> list[Row]:
        """The rows the runner's gates keep: ``status == "ok"`` and every registered gate group
        (defaults, overridden by ``pipeline.filters``) whose columns the rows have."""
        import polars as pl

        from fabrika.gates import gate_lazy

        try:
            frame = pl.from_dicts(rows, infer_schema_length=None)
        except (TypeError, ValueError, pl.exceptions.PolarsError) as exc:
            raise TypeError(f"rows of {stage_name!r} do not form a table ({exc}); store nested fields as JSON "
                            "strings, as the run store does") from exc
        order = "__harness_order"
        kept = gate_lazy(frame.with_row_index(order).lazy(), self.filters).select(order).collect()
        return [rows[i] for i in kept[order].to_list()]

    def _stored_rows(self, stage_name: str, gated: bool, columns: list[str] | None) -> Iterator[Row]:
        """The rows as a run reads them: written as shards of a real run store, read back with the
        annotators' scores joined and the gates applied (what the runner's context does)."""
        from fabrika.gates import gate_lazy
        from fabrika.store.run import RunStore

        store = RunStore(self.run_dir)
        annotators = self.annotators.get(stage_name, [])
        for name in [stage_name, *annotators]:
            if name not in self._written:
                store.drop_stage(name)
                if self.rows.get(name):
                    store.write(name, self.rows[name])
                self._written.add(name)
        filters = self.filters
        where = (lambda lf: gate_lazy(lf, filters)) if gated else None
        for frame in store.iter_frames(stage_name, annotators, where=where, columns=columns):
            yield from frame.iter_rows(named=True)

    def count_rows(self, stage_name: str, gated: bool = True) -> int:
        return sum(1 for _ in self.iter_rows(stage_name, gated=gated))

    @property
    def reports(self) -> dict[str, Any]:
        """What the stage reported (``ctx.report``), as the manifest would record it."""
        return self.reported

    @reports.setter
    def reports(self, value: dict[str, Any]) -> None:
        self.reported = value

    async def aclose(self) -> None:
        """Close the shared resources (newest first, as the runner does) and a ScriptedLLM's engine."""
        from fabrika.pipeline.lifecycle import close_resources

        await close_resources(self.resources)
        if isinstance(self._client, ScriptedLLM):
            await self._client.aclose()

    async def __aenter__(self) -> "HarnessContext":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def _backend_name(llm: Any) -> str:
    name = getattr(llm, "backend_name", None) or getattr(llm, "name", None)
    return name if isinstance(name, str) and name else "scripted"


def stage_context(llm: Any = None, rows: Mapping[str, Iterable[Row]] | None = None,
                  resources: Mapping[str, Any] | None = None, *, seed: int | None = None,
                  run_dir: str | Path | None = None, pipeline: Any = None, stage: str | None = None,
                  backend_name: str | None = None, base_dir: str | Path | None = None, stored: bool = False,
                  annotators: Mapping[str, Sequence[str]] | None = None) -> HarnessContext:
    """A stage context for tests (see :class:`HarnessContext`).

    Args:
        llm: a :class:`ScriptedLLM` (or any :class:`~fabrika.llm.base.LLMClient`, e.g. a real
            engine over the sim backend); ``None`` for stages that never call the model.
        rows: upstream rows by stage name (what ``ctx.iter_rows(name)`` streams).
        resources: shared objects already made (``ctx.resource(name, factory)`` returns them;
            e.g. a fake sandbox pool); others are made by their factory once.
        seed: the pipeline seed (default the pipeline's, else 0).
        run_dir: where ``stage_dir`` lives (default: a fresh temporary directory on first use).
        pipeline: the :class:`~fabrika.pipeline.config.PipelineConfig` (``ctx.pipeline``: gate
            thresholds in ``filters``, ``sandbox``, ``resolve_path``); default an empty one.
        stage: the stage name the context acts for; default the name of the stage :func:`run_stage`
            runs (``"test"`` before that).
        backend_name: the rows' ``llm_backend`` label; default the llm's name.
        base_dir: the config file's directory, which relative paths in stage configs are resolved
            against (``ctx.pipeline.resolve_path``); default the working directory.
        stored: write the upstream rows as shards of a real run store under ``run_dir`` and read
            them back as a run does (nested values must be JSON strings, columns get the table's
            schema, rows come in id order).
        annotators: scorer stages by the table they score (``{"fc.samples": ["judge"]}``; their rows
            are in ``rows`` too): joined on ``id`` when the table is read, ``status__judge`` /
            ``reason__judge`` named as in a run, and gated. Implies ``stored``.
    """
    ctx = HarnessContext(llm, rows or {}, resources or {}, seed, Path(run_dir) if run_dir else None, pipeline,
                         stage, backend_name, stored, annotators)
    if base_dir is not None:
        ctx.pipeline._base_dir = Path(base_dir)
    return ctx


# -- running one stage ------------------------------------------------------------------------------

@dataclass
class StageRun:
    """What the runner would have done with one stage's items.

    ``rows`` are the rows it would write (ok, rejections, ``no_output``), in input order;
    ``pending`` the item ids it would leave unwritten for the next run; ``failures`` the
    :class:`fabrika.errors.StageFailure` of each item whose exception would stop the stage
    (nothing is written for them).
    """

    rows: list[Row]
    pending: list[str]
    items: list[Any] = field(default_factory=list)
    stats: Any = None
    reports: dict[str, Any] = field(default_factory=dict)
    failures: list[Any] = field(default_factory=list)

    @property
    def ok(self) -> list[Row]:
        return [r for r in self.rows if r.get("status") == "ok"]

    @property
    def rejected(self) -> list[Row]:
        return [r for r in self.rows if r.get("status") != "ok"]

    @property
    def internal_errors(self) -> list[Any]:
        """The items that would stop the stage (:attr:`failures`; never rows any more)."""
        return list(self.failures)

    def reasons(self) -> Counter[str]:
        """Rejections by reason key (the part before ``:``), like the manifest counts them."""
        return Counter(str(r.get("reason") or "").split(":", 1)[0].strip() for r in self.rejected)

    def by_id(self, row_id: str) -> Row:
        for r in self.rows:
            if r["id"] == row_id:
                return r
        raise KeyError(f"no output row with id {row_id!r}")


async def run_stage(stage: "type[Stage] | Stage", config: "StageConfig | Mapping[str, Any] | None" = None,
                    ctx: HarnessContext | None = None, *,
                    rows: Iterable[Row] | None = None, done: Iterable[str] = (), strict: bool = True,
                    max_in_flight: int | None = None) -> StageRun:
    """Run one stage over ``ctx`` the way the runner does (setup, items, teardown).

    Args:
        stage: a :class:`~fabrika.pipeline.stage.Stage` subclass (built with ``config`` and ``ctx``)
            or an instance.
        config: the stage's config, or a dict of its fields (validated by the stage's ``Config``).
        ctx: the context (default: an instance's own harness context, else ``stage_context()``); it
            acts for the stage's name unless built with ``stage=``.
        rows: the input rows; default ``stage.input_rows()`` (the gated rows of ``config.input``).
        done: item ids already written (resume skips them).
        strict: raise when the stage raised (:class:`StageInternalError`, chained to the original
            exception) or the script raised (the handler's exception); ``False`` returns the
            items that would stop the stage in :attr:`StageRun.failures`.
        max_in_flight: items processed at once (default the config's, else 16).
    """
    from fabrika.pipeline.execute import finish_rows, new_items, process_item
    from fabrika.pipeline.taxonomy import stop

    if ctx is None:
        own = getattr(stage, "ctx", None)
        ctx = own if isinstance(own, HarnessContext) and not isinstance(stage, type) else stage_context()
    if isinstance(stage, type):
        if isinstance(config, Mapping):
            config = stage.Config(**{"kind": stage.kind, **config})
        if config is None:
            raise TypeError(f"run_stage({stage.__name__}) needs its config")
        ctx.bind(config.stage_name)
        stage = stage(config, ctx)
    else:
        ctx.bind(stage.config.stage_name)
    ctx.new_run()
    inputs = iter(rows) if rows is not None else iter(stage.input_rows())
    stats = ctx.stats
    raised: dict[str, BaseException] = {}
    script = ctx._client if isinstance(ctx._client, ScriptedLLM) else None
    await stage.setup()
    try:
        if stage.global_stage:
            out: list[Row] = []
            async for chunk in stage.run_all(inputs):
                if chunk:
                    out.extend(finish_rows(list(chunk), None, ctx.backend_name))
            stats.processed = len(out)
            result = StageRun(out, [], [], stats, ctx.reports)
        else:
            original = stage.process

            async def process(row: Row) -> list[Row]:
                try:
                    return await original(row)
                except Exception as exc:
                    raised[stage.item_id(row)] = exc
                    raise

            stage.__dict__["process"] = process  # on the instance only; removed after the run
            width = max_in_flight or getattr(stage.config, "max_in_flight", None) or 16
            slots = asyncio.Semaphore(width)
            done_ids = set(done)

            async def one(item_id: str, row: Row) -> Any:
                async with slots:
                    return await process_item(stage, row, item_id, ctx.backend_name)

            items = list(new_items(stage, inputs, done_ids, stats, lambda: None))
            results = await asyncio.gather(*(asyncio.create_task(one(i, r)) for i, r in items))
            out, pending, failures = [], [], []
            for res in results:
                if res.failure is not None:
                    failures.append(stop(stage.name, res.item_id, res.failure))
                    continue
                if res.rows is None:
                    pending.append(res.item_id)
                    stats.pending += 1
                    continue
                stats.processed += 1
                stats.ok_rows += sum(r["status"] == "ok" for r in res.rows)
                out.extend(res.rows)
            result = StageRun(out, pending, list(results), stats, ctx.reports, failures)
    finally:
        stage.__dict__.pop("process", None)
        await stage.teardown()
    if strict:
        if script is not None:
            script.raise_handler_errors()
        for failure in result.failures:
            exc = raised.get(str(failure.item_id))
            raise StageInternalError(f"stage {stage.name!r} raised on item {failure.item_id!r}: "
                                     f"{failure.error} (the runner stops the stage here; "
                                     "run_stage(..., strict=False) lists it in .failures)") from exc
    return result
