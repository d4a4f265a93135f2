"""Export validation against a real chat template.

An export can be valid JSON and still train the wrong thing: a prompt that the
template renders differently on its own than inside prompt+completion shifts
the loss mask; arguments stored as a JSON string inside a JSON string come out
as ``"{\\"city\\": ...}"``; Arrow struct unification quietly adds ``null`` keys
that a template then prints. Every row is rendered with the Qwen3 template
(:mod:`fabrika.schemas.template`, Apache-2.0) the way ``transformers`` renders
chat templates, and checked. Failures are listed per row, never raised.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable, Mapping

from pydantic import BaseModel, Field

from fabrika.schemas.template import ChatTemplate, load_template

_TOOL_CALL_RE = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)
# ChatML assistant turns; tool-call checks look only there (the system turn shows a placeholder call).
_ASSISTANT_RE = re.compile(r"<\|im_start\|>assistant\n(.*?)(?:<\|im_end\|>|$)", re.DOTALL)


def null_paths(value: Any, path: str = "") -> set[str]:
    """Paths of every dict key whose value is ``None`` (``prompt[1].tool_calls[0].id``)."""
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            sub = f"{path}.{k}" if path else str(k)
            if v is None:
                out.add(sub)
            else:
                out |= null_paths(v, sub)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out |= null_paths(v, f"{path}[{i}]")
    return out


def _double_encoded(rendered: str) -> list[str]:
    problems = []
    turns = _ASSISTANT_RE.findall(rendered) or [rendered]
    for block in (b for turn in turns for b in _TOOL_CALL_RE.findall(turn)):
        if '"{\\"' in block:
            problems.append(f"double-encoded arguments in tool call: {block[:120]!r}")
            continue
        try:
            call = json.loads(block)
        except json.JSONDecodeError as exc:
            problems.append(f"rendered tool call is not JSON ({exc.msg}): {block[:120]!r}")
            continue
        if not isinstance(call.get("arguments"), dict):
            problems.append(f"rendered tool call arguments are {type(call.get('arguments')).__name__}, not an object")
    return problems


def check_record(record: Mapping[str, Any], template: ChatTemplate,
                 expected: Mapping[str, Any] | None = None) -> list[str]:
    """Every problem with one exported record (empty list = valid).

    ``expected`` is the record as converted from the source row; a ``null`` key in
    ``record`` that ``expected`` does not have is a leak (Arrow unification).
    """
    problems: list[str] = []
    prompt = list(record.get("prompt") or [])
    completion = list(record.get("completion") or [])
    tools = list(record.get("tools") or [])
    if not prompt:
        problems.append("prompt is empty")
        return problems
    try:
        prompt_text = template.render(prompt, tools, add_generation_prompt=True)
        full_text = template.render(prompt + completion, tools) if completion else prompt_text
    except Exception as exc:  # noqa: BLE001 - a template error on one row is that row's failure
        return [f"template {template.name} failed to render: {type(exc).__name__}: {exc}"]
    if "completion" in record:
        if not completion:
            problems.append("completion is empty")
        elif not full_text.startswith(prompt_text):
            cut = next((i for i, (a, b) in enumerate(zip(prompt_text, full_text)) if a != b), len(full_text))
            problems.append(f"rendered prompt is not a prefix of prompt+completion (diverges at char {cut}: "
                            f"{prompt_text[cut:cut + 40]!r} vs {full_text[cut:cut + 40]!r})")
    problems += _double_encoded(full_text)
    if expected is not None:
        nested = {k: record.get(k) for k in ("prompt", "completion", "tools", "ground_truth") if k in record}
        want = {k: expected.get(k) for k in nested}
        leaked = sorted(null_paths(nested) - null_paths(want))
        if leaked:
            problems.append(f"null-valued keys the source did not have: {leaked[:10]}")
    return problems


class ValidationReport(BaseModel):
    """Result of validating an export; ``failures`` maps row id → problems."""

    template: str = Field(description="Name of the chat template used.")
    rows: int = Field(default=0, description="Rows checked.")
    failed: int = Field(default=0, description="Rows with at least one problem.")
    failures: dict[str, list[str]] = Field(default_factory=dict, description="Row id → problems (first 1000 rows).")

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def summary(self) -> str:
        head = f"{self.rows} rows rendered with {self.template}: {self.failed} failed"
        lines = [head] + [f"  {rid}: {'; '.join(p)}" for rid, p in list(self.failures.items())[:20]]
        return "\n".join(lines)


def validate_pairs(pairs: Iterable[tuple[Mapping[str, Any], Mapping[str, Any] | None]],
                   template: ChatTemplate | None = None, max_listed: int = 1000) -> ValidationReport:
    """Render and check each ``(exported record, record converted from the source row)`` pair."""
    template = template or load_template()
    report = ValidationReport(template=template.name)
    for i, (rec, want) in enumerate(pairs):
        rid = str(rec.get("id", i))
        problems = check_record(rec, template, want)
        report.rows += 1
        if problems:
            report.failed += 1
            if len(report.failures) < max_listed:
                report.failures[rid] = problems
    return report


def validate_records(records: Iterable[Mapping[str, Any]], template: ChatTemplate | None = None,
                     expected: Mapping[str, Mapping[str, Any]] | None = None,
                     max_listed: int = 1000) -> ValidationReport:
    """Render and check every record; ``expected`` maps id → record converted from the source row."""
    pairs = ((r, expected.get(str(r.get("id"))) if expected is not None else None) for r in records)
    return validate_pairs(pairs, template, max_listed)
