"""SupportAssistant: execute/compensate, compose (first clauses, LLM requests), history and
LLM tool choice."""

from __future__ import annotations

import json

import pytest
from demo_phones import AISHA, JAMES, MARIA

from rejoinder.app.assistant import SYSTEM_PROMPT, SupportAssistant
from rejoinder.app.db import db_state
from rejoinder.app.history import ChatHistory
from rejoinder.app.policy import ToolCall
from rejoinder.ports import ChatMessage, LLMRequest


class FakeLLM:
    """Yields a canned output and records the requests."""

    model_name = "fake"

    def __init__(self, output: str = "") -> None:
        self.output = output
        self.requests: list[LLMRequest] = []

    async def stream(self, request: LLMRequest):
        self.requests.append(request)
        for i in range(0, len(self.output), 5):
            yield self.output[i : i + 5]


def turn(a: SupportAssistant, text: str):
    p = a.plan(text)
    r = a.compose(p, [a.execute(c) for c in p.tool_calls])
    a.heard(r.text)
    return p, r


def test_greeting_personalised(conn):
    assert SupportAssistant(conn, MARIA).greeting.startswith("Hi Maria")
    assert SupportAssistant(conn, "+19999999").greeting.startswith("Thanks for calling")


@pytest.mark.parametrize(
    "text,first,tail_has",
    [
        ("Check order 4217.", "Order 4217 has shipped,", "Wednesday, December 9"),
        ("Check order 5031.", "Order 5031 is still being processed,", "Monday, December 14"),
        ("Check order 3388.", "Order 3388 was delivered on Thursday, December 3,", "coffee grinder"),
        ("Check order 6120.", "Order 6120 was cancelled,", "desk lamp"),
        ("Check order 9999.", "I couldn't find order 9999.", "order number again"),
    ],
)
def test_compose_order_first_clauses(conn, text, first, tail_has):
    _, r = turn(SupportAssistant(conn, MARIA), text)
    assert r.first_clause == first and tail_has in r.tail
    assert r.llm_request is None  # no LLM given


def test_compose_reschedule_and_cancel(conn):
    a = SupportAssistant(conn, MARIA)
    _, r = turn(a, "Can you move my appointment to Friday? Wait, no, Thursday afternoon.")
    assert r.first_clause == "Done, your haircut is now Thursday at 2 PM."
    _, r = turn(a, "Cancel my appointment.")
    assert r.first_clause == "Just to confirm, shall I cancel your haircut on Thursday at 2 PM?"
    _, r = turn(a, "Yes.")
    assert r.first_clause == "Done, your haircut on Thursday at 2 PM is cancelled."
    _, r = turn(a, "Thank you, bye.")
    assert r.end_call


def test_taken_slot_offers_nearest_and_yes_books_it(conn):
    a = SupportAssistant(conn, MARIA)
    p, r = turn(a, "Move my haircut to Friday at 2 PM.")
    assert r.first_clause == "Sorry, Friday at 2 PM is already taken." and "3 PM" in r.tail
    p, r = turn(a, "Yes.")
    assert p.tool_calls == [ToolCall("reschedule_appointment", {"appointment_id": 101, "day": "Friday", "time": "15:00"})]
    assert db_state(conn)["appointments"][101]["slot"] == "2026-12-11T15:00"


def test_closed_hours_asks_for_another_time(conn):
    a = SupportAssistant(conn, MARIA)
    _, r = turn(a, "Move my haircut to Saturday at 10 am.")
    assert "outside our hours" in r.first_clause and "other time" in r.tail
    p, _ = turn(a, "Monday at 11 then.")
    assert p.tool_calls[0].args == {"appointment_id": 101, "day": "Monday", "time": "11:00"}


def test_execute_and_compensate(conn):
    a = SupportAssistant(conn, MARIA)
    before = db_state(conn)
    call = ToolCall("reschedule_appointment", {"appointment_id": 101, "day": "Monday", "time": "13:00"})
    res = a.execute(call)
    assert "error" not in res
    a.compensate(call, res)
    assert db_state(conn) == before
    assert "error" in a.execute(ToolCall("nope", {}))
    with pytest.raises(ValueError):
        a.compensate(ToolCall("cancel_appointment", {"appointment_id": 101}), {"status": "cancelled"})


def test_llm_request_continues_first_clause_with_facts(conn):
    a = SupportAssistant(conn, MARIA, llm=FakeLLM())
    _, r1 = turn(a, "Check order 4217.")
    req = r1.llm_request
    assert req is not None and req.prefix == r1.first_clause
    assert req.stop == ("\n",) and req.max_tokens <= 48 and req.json_schema is None
    assert req.messages[0] == ChatMessage("system", SYSTEM_PROMPT)
    assert req.messages[-1].role == "system" and "December 9" in req.messages[-1].content
    assert req.messages[-2] == ChatMessage("user", "Check order 4217.")
    _, r2 = turn(a, "No, the other order.")
    assert r2.llm_request.messages[0] == req.messages[0]  # stable system prompt → KV reuse
    assert "5031" in r2.llm_request.messages[-1].content
    _, r3 = turn(a, "Cancel my appointment.")
    assert r3.llm_request is None  # a confirmation question is spoken verbatim


def test_history_stores_only_what_was_heard():
    h = ChatHistory(max_turns=2)
    h.add_user("Hello.")
    h.add_assistant_heard("")
    h.add_user("Check order 4217.")
    h.add_assistant_heard("Order 4217 has")  # caller barged in
    assert h.messages("S") == (
        ChatMessage("system", "S"),
        ChatMessage("user", "Hello. Check order 4217."),
        ChatMessage("assistant", "Order 4217 has"),
    )
    for i in range(5):
        h.add_user(f"u{i}")
        h.add_assistant_heard(f"a{i}")
    msgs = h.messages("S")
    assert [m.content for m in msgs[1:]] == ["u3", "a3", "u4", "a4"]
    h.add_user("u5")
    assert h.messages("S")[1].role == "user"
    with pytest.raises(ValueError):
        ChatHistory(0)


async def test_plan_with_llm_accepts_valid_grounded_choice(conn):
    llm = FakeLLM(json.dumps({"tool": "lookup_order", "args": {"order_id": "4217"}}))
    a = SupportAssistant(conn, MARIA)
    p = await a.plan_with_llm("Hi, I'd like to check on my order. It's 4217.", llm)
    assert p.source == "llm" and p.tool_calls == [ToolCall("lookup_order", {"order_id": "4217"})]
    req = llm.requests[0]
    assert req.json_schema is not None and "anyOf" in req.json_schema


@pytest.mark.parametrize(
    "output",
    [
        "not json",
        json.dumps({"tool": "launch_rocket", "args": {}}),
        json.dumps({"tool": "lookup_order", "args": {}}),  # pydantic: missing order_id
        json.dumps({"tool": "lookup_order", "args": {"order_id": "5031"}}),  # not what was said
        json.dumps({"tool": "none"}),
    ],
)
async def test_plan_with_llm_falls_back_to_rules(conn, output):
    a = SupportAssistant(conn, MARIA, llm=FakeLLM(output))
    p = await a.plan_with_llm("Four, two, one, seven.")
    assert p.source == "rules" and p.tool_calls == [ToolCall("lookup_order", {"order_id": "4217"})]


async def test_plan_with_llm_cancel_still_needs_confirmation(conn):
    llm = FakeLLM(json.dumps({"tool": "cancel_appointment", "args": {"appointment_id": 102}}))
    a = SupportAssistant(conn, JAMES, llm=llm)
    p = await a.plan_with_llm("Please cancel my consultation.")
    assert p.source == "llm" and p.tool_calls == [] and p.needs_confirmation
    p, _ = turn(a, "Yes.")
    assert p.tool_calls == [ToolCall("cancel_appointment", {"appointment_id": 102})]


async def test_plan_with_llm_rejects_other_customers_appointment(conn):
    llm = FakeLLM(json.dumps({"tool": "reschedule_appointment", "args": {"appointment_id": 102, "day": "Monday", "time": "10:00"}}))
    a = SupportAssistant(conn, AISHA, llm=llm)
    p = await a.plan_with_llm("Move my consultation to Monday at 10 am.")
    assert p.source == "rules" and p.tool_calls[0].args["appointment_id"] == 106


async def test_plan_with_llm_needs_a_model(conn):
    with pytest.raises(ValueError):
        await SupportAssistant(conn, MARIA).plan_with_llm("hi")


@pytest.fixture(scope="module")
def smollm2():
    try:
        from rejoinder.adapters.llama_llm import LlamaLLM
    except ImportError as exc:  # pragma: no cover - depends on another module's progress
        pytest.skip(f"rejoinder.adapters.llama_llm not importable: {exc}")
    return LlamaLLM()


async def test_plan_with_real_smollm2(conn, smollm2):
    """The real 135M model either picks a valid grounded call or the rules take over — the
    outcome is the same correct tool call either way."""
    a = SupportAssistant(conn, MARIA, llm=smollm2)
    p = await a.plan_with_llm("Hi, I'd like to check on my order. It's 4217.")
    assert p.tool_calls == [ToolCall("lookup_order", {"order_id": "4217"})]
    assert p.source in ("llm", "rules")
    r = a.compose(p, [a.execute(c) for c in p.tool_calls])
    assert r.first_clause == "Order 4217 has shipped,"
    cont = "".join([d async for d in smollm2.stream(r.llm_request)])
    assert isinstance(cont, str) and "\n" not in cont.strip()


def test_grounded_rejects_changed_facts_and_echoed_instructions():
    from rejoinder.app.assistant import grounded
    facts = "order 4217 status shipped, arrives Wednesday December 9"
    assert grounded(" It should arrive on Wednesday, December 9.", facts)
    assert not grounded(" It arrived on Friday.", facts)
    assert not grounded(" It will cost $12.", facts)
    assert not grounded(" Continue the assistant's reply with at most one short sentence.", facts)
    assert not grounded("   ", facts)
