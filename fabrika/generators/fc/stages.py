"""Import point of the FC pipeline: registers every FC stage kind and the sim responders.

Listed in ``fabrika.pipeline.registry.STAGE_MODULES``, so every pipeline can use ``fc.tools``,
``fc.tools_dedup``, ``fc.plans``, ``fc.dialogues``, ``fc.samples``,
``fc.irrelevance`` and ``fc.answer_judge`` (plus the ``fc_targets`` gate group).
"""

from __future__ import annotations

from fabrika.generators.fc import answer_judge, dialogues, irrelevance, plans, samples, sim_responders, tools

__all__ = ["answer_judge", "dialogues", "irrelevance", "plans", "samples", "sim_responders", "tools"]
