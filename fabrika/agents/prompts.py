"""Role prompts of the FC pipeline (user, assistant, tool, planner, judges), written natively in Russian and English.

The texts are data beside this module, one catalogue per language (``prompts_ru.yaml``,
``prompts_en.yaml``; :class:`fabrika.prompts.PromptCatalogue`, ``str.format`` placeholders,
literal braces doubled), so they can be read and edited without touching code, and a
placeholder lint checks that both languages use the same fields. Each FC stage declares the
keys it renders (``prompt_templates = (CATALOGUE.select("planner", "judge"),)``); those
templates are in its fingerprint (:mod:`fabrika.pipeline.lineage`), so editing one template
redoes exactly the stages that render it.

Structured inputs go into a fenced ``json`` block so a real model reads them easily and the
``sim`` backend can parse them back (it is a stand-in that only sees the request, like a
model would). Stages that want JSON back also send a ``response_format``
(:mod:`fabrika.generators.fc.structured`); the prompt still shows the shape, for servers
that ignore it.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from fabrika.prompts import PromptCatalogue

HERE = Path(__file__).resolve().parent
#: The FC role prompts, Russian and English (``assistant_system`` holds a list of variants).
CATALOGUE = PromptCatalogue("agents", {"ru": HERE / "prompts_ru.yaml", "en": HERE / "prompts_en.yaml"},
                            syntax="format")

#: Keys each FC role renders (what the FC stages' ``prompt_templates`` select).
USER_KEYS = ("user_system", "user_turn", "role_user", "role_assistant", "empty_dialogue")
TOOL_KEYS = ("tool_system", "tool_turn")
ASSISTANT_KEYS = ("assistant_system",)


def prompt_text(key: str, lang: str) -> str:
    """The template ``key`` in ``lang`` ('ru' or 'en')."""
    if key == "assistant_system":
        return assistant_system(lang)
    data = CATALOGUE.data
    if key not in data:
        raise KeyError(f"unknown prompt {key!r}; known: {sorted(data)}")
    by_lang = data[key]
    if lang not in by_lang:
        raise ValueError(f"prompt {key!r} has no language {lang!r}; use one of {sorted(by_lang)}")
    text: str = by_lang[lang]
    return text


def assistant_system(lang: str, key: str | None = None) -> str:
    """One of the shipped assistant system prompts, chosen by a stable hash of ``key`` (the plan id).

    ``key=None`` gives the first (the default one).
    """
    variants = CATALOGUE.data["assistant_system"].get(lang)
    if not variants:
        raise ValueError(f"no assistant system prompt for language {lang!r}; use one of "
                         f"{sorted(CATALOGUE.data['assistant_system'])}")
    text: str = variants[0] if key is None else variants[zlib.crc32(key.encode("utf-8")) % len(variants)]
    return text
