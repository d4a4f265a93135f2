"""configs/fc_demo.yaml against the FC model double: no row carrying a tagged fault reaches the dataset.

The double (fabrika.testing.fc_double) answers every role over real HTTP in real-model shapes
(think blocks, prose around JSON, Hermes tags in content) and injects tagged faults. The test
traces each fault by the visible text it produced: faulted assistant texts must not be the
completion of any dataset row, faulted user turns must not be in any dataset row's prompt.
It also checks that faults did reach the raw sample tables (so the gates, not luck, kept
them out) and prints the funnel: training turns per plan.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from fabrika.pipeline.config import validate_data
from fabrika.pipeline.runner import run_pipeline
from fabrika.schemas import Sample, from_row
from fabrika.store.run import RunStore
from fabrika.testing import FakeOpenAIServer, FcModelDouble

DEMO = Path(__file__).parents[2] / "configs" / "fc_demo.yaml"


def _rows(path: Path) -> list[Sample]:
    if not path.exists():
        return []
    return [from_row(Sample, r) for r in pl.read_parquet(path).iter_rows(named=True)]


def _user_texts(s: Sample) -> list[str]:
    return [(m.content or "").strip() for m in s.prompt if m.role == "user"]


def _completion_text(s: Sample) -> str:
    return "\n".join((m.content or "").strip() for m in s.completion)


def run_against_double(tmp_path: Path, plans_per_topic: int | None = None, seed: int = 5, rate: float = 0.3,
                       **double_args: Any) -> dict[str, Any]:
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    with FakeOpenAIServer() as srv:
        double = FcModelDouble(seed=seed, rate=rate, **double_args).install(srv)
        data.update(run_dir=str(tmp_path / "run"),
                    llm={"backend": "openai", "model": "fake", "endpoints": [{"base_url": srv.base_url}],
                         "max_retries": 0, "cache": {"enabled": False}})
        for stage in data["stages"]:
            if stage["kind"] == "fc.plans" and plans_per_topic is not None:
                stage["plans_per_topic"] = plans_per_topic
        config, issues = validate_data(data, str(DEMO), DEMO.parent)
        assert config is not None, [str(i) for i in issues]
        run_pipeline(config, resume=False, progress=False)
        assert not srv.errors, srv.errors[:1]
    store = RunStore(tmp_path / "run")
    version = tmp_path / "run" / "versions" / "v1"
    kept = _rows(version / "data" / "fc.samples.parquet") + _rows(version / "data" / "fc.irrelevance.parquet")
    raw = store.scan_raw("fc.samples").collect().filter(pl.col("status") == "ok")
    raw_samples = [from_row(Sample, r) for r in raw.iter_rows(named=True)]
    plans = store.scan_raw("fc.plans").collect().filter(pl.col("status") == "ok").height
    episodes = store.scan_raw("fc.dialogues").collect()
    return {"double": double, "kept": kept, "raw": raw_samples, "plans": plans, "episodes": episodes,
            "funnel": json.loads((version / "funnel.json").read_text(encoding="utf-8"))}


def test_no_row_with_a_tagged_fault_reaches_the_dataset(tmp_path: Path) -> None:
    out = run_against_double(tmp_path)
    double: FcModelDouble = out["double"]
    assistant_faults = double.fault_texts(["fc.assistant"])
    user_faults = double.fault_texts(["fc.user"])
    counts = double.counts()
    assert {"invented_number", "contradiction", "role_label", "pasted_json", "truncation"} <= set(counts), counts
    assert double.shapes["think"] and double.shapes["hermes"] and double.shapes["prose_json"]

    # faults did reach the raw tables: the gates and the episode checks are what keep them out
    raw_bad = [s for s in out["raw"] if _completion_text(s) in assistant_faults]
    assert raw_bad, "no faulted closing answer reached fc.samples: the test would prove nothing"

    kept: list[Sample] = out["kept"]
    assert kept, "the dataset is empty"
    bad_completions = [_completion_text(s) for s in kept if _completion_text(s) in assistant_faults]
    bad_prompts = [t for s in kept for t in _user_texts(s) if t in user_faults]
    assert bad_completions == [] and bad_prompts == [], (bad_completions[:3], bad_prompts[:3])

    reasons = out["episodes"].filter(pl.col("status") == "rejected")["reason"].to_list()
    turns_per_plan = len(kept) / max(1, out["plans"])
    print(f"\nFC demo against the model double (seed 5, fault rate 0.3): {out['plans']} plans, "
          f"{out['episodes'].height} episodes ({len(reasons)} rejected), {len(out['raw'])} raw samples, "
          f"{len(kept)} dataset rows = {turns_per_plan:.2f} training turns per plan")
    print("faults injected:", dict(sorted(counts.items())), "| raw rows with a faulted completion:", len(raw_bad))
    print("episode rejections:", sorted({r.split(":")[0] for r in reasons}))
    for table, gates in (out["funnel"].get("gates") or {}).items():
        print(f"funnel {table}:", {k: v for k, v in gates.items() if v})
    assert turns_per_plan > 0.3


def test_withheld_values_leaked_in_another_form_never_reach_the_dataset(tmp_path: Path) -> None:
    """The user agent says a withheld value by a short form («МСК»), in another case or as a written date."""
    out = run_against_double(tmp_path, plans_per_topic=3, rate=0.9, kinds=["leak_case_form", "synonym_given"])
    double: FcModelDouble = out["double"]
    leaks = double.fault_texts(["fc.user"])
    assert double.counts().get("leak_case_form", 0) + double.counts().get("synonym_given", 0) >= 2, double.counts()
    assert [t for s in out["kept"] for t in _user_texts(s) if t in leaks] == []
    reasons = out["episodes"].filter(pl.col("status") == "rejected")["reason"].to_list()
    assert sum(r.startswith("user_leak") for r in reasons) >= 2, reasons
