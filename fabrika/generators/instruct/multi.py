"""``if.multi.prompts``: prompts with 2–6 atomic constraints, library and LLM-written ones together.

Each of ``target_count`` slots (the stage's items: ids ``ifm-slot-<i>``, so resume and
determinism hold) draws a constraint count from ``count_weights`` and fills it with
library constraints (``fabrika.constraints``, params sampled) and surviving LLM-written
constraints (the gated rows of the ``if.verifiers`` table, with the ``if.consistency``
scores joined: their verifiers and stored test cases). A candidate is refused when

* the **conflict table** forbids it next to a library constraint already chosen
  (``conflict_table: …``);
* it is LLM-written and its verifiers **contradict** another LLM-written member on the
  stored test cases: no supported positive case of either (with at least three letters:
  letterless cases satisfy case rules vacuously) passes the other's surviving verifiers, so
  the cases hold no text that satisfies both (``verifier_contradiction: …``;
  run only in the sandbox; ``contradiction: any_positive_fails`` refuses a pair as soon as
  one positive case fails the other — stricter, and it refuses most pairs of short cases);
* an **LLM conflict judge** (structured output) flags a pair that involves an
  LLM-written constraint (``conflict_judge: …``) — library pairs are the table's job.

* with ``composition: witness`` (the default), the set is not **composable by construction**
  (:mod:`fabrika.constraints.compose`, the one parser: :func:`fabrika.constraints.structure.structure`
  maps an LLM-written text, whole, to library constraints or to nothing). Mapped members take the
  library's facets, rules and verifiers; the set is refused when they exclude each other — two different
  required openings or endings, disjoint word bounds, a library rule — (``composition_conflict: …``,
  naming the phrases, bounds or rule), when one word bound implies another (``redundant_bound: …``), when
  an unmapped text speaks of a facet (opening, ending, word count) another member fixes
  (``cannot_verify: …``: nothing reads what it demands there, and its verifier may check less than its
  text), or when no composed joint answer (stored positive cases given the required opening/ending, padded
  or cut to the word bounds) passes every verifier of the set (``no_joint_answer: …``; LLM-written
  verifiers run in the sandbox). A kept prompt stores that joint answer (``witness``). A pair whose stored
  cases hold no joint answer is kept when a composed one passes (``verifier_contradiction`` only when none
  does). This covers library × LLM-written pairs too; the judge is the second opinion.

An LLM-written pair whose verifiers agree on every stored case (paraphrases of one rule that
dedup did not catch) is refused as ``redundant: …``. Library members without facets (JSON, lists, case …)
stay out of the composed answer: the conflict table and the judge cover them. The surviving
LLM-written pool is held in memory (text, kept verifiers, positive cases per constraint; about 2 KB each).

Every refusal is a recorded ``rejected`` row naming both constraints, so a contradicting
pair is visible in the funnel and never reaches a prompt. A judge failure rejects the slot
(it is never taken for "no conflict").
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Literal

from pydantic import Field, field_validator

import fabrika.generators.instruct.columns as cols
import fabrika.generators.instruct.prompts as prompts
from fabrika.generators.instruct.queries import DEFAULT_POOL, SYSTEM_TEMPLATES, USER_TEMPLATES, load_pool
from fabrika.generators.instruct.verifiers import current_min_accuracy, get_sandbox
from fabrika.llm.rejections import answer_problem
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.columns import Column, Contract
from fabrika.pipeline.preflight import InputFile
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas import stable_id
from fabrika.schemas.instruct import IFConstraintRow
from fabrika.schemas.rows import dumps
from fabrika.textutil.answers import ParseFailure, answer_int, extract_json, is_failure
from fabrika.textutil.reasoning import answer_text as strip_reasoning

if TYPE_CHECKING:
    from fabrika.constraints.compose import Member

TAG_CONFLICT = "if.multi.conflict"

CONFLICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"reason": {"type": "string"}, "conflict": {"type": "boolean"},
                   "pairs": {"type": "array", "items": {"type": "array", "items": {"type": "integer", "minimum": 1},
                                                        "minItems": 2, "maxItems": 2}}},
    "required": ["reason", "conflict", "pairs"],
    "additionalProperties": False,
}

#: Default shares of 2..6 constraints per prompt. The reference recipe reports 2–6 per prompt
#: (14K prompts) but not the shares; these lean towards fewer, as IFEval-style sets do.
DEFAULT_COUNT_WEIGHTS = {2: 0.3, 3: 0.28, 4: 0.2, 5: 0.13, 6: 0.09}


class MultiPromptsConfig(StageConfig):
    """Config of ``if.multi.prompts`` (``input``: the ``if.verifiers`` stage, scored by ``if.consistency``)."""

    target_count: int = Field(default=14_000, ge=0, description="Prompts to compose (reference recipe: 14K).")
    count_weights: dict[int, float] = Field(default_factory=lambda: dict(DEFAULT_COUNT_WEIGHTS),
                                            description="Relative weight of each constraint count (2..6 by default).")
    llm_share: float = Field(default=0.5, ge=0, le=1, description="Chance that a constraint slot takes an "
                             "LLM-written constraint (when the pool has any).")
    library_ids: list[str] | None = Field(default=None, description="Library constraints to draw from (None: all "
                                          "but the excluded prefixes).")
    exclude_library: list[str] = Field(default_factory=lambda: ["ru.language.", "ru.repeat."],
                                       description="Library id prefixes never drawn (other languages, copy tasks).")
    max_verifiers: int = Field(default=3, ge=1, le=16, description="Best surviving verifiers kept per LLM-written "
                               "constraint (all must pass: the strict verdict).")
    contradiction: Literal["no_joint_case", "any_positive_fails"] = Field(
        default="no_joint_case", description="When two LLM-written constraints contradict on their stored cases: "
        "'no_joint_case' = fewer than `min_witnesses` positive cases of either pass the other's verifiers (no stored "
        "text satisfies both); 'any_positive_fails' = any positive case of one fails the other (much stricter: short "
        "cases fail length constraints, so most pairs are refused).")
    composition: Literal["witness", "stored_cases"] = Field(
        default="witness", description="'witness': a set is kept only when a composed joint answer (stored "
        "positive cases given the required opening/ending, padded or cut to the word bounds) passes every verifier, "
        "and refused with the conflicting facets (two openings, two endings, disjoint or redundant word bounds); "
        "'stored_cases': the stored cases alone decide (the old check).")
    min_witnesses: int = Field(default=1, ge=0, description="'no_joint_case': stored positive cases that must satisfy "
                               "both members of an LLM-written pair (0 turns the verifier check off).")
    refuse_redundant: bool = Field(default=True, description="Refuse an LLM-written pair whose verifiers agree on "
                                   "every stored case of both (two phrasings of one constraint).")
    conflict_judge: bool = Field(default=True, description="Ask an LLM judge whether a prompt with LLM-written "
                                 "constraints holds a contradiction.")
    judge_rounds: int = Field(default=2, ge=1, le=5, description="Judge → drop flagged → judge again, at most this "
                              "many times; still flagged after that rejects the slot.")
    judge_model: str | None = Field(default=None, description="Conflict judge model (None: the engine default).")
    tries_per_slot: int = Field(default=6, ge=1, le=50, description="Candidates tried per constraint slot.")
    query_pool: Path | None = Field(default=None, description="jsonl/parquet of queries; None: the shipped Russian pool.")
    system_share: float = Field(default=0.6, ge=0, le=1, description="Share of prompts with the constraints in the "
                                "system prompt (the rest append them to the user turn).")
    timeout_s: float = Field(default=1.0, gt=0, le=60, description="Sandbox budget per verifier call.")

    @field_validator("count_weights")
    @classmethod
    def _counts(cls, v: dict[int, float]) -> dict[int, float]:
        if not v or any(not 1 <= k <= 10 or w < 0 for k, w in v.items()) or sum(v.values()) <= 0:
            raise ValueError(f"count_weights must map counts in 1..10 to non-negative weights with a positive sum, "
                             f"got {v!r}")
        return v


def conflict_request(texts: list[str], *, model: str | None) -> ChatRequest:
    """Ask whether the numbered constraints can all hold in one answer (structured output)."""
    messages = prompts.render("conflict", constraints=texts)
    return ChatRequest(messages=messages, model=model, temperature=0.0, tag=TAG_CONFLICT,
                       response_format={"type": "json_schema", "json_schema": {"name": "conflict",
                                                                               "schema": CONFLICT_SCHEMA}})


def parse_conflict(text: str | None, n: int) -> tuple[bool, list[tuple[int, int]], str] | ParseFailure:
    """``(conflict, pairs (0-based), reason)`` from a judge answer; a flagged conflict needs valid pairs."""
    value = extract_json(strip_reasoning(text), expect=dict)
    if is_failure(value):
        return value
    flag = value.get("conflict")
    if not isinstance(flag, bool):
        return ParseFailure("bad_conflict: no boolean 'conflict'")
    pairs: list[tuple[int, int]] = []
    for p in value.get("pairs") or []:
        raw = list(p.values()) if isinstance(p, dict) else p  # {"a": 1, "b": 3} is read as [1, 3]
        ints = [answer_int(i) for i in raw] if isinstance(raw, list) else []
        nums = [i for i in ints if i is not None and 1 <= i <= n]
        if len(ints) != 2 or len(nums) != 2 or nums[0] == nums[1]:
            return ParseFailure(f"bad_conflict: pair {p!r} is not two distinct numbers in 1..{n}")
        pairs.append((min(nums) - 1, max(nums) - 1))
    if flag and not pairs:
        return ParseFailure("bad_conflict: conflict flagged without pairs")
    return flag, pairs, str(value.get("reason") or "")[:300]


def _substantive(text: str) -> bool:
    """A case that can witness compatibility: letterless cases ("2024", "") pass both "all lowercase" and
    "all uppercase" vacuously, so they never count."""
    return sum(ch.isalpha() for ch in text) >= 3


def render_instructions(texts: list[str]) -> str:
    return "\n".join(f"{i}. {t}" for i, t in enumerate(texts, 1))


@register_stage
class MultiPromptsStage(Stage[MultiPromptsConfig]):
    """Per slot: one prompt with 2–6 compatible constraints, plus a rejected row per refused candidate."""

    kind = "if.multi.prompts"
    #: the prompts it renders (their text is in its fingerprint: an edit redoes it)
    prompt_templates: ClassVar[tuple[Any, ...]] = (prompts.CATALOGUE.select("conflict"),)
    reads = (cols.TEXT, cols.FUNCTIONS, cols.CONSISTENCY[2], *(c for c in cols.CONSTRAINT_READS if c.name != "text"),
             Column("sample_index", int, required=False))
    writes = cols.MULTI_PROMPT
    input_files = (InputFile("query_pool", "query pool", fields=("text",), default=str(DEFAULT_POOL),
                             fix="one JSON object with a non-empty 'text' per line (optional 'id')"),)

    @classmethod
    def contract(cls, config: MultiPromptsConfig) -> Contract:
        return Contract(cls.reads, cls.writes, hints={"functions": cols.CONSISTENCY_HINT,
                                                      "case_support": cols.CONSISTENCY_HINT})

    @classmethod
    def check_config(cls, config: MultiPromptsConfig, pipeline: Any) -> list[tuple[str, str]]:
        from fabrika.generators.instruct.verifiers import consistency_before

        problems = consistency_before(config, pipeline) if config.input else []
        if config.library_ids:
            from fabrika.constraints import REGISTRY

            unknown = [c for c in config.library_ids if c not in REGISTRY]
            if unknown:
                problems.append(("library_ids", f"unknown library constraint ids {unknown}; see fabrika "
                                                "catalogue of fabrika.constraints.REGISTRY"))
        return problems

    def input_rows(self) -> Iterator[Row]:
        for i in range(self.config.target_count):
            yield {"id": f"ifm-slot-{i:06d}"}

    async def setup(self) -> None:
        from fabrika.constraints import REGISTRY

        cfg = self.config
        path = self.ctx.pipeline.resolve_path(cfg.query_pool) if cfg.query_pool else DEFAULT_POOL
        self.queries = load_pool(path)
        ids = cfg.library_ids or [c for c in sorted(REGISTRY) if not c.startswith(tuple(cfg.exclude_library))]
        self.library = sorted(ids)
        self.pool = self._llm_pool() if cfg.input else []
        self.sandbox = get_sandbox(self.ctx, cfg.timeout_s) if self.pool else None
        self.pairs: dict[tuple[str, str], asyncio.Future[tuple[int, int, bool]] | tuple[int, int, bool]] = {}
        self.composed: dict[tuple[str, ...], tuple[str | None, int]] = {}  # member ids -> (joint answer, tried)
        self.mapped: dict[str, Member] = {}  # LLM-written constraint id -> its compose.Member (mapped once)

    def _llm_pool(self) -> list[dict[str, Any]]:
        """Surviving LLM-written constraints: text, best verifiers, supported positive cases (sorted by id)."""
        min_acc = current_min_accuracy(self.ctx)
        inputs = [self.config.input] if isinstance(self.config.input, str) else list(self.config.input or [])
        out = []
        for r in self.ctx.iter_rows(inputs[0], gated=True, columns=["id", "text", "source", "family", "functions",
                                                                   "case_support", "sample_index"]):
            c = IFConstraintRow.of(r)
            if c.source == "library" or c.sample_index is not None:
                continue
            funcs = c.surviving(min_acc, self.config.max_verifiers)
            if not funcs:
                continue
            cases = [case for case in c.case_support if case.support > 0]
            positives = [case.response for case in cases if case.label and _substantive(case.response)]
            negatives = [case.response for case in cases if not case.label]
            out.append({"id": c.id, "text": c.text, "source": c.source or "llm", "family": c.family,
                        "codes": [f.code for f in funcs], "accuracy": [f.accuracy for f in funcs],
                        "positives": positives, "negatives": negatives})
        return sorted(out, key=lambda item: item["id"])

    def _count(self, rng: random.Random) -> int:
        counts = sorted(self.config.count_weights)
        return rng.choices(counts, weights=[self.config.count_weights[c] for c in counts])[0]

    async def _passes_all(self, codes: list[str], texts: list[str]) -> list[bool]:
        if not texts:
            return []
        if self.sandbox is None:
            raise RuntimeError("pair checks run LLM-written verifiers: the stage has no sandbox without an input pool")
        sandbox = self.sandbox
        runs = await asyncio.gather(*(sandbox.run(code, texts) for code in codes))
        return [all(run[i].passed for run in runs) for i in range(len(texts))]

    async def witnesses(self, a: dict[str, Any], b: dict[str, Any]) -> tuple[int, int, bool]:
        """``(passing, total, same)`` over the two constraints' stored cases.

        ``passing`` of ``total`` positive cases of either pass every kept verifier of the other;
        ``same``: the verifiers also reject each other's negative cases — on every stored case
        the two constraints agree, so one of them adds nothing to a prompt.
        """
        key = (min(a["id"], b["id"]), max(a["id"], b["id"]))
        known = self.pairs.get(key)
        if isinstance(known, tuple):
            return known
        if known is None:  # one sandbox run per pair, shared by concurrent slots; the result is kept, not the task
            async def count() -> tuple[int, int, bool]:
                ab, ba, nab, nba = await asyncio.gather(
                    self._passes_all(b["codes"], a["positives"]), self._passes_all(a["codes"], b["positives"]),
                    self._passes_all(b["codes"], a["negatives"]), self._passes_all(a["codes"], b["negatives"]))
                passing, total = sum(ab) + sum(ba), len(ab) + len(ba)
                same = total > 0 and passing == total and bool(nab or nba) and not any(nab) and not any(nba)
                self.pairs[key] = result = (passing, total, same)
                return result
            known = self.pairs[key] = asyncio.ensure_future(count())
        return await known

    async def _refusal(self, combo: list[dict[str, Any]], cand: dict[str, Any]) -> str | None:
        from fabrika.constraints import compatible

        if cand["source"] == "library":
            lib = [(c["library_id"], c["params"]) for c in combo if c["source"] == "library"]
            if not compatible(lib, cand["library_id"], cand["params"]):
                other = next(c for c in combo if c["source"] == "library"
                             and not compatible([(c["library_id"], c["params"])], cand["library_id"], cand["params"]))
                return f"conflict_table: {cand['id']} × {other['id']}"
            if self.config.composition == "witness" and any(c["source"] != "library" for c in combo):
                return await self._composition(combo, cand)
            return None
        if cand["id"] in {c["id"] for c in combo}:
            return "duplicate"
        strict = self.config.contradiction == "any_positive_fails"
        witness = self.config.composition == "witness"
        if witness and (why := await self._composition(combo, cand, facets_only=True)):
            return why
        if strict or self.config.min_witnesses or self.config.refuse_redundant:
            for other in combo:
                if other["source"] != "library":
                    w, total, same = await self.witnesses(cand["_pool"], other["_pool"])
                    if (w < total) if strict else (w < self.config.min_witnesses):
                        # stored cases hold no joint answer; a composed one may still exist
                        if strict or not witness or await self._composition([other], cand) is not None:
                            return (f"verifier_contradiction: {cand['id']} × {other['id']}: {w} of {total} stored "
                                    f"positive cases satisfy both")
                    if same and self.config.refuse_redundant:
                        return f"redundant: {cand['id']} ≈ {other['id']}: the verifiers agree on every stored case"
        if witness:
            return await self._composition(combo, cand)
        return None

    def _members(self, combo: list[dict[str, Any]]) -> tuple[list[Member], list[Member]]:
        """Structured members of ``combo`` (:mod:`fabrika.constraints.compose`): every member, for the library's
        rules, and those a joint answer is composed for (library members without facets — a P.S., JSON, letter
        case — stay out of it: the conflict table and the judge cover them)."""
        from fabrika.constraints.compose import library_member, text_member

        every: list[Member] = []
        composed: list[Member] = []
        for c in combo:
            if c["source"] == "library":
                m = library_member(c["library_id"], c["params"], id=c["id"])
                if m.facets.words or m.facets.start or m.facets.end:
                    composed.append(m)
            else:  # mapped: the library's facets and verifiers, plus its own (sandbox); unmapped: opaque
                known = self.mapped.get(c["id"])
                m = known or self.mapped.setdefault(c["id"], text_member(c["id"], c["text"], c["_pool"]["positives"]))
                composed.append(m)
            every.append(m)
        return every, composed

    async def _composition(self, combo: list[dict[str, Any]], cand: dict[str, Any], *,
                           facets_only: bool = False) -> str | None:
        """Satisfiability by construction (:mod:`fabrika.constraints.compose`) of ``combo`` + ``cand``.

        Refuses with a witness of the conflict (two openings, two endings, disjoint word bounds, a library
        rule between mapped constraints), a redundant word bound, ``cannot_verify`` (an unmapped phrasing that
        speaks of a facet another member fixes), or — unless ``facets_only`` — when no composed answer passes
        every verifier (library and mapped ones here, LLM-written ones in the sandbox).
        """
        from fabrika.constraints.compose import refusal

        every, composed = self._members([*combo, cand])
        if cand["source"] == "library" and not any(m is every[-1] for m in composed):
            facets_only = True  # a P.S. or a JSON answer is not composed here: table and judge
        if (refused := refusal(every)) is not None:
            kind = {"conflict": "composition_conflict", "redundant": "redundant_bound"}.get(refused.verdict,
                                                                                           refused.verdict)
            return f"{kind}: {cand['id']}: {refused.reason}"
        if facets_only or not any(c["source"] != "library" for c in [*combo, cand]):
            return None
        witness, n = await self._witness([*combo, cand], composed)
        if witness is not None:
            return None
        return (f"no_joint_answer: {cand['id']} × {', '.join(c['id'] for c in combo)}: none of {n} composed "
                f"answers passes every verifier")

    async def _witness(self, combo: list[dict[str, Any]], composed: list[Member]) -> tuple[str | None, int]:
        """The first composed joint answer that passes every verifier of ``composed`` and every LLM-written
        verifier of ``combo`` (sandbox), and how many were tried; cached per ordered member ids."""
        from fabrika.constraints.compose import witness_candidates

        key = tuple(m.id for m in composed)  # ordered: the composed answers depend on the order (deterministic)
        if key not in self.composed:
            texts = witness_candidates(composed)
            texts = [t for t in texts if all(m.verify is None or m.verify(t) for m in composed)]
            passed = await self._passes_all([code for c in combo if c["source"] != "library"
                                             for code in c["verifier_code"]], texts)
            self.composed[key] = (next((t for t, p in zip(texts, passed, strict=True) if p), None), len(texts))
        return self.composed[key]

    def _library_candidate(self, rng: random.Random) -> dict[str, Any]:
        from fabrika.constraints import REGISTRY, to_constraint_record

        cid = rng.choice(self.library)
        rec = to_constraint_record(cid, REGISTRY[cid].sample_params(rng))
        return {"id": rec.id, "text": rec.text, "source": "library", "family": rec.family, "params": rec.params,
                "library_id": cid}

    def _llm_candidate(self, rng: random.Random) -> dict[str, Any]:
        p = rng.choice(self.pool)
        return {"id": p["id"], "text": p["text"], "source": p["source"], "family": p["family"], "params": {},
                "library_id": None, "verifier_code": p["codes"], "accuracy": p["accuracy"], "_pool": p}

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        slot = str(row["id"])
        rng = self.ctx.rng(slot)
        k = self._count(rng)
        kinds = ["llm" if self.pool and rng.random() < cfg.llm_share else "library" for _ in range(k)]
        combo: list[dict[str, Any]] = []
        out: list[Row] = []
        used_lib: set[str] = set()

        def refuse(cand: dict[str, Any], why: str) -> None:
            out.append(rejected(stable_id(slot, "refused", len(out), cand["id"], prefix="ifm-x-"), why, slot_id=slot,
                                constraint_id=cand["id"], constraint_text=cand["text"]))

        for kind in kinds:
            for _ in range(cfg.tries_per_slot):
                cand = self._llm_candidate(rng) if kind == "llm" else self._library_candidate(rng)
                if cand["source"] == "library" and cand["library_id"] in used_lib:
                    continue
                why = await self._refusal(combo, cand)
                if why == "duplicate":
                    continue
                if why:
                    refuse(cand, why)
                    continue
                combo.append(cand)
                if cand["library_id"]:
                    used_lib.add(cand["library_id"])
                break
        if cfg.conflict_judge and any(c["source"] != "library" for c in combo):
            verdict = await self._judge(combo, refuse)
            if verdict is not None:
                return [*out, rejected(stable_id(slot, prefix="ifm-"), verdict, slot_id=slot,
                                       constraints=dumps([_public(c) for c in combo]))]
        need = min(c for c, w in cfg.count_weights.items() if w > 0)
        if len(combo) < need:
            return [*out, rejected(stable_id(slot, prefix="ifm-"), f"too_few_constraints: {len(combo)} compatible "
                                   f"of {k} wanted", slot_id=slot, constraints=dumps([_public(c) for c in combo]))]
        witness = None
        if cfg.composition == "witness" and any(c["source"] != "library" for c in combo):
            witness, n = await self._witness(combo, self._members(combo)[1])  # cached unless the judge dropped one
            if witness is None:
                return [*out, rejected(stable_id(slot, prefix="ifm-"), f"no_joint_answer: none of {n} composed "
                                       "answers passes every verifier of the set", slot_id=slot,
                                       constraints=dumps([_public(c) for c in combo]))]
        return [*out, self._prompt_row(slot, rng, combo, k, witness)]

    async def _judge(self, combo: list[dict[str, Any]], refuse: Any) -> str | None:
        """Drop LLM-written members the judge pairs in a conflict; a reason when the slot must be rejected."""
        for _ in range(self.config.judge_rounds):
            resp = (await self.ctx.llm.complete([conflict_request([c["text"] for c in combo],
                                                                  model=self.config.judge_model)]))[0]
            if (problem := answer_problem(resp)) is not None:
                return f"conflict_judge_failed: {problem}"
            parsed = parse_conflict(resp.text, len(combo))
            if is_failure(parsed):
                return f"conflict_judge_failed: {parsed}"
            flag, pairs, reason = parsed
            if not flag:
                return None
            drop: set[int] = set()
            for i, j in pairs:
                a, b = combo[i], combo[j]
                if a["source"] == "library" and b["source"] == "library":
                    continue  # the conflict table already allowed this pair
                victim = j if b["source"] != "library" else i
                if victim not in drop:
                    refuse(combo[victim], f"conflict_judge: {combo[victim]['id']} × {combo[i + j - victim]['id']}: "
                                          f"{reason}")
                drop.add(victim)
            if not drop:
                return None
            combo[:] = [c for n, c in enumerate(combo) if n not in drop]
            if not any(c["source"] != "library" for c in combo):
                return None
        return "conflict_judge_unresolved: still flagged after judge_rounds"

    def _prompt_row(self, slot: str, rng: random.Random, combo: list[dict[str, Any]], k: int,
                    witness: str | None) -> Row:
        qid, query = rng.choice(self.queries)
        placement = "system" if rng.random() < self.config.system_share else "user"
        instructions = render_instructions([c["text"] for c in combo])
        if placement == "system":
            messages = [{"role": "system", "content": rng.choice(SYSTEM_TEMPLATES).format(instructions=instructions)},
                        {"role": "user", "content": query}]
        else:
            messages = [{"role": "user", "content": rng.choice(USER_TEMPLATES).format(query=query,
                                                                                     instructions=instructions)}]
        public = [_public(c) for c in combo]
        library = [[c["library_id"], c["params"]] for c in combo if c["library_id"]]
        return ok(stable_id(slot, [c["id"] for c in combo], qid, placement, prefix="ifm-"), slot_id=slot,
                  query_id=qid, query=query, placement=placement, lang="ru", messages=dumps(messages),
                  constraints=dumps(public), library_constraints=dumps(library), n_constraints=len(combo),
                  n_llm_constraints=sum(c["source"] != "library" for c in combo), n_constraints_wanted=k,
                  witness=witness)


def _public(c: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in c.items() if not k.startswith("_")}


def _register_sim() -> None:
    from fabrika.generators.instruct.sim_multi import register_sim_responders

    register_sim_responders()


_register_sim()
