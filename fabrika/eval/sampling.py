"""Choosing an evaluation set from request logs: the template-aware sampler and three baselines.

* ``template`` — normalise (:mod:`fabrika.eval.normalize`), group the
  normalised prompts into templates with MinHash LSH (datasketch), give each
  template a budget ∝ √count (floor 1), and within a template pick by greedy
  max-min over the *variable* parts (TF-IDF cosine distance).
* ``random`` — a uniform draw.
* ``maxmin`` — greedy max-min over whole prompts, globally (diverse, but blind to traffic shares).
* ``tags`` — InsTag-style complexity-first diverse sampling over tag sets (:mod:`fabrika.eval.tags`).

**The long-tail rule.** A cluster smaller than ``max(min_template_count,
⌈min_template_share · n⌉)`` rows (by default 2 rows and 0.1 % of the log) is not
treated as a template: free-form requests are singletons or a handful of
verbatim repeats, and rare templates are indistinguishable from them. Their rows are pooled into one *tail* bucket that keeps its
traffic share of the budget (``round(budget · n_tail / n)``) and is picked by
max-min over whole prompts; the √ flattening applies among the real templates,
with a floor of one row each. When the budget is smaller than the number of
templates, the largest templates get their one row first.

Every sampler is deterministic for a given ``seed``.
"""

from __future__ import annotations

import math
import random
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
from datasketch import MinHash, MinHashLSH

from fabrika.errors import ConfigError
from fabrika.eval.logs import LogRecord
from fabrika.eval.normalize import Normalized, normalize
from fabrika.eval.tags import record_tags


@dataclass
class Selection:
    """Indices into the pool, in selection order, plus what the sampler decided on the way."""

    indices: list[int]
    info: dict[str, object] = field(default_factory=dict)


def _check_budget(budget: int) -> None:
    if budget < 1:
        raise ConfigError(f"--budget must be at least 1, got {budget}")


def _tfidf(texts: Sequence[str], *, chars: bool = False):
    from sklearn.feature_extraction.text import TfidfVectorizer

    if chars:
        vec = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4), lowercase=True, sublinear_tf=True)
    else:
        vec = TfidfVectorizer(lowercase=True, token_pattern=r"(?u)\b\w+\b", sublinear_tf=True)
    try:
        return vec.fit_transform(texts)
    except ValueError:  # empty vocabulary: every text is empty
        return None


def greedy_maxmin(matrix, k: int, rng: random.Random, n: int | None = None) -> list[int]:
    """Greedy max-min (farthest-point) selection of ``k`` of ``n`` rows of an L2-normalised matrix.

    Starts from a seeded random row; each step adds the row whose cosine distance to
    its nearest chosen row is largest (ties: lowest index). A ``None`` matrix (no
    features: every text empty) falls back to a seeded random draw of ``k`` of ``n``.
    """
    if matrix is not None:
        n = matrix.shape[0]
    if n is None:
        raise ValueError("greedy_maxmin needs n when the matrix is None")
    if matrix is None or k >= n:
        order = list(range(n))
        rng.shuffle(order)
        return order[:k]
    first = rng.randrange(n)
    chosen = [first]
    min_dist = 1.0 - np.asarray((matrix @ matrix[first].T).todense()).ravel()
    min_dist[first] = -1.0
    while len(chosen) < k:
        nxt = int(np.argmax(min_dist))
        chosen.append(nxt)
        dist = 1.0 - np.asarray((matrix @ matrix[nxt].T).todense()).ravel()
        np.minimum(min_dist, dist, out=min_dist)
        min_dist[chosen] = -1.0
    return chosen


# -- templates ----------------------------------------------------------------
_WORD = re.compile(r"⟨\w+⟩|\w+", re.UNICODE)


def _shingles(template: str, n: int = 3) -> set[bytes]:
    toks = _WORD.findall(template.lower())
    if len(toks) < n:
        return {" ".join(toks).encode("utf-8")}
    return {" ".join(toks[i:i + n]).encode("utf-8") for i in range(len(toks) - n + 1)}


def find_templates(templates: Sequence[str], *, threshold: float = 0.6, num_perm: int = 128,
                   seed: int = 1) -> list[int]:
    """A cluster label per normalised prompt: identical templates share one, near-identical ones are
    merged through MinHash LSH (estimated Jaccard of word 3-gram shingles ≥ ``threshold``)."""
    if not 0.0 < threshold < 1.0:
        raise ConfigError(f"--threshold must be in (0, 1), got {threshold}")
    unique: dict[str, int] = {}
    for t in templates:
        unique.setdefault(t, len(unique))
    keys = list(unique)
    parent = list(range(len(keys)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    hashes = MinHash.bulk([sorted(_shingles(k)) for k in keys], num_perm=num_perm, seed=seed)
    for i, mh in enumerate(hashes):
        for j in lsh.query(mh):
            if mh.jaccard(hashes[j]) >= threshold:  # LSH candidates are verified on the estimate
                a, b = root(i), root(j)
                if a != b:
                    parent[max(a, b)] = min(a, b)
        lsh.insert(i, mh)
    labels = [root(unique[t]) for t in templates]
    # relabel 0..k-1 in order of first appearance
    remap: dict[int, int] = {}
    return [remap.setdefault(lab, len(remap)) for lab in labels]


def allocate_budget(sizes: Sequence[int], budget: int, *, min_template_count: int = 2) -> tuple[list[int], int]:
    """Rows per template and for the tail (see the module docstring for the rule).

    Returns ``(per_template, tail)``; templates smaller than ``min_template_count``
    get 0 in ``per_template`` — their rows form the tail, whose budget is ``tail``.
    """
    _check_budget(budget)
    n = sum(sizes)
    if budget >= n:
        return [s if s >= min_template_count else 0 for s in sizes], sum(s for s in sizes if s < min_template_count)
    kept = [i for i, s in enumerate(sizes) if s >= min_template_count]
    n_tail = n - sum(sizes[i] for i in kept)
    tail = min(n_tail, round(budget * n_tail / n)) if n else 0
    left = budget - tail
    out = [0] * len(sizes)
    kept.sort(key=lambda i: (-sizes[i], i))
    if left < len(kept):
        for i in kept[:left]:
            out[i] = 1
        return out, tail
    for i in kept:
        out[i] = 1
    left -= len(kept)
    active = [i for i in kept if sizes[i] > 1]
    while left > 0 and active:  # √-proportional share, capped by the template's size; largest remainder
        weights = {i: math.sqrt(sizes[i]) for i in active}
        total = sum(weights.values())
        quota = {i: left * w / total for i, w in weights.items()}
        give = {i: min(int(q), sizes[i] - out[i]) for i, q in quota.items()}
        rest = left - sum(give.values())
        for i in sorted(active, key=lambda i: (-(quota[i] - int(quota[i])), -sizes[i], i)):
            if rest <= 0:
                break
            if out[i] + give[i] < sizes[i]:
                give[i] += 1
                rest -= 1
        for i, g in give.items():
            out[i] += g
        left = budget - tail - sum(out)
        active = [i for i in active if out[i] < sizes[i]]
    if left > 0:  # every template is exhausted: the tail takes what is left
        tail = min(n_tail, tail + left)
    return out, tail


def _share(sizes: Sequence[int], k: int) -> list[int]:
    """``k`` shared ∝ ``sizes`` (largest remainder, each capped by its size)."""
    n = sum(sizes)
    quota = [k * s / n if n else 0.0 for s in sizes]
    give = [min(int(q), s) for q, s in zip(quota, sizes)]
    for j in sorted(range(len(sizes)), key=lambda j: (-(quota[j] - int(quota[j])), -sizes[j], j)):
        if sum(give) >= min(k, n):
            break
        if give[j] < sizes[j]:
            give[j] += 1
    return give


def _pick(groups: list[list[int]], tail_rows: list[int], budget: int, normed: Sequence[Normalized],
          records: Sequence[LogRecord], rng: random.Random) -> tuple[list[int], int]:
    """The template step on one pool: √ allocation over ``groups`` (a template's rows each), the tail
    keeping its share, max-min within each. Returns (picked rows, the tail's budget)."""
    n = sum(len(g) for g in groups) + len(tail_rows)
    tail_budget = min(len(tail_rows), round(budget * len(tail_rows) / n)) if n else 0
    chosen: list[int] = []
    if budget - tail_budget > 0 and groups:
        per, _ = allocate_budget([len(g) for g in groups], budget - tail_budget, min_template_count=1)
        tail_budget = min(len(tail_rows), budget - sum(per))  # the templates ran out: the tail takes the rest
        for rows, k in zip(groups, per):
            if k:
                texts = [normed[i].variable_text for i in rows]
                chosen.extend(rows[j] for j in greedy_maxmin(_tfidf(texts, chars=True), k, rng, len(rows)))
    elif not groups:
        tail_budget = min(len(tail_rows), budget)
    if tail_budget and tail_rows:
        picked = greedy_maxmin(_tfidf([records[i].text for i in tail_rows]), tail_budget, rng, len(tail_rows))
        chosen.extend(tail_rows[j] for j in picked)
    return chosen, tail_budget


def length_strata(lengths: Sequence[int], strata: int) -> list[int]:
    """A stratum per row: equal-count quantiles of the word counts (ties kept together)."""
    edges = np.unique(np.quantile(np.asarray(lengths, dtype=float), np.linspace(0, 1, strata + 1)[1:-1]))
    return [int(b) for b in np.searchsorted(edges, lengths, side="right")]


def template_aware(records: Sequence[LogRecord], budget: int, *, seed: int = 0, threshold: float = 0.6,
                   min_template_count: int = 2, min_template_share: float = 0.001,
                   strata: int = 0) -> Selection:
    """The template-aware sampler (module docstring).

    ``strata`` > 1 turns on **length-stratified allocation**: the log is cut into ``strata``
    prompt-length quantiles, each stratum gets its traffic share of the budget, and the template
    step (√ allocation, tail, max-min) runs inside each stratum on the log-wide templates. The
    sample then keeps the log's length distribution, which √ flattening alone loses when a few
    templates carry most of the traffic.
    """
    _check_budget(budget)
    if not 0.0 <= min_template_share < 1.0:
        raise ConfigError(f"--min-template-share must be in [0, 1), got {min_template_share}")
    min_template_count = max(min_template_count, math.ceil(min_template_share * len(records)))
    rng = random.Random(seed)
    normed = [normalize(r.text) for r in records]
    labels = find_templates([n.template for n in normed], threshold=threshold)
    members: dict[int, list[int]] = defaultdict(list)
    for i, lab in enumerate(labels):
        members[lab].append(i)
    cluster_ids = sorted(members)
    sizes = [len(members[c]) for c in cluster_ids]
    if strata > 1:
        stratum = length_strata([len(r.text.split()) for r in records], strata)
        ids = sorted(set(stratum))
        counts = [sum(1 for x in stratum if x == s) for s in ids]
        chosen_s: list[int] = []
        tail_total = 0
        for s, k in zip(ids, _share(counts, min(budget, len(records)))):
            if not k:
                continue
            groups = [[i for i in members[c] if stratum[i] == s] for c in cluster_ids
                      if len(members[c]) >= min_template_count]
            tail = [i for c in cluster_ids if len(members[c]) < min_template_count for i in members[c] if stratum[i] == s]
            got, tb = _pick([g for g in groups if g], tail, k, normed, records, rng)
            chosen_s.extend(got)
            tail_total += tb
        kept = sum(1 for x in sizes if x >= min_template_count)
        return Selection(chosen_s, {"templates": kept, "tail_rows": sum(x for x in sizes if x < min_template_count),
                                    "tail_budget": tail_total, "clusters": len(cluster_ids), "labels": labels,
                                    "strata": len(ids)})
    per, tail_budget = allocate_budget(sizes, budget, min_template_count=min_template_count)
    chosen: list[int] = []
    tail_rows: list[int] = []
    for c, k in zip(cluster_ids, per):
        rows = members[c]
        if len(rows) < min_template_count:
            tail_rows.extend(rows)
            continue
        if k == 0:
            continue
        texts = [normed[i].variable_text for i in rows]
        picked = greedy_maxmin(_tfidf(texts, chars=True), k, rng, len(rows))
        chosen.extend(rows[j] for j in picked)
    if tail_budget and tail_rows:
        picked = greedy_maxmin(_tfidf([records[i].text for i in tail_rows]), tail_budget, rng, len(tail_rows))
        chosen.extend(tail_rows[j] for j in picked)
    kept = sum(1 for s in sizes if s >= min_template_count)
    return Selection(chosen, {"templates": kept, "tail_rows": len(tail_rows), "tail_budget": tail_budget,
                              "clusters": len(cluster_ids), "labels": labels})


def random_sample(records: Sequence[LogRecord], budget: int, *, seed: int = 0, **_: object) -> Selection:
    _check_budget(budget)
    idx = list(range(len(records)))
    random.Random(seed).shuffle(idx)
    return Selection(idx[:budget])


def global_maxmin(records: Sequence[LogRecord], budget: int, *, seed: int = 0, **_: object) -> Selection:
    _check_budget(budget)
    return Selection(greedy_maxmin(_tfidf([r.text for r in records]), min(budget, len(records)), random.Random(seed),
                                   len(records)))


def tag_diversity(records: Sequence[LogRecord], budget: int, *, seed: int = 0,
                  tagger: Callable[[LogRecord], Sequence[str]] = record_tags, **_: object) -> Selection:
    """InsTag's complexity-first diverse sampling: rows with more tags first; a row joins when it
    brings a tag the current round has not seen; when a round runs dry, a new round starts."""
    _check_budget(budget)
    rng = random.Random(seed)
    tags = [frozenset(tagger(r)) for r in records]
    order = list(range(len(records)))
    rng.shuffle(order)
    order.sort(key=lambda i: -len(tags[i]))  # stable: random among equals
    chosen: list[int] = []
    remaining = order
    rounds = 0
    while len(chosen) < budget and remaining:
        rounds += 1
        seen: set[str] = set()
        rest: list[int] = []
        for i in remaining:
            if len(chosen) < budget and not tags[i] <= seen:
                chosen.append(i)
                seen |= tags[i]
            else:
                rest.append(i)
        if len(rest) == len(remaining):  # nothing new anywhere: fill in tag-count order
            chosen.extend(rest[:budget - len(chosen)])
            break
        remaining = rest
    return Selection(chosen, {"rounds": rounds, "distinct_tags": len(set().union(*tags)) if tags else 0})


SAMPLERS: dict[str, Callable[..., Selection]] = {
    "template": template_aware,
    "random": random_sample,
    "maxmin": global_maxmin,
    "tags": tag_diversity,
}


def run_sampler(name: str, records: Sequence[LogRecord], budget: int, **kwargs: object) -> Selection:
    """Run the sampler ``name`` (one of :data:`SAMPLERS`)."""
    if name not in SAMPLERS:
        raise ConfigError(f"--method must be one of {', '.join(SAMPLERS)}, got {name!r}")
    return SAMPLERS[name](records, budget, **kwargs)
