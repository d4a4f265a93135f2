"""Import point of the FC pipeline: registers every FC stage kind and the sim responders.

List ``fabrika.generators.fc.stages`` in a pipeline's ``plugins`` (or in
``fabrika.pipeline.registry.STAGE_MODULES``) to use ``fc.tools``,
``fc.tools_dedup``, ``fc.plans``, ``fc.dialogues``, ``fc.samples`` and
``fc.irrelevance``.
"""

from __future__ import annotations

from fabrika.generators.fc import dialogues, irrelevance, plans, samples, sim_responders, tools

__all__ = ["dialogues", "irrelevance", "plans", "samples", "sim_responders", "tools"]
