"""The whole FC pipeline on the sim backend: every target earns the FC reward, reruns are identical."""

from __future__ import annotations

from pathlib import Path

import yaml

from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.rewards.fc import fc_reward
from fabrika.schemas import Sample, from_row
from fabrika.store.run import RunStore

DEMO = Path(__file__).parents[2] / "configs" / "fc_demo.yaml"


def run_demo(run_dir: Path, plans_per_topic: int = 2, irrelevance_input: str = "fc.dialogues") -> RunStore:
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    data["run_dir"] = str(run_dir)
    for stage in data["stages"]:
        if stage["kind"] == "fc.plans":
            stage["plans_per_topic"] = plans_per_topic
        if stage["kind"] == "fc.irrelevance":
            stage["share"] = 1.0
            stage["input"] = irrelevance_input
    config, issues = validate_data(data, str(DEMO), DEMO.parent)
    assert config is not None, [str(i) for i in issues]
    run_pipeline(config, resume=False, progress=False)
    return RunStore(run_dir)


def _samples(store: RunStore, stage: str) -> list[Sample]:
    df = store.scan_raw(stage).collect()
    return [from_row(Sample, r) for r in df.filter(df["status"] == "ok").iter_rows(named=True)]


def test_sim_pipeline_targets_earn_the_reward_and_rerun_is_identical(tmp_path: Path):
    store = run_demo(tmp_path / "a")
    samples = _samples(store, "fc.samples")
    derived = _samples(store, "fc.irrelevance")
    assert len(samples) >= 20 and derived
    assert {s.lang for s in samples} == {"ru", "en"}
    assert {"tool_call", "text"} <= {s.target_type for s in samples}
    everything = samples + derived
    completions = [[m.to_chat() for m in s.completion] for s in everything]
    rewards = fc_reward(prompts=[None] * len(everything), completions=completions,
                        ground_truth=[s.ground_truth for s in everything],
                        target_type=[s.target_type for s in everything],
                        tools=[[t.to_openai() for t in s.tools] for s in everything])
    assert rewards == [1.0] * len(everything)
    for s in everything:
        assert all(m.train and m.flag not in ("wrong", "injected") for m in s.completion)
        assert not any(m.train for m in s.prompt)
    for d in derived:
        assert not set(d.meta["removed_tools"]) & {t.name for t in d.tools}
    plans = store.scan_raw("fc.plans").collect()
    assert plans["n_rounds"].max() > 1  # the sim judge sent some plans back for revision

    # rerun: identical samples; irrelevance read from fc.samples derives the same as from episodes
    again = run_demo(tmp_path / "b", irrelevance_input="fc.samples")
    assert sorted(s.model_dump_json() for s in _samples(again, "fc.samples")) == \
        sorted(s.model_dump_json() for s in samples)
    assert sorted(s.model_dump_json() for s in _samples(again, "fc.irrelevance")) == \
        sorted(s.model_dump_json() for s in derived)
