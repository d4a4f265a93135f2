"""Import point of the FC pipeline: importing it registers the FC stage kinds, gate groups and sim responders.

Each stage module registers its own kind, gate group and (where it has one) sim
responder when imported; this module only imports them, and is listed in
``fabrika.pipeline.registry.STAGE_MODULES``. ``fabrika stages`` lists the kinds.
"""

from __future__ import annotations

from fabrika.generators.fc import (
    answer_judge,
    dialogues,
    irrelevance,
    live_calls,
    plans,
    samples,
    sim_responders,
    target_judge,
    tools,
)

__all__ = ["answer_judge", "dialogues", "irrelevance", "live_calls", "plans", "samples", "sim_responders",
           "target_judge", "tools"]
