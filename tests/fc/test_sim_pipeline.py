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


def russian_calls_kept(store: RunStore) -> tuple[int, int]:
    """(kept, all) Russian tool-call samples under the demo's language gate (the 300K config's filter block)."""
    import polars as pl

    from fabrika.filters.language import LanguageGate, _language

    filters = yaml.safe_load(DEMO.read_text(encoding="utf-8"))["filters"]
    samples = store.scan_raw("fc.samples").collect().filter(pl.col("status") == "ok")
    joined = samples.select("id", "lang", "target_type").join(store.scan_raw("fc_language").collect(), on="id")
    calls = joined.filter((pl.col("lang") == "ru") & (pl.col("target_type") == "tool_call"))
    keep = pl.lit(True)
    for pred in _language(LanguageGate(**filters["language"])):
        keep = keep & (pred.expr.fill_null(True) if pred.keep_null else pred.expr)
    return int(calls.select(keep.alias("k"))["k"].sum()), calls.height


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
    assert not [d for d in derived if d.meta.get("answers_clarification")]  # irrelevance never at a clarification answer
    kept, total = russian_calls_kept(store)
    assert total >= 10 and kept / total >= 0.95, (kept, total)

    # rerun: identical samples; irrelevance read from fc.samples derives the same as from episodes
    again = run_demo(tmp_path / "b", irrelevance_input="fc.samples")
    assert sorted(s.model_dump_json() for s in _samples(again, "fc.samples")) == \
        sorted(s.model_dump_json() for s in samples)
    # from fc.samples the stage reads gated rows (the demo dedups fc.samples), so it derives a subset
    from_samples = {s.id: s.model_dump_json() for s in _samples(again, "fc.irrelevance")}
    from_episodes = {s.id: s.model_dump_json() for s in derived}
    assert from_samples and set(from_samples) <= set(from_episodes)
    assert all(from_episodes[k] == v for k, v in from_samples.items())


def test_realistic_profile_pipeline_stays_clean(tmp_path: Path):
    """Under think blocks, prose, truncation and an inflecting user: targets still earn the reward, no reasoning
    leaks into a completion, and the Russian calls survive the language gate."""
    from fabrika.generators.fc import sim_realistic, sim_responders

    sim_realistic.use_realistic_profile()
    try:
        store = run_demo(tmp_path / "r")
    finally:
        sim_responders.register_fc_sim_responders()
    samples = _samples(store, "fc.samples")
    episodes = store.scan_raw("fc.dialogues").collect()
    assert (episodes["status"] == "ok").mean() >= 0.8
    texts = [m.content or "" for s in samples for m in s.completion]
    assert not [t for t in texts if "<think>" in t or "</think>" in t]
    users = [m.content or "" for s in samples for m in s.prompt if m.role == "user"]
    assert any(w in " ".join(users) for w in ("Казани", "Твери", "Москве", "Москвы", "Петровой", "Иванова"))
    rewards = fc_reward(prompts=[None] * len(samples), completions=[[m.to_chat() for m in s.completion] for s in samples],
                        ground_truth=[s.ground_truth for s in samples], target_type=[s.target_type for s in samples],
                        tools=[[t.to_openai() for t in s.tools] for s in samples])
    assert rewards == [1.0] * len(samples)
    kept, total = russian_calls_kept(store)
    assert kept / total >= 0.95, (kept, total)
