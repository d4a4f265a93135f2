"""What the user would see of a completion: reasoning removed, the answer kept.

Reasoning models put their chain of thought into the completion text, and every
consumer of an answer — rewards, response gates, the difficulty scorer, JSON
parsers — must grade what follows it, never the reasoning itself:

* Qwen3 / DeepSeek-R1: ``<think> … </think>`` before the answer. When the chat
  template pre-fills ``<think>`` in the prompt, the completion holds only the
  closing tag. A block that is opened and never closed means the model was cut
  off while thinking: there is no answer.
* gpt-oss (harmony): ``<|channel|>analysis<|message|> … <|end|>`` then
  ``<|start|>assistant<|channel|>final<|message|> … <|return|>``. With special
  tokens stripped by the server the same text reads ``analysis…assistantfinal…``.
* OpenAI-compatible servers with a reasoning parser (vLLM ``--reasoning-parser``)
  return the reasoning separately as ``reasoning_content``; ``content`` is then the
  answer, though a misconfigured server may still leave tags in it.

:func:`split_reasoning` returns both parts and whether the answer is complete;
:func:`answer_text` returns only what the user would see, for any completion
shape a trainer or a stage hands over (text, message dict, list of messages).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["SplitCompletion", "answer_text", "split_reasoning"]

_THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking|reasoning)>", re.IGNORECASE)
_HARMONY_MESSAGE = re.compile(
    r"<\|channel\|>(?P<channel>\w+)(?:\s+to=[^<]*)?(?:<\|constrain\|>[^<]*)?<\|message\|>(?P<body>.*?)"
    r"(?=<\|end\|>|<\|return\|>|<\|call\|>|<\|start\|>|<\|channel\|>|\Z)",
    re.DOTALL,
)
# harmony rendered with special tokens skipped: "analysis<thoughts>assistantfinal<answer>"
_HARMONY_FLAT = re.compile(r"^\s*analysis(?P<reasoning>.*?)assistantfinal(?P<answer>.*)\Z", re.DOTALL)


@dataclass(frozen=True)
class SplitCompletion:
    """A completion split into its reasoning and its visible answer.

    Attributes:
        reasoning: the chain of thought (empty when there was none).
        answer: what the user would see, stripped of surrounding whitespace.
        complete: False when a reasoning block was never closed (truncated while
            thinking); ``answer`` then holds only what came before that block —
            empty when the completion opened with it, which must be graded as no answer.
    """

    reasoning: str
    answer: str
    complete: bool = True


def _split_harmony(text: str) -> SplitCompletion | None:
    messages = list(_HARMONY_MESSAGE.finditer(text))
    if messages:
        reasoning = "\n".join(m["body"].strip() for m in messages if m["channel"] == "analysis")
        finals = [m["body"].strip() for m in messages if m["channel"] == "final"]
        if finals:
            return SplitCompletion(reasoning, "\n".join(finals).strip())
        # analysis (or a commentary tool call) with no final message: nothing to show
        return SplitCompletion(reasoning, "", complete=False)
    flat = _HARMONY_FLAT.match(text)
    if flat:
        return SplitCompletion(flat["reasoning"].strip(), flat["answer"].strip())
    return None


def _split_think(text: str) -> SplitCompletion:
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        last = closes[-1]
        head = text[: last.start()]
        answer = text[last.end() :]
        reasoning = _THINK_CLOSE.sub("", _THINK_OPEN.sub("", head)).strip()
        # a block opened again after the last close was cut off mid-thought
        reopened = _THINK_OPEN.search(answer)
        if reopened:
            return SplitCompletion(reasoning, answer[: reopened.start()].strip(), complete=False)
        return SplitCompletion(reasoning, answer.strip())
    opened = _THINK_OPEN.search(text)
    if opened:  # cut off while thinking: only what came before the block was shown
        return SplitCompletion(text[opened.end() :].strip(), text[: opened.start()].strip(), complete=False)
    return SplitCompletion("", text.strip())


def split_reasoning(text: str | None, reasoning_content: str | None = None) -> SplitCompletion:
    """Split ``text`` (a completion's content) into reasoning and answer.

    Args:
        text: the completion text as the server returned it.
        reasoning_content: the server's separate reasoning field, if any.
    """
    text = text or ""
    if "<|channel|>" in text or _HARMONY_FLAT.match(text):
        split = _split_harmony(text) or SplitCompletion("", text.strip())
    else:
        split = _split_think(text)
    if reasoning_content:
        reasoning = "\n".join(p for p in (reasoning_content.strip(), split.reasoning) if p)
        return SplitCompletion(reasoning, split.answer, split.complete)
    return split


def _content_of(message: Any) -> tuple[str | None, str | None]:
    if isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return content, message.get("reasoning_content") or message.get("reasoning")
    content = getattr(message, "content", None)
    reasoning = getattr(message, "reasoning_content", None) or getattr(message, "reasoning", None)
    return content, reasoning


def answer_text(completion: Any) -> str:
    """The text a user would see of ``completion``; empty when there is no answer.

    Accepts a plain string, a message dict or object (``content`` and optional
    ``reasoning_content``), or a list of messages as TRL passes conversational
    completions (the last assistant message is the answer).
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return split_reasoning(completion).answer
    if isinstance(completion, (list, tuple)):
        assistants = [m for m in completion if (m.get("role") if isinstance(m, dict) else getattr(m, "role", None)) in (None, "assistant")]
        if not assistants:
            return ""
        completion = assistants[-1]
    content, reasoning = _content_of(completion)
    return split_reasoning(content, reasoning).answer
