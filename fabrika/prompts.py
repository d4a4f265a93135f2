"""Prompt catalogues: prompt templates as data, one file per language, beside the stages that render them.

A catalogue maps a prompt key (a role: ``expand``, ``verifiers``) to its template in
each language; a template is a string or a mapping of parts (``system``, ``user``, or
named variants such as the dialogue tactics, or a list of variants such as the FC
assistant system prompts), written in jinja2 (``{{ field }}``) or, for the FC role prompts
(:mod:`fabrika.agents.prompts`), ``str.format`` (``{field}``).

Why data, not code: a prompt is read and edited by people who do not read Python,
``tests/test_prompt_catalogues.py`` checks that the Russian and English templates of a
key use the same fields (a placeholder added to one language only is a bug a run would
meet as a ``StrictUndefined`` error, or worse, never), and
:mod:`fabrika.pipeline.lineage` hashes the templates a stage renders into its
fingerprint (:meth:`PromptCatalogue.select`), so an edited prompt redoes that stage.

Layouts::

    PromptCatalogue("instruct", {"ru": DIR / "prompts_ru.yaml", "en": DIR / "prompts_en.yaml"})
        # each file: {key: template}
    PromptCatalogue.nested("instruct.dialogue", DIR / "prompts_dialogue.yaml")
        # one file: {key: {lang: template}}
    PromptCatalogue("agents", {"ru": ..., "en": ...}, syntax="format")
        # str.format templates (the FC role prompts)
    PromptCatalogue.from_mapping("lin", {"ask": {"ru": "...", "en": "..."}})
        # a Python mapping {key: {lang: template}} (tests, plugins)

Files are read once, on first use; :attr:`PromptCatalogue.data` is what renders and
what is hashed, so the two cannot disagree.
"""

from __future__ import annotations

import hashlib
import json
import string
from pathlib import Path
from typing import Any, Literal, Mapping

import jinja2
import jinja2.meta
import yaml

Syntax = Literal["jinja2", "format"]
Template = Any  # str | Mapping[str, Template]

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)

#: Every catalogue created, by name (the lint test walks them).
CATALOGUES: dict[str, "PromptCatalogue"] = {}


def _strings(template: Template, prefix: str = "") -> list[tuple[str, str]]:
    """``(part path, text)`` of every string inside a template."""
    if isinstance(template, str):
        return [(prefix, template)]
    if isinstance(template, Mapping):
        out = []
        for k, v in template.items():
            out.extend(_strings(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return []


def template_fields(text: str, syntax: Syntax = "jinja2") -> set[str]:
    """The placeholders a template reads (jinja2's undeclared variables, or ``str.format`` field names)."""
    if syntax == "format":
        return {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(text) if f}
    return set(jinja2.meta.find_undeclared_variables(_ENV.parse(text)))


class PromptCatalogue:
    """Templates by key and language (see the module docstring). Registered in :data:`CATALOGUES` by name."""

    def __init__(self, name: str, files: Mapping[str, Path] | None = None, *, syntax: Syntax = "jinja2",
                 nested_file: Path | None = None, mapping: Mapping[str, Mapping[str, Template]] | None = None) -> None:
        self.name = name
        self.files = dict(files or {})
        self.nested_file = nested_file
        self.syntax: Syntax = syntax
        self._data: dict[str, dict[str, Template]] | None = (
            {k: dict(v) for k, v in mapping.items()} if mapping is not None else None)
        CATALOGUES[name] = self

    @classmethod
    def nested(cls, name: str, path: Path, *, syntax: Syntax = "jinja2") -> "PromptCatalogue":
        """One file whose keys hold a template per language: ``{key: {lang: template}}``."""
        return cls(name, syntax=syntax, nested_file=path)

    @classmethod
    def from_mapping(cls, name: str, mapping: Mapping[str, Mapping[str, Template]], *,
                     syntax: Syntax = "jinja2") -> "PromptCatalogue":
        """A Python mapping ``{key: {lang: template}}`` (prompts that still live in code)."""
        return cls(name, syntax=syntax, mapping=mapping)

    @property
    def data(self) -> dict[str, dict[str, Template]]:
        """``{key: {lang: template}}``, loaded on first use."""
        if self._data is None:
            data: dict[str, dict[str, Template]] = {}
            if self.nested_file is not None:
                for key, per_lang in (yaml.safe_load(self.nested_file.read_text(encoding="utf-8")) or {}).items():
                    data[key] = dict(per_lang)
            for lang, path in self.files.items():
                for key, template in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).items():
                    data.setdefault(key, {})[lang] = template
            self._data = data
        return self._data

    def languages(self, key: str) -> list[str]:
        return sorted(self.data[key])

    def template(self, key: str, lang: str = "ru") -> Template:
        """The template of ``key`` in ``lang``; a ``KeyError`` names what exists."""
        try:
            per_lang = self.data[key]
        except KeyError:
            raise KeyError(f"prompt {key!r} is not in catalogue {self.name!r}; keys: {', '.join(sorted(self.data))}") \
                from None
        if lang not in per_lang:
            raise KeyError(f"prompt {self.name}/{key} has no {lang!r} template; languages: {', '.join(sorted(per_lang))}")
        return per_lang[lang]

    def fields(self, key: str, lang: str) -> dict[str, set[str]]:
        """``{part: placeholders}`` of one template (``""`` is the part of a plain string template)."""
        return {part: template_fields(text, self.syntax) for part, text in _strings(self.template(key, lang))}

    def render_text(self, text: str, **variables: Any) -> str:
        if self.syntax == "format":
            return text.format(**variables)
        return _ENV.from_string(text).render(**variables).strip()

    def text(self, key: str, lang: str = "ru", part: str | None = None, **variables: Any) -> str:
        """One string of a template (``part``: a dotted path into it), filled in."""
        value = self.template(key, lang)
        for step in (part.split(".") if part else []):
            value = value[step]
        if not isinstance(value, str):
            raise TypeError(f"prompt {self.name}/{key} [{lang}] part {part!r} is not a string")
        return self.render_text(value, **variables)

    def render(self, key: str, lang: str = "ru", **variables: Any) -> tuple[dict[str, str], ...]:
        """Chat messages of a ``{system?, user}`` template with ``variables`` filled in."""
        spec = self.template(key, lang)
        messages = []
        if spec.get("system"):
            messages.append({"role": "system", "content": self.render_text(spec["system"], **variables)})
        messages.append({"role": "user", "content": self.render_text(spec["user"], **variables)})
        return tuple(messages)

    def digest(self, key: str) -> str:
        """Digest of a key's templates in every language (what a stage's fingerprint holds)."""
        blob = json.dumps(self.data[key], ensure_ascii=False, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def digests(self, keys: Any = None) -> dict[str, str]:
        """``{"<catalogue>/<key>": digest}`` of ``keys`` (default every key)."""
        return {f"{self.name}/{k}": self.digest(k) for k in (sorted(self.data) if keys is None else keys)}

    def select(self, *keys: str) -> "PromptSelection":
        """The templates a stage renders, for its ``prompt_templates`` declaration."""
        return PromptSelection(self, keys)

    def __repr__(self) -> str:
        return f"PromptCatalogue({self.name!r})"


class PromptSelection:
    """Some keys of one catalogue; :meth:`digests` is what :mod:`fabrika.pipeline.lineage` reads."""

    def __init__(self, catalogue: PromptCatalogue, keys: tuple[str, ...]) -> None:
        self.catalogue = catalogue
        self.keys = keys

    def digests(self) -> dict[str, str]:
        return self.catalogue.digests(self.keys)


__all__ = ["CATALOGUES", "PromptCatalogue", "PromptSelection", "template_fields"]
