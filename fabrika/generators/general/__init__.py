"""General-chat expert data: prompt pool → teacher answers (L0) → RM scores → SFT and GRPO rows.

==================  =============================================================
``general.prompts`` the user's prompt pool, normalised to messages (+ template clusters)
``general.teacher`` K teacher answers per prompt, lengths, L0 (truncated answers excluded)
``general.rm``      RM scores of the teacher answers (annotates general.teacher)
``general.samples`` SFT rows: prompt → scored teacher answer (gates pick best / floor / band)
``general.grpo``    GRPO prompt rows with ``ref_length``, ``rm_id``, ``teacher_rm_mean``
==================  =============================================================

Thresholds live in the ``filters.general`` gate group (:class:`rows.GeneralGate`).
"""

from __future__ import annotations

from fabrika.generators.general import prompts, rm, rows, sim_responders, teacher  # noqa: F401 - registration
