"""An MCP server over stdio that refuses schema-valid calls it cannot serve (the fc.live_calls tests).

``get_forecast`` knows three cities: any other city is a tool error (``ToolError``: ``isError`` with its message), and more than
7 days raises too; ``book_table`` has a required argument, so a call without it is a JSON-RPC
validation error; ``shutdown_now`` kills the server. Every call is appended to the file named by ``LIVE_CALLS_LOG`` (when set).
"""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("строгий сервис")
KNOWN = {"Москва", "Казань", "Самара"}


def _log(name: str, arguments: dict[str, object]) -> None:
    path = os.environ.get("LIVE_CALLS_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "\n")


@server.tool()
def get_forecast(city: str, days: int = 3) -> str:
    """Прогноз погоды в городе на несколько дней вперёд."""
    _log("get_forecast", {"city": city, "days": days})
    if city not in KNOWN:
        raise ToolError(f"неизвестный город: {city}")
    if days > 7:
        raise ToolError("прогноз не дальше чем на 7 дней")
    return f"{city}: солнечно"


@server.tool(name="book-table")
def book_table(restaurant: str, guests: int) -> str:
    """Бронирование столика в ресторане."""
    _log("book-table", {"restaurant": restaurant, "guests": guests})
    return f"забронировано: {restaurant}, {guests}"


@server.tool()
def shutdown_now() -> str:
    """Stops the server process (a server that dies in the middle of a run)."""
    os._exit(3)


if __name__ == "__main__":
    server.run()
