"""Task success over table-driven mini dialogues: every tool call and the final database state
must match. The suite's success rate must be 100 %."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from demo_phones import AISHA, JAMES, LENA, MARIA, TOM

from rejoinder.app.assistant import SupportAssistant
from rejoinder.app.db import db_diff, db_state, fresh_demo_db
from rejoinder.app.policy import ToolCall


def L(oid):
    return ToolCall("lookup_order", {"order_id": oid})


def R(aid, day, time):
    return ToolCall("reschedule_appointment", {"appointment_id": aid, "day": day, "time": time})


def C(aid):
    return ToolCall("cancel_appointment", {"appointment_id": aid})


def LA(phone):
    return ToolCall("list_appointments", {"customer_phone": phone})


def slot(aid, old, new):
    return {"appointments": {aid: {"slot": (old, new)}}}


def cancelled(*aids):
    return {"appointments": {a: {"status": ("booked", "cancelled")} for a in aids}}


@dataclass
class Dialogue:
    name: str
    phone: str | None
    turns: list[str]
    calls: list[ToolCall]  # every executed call, in order
    diff: dict = field(default_factory=dict)  # expected db_diff(start, end)
    says: list[str] = field(default_factory=list)  # phrases the agent must have said


DIALOGUES = [
    Dialogue("order status then the other order", MARIA,
             ["Hi, I'd like to check on my order. It's 4217.", "No, the other order.", "Thank you, bye."],
             [L("4217"), L("5031")], {}, ["has shipped", "5031, is still being processed"]),
    Dialogue("order id asked for, spoken digit by digit", None,
             ["Hello.", "Where's my package?", "Four, two, one, seven.", "Thanks, bye."],
             [L("4217")], {}, ["what's the order number", "Order 4217 has shipped"]),
    Dialogue("unknown order, asked again", JAMES,
             ["Can you check order 9 9 1 2?", "Sorry. Three, three, eight, eight.", "Bye."],
             [L("9912"), L("3388")], {}, ["couldn't find order 9912", "was delivered"]),
    Dialogue("reschedule with a self-correction", MARIA,
             ["Can you move my appointment to Friday? Wait, no, Thursday afternoon.", "Thank you, bye."],
             [R(101, "Thursday", "14:00")], slot(101, "2026-12-08T10:00", "2026-12-10T14:00"),
             ["now Thursday at 2 PM"]),
    Dialogue("cancel needs an explicit yes", MARIA,
             ["Cancel my appointment.", "Yes.", "Bye."],
             [C(101)], cancelled(101), ["shall I cancel your haircut on Tuesday at 10 AM", "is cancelled"]),
    Dialogue("cancel declined leaves the database alone", JAMES,
             ["I want to cancel my appointment.", "No, keep it.", "Thanks, that's all."],
             [], {}, ["leave it as it is"]),
    Dialogue("taken slot, nearest offered and accepted", TOM,
             ["Could you move my consultation to Friday at 2 PM?", "Yes, please.", "Bye."],
             [R(104, "Friday", "14:00"), R(104, "Friday", "15:00")],
             slot(104, "2026-12-11T11:00", "2026-12-11T15:00"), ["already taken", "I could do 3 PM"]),
    Dialogue("which appointment? then reschedule", AISHA,
             ["I need to move my appointment to Monday at 10 am.", "The consultation.", "Bye."],
             [R(106, "Monday", "10:00")], slot(106, "2026-12-10T10:00", "2026-12-07T10:00"),
             ["Which one do you mean", "consultation is now Monday at 10 AM"]),
    Dialogue("unknown caller identified by phone, then cancel", None,
             ["Cancel my appointment please.", "It's 555 0102.", "Yes.", "Bye."],
             [LA("5550102"), C(102)], cancelled(102), ["phone number", "Thanks, James", "is cancelled"]),
    Dialogue("reschedule then cancel the moved appointment", MARIA,
             ["Move my haircut to Wednesday morning.", "Actually, cancel it.", "Yes.", "Goodbye."],
             [R(101, "Wednesday", "10:00"), C(101)],
             {"appointments": {101: {"slot": ("2026-12-08T10:00", "2026-12-09T10:00"),
                                     "status": ("booked", "cancelled")}}},
             ["now Wednesday at 10 AM", "is cancelled"]),
    Dialogue("closed hours then a valid time", MARIA,
             ["Move my appointment to Saturday at 10.", "Friday at 4 PM then.", "Bye."],
             [R(101, "Saturday", "10:00"), R(101, "Friday", "16:00")],
             slot(101, "2026-12-08T10:00", "2026-12-11T16:00"), ["outside our hours"]),
    Dialogue("time correction within the turn", MARIA,
             ["Can I move my haircut to Thursday at 3 p.m.? Sorry, make that 11 in the morning.", "Bye."],
             [R(101, "Thursday", "11:00")], slot(101, "2026-12-08T10:00", "2026-12-10T11:00")),
    Dialogue("no appointments to cancel", LENA,
             ["Cancel my appointment.", "OK, bye."], [], {}, ["don't see any booked appointments"]),
    Dialogue("list, then cancel one of two with confirmation", AISHA,
             ["What appointments do I have?", "Cancel the haircut.", "Yes.", "Bye."],
             [LA(AISHA), C(103)], cancelled(103), ["consultation on Thursday at 10 AM", "is cancelled"]),
]


def run_dialogue(tmp_path, d: Dialogue) -> tuple[list[ToolCall], dict, str]:
    conn = fresh_demo_db(tmp_path / "call.db")
    start = db_state(conn)
    a = SupportAssistant(conn, d.phone)
    calls, said = [], [a.greeting]
    for text in d.turns:
        p = a.plan(text)
        results = [a.execute(c) for c in p.tool_calls]
        calls += p.tool_calls
        r = a.compose(p, results)
        a.heard(r.text)
        said.append(r.text)
    diff = db_diff(start, db_state(conn))
    conn.close()
    return calls, diff, "\n".join(said)


def succeeded(tmp_path, d: Dialogue) -> bool:
    calls, diff, said = run_dialogue(tmp_path, d)
    return calls == d.calls and diff == d.diff and all(s in said for s in d.says)


@pytest.mark.parametrize("d", DIALOGUES, ids=[d.name for d in DIALOGUES])
def test_dialogue(tmp_path, d):
    calls, diff, said = run_dialogue(tmp_path, d)
    assert calls == d.calls
    assert diff == d.diff
    for phrase in d.says:
        assert phrase in said, said


def test_task_success_rate_is_100_percent(tmp_path):
    ok = sum(succeeded(tmp_path, d) for d in DIALOGUES)
    assert len(DIALOGUES) >= 10
    assert ok / len(DIALOGUES) == 1.0, f"task success {ok}/{len(DIALOGUES)}"
