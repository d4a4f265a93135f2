"""How good an evaluation sample is: diversity (Dist.) and faithfulness to the pool (JS distances).

* **Dist.** — mean pairwise cosine distance between the sample's prompts in a
  word TF-IDF space fitted on the whole pool (higher = more diverse).
* **JS** — Jensen–Shannon distance (base 2, so in [0, 1]) between the sample's
  and the pool's distribution of a label: model, prompt-length bin (deciles of
  the pool's word counts), service, task type (lower = more faithful). A label
  no row carries is reported as ``None``.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from fabrika.eval.logs import LABEL_FIELDS, LogRecord

LENGTH_BINS = 10


def _vectorizer(pool_texts: Sequence[str]):
    from sklearn.feature_extraction.text import TfidfVectorizer

    vec = TfidfVectorizer(lowercase=True, token_pattern=r"(?u)\b\w+\b", sublinear_tf=True)
    vec.fit(pool_texts)
    return vec


def mean_pairwise_distance(matrix) -> float:
    """Mean cosine distance over all unordered pairs of rows of an L2-normalised matrix."""
    n = matrix.shape[0]
    if n < 2:
        return 0.0
    sims = np.asarray((matrix @ matrix.T).todense())
    upper = sims[np.triu_indices(n, k=1)]
    return float(np.mean(1.0 - upper))


def js_distance(sample: Sequence[str], pool: Sequence[str]) -> float:
    """Jensen–Shannon distance (base 2) between two label distributions."""
    from scipy.spatial.distance import jensenshannon

    cats = sorted(set(pool) | set(sample))
    cs, cp = Counter(sample), Counter(pool)
    p = np.array([cs[c] for c in cats], dtype=float)
    q = np.array([cp[c] for c in cats], dtype=float)
    if p.sum() == 0 or q.sum() == 0:
        return 0.0
    return float(jensenshannon(p / p.sum(), q / q.sum(), base=2))


def length_bins(pool_lengths: Sequence[int], bins: int = LENGTH_BINS) -> np.ndarray:
    """Inner bin edges at the pool's quantiles (duplicates merged)."""
    qs = np.quantile(np.asarray(pool_lengths, dtype=float), np.linspace(0, 1, bins + 1)[1:-1])
    return np.unique(qs)


class SampleScorer:
    """Scores samples of one pool; the TF-IDF space and length bins are fitted once."""

    def __init__(self, pool: Sequence[LogRecord]) -> None:
        self.pool = pool
        texts = [r.text for r in pool]
        self.vec = _vectorizer(texts)
        self.lengths = [len(t.split()) for t in texts]
        self.edges = length_bins(self.lengths)
        self.pool_bins = [str(int(b)) for b in np.searchsorted(self.edges, self.lengths, side="right")]
        self.labels = {name: [r.label(name) or "∅" for r in pool] for name in LABEL_FIELDS}
        self.present = {name: any(r.label(name) is not None for r in pool) for name in LABEL_FIELDS}

    def score(self, indices: Sequence[int]) -> dict[str, float | None]:
        idx = list(indices)
        matrix = self.vec.transform([self.pool[i].text for i in idx])
        out: dict[str, float | None] = {"n": float(len(idx)), "dist": mean_pairwise_distance(matrix)}
        out["js_model"] = self._js("model", idx)
        out["js_length"] = js_distance([self.pool_bins[i] for i in idx], self.pool_bins)
        out["js_service"] = self._js("service", idx)
        out["js_task_type"] = self._js("task_type", idx)
        return out

    def _js(self, name: str, idx: Sequence[int]) -> float | None:
        if not self.present[name]:
            return None
        labels = self.labels[name]
        return js_distance([labels[i] for i in idx], labels)
