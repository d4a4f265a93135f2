"""Sampling, rendering and recording combinations of library constraints."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fabrika.constraints.base import REGISTRY, SeedConstraint
from fabrika.constraints.bounds import bounds_redundant
from fabrika.constraints.conflicts import params_conflict
from fabrika.errors import ConfigError
from fabrika.schemas import Constraint, derive_seed, stable_id

Combination = list[tuple[str, dict[str, Any]]]
_PARAM_TRIES = 5


def get(cid: str) -> SeedConstraint:
    """The registered constraint ``cid`` (an ``id@hash`` record id also works)."""
    base = cid.split("@", 1)[0]
    try:
        return REGISTRY[base]
    except KeyError:
        raise ConfigError(f"unknown library constraint id {cid!r}; see fabrika.constraints.REGISTRY") from None


def compatible(combo: Sequence[tuple[str, Mapping[str, Any]]], cid: str, params: Mapping[str, Any]) -> bool:
    """Can ``cid`` with ``params`` join ``combo``: no conflict (id and parameter level) and no redundant bound?"""
    c = REGISTRY[cid]
    return all(
        other not in c.conflicts and not params_conflict(other, op, cid, params) and not redundant(other, op, cid, params)
        for other, op in combo
    )


def redundant(a: str, pa: Mapping[str, Any], b: str, pb: Mapping[str, Any]) -> bool:
    """True if one of the two adds nothing next to the other (a length bound the other already implies).

    «не более 120 слов» with «от 20 до 80 слов» asks the same thing twice; such a prompt
    teaches nothing the single bound does not, so combinations refuse it.
    """
    return bounds_redundant(a, pa, b, pb) or bounds_redundant(b, pb, a, pa)


def sample_combination(
    rng: random.Random,
    k_min: int = 1,
    k_max: int = 6,
    *,
    ids: Iterable[str] | None = None,
    families: Iterable[str] | None = None,
) -> Combination:
    """Draw ``k`` in [k_min, k_max] mutually compatible constraints with sampled params.

    Candidates come in a random order; each is tried with a few parameter draws
    and skipped when it conflicts. Fewer than ``k_min`` may come back only if the
    candidate pool is too small or too conflicting.
    """
    if not 1 <= k_min <= k_max:
        raise ConfigError(f"need 1 <= k_min <= k_max, got k_min={k_min}, k_max={k_max}")
    pool = sorted(ids) if ids is not None else sorted(REGISTRY)
    if families is not None:
        fam = set(families)
        pool = [c for c in pool if REGISTRY[c].family in fam]
    for cid in pool:
        get(cid)
    k = rng.randint(k_min, k_max)
    rng.shuffle(pool)
    combo: Combination = []
    for cid in pool:
        if len(combo) >= k:
            break
        for _ in range(_PARAM_TRIES):
            params = REGISTRY[cid].sample_params(rng)
            if compatible(combo, cid, params):
                combo.append((cid, params))
                break
            if any(other in REGISTRY[cid].conflicts for other, _ in combo):
                break  # id-level conflict: other params will not help
    return combo


def render_combination(
    combo: Sequence[tuple[str, Mapping[str, Any]]], lang: str = "ru", *, numbered: bool | None = None
) -> str:
    """The instructions of ``combo`` as one block: a numbered list, or one line for a single constraint."""
    texts = [get(cid).render(params, lang=lang) for cid, params in combo]
    if numbered is None:
        numbered = len(texts) > 1
    if not numbered:
        return " ".join(texts)
    return "\n".join(f"{i}. {t}" for i, t in enumerate(texts, 1))


def check_combination(combo: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Reasons why ``combo`` is not valid (empty when it is): unknown ids and conflicts."""
    problems: list[str] = []
    for i, (a, pa) in enumerate(combo):
        if a.split("@", 1)[0] not in REGISTRY:
            problems.append(f"unknown constraint id {a!r}")
            continue
        for b, pb in combo[i + 1 :]:
            if b in REGISTRY and (b in REGISTRY[a].conflicts or params_conflict(a, pa, b, pb)):
                problems.append(f"{a} {dict(pa)} conflicts with {b} {dict(pb)}")
            elif b in REGISTRY and redundant(a, pa, b, pb):
                problems.append(f"{a} {dict(pa)} and {b} {dict(pb)} are redundant: one bound implies the other")
    return problems


def to_constraint_record(cid: str, params: Mapping[str, Any], lang: str = "ru") -> Constraint:
    """A :class:`fabrika.schemas.Constraint` for a library constraint with params.

    ``id`` is ``<library id>@<hash of params>`` (stable); ``parent_id`` is the library id.
    """
    c = get(cid)
    return Constraint(
        id=f"{c.id}@{stable_id(c.id, dict(params))[:10]}",
        text=c.render(params, lang=lang),
        lang=lang,
        source="library",
        parent_id=c.id,
        family=c.family,
        params=dict(params),
    )


def library_seeds(seed: int = 0, lang: str = "ru") -> list[Constraint]:
    """One record per library constraint, params drawn from ``derive_seed(id, seed)`` (stable).

    The IF pipeline's seed pool: each record can be combined, or expanded by an LLM
    (its ``parent_id`` then points back at the library id).
    """
    out = []
    for cid in sorted(REGISTRY):
        params = REGISTRY[cid].sample_params(random.Random(derive_seed(cid, seed)))
        out.append(to_constraint_record(cid, params, lang=lang))
    return out


def verify_all(response: str, combo: Sequence[tuple[str, Mapping[str, Any]]], *, loose: bool = False) -> list[bool]:
    """Verdict of each constraint of ``combo`` on ``response``."""
    out = []
    for cid, params in combo:
        c = get(cid)
        out.append(c.verify_loose(response, params) if loose else c.verify(response, params))
    return out
