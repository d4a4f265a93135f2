"""``Stage.calls_llm`` says the truth for every registered stage (under ``executor: ray`` it decides
whether a per-item stage runs on worker actors), and the check catches wrong declarations."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabrika.pipeline import registry
from fabrika.pipeline.stage import STAGES
from fabrika.testing.llm_use import declaration_problem, llm_references
from tests.pipeline import llm_use_stages as t


def _fabrika_stages() -> dict[str, type]:
    registry.load_modules()
    return {k: c for k, c in STAGES.items() if c.__module__.startswith("fabrika.")}


def test_every_registered_stage_declares_calls_llm_truthfully():
    stages = _fabrika_stages()
    problems = [p for c in stages.values() if (p := declaration_problem(c))]
    assert not problems, "\n".join(problems)
    on_workers = {k for k, c in stages.items() if not c.global_stage and not c.calls_llm}
    # not vacuous: the LLM-free per-item stages of every area are found and declared
    assert {"if.consistency", "filter.language", "filter.length", "filter.decontam", "fc.samples",
            "general.samples", "general.rm", "if.samples", "if.queries"} <= on_workers
    assert {"if.responses", "fc.dialogues", "general.teacher", "if.verifiers"}.isdisjoint(on_workers)


@pytest.mark.parametrize("cls", [t.DirectLiar, t.HelperFunctionLiar, t.HelperClassLiar, t.OtherModuleLiar,
                                 t.GetattrLiar, t.InheritedLiar])
def test_a_stage_that_reaches_the_llm_cannot_declare_false(cls):
    problem = declaration_problem(cls)
    assert problem is not None and "declares calls_llm = False but reaches" in problem, cls
    assert llm_references(cls)


def test_the_evidence_names_the_line_that_touches_the_llm():
    refs = llm_references(t.OtherModuleLiar)
    assert refs == [f"tests.pipeline.llm_use_helpers:{_line('tests/pipeline/llm_use_helpers.py', 'return ctx.llm')}"]


def test_an_llm_free_stage_that_keeps_the_default_is_caught():
    problem = declaration_problem(t.CpuOnlyButDefault)
    assert problem is not None and "would stay in the driver" in problem


def test_an_llm_free_stage_declared_false_passes():
    assert llm_references(t.CpuOnlyDeclared) == [] and declaration_problem(t.CpuOnlyDeclared) is None


def _line(path: str, needle: str) -> int:
    lines = (Path(__file__).resolve().parents[2] / path).read_text(encoding="utf-8").splitlines()
    return next(i for i, ln in enumerate(lines, 1) if needle in ln)
