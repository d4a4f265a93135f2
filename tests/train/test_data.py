"""Loading and checking exports: splits, JSON-string columns, tools inlined into GRPO prompts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from datasets import Dataset, DatasetDict

from fabrika.errors import InputError
from fabrika.train.data import inline_tools, load_split, prepare_grpo_dataset, prepare_sft_dataset

TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}


def test_load_split_from_dataset_dict(tmp_path: Path) -> None:
    DatasetDict({"train": Dataset.from_dict({"a": [1, 2]}), "test": Dataset.from_dict({"a": [3]})}).save_to_disk(
        str(tmp_path / "dd"))
    assert load_split(tmp_path / "dd")["a"] == [1, 2]
    assert load_split(tmp_path / "dd", "test")["a"] == [3]
    with pytest.raises(InputError, match=r"has splits \['test', 'train'\], not 'dev'"):
        load_split(tmp_path / "dd", "dev")
    (tmp_path / "junk").mkdir()
    with pytest.raises(InputError, match="is not a saved HF dataset"):
        load_split(tmp_path / "junk")


def test_json_string_columns_are_decoded() -> None:
    prompt = [{"role": "user", "content": "Привет"}]
    ds = Dataset.from_dict({"prompt": [json.dumps(prompt, ensure_ascii=False)],
                            "completion": [json.dumps([{"role": "assistant", "content": "Здравствуйте"}])],
                            "tools": [json.dumps([TOOL])]})
    out = prepare_sft_dataset(ds)
    assert out[0]["prompt"] == prompt and out[0]["tools"] == [TOOL]


def test_sft_shape_errors_name_row_and_fix() -> None:
    bad_role = Dataset.from_list([{"prompt": [{"role": "narrator", "content": "x"}],
                                   "completion": [{"role": "assistant", "content": "y"}]}])
    with pytest.raises(InputError, match="column 'prompt' row 0 message 0: .* is not a chat message"):
        prepare_sft_dataset(bad_role)
    bad_call = Dataset.from_list([{"prompt": [{"role": "user", "content": "x"}],
                                   "completion": [{"role": "assistant", "content": "",
                                                   "tool_calls": [{"name": "f", "arguments": "{}"}]}]}])
    with pytest.raises(InputError, match='must be {"type": "function", "function"'):
        prepare_sft_dataset(bad_call)
    with pytest.raises(InputError, match="column 'prompt' holds a string that is not JSON"):
        prepare_sft_dataset(Dataset.from_dict({"prompt": ["not json ["], "completion": ["[]"]}))
    with pytest.raises(InputError, match="expected a non-empty list of chat messages, got str 'hello'"):
        prepare_sft_dataset(Dataset.from_dict({"prompt": ['"hello"'], "completion": ["[]"]}))
    with pytest.raises(InputError, match="empty"):
        prepare_sft_dataset(Dataset.from_dict({"prompt": [], "completion": []}))


def test_inline_tools_into_system_turn() -> None:
    with_system = inline_tools([{"role": "system", "content": "Ты помощник."}, {"role": "user", "content": "?"}],
                               [TOOL])
    assert with_system[0]["content"].startswith("Ты помощник.\n\n# Tools")
    assert json.dumps(TOOL, ensure_ascii=False) in with_system[0]["content"] and len(with_system) == 2
    without = inline_tools([{"role": "user", "content": "?"}], [TOOL])
    assert without[0]["role"] == "system" and "<tools>" in without[0]["content"] and len(without) == 2
    assert inline_tools([{"role": "user", "content": "?"}], []) == [{"role": "user", "content": "?"}]


def test_grpo_null_reward_column_is_an_error() -> None:
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": "q"}], "ref_length": None, "rm_score": 1.0}])
    with pytest.raises(InputError, match=r"column 'ref_length' is null \(or NaN\) in 1 of 1 rows \(first: row 0\)"):
        prepare_grpo_dataset(ds, ["ref_length", "rm_score"])


def test_grpo_null_check_reads_every_row_not_a_sample() -> None:
    rows = [{"prompt": [{"role": "user", "content": f"q{i}"}], "ref_length": 10.0, "rm_score": 0.5}
            for i in range(600)]
    rows[517]["rm_score"] = None
    with pytest.raises(InputError, match=r"column 'rm_score' is null \(or NaN\) in 1 of 600 rows \(first: row 517\)"):
        prepare_grpo_dataset(Dataset.from_list(rows), ["ref_length", "rm_score"])
    rows[517]["rm_score"] = float("nan")
    with pytest.raises(InputError, match="in 1 of 600 rows"):
        prepare_grpo_dataset(Dataset.from_list(rows), ["ref_length", "rm_score"])


def test_grpo_keeps_the_experts_rows_and_says_how_many(capsys: pytest.CaptureFixture[str]) -> None:
    fc = {"prompt": [{"role": "user", "content": "Погода?"}], "expert": "fc", "target_type": "tool_call",
          "ground_truth": '{"calls": []}', "constraints": None}
    if_row = {"prompt": [{"role": "user", "content": "Опишите кота."}], "expert": "if", "target_type": None,
              "ground_truth": '{"constraints": []}', "constraints": '[{"id": "ru.punct.no_commas"}]'}
    general = {**fc, "expert": None, "target_type": None, "ground_truth": None}
    ds = Dataset.from_list([fc, if_row, fc, general, if_row])
    kept = prepare_grpo_dataset(ds, ["constraints"], expert="if")
    assert kept.num_rows == 2 and set(kept["expert"]) == {"if"}
    assert "GRPO data for expert 'if': 2 of 5 rows (dataset holds None=1, fc=2, if=2)" in capsys.readouterr().out
    assert prepare_grpo_dataset(ds, ["ground_truth", "target_type"], expert="fc").num_rows == 2
    assert prepare_grpo_dataset(ds, ["prompt"], expert="general").num_rows == 1  # rows without an expert
    with pytest.raises(InputError, match=r"no rows for expert 'if' \(it holds fc=2\)"):
        prepare_grpo_dataset(Dataset.from_list([fc, fc]), ["constraints"], expert="if")
