"""Load exported datasets and check their shape before any training starts.

The export writes HF ``datasets`` with ``save_to_disk``. Nested columns
(``prompt``, ``completion``, ``tools``, ``ground_truth`` …) may be stored with
the ``datasets.Json`` feature (decoded to Python objects on access) or as JSON
strings (fabrika's row convention); both are accepted and decoded here. A wrong
shape is an :class:`~fabrika.errors.InputError` naming the column, the row and
the fix — raised before a model is even loaded, never mid-training.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa

from fabrika.errors import InputError

if TYPE_CHECKING:
    from datasets import Dataset

ROLES = frozenset({"system", "user", "assistant", "tool"})
# How many rows are checked message by message (columns are always checked in full).
CHECK_ROWS = 256


def load_split(path: str | Path, split: str = "train") -> Dataset:
    """``load_from_disk`` that also accepts a ``DatasetDict`` (takes ``split``)."""
    from datasets import DatasetDict, load_from_disk

    path = Path(path)
    if not path.exists():
        raise InputError(f"dataset_path {str(path)!r} does not exist; point it at a `fabrika export` output directory")
    try:
        ds = load_from_disk(str(path))
    except Exception as exc:  # datasets raises FileNotFoundError / ValueError variants
        raise InputError(f"dataset_path {str(path)!r} is not a saved HF dataset ({exc}); "
                         "write it with `Dataset.save_to_disk`") from exc
    if isinstance(ds, DatasetDict):
        if split not in ds:
            raise InputError(f"dataset_path {str(path)!r} has splits {sorted(ds)}, not {split!r}; set dataset_split")
        ds = ds[split]
    return ds


def decode_json_columns(ds: Dataset, columns: list[str]) -> Dataset:
    """Turn JSON-string columns into ``datasets.Json`` columns (decoded lists/dicts)."""
    from datasets import Json, Value

    todo = [c for c in columns if c in ds.column_names and ds.features[c] == Value("string")]
    if not todo:
        return ds
    features = ds.features.copy()
    for c in todo:
        features[c] = Json()

    def decode(row: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for c in todo:
            value = row[c]
            try:
                out[c] = json.loads(value) if isinstance(value, str) else value
            except json.JSONDecodeError as exc:
                raise InputError(f"column {c!r} holds a string that is not JSON ({value[:80]!r}); "
                                 "store nested columns as JSON or with the datasets.Json feature") from exc
        return out

    return ds.map(decode, features=features, desc="decoding JSON columns")


def _check_messages(value: Any, column: str, row: int, *, need_assistant: bool = False) -> None:
    fix = "each message must be a dict with a `role` in system/user/assistant/tool"
    if not isinstance(value, list) or not value:
        raise InputError(f"column {column!r} row {row}: expected a non-empty list of chat messages, "
                         f"got {type(value).__name__} {str(value)[:80]!r}; {fix}")
    for i, msg in enumerate(value):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            raise InputError(f"column {column!r} row {row} message {i}: {str(msg)[:80]!r} is not a chat message; {fix}")
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or "name" not in fn:
                raise InputError(f"column {column!r} row {row} message {i}: tool call {str(call)[:80]!r} must be "
                                 '{"type": "function", "function": {"name": ..., "arguments": ...}}')
    if need_assistant and not any(m["role"] == "assistant" for m in value):
        raise InputError(f"column {column!r} row {row}: no assistant message; the completion must hold the target "
                         "assistant turn")


def require_columns(ds: Dataset, columns: list[str], what: str) -> None:
    """Raise naming every missing column at once."""
    missing = [c for c in columns if c not in ds.column_names]
    if missing:
        raise InputError(f"{what} dataset lacks column(s) {missing} (has {ds.column_names}); "
                         f"re-export it with `fabrika export` in the {what} format")


def prepare_sft_dataset(ds: Dataset) -> Dataset:
    """Check and decode a conversational prompt–completion SFT dataset."""
    require_columns(ds, ["prompt", "completion"], "SFT")
    if len(ds) == 0:
        raise InputError("SFT dataset is empty; export at least one row")
    ds = decode_json_columns(ds, ["prompt", "completion", "tools"])
    for i, row in enumerate(ds.select(range(min(CHECK_ROWS, len(ds))))):
        _check_messages(row["prompt"], "prompt", i)
        _check_messages(row["completion"], "completion", i, need_assistant=True)
        tools = row.get("tools")
        if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
            raise InputError(f"column 'tools' row {i}: expected a list of OpenAI tool dicts, got {str(tools)[:80]!r}")
    return ds


def rows_over_length(ds: Dataset, tokenizer: Any, max_length: int | None,
                     chat_template: str | None = None) -> tuple[int, int]:
    """``(rows longer than max_length, longest)`` in tokens of the rendered prompt+completion (tools included).

    TRL truncates such rows silently — a completion past the limit is cut, or fully
    masked and dropped — so the SFT script prints the count before training.
    """
    if max_length is None:
        return 0, 0
    over, longest = 0, 0
    for row in ds:
        messages = list(row["prompt"]) + list(row["completion"])
        ids = tokenizer.apply_chat_template(messages, tools=row.get("tools") or None, chat_template=chat_template,
                                            tokenize=True, return_dict=True)["input_ids"]
        longest = max(longest, len(ids))
        over += len(ids) > max_length
    return over, longest


def tools_block(tools: list[dict[str, Any]]) -> str:
    """The tool list as text (Qwen's wording), for prompts rendered without a per-row ``tools`` argument."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{lines}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
            "\n</tool_call>")


def inline_tools(prompt: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Put the row's tools into its system message.

    TRL's GRPOTrainer renders every prompt with one trainer-wide ``tools`` list,
    so per-row tools would be invisible to the policy; we write them into the
    system turn instead (the same text Qwen's template would produce).
    """
    if not tools:
        return prompt
    block = tools_block(tools)
    if prompt and prompt[0].get("role") == "system":
        head = dict(prompt[0])
        head["content"] = f"{head.get('content') or ''}\n\n{block}".lstrip()
        return [head, *prompt[1:]]
    return [{"role": "system", "content": block}, *prompt]


def select_expert(ds: Dataset, expert: str | None, log: Callable[[str], None] | None = print) -> Dataset:
    """The rows of ``expert`` when the export has an ``expert`` column (one GRPO export holds every expert).

    Rows without an expert (``generic.*`` chat stages) belong to ``general``. Prints what was
    kept; no row for the expert is an :class:`InputError` naming what the dataset holds.
    """
    if expert is None or "expert" not in ds.column_names:
        return ds
    import pyarrow.compute as pc

    if getattr(ds, "_indices", None) is not None:
        ds = ds.flatten_indices()
    col = ds.data.column("expert")
    counts = {str(k): int(v) for k, v in
              ((d["values"], d["counts"]) for d in pc.value_counts(col).to_pylist())}
    wanted = {expert, "None"} if expert == "general" else {expert}
    n = sum(v for k, v in counts.items() if k in wanted)
    held = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
    if n == 0:
        raise InputError(f"GRPO dataset has no rows for expert {expert!r} (it holds {held}); export the "
                         f"{expert} stages (export.stages.grpo) or pick another --expert")
    if log is not None:
        log(f"GRPO data for expert {expert!r}: {n} of {len(ds)} rows (dataset holds {held})")
    if n == len(ds):
        return ds
    mask = pc.is_in(pc.fill_null(col, "None"), value_set=pa.array(sorted(wanted)))
    # flatten: the checks below read ds.data (the Arrow table), which a bare select() leaves unfiltered
    return ds.select([i for i, keep in enumerate(mask.to_pylist()) if keep]).flatten_indices()


def check_no_nulls(ds: Dataset, columns: list[str]) -> None:
    """Every row of every ``columns`` is set (Arrow null counts: reads the whole column, cheaply)."""
    import pyarrow.compute as pc

    if getattr(ds, "_indices", None) is not None:
        ds = ds.flatten_indices()
    for col in columns:
        arr = ds.data.column(col)
        nulls = arr.null_count
        if pa.types.is_floating(arr.type):
            nulls += int(pc.sum(pc.is_nan(pc.fill_null(arr, 0.0))).as_py() or 0)
        if nulls:
            first = next(i for i, v in enumerate(arr.to_pylist()) if v is None or v != v)
            raise InputError(f"column {col!r} is null (or NaN) in {nulls} of {len(ds)} rows (first: row {first}); "
                             "the reward needs it for every row — fix the export or drop those rows")


def prepare_grpo_dataset(ds: Dataset, required: list[str], expert: str | None = None,
                         log: Callable[[str], None] | None = print) -> Dataset:
    """Check and decode a GRPO dataset; ``required`` are the expert's reward columns.

    With ``expert``, only that expert's rows are kept (see :func:`select_expert`); the
    required columns are then checked on *every* row, not a sample.
    """
    require_columns(ds, ["prompt", *required], "GRPO")
    if len(ds) == 0:
        raise InputError("GRPO dataset is empty; export at least one row")
    ds = select_expert(ds, expert, log)
    check_no_nulls(ds, required)
    ds = decode_json_columns(ds, ["prompt", "tools", "ground_truth", "constraints"])
    for i, row in enumerate(ds.select(range(min(CHECK_ROWS, len(ds))))):
        _check_messages(row["prompt"], "prompt", i)
        if row["prompt"][-1]["role"] == "assistant":
            raise InputError(f"column 'prompt' row {i} ends with an assistant turn; a GRPO prompt must end where "
                             "the policy answers (drop the target turn)")
    if "tools" in ds.column_names:
        from datasets import Json

        features = ds.features.copy()
        features["prompt"] = Json()
        ds = ds.map(lambda r: {"prompt": inline_tools(r["prompt"], r["tools"])}, features=features,
                    desc="inlining tools")
    return ds
