"""``fc.plans``: per (topic, plan index) a reference trajectory, reviewed by a judge.

The stage samples with ``ctx.rng`` (so reruns agree): the sample type, a tool
group (the topic's tools plus distractors from other topics in the same
language, ``similar_distractors`` of them from the nearest topics; irrelevance
plans get distractors only, so no visible tool can serve the request), a persona and the description tier. The planner LLM writes the
steps; rule checks (:mod:`plan_checks`) and then the judge LLM review them; the
planner revises with the issues, at most ``max_rounds`` rounds. Every round
(plan, rule problems, verdict) is stored; a plan never approved is a rejected
row with its rounds. The language is the topic's (tools are written natively
in it, never translated).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import re
import zlib
from collections import OrderedDict
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator

from pydantic import Field, ValidationError

import fabrika.generators.fc.columns as cols
from fabrika.agents.prompts import CATALOGUE, prompt_text
from fabrika.errors import InputError
from fabrika.generators.fc.common import response_error
from fabrika.generators.fc.plan_checks import check_plan, parse_steps
from fabrika.generators.fc.structured import response_format
from fabrika.inputs import resolve_data_path
from fabrika.llm.types import ChatRequest
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.fc import (
    JudgeVerdict,
    Persona,
    Plan,
    PlanRound,
    SampleType,
    ToolSpec,
)
from fabrika.schemas.ids import stable_id
from fabrika.schemas.rows import RowModel
from fabrika.textutil.answers import extract_json, is_failure
from fabrika.textutil.jsontext import Rendered, dumps_indent1

DEFAULT_TYPES: dict[SampleType, float] = {
    "single": 0.25, "parallel": 0.12, "multi_step": 0.12, "multi_turn": 0.16,
    "clarification": 0.12, "error_recovery": 0.05, "text": 0.08, "irrelevance": 0.15,
}
NEEDS_TWO_TOOLS = ("parallel", "multi_step")
#: parsed tool specs kept by ``fc.plans`` (the tools of the topics in flight, and the distractors they share)
SPEC_CACHE = 512
#: Where ``fc.plans`` keeps its similar-distractor index under the run directory (one file per pool digest).
SIMILAR_DIR = "index"



class _PlanSlot(RowModel):
    """The two columns of a plan slot the pilot's kind needs (``fabrika estimate``)."""

    id: str
    topic_id: str

class PlansConfig(StageConfig):
    """Config of ``fc.plans`` (input: ``fc.tools_dedup`` or ``fc.tools``)."""

    plans_per_topic: int = Field(default=4, ge=1, description="Plans sampled per topic.")
    sample_types: dict[SampleType, float] = Field(default_factory=lambda: dict(DEFAULT_TYPES),
                                                  description="Relative weights of the sample types.")
    distractors: int = Field(default=2, ge=0, le=20, description="Tools from other topics added to each group.")
    similar_distractors: int = Field(
        default=1, ge=0, le=20, description="How many of the distractors come from the most similar other topics "
        "(MinHash LSH over the tools' names and descriptions), so the assistant must tell close tools apart; "
        "the rest are random. Irrelevance plans get them too.")
    max_rounds: int = Field(default=4, ge=1, le=8, description="Planner → judge rounds before a plan is rejected.")
    personas: dict[str, str] = Field(
        default_factory=lambda: {"ru": "package://fc/personas_ru.jsonl", "en": "package://fc/personas_en.jsonl"},
        description="Persona jsonl file per language; 'package://' points into fabrika/data.")
    temperature: float = Field(default=0.7, ge=0, le=2, description="Planner sampling temperature.")
    max_tokens: int = Field(default=4096, ge=256, description="Completion budget of planner and judge requests.")


def load_personas(path: str, resolve: Any = None) -> list[Persona]:
    """Personas from a jsonl file ('package://fc/x.jsonl' = inside fabrika/data)."""
    try:
        text = resolve_data_path(path, resolve).read_text("utf-8")
        return [Persona.model_validate_json(line) for line in text.splitlines() if line.strip()]
    except (OSError, ValidationError, ValueError) as exc:
        raise InputError(f"personas file {path!r} cannot be read: {exc}; give a jsonl of Persona records") from exc


def _sample_other_topics(rng: random.Random, pool: list[str], own: str, k: int,
                         exclude: tuple[str, ...] = ()) -> list[str]:
    """``k`` distinct topics of ``pool`` other than ``own`` and ``exclude`` (topics of ``pool``), in O(k) draws."""
    k = min(k, len(pool) - (1 if own in pool else 0) - len(set(exclude) - {own}))
    picked: list[str] = []
    seen = {own, *exclude}
    while len(picked) < k:
        topic = pool[rng.randrange(len(pool))]
        if topic not in seen:
            seen.add(topic)
            picked.append(topic)
    return picked


def _most_similar(near: list[str], same: Any, keep: int) -> list[str]:
    """The ``keep`` topics of ``near`` with the most equal hash slots (``same``: the highest Jaccard
    estimates), ties by id: a total order. Only the candidates that can be among the first ``keep`` are
    sorted — in a large one-domain pool a topic has thousands of LSH candidates, and sorting them all in
    Python, for every topic, was most of ``fc.plans``' set-up at 25,000 topics."""
    import numpy as np

    pick: Any = range(len(near))
    if len(near) > keep:
        cut = int(np.partition(same, len(near) - keep)[len(near) - keep])  # the keep-th largest count
        pick = np.flatnonzero(same >= cut).tolist()
    order = sorted(pick, key=lambda i: (-int(same[i]), near[i]))[:keep]
    return [near[i] for i in order]


def shared_index(directory: Path, name: str, build: Callable[[], dict[str, list[str]]]) -> dict[str, list[str]]:
    """``directory/name.json`` when a process of this run saved it, else ``build()``, saved there for the others.

    An exclusive ``flock`` on ``name.lock`` makes the processes that need it at the same moment (the
    ``llm_workers`` of one stage start together) wait for the one that builds it instead of repeating
    the build; the file is written to a temporary name and renamed, so a reader never sees half of it
    and a process killed mid-build leaves nothing (the lock dies with it)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    with open(directory / f"{name}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if path.exists():
                loaded: dict[str, list[str]] = json.loads(path.read_bytes())
                return loaded
            out = build()
            tmp = directory / f".{name}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")
            os.replace(tmp, path)
            return out
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@register_stage
class PlansStage(Stage[PlansConfig]):
    kind = "fc.plans"
    prompt_templates: ClassVar[tuple[Any, ...]] = (CATALOGUE.select("planner", "planner_revise", "judge"),)
    reads = cols.TOOL_READS
    writes = cols.PLANS
    input_files = (cols.PERSONAS,)

    @cached_property
    def _index(self) -> tuple[dict[str, list[bytes]], dict[str, list[str]]]:
        """topic id → its tools' JSON, zlib-compressed (sorted by id); language → topic ids (the distractor pool).

        Any plan may draw distractors from any topic, so the whole tool pool stays
        in memory; as compressed JSON it costs about a tenth of parsed models
        (it was the one part of the FC run that grew with the pool: bench/RESULTS.md).
        """
        by_topic: dict[str, list[tuple[str, bytes]]] = {}
        langs: dict[str, str] = {}
        for row in super().input_rows():
            raw: str = row["spec"]  # the stored JSON text is what is kept (compressed), so it is read raw
            spec = ToolSpec.model_validate_json(raw)
            by_topic.setdefault(spec.topic_id, []).append((spec.id, zlib.compress(raw.encode("utf-8"), 1)))
            langs[spec.topic_id] = spec.lang
        by_lang: dict[str, list[str]] = {}
        for topic_id in sorted(by_topic):
            by_lang.setdefault(langs[topic_id], []).append(topic_id)
        return {t: [js for _, js in sorted(v)] for t, v in by_topic.items()}, by_lang

    @cached_property
    def _similar(self) -> dict[str, list[str]]:
        """topic id → up to ``similar_distractors`` other topics of its language, most similar first (Jaccard
        of the tools' words, MinHash LSH; ties by id).

        Built once per run and topic pool, not once per process: the first process that needs it (the
        driver, or one of the ``llm_workers``) builds it under a file lock and saves it under the run
        directory, named by a digest of the pool and of ``similar_distractors``; every other process
        (the other workers, a worker retried after it died, a resumed run) loads that file. At 25,000
        topics the build is minutes of CPU, which every LLM worker used to repeat. A stage without a
        run store (tests) builds it in memory.
        """
        run_dir = getattr(getattr(getattr(self, "ctx", None), "store", None), "run_dir", None)
        if run_dir is None:
            return self._build_similar()
        return shared_index(Path(run_dir) / SIMILAR_DIR, f"fc.plans-similar-{self._pool_digest()}",
                            self._build_similar)

    def _pool_digest(self) -> str:
        """A digest of what the similar-distractor index depends on: the pool (topics by language, each
        topic's stored tool JSON), ``similar_distractors`` and the code that builds and ranks it (a changed
        build never loads an index saved by the old one)."""
        import inspect

        by_topic, by_lang = self._index
        h = hashlib.blake2b(digest_size=16)
        h.update(inspect.getsource(PlansStage._build_similar).encode())
        h.update(inspect.getsource(_most_similar).encode())
        h.update(f"keep={self.config.similar_distractors}\n".encode())
        for lang in sorted(by_lang):
            h.update(f"lang {lang}\n".encode())
            for topic_id in by_lang[lang]:
                h.update(f"topic {topic_id} {len(by_topic[topic_id])}\n".encode())
                for blob in by_topic[topic_id]:
                    h.update(zlib.decompress(blob))
                    h.update(b"\n")
        return h.hexdigest()

    def _build_similar(self) -> dict[str, list[str]]:
        """The index itself (see :attr:`_similar`).

        One LSH over the pool per language. The candidates' Jaccard estimates are one vectorised
        comparison of signature rows per topic, and only the topics a plan can use are kept: with a large
        pool of one domain (thousands of near topics each) a per-pair ``MinHash.jaccard`` and whole sorted
        lists cost minutes and hundreds of MB.
        """
        import numpy as np
        from datasketch import MinHash, MinHashLSH

        keep = self.config.similar_distractors
        by_topic, by_lang = self._index
        out: dict[str, list[str]] = {}
        for topics in by_lang.values():
            lsh = MinHashLSH(threshold=0.15, num_perm=64)
            sigs: dict[str, MinHash] = {}
            hashes = []
            for topic_id in topics:
                words: set[str] = set()
                for blob in by_topic[topic_id]:
                    spec = self._spec(blob)
                    words |= set(re.findall(r"\w{3,}", f"{spec.name.replace('_', ' ')} {spec.tiers[1]}".lower()))
                m = MinHash(num_perm=64, seed=1)
                for w in sorted(words):
                    m.update(w.encode("utf-8"))
                sigs[topic_id] = m
                hashes.append(m.hashvalues)
                lsh.insert(topic_id, m)
            table = np.stack(hashes) if hashes else np.zeros((0, 64), dtype=np.uint64)
            rows = {topic_id: i for i, topic_id in enumerate(sigs)}
            for topic_id, m in sigs.items():
                row = rows[topic_id]
                near = [t for t in lsh.query(m) if t != topic_id]
                if not near or keep == 0:
                    out[topic_id] = []
                    continue
                at = np.fromiter((rows[t] for t in near), dtype=np.intp, count=len(near))
                same = np.count_nonzero(table[at] == table[row], axis=1)
                out[topic_id] = _most_similar(near, same, keep)
        return out

    def _spec(self, blob: bytes) -> ToolSpec:
        """The parsed tool of one stored blob. The plans of a topic run side by side (input order is by
        topic), so the topic's own tools are parsed once for all of them, not twice per plan: a small
        LRU keyed by the blob (the index keeps each blob alive, and a parsed spec is never mutated)."""
        specs = self._parsed
        got = specs.get(blob)
        if got is not None:
            specs.move_to_end(blob)
            return got
        got = specs[blob] = ToolSpec.model_validate_json(zlib.decompress(blob))
        if len(specs) > SPEC_CACHE:
            specs.popitem(last=False)
        return got

    @cached_property
    def _parsed(self) -> "OrderedDict[bytes, ToolSpec]":
        return OrderedDict()

    def _function_rendered(self, spec: ToolSpec) -> Rendered:
        """``spec``'s OpenAI ``function`` object (dumped once per parsed spec) wrapped for :func:`dumps_indent1`:
        every judge round writes its text once."""
        return self._function_memo(spec)[2]

    def _task_tool(self, spec: ToolSpec) -> Rendered:
        """The planner task's entry of ``spec`` (its function and its description tiers), wrapped for
        :func:`dumps_indent1`: the ten plans of a topic show the same tools, written once."""
        return self._function_memo(spec)[3]

    def _function_memo(self, spec: ToolSpec) -> tuple[ToolSpec, dict[str, Any], Rendered, Rendered]:
        memo = self._functions
        got = memo.get(id(spec))
        if got is not None and got[0] is spec:
            return got
        if len(memo) > 2 * SPEC_CACHE:
            memo.clear()
        fn = spec.tool.to_openai()["function"]
        # the spec is held, so its id is not reused while here
        got = memo[id(spec)] = (spec, fn, Rendered(fn), Rendered({**fn, "tiers": spec.tiers}))
        return got

    @cached_property
    def _functions(self) -> dict[int, tuple[ToolSpec, dict[str, Any], Rendered, Rendered]]:
        return {}

    def _tools(self, topic_id: str) -> list[ToolSpec]:
        return [self._spec(blob) for blob in self._index[0][topic_id]]

    @cached_property
    def _personas(self) -> dict[str, list[Persona]]:
        cfg = self.config
        resolve = getattr(self.ctx.pipeline, "resolve_path", None)
        return {lang: load_personas(path, resolve) for lang, path in cfg.personas.items()}

    def input_rows(self) -> Iterator[Row]:
        by_topic, _ = self._index
        for topic_id in sorted(by_topic):
            for i in range(self.config.plans_per_topic):
                yield {"id": stable_id(topic_id, i, prefix="plan-"), "topic_id": topic_id, "plan_index": i}

    def _draw_type(self, rng: random.Random, own: list[ToolSpec]) -> SampleType:
        """The plan's sample type: the first draw of its ``ctx.rng``."""
        types = {t: w for t, w in sorted(self.config.sample_types.items())
                 if w > 0 and (len(own) > 1 or t not in NEEDS_TWO_TOOLS)}
        return rng.choices(list(types), weights=list(types.values()))[0]

    def pilot_stratum(self, row: Row) -> str:
        """The plan's sample type (types fan out differently: a ``multi_turn`` plan makes the most samples),
        drawn as :meth:`sample_setup` draws it."""
        slot = _PlanSlot.of(row)
        return self._draw_type(self.ctx.rng(slot.id), self._tools(slot.topic_id))

    def sample_setup(self, item: Row) -> tuple[SampleType, list[ToolSpec], Persona, int]:
        """Deterministic choices for one plan: type, tool group, persona, tier."""
        cfg = self.config
        by_topic, by_lang = self._index
        own = self._tools(item["topic_id"])
        lang = own[0].lang
        rng = self.ctx.rng(item["id"])
        sample_type = self._draw_type(rng, own)
        n_other = cfg.distractors + (2 if sample_type == "irrelevance" else 0)
        similar = self._similar.get(item["topic_id"], [])[: min(cfg.similar_distractors, n_other)]
        rest = _sample_other_topics(rng, by_lang.get(lang, []), item["topic_id"], n_other - len(similar),
                                    exclude=tuple(similar))
        distractors = [self._spec(rng.choice(by_topic[t])) for t in similar + rest]
        group = distractors if sample_type == "irrelevance" else own + distractors
        rng.shuffle(group)
        personas = self._personas.get(lang) or []
        if not personas:
            raise InputError(f"no personas for language {lang!r}; add it to fc.plans.personas")
        return sample_type, group, rng.choice(personas), rng.randrange(4)

    def _task(self, sample_type: str, group: list[ToolSpec], persona: Persona, topic_tools: list[ToolSpec]) -> dict:
        """The planner's task (its tools as :class:`Rendered`: only :func:`dumps_indent1` reads it)."""
        task: dict[str, Any] = {
            "sample_type": sample_type, "lang": persona.lang,
            "persona": persona.model_dump(exclude={"id"}),
            "tools": [self._task_tool(t) for t in group],
        }
        if sample_type == "irrelevance":  # what the user asks for: a topic need no visible tool serves
            task["unavailable"] = [t.tiers[1] for t in topic_tools]
        return task

    async def process(self, item: Row) -> list[Row]:
        cfg = self.config
        sample_type, group, persona, tier = self.sample_setup(item)
        lang = persona.lang
        task = self._task(sample_type, group, persona, self._tools(item["topic_id"]))
        task_json = dumps_indent1(task)
        first = {"role": "user", "content": prompt_text("planner", lang).format(task=task_json)}
        convo: list[dict[str, Any]] = [first]
        rounds: list[PlanRound] = []
        base = {"topic_id": item["topic_id"], "lang": lang, "sample_type": sample_type}
        for r in range(cfg.max_rounds):
            resp = await self.ctx.llm.complete_one(ChatRequest(
                messages=tuple(convo), temperature=cfg.temperature, max_tokens=cfg.max_tokens, tag="fc.planner",
                response_format=response_format("fc_plan"), sample_index=r, routing_key=item["id"]))
            err = response_error(resp)
            if err and not err.startswith("truncated"):
                return [rejected(item["id"], err, **base, rounds=_dump(rounds))]
            if err:  # cut off: this round is lost, the next one asks again (a new sample, not the cached one)
                rounds.append(PlanRound(round=r, plan=None, problems=[f"{err} (answer cut off; asked again)"]))
                continue
            text = resp.text or ""
            data = extract_json(text, expect=dict, reasoning_content=resp.choices[0].reasoning)
            steps, problems = (None, [str(data)]) if is_failure(data) else parse_steps(data)
            if steps is not None:
                problems = check_plan(steps, group, sample_type, lang, persona)
            verdict = None
            # the steps as plain data, dumped once for the judge, the round's record and the revision request
            # (each only serialises it)
            plan_data = None if steps is None else {"steps": [s.model_dump() for s in steps]}
            if plan_data is not None and not problems:
                verdict = await self._judge(sample_type, group, plan_data, lang, routing_key=item["id"])
            rounds.append(PlanRound(round=r, plan=plan_data, problems=problems, verdict=verdict))
            if verdict is not None and verdict.approved and steps is not None:
                plan = Plan(id=item["id"], topic_id=item["topic_id"], lang=lang, sample_type=sample_type,
                            persona=persona, tools=group, tier=tier, steps=steps, rounds=rounds)
                return [ok(item["id"], **base, n_steps=len(steps), n_rounds=len(rounds),
                           plan=plan.model_dump_json())]
            issues = problems + (verdict.issues if verdict else [])
            # the plan travels once per request: the task, the last plan, the review (tokens stay flat per round)
            last_plan = text if plan_data is None else json.dumps(plan_data, ensure_ascii=False)
            convo = [first, {"role": "assistant", "content": last_plan},
                     {"role": "user", "content": prompt_text("planner_revise", lang).format(
                         issues=dumps_indent1(issues or ["-"]))}]
        last = rounds[-1]
        why = "plan_invalid" if last.problems else "judge_rejected"
        detail = (last.problems or (last.verdict.issues if last.verdict else []) or ["-"])[0]
        return [rejected(item["id"], f"{why}: {detail}", **base, n_rounds=len(rounds), rounds=_dump(rounds))]

    async def _judge(self, sample_type: str, group: list[ToolSpec], plan_data: dict[str, Any], lang: str,
                     routing_key: str | None = None) -> JudgeVerdict:
        """The judge's verdict on one plan (``plan_data``: ``{"steps": [<step dumps>]}``)."""
        cfg = self.config
        task = {"sample_type": sample_type, "tools": [self._function_rendered(t) for t in group], "plan": plan_data}
        resp = await self.ctx.llm.complete_one(ChatRequest(
            messages=({"role": "user", "content": prompt_text("judge", lang).format(
                task=dumps_indent1(task))},),
            temperature=0.0, max_tokens=cfg.max_tokens, tag="fc.judge", response_format=response_format("fc_judge"),
            routing_key=routing_key))  # the plan's id: its revision rounds find their prefix on one server
        return parse_verdict(resp.text if resp.ok and not response_error(resp) else None)


def parse_verdict(text: str | None) -> JudgeVerdict:
    """The judge's JSON verdict (every issue it lists); an unparsable one counts as not approved.

    An approval that still lists issues is not an approval: the issues go back to the planner.
    """
    data = extract_json(text, expect=dict)
    if is_failure(data):
        return JudgeVerdict(approved=False, issues=[f"judge answer unusable: {data}"])
    issues = data.get("issues") or []
    if isinstance(issues, str):
        issues = [issues]
    try:
        verdict = JudgeVerdict.model_validate({"approved": data.get("approved"),
                                               "issues": [str(i) for i in issues if str(i).strip()]})
    except ValidationError:
        return JudgeVerdict(approved=False, issues=["judge answer unusable: 'approved' must be true or false"])
    if verdict.approved and verdict.issues:
        return JudgeVerdict(approved=False, issues=verdict.issues)
    return verdict


def _dump(rounds: list[PlanRound]) -> str:
    return json.dumps([r.model_dump(mode="json") for r in rounds], ensure_ascii=False)

