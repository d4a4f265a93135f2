"""The FC generator stages' own prompts (topic labels and expansion, tool description tiers), one catalogue per language.

The texts are ``prompts_ru.yaml`` / ``prompts_en.yaml`` beside this module
(:class:`fabrika.prompts.PromptCatalogue`, ``str.format``); the agents' role prompts are
:mod:`fabrika.agents.prompts`. ``fc.topics`` renders ``label`` and ``expand``,
``fc.tools_import`` renders ``tiers``; each declares them in ``prompt_templates``, so an
edited template redoes only its stage.
"""

from __future__ import annotations

from pathlib import Path

from fabrika.prompts import PromptCatalogue

HERE = Path(__file__).resolve().parent
CATALOGUE = PromptCatalogue("fc", {"ru": HERE / "prompts_ru.yaml", "en": HERE / "prompts_en.yaml"}, syntax="format")
