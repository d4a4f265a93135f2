"""The sim IF responders: deterministic, Russian, correct when they mean to be, wrong when they mean to be."""

from __future__ import annotations

import random

from fabrika.generators.instruct import prompts
from fabrika.generators.instruct import sim_families as fams
from fabrika.generators.instruct.sim_responders import sim_backtranslate, sim_expand, sim_respond, sim_verifier
from fabrika.llm.sim import find_sim_responder
from fabrika.sandbox import SandboxConfig, SandboxPool
from fabrika.textutil.answers import is_failure, parse_constraint_list, parse_verifier_answer
from fabrika.textutil.lang import check_russian


def test_registered_for_every_role():
    for tag in ("if.expand", "if.verifiers", "if.backtranslate", "if.respond", "if.judge.quality",
                "if.judge.similarity"):
        assert find_sim_responder(tag) is not None, tag


def test_expand_is_deterministic_mostly_russian_and_sometimes_bad():
    req = prompts.expand_request(["Весь ответ должен быть написан строчными буквами."], 50, sample_index=0,
                                 model=None, temperature=1.0)
    a, b = sim_expand(req, random.Random(1)), sim_expand(req, random.Random(1))
    assert a == b
    items = parse_constraint_list(a)
    bad = [i for i in items if check_russian(i) is not None]
    assert len(items) == 50 and 0 < len(bad) < 15


def test_good_sim_verifiers_pass_their_own_cases_in_the_sandbox():
    kinds = {"good": 0, "bad": 0}
    with SandboxPool(SandboxConfig(workers=1, timeout_s=0.5)) as pool:
        for fam in fams.FAMILIES:
            text = fam.render(fam.sample(random.Random(fam.name)))
            for k in range(4):
                req = prompts.verifier_request(text, sample_index=k, model=None, temperature=0.8)
                v = parse_verifier_answer(sim_verifier(req, random.Random(f"{fam.name}{k}")))
                if is_failure(v):
                    kinds["bad"] += 1
                    continue
                if fams.recognise_code(v.code) and v.code not in {fams.wrong_code_for(*fams.recognise(text))}:
                    verdicts = pool.run_sync(v.code, [c.response for c in v.test_cases])
                    assert [x.passed for x in verdicts] == [c.label for c in v.test_cases], (text, v.code)
                    kinds["good"] += 1
    assert kinds["good"] > 20 and kinds["bad"] > 0


def test_backtranslate_reads_code_back_and_respond_follows_constraints():
    for fam in fams.FAMILIES:
        params = fam.sample(random.Random(3))
        code = fams.code_for(fam, params, 2)
        req = prompts.backtranslate_request(code, model=None)
        answers = {sim_backtranslate(req, random.Random(s)) for s in range(20)}
        assert fam.render(params) in answers  # mostly faithful, sometimes about something else
        messages = [{"role": "system", "content": fam.render(params)}, {"role": "user", "content": "Расскажи о чае."}]
        ns: dict = {}
        exec(code, ns)  # noqa: S102 - sim-written code of our own, not LLM output
        ok = sum(ns["evaluate"](str(sim_respond(prompts.respond_request(messages, sample_index=0, model=None,
                                                                          temperature=0.7, max_tokens=None),
                                                  random.Random(s)))) for s in range(30))
        assert ok >= 15, fam.name
