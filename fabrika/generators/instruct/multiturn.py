"""Adversarial multi-turn IF dialogues: ``if.dialogues``, ``if.dialogue.samples``, ``if.dialogue.grpo``.

Per dialogue (``target_count`` slots, ids ``ifd-slot-<i>``; ``en_share`` of them English,
the rest Russian, each written natively from its own prompts):

1. a persona (system prompt), a topic and 1–3 compatible library rules are drawn;
2. the **rubric writer** writes 1–5 mandatory checks; optional ones are dropped and an LLM
   **decidability check** keeps those one reply can decide (drops are recorded);
3. the **user agent** opens the chat (the stage appends the rules to its first message, so they
   are stated verbatim) and then, turn by turn, pressures the assistant: topic shifts,
   contradictory follow-ups, requests that invite breaking a rule's format or the persona;
4. the **assistant** answers each turn seeing only the persona and the visible chat;
5. every assistant turn is judged against every rubric (``fabrika.rewards.rubric``'s judge,
   one batched call) and checked by the trusted library verifiers of the rules.

``if.dialogue.samples`` turns each assistant turn whose every rubric and rule passes into an
SFT sample (prompt = the chat before it); a failing turn is a rejected row naming the turn and
the failing rubric or rule. ``if.dialogue.grpo`` makes a GRPO prompt of every assistant turn
with the rules and rubrics in its ground truth (the rubric reward and the IF reward read them).

Visibility: the user agent sees the topic, its rules, its tactic and the visible chat; the
assistant never sees the tactics or the rubrics; the judge sees the chat, the reply and rubrics.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, ClassVar, Iterator

import jinja2
import yaml
from pydantic import Field, model_validator

import fabrika.generators.instruct.columns as cols
import fabrika.generators.instruct.prompts as prompts
from fabrika.generators.instruct.rubrics import (
    decidable_request,
    language_problem,
    parse_decidable,
    parse_rubrics,
    writer_request,
)
from fabrika.inputs import DATA_DIR
from fabrika.llm.rejections import answer_problem
from fabrika.llm.types import ChatRequest, ChatResponse
from fabrika.pipeline.preflight import InputFile
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.prompts import PromptCatalogue
from fabrika.rewards.rubric import judge_request, render_transcript, response_verdicts, strip_reasoning
from fabrika.schemas import Message, Sample, stable_id, to_row
from fabrika.schemas.instruct import IFConstraintRef, IFDialogueRow, IFGroundTruth
from fabrika.schemas.rows import dumps
from fabrika.textutil.answers import ParseFailure, is_failure

TAG_USER = "if.dialogue.user"
TAG_ASSISTANT = "if.dialogue.assistant"
PRESSURE_TACTICS = ("topic_shift", "contradictory_followup", "format_bait", "persona_bait", "pressure")
RULES_RU = ["ru.case.all_lowercase", "ru.punct.no_commas", "ru.startend.end_phrase", "ru.length.words_max",
            "ru.punct.no_exclamation", "ru.russian.address_vy", "ru.format.no_markdown", "ru.startend.start_phrase",
            "ru.format.postscript", "ru.russian.no_latin", "ru.length.sentences_max"]
# English rules: no Russian-specific checks, no phrase parameters (their samplers draw Russian phrases).
RULES_EN = ["ru.case.all_lowercase", "ru.punct.no_commas", "ru.length.words_max", "ru.punct.no_exclamation",
            "ru.format.no_markdown", "ru.format.postscript", "ru.length.sentences_max"]
_LABELS = ("пользователь:", "user:", "реплика:", "message:")


class DialoguesConfig(StageConfig):
    """Config of ``if.dialogues`` (a source stage)."""

    target_count: int = Field(default=13_000, ge=0, description="Dialogues to simulate (reference recipe: ~13K).")
    en_share: float = Field(default=0.3, ge=0, le=1, description="Share of English dialogues (the rest Russian).")
    turns_min: int = Field(default=3, ge=1, le=12, description="Fewest user turns per dialogue.")
    turns_max: int = Field(default=4, ge=1, le=12, description="Most user turns (3–4 exchanges ≈ 6–8 messages; the "
                           "reference averages ~6.1 turns and ~2.7 rubrics per dialogue).")
    rules_min: int = Field(default=1, ge=1, le=5, description="Fewest library rules the user sets in turn 1.")
    rules_max: int = Field(default=3, ge=1, le=5, description="Most library rules the user sets in turn 1.")
    rules_ru: list[str] = Field(default_factory=lambda: list(RULES_RU), description="Library rules for Russian chats.")
    rules_en: list[str] = Field(default_factory=lambda: list(RULES_EN), description="Library rules for English chats "
                                "(their English renderings).")
    tactics: list[str] = Field(default_factory=lambda: list(PRESSURE_TACTICS), description="Pressure tactics drawn "
                               "for turns 2.. (without repeats while they last).")
    seeds_file: Path | None = Field(default=None, description="YAML with personas/topics per language (None: the "
                                    "shipped fabrika/data/instruct/dialogue_seeds.yaml).")
    decidability_check: bool = Field(default=True, description="Ask an LLM which rubrics one reply can decide.")
    user_model: str | None = Field(default=None, description="User-agent model (None: the engine default).")
    assistant_model: str | None = Field(default=None, description="Assistant (teacher) model.")
    writer_model: str | None = Field(default=None, description="Rubric writer and decidability model.")
    judge_model: str | None = Field(default=None, description="Rubric judge model.")
    judge_samples: int = Field(default=1, ge=1, le=16, description="Judge samples per turn (request n; majority).")
    judge_quality: bool = Field(default=False, description="Also rate each assistant turn 0–10 with the IF quality "
                                "judge, stored as `judge_quality` (a diagnostic: it is not α, which must come from "
                                "the training RM).")
    user_temperature: float = Field(default=0.9, ge=0, le=2, description="User-agent temperature.")
    assistant_temperature: float = Field(default=0.7, ge=0, le=2, description="Assistant temperature.")
    max_tokens: int | None = Field(default=None, ge=1, description="Token limit per assistant turn.")

    @model_validator(mode="after")
    def _ranges(self) -> "DialoguesConfig":
        if self.turns_min > self.turns_max or self.rules_min > self.rules_max:
            raise ValueError("need turns_min <= turns_max and rules_min <= rules_max")
        unknown = [t for t in self.tactics if t not in PRESSURE_TACTICS]
        if unknown or not self.tactics:
            raise ValueError(f"tactics must be a non-empty subset of {list(PRESSURE_TACTICS)}, got {self.tactics}")
        return self


#: The user agent, its tactics and the rules' opening, both languages in one file (beside this module).
DIALOGUE = PromptCatalogue.nested("instruct.dialogue", Path(__file__).resolve().parent / "prompts_dialogue.yaml")
#: The rubric judge's prompts (rendered by :mod:`fabrika.rewards.rubric`; here for the stage's fingerprint).
#: The shipped personas/topics (``seeds_file: null``).
DEFAULT_SEEDS = DATA_DIR / "instruct" / "dialogue_seeds.yaml"
RUBRIC = PromptCatalogue.nested("rubric", DATA_DIR / "instruct" / "prompts_rubric.yaml")


def _dialogue_prompts() -> dict[str, Any]:
    return DIALOGUE.data


_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)


def _render(template: str, **variables: Any) -> str:
    return _ENV.from_string(template).render(**variables).strip()


def user_request(topic: str, rules: list[str], visible: list[dict[str, Any]], tactic: str, rule: str, *, lang: str,
                 turn: int, model: str | None, temperature: float) -> ChatRequest:
    """The user agent's next message: it sees the topic, its rules, its tactic and the visible chat."""
    spec = _dialogue_prompts()
    tactic_text = _render(spec["tactics"][lang][tactic], rule=rule)
    user = spec["user"][lang]
    messages = ({"role": "system", "content": user["system"].strip()},
                {"role": "user", "content": _render(user["user"], topic=topic, rules=rules if turn > 1 else [],
                                                    transcript=render_transcript(visible, lang), tactic=tactic_text)})
    return ChatRequest(messages=messages, model=model, temperature=temperature, tag=TAG_USER, sample_index=turn)


def state_rules(opening: str, rules: list[str], lang: str) -> str:
    """The first user turn: the agent's opening with the rules stated verbatim."""
    return _render(_dialogue_prompts()["rules_intro"][lang], opening=opening, rules=rules)


_ASSISTANT_LINE = re.compile(r"(?im)^\s*(?:ассистент|assistant)\s*:")


def clean_user_text(text: str | None) -> str:
    """The user agent's message without reasoning, labels, wrapping quotes or a reply it wrote for the assistant."""
    out = strip_reasoning(text)
    m = _ASSISTANT_LINE.search(out)
    if m:  # models playing the user sometimes continue with the other side of the chat
        out = out[:m.start()].strip()
    if out.lower().startswith(_LABELS):
        out = out.split(":", 1)[1].strip()
    if len(out) > 1 and out[0] in "\"«“'" and out[-1] in "\"»”'":
        out = out[1:-1].strip()
    return out


def _load_seeds(path: Path | None) -> dict[str, Any]:
    with open(path or DEFAULT_SEEDS, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    for key in ("personas", "topics"):
        for lang in ("ru", "en"):
            if not data.get(key, {}).get(lang):
                raise ValueError(f"{path}: needs a non-empty '{key}.{lang}' list")
    return data


def _failure(resp: ChatResponse) -> str | None:
    return answer_problem(resp)


@register_stage
class DialoguesStage(Stage[DialoguesConfig]):
    """Source stage: one adversarial dialogue per slot, judged turn by turn."""

    kind = "if.dialogues"
    #: the prompts it renders (their text is in its fingerprint: an edit redoes it)
    prompt_templates: ClassVar[tuple[Any, ...]] = (DIALOGUE.select("user", "tactics", "rules_intro"),
                                                   RUBRIC.select("judge"), prompts.CATALOGUE.select("judge_quality"))
    reads = ()  # seeds file (personas, topics) and the constraint library
    writes = cols.DIALOGUE
    input_files = (InputFile("seeds_file", "IF dialogue seeds file", format="document",
                             default=str(DEFAULT_SEEDS), fix="a YAML mapping with personas/topics per language"),)

    @classmethod
    def check_config(cls, config: DialoguesConfig, pipeline: Any) -> list[tuple[str, str]]:
        from fabrika.constraints import REGISTRY

        assert isinstance(config, DialoguesConfig)
        problems = []
        for field in ("rules_ru", "rules_en"):
            unknown = [c for c in getattr(config, field) if c not in REGISTRY]
            if unknown:
                problems.append((field, f"unknown library constraint ids {unknown}; see fabrika.constraints.REGISTRY"))
            elif len(getattr(config, field)) < config.rules_min:
                problems.append((field, f"{len(getattr(config, field))} rules cannot give rules_min="
                                        f"{config.rules_min}; add rules or lower rules_min"))
        if config.seeds_file is not None:
            try:
                _load_seeds(pipeline.resolve_path(config.seeds_file))
            except (OSError, ValueError, yaml.YAMLError) as exc:
                problems.append(("seeds_file", str(exc)))
        return problems

    def input_rows(self) -> Iterator[Row]:
        for i in range(self.config.target_count):
            yield {"id": f"ifd-slot-{i:06d}"}

    async def setup(self) -> None:
        path = self.ctx.pipeline.resolve_path(self.config.seeds_file) if self.config.seeds_file else None
        self.seeds = _load_seeds(path)

    def _rules(self, rng: random.Random, lang: str) -> list[dict[str, Any]]:
        from fabrika.constraints import get, sample_combination

        ids = self.config.rules_ru if lang == "ru" else self.config.rules_en
        combo = sample_combination(rng, self.config.rules_min, min(self.config.rules_max, len(ids)), ids=ids)
        return [{"id": f"{cid}@{stable_id(cid, params)[:10]}", "library_id": cid, "params": params,
                 "text": get(cid).render(params, lang=lang)} for cid, params in combo]

    async def process(self, row: Row) -> list[Row]:
        cfg = self.config
        did = stable_id(row["id"], prefix="ifd-")
        rng = self.ctx.rng(str(row["id"]))
        lang = "en" if rng.random() < cfg.en_share else "ru"
        persona = rng.choice(self.seeds["personas"][lang])
        topic = rng.choice(self.seeds["topics"][lang])
        rules = self._rules(rng, lang)
        rule_texts = [r["text"] for r in rules]
        base = {"lang": lang, "persona": persona, "topic": topic, "rules": dumps(rules)}
        if len(rules) < cfg.rules_min:
            return [rejected(did, f"too_few_rules: {len(rules)} compatible of {cfg.rules_min} wanted", **base)]

        written = (await self.ctx.llm.complete([writer_request(persona, rule_texts, topic, lang=lang,
                                                               model=cfg.writer_model)]))[0]
        problem = _failure(written)
        parsed = parse_rubrics(written.text) if problem is None else ParseFailure(problem)
        if is_failure(parsed):
            return [rejected(did, f"rubric_writer: {parsed}", **base)]
        rubrics, dropped = parsed
        if cfg.decidability_check:
            check = (await self.ctx.llm.complete([decidable_request(rubrics, lang=lang, model=cfg.writer_model)]))[0]
            verdict = _failure(check) or parse_decidable(check.text, len(rubrics))
            if isinstance(verdict, str):
                return [rejected(did, f"decidability_check_failed: {verdict}", **base, rubrics=dumps(rubrics))]
            dropped += [{"rubric": r, "reason": "undecidable"} for r, d in zip(rubrics, verdict) if not d]
            rubrics = [r for r, d in zip(rubrics, verdict) if d]
            if not rubrics:
                return [rejected(did, "no_decidable_rubrics: the check found none decidable", **base,
                                 rubrics_dropped=dumps(dropped))]
        base.update(rubrics=dumps(rubrics), rubrics_dropped=dumps(dropped))

        n_turns = rng.randint(cfg.turns_min, cfg.turns_max)
        schedule = rng.sample(cfg.tactics, len(cfg.tactics))
        tactics = ["open"] + [schedule[i % len(schedule)] for i in range(n_turns - 1)]
        messages: list[dict[str, Any]] = [{"role": "system", "content": persona}]
        stop_reason = None
        for t, tactic in enumerate(tactics, 1):
            ureq = user_request(topic, rule_texts, messages[1:], tactic, rng.choice(rule_texts), lang=lang, turn=t,
                                model=cfg.user_model, temperature=cfg.user_temperature)
            uresp = (await self.ctx.llm.complete([ureq]))[0]
            utext = clean_user_text(uresp.text) if uresp.ok else ""
            why = _failure(uresp) or ("empty_answer" if not utext else language_problem(utext, lang))
            if why:
                stop_reason = f"user turn {t}: {why}"
                break
            messages.append({"role": "user", "content": state_rules(utext, rule_texts, lang) if t == 1 else utext})
            areq = ChatRequest(messages=tuple(messages), model=cfg.assistant_model, temperature=cfg.assistant_temperature,
                               max_tokens=cfg.max_tokens, tag=TAG_ASSISTANT, sample_index=t,
                               meta={"rules": [[r["library_id"], r["params"]] for r in rules], "lang": lang})
            aresp = (await self.ctx.llm.complete([areq]))[0]
            atext = strip_reasoning(aresp.text) if aresp.ok else ""
            why = _failure(aresp) or ("empty_answer" if not atext else None)
            if why:
                messages.pop()
                stop_reason = f"assistant turn {t}: {why}"
                break
            messages.append({"role": "assistant", "content": atext})
        turns = await self._judge(messages, rubrics, rules, tactics, lang)
        if not turns:
            return [rejected(did, f"no_assistant_turns: {stop_reason}", **base, messages=dumps(messages))]
        return [ok(did, **base, messages=dumps(messages), turns=dumps(turns), n_turns=len(turns),
                   n_passing_turns=sum(bool(t["passed"]) for t in turns), n_rubrics=len(rubrics),
                   stop_reason=stop_reason)]

    async def _judge(self, messages: list[dict[str, Any]], rubrics: list[str], rules: list[dict[str, Any]],
                     tactics: list[str], lang: str) -> list[dict[str, Any]]:
        """Per assistant turn: rubric verdicts (one batched judge call), rule verdicts, language."""
        from fabrika.constraints import verify_all

        positions = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        reqs = [judge_request(messages[:i], messages[i]["content"], rubrics, lang=lang, model=self.config.judge_model,
                              n=self.config.judge_samples,
                              temperature=0.0 if self.config.judge_samples == 1 else 0.7) for i in positions]
        quality: list[float | None] = [None] * len(positions)
        if self.config.judge_quality and positions:
            from fabrika.textutil.answers import parse_score

            qreqs = [prompts.judge_quality_request(messages[i - 1]["content"], [r["text"] for r in rules],
                                                   messages[i]["content"], model=self.config.judge_model)
                     for i in positions]
            reqs = reqs + qreqs
        answers = await self.ctx.llm.complete(reqs) if reqs else []
        if self.config.judge_quality and positions:
            for j, resp in enumerate(answers[len(positions):]):
                score = parse_score(strip_reasoning(resp.text)) if resp.ok else None
                quality[j] = score if isinstance(score, float) else None
        out = []
        for t, (i, resp) in enumerate(zip(positions, answers[:len(positions)]), 1):
            reply = messages[i]["content"]
            verdicts = response_verdicts(resp, len(rubrics))
            lib = verify_all(reply, [(r["library_id"], r["params"]) for r in rules])
            lang_why = language_problem(reply, lang)
            judge_error = str(verdicts) if is_failure(verdicts) else None
            kept = None if is_failure(verdicts) else list(verdicts)
            failed_rubrics = [] if kept is None else [r for r, v in zip(rubrics, kept) if not v]
            failed_rules = [r["id"] for r, v in zip(rules, lib) if not v]
            passed = None if judge_error else not failed_rubrics and not failed_rules and lang_why is None
            out.append({"turn": t, "tactic": tactics[t - 1], "message_index": i, "passed": passed,
                        "rubric_verdicts": kept,
                        "failed_rubrics": failed_rubrics, "failed_rules": failed_rules, "judge_error": judge_error,
                        "language_problem": lang_why, "quality": quality[t - 1]})
        return out


def _gt(d: IFDialogueRow) -> dict[str, Any]:
    return IFGroundTruth(constraints=[IFConstraintRef(id=r.id, text=r.text, library_id=r.library_id, params=r.params)
                                      for r in d.rules], rubrics=list(d.rubrics)).model_dump()


def turn_failure(turn: dict[str, Any]) -> str | None:
    """Why an assistant turn is not a target (``None`` when every rubric and rule passed)."""
    t = turn["turn"]
    if turn["judge_error"]:
        return f"judge_failed: turn {t}: {turn['judge_error']}"
    if turn["failed_rubrics"]:
        return f"rubric_failed: turn {t}: {turn['failed_rubrics'][0]}"
    if turn["failed_rules"]:
        return f"rule_failed: turn {t}: {turn['failed_rules'][0]}"
    if turn["language_problem"]:
        return f"wrong_language: turn {t}: {turn['language_problem']}"
    return None


class DialogueSamplesConfig(StageConfig):
    """Config of ``if.dialogue.samples``."""


@register_stage
class DialogueSamplesStage(Stage[DialogueSamplesConfig]):
    """Per dialogue: one SFT sample per assistant turn that passes every rubric and rule; a rejection per other turn."""

    kind = "if.dialogue.samples"
    prompt_templates: ClassVar[tuple[Any, ...]] = ()  # renders no prompt
    reads = (cols.MESSAGES, cols.TURNS, *(c.optional() for c in cols.DIALOGUE if c.name not in ("messages", "turns")))
    writes = cols.DIALOGUE_SAMPLES
    calls_llm: ClassVar[bool] = False

    async def process(self, row: Row) -> list[Row]:
        d = IFDialogueRow.of(row)
        messages = d.messages
        gt = _gt(d)
        out: list[Row] = []
        for turn in d.turns:
            i = turn.message_index
            sid = stable_id(d.id, turn.turn, prefix="ifds-")
            cols: dict[str, Any] = {"dialogue_id": d.id, "turn": turn.turn, "tactic": turn.tactic,
                    "failed_rubrics": dumps(turn.failed_rubrics), "failed_rules": dumps(turn.failed_rules),
                    "n_rubrics": d.n_rubrics}
            why = turn_failure(turn.model_dump())
            if why:
                out.append(rejected(sid, why, **cols))
                continue
            sample = Sample(id=sid, expert="if", lang=d.lang or "ru",
                            prompt=[Message(role=m["role"], content=m["content"]) for m in messages[:i]],
                            completion=[Message(role="assistant", content=messages[i]["content"], train=True)],
                            target_type="text", ground_truth=gt,
                            meta={"kind": "dialogue", "dialogue_id": d.id, "turn": turn.turn, "tactic": turn.tactic})
            out.append(ok(**to_row(sample), **cols))
        return out or [rejected(stable_id(d.id, prefix="ifds-"), "no_assistant_turns")]


class DialogueGrpoConfig(StageConfig):
    """Config of ``if.dialogue.grpo``."""


@register_stage
class DialogueGrpoStage(Stage[DialogueGrpoConfig]):
    """Per assistant turn of a dialogue: a GRPO prompt (the chat before it) with its rules and rubrics."""

    kind = "if.dialogue.grpo"
    prompt_templates: ClassVar[tuple[Any, ...]] = ()  # renders no prompt
    reads = (cols.MESSAGES, cols.TURNS, *(c.optional() for c in cols.DIALOGUE if c.name not in ("messages", "turns")),
             *cols.TEACHER)
    writes = cols.DIALOGUE_GRPO
    calls_llm: ClassVar[bool] = False

    async def process(self, row: Row) -> list[Row]:
        d = IFDialogueRow.of(row)
        gt = _gt(d)
        out = []
        for turn in d.turns:
            i = turn.message_index
            sample = Sample(id=stable_id(d.id, turn.turn, prefix="ifdg-"), expert="if", lang=d.lang or "ru",
                            prompt=[Message(role=m["role"], content=m["content"]) for m in d.messages[:i]],
                            completion=[], ground_truth=gt,
                            meta={"kind": "dialogue", "dialogue_id": d.id, "turn": turn.turn, "tactic": turn.tactic})
            quality = turn.quality
            out.append(ok(**to_row(sample), turn=turn.turn, tactic=turn.tactic, n_rubrics=d.n_rubrics,
                          teacher_passed=turn.passed,
                          judge_quality=round(quality / 10.0, 4) if quality is not None else None))
        # α (teacher_rm_mean, teacher_rm_k, rm_id) comes from an rm.teacher_scores stage annotating this table
        return out or [rejected(stable_id(d.id, prefix="ifdg-"), "no_assistant_turns")]


def _register_sim() -> None:
    from fabrika.generators.instruct.sim_multi import register_sim_responders

    register_sim_responders()


_register_sim()
