"""Verifiers face untrusted model output: any text gives a bool, never an exception."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabrika.constraints import REGISTRY

# Russian-heavy text with markup, quotes, digits, Latin look-alikes, combining marks and odd whitespace.
_ALPHABET = st.sampled_from(
    list("абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВЁЖЯ aeopcxAEOPCXk0123456789.,!?;:—–-«»\"“”„*#`|[]<>{}\n\t ")
    + ["\u0301", "\u0308", "\u00a0", "\u200b", "P.S.", "******", "```json", "<<", ">>", "т. е.", "РФ"]
)
TEXTS = st.lists(_ALPHABET, max_size=120).map("".join)
_PARAMS = {cid: c.sample_params(random.Random(11)) for cid, c in REGISTRY.items()}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=TEXTS)
def test_every_verifier_returns_a_bool_on_arbitrary_text(text: str) -> None:
    for cid, c in REGISTRY.items():
        assert isinstance(c.verify(text, _PARAMS[cid]), bool)
        assert isinstance(c.verify_loose(text, _PARAMS[cid]), bool)


# What real completions add: invisible characters, stress marks, look-alike punctuation,
# emoji and emoticons, fullwidth and mathematical letters, markdown fragments.
_REAL_WORLD = st.sampled_from(
    list("абвгдеёжзийклмнопрстуфхцчшщъыьэюяАЁЯ aoAO019.,!?;:—–-«»\"*#|[]()<>\n ")
    + ["\u00ad", "\u200b", "\u2060", "\ufeff", "\u0301", "\u0306", "\u00a0", "\u202f", "\u2009", "\u2029", "\r\n",
       "--", "‚", "！", "？", "Ａ", "𝐀", "‒", "―", "⁉", "❓", "😊", "👍🏻", ":)", ")))", "xD", "?..", "?!", "…",
       "т. е.", "кв. м", "чел.", "1 000", "и/или", "15:00", "https://a.ru/x", "a@b.ru", "NaN", "```", "******",
       "*******", "**", "- ", "– ", "1. ", "# ", "| a | b |\n|---|---|\n", "<<", ">>", "P.S.", "книгу-то", "XIX"]
)
REAL_TEXTS = st.lists(_REAL_WORLD, max_size=80).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=REAL_TEXTS)
def test_every_verifier_returns_a_bool_on_real_world_noise(text: str) -> None:
    for cid, c in REGISTRY.items():
        assert isinstance(c.verify(text, _PARAMS[cid]), bool)
        assert isinstance(c.verify_loose(text, _PARAMS[cid]), bool)
