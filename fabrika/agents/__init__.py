"""Agents of the FC simulation: role prompts and each role's visibility rule.

:mod:`fabrika.agents.visibility` cuts a View per role (user, assistant, tool)
out of the episode state as pure functions and renders prompts from the View
only; :mod:`fabrika.agents.leaks` checks what the user must not be told;
:mod:`fabrika.agents.prompts` holds the RU/EN role prompts. Agents reach
a model only through ``fabrika.llm`` (the stage passes the rendered requests).
"""

from fabrika.agents.leaks import PlanLeak, user_facing_leaks
from fabrika.agents.visibility import (
    AssistantView,
    EpisodeState,
    ToolView,
    UserView,
    assistant_view,
    render_assistant_request,
    render_tool_prompt,
    render_user_prompt,
    tool_view,
    user_view,
)

__all__ = [
    "AssistantView",
    "EpisodeState",
    "PlanLeak",
    "ToolView",
    "UserView",
    "assistant_view",
    "render_assistant_request",
    "render_tool_prompt",
    "render_user_prompt",
    "tool_view",
    "user_facing_leaks",
    "user_view",
]
