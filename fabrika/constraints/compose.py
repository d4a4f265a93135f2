"""Satisfiability by construction for a set of constraints, library and LLM-written alike.

A set is **accepted** only with a witness: a generated joint answer that passes every
verifier of every member. It is **refused** with a witness of the conflict when the
members' stated facets exclude each other (two different required openings, two
different required endings, word bounds that do not overlap, an opening plus an ending
longer than the word limit), or as **redundant** when one word-count bound already
implies another. A set with neither a joint answer nor a conflict witness is refused as
``no_joint_answer`` (nothing proves it satisfiable).

The decision works on **structured** constraints only (:func:`decide`): a library constraint is
its id and parameters; a free phrasing takes part only once :func:`fabrika.constraints.structure.structure`
maps it, whole, to library constraints (a conservative map of a closed set of forms: digit word
bounds, a quoted opening or ending; every other word must be neutral). Conflicts are then the
library's own (its conflict table and parameter rules, the facets below), and a witness must pass the
mapped constraints' trusted verifiers. A phrasing that maps to nothing and brings no verifier of its
own is refused as ``cannot_verify`` — never accepted on the strength of a parser that did not read it.

An unmapped phrasing that brings its own verifier (``if.multi.prompts``: an LLM-written constraint with
sandboxed verifiers) takes part as an opaque member: no facets, its verifier judges the witness. It is still
refused as ``cannot_verify`` when it speaks of a facet (opening, ending, word count: :func:`mentions`) that
another member fixes — its verifier may check less than its text demands, so the pair could demand two
openings or stack two bounds while every verifier passes.

Witness texts (:func:`witness_candidates`) are built from the members' positive cases
(alone and joined), given the required opening and ending, and padded with neutral
sentences up to the lower word bound or cut down to the upper one. Library verifiers run
here; LLM-written verifiers are the caller's (the pipeline runs them in the sandbox), so
:func:`decide` takes a ``check`` that judges a batch of texts for the whole set.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabrika.constraints.structure import Structured, mentions, structure
from fabrika.textutil.segment import prose_words

WordBounds = tuple[int, int | None]

@dataclass(frozen=True)
class Facets:
    """What a constraint states about an answer's word count, opening and ending (None: nothing)."""

    words: WordBounds | None = None
    start: str | None = None
    end: str | None = None


def library_facets(cid: str, params: Mapping[str, Any]) -> Facets:
    """Facets of a library constraint, from its parameters."""
    words_b: WordBounds | None = None
    if cid == "ru.length.words_max":
        words_b = (0, params["n"])
    elif cid == "ru.length.words_min":
        words_b = (params["n"], None)
    elif cid == "ru.length.words_range":
        words_b = (params["lo"], params["hi"])
    start = params.get("phrase") if cid == "ru.startend.start_phrase" else None
    end = params.get("phrase") if cid == "ru.startend.end_phrase" else None
    if cid == "ru.repeat.request_first":
        start = params.get("request")
    return Facets(words_b, start, end)


@dataclass
class Member:
    """One constraint of a set: its text, facets, positive cases, a local verifier (library or mapped
    constraints, or the caller's) and ``structured``: the library constraints it is (None: unmapped)."""

    id: str
    text: str
    facets: Facets
    positives: tuple[str, ...] = ()
    verify: Callable[[str], bool] | None = None
    library_id: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    structured: Structured | None = None


def structured_facets(structured: Structured) -> Facets:
    """The facets of a set of structured constraints (word bounds intersect; the first opening and ending)."""
    lo, hi, bounded = 0, None, False
    start = end = None
    for cid, params in structured:
        f = library_facets(cid, params)
        if f.words is not None:
            bounded = True
            lo = max(lo, f.words[0])
            hi = f.words[1] if hi is None else (hi if f.words[1] is None else min(hi, f.words[1]))
        start = start or f.start
        end = end or f.end
    return Facets((lo, hi) if bounded else None, start, end)


def _verifier(structured: Structured, extra: Callable[[str], bool] | None = None) -> Callable[[str], bool]:
    from fabrika.constraints.combine import get

    checks = [(get(cid), dict(params)) for cid, params in structured]

    def verify(text: str) -> bool:
        return all(c.verify(text, p) for c, p in checks) and (extra is None or extra(text))

    return verify


def library_member(cid: str, params: Mapping[str, Any], *, id: str | None = None) -> Member:
    """A library constraint with its own verifier."""
    from fabrika.constraints.combine import get

    c, p = get(cid), dict(params)
    structured: Structured = ((cid, p),)
    return Member(id or cid, c.render(params), library_facets(cid, params), (), _verifier(structured), cid, p,
                  structured)


def text_member(id: str, text: str, positives: Iterable[str] = (), verify: Callable[[str], bool] | None = None) -> Member:
    """A free phrasing, mapped to structured constraints where :func:`structure` can map it whole.

    Mapped: its facets and its verifier are the mapped library constraints' (and ``verify`` too, when
    given). Unmapped: no facets; ``verify`` (its own verifier) is its only checkable part, and without
    one :func:`decide` refuses it as ``cannot_verify``.
    """
    structured = structure(text)
    if structured is None:
        return Member(id, text, Facets(), tuple(positives), verify)
    return Member(id, text, structured_facets(structured), tuple(positives), _verifier(structured, verify),
                  structured=structured)


@dataclass(frozen=True)
class Decision:
    """``verdict``: ``compatible`` (``witness`` is a joint answer), ``conflict`` (``reason`` names the
    excluding facets or library rule), ``redundant``, ``no_joint_answer`` or ``cannot_verify`` (a member
    maps to no structured constraint and has no verifier)."""

    verdict: str
    reason: str
    witness: str | None = None

    @property
    def accepted(self) -> bool:
        return self.verdict == "compatible"


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s.replace("ё", "е").replace("Ё", "Е")).strip().casefold()


def _words(s: str) -> int:
    return len(prose_words(s))


def structured_conflict(members: Sequence[Member]) -> str | None:
    """A library rule that excludes two members' structured constraints (id-level table, parameter rules).

    Two constraints of the same kind are left to the facets and the witness (two word bounds intersect,
    one opening may be a prefix of the other).
    """
    from fabrika.constraints.base import REGISTRY
    from fabrika.constraints.conflicts import params_conflict

    for i, ma in enumerate(members):
        for mb in members[i + 1 :]:
            for ca, pa in ma.structured or ():
                for cb, pb in mb.structured or ():
                    if ca == cb:
                        continue
                    if cb in REGISTRY[ca].conflicts or params_conflict(ca, pa, cb, pb):
                        return f"the library forbids {ca} {dict(pa)} ({ma.id}) with {cb} {dict(pb)} ({mb.id})"
    return None


def facet_conflict(members: Sequence[Member]) -> str | None:
    """A witness of a conflict between the members' facets, or None."""
    starts = [(m, m.facets.start) for m in members if m.facets.start]
    for i, (ma, a) in enumerate(starts):
        for mb, b in starts[i + 1 :]:
            na, nb = _norm(a or ""), _norm(b or "")
            if not (na.startswith(nb) or nb.startswith(na)):
                return f"two different openings: «{a}» ({ma.id}) vs «{b}» ({mb.id})"
    ends = [(m, m.facets.end) for m in members if m.facets.end]
    for i, (ma, a) in enumerate(ends):
        for mb, b in ends[i + 1 :]:
            na, nb = _norm(a or ""), _norm(b or "")
            if not (na.endswith(nb) or nb.endswith(na)):
                return f"two different endings: «{a}» ({ma.id}) vs «{b}» ({mb.id})"
    bounded = [(m, m.facets.words) for m in members if m.facets.words]
    lo = max((b[0] for _, b in bounded), default=0)
    his = [(m, b[1]) for m, b in bounded if b[1] is not None]
    if his:
        mh, hi = min(his, key=lambda x: x[1] or 0)
        assert hi is not None
        if bounded and lo > hi:
            ml = max(bounded, key=lambda x: x[1][0])[0]
            return f"word bounds do not overlap: at least {lo} ({ml.id}) vs at most {hi} ({mh.id})"
        start = max((s for _, s in starts), key=len, default="")
        end = max((e for _, e in ends), key=len, default="")
        need = _words(start or "") + _words(end or "")
        if need > hi:
            return f"the required opening and ending take {need} words, the limit is {hi} ({mh.id})"
    return None


def redundant_bound(members: Sequence[Member]) -> str | None:
    """Two word-count bounds where one implies the other (every text within the inner passes the outer)."""
    bounded = [(m, m.facets.words) for m in members if m.facets.words]
    for i, (ma, a) in enumerate(bounded):
        for mb, b in bounded[i + 1 :]:
            assert a is not None and b is not None
            for (mi, inner), (mo, outer) in (((ma, a), (mb, b)), ((mb, b), (ma, a))):
                if inner[0] >= outer[0] and (outer[1] is None or (inner[1] is not None and inner[1] <= outer[1])):
                    return f"redundant word bounds: {mo.id} {outer} already holds under {mi.id} {inner}"
    return None


_FILLER = ("Это важно учитывать.", "Разберём всё по порядку.", "Каждый шаг имеет значение.",
           "Подробности приведены ниже.", "Так проще понять суть.", "Здесь есть несколько нюансов.")


def _fit(body: str, lo: int, hi: int | None, fixed: int) -> str | None:
    """``body`` padded with filler sentences up to ``lo - fixed`` words or cut to ``hi - fixed``; None if it cannot."""
    n = _words(body)
    i = 0
    while n + fixed < lo:
        s = _FILLER[i % len(_FILLER)]
        body = f"{body} {s}".strip()
        n += _words(s)
        i += 1
    if hi is not None and n + fixed > hi:
        room = hi - fixed
        if room < 0:
            return None
        toks = body.split()
        while toks and _words(" ".join(toks)) > room:
            toks.pop()
        body = " ".join(toks)
        if body and body[-1].isalnum():
            body += "."
        if _words(body) + fixed < lo:
            return None
    return body


def witness_candidates(members: Sequence[Member], limit: int = 24) -> list[str]:
    """Joint answers to try: positive cases (alone, joined), each given the required opening and ending and
    brought within the word bounds; a filler-only answer last."""
    starts = sorted((m.facets.start for m in members if m.facets.start), key=len)
    ends = sorted((m.facets.end for m in members if m.facets.end), key=len)
    if not ends:  # a required last word («завершите словом «итог»») closes the composed answer
        ends = [str(p["word"]) for m in members for cid, p in m.structured or () if cid == "ru.startend.last_word"][:1]
    start, end = (starts[-1] if starts else ""), (ends[-1] if ends else "")
    bounded = [m.facets.words for m in members if m.facets.words]
    lo = max((b[0] for b in bounded), default=0)
    his = [b[1] for b in bounded if b[1] is not None]
    hi = min(his) if his else None
    fixed = _words(start) + _words(end)
    pos = [p for m in members for p in m.positives]
    bodies: list[str] = list(pos)
    bodies += [f"{a.rstrip()} {b.lstrip()}" for i, a in enumerate(pos) for b in pos[i + 1 :]]
    bodies += [_FILLER[0]]
    out: list[str] = []
    seen: set[str] = set()
    for body in bodies:
        core = body
        if start and _norm(core).startswith(_norm(start)):
            core = core.strip()[len(start):].lstrip()
        if end and _norm(core).endswith(_norm(end)):
            core = core.strip()[: -len(end)].rstrip()
        for variant in (core, body):
            fitted = _fit(variant, max(lo, 1), hi, fixed if variant is core else 0)
            if fitted is None:
                continue
            text = f"{start} {fitted} {end}".strip() if variant is core else fitted
            text = re.sub(r"\s+", " ", text)
            if text not in seen:
                seen.add(text)
                out.append(text)
        if len(out) >= limit:
            break
    # whole-text case forms, for «all lowercase» / «all caps» members
    return out + [form(t) for form in (str.lower, str.upper) for t in out[:4] if form(t) not in seen]


def facet_check(member: Member, text: str) -> bool:
    """The member's parsed facets hold on ``text`` (used for members without a verifier)."""
    f = member.facets
    n = _words(text)
    if f.words and (n < f.words[0] or (f.words[1] is not None and n > f.words[1])):
        return False
    if f.start and not _norm(text).startswith(_norm(f.start)):
        return False
    return not (f.end and not _norm(text).endswith(_norm(f.end)))


def local_check(members: Sequence[Member], texts: Sequence[str]) -> list[bool]:
    """Every member passes: its verifier where it has one, else its parsed facets."""
    return [all(m.verify(t) if m.verify is not None else facet_check(m, t) for m in members) for t in texts]


#: library constraints that fix a facet without a :class:`Facets` value (a P.S. closes the answer, a last word)
_FIXES: dict[str, str] = {"ru.startend.last_word": "end", "ru.format.postscript": "end", "ru.repeat.request_first": "start"}
_FACET_NAMES = {"start": "opening", "end": "ending", "words": "word count"}


def fixed_facets(member: Member) -> frozenset[str]:
    """The facets (``start``, ``end``, ``words``) ``member`` fixes, or speaks of when it is unmapped."""
    f = member.facets
    kinds = {k for k, v in (("words", f.words), ("start", f.start), ("end", f.end)) if v}
    kinds |= {_FIXES[cid] for cid, _ in member.structured or () if cid in _FIXES}
    if member.structured is None:
        kinds |= mentions(member.text)
    return frozenset(kinds)


def unverifiable(members: Sequence[Member]) -> str | None:
    """An unmapped member that speaks of a facet another member fixes: nothing here reads what it demands there."""
    for m in members:
        said = mentions(m.text) if m.structured is None else frozenset()
        for other in members:
            shared = said & fixed_facets(other) if other is not m else frozenset()
            if shared:
                names = ", ".join(_FACET_NAMES[k] for k in sorted(shared))
                return (f"cannot verify compatibility: «{m.text}» ({m.id}) maps to no structured constraint and "
                        f"speaks of the {names} that {other.id} fixes")
    return None


def refusal(members: Sequence[Member], *, refuse_redundant: bool = True) -> Decision | None:
    """The structured part of :func:`decide`: a conflict, a redundant bound or ``cannot_verify``, else None.

    Callers that judge witnesses elsewhere (``if.multi.prompts`` runs LLM-written verifiers in the sandbox)
    take this and :func:`witness_candidates` instead of :func:`decide`.
    """
    if (why := facet_conflict(members) or structured_conflict(members)) is not None:
        return Decision("conflict", why)
    if refuse_redundant and (why := redundant_bound(members)) is not None:
        return Decision("redundant", why)
    if (why := unverifiable(members)) is not None:
        return Decision("cannot_verify", why)
    return None


def decide(
    members: Sequence[Member],
    check: Callable[[Sequence[str]], list[bool]] | None = None,
    *,
    table_ok: bool | None = None,
    refuse_redundant: bool = True,
) -> Decision:
    """Accept with a joint answer or refuse with a conflict witness (see the module doc).

    ``check`` judges candidate texts against the verifiers this module cannot run (the LLM-written
    ones, for every member without a local verifier; ``None``: there are none, so a member that is
    neither structured nor verifiable is refused as ``cannot_verify``). ``table_ok``: the library
    conflict table's verdict on a library-only set — it is authoritative there (its every allowed pair
    has a tested witness), so a library set it allows is accepted even when no witness is built here.
    """
    if check is None:
        blind = [m for m in members if m.structured is None and m.verify is None]
        if blind:
            m = blind[0]
            return Decision("cannot_verify", f"cannot verify compatibility: «{m.text}» ({m.id}) maps to no structured "
                            "constraint and has no verifier")
    if (refused := refusal(members, refuse_redundant=refuse_redundant)) is not None:
        return refused
    if table_ok is False:
        return Decision("conflict", "the library conflict table forbids this pair")
    texts = witness_candidates(members)
    local = local_check(members, texts)
    remote = check(texts) if check is not None and any(local) else []
    for i, t in enumerate(texts):
        if local[i] and (not remote or remote[i]):
            return Decision("compatible", "a joint answer passes every verifier", t)
    if table_ok:
        return Decision("compatible", "the library conflict table allows it (tested witness)")
    return Decision("no_joint_answer", f"none of {len(texts)} composed answers passes every verifier")


def member_from_spec(spec: Mapping[str, Any], id: str) -> Member:
    """A member from ``{"library": id, "params": {...}}`` or ``{"text": ..., "positives": [...]}`` (test data)."""
    if "library" in spec:
        return library_member(spec["library"], spec.get("params") or {}, id=id)
    return text_member(id, spec["text"], spec.get("positives") or ())


def pair_decision(a: Mapping[str, Any], b: Mapping[str, Any]) -> Decision:
    """:func:`decide` on two specs; a library pair also consults the conflict table."""
    from fabrika.constraints.combine import get
    from fabrika.constraints.conflicts import params_conflict

    table_ok = None
    if "library" in a and "library" in b:
        pa, pb = a.get("params") or {}, b.get("params") or {}
        table_ok = not (b["library"] in get(a["library"]).conflicts or params_conflict(a["library"], pa, b["library"], pb))
    return decide([member_from_spec(a, "a"), member_from_spec(b, "b")], table_ok=table_ok)
