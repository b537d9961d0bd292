"""``LLMRequest.allowed_tools`` on the wire of an OpenAI-compatible server: every tool is sent
where the restriction fits ``tool_choice`` (a required call with one allowed tool, OpenAI's
``allowed_tools`` choice); otherwise, by default, only the allowed tools are sent."""

from __future__ import annotations

import pytest

from rejoinder.adapters.openai_llm import OpenAICompatLLM
from rejoinder.errors import ConfigError
from rejoinder.ports import ChatMessage, LLMRequest, ToolSchema

T = tuple(ToolSchema(n, n, {"type": "object", "properties": {}}) for n in ("a", "b", "c"))
ASK = (ChatMessage("user", "hi"),)


def sent(llm, **kw) -> tuple[list[str], object]:
    body = llm.payload(LLMRequest(ASK, tools=T, **kw))
    return [t["function"]["name"] for t in body["tools"]], body["tool_choice"]


def test_filter_mode_sends_only_the_allowed_tools_unless_tool_choice_can_say_it():
    llm = OpenAICompatLLM("http://h/v1", "m")
    assert sent(llm) == (["a", "b", "c"], "auto")
    assert sent(llm, allowed_tools=("a", "b")) == (["a", "b"], "auto")
    assert sent(llm, allowed_tools=("a", "b"), tool_choice="required") == (["a", "b"], "required")
    # one allowed tool and a required call: every server knows the named choice, all tools go
    assert sent(llm, allowed_tools=("b",), tool_choice="required") == (
        ["a", "b", "c"], {"type": "function", "function": {"name": "b"}})
    assert sent(llm, allowed_tools=(), tool_choice="auto") == (["a", "b", "c"], "none")
    assert sent(llm, allowed_tools=("a",), tool_choice="none") == (["a", "b", "c"], "none")


def test_tool_choice_mode_sends_every_tool_with_openais_allowed_tools():
    llm = OpenAICompatLLM("http://h/v1", "m", allowed_tools="tool_choice")
    assert sent(llm, allowed_tools=("a", "c"), tool_choice="required") == (
        ["a", "b", "c"], {"type": "allowed_tools", "allowed_tools": {
            "mode": "required", "tools": [{"type": "function", "function": {"name": "a"}},
                                          {"type": "function", "function": {"name": "c"}}]}})
    with pytest.raises(ConfigError, match="allowed_tools must be 'filter' or 'tool_choice'"):
        OpenAICompatLLM("http://h/v1", "m", allowed_tools="grammar")
