"""Asking a model a multi-turn case, for :func:`fabrika.eval.bfcl_multi.check_multi_turn`.

BFCL's multi-turn inference: the user turns are given one by one; within a turn the model is asked,
its calls are executed on live instances and the results go back to it as ``tool`` messages, until it
answers without a call (the turn ends). The calls of each step are recorded; the checker then replays
them on fresh instances against the ground truth.

* :func:`answer_bfcl_case` — BFCL's own cases on BFCL's simulators (:mod:`fabrika.eval.bfcl_sim`), with
  BFCL's function docs as tools, its held-out functions added at their turn (whose user message is
  BFCL's), and its step limit: more than ``MAXIMUM_STEP_LIMIT`` (20) steps with calls in one turn
  force-quits the case (BFCL then fails it, as fewer turns than the ground truth, unless it was the last);
* :func:`answer_case` — fabrika's hand-made cases on its own backends (a live
  :class:`~fabrika.eval.bfcl_multi.Session`), at most ``max_steps`` requests per turn; the tools are
  the backends' methods, described from their signatures (:func:`backend_tools`).

Calls are read with fabrika's one call reader (API ``tool_calls``, ``<tool_call>`` blocks, …). A failed
request ends the case with ``error`` set: an eval reports it, it is not a wrong answer.
"""

from __future__ import annotations

import inspect
import json
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

from fabrika.eval.bfcl_backends import BACKENDS
from fabrika.eval.bfcl_multi import Session
from fabrika.llm import ChatRequest
from fabrika.textutil.answers import is_failure
from fabrika.textutil.tool_calls import read_calls

__all__ = ["MULTI_TAG", "MultiTurnRun", "answer_bfcl_case", "answer_case", "backend_tools"]

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
    force_quit: bool = False  # BFCL's step limit ended the case (BFCL then fails it unless it was the last turn)
    text: str = ""  # the model's last text answer
    malformed: list[str] = field(default_factory=list)  # unreadable calls (each ended its turn)
    truncated: bool = False


def _read(choice: Any, known: set[str], *, strict_json: bool = False) -> tuple[list[dict[str, Any]], str | None]:
    """The step's calls and, when they cannot be read, why. ``strict_json``: as BFCL's decoder, API
    arguments must be a JSON text (an empty string is not one: BFCL's ``json.loads`` fails and the turn ends)."""
    if strict_json:
        for c in choice.tool_calls:
            args = c.get("arguments")
            if isinstance(args, str):
                try:
                    json.loads(args)
                except ValueError:
                    return [], f"malformed_call: arguments of {c.get('name')} are not JSON: {args[:40]!r}"
    read = read_calls({"content": choice.content, "reasoning_content": choice.reasoning,
                       "tool_calls": [{"name": c.get("name"), "arguments": c.get("arguments")}
                                      for c in choice.tool_calls]}, tools=known)
    if is_failure(read):
        return [], str(read)
    return [{str(c["name"]): dict(c["arguments"])} for c in read.calls], None


async def _episode(case_id: Any, question: list[list[dict[str, Any]]], session: Any, llm: Any,
                   tools_at: Callable[[int], tuple[dict[str, Any], ...]], *, max_steps: int, bfcl_rules: bool,
                   temperature: float, max_tokens: int | None,
                   turn_messages: Callable[[int, list[dict[str, Any]]], list[dict[str, Any]]] | None = None
                   ) -> MultiTurnRun:
    """The turn loop. ``bfcl_rules``: BFCL's rule (a turn may make ``max_steps`` steps with calls; one more
    force-quits the case), else at most ``max_steps`` requests per turn."""
    messages: list[dict[str, Any]] = []
    run = MultiTurnRun()
    for t, turn in enumerate(question):
        messages.extend(dict(m) for m in (turn_messages(t, turn) if turn_messages else turn))
        tools = tools_at(t)
        known = {x["function"]["name"] for x in tools}
        steps: list[list[dict[str, Any]]] = []
        run.turns.append(steps)
        requests = 0
        while bfcl_rules or requests < max_steps:
            (resp,) = await llm.complete([ChatRequest(messages=tuple(messages), tools=tools or None,
                                                      tool_choice="auto" if tools else None,
                                                      temperature=temperature, max_tokens=max_tokens,
                                                      tag=MULTI_TAG, meta={"id": case_id})])
            run.steps += 1
            requests += 1
            if resp.error is not None or not resp.choices:
                run.error = f"request failed: {resp.error}"
                return run
            choice = resp.choices[0]
            run.truncated = run.truncated or bool(choice.truncated)
            calls, malformed = _read(choice, known, strict_json=bfcl_rules)
            if malformed is not None:
                run.malformed.append(malformed)
            if not calls:
                run.text = choice.content or ""
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
            if bfcl_rules and len(steps) > max_steps:
                run.force_quit = True
                return run
    return run


async def answer_case(case: dict[str, Any], llm: Any, *, max_steps: int = 8, temperature: float = 0.0,
                      max_tokens: int | None = None) -> MultiTurnRun:
    """Ask ``llm`` (anything with ``await complete(requests)``) the case's turns on fabrika's backends
    (at most ``max_steps`` requests per turn)."""
    involved = list(case["involved_classes"])
    session = Session(involved, case.get("initial_config") or {})
    tools = tuple(backend_tools(involved))
    return await _episode(case.get("id"), case["question"], session, llm, lambda t: tools, max_steps=max_steps,
                          bfcl_rules=False, temperature=temperature, max_tokens=max_tokens)


async def answer_bfcl_case(item: dict[str, Any], llm: Any, *, max_steps: int | None = None,
                           temperature: float = 0.0, max_tokens: int | None = None) -> MultiTurnRun:
    """Ask ``llm`` a BFCL multi-turn item (:func:`fabrika.eval.bfcl_multi_data.read_multi_items`) on BFCL's own
    simulators, as BFCL's function-calling inference does: the held-out functions join the tools at their
    turn, whose user message is BFCL's; a turn ends at an answer without calls; more than ``max_steps``
    steps with calls in one turn force-quit the case (default: BFCL's ``MAXIMUM_STEP_LIMIT``). BFCL's step limit
    and its held-out-turn message are read from the installed package."""
    from fabrika.eval.bfcl_sim import bfcl_constants, session_factory
    from fabrika.eval.fc_cases import _tools

    step_limit, holdout_prompt = bfcl_constants()

    session = session_factory()(item)
    offered = list(item["functions"])
    per_turn: list[tuple[dict[str, Any], ...]] = []
    for t in range(len(item["question"])):
        offered += item["holdout"].get(str(t), [])
        per_turn.append(tuple(_tools(offered, str(item["id"]))[0]))

    def turn_messages(t: int, turn: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if str(t) in item["holdout"]:
            return [{"role": "user", "content": holdout_prompt}]
        return turn

    return await _episode(item["id"], item["question"], session, llm, lambda t: per_turn[t],
                          max_steps=step_limit if max_steps is None else max_steps, bfcl_rules=True,
                          temperature=temperature, max_tokens=max_tokens, turn_messages=turn_messages)
