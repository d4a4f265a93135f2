"""``fc.samples``: one training :class:`~fabrika.schemas.Sample` per correct assistant turn.

The prompt is the assistant's system prompt plus every earlier message of the
episode — wrong turns and their replies included, with their flags — so the
model learns to recover from its own mistakes; the completion is the target turn
(``train=True``; earlier targets are plain context in the prompt, ``train=False``). ``ground_truth`` holds the
expected calls (the FC reward's input) and, for a clarification, the withheld slot(s) it must ask for:
``{"calls": [], "asks": ["city"]}``. Wrong and injected turns are never completions. This is a dataset stage.
"""

from __future__ import annotations

from typing import Any, ClassVar

import fabrika.generators.fc.columns as cols
from fabrika.agents.prompts import ASSISTANT_KEYS, CATALOGUE, assistant_system
from fabrika.pipeline.stage import Row, Stage, StageConfig, ok, register_stage, rejected
from fabrika.schemas.ids import stable_id
from fabrika.schemas.messages import Dialogue, Message
from fabrika.schemas.records import Sample
from fabrika.schemas.rows import dumps, nested_fields


class SamplesConfig(StageConfig):
    """Config of ``fc.samples`` (input: ``fc.dialogues``; no knobs)."""


SCORE_COLUMNS = ("asks_withheld", "asks_given", "unsupported_numbers", "unsupported_facts", "contradiction_rule",
                 "target_issues")


def episode_samples(dialogue: Dialogue) -> list[Sample]:
    """The samples of one episode, in message order."""
    return [s for s, _ in _episode_samples(dialogue)]


def _episode_samples(dialogue: Dialogue) -> list[tuple[Sample, int]]:
    """:func:`episode_samples` with each sample's target message index; the prompts' context copies
    (``train=False``) are shared between the samples of the episode (made once per message)."""
    system = Message(role="system", content=assistant_system(dialogue.lang or "ru", dialogue.meta.get("plan_id")))
    kinds = dialogue.meta.get("step_kinds")
    step_tools = dialogue.meta.get("step_tools")
    context: list[Message] = []  # messages[:len(context)] as prompt context
    out: list[tuple[Sample, int]] = []
    for target in dialogue.meta.get("targets", []):
        i = target["index"]
        msg = dialogue.messages[i]
        if not msg.train or msg.flag in ("wrong", "injected", "repeat"):
            raise ValueError(f"episode {dialogue.id}: message {i} is listed as a target but is not trainable")
        step = target["step"]
        meta = {"episode_id": dialogue.id, "plan_id": dialogue.meta.get("plan_id"), "step": step,
                "round": target["round"], "sample_type": dialogue.meta.get("sample_type"),
                "tier": dialogue.meta.get("tier"), "scores": target.get("scores") or {}}
        if kinds is not None:
            meta["answers_clarification"] = step > 0 and kinds[step - 1] == "clarification"
        if step_tools is not None:
            meta["turn_tools"] = step_tools[step]
        context.extend(m.model_copy(update={"train": False}) for m in dialogue.messages[len(context):i])
        out.append((Sample(
            id=stable_id(dialogue.id, i, prefix="fcs-"), expert="fc", lang=dialogue.lang or "ru",
            prompt=[system, *context[:i]], completion=[msg],
            tools=dialogue.tools,
            target_type=target["target_type"], meta=meta,
            ground_truth={"calls": target["expected"], **({"asks": target["asks"]} if "asks" in target else {})},
        ), i))
    return out


#: the :class:`Sample` fields :func:`_sample_rows` writes from JSON made once per episode
_SHARED = {"prompt", "completion", "tools"}


def _sample_rows(samples: list[tuple[Sample, int]]) -> list[dict[str, Any]]:
    """``to_row(sample)`` of each sample, the same text, with each message and the tool list turned into JSON
    once per episode (a prompt repeats the episode's earlier messages: the JSON of a list is its items'
    JSON joined by commas)."""
    if not samples:
        return []
    first = samples[0][0]
    system = dumps(first.prompt[0].model_dump(mode="json"))
    tools = dumps([t.model_dump(mode="json") for t in first.tools])
    context = [dumps(m.model_dump(mode="json")) for m in first.prompt[1:]]
    nested = nested_fields(Sample)
    rows = []
    for sample, i in samples:
        if len(context) < i:
            context.extend(dumps(m.model_dump(mode="json")) for m in sample.prompt[1 + len(context):])
        shared = {"prompt": "[" + ",".join([system, *context[:i]]) + "]",
                  "completion": "[" + ",".join(dumps(m.model_dump(mode="json")) for m in sample.completion) + "]",
                  "tools": tools}
        data = sample.model_dump(mode="json", exclude=_SHARED)
        rows.append({name: shared[name] if name in _SHARED else dumps(data[name]) if name in nested else data[name]
                     for name in Sample.model_fields})
    return rows


def score_columns(sample: Sample) -> dict[str, Any]:
    """The rule scores of a sample as row columns (null where they do not apply)."""
    scores = (sample.meta or {}).get("scores") or {}
    return {c: scores.get(c) for c in SCORE_COLUMNS}


@register_stage
class SamplesStage(Stage[SamplesConfig]):
    kind = "fc.samples"
    prompt_templates: ClassVar[tuple[Any, ...]] = (CATALOGUE.select(*ASSISTANT_KEYS),)
    reads = (cols.DIALOGUE,)
    writes = cols.SAMPLES
    calls_llm: ClassVar[bool] = False

    async def process(self, row: Row) -> list[Row]:
        dialogue: Dialogue = cols.DIALOGUE.value(row)
        try:
            samples = _episode_samples(dialogue)
        except (ValueError, KeyError, IndexError) as exc:
            return [rejected(stable_id(dialogue.id, prefix="fcs-bad-"), f"invalid_episode: {exc}")]
        return [ok(s.id, **{k: v for k, v in row.items() if k != "id"}, **score_columns(s))
                for (s, _), row in zip(samples, _sample_rows(samples), strict=True)]
