"""``fc.dialogues``: three agents replay a plan, each seeing only its own View.

One ``process`` call is one episode. Per plan step the user agent writes the
turn from its goal card; the assistant agent (OpenAI tool calling, tools at the
plan's tier) answers each expected call round and then the closing text; the
tool agent answers each call from the called tool's schema and the plan's
expected result. Every assistant answer is checked — rules first (parses, tool
visible, schema, call count), then the FC matcher against the reference round.
A wrong answer stays in the context (``flag="wrong"``, never a target) and gets
a realistic reply (tool agent, or the validator's error, or the user repeating
the request) so the assistant can recover; after ``max_retries`` failures the
reference is injected (``flag="injected"``, never a target). A wrong call that
the tool agent *answered* (no error) stays a wrong turn, and a right call to the
same tool after it is kept as context (``flag="repeat"``) but never trained: a
model should not learn to call again after a successful call. The tool agent's
answer must keep the keys and values of the plan's expected result (re-asked
``tool_retries`` times, then the episode is rejected). Episodes with a larger
untrained share than ``max_injected_share`` are rejected, as are episodes whose
user or tool agent answers are unusable or leak (reasons recorded; a leak by
a short form or transliteration, «в Питере» for Санкт-Петербург, counts). A user
turn with an artefact (role label, remark about the instructions, wrapping
quotes, pasted JSON, a phrase in the other language) is asked once more, then
the episode is rejected (``user_hygiene``). A clarification that asks again for
what an earlier one asked is kept as context (``flag="repeat"``), never trained.
Text targets carry rule scores that gates read: ``asks_withheld`` and
``asks_given`` for clarifications and questions, ``unsupported_numbers``,
``unsupported_facts`` and ``contradiction_rule`` for closing answers
(docs/FC_CHECKS.md); a clarification target records the withheld slots it must
ask for (``asks``, the ground truth of ``fc.samples``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from typing import Any, ClassVar

from pydantic import Field

import fabrika.generators.fc.columns as cols
from fabrika.agents.leaks import PlanLeak, said_value, withheld_values
from fabrika.agents.prompts import ASSISTANT_KEYS, CATALOGUE, TOOL_KEYS, USER_KEYS
from fabrika.agents.visibility import (
    AssistantHistory,
    EpisodeState,
    assistant_view,
    plan_leaks,
    render_assistant_request,
    render_tool_prompt,
    render_user_prompt,
    tool_view,
    user_view,
)
from fabrika.filters.fc_facts import contradiction, unsupported_facts
from fabrika.filters.fc_given import asked_params, given_in, numbers_in, result_has
from fabrika.filters.fc_hygiene import user_turn_issues
from fabrika.generators.fc.common import language_ok, response_error
from fabrika.generators.fc.step_check import StepVerdict, asks_for, check_step, parse_assistant_choice
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.rewards.fc import values_equal
from fabrika.schemas.fc import ExpectedCall, Plan, PlanStep
from fabrika.schemas.ids import stable_id
from fabrika.schemas.messages import Dialogue, Message
from fabrika.schemas.tools import ToolCall
from fabrika.textutil.answers import extract_json, is_failure
from fabrika.textutil.reasoning import split_reasoning
from fabrika.textutil.tool_calls import call_id


class EpisodeRejected(Exception):
    """Ends one episode with a recorded reason (never escapes ``process``)."""


class DialoguesConfig(StageConfig):
    """Config of ``fc.dialogues`` (input: ``fc.plans``)."""

    max_retries: int = Field(default=2, ge=0, le=5, description="Retries after a failed assistant attempt before the reference is injected (0: inject at the first failure).")
    max_injected_share: float = Field(default=0.34, ge=0, le=1, description="Reject episodes whose share of untrained assistant steps (injected or repeated) exceeds this.")
    tool_retries: int = Field(default=1, ge=0, le=5, description="Re-asks of the tool agent when its answer breaks the plan's expected result; then the episode is rejected.")
    temperature: float = Field(default=0.7, ge=0, le=2, description="Temperature of the user and assistant agents.")
    max_tokens: int = Field(default=1024, ge=64, description="Completion budget of one agent turn.")
    sim_error_rate: float = Field(default=0.1, ge=0, le=1, description="sim backend only: share of deliberately wrong assistant answers.")


_NUMBER = re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)?(?![\w])")


def result_mismatch(expected: Any, got: Any, path: str = "result") -> str | None:
    """Why ``got`` breaks the plan's ``expected`` result (keys and values it fixed), else ``None``.

    Objects: every expected key must be there with a matching value (extra keys are
    fine: the plan fixes what matters, the tool may add detail). Lists: same length,
    element by element. Scalars: :func:`values_equal`.
    """
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return f"{path}: expected an object, got {type(got).__name__}"
        for k, v in expected.items():
            if k not in got:
                return f"{path}.{k}: missing"
            why = result_mismatch(v, got[k], f"{path}.{k}")
            if why:
                return why
        return None
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return f"{path}: expected a list of {len(expected)}, got {json.dumps(got, ensure_ascii=False)[:60]}"
        for i, (e, g) in enumerate(zip(expected, got)):
            why = result_mismatch(e, g, f"{path}[{i}]")
            if why:
                return why
        return None
    return None if values_equal(expected, got) else f"{path}: expected {expected!r}, got {got!r}"


def _is_error(content: str | None) -> bool:
    try:
        value = json.loads(content or "")
    except json.JSONDecodeError:
        return True
    return (isinstance(value, dict) and "error" in value) or value in ([], {})


_OFFER = re.compile(r"(хотите|хотели бы|нужно|нужна|нужен|могу|желаете|подсказать|помочь|что-нибудь|что-то|"
                    r"would you like|do you want|shall i|can i|should i|anything else|is there)", re.IGNORECASE)
_LIST_MARKER = re.compile(r"^\s*\d+[.)]\s", re.MULTILINE)


def _number(text: str) -> float:
    return float(text.replace(",", "."))


def unsupported_numbers(answer: str, context: list[str]) -> list[str]:
    """Numbers in a closing answer that appear in no tool result and no user turn (cheap hallucination check).

    Compared by value (``03`` = ``3``, ``4,5`` = ``4.5``); a number the user said in words supports its
    digits («три билета» → 3); list markers («1. …») are not claims.
    """
    known = {_number(n) for n in _NUMBER.findall(" ".join(context))} | set(numbers_in(" ".join(context)))
    return [n for n in _NUMBER.findall(_LIST_MARKER.sub(" ", answer)) if _number(n) not in known]


class Episode:
    """Mutable episode state for one plan; views are cut from :meth:`state`."""

    def __init__(self, stage: "DialoguesStage", plan: Plan) -> None:
        self.stage, self.plan, self.cfg = stage, plan, stage.config
        self.messages: list[Message] = []
        self.targets: list[dict[str, Any]] = []
        self.n_steps = self.n_injected = self.n_wrong = self.n_repeat = self.n_tool_retries = self.n_truncated = 0
        self.n_user_retries = 0
        self.asked: set[str] = set()  # parameters a trained clarification already asked for
        self.tools = {t.name: t for t in plan.tools_at_tier()}
        self.answered: dict[int, set[str]] = {}
        self._leaks: dict[int, list[str]] = {}  # step → plan_leaks (the plan does not change in an episode)
        self._history = AssistantHistory()  # the assistant's view of self.messages, each message made once

    def state(self, step: int) -> EpisodeState:
        return EpisodeState(plan=self.plan, messages=tuple(self.messages), step=step)

    async def _ask(self, req: ChatRequest, who: str) -> Any:
        """The first choice; a cut-off answer is asked once more (a new sample), then the episode ends."""
        resp = await self.stage.ctx.llm.complete_one(req)
        err = response_error(resp)
        if err and err.startswith("truncated"):
            self.n_truncated += 1
            resp = await self.stage.ctx.llm.complete_one(dataclasses.replace(req, sample_index=req.sample_index + 1))
            err = response_error(resp)
        if err:
            raise EpisodeRejected(f"{who}_{err}")
        return resp.choices[0]

    async def user_turn(self, step: int) -> None:
        state = self.state(step)
        leaks = self._leaks.get(step)
        if leaks is None:
            leaks = self._leaks[step] = plan_leaks(state)
        try:
            view = user_view(state, leaks=leaks)
        except PlanLeak as exc:
            raise EpisodeRejected(f"plan_leak: {exc}") from None
        req = ChatRequest(messages=tuple(render_user_prompt(view)),
                          temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens, tag="fc.user",
                          routing_key=self.plan.id)
        for attempt in range(2):  # a turn with an artefact (role label, pasted JSON…) is asked once more
            choice = await self._ask(dataclasses.replace(req, sample_index=2 * attempt), "user")
            split = split_reasoning(choice.content, choice.reasoning)
            if not split.complete:
                raise EpisodeRejected("user_unclosed_reasoning: the user agent never finished thinking")
            text = split.answer
            if not text:
                raise EpisodeRejected("user_empty: the user agent wrote nothing")
            issues = user_turn_issues(text, self.plan.lang)
            if not issues:
                break
            self.n_user_retries += 1
        else:
            raise EpisodeRejected(f"user_hygiene: {', '.join(issues)}: {text[:60]!r}")
        if any(name in text for name in self.tools):
            raise EpisodeRejected("user_leak: the user message names a tool")
        for arg, forms in withheld_values(self.plan.steps, step).items():
            # as written, inflected, or by a short form or transliteration («в Питере» for Санкт-Петербург)
            hit = next((f for f in forms if said_value(text, f)), None)
            if hit:
                raise EpisodeRejected(f"user_leak: the user said the withheld {arg!r} ({hit!r})")
        if not language_ok(text, self.plan.lang):
            raise EpisodeRejected(f"user_wrong_language: expected {self.plan.lang!r}: {text[:60]!r}")
        self.messages.append(Message(role="user", content=text))

    async def _tool_answer(self, call: ToolCall, expected: ExpectedCall | None, step: int) -> Any:
        """The tool agent's JSON for one call; re-asked while it breaks the planned result."""
        why = ""
        for attempt in range(self.cfg.tool_retries + 1):
            view = tool_view(self.state(step), call, expected.result if expected else None)
            resp = await self.stage.ctx.llm.complete_one(ChatRequest(
                messages=tuple(render_tool_prompt(view)), temperature=0.0 if attempt == 0 else 0.7,
                max_tokens=self.cfg.max_tokens, tag="fc.tool", sample_index=attempt, routing_key=self.plan.id))
            err = response_error(resp)
            if err and err.startswith("truncated"):
                why = f"tool_{err}"
                self.n_truncated += 1
                continue
            if err:
                raise EpisodeRejected(f"tool_{err}")
            value = extract_json(resp.text, expect=(dict, list), reasoning_content=resp.choices[0].reasoning)
            if is_failure(value):
                why = f"tool_{value}"
                continue
            if expected is None or expected.result is None:
                return value
            mismatch = result_mismatch(expected.result, value)
            if mismatch is None:
                return value
            why = f"tool_result_mismatch: {call.name}: {mismatch}"
            self.n_tool_retries += 1
        raise EpisodeRejected(why)

    async def tool_replies(self, calls: list[ToolCall], expected: list[ExpectedCall | None], step: int) -> list[bool]:
        """One tool message per call (answers for the whole round run concurrently); True where it is an error."""
        values = await asyncio.gather(*(self._tool_answer(c, e, step) for c, e in zip(calls, expected)))
        errors: list[bool] = []
        for call, value in zip(calls, values):
            content = json.dumps(value, ensure_ascii=False)
            self.messages.append(Message(role="tool", tool_call_id=call.id, name=call.name, content=content))
            errors.append(_is_error(content))
        return errors

    def _ids(self, calls: list[ToolCall], tag: str) -> list[ToolCall]:
        # ids shaped like a real API's (call_ + 24 alphanumerics), stable per plan, round and try
        return [c.model_copy(update={"id": call_id(self.plan.id, tag, k)}) for k, c in enumerate(calls)]

    def _planned_values(self) -> dict[str, list[Any]]:
        """parameter → every value the plan gives it (slots and call arguments of all steps)."""
        out: dict[str, list[Any]] = {}
        for st in self.plan.steps:
            for k, slot in st.slots.items():
                out.setdefault(k, []).append(slot.value)
            for c in st.calls():
                for k, v in c.arguments.items():
                    out.setdefault(k, []).append(v)
        return out

    def _params(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for t in self.plan.tools:
            for k, v in (t.tool.function.parameters.get("properties") or {}).items():
                out.setdefault(k, v if isinstance(v, dict) else {})
        return out

    def asked_given(self, text: str) -> tuple[list[str], list[str]]:
        """(parameters the text asks for, those of them the current task already gave: user words or tool results)."""
        asked = asked_params(text, self._params(), self.plan.lang)
        # the current task only: what the user and the tools said since the last closing answer (an assistant text
        # right after a tool result). A date or a count an earlier, finished task used («стол на 21 июня») does not
        # answer a new request's question («На какую дату искать рейсы?»)
        start = max((i + 1 for i, m in enumerate(self.messages) if i and m.role == "assistant" and not m.tool_calls
                     and self.messages[i - 1].role == "tool"), default=0)
        window = self.messages[start:]
        users = [m.content or "" for m in window if m.role == "user"]
        results = [m.content or "" for m in window if m.role == "tool" and m.flag != "validator_error"]
        values = self._planned_values()
        given = [p for p in asked if result_has(p, results)
                 or any(given_in(v, users) for v in values.get(p, []) if not isinstance(v, bool))]
        return asked, given

    def _text_scores(self, step: PlanStep, text: str | None, after_results: bool) -> dict[str, Any]:
        """Cheap rule scores of a text target (stored per sample; thresholds are gates)."""
        scores: dict[str, Any] = {}
        issues: list[str] = []
        text = text or ""
        if step.kind == "clarification":
            scores["asks_withheld"] = asks_for(text, step.withheld, self.plan, self.plan.lang)
        questions = text if step.kind == "clarification" else " ".join(
            q for q in re.findall(r"[^.!?\n]*\?", text) if not _OFFER.match(q.strip()))
        if questions:
            _, given = self.asked_given(questions)
            scores["asks_given"] = bool(given)
            issues += [f"asks for {p!r}, which the dialogue already gave" for p in given]
        if after_results:
            users = [m.content or "" for m in self.messages if m.role == "user"]
            results = [m.content or "" for m in self.messages if m.role == "tool" and m.flag != "validator_error"]
            scores["unsupported_numbers"] = len(unsupported_numbers(text, users + results))
            facts = unsupported_facts(text, users + results)
            scores["unsupported_facts"] = len(facts)
            issues += [f"unsupported {f}" for f in facts]
            why = contradiction(text, results[-1]) if results else None
            scores["contradiction_rule"] = why is not None
            if why:
                issues.append(f"contradiction: {why}")
        if issues:
            scores["target_issues"] = json.dumps(issues, ensure_ascii=False)
        return scores

    async def assistant_round(self, step_i: int, step: PlanStep, round_i: int, expected: list[ExpectedCall] | None) -> None:
        """Ask until the answer matches ``expected`` (a call round, or ``None`` = the closing text)."""
        self.n_steps += 1
        target_type = "tool_call" if expected is not None else ("text" if step.kind == "tool_call" else step.kind)
        failures = 0
        answered = self.answered.setdefault(step_i, set())  # tools whose wrong call got a real answer this turn
        while True:
            history = self._history
            messages, tools = render_assistant_request(assistant_view(self.state(step_i), history), history)
            req = ChatRequest(messages=tuple(messages), tools=tuple(tools), temperature=self.cfg.temperature,
                              max_tokens=self.cfg.max_tokens, tag="fc.assistant", routing_key=self.plan.id,
                              meta={"sim_error_rate": self.cfg.sim_error_rate})
            choice = await self._ask(req, "assistant")
            content, calls, parse_problems = parse_assistant_choice(choice)
            reasoning = split_reasoning(choice.content, choice.reasoning).reasoning or None
            calls = self._ids(calls, f"{step_i}_{round_i}_{failures}")
            verdict: StepVerdict = check_step(content, calls, parse_problems, expected, self.tools, self.plan.lang,
                                              question=step.kind == "clarification")
            if verdict.correct:
                if expected is not None and any(c.name in answered for c in calls):
                    # the wrong call was answered: calling again is not what a model should learn
                    self.n_repeat += 1
                    self.messages.append(Message(role="assistant", content=content, tool_calls=calls, flag="repeat"))
                    await self.tool_replies(calls, verdict.pairing, step_i)
                    return
                if target_type == "clarification":
                    asked = set(self.asked_given(content or "")[0])
                    if asked and asked <= self.asked:  # asked again what was asked before: never a target
                        self.n_repeat += 1
                        self.messages.append(Message(role="assistant", content=content, flag="repeat"))
                        return
                    self.asked |= asked
                after_results = expected is None and bool(step.rounds)
                target: dict[str, Any] = {"index": len(self.messages), "step": step_i, "round": round_i,
                                          "target_type": target_type,
                                          "expected": [c.model_dump(exclude={"result"}) for c in expected or []],
                                          "scores": {} if expected is not None else
                                          self._text_scores(step, content, after_results)}
                if target_type == "clarification":
                    target["asks"] = list(step.withheld)
                self.targets.append(target)
                self.messages.append(Message(role="assistant", content=content, tool_calls=calls or None, train=True,
                                             flag="recovered" if failures else None, reasoning=reasoning))
                if expected is not None:
                    await self.tool_replies(calls, verdict.pairing, step_i)
                return
            self.n_wrong += 1
            failures += 1
            self.messages.append(Message(role="assistant", content=content, tool_calls=calls or None, flag="wrong",
                                         reasoning=reasoning))
            answered |= await self.reply_to_wrong(step_i, calls, verdict)
            if failures > self.cfg.max_retries:
                await self.inject(step_i, step, round_i, expected)
                return

    async def reply_to_wrong(self, step_i: int, calls: list[ToolCall], verdict: StepVerdict) -> set[str]:
        """A wrong call gets the validator's error or a realistic tool reply; a wrong text gets the user again.

        Returns the names of tools whose wrong call got a non-error answer.
        """
        if not calls:
            await self.user_turn(step_i)
            return set()
        ok_calls: list[ToolCall] = []
        for call in calls:
            err = verdict.call_errors.get(call.id or "")
            if err:
                self.messages.append(Message(role="tool", tool_call_id=call.id, name=call.name, flag="validator_error",
                                             content=json.dumps({"error": err}, ensure_ascii=False)))
            else:
                ok_calls.append(call)
        if not ok_calls:
            return set()
        errors = await self.tool_replies(ok_calls, [None] * len(ok_calls), step_i)
        return {c.name for c, e in zip(ok_calls, errors) if not e}

    async def inject(self, step_i: int, step: PlanStep, round_i: int, expected: list[ExpectedCall] | None) -> None:
        """Insert the reference answer (never a target) and, for calls, the plan's results."""
        self.n_injected += 1
        if expected is None:
            self.messages.append(Message(role="assistant", content=step.final_answer, flag="injected"))
            return
        calls = self._ids([e.to_call() for e in expected], f"{step_i}_{round_i}_ref")
        self.messages.append(Message(role="assistant", tool_calls=calls, flag="injected"))
        for call, exp in zip(calls, expected):
            self.messages.append(Message(role="tool", tool_call_id=call.id, name=call.name,
                                         content=json.dumps(exp.result, ensure_ascii=False)))

    async def run(self) -> None:
        for step_i, step in enumerate(self.plan.steps):
            await self.user_turn(step_i)
            for round_i, expected in enumerate(step.rounds):
                await self.assistant_round(step_i, step, round_i, expected)
            await self.assistant_round(step_i, step, len(step.rounds), None)


def _transcript(ep_id: str, plan: Plan, episode: Episode) -> str:
    """A rejected episode's messages up to the rejection, kept on its row so the explorer can show it (never trained)."""
    return Dialogue(id=ep_id, messages=episode.messages, tools=plan.tools_at_tier(), lang=plan.lang,
                    meta={"plan_id": plan.id, "rejected": True}).model_dump_json()


@register_stage
class DialoguesStage(Stage[DialoguesConfig]):
    kind = "fc.dialogues"
    prompt_templates: ClassVar[tuple[Any, ...]] = (CATALOGUE.select(*USER_KEYS, *TOOL_KEYS, *ASSISTANT_KEYS),)
    reads = (cols.PLAN,)
    writes = cols.DIALOGUES

    async def process(self, row: Row) -> list[Row]:
        plan: Plan = cols.PLAN.value(row)
        ep_id = stable_id(plan.id, prefix="ep-")
        base = {"plan_id": plan.id, "topic_id": plan.topic_id, "lang": plan.lang, "sample_type": plan.sample_type,
                "tier": plan.tier}
        episode = Episode(self, plan)
        try:
            await episode.run()
        except EpisodeRejected as exc:
            return [rejected(ep_id, str(exc), **base, n_wrong=episode.n_wrong, n_injected=episode.n_injected,
                             n_repeat=episode.n_repeat, n_steps=episode.n_steps,
                             dialogue=_transcript(ep_id, plan, episode))]
        untrained = episode.n_injected + episode.n_repeat
        share = untrained / max(1, episode.n_steps)
        stats = {"n_wrong": episode.n_wrong, "n_injected": episode.n_injected, "n_repeat": episode.n_repeat,
                 "n_tool_retries": episode.n_tool_retries, "n_truncated": episode.n_truncated,
                 "n_user_retries": episode.n_user_retries,
                 "n_steps": episode.n_steps,
                 "n_targets": len(episode.targets), "n_messages": len(episode.messages)}
        if share > self.config.max_injected_share:
            return [rejected(ep_id, f"too_many_injected: {untrained}/{episode.n_steps} steps untrained "
                             f"({episode.n_injected} injected, {episode.n_repeat} repeated)", **base, **stats,
                             dialogue=_transcript(ep_id, plan, episode))]
        dialogue = Dialogue(id=ep_id, messages=episode.messages, tools=plan.tools_at_tier(), lang=plan.lang,
                            meta={"plan_id": plan.id, "sample_type": plan.sample_type, "tier": plan.tier,
                                  "targets": episode.targets, "step_kinds": [st.kind for st in plan.steps],
                                  "step_tools": [sorted({c.name for c in st.calls()}) for st in plan.steps]})
        return [ok(ep_id, **base, **stats, dialogue=dialogue.model_dump_json())]
