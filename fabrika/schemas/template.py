"""Chat templates rendered the way ``transformers.apply_chat_template(tokenize=False)`` renders them.

A sandboxed jinja2 environment with ``trim_blocks``, ``lstrip_blocks``,
``loopcontrols``, a ``tojson`` that keeps Unicode, and ``raise_exception``. The
Qwen3 template ships in ``fabrika/schemas/templates`` (Apache-2.0). The length
scorer counts tokens of rows rendered with it and the export validates against
it, so both see the same text.

``strftime_now`` (Llama 3.x templates write "Today Date: ..." with it) formats a fixed date,
:data:`TEMPLATE_DATE`, not the clock: a rendered row — a length verdict, an export's ``text`` —
must not change with the day it was made on. A template that reads ``date_string`` first, as
Llama's do, can still be given another date.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

DEFAULT_TEMPLATE = "qwen3.jinja"
#: The date ``strftime_now`` formats (the fallback date Llama 3.1's own template uses without it).
TEMPLATE_DATE = date(2024, 7, 26)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # transformers overrides jinja's tojson (which HTML-escapes and sorts keys).
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_fixed(fmt: str) -> str:
    return datetime(TEMPLATE_DATE.year, TEMPLATE_DATE.month, TEMPLATE_DATE.day).strftime(fmt)


class ChatTemplate:
    """A compiled chat template rendered like ``transformers.apply_chat_template(tokenize=False)``."""

    def __init__(self, source: str, name: str = "<template>") -> None:
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_fixed
        self.name = name
        self.source = source
        self._template = env.from_string(source)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None,
               add_generation_prompt: bool = False, **kwargs: Any) -> str:
        return self._template.render(messages=messages, tools=tools or None,
                                     add_generation_prompt=add_generation_prompt, **kwargs)


@lru_cache(maxsize=8)
def load_template(path: str | None = None) -> ChatTemplate:
    """The packaged Qwen3 template, or a ``.jinja`` file at ``path``."""
    if path is None:
        source = resources.files("fabrika.schemas").joinpath("templates", DEFAULT_TEMPLATE).read_text("utf-8")
        return ChatTemplate(source, DEFAULT_TEMPLATE)
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"chat template {str(p)!r} does not exist; pass a .jinja file or omit it for Qwen3")
    return ChatTemplate(p.read_text("utf-8"), p.name)


__all__ = ["DEFAULT_TEMPLATE", "ChatTemplate", "load_template"]
