"""NLU + policy over Whisper-style final transcripts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from num2words import num2words

from rejoinder.app.assistant import SupportAssistant
from rejoinder.app.nlu import AFTERNOON, MORNING, analyze
from rejoinder.app.policy import DialogState, ToolCall, plan

from demo_phones import AISHA, MARIA

L = lambda oid: [ToolCall("lookup_order", {"order_id": oid})]  # noqa: E731
R = lambda aid, day, time: [ToolCall("reschedule_appointment", {"appointment_id": aid, "day": day, "time": time})]  # noqa: E731

# (caller phone, earlier turns, final transcript, expected intent, expected tool calls)
CASES = [
    (MARIA, [], "Hi, I'd like to check on my order. It's 4217.", "lookup_order", L("4217")),
    (MARIA, [], "Four, two, one, seven.", "lookup_order", L("4217")),
    (MARIA, [], "4 2 1 7", "lookup_order", L("4217")),
    (MARIA, [], "4, 2, 1, 7.", "lookup_order", L("4217")),
    (MARIA, [], "order number four two one seven", "lookup_order", L("4217")),
    (MARIA, [], "It's forty-two seventeen.", "lookup_order", L("4217")),
    (MARIA, [], "Five, oh, three, one.", "lookup_order", L("5031")),
    (MARIA, [], "three three double eight", "lookup_order", L("3388")),
    (MARIA, [], "My order is 4217. Sorry, I mean 5031.", "lookup_order", L("5031")),
    (MARIA, [], "Where's order 5031? Actually, make that 4217.", "lookup_order", L("4217")),
    (MARIA, [], "It's 4217, not 5031.", "lookup_order", L("4217")),
    (None, [], "I'd like to check on my order.", "ask_order_id", []),
    (None, ["Where is my package?"], "Four two one seven.", "lookup_order", L("4217")),
    (None, ["Where is my package?"], "It's 42.", "lookup_order", L("42")),  # the tool reports unknown
    (MARIA, ["Check order 4217 please."], "No, the other order.", "other_order", L("5031")),
    (MARIA, ["Check order 4217 please."], "Not that one.", "other_order", L("5031")),
    (MARIA, ["What about 5031?"], "The other one.", "other_order", L("4217")),
    (MARIA, [], "Can you move my appointment to Friday? Wait, no, Thursday afternoon.",
     "reschedule_appointment", R(101, "Thursday", "14:00")),
    (MARIA, [], "Could you reschedule my haircut to Wednesday morning?", "reschedule_appointment",
     R(101, "Wednesday", "10:00")),
    (MARIA, [], "Move my appointment to Friday at 3 p.m., no wait, 4.", "reschedule_appointment",
     R(101, "Friday", "16:00")),
    (MARIA, [], "Can I change my appointment to Thursday at two thirty?", "reschedule_appointment",
     R(101, "Thursday", "14:30")),
    (MARIA, [], "Push my appointment to 3 PM.", "reschedule_appointment", R(101, "Tuesday", "15:00")),
    (MARIA, [], "Move my appointment to Monday at 9, actually 11 in the morning.",
     "reschedule_appointment", R(101, "Monday", "11:00")),
    # Friday 14:00 is taken by 103 → the earliest free afternoon hour
    (MARIA, [], "Move my haircut to Friday afternoon.", "reschedule_appointment", R(101, "Friday", "15:00")),
    (MARIA, [], "I need to move my appointment.", "ask_slot", []),
    (AISHA, [], "Move my appointment to Wednesday at 11.", "ask_which_appointment", []),
    (AISHA, [], "Move my consultation to Wednesday at 11.", "reschedule_appointment", R(106, "Wednesday", "11:00")),
    (MARIA, [], "Cancel my appointment.", "confirm_cancel", []),
    (MARIA, ["Cancel my appointment."], "Yes.", "confirm", [ToolCall("cancel_appointment", {"appointment_id": 101})]),
    (MARIA, ["Cancel my appointment."], "Yes, please cancel it.", "confirm",
     [ToolCall("cancel_appointment", {"appointment_id": 101})]),
    (MARIA, ["Cancel my appointment."], "No, keep it.", "decline", []),
    (MARIA, ["Cancel my appointment."], "Hmm.", "repeat_confirmation", []),
    (MARIA, [], "Can you cancel my order?", "unsupported", []),
    (MARIA, [], "What appointments do I have?", "list_appointments",
     [ToolCall("list_appointments", {"customer_phone": MARIA})]),
    (None, [], "Cancel my appointment.", "ask_phone", []),
    (MARIA, [], "Thank you, bye.", "goodbye", []),
    (MARIA, [], "Hello.", "greet", []),
    (MARIA, [], "Thanks!", "thanks", []),
    (MARIA, [], "Yes.", "ack", []),
    (MARIA, [], "Purple monkey dishwasher.", "unknown", []),
]


@pytest.mark.parametrize("phone,earlier,text,intent,calls", CASES, ids=[c[2][:40] for c in CASES])
def test_plan_transcript_variants(conn, phone, earlier, text, intent, calls):
    a = SupportAssistant(conn, phone)
    for t in earlier:
        p = a.plan(t)
        a.compose(p, [a.execute(c) for c in p.tool_calls])
    p = a.plan(text)
    assert (p.intent, p.tool_calls) == (intent, calls)
    assert p.needs_confirmation == (intent in ("confirm_cancel", "repeat_confirmation"))


def test_cancel_is_never_planned_without_confirmation(conn):
    a = SupportAssistant(conn, MARIA)
    p = a.plan("Cancel my haircut right now, yes, I'm sure.")
    assert p.tool_calls == [] and p.needs_confirmation
    assert p.state.pending == ToolCall("cancel_appointment", {"appointment_id": 101})


def test_unknown_order_asks_again_then_succeeds(conn):
    a = SupportAssistant(conn, None)
    p = a.plan("Can you check order 9999?")
    r = a.compose(p, [a.execute(c) for c in p.tool_calls])
    assert "couldn't find order 9999" in r.text and "order number again" in r.text
    assert a.state.awaiting == "order_id"
    p = a.plan("Three, three, eight, eight.")
    assert p.tool_calls == L("3388")


def test_plan_is_pure():
    s = DialogState()
    before = repr(s)
    p = plan("I want to check my order", s)
    assert repr(s) == before and p.state.awaiting == "order_id"


def test_preview_does_not_commit(conn):
    a = SupportAssistant(conn, MARIA)
    a.plan("Cancel my appointment.", commit=False)
    assert a.state.pending is None and len(a.history) == 0


def test_nlu_days_times_markers():
    u = analyze("Can you move my appointment to Friday? Wait, no, Thursday afternoon.")
    assert u.days == ("Friday", "Thursday") and u.times == (AFTERNOON,) and u.corrected
    assert analyze("Tuesday morning").times == (MORNING,)
    assert analyze("Good morning!").times == ()
    assert analyze("at noon on Monday").times == ("12:00",)
    assert analyze("at 14:00").times == ("14:00",)
    assert analyze("at 9:30 am").times == ("09:30",)
    assert analyze("my number is 555-0101").phones == ("5550101",)
    assert analyze("not Friday, Thursday").days == ("Thursday",)
    assert analyze("not that one").numbers == ()


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=80))
def test_nlu_and_policy_never_raise(text):
    analyze(text)
    plan(text, DialogState(caller_phone="+15550101", customer_name="Maria Lopez"))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=4, max_size=4), st.sampled_from([" ", ", ", "-", ". "]))
def test_spoken_digits_roundtrip(digits, sep):
    words = sep.join(num2words(d) for d in digits)
    oid = "".join(map(str, digits))
    assert analyze(f"My order number is {words}.").order_ids == (oid,)
