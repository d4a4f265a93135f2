"""Prompt catalogues: the Russian and English templates of every prompt read the same fields."""

from __future__ import annotations

import pytest

import fabrika.agents.prompts as agent_prompts
import fabrika.generators.fc.prompts as fc_prompts
import fabrika.generators.instruct.multiturn as multiturn
import fabrika.generators.instruct.prompts as if_prompts
from fabrika.prompts import PromptCatalogue, template_fields

CATALOGUES = [
    if_prompts.CATALOGUE,
    multiturn.DIALOGUE,
    multiturn.RUBRIC,
    agent_prompts.CATALOGUE,  # the FC role prompts (str.format)
    fc_prompts.CATALOGUE,  # the FC generators' own prompts (str.format)
]
CASES = [(c, key) for c in CATALOGUES for key in sorted(c.data)]


@pytest.mark.parametrize(("catalogue", "key"), CASES, ids=[f"{c.name}/{k}" for c, k in CASES])
def test_languages_of_a_prompt_use_the_same_fields(catalogue: PromptCatalogue, key: str) -> None:
    langs = catalogue.languages(key)
    assert {"ru", "en"} <= set(langs), f"{catalogue.name}/{key}: languages {langs}"
    ru = catalogue.fields(key, "ru")
    for lang in langs:
        fields = catalogue.fields(key, lang)
        assert set(fields) == set(ru), f"{catalogue.name}/{key} [{lang}]: parts {sorted(fields)} vs ru {sorted(ru)}"
        for part, names in fields.items():
            assert names == ru[part], (f"{catalogue.name}/{key} [{lang}] {part or '(text)'}: fields {sorted(names)} "
                                       f"vs ru {sorted(ru[part])}")


def test_the_lint_catches_a_field_in_one_language_only() -> None:
    cat = PromptCatalogue.from_mapping("lint.bad", {"x": {"ru": "Тема: {{ topic }}", "en": "Topic: {{ subject }}"}})
    assert cat.fields("x", "ru") != cat.fields("x", "en")
    assert template_fields("a {b} {{c}} {d.e}", "format") == {"b", "d"}


def test_the_if_catalogue_renders_both_languages() -> None:
    ru = if_prompts.render("backtranslate", code="def evaluate(r): return True")
    en = if_prompts.render("backtranslate", "en", code="def evaluate(r): return True")
    assert "Сформулируй" in ru[-1]["content"] and "State that constraint" in en[-1]["content"]
    assert "def evaluate" in ru[-1]["content"] and "def evaluate" in en[-1]["content"]


def test_a_catalogue_digest_follows_its_text(monkeypatch: pytest.MonkeyPatch) -> None:
    before = if_prompts.CATALOGUE.digests(["expand", "verifiers"])
    monkeypatch.setitem(if_prompts.CATALOGUE.data["expand"], "en", {"system": "", "user": "{{ n }} {{ seeds }}"})
    after = if_prompts.CATALOGUE.digests(["expand", "verifiers"])
    assert after["instruct/expand"] != before["instruct/expand"]
    assert after["instruct/verifiers"] == before["instruct/verifiers"]


def test_the_fc_catalogue_is_str_format_with_doubled_braces() -> None:
    text = agent_prompts.prompt_text("judge", "en")
    assert agent_prompts.CATALOGUE.fields("judge", "en") == {"": {"task"}}
    assert '{"approved": true' in text.format(task="{}")  # doubled braces render as literal JSON
    assert agent_prompts.assistant_system("ru") == agent_prompts.CATALOGUE.data["assistant_system"]["ru"][0]
