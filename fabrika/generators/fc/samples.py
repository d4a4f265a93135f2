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
from fabrika.schemas.rows import to_row


class SamplesConfig(StageConfig):
    """Config of ``fc.samples`` (input: ``fc.dialogues``; no knobs)."""


SCORE_COLUMNS = ("asks_withheld", "asks_given", "unsupported_numbers", "unsupported_facts", "contradiction_rule",
                 "target_issues")


def episode_samples(dialogue: Dialogue) -> list[Sample]:
    """The samples of one episode, in message order."""
    system = Message(role="system", content=assistant_system(dialogue.lang or "ru", dialogue.meta.get("plan_id")))
    kinds = dialogue.meta.get("step_kinds")
    step_tools = dialogue.meta.get("step_tools")
    out: list[Sample] = []
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
        out.append(Sample(
            id=stable_id(dialogue.id, i, prefix="fcs-"), expert="fc", lang=dialogue.lang or "ru",
            prompt=[system, *(m.model_copy(update={"train": False}) for m in dialogue.messages[:i])], completion=[msg],
            tools=dialogue.tools,
            target_type=target["target_type"], meta=meta,
            ground_truth={"calls": target["expected"], **({"asks": target["asks"]} if "asks" in target else {})},
        ))
    return out


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
            samples = episode_samples(dialogue)
        except (ValueError, KeyError, IndexError) as exc:
            return [rejected(stable_id(dialogue.id, prefix="fcs-bad-"), f"invalid_episode: {exc}")]
        return [ok(s.id, **{k: v for k, v in to_row(s).items() if k != "id"}, **score_columns(s)) for s in samples]
