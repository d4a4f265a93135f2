"""Evaluation: an eval set from request logs, judge calibration, FC/IF scoring of a model, failure labels.

============  ===============================================================
module        owns
============  ===============================================================
normalize     masking the variable spans of a prompt (template vs values)
sampling      the template-aware sampler and the random / max-min / tag baselines
metrics       Dist. (mean pairwise TF-IDF distance) and JS distances to the pool
tags          rule-set InsTag-like tags; ``tagging`` is the LLM tagging stage
synthlog      the synthetic request logs (gateway and template-dominated) with ground-truth templates
agreement     Cohen's κ, bootstrap intervals, confusion matrices
judge         SBS judge schemes, prompts and verdict parsing; ``calibrate`` runs them
fc_cases      BFCL-format files and fabrika FC samples as eval cases; ``fc_eval`` scores them
bfcl_checker  BFCL's AST checker semantics (``bfcl_types``: Java/JS values; ``bfcl_data``: items;
              ``bfcl_score``: the record) for ``eval fc --checker bfcl``
if_eval       IFEval-style strict/loose scoring with the constraint library
label         the failure taxonomy and the LLM labeller
runstore      resumable eval directories (results.jsonl, settings, lock, atomic report)
answers       reasoning-block stripping and robust JSON reading of model answers
============  ===============================================================

The CLI is :mod:`fabrika.cli.eval_cmd` (``fabrika eval …``); see ``docs/EVAL.md``.
"""
