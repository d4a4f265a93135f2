"""Every library constraint against hand-written Russian responses, plus registry invariants."""

from __future__ import annotations

import random
import re

import pytest

from fabrika.constraints import REGISTRY

from . import cases_format, cases_keywords, cases_length, cases_russian, cases_textual

ALL_CASES = [*cases_length.CASES, *cases_keywords.CASES, *cases_format.CASES, *cases_textual.CASES, *cases_russian.CASES]
_IDS = [f"{cid}-{i}" for i, (cid, *_rest) in enumerate(ALL_CASES)]


@pytest.mark.parametrize(("cid", "params", "positives", "negatives"), ALL_CASES, ids=_IDS)
def test_strict_verdicts(cid: str, params: dict, positives: list[str], negatives: list[str]) -> None:
    c = REGISTRY[cid]
    for text in positives:
        assert c.verify(text, params), f"{cid} {params} should accept: {text!r}"
    for text in negatives:
        assert not c.verify(text, params), f"{cid} {params} should reject: {text!r}"


def test_library_has_at_least_54_constraints_each_with_4_positive_and_4_negative_cases() -> None:
    assert len(REGISTRY) >= 54
    pos: dict[str, int] = {}
    neg: dict[str, int] = {}
    for cid, _params, positives, negatives in ALL_CASES:
        pos[cid] = pos.get(cid, 0) + len(positives)
        neg[cid] = neg.get(cid, 0) + len(negatives)
    thin = [cid for cid in REGISTRY if pos.get(cid, 0) < 4 or neg.get(cid, 0) < 4]
    assert not thin, f"constraints without 4+4 hand-written cases: {thin}"


@pytest.mark.parametrize("cid", sorted(REGISTRY))
def test_every_constraint_renders_sampled_params_without_unfilled_slots(cid: str) -> None:
    c = REGISTRY[cid]
    rng = random.Random(cid)
    for _ in range(15):
        params = c.sample_params(rng)
        text = c.render(params)
        assert text and not re.search(r"[{}]", text), text
        assert re.search(r"[а-яё]", text), text  # a Russian instruction
        assert c.render(params) == text  # stable template choice
        en = c.render(params, lang="en")
        assert en and not re.search(r"[{}]", en) and re.match(r"[A-Z]", en), en
    assert c.sample_params(random.Random(7)) == c.sample_params(random.Random(7))
    assert c.family and cid.startswith(f"ru.{cid.split('.')[1]}.")


@pytest.mark.parametrize(("cid", "params", "positives", "negatives"), ALL_CASES, ids=_IDS)
def test_loose_accepts_everything_strict_accepts(cid: str, params: dict, positives: list[str], negatives: list[str]) -> None:
    c = REGISTRY[cid]
    for text in positives:
        assert c.verify_loose(text, params), text


def test_loose_forgives_a_preface_line_and_markdown() -> None:
    js = REGISTRY["ru.format.json"]
    text = 'Конечно! Вот ответ:\n{"город": "Казань"}'
    assert not js.verify(text, {}) and js.verify_loose(text, {})
    start = REGISTRY["ru.startend.start_phrase"]
    text = "**Итак,** начнём с главного."
    assert not start.verify(text, {"phrase": "Итак,"}) and start.verify_loose(text, {"phrase": "Итак,"})
    end = REGISTRY["ru.startend.end_phrase"]
    text = "Ответ готов. На этом всё.\nЕсли нужно, спрашивайте."
    assert not end.verify(text, {"phrase": "На этом всё."}) and end.verify_loose(text, {"phrase": "На этом всё."})
    # loose is not anything-goes: a response that violates on every variant still fails,
    # and a one-line answer is not "forgiven" into an empty one
    assert not REGISTRY["ru.punct.no_commas"].verify_loose("Да, конечно.", {})
    assert not REGISTRY["ru.punct.no_commas"].verify_loose("Да, конечно.\nНу, ладно.", {})
    assert not js.verify_loose("Конечно!\nЭто не JSON.\nПока.", {})


def test_english_rendering_agrees_numbers() -> None:
    c = REGISTRY["ru.length.words_max"]
    assert c.render({"n": 1}, lang="en") == "Answer in at most 1 word."
    assert c.render({"n": 21}, lang="en") == "Answer in at most 21 words."
    assert "exactly 3 data rows" in REGISTRY["ru.format.markdown_table"].render({"n": 3}, lang="en")
    assert "«река» and «лес»" in REGISTRY["ru.keywords.include"].render({"keywords": ["река", "лес"]}, lang="en")


@pytest.mark.parametrize(("cid", "params", "positives", "negatives"), ALL_CASES, ids=_IDS)
def test_loose_still_rejects_one_line_plain_negatives(cid: str, params: dict, positives: list[str], negatives: list[str]) -> None:
    c = REGISTRY[cid]
    for text in negatives:
        if "\n" not in text.strip() and not any(ch in text for ch in "*#`") and text.strip():
            assert not c.verify_loose(text, params), text


def test_every_template_renders_with_agreement_for_many_numbers() -> None:
    """Each template (not just the one a hash picks) renders for n = 1, 2, 5, 21 without slots left."""
    from fabrika.constraints.base import _FORMATTER

    for cid, c in REGISTRY.items():
        base = c.sample_params(random.Random(0))
        for tpl in c.templates + c.templates_en:
            for n in (1, 2, 5, 21) if "n" in base and cid != "ru.keywords.paragraph_first_word" else (None,):
                params = dict(base) if n is None else {**base, "n": n}
                slots = {**params, **(c.derive(params) if c.derive else {})}
                text = _FORMATTER.format(tpl, **slots)
                assert not re.search(r"[{}]", text), (cid, text)
