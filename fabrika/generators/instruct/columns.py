"""Row contracts of the IF stages: the columns each reads and writes (``fabrika.pipeline.columns``).

One place for the column declarations the IF stages share, so a column has one type
wherever it travels (constraint rows → prompt rows → responses → samples).
"""

from __future__ import annotations

from typing import Any

from fabrika.pipeline.columns import SAMPLE_COLUMNS, Column, columns
from fabrika.schemas import Message
from fabrika.schemas.instruct import CaseSupport, IFConstraintRef, PromptConstraint, RunnableVerifier, ScoredFunction, VerifierAnswer

LibraryPairs = list[tuple[str, dict[str, Any]]]

# -- constraint rows (if.expand, if.dedup, if.verifiers) ----------------------------------------
TEXT = Column("text", str, doc="the constraint as an instruction")
CONSTRAINT = (
    TEXT,
    Column("lang", str, required=False),
    Column("source", str, doc="'library', 'llm' or 'user'"),
    Column("parent_id", str, required=False, doc="the seed a candidate was written from"),
    Column("family", str, required=False),
    Column("params", dict[str, Any], required=False, doc="library parameters"),
)
CONSTRAINT_READS = tuple(c if c.name == "text" else c.optional() for c in CONSTRAINT)
VERIFIER_ANSWERS = Column("verifiers", list[VerifierAnswer], doc="parsed verifier answers with their test cases")

# -- if.consistency / if.backtranslation scores --------------------------------------------------
FUNCTIONS = Column("functions", list[ScoredFunction], doc="cross-validated verifiers (if.consistency)")
CONSISTENCY = (
    FUNCTIONS,
    Column("function_accuracies", list[float]),
    Column("case_support", list[CaseSupport]),
    *(Column(n, int) for n in ("n_functions", "n_unique_functions", "n_broken_functions", "n_unique_cases",
                               "n_conflicting_cases", "n_supported_cases", "n_supported_true", "n_supported_false")),
    Column("max_function_accuracy", float),
)
BACKTRANSLATION = (
    Column("bt_instructions", list[dict[str, Any]]),
    Column("bt_rejections", list[dict[str, Any]]),
    Column("bt_similarities", list[float]),
    Column("bt_min_similarity", float, required=False),
    Column("bt_mean_similarity", float, required=False),
    Column("bt_backend", str),
)
#: Scores copied from the constraint row onto prompts, responses and samples (CARRIED_SCORES).
CARRIED = (
    Column("n_unique_functions", int, required=False),
    Column("n_unique_cases", int, required=False),
    Column("max_function_accuracy", float, required=False),
    Column("function_accuracies", list[float], required=False),
    Column("bt_min_similarity", float, required=False),
    Column("bt_mean_similarity", float, required=False),
)

# -- prompt rows (if.queries, if.multi.prompts) ---------------------------------------------------
MESSAGES = Column("messages", list[Message], doc="the prompt as chat messages")
PROMPT_CONSTRAINTS = Column("constraints", list[PromptConstraint], doc="every instruction of the prompt")
LIBRARY = Column("library_constraints", LibraryPairs, required=False, doc="[library id, params] pairs")
RUNNABLE = Column("verifiers", list[RunnableVerifier], doc="runnable verifiers with their accuracy")
PROMPT = (
    Column("constraint_id", str),
    Column("query_id", str),
    Column("query", str),
    Column("placement", str, doc="'system' or 'user'"),
    MESSAGES,
    PROMPT_CONSTRAINTS,
    LIBRARY,
)
PROMPT_READS = (MESSAGES, *(c.optional() for c in PROMPT if c.name != "messages"))
MULTI_PROMPT = (
    Column("slot_id", str),
    Column("constraint_id", str, required=False),
    Column("constraint_text", str, required=False),
    Column("query_id", str),
    Column("query", str),
    Column("placement", str),
    Column("lang", str),
    MESSAGES,
    PROMPT_CONSTRAINTS,
    LIBRARY,
    Column("n_constraints", int),
    Column("n_llm_constraints", int),
    Column("n_constraints_wanted", int, required=False),
    Column("witness", str, required=False, doc="a composed joint answer that passes every verifier of the composed "
           "members (None: library members only, which the conflict table decides)"),
)

# -- responses ----------------------------------------------------------------------------------
RESPONSE = Column("response", str, doc="the answer (reasoning stripped)")
RESPONSE_SCORES = (
    Column("max_failed_verifier_accuracy", float, required=False),
    Column("n_verifiers_passed", int, required=False),
    Column("if_library_pass", bool, required=False),
    Column("if_quality_score", float, required=False),
)
RESPONSES = columns(
    RESPONSE, Column("sample_index", int), Column("prompt_id", str), *(c.optional() for c in PROMPT), CARRIED,
    Column("verifier_results", list[dict[str, Any]]), Column("library_results", list[bool]), RESPONSE_SCORES,
    Column("judge_note", str, required=False),
)
MULTI_SCORES = (
    Column("n_passed", int), Column("n_passed_loose", int), Column("if_multi_all_pass", bool),
    Column("if_multi_all_pass_loose", bool), Column("failed_constraints", list[Any]),
    Column("failed_constraints_loose", list[Any]), Column("if_quality_score", float, required=False),
)
CONSTRAINT_RESULTS = Column("constraint_results", list[dict[str, Any]], doc="per-constraint strict/loose verdicts")
MULTI_RESPONSES = columns(
    RESPONSE, Column("sample_index", int), Column("prompt_id", str),
    *(c.optional() for c in MULTI_PROMPT if c.name not in ("constraint_id", "constraint_text", "n_constraints_wanted", "witness")),
    CONSTRAINT_RESULTS, MULTI_SCORES,
)

# -- teacher RM columns (rm.teacher_scores on the prompt table) ---------------------------------------
TEACHER = (
    Column("teacher_rm_mean", float, required=False),
    Column("teacher_rm_k", int, required=False),
    Column("rm_id", str, required=False),
)

# -- dialogues ----------------------------------------------------------------------------------
TURNS = Column("turns", list[dict[str, Any]], doc="per assistant turn: tactic, verdicts, quality")
DIALOGUE = (
    Column("lang", str),
    Column("persona", str),
    Column("topic", str),
    Column("rules", list[IFConstraintRef]),
    Column("rubrics", list[str]),
    Column("rubrics_dropped", list[dict[str, Any]], required=False),
    MESSAGES,
    TURNS,
    Column("n_turns", int),
    Column("n_passing_turns", int),
    Column("n_rubrics", int),
    Column("stop_reason", str, required=False),
)

# -- samples ------------------------------------------------------------------------------------
SAMPLES = columns(SAMPLE_COLUMNS, Column("placement", str, required=False), CARRIED, RESPONSE_SCORES)
GRPO = columns(SAMPLE_COLUMNS, Column("placement", str, required=False), TEACHER, CARRIED)
MULTI_SAMPLES = columns(SAMPLE_COLUMNS, Column("placement", str, required=False), CONSTRAINT_RESULTS,
                        Column("n_constraints", int), Column("n_llm_constraints", int), MULTI_SCORES)
MULTI_GRPO = columns(SAMPLE_COLUMNS, Column("placement", str, required=False), Column("n_constraints", int),
                     Column("n_llm_constraints", int), TEACHER)
DIALOGUE_SAMPLES = columns(SAMPLE_COLUMNS, Column("dialogue_id", str), Column("turn", int), Column("tactic", str),
                           Column("failed_rubrics", list[Any]), Column("failed_rules", list[Any]),
                           Column("n_rubrics", int))
DIALOGUE_GRPO = columns(SAMPLE_COLUMNS, Column("turn", int), Column("tactic", str), Column("n_rubrics", int),
                        Column("teacher_passed", bool, required=False), Column("judge_quality", float, required=False),
                        TEACHER)

#: The constraint table a prompt builder reads: text plus if.consistency's scores.
CONSISTENCY_HINT = "an if.consistency stage (scorer) on the same input"
