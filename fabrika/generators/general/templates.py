"""Template clusters of a prompt pool, so that a few templated services do not dominate it.

Production logs hold many prompts built from one template ("Переведи на английский:
{text}", a service's fixed system prompt + a filled form). :func:`template_clusters`
groups such prompts with MinHash LSH (datasketch) over word shingles of a *template
view* of the prompt: the system turn plus the first and last words of the last user
turn, digits folded to ``0`` — the part a template fixes, not the part it fills.
When records carry a ``task`` (or ``service``) field, that field is the template
instead (the service said what it is).

Each prompt gets ``template_id`` (the cluster's smallest prompt id) and
``template_rank`` (its rank inside the cluster by ``sha256(seed:id)``, so which
prompts survive a cap does not depend on file order); the ``general.max_per_template``
gate keeps ``template_rank < cap``, which a refilter can change offline.

This is a small stand-in: the evaluation sampler's template clustering should replace
it once it exists, so that pool and evaluation agree on what a template is.
Memory: one MinHash per *leader* plus a parent pointer per prompt during the pass
(see ``bench/general_pool.py``).
"""

from __future__ import annotations

import hashlib
import re
from typing import Sequence

from fabrika.filters.dedup import shingles

_DIGITS = re.compile(r"\d+")


def template_view(messages: Sequence[dict[str, str]], head_words: int = 8, tail_words: int = 6) -> str:
    """The part of a prompt a template fixes: the system turn + the first and last words of the last user turn."""
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    words = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "").split()
    head = words[:head_words]
    tail = words[max(head_words, len(words) - tail_words):]
    return _DIGITS.sub("0", " ".join([system, *head, *tail]).lower())


def _rank(seed: int, rid: str) -> bytes:
    return hashlib.sha256(f"{seed}:{rid}".encode()).digest()


def _find(parent: dict[str, str], x: str) -> str:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def template_clusters(ids: Sequence[str], views: Sequence[str], keys: Sequence[str | None], *,
                      threshold: float = 0.45, num_perm: int = 64, shingle: int = 2,
                      seed: int = 0) -> dict[str, tuple[str, int]]:
    """``id → (template_id, template_rank)``; a non-null ``keys[i]`` (task/service) overrides MinHash.

    Two prompts share a template when the Jaccard similarity of their template views'
    word shingles (estimated by MinHash, checked after the LSH lookup) reaches
    ``threshold``. Leader clustering: a prompt that matches no indexed prompt becomes a
    leader and enters the index; one that matches joins its leaders' clusters (union–find,
    so a prompt matching two leaders merges them). Lookups stay cheap however large a
    template grows (indexing every member made a big template quadratic).
    """
    from datasketch import MinHash, MinHashLSH  # imported on use: it pulls scipy (~0.4 s of a process's start)

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    parent: dict[str, str] = {}
    sigs: dict[str, MinHash] = {}
    by_key: dict[str, str] = {}
    for rid, view, key in zip(ids, views, keys, strict=True):
        parent[rid] = rid
        if key is not None:
            parent[rid] = by_key.setdefault(key, rid)
            continue
        sh = shingles(view, shingle)
        if not sh:
            continue
        m = MinHash(num_perm=num_perm, seed=1)
        m.update_batch(list(sh))
        matched = False
        for other in lsh.query(m):
            if m.jaccard(sigs[other]) >= threshold:
                matched = True
                a, b = _find(parent, rid), _find(parent, other)
                if a != b:
                    parent[max(a, b)] = min(a, b)
        if not matched:  # only leaders go into the index: a 10^4-prompt template costs one lookup, not 10^4
            lsh.insert(rid, m)
            sigs[rid] = m
    members: dict[str, list[str]] = {}
    for rid in parent:
        members.setdefault(_find(parent, rid), []).append(rid)
    out: dict[str, tuple[str, int]] = {}
    for group in members.values():
        tid = min(group)
        for rank, rid in enumerate(sorted(group, key=lambda r: _rank(seed, r))):
            out[rid] = (tid, rank)
    return out
