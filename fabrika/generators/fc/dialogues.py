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
reference is injected (``flag="injected"``, never a target). Episodes with a
larger injected share than ``max_injected_share`` are rejected, as are
episodes whose user or tool agent answers are unusable (reasons recorded).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from pydantic import Field

from fabrika.agents.visibility import (
    EpisodeState, assistant_view, render_assistant_request, render_tool_prompt, render_user_prompt, tool_view,
    user_view,
)
from fabrika.generators.fc.common import language_ok, response_error
from fabrika.generators.fc.step_check import StepVerdict, check_step, parse_assistant_choice
from fabrika.generators.parsing import extract_json, is_failure
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.fc import ExpectedCall, Plan, PlanStep
from fabrika.schemas.ids import stable_id
from fabrika.schemas.messages import Dialogue, Message
from fabrika.schemas.tools import ToolCall


class EpisodeRejected(Exception):
    """Ends one episode with a recorded reason (never escapes ``process``)."""


class DialoguesConfig(StageConfig):
    """Config of ``fc.dialogues`` (input: ``fc.plans``)."""

    kind: Literal["fc.dialogues"] = "fc.dialogues"
    max_retries: int = Field(default=2, ge=0, le=5, description="Retries after a failed assistant attempt before the reference is injected (0: inject at the first failure).")
    max_injected_share: float = Field(default=0.34, ge=0, le=1, description="Reject episodes whose share of injected assistant steps exceeds this.")
    temperature: float = Field(default=0.7, ge=0, le=2, description="Temperature of the user and assistant agents.")
    max_tokens: int = Field(default=1024, ge=64, description="Completion budget of one agent turn.")
    sim_error_rate: float = Field(default=0.1, ge=0, le=1, description="sim backend only: share of deliberately wrong assistant answers.")


class Episode:
    """Mutable episode state for one plan; views are cut from :meth:`state`."""

    def __init__(self, stage: "DialoguesStage", plan: Plan) -> None:
        self.stage, self.plan, self.cfg = stage, plan, stage.config
        self.messages: list[Message] = []
        self.targets: list[dict[str, Any]] = []
        self.n_steps = self.n_injected = self.n_wrong = 0
        self.tools = {t.name: t for t in plan.tools_at_tier()}

    def state(self, step: int) -> EpisodeState:
        return EpisodeState(plan=self.plan, messages=tuple(self.messages), step=step)

    async def _ask(self, req: ChatRequest, who: str) -> Any:
        resp = await self.stage.ctx.llm.complete_one(req)
        err = response_error(resp)
        if err:
            raise EpisodeRejected(f"{who}_{err}")
        return resp.choices[0]

    async def user_turn(self, step: int) -> None:
        req = ChatRequest(messages=tuple(render_user_prompt(user_view(self.state(step)))),
                          temperature=self.cfg.temperature, max_tokens=self.cfg.max_tokens, tag="fc.user", routing_key=self.plan.id)
        text = ((await self._ask(req, "user")).content or "").strip()
        if not text:
            raise EpisodeRejected("user_empty: the user agent wrote nothing")
        if any(name in text for name in self.tools):
            raise EpisodeRejected("user_leak: the user message names a tool")
        if not language_ok(text, self.plan.lang):
            raise EpisodeRejected(f"user_wrong_language: expected {self.plan.lang!r}: {text[:60]!r}")
        self.messages.append(Message(role="user", content=text))

    async def tool_replies(self, calls: list[ToolCall], expected: list[ExpectedCall | None], step: int) -> None:
        """One tool message per call, from the tool agent (answers for the whole round run concurrently)."""
        reqs = [ChatRequest(messages=tuple(render_tool_prompt(tool_view(self.state(step), c, e.result if e else None))),
                            temperature=0.0, max_tokens=self.cfg.max_tokens, tag="fc.tool", routing_key=self.plan.id) for c, e in zip(calls, expected)]
        resps = await self.stage.ctx.llm.complete(reqs)
        for call, resp in zip(calls, resps):
            err = response_error(resp)
            if err:
                raise EpisodeRejected(f"tool_{err}")
            value = extract_json(resp.text, expect=(dict, list))
            if is_failure(value):
                raise EpisodeRejected(f"tool_{value}")
            self.messages.append(Message(role="tool", tool_call_id=call.id, name=call.name,
                                         content=json.dumps(value, ensure_ascii=False)))

    def _ids(self, calls: list[ToolCall], tag: str) -> list[ToolCall]:
        return [c.model_copy(update={"id": f"call_{tag}_{k}"}) for k, c in enumerate(calls)]

    async def assistant_round(self, step_i: int, step: PlanStep, round_i: int, expected: list[ExpectedCall] | None) -> None:
        """Ask until the answer matches ``expected`` (a call round, or ``None`` = the closing text)."""
        self.n_steps += 1
        target_type = "tool_call" if expected is not None else ("text" if step.kind == "tool_call" else step.kind)
        failures = 0
        while True:
            messages, tools = render_assistant_request(assistant_view(self.state(step_i)))
            req = ChatRequest(messages=tuple(messages), tools=tuple(tools), temperature=self.cfg.temperature,
                              max_tokens=self.cfg.max_tokens, tag="fc.assistant", routing_key=self.plan.id,
                              meta={"sim_error_rate": self.cfg.sim_error_rate})
            choice = await self._ask(req, "assistant")
            content, calls, parse_problems = parse_assistant_choice(choice)
            calls = self._ids(calls, f"{step_i}_{round_i}_{failures}")
            verdict: StepVerdict = check_step(content, calls, parse_problems, expected, self.tools, self.plan.lang)
            if verdict.correct:
                self.targets.append({"index": len(self.messages), "step": step_i, "round": round_i,
                                     "target_type": target_type,
                                     "expected": [c.model_dump(exclude={"result"}) for c in expected or []]})
                self.messages.append(Message(role="assistant", content=content, tool_calls=calls or None, train=True,
                                             flag="recovered" if failures else None))
                if expected is not None:
                    await self.tool_replies(calls, verdict.pairing, step_i)
                return
            self.n_wrong += 1
            failures += 1
            self.messages.append(Message(role="assistant", content=content, tool_calls=calls or None, flag="wrong"))
            await self.reply_to_wrong(step_i, calls, verdict)
            if failures > self.cfg.max_retries:
                await self.inject(step_i, step, round_i, expected)
                return

    async def reply_to_wrong(self, step_i: int, calls: list[ToolCall], verdict: StepVerdict) -> None:
        """A wrong call gets the validator's error or a realistic tool reply; a wrong text gets the user again."""
        if not calls:
            await self.user_turn(step_i)
            return
        ok_calls: list[ToolCall] = []
        for call in calls:
            err = verdict.call_errors.get(call.id or "")
            if err:
                self.messages.append(Message(role="tool", tool_call_id=call.id, name=call.name, flag="validator_error",
                                             content=json.dumps({"error": err}, ensure_ascii=False)))
            else:
                ok_calls.append(call)
        if ok_calls:
            await self.tool_replies(ok_calls, [None] * len(ok_calls), step_i)

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


@register_stage
class DialoguesStage(Stage):
    kind: ClassVar[str] = "fc.dialogues"
    Config: ClassVar[type[StageConfig]] = DialoguesConfig

    async def process(self, row: Row) -> list[Row]:
        plan = Plan.model_validate_json(row["plan"])
        ep_id = stable_id(plan.id, prefix="ep-")
        base = {"plan_id": plan.id, "topic_id": plan.topic_id, "lang": plan.lang, "sample_type": plan.sample_type,
                "tier": plan.tier}
        episode = Episode(self, plan)
        try:
            await episode.run()
        except EpisodeRejected as exc:
            return [rejected(ep_id, str(exc), **base, n_wrong=episode.n_wrong, n_injected=episode.n_injected)]
        share = episode.n_injected / max(1, episode.n_steps)
        stats = {"n_wrong": episode.n_wrong, "n_injected": episode.n_injected, "n_targets": len(episode.targets),
                 "n_messages": len(episode.messages)}
        if share > self.config.max_injected_share:  # type: ignore[attr-defined]
            return [rejected(ep_id, f"too_many_injected: {episode.n_injected}/{episode.n_steps} steps", **base, **stats)]
        dialogue = Dialogue(id=ep_id, messages=episode.messages, tools=plan.tools_at_tier(), lang=plan.lang,
                            meta={"plan_id": plan.id, "sample_type": plan.sample_type, "tier": plan.tier,
                                  "targets": episode.targets})
        return [ok(ep_id, **base, **stats, dialogue=dialogue.model_dump_json())]
