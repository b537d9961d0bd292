"""``LLMRequest.allowed_tools`` on the real SmolLM2 model: every tool is described in the prompt,
but under the grammar the model cannot call one outside the allowed set (a conversation step's
tools), in required and in lazy mode."""

from __future__ import annotations

import pytest

from rejoinder.ports import ChatMessage, LLMRequest, ToolCall

from tool_cases import SUPPORT, TOOLS, assert_valid_call


async def _calls(llm, req: LLMRequest) -> list[ToolCall]:
    return [d async for d in llm.stream(req) if isinstance(d, ToolCall)]


ORDER_ASKS = ("Check order 4217 please.", "Where is my order 5031?", "What's the status of order 1234?")


def _fresh(llm) -> None:
    """Start from an empty context: a prompt re-used from whatever earlier tests left in the KV
    cache is evaluated in other batch splits, and a near-tie of two names may flip."""
    with llm._lock:
        llm.cache.activate(None)
        llm._llm.reset()


async def test_unrestricted_the_model_picks_lookup_order(llama_llm):
    """The baseline the restriction changes: asked about an order, with every tool callable."""
    _fresh(llama_llm)
    for say in ORDER_ASKS:
        req = LLMRequest((SUPPORT, ChatMessage("user", say)), tools=TOOLS, tool_choice="required",
                         temperature=0.0)
        assert [c.name for c in await _calls(llama_llm, req)] == ["lookup_order"], say


async def test_required_call_stays_within_the_allowed_tools(llama_llm):
    """The same order requests with lookup_order described but not allowed: the call is one of
    the allowed tools, with schema-valid arguments; the prompt still lists every tool."""
    allowed = ("list_appointments", "reschedule_appointment")
    for say in ORDER_ASKS:
        req = LLMRequest((SUPPORT, ChatMessage("user", say)), tools=TOOLS, tool_choice="required",
                         temperature=0.0, allowed_tools=allowed)
        assert "lookup_order" in llama_llm.engine.prompt(req)
        calls = await _calls(llama_llm, req)
        assert calls and all(c.name in allowed for c in calls), (say, calls)
        for c in calls:
            assert_valid_call(c)


async def test_one_allowed_tool_is_the_call(llama_llm):
    req = LLMRequest((SUPPORT, ChatMessage("user", "Check order 4217 please.")), tools=TOOLS,
                     tool_choice="required", temperature=0.0, allowed_tools=("list_appointments",))
    assert [c.name for c in await _calls(llama_llm, req)] == ["list_appointments"]


async def test_a_call_the_model_decides_on_is_held_to_the_allowed_tools(llama_llm):
    """``tool_choice: auto`` with the model deciding whether to call (eager mode: the decision is
    sampled after the opener): unrestricted it calls lookup_order for an order request; with
    only list_appointments allowed, any call it writes is list_appointments."""
    llama_llm.tool_mode = "eager"
    try:
        req = LLMRequest((SUPPORT, ChatMessage("user", "Check order 4217 please.")), tools=TOOLS,
                         temperature=0.0, max_tokens=24)
        assert [c.name for c in await _calls(llama_llm, req)] == ["lookup_order"]
        for say in ORDER_ASKS:
            held = await _calls(llama_llm, LLMRequest(
                (SUPPORT, ChatMessage("user", say)), tools=TOOLS, temperature=0.0, max_tokens=24,
                allowed_tools=("list_appointments",)))
            assert all(c.name == "list_appointments" for c in held), (say, held)
    finally:
        llama_llm.tool_mode = "lazy"


def test_allowed_tools_must_name_declared_tools():
    with pytest.raises(ValueError, match="undeclared tools: cancel_everything"):
        LLMRequest((SUPPORT,), tools=TOOLS, allowed_tools=("cancel_everything",))
    req = LLMRequest((SUPPORT,), tools=TOOLS, allowed_tools=("list_appointments",))
    assert [t.name for t in req.callable_tools()] == ["list_appointments"]
    assert LLMRequest((SUPPORT,), tools=TOOLS).callable_tools() == TOOLS
