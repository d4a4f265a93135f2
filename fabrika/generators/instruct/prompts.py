"""Request builders for every IF role (Curator's ``prompt`` half; parsers are in ``parsing``).

Prompt texts live beside this module, one catalogue per language (``prompts_ru.yaml``,
``prompts_en.yaml``; :class:`fabrika.prompts.PromptCatalogue`, jinja2), so they can be read
and edited without touching code. Stages declare the roles they render
(``prompt_templates = (CATALOGUE.select("expand"),)``): those texts are in the stage's
fingerprint, so an edited prompt redoes the stage. Tags name the role for accounting and ``sim``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fabrika.llm.types import ChatRequest
from fabrika.prompts import PromptCatalogue

HERE = Path(__file__).resolve().parent
PROMPTS_FILE = HERE / "prompts_ru.yaml"
#: The IF roles' prompts, Russian and English.
CATALOGUE = PromptCatalogue("instruct", {"ru": PROMPTS_FILE, "en": HERE / "prompts_en.yaml"})

TAG_EXPAND = "if.expand"
TAG_VERIFIERS = "if.verifiers"
TAG_BACKTRANSLATE = "if.backtranslate"
TAG_RESPOND = "if.respond"
TAG_JUDGE_QUALITY = "if.judge.quality"

def render(role: str, lang: str = "ru", **variables: Any) -> tuple[dict[str, str], ...]:
    """System + user messages for ``role`` in ``lang`` with ``variables`` filled in."""
    return CATALOGUE.render(role, lang, **variables)


def expand_request(seeds: list[str], n: int, *, sample_index: int, model: str | None,
                   temperature: float) -> ChatRequest:
    """Ask for ``n`` new format constraints in the style of ``seeds``."""
    return ChatRequest(messages=render("expand", seeds=seeds, n=n), model=model, temperature=temperature,
                       sample_index=sample_index, tag=TAG_EXPAND)


def verifier_request(constraint: str, *, sample_index: int, model: str | None, temperature: float,
                     meta: dict[str, Any] | None = None) -> ChatRequest:
    """Ask for one ``evaluate(response)`` function plus 3 labelled test cases."""
    return ChatRequest(messages=render("verifiers", constraint=constraint), model=model, temperature=temperature,
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
