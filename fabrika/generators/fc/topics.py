"""``fc.topics``: the topic pool — BERTopic over a seed corpus, LLM labels, LLM expansion.

BERTopic alone gives hundreds of topics on ~30K texts; the LLM expansion is what
reaches tens of thousands (the reference recipe went 15.5K → 33.5K). Each
language gets its own topic model and its own expansion, written natively.

Output rows: ``id``, ``status``, ``reason``, ``topic`` (label), ``description``,
``keywords`` (JSON list), ``lang``, ``source`` (``bertopic`` | ``llm_expansion``),
``parent_id`` (seed topic of an expansion), ``n_docs`` (cluster size).
Embeddings are precomputed once and kept in the stage directory as ``.npy``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, AsyncIterator, ClassVar, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

import fabrika.generators.fc.columns as cols
from fabrika.embeddings import EmbedderConfig, build_embedder, cached_embed
from fabrika.errors import ConfigError, InputError
from fabrika.generators.fc import topics_prompts as prompts
from fabrika.generators.fc.prompts import CATALOGUE as FC_PROMPTS
from fabrika.generators.fc.topics_text import NearDuplicateIndex, keyword_tokens, language_ok
from fabrika.inputs import iter_records, resolve_data_path, where
from fabrika.llm.rejections import answer_problem
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.request_log import request_scope
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.ids import stable_id
from fabrika.textutil.answers import extract_json, is_failure

Lang = Literal["ru", "en"]
LANGS: tuple[Lang, ...] = ("ru", "en")


class CorpusFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="jsonl or parquet file of texts; relative paths resolve against the config file.")
    text_field: str = Field(default="text", description="Column holding the text.")
    lang_field: str | None = Field(default="lang", description="Column holding 'ru'/'en'; None = detect by script.")


class TopicsConfig(StageConfig):
    """Config of ``fc.topics``."""

    corpus: list[CorpusFile] = Field(
        default_factory=lambda: [CorpusFile(path="package://topics/corpus_demo.jsonl")],
        description="Seed corpora; 'package://' paths point into fabrika/data.",
    )
    languages: list[Lang] = Field(default_factory=lambda: list(LANGS), description="Languages to build pools for.")
    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig, description="Embedding model (offline).")
    reduction: Literal["umap", "pca"] = Field(
        default="umap", description="Dimensionality reduction before clustering; 'pca' is faster and exactly deterministic."
    )
    n_components: int = Field(default=5, ge=2, description="Reduced dimensions.")
    clustering: Literal["hdbscan", "kmeans"] = Field(default="hdbscan", description="Clusterer handed to BERTopic.")
    min_topic_size: int = Field(default=10, ge=2, description="HDBSCAN min cluster size (BERTopic's min_topic_size).")
    n_clusters: int | None = Field(default=None, ge=2, description="KMeans clusters (clustering='kmeans').")
    top_n_words: int = Field(default=8, ge=1, description="Keywords kept per topic.")
    representative_docs: int = Field(default=3, ge=1, description="Sample requests shown to the labeller.")
    target_size: dict[str, int] = Field(
        default_factory=lambda: {"ru": 200, "en": 200},
        description="Pool size per language after expansion (the reference went to ~33.5K in all).",
    )
    expand_per_call: int = Field(default=8, ge=1, le=50, description="New topics asked for per expansion request.")
    max_expand_rounds: int = Field(default=20, ge=0, description="Stop expanding after this many rounds over the pool.")
    dedup_threshold: float = Field(default=0.6, gt=0, le=1, description="MinHash Jaccard above which topics are near-duplicates.")
    temperature: float = Field(default=0.9, ge=0, description="Sampling temperature of the labeller and the expander.")
    max_tokens: int = Field(default=1024, ge=16, description="Token limit of one answer.")

    @field_validator("target_size")
    @classmethod
    def _non_negative(cls, v: dict[str, int]) -> dict[str, int]:
        bad = {k: n for k, n in v.items() if n < 0}
        if bad:
            raise ValueError(f"target_size values must be >= 0, got {bad}")
        return v


def read_corpus(files: list[CorpusFile], base_dir: Path | None) -> Iterator[dict[str, str]]:
    """Yield ``{"text", "lang"}``; a missing file or a bad line is an :class:`InputError` naming it."""
    for spec in files:
        path = resolve_data_path(spec.path, base_dir)
        cols = [spec.text_field] + ([spec.lang_field] if spec.lang_field else [])
        hint = "fix `corpus[].path` or its `text_field`/`lang_field`"
        for n, rec in iter_records(path, what="corpus file", hint=hint, columns=cols):
            yield _corpus_record(rec, spec, where(path, n))


def _corpus_record(rec: dict[str, Any], spec: CorpusFile, at: str) -> dict[str, str]:
    if not isinstance(rec.get(spec.text_field), str):
        raise InputError(f"{at}: expected an object with a string field {spec.text_field!r}; fix `corpus[].text_field`")
    text = rec[spec.text_field]
    lang = rec.get(spec.lang_field) if spec.lang_field else None
    if lang is None:
        lang = "ru" if language_ok(text, "ru") else "en"
    return {"text": text, "lang": str(lang)}


@register_stage
class TopicsStage(Stage[TopicsConfig]):
    """Builds the topic pool; a global stage (clustering needs the whole corpus)."""

    kind = "fc.topics"
    prompt_templates: ClassVar[tuple[Any, ...]] = (FC_PROMPTS.select("label", "expand"),)
    reads = ()  # the corpus files
    writes = cols.TOPIC
    input_files = (cols.CORPUS,)
    global_stage: ClassVar[bool] = True

    @classmethod
    def check_config(cls, config: TopicsConfig, pipeline: Any) -> list[tuple[str, str]]:
        base = getattr(pipeline, "base_dir", None)
        problems = []
        for i, spec in enumerate(config.corpus):
            path = resolve_data_path(spec.path, Path(base) if base else None)
            if not path.is_file():
                problems.append((f"corpus[{i}].path", f"corpus file not found: {path}"))
        for lang in config.languages:
            if lang not in config.target_size:
                problems.append(("target_size", f"no target size for language {lang!r}; add target_size.{lang}"))
        return problems

    def input_rows(self) -> Iterator[Row]:
        base = getattr(self.ctx.pipeline, "base_dir", None)
        yield from read_corpus(self.config.corpus, Path(base) if base else None)

    async def run_all(self, rows: Iterator[Row]) -> AsyncIterator[list[Row]]:
        by_lang: dict[str, list[str]] = {lang: [] for lang in self.config.languages}
        for rec in map(cols.CorpusRow.of, rows):
            if rec.lang in by_lang:
                by_lang[rec.lang].append(rec.text)
        for lang in self.config.languages:
            texts = sorted(set(by_lang[lang]))  # order-independent input
            clusters = self._cluster(lang, texts) if texts else []
            seeds, out = await self._label(lang, clusters)
            yield out
            async for chunk in self._expand(lang, seeds):
                yield chunk

    # -- clustering -----------------------------------------------------------------
    def _cluster(self, lang: str, texts: list[str]) -> list[dict[str, Any]]:
        """BERTopic over precomputed embeddings → ``[{keywords, docs, size}]``."""
        try:
            from bertopic import BERTopic
            from sklearn.feature_extraction.text import CountVectorizer
        except ImportError as exc:
            raise ConfigError("fc.topics needs BERTopic: pip install 'fabrika[embed]'") from exc
        cfg = self.config
        min_size = min(cfg.min_topic_size, max(2, len(texts) // 4))
        if len(texts) < 2 * min_size:
            raise InputError(f"fc.topics: {len(texts)} {lang} texts are too few to cluster (min_topic_size={min_size})")
        embedder = self.ctx.resource(f"embedder:{cfg.embedder.backend}:{cfg.embedder.path}", lambda: build_embedder(cfg.embedder))
        embeddings = cached_embed(embedder, texts, self.ctx.stage_dir(self.name) / "embeddings")
        seed = self.ctx.seed
        n_comp = min(cfg.n_components, len(texts) - 2)
        if cfg.reduction == "pca":
            from sklearn.decomposition import PCA

            reducer = PCA(n_components=n_comp, random_state=seed)
        else:
            from umap import UMAP

            reducer = UMAP(n_components=n_comp, n_neighbors=min(15, len(texts) - 1), min_dist=0.0,
                           metric="cosine", random_state=seed)
        if cfg.clustering == "kmeans":
            from sklearn.cluster import KMeans

            clusterer = KMeans(n_clusters=cfg.n_clusters or max(2, len(texts) // min_size), random_state=seed, n_init=10)
        else:
            from hdbscan import HDBSCAN

            clusterer = HDBSCAN(min_cluster_size=min_size, metric="euclidean", prediction_data=True)
        vectorizer = CountVectorizer(tokenizer=lambda t: keyword_tokens(t, lang), lowercase=False, token_pattern=None)
        # language="multilingual": with the default "english" BERTopic strips every non-Latin
        # character before c-TF-IDF, so a Russian cluster's keywords come out empty.
        model = BERTopic(language="multilingual", umap_model=reducer, hdbscan_model=clusterer, vectorizer_model=vectorizer,
                         top_n_words=cfg.top_n_words, min_topic_size=min_size)
        assignments, _ = model.fit_transform(texts, embeddings=embeddings)
        clusters = []
        for topic_id in sorted(set(assignments)):
            if topic_id == -1:
                continue  # HDBSCAN outliers
            docs = [t for t, a in zip(texts, assignments) if a == topic_id]
            words = [w for w, _ in (model.get_topic(topic_id) or []) if w][: cfg.top_n_words]
            clusters.append({"keywords": words, "docs": docs[: cfg.representative_docs], "size": len(docs)})
        return clusters

    # -- labelling ------------------------------------------------------------------
    def _request(self, lang: str, tag: str, messages: tuple[dict[str, str], ...], schema: dict[str, Any],
                 sample_index: int = 0) -> ChatRequest:
        return ChatRequest(
            messages=messages,
            temperature=self.config.temperature,
            max_tokens=self.config.max_tokens,
            response_format={"type": "json_schema", "json_schema": {"name": tag.replace(".", "_"), "schema": schema}},
            seed=self.ctx.seed,
            sample_index=sample_index,
            tag=tag,
            meta={"lang": lang},
        )

    async def _label(self, lang: str, clusters: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Row]]:
        requests = [self._request(lang, "fc.topics.label", prompts.label_messages(lang, c["keywords"], c["docs"]),
                                  prompts.LABEL_SCHEMA) for c in clusters]
        with request_scope() as scope:
            responses = await self.ctx.llm.complete(requests) if requests else []
        seeds: list[dict[str, Any]] = []
        rows: list[Row] = []
        for cluster, resp in zip(clusters, responses):
            base = {"keywords": json.dumps(cluster["keywords"], ensure_ascii=False), "lang": lang,
                    "source": "bertopic", "parent_id": None, "n_docs": cluster["size"]}
            cid = stable_id(lang, "bertopic", cluster["keywords"], cluster["docs"], prefix="topic-")
            problem, item = self._parse_topic(resp, lang)
            if problem:
                rows.append(rejected(cid, problem, topic=None, description=None, **base))
                continue
            rows.append(ok(cid, topic=item["label"], description=item["description"], **base))
            seeds.append({"id": cid, **item, "keywords": cluster["keywords"]})
        for k, row in enumerate(rows):  # one row per cluster: its label request made it
            scope.made([row], request=k)
        return seeds, rows

    @staticmethod
    def _parse_topic(resp: Any, lang: str) -> tuple[str | None, dict[str, str]]:
        if (problem := answer_problem(resp)) is not None:
            return problem, {}
        value = extract_json(resp.text, expect=dict)
        if is_failure(value):
            return str(value), {}
        return TopicsStage._check_item(value, lang)

    @staticmethod
    def _check_item(value: Any, lang: str) -> tuple[str | None, dict[str, str]]:
        if not isinstance(value, dict):
            return "schema: topic is not an object", {}
        label, desc = value.get("label"), value.get("description")
        if not isinstance(label, str) or not label.strip() or not isinstance(desc, str):
            return "schema: label and description must be non-empty strings", {}
        if len(label) > 120:
            return "schema: label longer than 120 characters", {}
        if not language_ok(f"{label} {desc}", lang):
            return f"wrong_language: expected {lang}", {}
        return None, {"label": label.strip(), "description": desc.strip()}

    # -- expansion ------------------------------------------------------------------
    async def _expand(self, lang: str, seeds: list[dict[str, Any]]) -> AsyncIterator[list[Row]]:
        cfg = self.config
        target = cfg.target_size.get(lang, 0)
        index = NearDuplicateIndex(lang, threshold=cfg.dedup_threshold)
        pool: list[dict[str, Any]] = []
        for s in seeds:
            if index.add_if_new(s["id"], s["label"], s["description"]) is None:
                pool.append(s)
        if not pool:
            return
        for rnd in range(cfg.max_expand_rounds):
            missing = target - len(pool)
            if missing <= 0:
                return
            n_requests = min(len(pool), -(-missing // cfg.expand_per_call))
            parents = pool[:n_requests] if rnd == 0 else [pool[(rnd * 7 + i) % len(pool)] for i in range(n_requests)]
            known = [p["label"] for p in pool[-20:]]
            requests = [self._request(lang, "fc.topics.expand",
                                      prompts.expand_messages(lang, p["label"], p["description"], known, cfg.expand_per_call),
                                      prompts.EXPAND_SCHEMA, sample_index=rnd) for p in parents]
            with request_scope() as scope:
                responses = await self.ctx.llm.complete(requests)
            rows: list[Row] = []
            for k, (parent, resp) in enumerate(zip(parents, responses)):
                made = self._expansion_rows(lang, parent, resp, rnd, index, pool, target)
                scope.made(made, request=k)  # the topics of one expansion answer
                rows.extend(made)
            yield rows

    def _expansion_rows(self, lang: str, parent: dict[str, Any], resp: Any, rnd: int, index: NearDuplicateIndex,
                        pool: list[dict[str, Any]], target: int) -> list[Row]:
        base = {"lang": lang, "source": "llm_expansion", "parent_id": parent["id"], "n_docs": 0,
                "keywords": json.dumps([], ensure_ascii=False)}
        answer_id = stable_id(lang, "expand", parent["id"], rnd, prefix="topic-")
        if (problem := answer_problem(resp)) is not None:
            return [rejected(answer_id, problem, topic=None, description=None, **base)]
        value = extract_json(resp.text, expect=dict)
        if is_failure(value) or not isinstance(value.get("topics"), list):
            reason = str(value) if is_failure(value) else "schema: 'topics' must be a list"
            return [rejected(answer_id, reason, topic=None, description=None, **base)]
        rows: list[Row] = []
        for pos, item in enumerate(value["topics"]):
            problem, topic = self._check_item(item, lang)
            label = topic.get("label") or (item.get("label") if isinstance(item, dict) else None)
            tid = stable_id(lang, "expansion", parent["id"], rnd, pos, label, prefix="topic-")
            if problem:
                rows.append(rejected(tid, problem, topic=label if isinstance(label, str) else None, description=None, **base))
                continue
            dup_of = index.add_if_new(tid, topic["label"], topic["description"])
            if dup_of is not None:
                rows.append(rejected(tid, f"near_duplicate_of: {dup_of}", topic=topic["label"],
                                     description=topic["description"], **base))
                continue
            if len(pool) >= target:
                rows.append(rejected(tid, "over_target", topic=topic["label"], description=topic["description"], **base))
                continue
            pool.append({"id": tid, **topic})
            rows.append(ok(tid, topic=topic["label"], description=topic["description"], **base))
        return rows


from fabrika.generators.fc import topics_sim as _topics_sim  # noqa: E402,F401  (registers sim responders)
