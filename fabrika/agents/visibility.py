"""The visibility rule of each FC role, as pure functions (DESIGN contract 8).

An episode's full state holds the plan, the persona and every message. Each
role gets a *View* cut from it, and the role's prompt is rendered from the
View only — so what a role can leak is bounded by what its View holds, and
the tests assert on the rendered prompts:

* user: persona, the goal card of the current turn (values to convey, never
  argument names, never withheld values; lists and objects in their spoken form,
  never JSON: :mod:`fabrika.agents.spoken`), the visible dialogue text; never tool
  names, schemas, calls or results;
* assistant: its system prompt, the tools at the sample's description tier,
  the dialogue with its own calls and the tool results; never the plan;
* tool: one call, that tool's full schema, the plan's expected result for it,
  earlier tool outputs; never the user's text or goal.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass, field
from typing import Any, Sequence

from fabrika.agents.leaks import PlanLeak, user_facing_leaks
from fabrika.agents.prompts import assistant_system, prompt_text
from fabrika.agents.spoken import spoken_card
from fabrika.schemas.fc import GoalCard, Persona, Plan, goal_card
from fabrika.schemas.messages import Message
from fabrika.schemas.tools import Tool, ToolCall
from fabrika.textutil.jsontext import dumps_indent1


@dataclass(frozen=True)
class EpisodeState:
    """Everything the simulation knows; only views cut from it reach a prompt."""

    plan: Plan
    messages: tuple[Message, ...] = ()
    step: int = 0


@dataclass(frozen=True)
class UserView:
    lang: str
    persona: Persona
    goal: GoalCard
    dialogue: tuple[tuple[str, str], ...]  # (role, text) of user/assistant text turns


@dataclass(frozen=True)
class AssistantView:
    lang: str
    system: str
    tools: tuple[Tool, ...]
    messages: tuple[Message, ...]


@dataclass(frozen=True)
class ToolView:
    lang: str
    call: ToolCall
    tool: Tool
    expected_result: Any
    earlier: tuple[tuple[ToolCall, str], ...] = field(default=())


def _dumps(value: Any) -> str:
    return dumps_indent1(value)


#: ``id(tool)`` → (a weak reference to the tool, its schema's indent-1 JSON): the tool agent's prompt shows the
#: called tool's schema on every call of it; an entry lives as long as its (frozen) tool
_SCHEMAS: dict[int, tuple["weakref.ref[Tool]", str]] = {}


def _schema_text(tool: Tool) -> str:
    key = id(tool)
    got = _SCHEMAS.get(key)
    if got is not None and got[0]() is tool:
        return got[1]
    text = _dumps(tool.to_openai())
    _SCHEMAS[key] = (weakref.ref(tool, lambda _ref: _SCHEMAS.pop(key, None)), text)
    return text


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def user_view(state: EpisodeState, *, leaks: list[str] | None = None) -> UserView:
    """Persona, goal card and the plain text of the conversation (no calls, no tool output).

    ``leaks`` is :func:`plan_leaks` of this state when the caller already has it (it depends on the
    plan and the step only, so an episode that asks the user agent again reuses it).

    Raises:
        PlanLeak: the step's texts or the persona give away a withheld value, a tool
            or a parameter name, or a value a later step first needs.
    """
    if leaks is None:
        leaks = plan_leaks(state)
    if leaks:
        raise PlanLeak(leaks[0])
    text_turns = tuple(
        (m.role, m.content)
        for m in state.messages
        if m.role in ("user", "assistant") and not m.tool_calls and m.content and m.flag != "injected"
    )
    return UserView(
        lang=state.plan.lang,
        persona=state.plan.persona,
        goal=spoken_card(goal_card(state.plan, state.step), state.plan.lang),  # lists and objects said in words
        dialogue=text_turns,
    )


def plan_leaks(state: EpisodeState) -> list[str]:
    """What the current step's user-facing text and the persona give away (:func:`user_facing_leaks`)."""
    plan = state.plan
    return user_facing_leaks(plan.steps, plan.tools, plan.lang, state.step, plan.persona)


class AssistantHistory:
    """One episode's dialogue as the assistant sees it, each message made once: its copy without hidden
    reasoning and its chat dict (an episode only appends messages and never changes one, so every later
    request reuses them). Pass one to :func:`assistant_view` and :func:`render_assistant_request`; the chat
    dicts are shared between requests, read only (as :meth:`~fabrika.schemas.tools.Tool.to_openai`'s)."""

    __slots__ = ("_chats", "_seen", "_source")

    def __init__(self) -> None:
        self._source: list[Message] = []  # the state's messages (without system ones) seen so far
        self._seen: list[Message] = []  # each one as the assistant sees it
        self._chats: list[dict[str, Any]] = []  # its chat dict

    def seen(self, messages: Sequence[Message]) -> tuple[Message, ...]:
        """``messages`` without hidden reasoning; a message met before (the same object, at the same place)
        gives its earlier copy."""
        source = self._source
        k = 0
        while k < len(source) and k < len(messages) and source[k] is messages[k]:
            k += 1
        del source[k:], self._seen[k:], self._chats[k:]  # a changed history (not an episode's) starts over there
        for m in messages[k:]:
            source.append(m)
            self._seen.append(m if m.reasoning is None else m.model_copy(update={"reasoning": None}))
            self._chats.append(self._seen[-1].to_chat())
        return tuple(self._seen)

    def chats(self, seen: Sequence[Message]) -> list[dict[str, Any]]:
        """The chat dicts of ``seen`` (what :meth:`seen` returned; anything else is rendered afresh)."""
        if len(seen) == len(self._seen) and all(a is b for a, b in zip(seen, self._seen)):
            return list(self._chats)
        return [m.to_chat() for m in seen]


def assistant_view(state: EpisodeState, history: AssistantHistory | None = None) -> AssistantView:
    """System prompt, tier-k tools and the whole dialogue, without hidden reasoning and without the plan
    (``history``: the episode's, so each message is copied once, not once per request)."""
    dialogue = [m for m in state.messages if m.role != "system"]
    msgs = (history.seen(dialogue) if history is not None else
            tuple(m if m.reasoning is None else m.model_copy(update={"reasoning": None}) for m in dialogue))
    return AssistantView(
        lang=state.plan.lang,
        system=assistant_system(state.plan.lang, state.plan.id),
        tools=tuple(state.plan.tools_at_tier()),
        messages=msgs,
    )


def tool_view(state: EpisodeState, call: ToolCall, expected_result: Any = None) -> ToolView:
    """The call, the called tool's full schema, the plan's expected result and earlier tool outputs."""
    spec = state.plan.spec(call.name)
    if spec is None:
        raise ValueError(f"tool_view: tool {call.name!r} is not in the plan's tool group; validate the call first")
    calls_by_id: dict[str, ToolCall] = {}
    earlier: list[tuple[ToolCall, str]] = []
    for m in state.messages:
        for c in m.tool_calls or []:
            if c.id:
                calls_by_id[c.id] = c
        if m.role == "tool" and m.tool_call_id in calls_by_id and m.flag != "validator_error":
            earlier.append((calls_by_id[m.tool_call_id], m.content or ""))
    return ToolView(lang=state.plan.lang, call=call, tool=spec.tool, expected_result=expected_result,
                    earlier=tuple(earlier))


# --- renderers: a View in, chat messages out -------------------------------------------------


def render_user_prompt(view: UserView) -> list[dict[str, Any]]:
    """Messages for the user agent (it writes the next *user* turn)."""
    p = view.persona
    goal = {"intent": view.goal.intent, "say": view.goal.say,
            "facts": [f.model_dump() for f in view.goal.facts]}
    transcript = "\n".join(f"{prompt_text('role_' + role, view.lang)}: {text}" for role, text in view.dialogue)
    system = prompt_text("user_system", view.lang).format(
        name=p.name, description=p.description, style=p.style or "-",
    )
    body = prompt_text("user_turn", view.lang).format(
        goal=_dumps(goal), transcript=transcript or prompt_text("empty_dialogue", view.lang),
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": body}]


def render_assistant_request(view: AssistantView, history: AssistantHistory | None = None,
                             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, tools) for an OpenAI tool-calling request (``history``: the one the view was made with, whose
    chat dicts are reused)."""
    chats = history.chats(view.messages) if history is not None else [m.to_chat() for m in view.messages]
    messages = [{"role": "system", "content": view.system}, *chats]
    return messages, [t.to_openai() for t in view.tools]


def render_tool_prompt(view: ToolView) -> list[dict[str, Any]]:
    """Messages for the tool agent (it writes the tool's JSON output)."""
    earlier = [{"call": {"name": c.name, "arguments": c.arguments}, "output": _loads(out)} for c, out in view.earlier]
    body = prompt_text("tool_turn", view.lang).format(
        schema=_schema_text(view.tool),
        call=_dumps({"name": view.call.name, "arguments": view.call.arguments}),
        expected=_dumps(view.expected_result) if view.expected_result is not None else "null",
        earlier=_dumps(earlier),
    )
    return [{"role": "system", "content": prompt_text("tool_system", view.lang)}, {"role": "user", "content": body}]
