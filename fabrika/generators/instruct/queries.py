"""``if.queries``: attach each surviving constraint to queries from a pool, in two placements.

User-level: the constraint is appended to the user turn. System-level: it sits in
the system prompt and the user turn is the bare query (the reference final set
has 10K user-level + 16K system-level, hence the default share 0.6).
A library constraint may be combined with extra library constraints that the
conflict table allows; an LLM-written constraint stays alone (no conflict data).
The upstream scores are carried forward so gates can still refilter downstream.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

import fabrika.generators.instruct.columns as cols
from fabrika.errors import InputError
from fabrika.generators.generic import iter_prompt_records
from fabrika.inputs import DATA_DIR
from fabrika.pipeline.columns import Contract
from fabrika.pipeline.preflight import InputFile
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas import stable_id
from fabrika.schemas.instruct import IFConstraintRow
from fabrika.schemas.rows import dumps

DEFAULT_POOL = DATA_DIR / "instruct" / "queries_ru.jsonl"

#: Score columns copied from the constraint row to every prompt (and on to responses and samples).
CARRIED_SCORES = ("n_unique_functions", "n_unique_cases", "max_function_accuracy", "function_accuracies",
                  "bt_min_similarity", "bt_mean_similarity")

SYSTEM_TEMPLATES = (
    "Ты полезный ассистент. Соблюдай следующие требования к формату ответа:\n{instructions}",
    "Отвечай пользователю по существу. Обязательные требования к ответу:\n{instructions}",
    "Ты ассистент, который строго следует правилам оформления ответа:\n{instructions}",
)
USER_TEMPLATES = ("{query}\n\n{instructions}", "{query} {instructions}", "{query}\n\nТребования к ответу:\n{instructions}")


class QueriesConfig(StageConfig):
    """Config of ``if.queries``."""

    query_pool: Path | None = Field(default=None, description="jsonl/parquet of queries ('text', optional 'id'); "
                                    "None: the shipped Russian pool fabrika/data/instruct/queries_ru.jsonl.")
    queries_per_constraint: int = Field(default=3, ge=1, description="Queries each constraint is attached to.")
    system_share: float = Field(default=0.6, ge=0, le=1, description="Share of prompts with the constraint in the "
                                "system prompt (the rest append it to the user turn).")
    max_extra_constraints: int = Field(default=0, ge=0, le=5, description="Up to this many compatible library "
                                       "constraints are added to a library constraint (0: single constraints).")


def load_pool(path: Path) -> list[tuple[str, str]]:
    """``(id, text)`` pairs; :class:`InputError` names path and line of a bad record."""
    pool = [(str(rec.get("id") or stable_id(rec["text"], prefix="q-")), rec["text"].strip())
            for _, rec in iter_prompt_records(path, "text", what="query pool")]
    if not pool:
        raise InputError(f"{path}: query pool is empty; give at least one {{'text': ...}} record")
    return pool


def _render_list(texts: list[str]) -> str:
    return texts[0] if len(texts) == 1 else "\n".join(f"{i}. {t}" for i, t in enumerate(texts, 1))


@register_stage
class QueriesStage(Stage[QueriesConfig]):
    """Per surviving constraint: N prompts (query × placement), each with what verification needs."""

    kind = "if.queries"
    reads = (*cols.CONSTRAINT_READS, cols.FUNCTIONS, *cols.CARRIED)
    writes = (*cols.PROMPT, cols.RUNNABLE, *cols.CARRIED)
    input_files = (InputFile("query_pool", "query pool", fields=("text",), default=str(DEFAULT_POOL),
                             fix="one JSON object with a non-empty 'text' per line (optional 'id')"),)

    @classmethod
    def contract(cls, config: QueriesConfig) -> Contract:
        return Contract(cls.reads, cls.writes, hints={"functions": cols.CONSISTENCY_HINT})
    calls_llm: ClassVar[bool] = False

    @classmethod
    def check_config(cls, config: QueriesConfig, pipeline: Any) -> list[tuple[str, str]]:
        from fabrika.generators.instruct.verifiers import consistency_before

        return consistency_before(config, pipeline)

    async def setup(self) -> None:
        path = self.ctx.pipeline.resolve_path(self.config.query_pool) if self.config.query_pool else DEFAULT_POOL
        self.pool = load_pool(path)

    def _extras(self, c: IFConstraintRow, rng: Any) -> list[tuple[str, dict[str, Any]]]:
        """Compatible library constraints to add to a library constraint (conflict table applies)."""
        if c.source != "library" or not self.config.max_extra_constraints:
            return []
        from fabrika.constraints import REGISTRY, compatible

        main = (str(c.parent_id), dict(c.params))
        if main[0] not in REGISTRY:
            return []
        combo = [main]
        want = rng.randint(0, self.config.max_extra_constraints)
        ids = sorted(REGISTRY)
        rng.shuffle(ids)
        for cid in ids:
            if len(combo) > want:
                break
            if cid == main[0]:
                continue
            params = REGISTRY[cid].sample_params(rng)
            if compatible(combo, cid, params):
                combo.append((cid, params))
        return combo[1:]

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        c = IFConstraintRow.of(row)
        cid = c.id
        rng = self.ctx.rng(cid)
        main: dict[str, Any] = {"id": cid, "text": c.text, "source": c.source, "family": c.family, "params": dict(c.params),
                "library_id": c.parent_id if c.source == "library" else None}
        verifiers = [{"sample_index": f.sample_index, "code": f.code, "accuracy": f.accuracy}
                     for f in c.functions if f.runnable]
        if not verifiers:
            return [rejected(stable_id(cid, "queries", prefix="ifp-"), "no_verifiers: constraint has no runnable "
                             "function (run if.consistency before if.queries)", constraint_id=cid)]
        carried = {k: row.get(k) for k in CARRIED_SCORES}
        out: list[Row] = []
        for qid, query in rng.sample(self.pool, min(cfg.queries_per_constraint, len(self.pool))):
            placement = "system" if rng.random() < cfg.system_share else "user"
            extras = self._extras(c, rng)
            constraints = [main]
            if extras:
                from fabrika.constraints import to_constraint_record

                for eid, params in extras:
                    rec = to_constraint_record(eid, params)
                    constraints.append({"id": rec.id, "text": rec.text, "source": "library", "family": rec.family,
                                        "params": rec.params, "library_id": eid})
            instructions = _render_list([c["text"] for c in constraints])
            if placement == "system":
                messages = [{"role": "system", "content": rng.choice(SYSTEM_TEMPLATES).format(instructions=instructions)},
                            {"role": "user", "content": query}]
            else:
                messages = [{"role": "user", "content": rng.choice(USER_TEMPLATES).format(query=query,
                                                                                         instructions=instructions)}]
            library = [[c["library_id"], c["params"]] for c in constraints if c["library_id"]]
            out.append(ok(stable_id(cid, qid, placement, library, prefix="ifp-"), constraint_id=cid, query_id=qid,
                          query=query, placement=placement, messages=dumps(messages), constraints=dumps(constraints),
                          library_constraints=dumps(library), verifiers=dumps(verifiers), **carried))
        return out
