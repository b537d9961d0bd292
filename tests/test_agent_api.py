"""The public agent API: tools from plain functions, agents from Python or YAML, clear errors."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Literal

import pytest
from pydantic import BeforeValidator, Field

from rejoinder import Agent, CallContext, ConfigError, ToolError, load_agent, tool
from rejoinder.tools import Tool

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "bakery" / "agent.yaml"


def test_schema_from_type_hints_and_docstring():
    def book(ctx: CallContext, day: str, people: int = 2,
             seating: Literal["inside", "terrace"] = "inside",
             note: Annotated[str, Field(max_length=40)] = "") -> dict:
        """Book a table.

        Args:
            day: the weekday, e.g. "Friday".
            people: how many guests.
        """
        return {}

    t = Tool(book)
    assert (t.name, t.description, t.reversible, t.context_param) == ("book", "Book a table.", False, "ctx")
    p = t.schema.parameters
    assert p["required"] == ["day"] and p["additionalProperties"] is False
    assert p["properties"]["day"] == {"type": "string", "description": 'the weekday, e.g. "Friday".'}
    assert p["properties"]["people"] == {"type": "integer", "default": 2, "description": "how many guests."}
    assert p["properties"]["seating"]["enum"] == ["inside", "terrace"]
    assert p["properties"]["note"]["maxLength"] == 40
    assert "ctx" not in p["properties"]  # filled by the runtime, never by the LLM


_digits = BeforeValidator(lambda v: "".join(c for c in str(v) if c.isdigit()))


def test_constrained_hints_reach_the_schema_and_normalise_before_validation():
    def lookup(order_id: Annotated[str, Field(pattern=r"^[0-9]{4}$"), _digits],
               kind: Annotated[str, Field(description="what to look up")] = "order") -> dict:
        """Look up an order."""
        return {}

    t = Tool(lookup)
    props = t.schema.parameters["properties"]
    assert props["order_id"] == {"type": "string", "pattern": "^[0-9]{4}$"}  # no docstring arg
    assert props["kind"]["description"] == "what to look up"  # the hint's own description kept
    assert t.parse({"order_id": "#4 2 1 7"}) == {"order_id": "4217", "kind": "order"}
    with pytest.raises(ToolError, match="invalid argument 'order_id'.*pattern"):
        t.parse({"order_id": "42171"})


async def test_sync_and_async_tools_get_the_call_context_and_validated_arguments():
    seen = []

    @tool(reversible=True)
    def sync_tool(ctx: CallContext, n: int) -> dict:
        """Sync."""
        seen.append((ctx.caller_id, n))
        return {"double": 2 * n}

    @tool
    async def async_tool(n: int) -> int:
        """Async."""
        await asyncio.sleep(0)
        return n + 1

    ctx = CallContext("c1", "+1555")
    assert await sync_tool.run(ctx, {"n": "21"}) == {"double": 42}  # coerced to int
    assert await async_tool.run(ctx, {"n": 1}) == 2
    assert seen == [("+1555", 21)]
    with pytest.raises(ToolError, match="invalid argument 'n'"):
        await sync_tool.run(ctx, {"n": "many"})
    with pytest.raises(ToolError, match="invalid argument 'extra'"):
        await sync_tool.run(ctx, {"n": 1, "extra": 2})


async def test_tool_timeout_and_exceptions():
    @tool(timeout_s=0.05)
    async def slow() -> None:
        """Slow."""
        await asyncio.sleep(1)

    @tool
    def broken() -> None:
        """Broken."""
        raise KeyError("nope")

    with pytest.raises(TimeoutError):
        await slow.run(CallContext("c"), {})
    with pytest.raises(ToolError, match="KeyError"):
        await broken.run(CallContext("c"), {})


def test_bad_tool_and_agent_definitions_are_clear_errors():
    def untyped(x):
        """No hints."""
    with pytest.raises(ConfigError, match="parameter 'x' has no type hint"):
        Tool(untyped)

    def star(*args: int) -> None:
        """Star."""
    with pytest.raises(ConfigError, match=r"\*args/\*\*kwargs"):
        Tool(star)

    def f(x: int) -> None:
        """F."""
    with pytest.raises(ConfigError, match="only a reversible tool can be compensated"):
        Tool(f, compensate=lambda **k: None)
    with pytest.raises(ConfigError, match="needs instructions"):
        Agent("  ")
    with pytest.raises(ConfigError, match="two tools are named 'f'"):
        Agent("hi", tools=[f, f])
    with pytest.raises(ConfigError, match="llm settings"):
        Agent("hi", llm={"max_steps": 0})


def test_example_agent_loads_from_yaml():
    agent = load_agent(str(EXAMPLE))
    assert agent.name == "bakery" and agent.source == str(EXAMPLE)
    assert set(agent.tools) == {"opening_hours", "reserve_cake"}
    assert agent.tools["opening_hours"].reversible and agent.tools["opening_hours"].timeout_s == 1
    assert not agent.tools["reserve_cake"].reversible  # the @tool's own setting
    assert agent.tools["reserve_cake"].context_param == "ctx"
    assert agent.stt_prompt() == "Crumb and Co, sourdough, croissant."
    assert agent.llm.temperature == 0 and agent.llm.max_tokens == 60
    d = agent.describe()
    assert d["flow"] == "llm" and [t["name"] for t in d["tools"]] == ["opening_hours", "reserve_cake"]


def test_bundled_and_module_specs():
    support = load_agent(None)
    assert support.name == "support" and support.source == "support"
    assert load_agent("rejoinder.app.support:agent") is support or load_agent(
        "rejoinder.app.support:agent").name == "support"


@pytest.mark.parametrize("text,match", [
    ("instructions: hi\ntools: [nowhere:fn]\n", "cannot import module 'nowhere'"),
    ("instructions: hi\ntools: [json:no_such]\n", "has no attribute 'no_such'"),
    ("instructions: hi\ntools: [json]\n", "is not a 'module:attribute' reference"),
    ("instructions: hi\ncolour: blue\n", "field 'colour'"),
    ("tools: []\n", "field 'instructions'"),
    ("instructions: hi\nllm: {temperature: 9}\n", "field 'llm.temperature'"),
    ("- just\n- a list\n", "a YAML mapping"),
    ("instructions: [unclosed\n", "cannot read the agent file"),
])
def test_bad_agent_files_name_file_field_and_fix(tmp_path, text, match):
    f = tmp_path / "agent.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match) as err:
        load_agent(str(f))
    assert str(f) in str(err.value)


def test_bad_specs():
    with pytest.raises(ConfigError, match="no such agent file"):
        load_agent("missing.yaml")
    with pytest.raises(ConfigError, match="one of support"):
        load_agent("gibberish")
    with pytest.raises(ConfigError, match="not a rejoinder.Agent"):
        load_agent("json:dumps")
