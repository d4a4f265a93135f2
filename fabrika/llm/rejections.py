"""The one wording of an unusable LLM answer, for every rejection that records one.

A failed request is ``llm_error: <kind>: <message>`` (reports group reasons by the
part before the first ``:``, so the key is ``llm_error`` and ``kind`` is the
:data:`fabrika.errors.LLMErrorKind`); an answer cut off at ``max_tokens`` is
:data:`TRUNCATED`. Stages (``fabrika.pipeline.llm_stage``), scorers and reward
judges all word them through this module, so a data user filters one spelling.
"""

from __future__ import annotations

from fabrika.errors import LLMError
from fabrika.llm.types import ChatResponse

#: Reason of an answer cut off at ``max_tokens`` (``finish_reason == "length"``).
TRUNCATED = "truncated: answer cut off (finish_reason=length)"
#: Reason of a response without an error and without any choice (a server that broke the protocol).
NO_CHOICES = "empty_answer: no choices"
#: Longest server message kept in an ``llm_error`` reason (the row's ``raw_excerpt`` keeps more).
MESSAGE_CHARS = 300


def llm_error_reason(error: LLMError) -> str:
    """``llm_error: <kind>: <message>`` — the one wording of a failed request (the key is ``llm_error``)."""
    message = " ".join(str(error.message).split())
    if len(message) > MESSAGE_CHARS:
        message = message[:MESSAGE_CHARS] + "…"
    return f"llm_error: {error.kind}: {message}" if message else f"llm_error: {error.kind}"


def answer_problem(response: ChatResponse, *, allow_truncated: bool = False) -> str | None:
    """The standard rejection reason of an unusable answer (failed, no choices, truncated), else ``None``."""
    if response.error is not None:
        return llm_error_reason(response.error)
    if not response.choices:
        return NO_CHOICES
    if response.choices[0].truncated and not allow_truncated:
        return TRUNCATED
    return None


__all__ = ["MESSAGE_CHARS", "NO_CHOICES", "TRUNCATED", "answer_problem", "llm_error_reason"]
