"""Request builders for every IF role (Curator's ``prompt`` half; parsers are in ``parsing``).

Prompt texts live in ``fabrika/data/instruct/prompts_ru.yaml`` (jinja2) so they can be
read and edited without touching code. Tags name the role for accounting and ``sim``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2
import yaml

from fabrika.inputs import DATA_DIR
from fabrika.llm.types import ChatRequest
from fabrika.sandbox.precheck import allowed_summary

PROMPTS_FILE = DATA_DIR / "instruct" / "prompts_ru.yaml"

TAG_EXPAND = "if.expand"
TAG_VERIFIERS = "if.verifiers"
TAG_BACKTRANSLATE = "if.backtranslate"
TAG_RESPOND = "if.respond"
TAG_JUDGE_QUALITY = "if.judge.quality"

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


@lru_cache(maxsize=1)
def _prompts() -> dict[str, dict[str, str]]:
    with open(PROMPTS_FILE, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def render(role: str, **variables: Any) -> tuple[dict[str, str], ...]:
    """System + user messages for ``role`` with ``variables`` filled in."""
    spec = _prompts()[role]
    messages = []
    if spec.get("system"):
        messages.append({"role": "system", "content": _ENV.from_string(spec["system"]).render(**variables).strip()})
    messages.append({"role": "user", "content": _ENV.from_string(spec["user"]).render(**variables).strip()})
    return tuple(messages)


def expand_request(seeds: list[str], n: int, *, sample_index: int, model: str | None,
                   temperature: float) -> ChatRequest:
    """Ask for ``n`` new format constraints in the style of ``seeds``."""
    return ChatRequest(messages=render("expand", seeds=seeds, n=n), model=model, temperature=temperature,
                       sample_index=sample_index, tag=TAG_EXPAND)


def verifier_request(constraint: str, *, sample_index: int, model: str | None, temperature: float,
                     meta: dict[str, Any] | None = None, lang: str = "ru") -> ChatRequest:
    """Ask for one ``evaluate(response)`` function plus 3 labelled test cases.

    The prompt names exactly what the sandbox's pre-check allows (``allowed_summary``), so a
    model is not refused for using a module the prompt never mentioned; ``lang="en"`` asks in
    English (and for English test cases)."""
    role = "verifiers_en" if lang == "en" else "verifiers"
    messages = render(role, constraint=constraint, allowed=allowed_summary(lang))
    return ChatRequest(messages=messages, model=model, temperature=temperature,
                       sample_index=sample_index, tag=TAG_VERIFIERS, meta=dict(meta or {}))


def backtranslate_request(code: str, *, model: str | None, sample_index: int = 0) -> ChatRequest:
    """Ask which instruction ``code`` checks (temperature 0: a reading, not a creative task)."""
    return ChatRequest(messages=render("backtranslate", code=code), model=model, temperature=0.0,
                       sample_index=sample_index, tag=TAG_BACKTRANSLATE)


def respond_request(messages: list[dict[str, str]], *, sample_index: int, model: str | None,
                    temperature: float, max_tokens: int | None) -> ChatRequest:
    """A policy/teacher answer to the IF prompt itself."""
    return ChatRequest(messages=tuple(messages), model=model, temperature=temperature, max_tokens=max_tokens,
                       sample_index=sample_index, tag=TAG_RESPOND)


def judge_quality_request(query: str, instructions: list[str], response: str, *, model: str | None) -> ChatRequest:
    """Rate a response's substance 0–10 (format is checked by code, not by the judge)."""
    return ChatRequest(messages=render("judge_quality", query=query, instructions=instructions, response=response),
                       model=model, temperature=0.0, tag=TAG_JUDGE_QUALITY)
