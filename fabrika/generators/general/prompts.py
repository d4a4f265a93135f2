"""``general.prompts``: the general-chat prompt pool from the user's files.

One row per record: ``prompt`` (chat messages as JSON, ending with a user turn),
``lang`` (the record's field, else ``default_lang``), ``service`` / ``task`` when the
log has them, ``source_row`` (line or row number) and, with ``templates: true``,
``template_id`` / ``template_rank`` (:mod:`fabrika.generators.general.templates`;
the ``general.max_per_template`` gate caps them). Exact repeats of a prompt are
recorded as rejections ``exact_duplicate_of: <id>``; near-duplicates, language and
benchmark contamination are the shared scorers' job (``filter.dedup``,
``filter.language``, ``filter.decontam`` with ``input: <this stage>``,
``text_field: user``), wired in the config like every other stage's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Iterator

from pydantic import Field

import fabrika.generators.general.columns as cols
from fabrika.errors import InputError
from fabrika.generators.general.pool import NotAPrompt, iter_pool_records, normalise_record
from fabrika.generators.general.templates import template_clusters, template_view
from fabrika.inputs import resolve_data_path
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.ids import stable_id

_REJECT = "__reject"


class GeneralPromptsConfig(StageConfig):
    """``general.prompts``: where the pool is and how its records are read."""

    path: Path = Field(description="jsonl/parquet file or save_to_disk directory of prompts or chats "
                       "(relative to the config file).")
    split: str | None = Field(default=None, description="Split of a saved DatasetDict.")
    text_field: str = Field(default="prompt", description="Field with the prompt when a record has no 'messages'.")
    lang_field: str = Field(default="lang", description="Field with the record's language code, if any.")
    default_lang: str | None = Field(default=None, description="`lang` of records without one (None: unknown; "
                                     "filter.language then only detects, it cannot compare).")
    service_field: str = Field(default="service", description="Production-log field naming the calling service.")
    task_field: str = Field(default="task", description="Production-log field naming the task/template.")
    templates: bool = Field(default=False, description="Cluster prompts into templates (template_id/template_rank) "
                            "for the general.max_per_template gate; reads the pool twice.")
    template_threshold: float = Field(default=0.45, gt=0, le=1, description="Jaccard of template views that joins "
                                      "two prompts into one template.")
    template_head_words: int = Field(default=8, ge=1, description="First words of the user turn in the template view.")
    template_tail_words: int = Field(default=6, ge=0, description="Last words of the user turn in the template view.")
    seed: int = Field(default=0, description="Seed of the within-template ranking (which prompts a cap keeps).")


def _text_or_none(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


@register_stage
class GeneralPromptsStage(Stage[GeneralPromptsConfig]):
    """Source stage: the prompt pool, normalised to messages; bad records are recorded rejections."""

    kind = "general.prompts"
    reads = ()  # the pool file
    writes = cols.POOL
    input_files = (cols.POOL_FILE,)
    calls_llm: ClassVar[bool] = False

    def _path(self) -> Path:
        pipeline = getattr(self.ctx, "pipeline", None)
        return resolve_data_path(self.config.path, pipeline.resolve_path if pipeline is not None else None)

    @classmethod
    def check_config(cls, config: GeneralPromptsConfig, pipeline: Any) -> list[tuple[str, str]]:
        path = resolve_data_path(config.path, pipeline.resolve_path)
        if not path.exists():
            return []  # the generic path check reports it
        try:
            next(iter_pool_records(path, split=config.split), None)
        except InputError as exc:
            return [("path", str(exc))]
        return []

    def _normalised(self) -> Iterator[Row]:
        cfg = self.config
        seen: dict[str, int] = {}
        for n, rec in iter_pool_records(self._path(), split=cfg.split):
            try:
                messages = normalise_record(rec, cfg.text_field)
            except NotAPrompt as exc:
                yield {"id": stable_id("bad", n, repr(sorted(rec.items()))[:2000], prefix="gp-"), _REJECT: str(exc),
                       "source_row": n}
                continue
            rid = stable_id(messages, prefix="gp-")
            row: Row = {"id": rid, "prompt": json.dumps(messages, ensure_ascii=False),
                        "lang": _text_or_none(rec.get(cfg.lang_field)) or cfg.default_lang,
                        "service": _text_or_none(rec.get(cfg.service_field)),
                        "task": _text_or_none(rec.get(cfg.task_field)), "source_row": n}
            if rid in seen:
                seen[rid] += 1
                row = {**row, "id": stable_id(rid, seen[rid], prefix="gp-dup-"), _REJECT: f"exact_duplicate_of: {rid}"}
            else:
                seen[rid] = 0
            yield row

    def input_rows(self) -> Iterator[Row]:
        if not self.config.templates:
            yield from self._normalised()
            return
        ids, views, keys = [], [], []
        for row in self._normalised():  # pass 1: template views of the usable prompts
            if _REJECT in row:
                continue
            pool = cols.PoolRow.of(row)
            ids.append(pool.id)
            views.append(template_view(pool.prompt, self.config.template_head_words, self.config.template_tail_words))
            keys.append(f"{pool.service or ''}/{pool.task}" if pool.task else None)
        clusters = template_clusters(ids, views, keys, threshold=self.config.template_threshold, seed=self.config.seed)
        del ids, views, keys
        for row in self._normalised():  # pass 2: the rows, with their template
            if _REJECT not in row:
                row["template_id"], row["template_rank"] = clusters[row["id"]]
            yield row

    async def process(self, row: Row) -> list[Row]:
        columns = {k: v for k, v in row.items() if k not in ("id", _REJECT)}
        if _REJECT in row:
            return [rejected(self.item_id(row), row[_REJECT], **columns)]
        return [ok(self.item_id(row), **columns)]
