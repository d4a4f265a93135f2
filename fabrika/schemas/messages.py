"""Chat messages and dialogues."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fabrika.schemas.tools import Tool, ToolCall

Role = Literal["system", "user", "assistant", "tool"]
MessageFlag = Literal["wrong", "injected", "recovered", "validator_error", "repeat"]


class Message(BaseModel):
    """One chat message.

    ``train`` marks a training target; ``flag`` says why a turn is special
    (``wrong``: a failed assistant step kept as context; ``injected``: the
    reference step inserted after retries ran out; ``repeat``: a right call made
    again after a wrong call to the same tool was answered). None is ever a target.
    ``reasoning`` is the assistant's hidden reasoning; other roles never see it.
    """

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None
    train: bool = False
    flag: MessageFlag | None = None

    @model_validator(mode="after")
    def _check_shape(self) -> "Message":
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only assistant messages may carry tool_calls, not {self.role!r}")
        if self.train and self.role != "assistant":
            raise ValueError("only assistant messages can be training targets")
        if self.train and self.flag in ("wrong", "injected", "repeat"):
            raise ValueError(f"a {self.flag!r} turn can never be a training target")
        return self

    def to_chat(self) -> dict[str, Any]:
        """The OpenAI/chat-template dict, without fabrika's own fields or ``None`` keys."""
        out: dict[str, Any] = {"role": self.role, "content": self.content if self.content is not None else ""}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        return out


class Dialogue(BaseModel):
    """A conversation with the tools that were visible to the assistant."""

    model_config = ConfigDict(extra="forbid")

    id: str
    messages: list[Message] = Field(default_factory=list)
    tools: list[Tool] = Field(default_factory=list)
    lang: str | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


Episode = Dialogue
