"""Export validation with the real Qwen3 template: it must catch what breaks training."""

from __future__ import annotations

import json

from fabrika.export.validate import check_record, null_paths, validate_records
from fabrika.schemas import Message, ToolCall, to_row
from fabrika.schemas.chat import message_to_chat, sft_record
from fabrika.schemas.template import load_template
from tests.export.export_fixtures import make_sample


def test_template_matches_shared_reference():
    from pathlib import Path

    import pytest

    # shared/ sits beside the checkout (here and in CI's clone)
    ref = Path(__file__).resolve().parents[3] / "shared" / "chat_templates" / "qwen3.jinja"
    if not ref.exists():
        pytest.skip("shared reference template not present on this machine")
    assert load_template().source == ref.read_text("utf-8")


def test_fast_chat_conversion_equals_message_to_chat():
    msgs = [
        Message(role="assistant", content=None, reasoning="скрыто", flag="recovered",
                tool_calls=[ToolCall(id="c1", name="f", arguments={"город": "Тверь", "n": 1.0})]),
        Message(role="tool", tool_call_id="c1", name="f", content="{}"),
        Message(role="user", content="привет"),
    ]
    for m in msgs:
        want = m.to_chat()
        for c in want.get("tool_calls", []):
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])  # the export keeps a dict
        assert message_to_chat(m.model_dump(mode="json")) == want


def test_good_rows_pass_for_every_target_type():
    tpl = load_template()
    for i, kind in enumerate(["tool_call", "multi", "text", "clarification", "irrelevance"]):
        rec = sft_record(to_row(make_sample(i, kind, "ru" if i % 2 else "en")))
        assert check_record(rec, tpl, rec) == [], kind


def test_rendering_keeps_cyrillic_and_dict_arguments():
    rec = sft_record(to_row(make_sample(1, "tool_call", "ru")))
    text = load_template().render(rec["prompt"] + rec["completion"], rec["tools"])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Казань", "days": 3}}\n</tool_call>' in text
    assert "\\u04" not in text


def test_double_encoded_arguments_are_caught():
    rec = sft_record(to_row(make_sample(1, "tool_call", "ru")))
    call = rec["completion"][0]["tool_calls"][0]["function"]
    call["arguments"] = json.dumps(json.dumps(call["arguments"], ensure_ascii=False), ensure_ascii=False)
    problems = check_record(rec, load_template())
    assert any("double-encoded" in p for p in problems), problems


def test_leaked_null_keys_are_caught():
    good = sft_record(to_row(make_sample(3, "tool_call", "en")))
    bad = json.loads(json.dumps(good))
    bad["completion"][0]["tool_calls"][0]["function"]["arguments"]["passengers"] = None  # struct unification
    bad["prompt"][1]["tool_call_id"] = None
    problems = check_record(bad, load_template(), good)
    assert any("null-valued keys" in p and "tool_call_id" in p for p in problems), problems
    assert null_paths(good) == set()


def test_prompt_not_prefix_is_caught():
    rec = sft_record(to_row(make_sample(2, "text", "ru")))
    rec["completion"] = [{"role": "user", "content": "лишний ход"}, *rec["completion"]]
    problems = check_record(rec, load_template())
    assert any("not a prefix" in p for p in problems), problems


def test_failures_are_listed_per_row():
    recs = [sft_record(to_row(make_sample(i, "text", "ru"))) for i in range(3)]
    recs[1]["completion"] = []
    report = validate_records(recs)
    assert (report.rows, report.failed) == (3, 1)
    assert list(report.failures) == [recs[1]["id"]] and "completion is empty" in report.failures[recs[1]["id"]]
