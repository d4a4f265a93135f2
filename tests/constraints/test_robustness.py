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
