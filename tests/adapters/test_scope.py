"""A request no tool serves (:mod:`rejoinder.adapters._scope`): after the tool gate says talk,
the request-or-talk question, on the real SmolLM2-135M model with the reference support agent
(scores are deterministic). The callers' words are written for these tests: none is from a
suite, the module's probe or its examples."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rejoinder.adapters._scope import REQUEST_THRESHOLD
from rejoinder.agent import Agent
from rejoinder.app.support import agent as support
from rejoinder.errors import ConfigError
from rejoinder.ports import ChatMessage, LLMRequest, ToolCall, ToolDecision

GREETING = "Hi Tom, thanks for calling Maple and Company. How can I help?"
OPENERS = ("I'm sorry, I can only help with ", "Sorry, I can only help with ",
           "I'm afraid I can only help with ")


@pytest.fixture
def gate_llm(llama_llm):
    llama_llm.tool_mode = "gate"
    yield llama_llm
    llama_llm.tool_mode = "lazy"


def _req(say: str, scope: str | None = support.llm.scope) -> LLMRequest:
    return LLMRequest((ChatMessage("system", support.instructions),
                       ChatMessage("assistant", GREETING), ChatMessage("user", say)),
                      tools=tuple(t.schema for t in support.tools.values()), temperature=0.0,
                      max_tokens=40, talk_examples=tuple(support.llm.talk_examples),
                      scope=scope or "")


async def _run(llm, req: LLMRequest) -> tuple[ToolDecision, str]:
    out = [d async for d in llm.stream(req)]
    assert not any(isinstance(x, ToolCall) for x in out), out
    assert isinstance(out[0], ToolDecision)
    return out[0], "".join(x for x in out if isinstance(x, str))


async def test_a_request_no_tool_serves_is_answered_with_the_agents_scope(gate_llm):
    """The gate finds no tool; the request label leads talk by the threshold or more, and the
    reply opens with "… I can only help with", the LLM writing the scope from the note. With
    no scope declared the question is not asked and the reply is the free one."""
    decision, text = await _run(gate_llm, _req("Could you book me a train ticket to Boston?"))
    assert decision.chosen is None and decision.unserved
    assert decision.request_margin >= REQUEST_THRESHOLD
    assert text.startswith(OPENERS) and text.endswith("."), text
    assert "orders" in text and "appointments" in text, text
    record = decision.as_dict()
    assert record["unserved"] is True
    assert record["request_margin"] == round(decision.request_margin, 3)
    bare, free = await _run(gate_llm, _req("Could you book me a train ticket to Boston?",
                                           scope=None))
    assert bare.request_margin is None and not bare.unserved
    assert "request_margin" not in bare.as_dict()
    assert bare.scores == pytest.approx(decision.scores)  # the gate decided the same
    assert not free.startswith(OPENERS), free


async def test_small_talk_stays_talk(gate_llm):
    """Small talk is asked too, scores under the threshold and gets the free reply."""
    decision, text = await _run(gate_llm, _req("Oh nice, good to hear."))
    assert decision.chosen is None and decision.request_margin is not None
    assert decision.request_margin < REQUEST_THRESHOLD and not decision.unserved
    assert text.strip() and not text.startswith(OPENERS), text


async def test_prefill_primes_the_request_question_while_the_caller_speaks(gate_llm):
    """With a scope, ``prefill`` also evaluates the request question's query up to the
    caller's words (its own KV state, shared by every conversation, as the gate's is): a second
    conversation's prefill then evaluates its own prompt only, as one without a scope does;
    the decision equals an unprimed one."""
    import asyncio

    empty = _req("")  # the agent's words this test alone uses: neither query is held yet
    empty = replace(empty, messages=(empty.messages[0], ChatMessage(
        "assistant", "Maple and Company, Tom speaking, what can I do for you this afternoon?"),
        empty.messages[2]))

    async def prefill(key: str, scope: str | None = support.llm.scope) -> int:
        return await asyncio.wrap_future(gate_llm.prefill(replace(empty, scope=scope or "",
                                                                  cache_key=key)))

    first = await prefill("S1")  # both questions' queries and the conversation's prompt
    conversation_only = await prefill("S0", scope=None)
    assert first > conversation_only > 0
    assert await prefill("S2") == conversation_only  # the request question's query is held
    assert await prefill("S1") == 0
    say = "Could you book me a train ticket to Boston?"
    asked = replace(empty, messages=(*empty.messages[:2], ChatMessage("user", say)))
    primed, _ = await _run(gate_llm, replace(asked, cache_key="S1"))
    for key in ("S0", "S1", "S2"):
        gate_llm.forget(key)
    fresh, _ = await _run(gate_llm, asked)
    assert primed.unserved
    assert primed.request_margin == pytest.approx(fresh.request_margin, abs=0.05)


def test_a_scope_must_say_something():
    with pytest.raises(ConfigError, match="scope"):
        Agent("You help.", llm={"scope": ""})
