"""History windowing: what an LLM request carries from a long call."""

from __future__ import annotations

from rejoinder.agent import Agent, LLMSettings
from rejoinder.clock import VirtualClock
from rejoinder.conversation import Conversation, window
from rejoinder.events import EventBus
from rejoinder.ports import ChatMessage, ToolCall
from rejoinder.stages import Stamper
from rejoinder.tools import CallContext


def call_history(turns: int, tool_turns: set[int]) -> list[ChatMessage]:
    h = [ChatMessage("assistant", "Hi! How can I help?")]  # the greeting
    for i in range(1, turns + 1):
        h.append(ChatMessage("user", f"question {i}"))
        if i in tool_turns:
            c = ToolCall(f"call_{i}", "lookup_order", {"order_id": str(4000 + i)})
            h.append(ChatMessage("assistant", "", tool_calls=(c,)))
            h.append(ChatMessage("tool", f'{{"order_id": "{4000 + i}", "status": "shipped"}}',
                                 name="lookup_order", tool_call_id=c.id))
        h.append(ChatMessage("assistant", f"answer {i}"))
    return h


def users(msgs: list[ChatMessage]) -> list[str]:
    return [m.content for m in msgs if m.role == "user"]


def test_the_window_drops_turns_in_chunks() -> None:
    """6 to 11 caller turns are kept: the start moves once every 6 turns (one KV shift per 6
    requests; the others only append)."""
    kept = [len(users(window(call_history(n, set()), 6))) for n in range(1, 31)]
    assert kept[:6] == [1, 2, 3, 4, 5, 6]
    assert kept[6:] == [7, 8, 9, 10, 11, 6] * 4
    starts = [users(window(call_history(n, set()), 6))[0] for n in range(12, 24)]
    assert len(set(starts)) == 2  # the window's first turn changed once in 12 requests


def test_last_turns_plus_every_tool_turn_are_kept() -> None:
    h = call_history(30, {2, 9, 19})
    kept = window(h, 6, keep_tool_turns=True)  # 30 turns: 6 + (30 − 6) % 6 = the last 6
    assert users(kept) == ["question 2", "question 9", "question 19"] + [f"question {i}" for i in range(25, 31)]
    # a kept tool turn is whole: the call, its result (the facts) and the answer
    tools = [m for m in kept if m.role == "tool"]
    assert [t.tool_call_id for t in tools] == ["call_2", "call_9", "call_19"]
    assert kept[:4] == h[h.index(ChatMessage("user", "question 2")):][:4]
    assert all(m.content != "Hi! How can I help?" for m in kept)  # the greeting left with turn 1
    assert window(h, 6) == h[h.index(ChatMessage("user", "question 25")):]  # the default
    assert users(window(call_history(33, set()), 6)) == [f"question {i}" for i in range(25, 34)]


def test_short_calls_and_zero_keep_everything() -> None:
    h = call_history(4, {1})
    assert window(h, 6) == h and window(call_history(30, set()), 0) == call_history(30, set())


def test_each_new_turn_drops_at_most_one_span() -> None:
    """Consecutive requests differ by one contiguous dropped span (what the KV shift handles)."""
    h = call_history(40, {3, 4, 12, 20, 33})
    for n in range(7, 41):
        before = window(h[:h.index(ChatMessage("assistant", f"answer {n - 1}")) + 1], 6)
        after = window(h[:h.index(ChatMessage("assistant", f"answer {n}")) + 1], 6)
        p = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), len(before))
        rest = before[p:]
        # after the common prefix, `after` continues with a suffix of `before` (one span cut)
        k = next(j for j in range(len(rest) + 1) if before[p + j:] == after[p:p + len(before) - p - j])
        assert before[p + k:] == after[p:p + len(before) - p - k]
        assert k <= 6 * 4  # one span (a chunk of 6 turns) at most per request


def test_the_default_request_windows_the_reference_way() -> None:
    assert LLMSettings().history_turns == 6 and not LLMSettings().keep_tool_turns
    agent = Agent("You help.")
    conv = Conversation(agent, CallContext("c1"), Stamper("c1", VirtualClock(), EventBus()))
    conv.history = call_history(20, {5})
    req = conv.request([ChatMessage("user", "question 21")], final_step=False)
    assert req.messages[0].role == "system"
    # 20 turns in the history: 6 + 14 % 6 = the last 8 of them, then the pending question
    assert users(req.messages) == [f"question {i}" for i in range(13, 22)]
    assert "Hi! How can I help?" not in [m.content for m in req.messages]
