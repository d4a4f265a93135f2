"""Tool.to_openai is dumped once per tool object, and a copy never reads another tool's dump."""

from __future__ import annotations

from fabrika.schemas.tools import Tool


def _tool(name: str, description: str = "d") -> Tool:
    return Tool.model_validate({"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})


def test_wire_is_the_dump_and_is_reused() -> None:
    t = _tool("weather")
    wire = t.to_openai()
    assert wire == t.model_dump(mode="json")
    assert t.to_openai() is wire


def test_a_copy_with_a_new_function_gets_its_own_dump() -> None:
    t = _tool("weather")
    t.to_openai()
    c = t.model_copy(update={"function": t.function.model_copy(update={"name": "forecast"})})
    assert c.to_openai()["function"]["name"] == "forecast"
    assert t.to_openai()["function"]["name"] == "weather"


def test_equality_ignores_the_memo() -> None:
    t, u = _tool("weather"), _tool("weather")
    t.to_openai()
    assert t == u
    assert t != _tool("weather", "other description")


def test_the_memo_never_keeps_a_tool_alive() -> None:
    import gc
    import weakref

    from fabrika.schemas import tools as tools_module

    t = _tool("short_lived")
    t.to_openai()
    key, ref = id(t), weakref.ref(t)
    assert key in tools_module._WIRE
    del t
    gc.collect()
    assert ref() is None and key not in tools_module._WIRE
