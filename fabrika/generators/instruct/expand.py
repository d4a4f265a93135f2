"""``if.expand`` and ``if.dedup``: seed constraints → many Russian candidate constraints.

``if.expand`` (source, per seed) emits the seed itself plus the candidates the LLM
writes from a few-shot list of seeds (AutoIF's self-instruct step). Each candidate
keeps its ``parent_id`` (the seed). Non-Russian, garbled, too short/long lines and
unparseable or failed answers are recorded rejections.

``if.dedup`` (global) drops exact duplicates (normalised text) and near-duplicates
(datasketch MinHash over razdel tokens); seeds win over LLM candidates, then the
smaller id, so the result is order-independent.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, AsyncIterator, ClassVar, Iterator

from pydantic import Field

import fabrika.generators.instruct.columns as cols
import fabrika.generators.instruct.prompts as prompts
from fabrika.errors import InputError
from fabrika.filters.dedup import near_duplicate_clusters
from fabrika.filters.text import norm_tokens
from fabrika.generators.generic import iter_prompt_records
from fabrika.inputs import where
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.columns import Column
from fabrika.pipeline.llm_stage import LLMStage
from fabrika.pipeline.preflight import InputFile
from fabrika.pipeline.stage import Row, Stage, StageConfig, carry, ok, register_stage, rejected
from fabrika.schemas import Constraint, from_row, stable_id, to_row
from fabrika.schemas.instruct import IFConstraintRow
from fabrika.textutil.answers import is_failure, parse_constraint_list
from fabrika.textutil.lang import check_russian


class ExpandConfig(StageConfig):
    """Config of ``if.expand``."""

    library_seeds: bool = Field(default=True, description="Use every constraint of fabrika.constraints.REGISTRY "
                                "(rendered with sampled params) as a seed.")
    library_ids: list[str] | None = Field(default=None, description="Restrict library seeds to these ids (None: all).")
    seed_files: list[Path] = Field(default_factory=list, description="User seed files: jsonl (or parquet) with "
                                   "'text' and optional 'id'; paths relative to the config file.")
    target_count: int = Field(default=100_000, ge=0, description="How many candidates to ask for in total "
                              "(reference recipe: ~100K): ceil(target / candidates_per_request) calls spread "
                              "evenly over the seeds; 0 keeps only the seeds.")
    candidates_per_request: int = Field(default=10, ge=1, le=100, description="Constraints asked for per LLM call.")
    examples_per_request: int = Field(default=4, ge=1, le=20, description="Seeds shown as examples per call "
                                      "(the row's own seed first).")
    min_chars: int = Field(default=10, ge=1, description="Shorter candidates are rejected as too_short.")
    max_chars: int = Field(default=300, ge=10, description="Longer candidates are rejected as too_long.")
    model: str | None = Field(default=None, description="Model name (None: the engine default).")
    temperature: float = Field(default=1.0, ge=0, le=2, description="Sampling temperature for expansion.")


def load_seed_file(path: Path) -> list[Constraint]:
    """User seeds from jsonl/parquet (``text`` + optional ``id``); :class:`InputError` names path and line."""
    out = []
    seen: dict[str, int] = {}
    for lineno, rec in iter_prompt_records(path, "text", what="seed file"):
        rid = rec.get("id")
        if rid is not None and not isinstance(rid, (str, int)):
            raise InputError(f"{where(path, lineno)}: 'id' must be a string or integer, got {type(rid).__name__}")
        text = rec["text"].strip()
        cid = str(rid) if rid is not None else stable_id(text, prefix="seed-")
        if cid in seen:
            raise InputError(f"{where(path, lineno)}: seed id {cid!r} repeats line {seen[cid]}; give each seed "
                             "a unique id (or drop the duplicate)")
        seen[cid] = lineno
        out.append(Constraint(id=cid, text=text, source="user", parent_id=None))
    return out


def library_seeds(ids: list[str] | None, seed: int) -> list[Constraint]:
    """One rendered record per library constraint, params drawn from a per-id RNG."""
    from fabrika.constraints import REGISTRY, to_constraint_record
    from fabrika.pipeline.context import item_rng

    chosen = sorted(REGISTRY) if ids is None else ids
    return [to_constraint_record(cid, REGISTRY[cid].sample_params(item_rng(seed, "if.seeds", cid))) for cid in chosen]


@register_stage
class ExpandStage(LLMStage[ExpandConfig]):
    """Source stage: one input item per seed; outputs the seed and its LLM-written candidates."""

    kind = "if.expand"
    #: the prompts it renders (their text is in its fingerprint: an edit redoes it)
    prompt_templates: ClassVar[tuple[Any, ...]] = (prompts.CATALOGUE.select("expand"),)
    reads = ()  # seed files and the constraint library
    writes = (*cols.CONSTRAINT, Column("sample_index", int, required=False, doc="answer the candidate came from"))
    input_files = (InputFile("seed_files[]", "IF seed file", fields=("text",),
                             fix="one JSON object with a non-empty 'text' per line (optional 'id')"),)
    per_answer = True  # each answer's candidates stand alone; a failed answer rejects only itself
    allow_truncated = True  # a cut-off list keeps its complete items (only the last one is rejected)

    @classmethod
    def check_config(cls, config: ExpandConfig, pipeline: Any) -> list[tuple[str, str]]:
        problems = []
        for i, p in enumerate(config.seed_files):
            try:
                load_seed_file(pipeline.resolve_path(p))
            except InputError as exc:
                problems.append((f"seed_files[{i}]", str(exc)))
        if not config.library_seeds and not config.seed_files:
            problems.append(("seed_files", "no seeds: set library_seeds: true or give seed_files"))
        return problems

    def seeds(self) -> list[Constraint]:
        cached = getattr(self, "_seeds", None)
        if cached is None:
            cached = library_seeds(self.config.library_ids, self.ctx.seed) if self.config.library_seeds else []
            for p in self.config.seed_files:
                cached.extend(load_seed_file(self.ctx.pipeline.resolve_path(p)))
            self._seeds: list[Constraint] = cached
        return cached

    def _positions(self) -> dict[str, int]:
        cached = getattr(self, "_pos", None)
        if cached is None:
            cached = self._pos = {s.id: i for i, s in enumerate(self.seeds())}
        return cached

    def input_rows(self) -> Iterator[Row]:
        for c in self.seeds():
            yield to_row(c)

    def _candidate(self, text: str, seed_id: str, *parts: Any) -> Constraint:
        return Constraint(id=stable_id(seed_id, *parts, prefix="ifc-"), text=text, source="llm", parent_id=seed_id)

    def _seed(self, row: Row) -> Constraint:
        return from_row(Constraint, row)

    def requests(self, row: Row) -> list[ChatRequest]:
        cfg = self.config
        seed = self._seed(row)
        seeds = self.seeds()
        # ceil(target / per_request) calls in all, spread over the seeds (the first ones take the remainder)
        total = math.ceil(cfg.target_count / cfg.candidates_per_request)
        position = self._positions().get(seed.id, len(seeds))
        n_requests = total // max(1, len(seeds)) + (1 if position < total % max(1, len(seeds)) else 0)
        rng = self.ctx.rng(seed.id)
        others = [s.text for s in seeds if s.id != seed.id]
        requests = []
        for k in range(n_requests):
            examples = [seed.text] + rng.sample(others, min(len(others), cfg.examples_per_request - 1))
            requests.append(prompts.expand_request(examples, cfg.candidates_per_request, sample_index=k,
                                                   model=cfg.model, temperature=cfg.temperature))
        return requests

    def parse(self, row: Row, responses: list[ChatResponse]) -> list[Row]:
        cfg = self.config
        seed = self._seed(row)
        out: list[Row] = [ok(**to_row(seed.model_copy(update={"parent_id": seed.parent_id or seed.id})), sample_index=None)]
        for k, resp in enumerate(responses):
            base = self._candidate("", seed.id, k)
            if (problem := self.answer_problem(resp)) is not None:
                out.append(rejected(**_reject_cols(base, k), reason=problem))
                continue
            items = parse_constraint_list(resp.text)
            if is_failure(items):
                out.append(rejected(**_reject_cols(base, k), reason=str(items)))
                continue
            truncated = resp.choices[0].truncated
            for j, text in enumerate(items):
                cand = self._candidate(text, seed.id, k, j)
                reason = None
                if truncated and j == len(items) - 1:
                    reason = "truncated: last item of a cut-off answer"
                elif len(text) < cfg.min_chars:
                    reason = f"too_short: {len(text)} chars < {cfg.min_chars}"
                elif len(text) > cfg.max_chars:
                    reason = f"too_long: {len(text)} chars > {cfg.max_chars}"
                else:
                    reason = check_russian(text)
                cols = {**to_row(cand), "sample_index": k}
                out.append(ok(**cols) if reason is None else rejected(**cols, reason=reason))
        return out


def _reject_cols(base: Constraint, k: int) -> dict[str, Any]:
    cols = to_row(base)
    cols.pop("text")
    return {**cols, "text": "", "sample_index": k}


class DedupConfig(StageConfig):
    """Config of ``if.dedup``."""

    threshold: float = Field(default=0.8, gt=0, le=1, description="Jaccard (over token sets) at which two "
                             "candidates are near-duplicates.")
    num_perm: int = Field(default=128, ge=16, le=1024, description="MinHash permutations.")
    shingle: int = Field(default=1, ge=1, le=8, description="Tokens per shingle (1 = token sets; constraints are short).")


def normalise(text: str) -> str:
    """Exact-duplicate key: razdel tokens, lower-cased, punctuation dropped."""
    return " ".join(norm_tokens(text))


@register_stage
class DedupStage(Stage[DedupConfig]):
    """Global stage: copies every candidate, rejecting exact and near duplicates with the kept id."""

    kind = "if.dedup"
    prompt_templates: ClassVar[tuple[Any, ...]] = ()  # renders no prompt
    reads = cols.CONSTRAINT_READS
    writes = cols.CONSTRAINT
    global_stage: ClassVar[bool] = True

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:
        cfg = self.config
        keep_cols = ("id", "text", "lang", "source", "parent_id", "family", "params")
        # the typed view decides, the stored columns travel unchanged
        data = [(IFConstraintRow.of(r), carry(r, keep_cols)) for r in rows]
        # seeds first, then by id: the kept member of a group never depends on input order
        data.sort(key=lambda d: (d[0].source == "llm", d[0].id))
        first_of: dict[str, str] = {}
        exact: dict[str, str] = {}
        for v, _ in data:
            key = normalise(v.text)
            if key in first_of:
                exact[v.id] = first_of[key]
            else:
                first_of[key] = v.id
        uniq = [v for v, _ in data if v.id not in exact]
        rank = {v.id: i for i, v in enumerate(uniq)}
        clusters = near_duplicate_clusters([v.id for v in uniq], [v.text for v in uniq],
                                           cfg.threshold, cfg.num_perm, cfg.shingle)
        best: dict[str, str] = {}
        for c in clusters:
            cur = best.get(c["dup_cluster"])
            if cur is None or rank[c["id"]] < rank[cur]:
                best[c["dup_cluster"]] = c["id"]
        near = {c["id"]: best[c["dup_cluster"]] for c in clusters if best[c["dup_cluster"]] != c["id"]}
        chunk: list[Row] = []
        for v, r in data:
            if v.id in exact:
                chunk.append(rejected(**{**r, "reason": f"duplicate_of: {exact[v.id]}"}))
            elif v.id in near:
                chunk.append(rejected(**{**r, "reason": f"near_duplicate_of: {near[v.id]}"}))
            else:
                chunk.append(ok(**r))
            if len(chunk) >= cfg.chunk_size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk
