"""A tiny MCP server over stdio for the fc.tools_import test (two pages of tools/list)."""

from __future__ import annotations

from typing import Literal

from mcp.server.mcpserver import MCPServer

server = MCPServer("погодный сервис")


@server.tool()
def get_forecast(city: str, days: int = 3, units: Literal["metric", "imperial"] = "metric") -> str:
    """Прогноз погоды в городе на несколько дней вперёд: температура, осадки и ветер."""
    return "солнечно"


@server.tool()
def air_quality(city: str) -> str:
    """Индекс качества воздуха в городе сейчас и его оценка словами."""
    return "хорошо"


if __name__ == "__main__":
    server.run()
