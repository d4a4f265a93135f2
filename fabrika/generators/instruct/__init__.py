"""The AutoIF-style Russian instruction-following pipeline.

Stages (each a resumable stage of ``fabrika run``; thresholds only in gates):

``if.expand``         seeds (library + user files) → LLM-written candidate constraints
``if.dedup``          exact + MinHash near-duplicate removal (global)
``if.verifiers``      K ``evaluate(response)`` functions with 3 test cases each
``if.consistency``    sandbox cross-validation scores (annotates ``if.verifiers``) — gate ``consistency``
``if.backtranslation`` function → instruction similarity (annotates ``if.verifiers``) — gate ``backtranslation``
``if.queries``        constraint × queries, user- or system-level placement
``if.responses``      K answers, verified by every verifier + the trusted library — gate ``if_response``
``if.samples``        SFT samples (expert ``if``)
``if.grpo``           GRPO prompts with ``ground_truth`` for the IF reward

Multi-constraint prompts and adversarial dialogues (modules ``multi``, ``multi_responses``, ``multiturn``):

``if.multi.prompts``    2–6 library + surviving LLM-written constraints per prompt (conflict table,
                        verifier contradiction on stored cases, LLM conflict judge)
``if.multi.responses``  K answers, a strict and a loose verdict per constraint — gate ``if_multi``
``if.multi.samples``    SFT samples; ``if.multi.grpo`` GRPO prompts (per-constraint verifier code)
``if.dialogues``        ru/en chats where the user sets rules and then pressures the assistant; rubrics
``if.dialogue.samples`` the assistant turns that pass every rubric; ``if.dialogue.grpo`` one prompt per turn

Gate groups (thresholds in ``filters:``; ``fabrika refilter --set`` changes them with no LLM call):

``consistency``      ``min_unique_functions`` 3 (``n_unique_functions``), ``min_unique_cases`` 10
                     (``n_unique_cases``), ``min_function_accuracy`` 0.8 (``max_function_accuracy`` for
                     constraints; ``max_failed_verifier_accuracy`` for responses: a response must pass
                     every verifier at or above the threshold)
``backtranslation``  ``min_similarity`` 0.6 (``bt_min_similarity``; calibrated for e5)
``if_response``      ``require_library_pass`` (``if_library_pass``), ``min_quality`` 0 = off (``if_quality_score``)

These score columns are carried from constraints to prompts, responses and samples,
so the gates act again on the dataset tables. ``python -m fabrika.generators.instruct.report
RUN_DIR`` prints the funnel. Importing this package registers the stages, the gate
groups and the ``sim`` responders.
"""

from __future__ import annotations

from fabrika.generators.instruct import (  # noqa: F401 - register stages and gate groups
    backtranslation,
    expand,
    queries,
    responses,
    verifiers,
)
from fabrika.generators.instruct.sim_responders import register_sim_responders

register_sim_responders()
