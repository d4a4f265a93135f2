"""Asking a model a multi-turn case on fabrika's backends, for :func:`fabrika.eval.bfcl_multi.check_multi_turn`.

BFCL's multi-turn inference, on fabrika's own backends: the user turns are given one by one; within
a turn the model is asked, its calls are executed on a live :class:`~fabrika.eval.bfcl_multi.Session`
and the results go back to it as ``tool`` messages, until it answers without a call (the turn ends)
or ``max_steps`` requests were made. The calls of each step are recorded; the checker then replays
them on fresh backends against the ground truth.

The tools the model sees are the involved backends' methods, described from their signatures
(:func:`backend_tools`). Calls are read with fabrika's one call reader (API ``tool_calls``,
``<tool_call>`` blocks, …). A failed request ends the case with ``error`` set: an eval reports it,
it is not a wrong answer.
"""

from __future__ import annotations

import inspect
import json
import typing
from dataclasses import dataclass, field
from typing import Any

from fabrika.eval.bfcl_backends import BACKENDS
from fabrika.eval.bfcl_multi import Session
from fabrika.llm import ChatRequest
from fabrika.textutil.answers import is_failure
from fabrika.textutil.tool_calls import read_calls

__all__ = ["MULTI_TAG", "MultiTurnRun", "answer_case", "backend_tools"]

MULTI_TAG = "eval.fc.multi"
_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}


def _json_type(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    base = typing.get_origin(annotation) or annotation
    if args and base not in (list, dict):  # Optional[X] / X | None
        return _json_type(args[0])
    return _JSON_TYPES.get(base, "string")


def backend_tools(classes: list[str]) -> list[dict[str, Any]]:
    """OpenAI tool schemas of the involved backends' tools (parameters from the method signatures)."""
    tools = []
    for cls_name in classes:
        cls = BACKENDS[cls_name]
        hints_of = {name: typing.get_type_hints(getattr(cls, name)) for name in cls.tools}
        for name in cls.tools:
            sig = inspect.signature(getattr(cls, name))
            props, required = {}, []
            for p in list(sig.parameters.values())[1:]:
                props[p.name] = {"type": _json_type(hints_of[name].get(p.name, str))}
                if p.default is inspect.Parameter.empty:
                    required.append(p.name)
            tools.append({"type": "function", "function": {
                "name": name, "description": f"{cls_name}.{name}",
                "parameters": {"type": "object", "properties": props, "required": required}}})
    return tools


@dataclass
class MultiTurnRun:
    """The model's calls per turn, per step (``turns[t][s]`` = the calls of step ``s`` of turn ``t``)."""

    turns: list[list[list[dict[str, Any]]]] = field(default_factory=list)
    error: str | None = None
    steps: int = 0


async def answer_case(case: dict[str, Any], llm: Any, *, max_steps: int = 8, temperature: float = 0.0,
                      max_tokens: int | None = None) -> MultiTurnRun:
    """Ask ``llm`` (anything with ``await complete(requests)``) the case's turns with tool execution."""
    involved = list(case["involved_classes"])
    session = Session(involved, case.get("initial_config") or {})
    tools = tuple(backend_tools(involved))
    known = {t["function"]["name"] for t in tools}
    messages: list[dict[str, Any]] = []
    run = MultiTurnRun()
    for turn in case["question"]:
        messages.extend(dict(m) for m in turn)
        steps: list[list[dict[str, Any]]] = []
        run.turns.append(steps)
        for _ in range(max_steps):
            (resp,) = await llm.complete([ChatRequest(messages=tuple(messages), tools=tools, tool_choice="auto",
                                                      temperature=temperature, max_tokens=max_tokens,
                                                      tag=MULTI_TAG, meta={"id": case.get("id")})])
            run.steps += 1
            if resp.error is not None or not resp.choices:
                run.error = f"request failed: {resp.error}"
                return run
            choice = resp.choices[0]
            read = read_calls({"content": choice.content, "reasoning_content": choice.reasoning,
                               "tool_calls": [{"name": c.get("name"), "arguments": c.get("arguments")}
                                              for c in choice.tool_calls]}, tools=known)
            calls = [] if is_failure(read) else [{str(c["name"]): dict(c["arguments"])} for c in read.calls]
            if not calls:
                messages.append({"role": "assistant", "content": choice.content or ""})
                break
            steps.append(calls)
            ids = [f"call_{run.steps}_{j}" for j in range(len(calls))]
            messages.append({"role": "assistant", "content": choice.content or "", "tool_calls": [
                {"id": i, "type": "function", "function": {"name": next(iter(c)),
                                                           "arguments": json.dumps(next(iter(c.values())),
                                                                                   ensure_ascii=False)}}
                for i, c in zip(ids, calls, strict=True)]})
            for i, result in zip(ids, session.run(calls), strict=True):
                messages.append({"role": "tool", "tool_call_id": i, "content": result})
    return run
