"""Language scorer: lingua label + confidence and the Latin-homoglyph share.

lingua runs in full (not low-accuracy) mode over a configured candidate set:
restricting candidates keeps short Russian texts from being labelled Bulgarian,
and low-accuracy mode fails exactly on one-line instructions. The homoglyph
share is the fraction of Cyrillic-bearing words that also hold Latin letters
(«прoграмма» with a Latin 'o'), via ``fabrika.textutil.script``.

Scores (never thresholds): ``lang_detected`` (ISO 639-1 or null), ``lang_confidence``
(lingua's confidence of that label), ``lang_matches`` (detected == the row's
``lang``), ``homoglyph_share``. The share counts only Latin letters that look
Cyrillic, per hyphen part, so «SQL-запрос» and «Wi-Fi-сеть» are clean.

What is scored (``text_field="auto"``, the default): a completion's own text; for
a completion that calls tools, the *natural-language context* of the call — the
user turns it answers (every user turn of its prompt) plus any text beside the
calls. Argument values are never the language evidence: ``{"count": 2}`` has no
language and ``{"city": "Казань"}`` reads as Bulgarian as easily as Russian.
A text with fewer than ``min_letters`` letters gets **null** scores (no
evidence either way), and the gates keep nulls.

``lang_confidence`` over ``{ru, en}`` is 1.0 for any text whose letters are
mostly of one script (lingua separates the two by script alone), so the
``language.min_confidence`` gate is inert for that pair; it separates something
only with several same-script candidates (``[ru, uk, be, bg]``), where short
Russian lines score 0.45–0.8 (tests/filters pin both).
"""

from __future__ import annotations

import asyncio
import json
from functools import lru_cache
from typing import Any, ClassVar, Sequence

import polars as pl
from lingua import LanguageDetector, LanguageDetectorBuilder
from pydantic import BaseModel, ConfigDict, Field, field_validator

from fabrika.filters.text import SampleRow, messages_text, row_text, text_columns
from fabrika.gates import GatePredicate, register_gate_group
from fabrika.pipeline.columns import Column, Contract
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage
from fabrika.textutil.lang import LANGUAGES
from fabrika.textutil.script import LATIN_TO_CYRILLIC, has_cyrillic, is_mixed_script
from fabrika.textutil.segment import words

_CODES = {lang: code for code, lang in LANGUAGES.items()}
SCORE_COLUMNS = ("lang_detected", "lang_confidence", "lang_matches", "homoglyph_share")
DEFAULT_MIN_LETTERS = 12


@lru_cache(maxsize=8)
def language_detector(languages: tuple[str, ...]) -> LanguageDetector:
    """A full-accuracy lingua detector over ``languages`` (ISO 639-1 codes), built once per set."""
    unknown = [c for c in languages if c not in LANGUAGES]
    if unknown:
        raise ValueError(f"languages {unknown} are not supported; use codes from {sorted(LANGUAGES)}")
    if len(languages) < 2:
        raise ValueError(f"language detection needs at least two candidate languages, got {list(languages)}")
    return LanguageDetectorBuilder.from_languages(*(LANGUAGES[c] for c in languages)).build()


def is_homoglyph_word(word: str) -> bool:
    """A Cyrillic word hiding Latin look-alikes («прoграмма» with a Latin 'o').

    Checked per hyphen part, and only Latin letters that look Cyrillic count, so
    legitimate mixed terms stay clean: «SQL-запрос», «Wi-Fi-сеть», «iPhone-ом».
    """
    for part in word.split("-"):
        if not is_mixed_script(part):
            continue
        latin = [ch for ch in part if "a" <= ch.lower() <= "z"]
        if latin and all(ch in LATIN_TO_CYRILLIC for ch in latin):
            return True
    return False


def homoglyph_share(text: str) -> float:
    """Share of Cyrillic-bearing words that hide Latin look-alikes (0 when there are none)."""
    cyr = [w for w in words(text) if has_cyrillic(w)]
    if not cyr:
        return 0.0
    return sum(1 for w in cyr if is_homoglyph_word(w)) / len(cyr)


def letter_count(text: str) -> int:
    return sum(1 for ch in text if ch.isalpha())


def score_languages(texts: Sequence[str], languages: Sequence[str] = ("ru", "en"),
                    min_letters: int = DEFAULT_MIN_LETTERS) -> list[dict[str, Any]]:
    """Score ``texts``: ``lang_detected``, ``lang_confidence``, ``homoglyph_share`` per text.

    Texts with fewer than ``min_letters`` letters get ``None`` label and confidence.
    """
    det = language_detector(tuple(languages))
    out: list[dict[str, Any]] = []
    scored = [i for i, t in enumerate(texts) if letter_count(t) >= max(1, min_letters)]
    if len(scored) == 1:  # the per-row stage path: no thread pool for one text
        confs = [det.compute_language_confidence_values(texts[scored[0]])]
    else:
        confs = det.compute_language_confidence_values_in_parallel([texts[i] for i in scored]) if scored else []
    best: dict[int, tuple[str | None, float | None]] = {}
    for i, values in zip(scored, confs):
        top = values[0] if values else None
        best[i] = (_CODES.get(top.language), float(top.value)) if top is not None and top.value > 0 else (None, None)
    for i, text in enumerate(texts):
        label, conf = best.get(i, (None, None))
        out.append({"lang_detected": label, "lang_confidence": None if conf is None else round(conf, 6),
                    "homoglyph_share": round(homoglyph_share(text), 6)})
    return out


def _has_calls(messages: Any) -> bool:
    return any(m.get("tool_calls") for m in messages if isinstance(m, dict)) if isinstance(messages, list) else False


def context_text(row: Row) -> str:
    """The ``auto`` text of a sample row: its completion's text, or for a call its natural-language context."""
    sample = SampleRow.of(row)
    raw = sample.completion
    completion: Any = raw
    if isinstance(raw, str):
        try:
            completion = json.loads(raw) if raw else []
        except json.JSONDecodeError:
            return raw
    text = messages_text(completion)
    if sample.target_type == "tool_call" or _has_calls(completion):
        users = messages_text(sample.prompt, roles=("user",))
        return "\n".join(p for p in (users, text) if p)
    return text


def score_rows(rows: Sequence[Row], text_field: str = "auto",
               languages: Sequence[str] = ("ru", "en"), min_letters: int = DEFAULT_MIN_LETTERS) -> list[dict[str, Any]]:
    """Annotation rows ``{id, <scores>}`` for sample rows (``lang_matches`` compares with ``lang``)."""
    texts = [context_text(r) if text_field == "auto" else row_text(r, text_field) for r in rows]
    scores = score_languages(texts, languages, min_letters)
    out = []
    for row, s in zip(rows, scores):
        sample = SampleRow.of(row)
        expected = sample.lang
        s["lang_matches"] = None if expected is None or s["lang_detected"] is None else s["lang_detected"] == expected
        out.append({"id": sample.id, **s})
    return out


class LanguageConfig(StageConfig):
    """``filter.language``: which text to score and the candidate languages."""

    text_field: str = Field(
        default="auto",
        description="'auto' (the completion's text; for a tool-call completion the user turns it answers plus "
        "any text beside the calls — argument values are no language evidence), 'completion_values' (text + "
        "string argument values), 'prompt', 'completion', 'user' or a column name.")
    min_letters: int = Field(default=DEFAULT_MIN_LETTERS, ge=1,
                             description="Texts with fewer letters get null scores (no evidence); gates keep nulls.")
    languages: list[str] = Field(default_factory=lambda: ["ru", "en"],
                                 description="ISO 639-1 candidate set for lingua (at least two).")

    @field_validator("languages")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in LANGUAGES]
        if unknown:
            raise ValueError(f"languages {unknown} are not supported; use codes from {sorted(LANGUAGES)}")
        if len(v) < 2:
            raise ValueError(f"languages needs at least two candidates (lingua compares them), got {v}")
        return v


@register_stage
class LanguageScorer(Stage[LanguageConfig]):
    """Annotating stage: adds language scores to each row of its input."""

    kind = "filter.language"
    writes = (Column("lang_detected", str, required=False), Column("lang_confidence", float),
              Column("homoglyph_share", float), Column("lang_matches", bool, required=False))

    @classmethod
    def contract(cls, config: LanguageConfig) -> Contract:
        return Contract(reads=(*text_columns(config.text_field), Column("lang", str, required=False)), writes=cls.writes)
    calls_llm: ClassVar[bool] = False
    annotates: ClassVar[bool] = True

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        # lingua is CPU-bound: off the event loop, so LLM stages running alongside keep their requests flowing
        (scores,) = await asyncio.to_thread(score_rows, [row], cfg.text_field, cfg.languages,
                                         cfg.min_letters)
        return [ok(**scores)]


# gate group ``filters.language``: thresholds on the columns above (scores are data, thresholds are config)


class LanguageGate(BaseModel):
    """``filters.language``."""

    model_config = ConfigDict(extra="forbid")

    allowed: list[str] | None = Field(default=None, description="Detected languages to keep (ISO 639-1); "
                                      "None = any language that matches the row's own `lang`.")
    min_confidence: float = Field(default=0.5, ge=0, le=1, description="Minimum lingua confidence of the label.")
    max_homoglyph_share: float = Field(default=0.0, ge=0, le=1,
                                       description="Maximum share of Cyrillic words holding Latin look-alikes.")
    require_match: bool = Field(default=True, description="Drop rows whose detected language differs from `lang`.")


def _language(p: LanguageGate) -> list[GatePredicate]:
    preds = [
        GatePredicate("language.min_confidence", pl.col("lang_confidence") >= p.min_confidence, ("lang_confidence",),
                      keep_null=True),
        GatePredicate("language.max_homoglyph_share", pl.col("homoglyph_share") <= p.max_homoglyph_share,
                      ("homoglyph_share",), keep_null=True),
    ]
    if p.allowed is not None:
        preds.insert(0, GatePredicate("language.allowed", pl.col("lang_detected").is_in(p.allowed),
                                        ("lang_detected",), keep_null=True))
    if p.require_match:
        preds.append(GatePredicate("language.require_match", pl.col("lang_matches"), ("lang_matches",),
                                   keep_null=True))
    return preds


register_gate_group("language", LanguageGate, _language)
