from __future__ import annotations

import pytest
from pydantic import BaseModel

from rejoinder.app.db import db_state
from rejoinder.app.tools import TOOLS, Tool, tool_choice_schema, tool_json_schema


def run(conn, name, **args):
    return TOOLS[name].invoke(conn, args)


def test_registry_and_reversibility():
    assert set(TOOLS) == {"lookup_order", "list_appointments", "reschedule_appointment", "cancel_appointment"}
    for t in TOOLS.values():
        assert (t.compensate is not None) == t.reversible
    assert not TOOLS["cancel_appointment"].reversible


def test_reversible_tool_requires_compensate():
    class P(BaseModel):
        x: int

    with pytest.raises(ValueError, match="compensate"):
        Tool("t", "d", P, True, lambda c, p: {}, None)


def test_lookup_order(conn):
    r = run(conn, "lookup_order", order_id="4217")
    assert r["status"] == "shipped" and r["item"] == "wireless headphones"
    assert r["arrival_date"] == "2026-12-09" and r["customer_name"] == "Maria Lopez"
    assert run(conn, "lookup_order", order_id=5031)["status"] == "processing"  # int coerced
    assert run(conn, "lookup_order", order_id="4 2 1 7")["order_id"] == "4217"


def test_lookup_unknown_order_returns_error(conn):
    r = run(conn, "lookup_order", order_id="9999")
    assert "error" in r and "9999" in r["error"]
    assert "error" in run(conn, "lookup_order", order_id="")


def test_list_appointments(conn):
    r = run(conn, "list_appointments", customer_phone="+15550103")
    assert r["customer_name"] == "Aisha Patel"
    assert [(a["appointment_id"], a["day"], a["time"]) for a in r["appointments"]] == [
        (106, "Thursday", "10:00"),
        (103, "Friday", "14:00"),
    ]
    assert run(conn, "list_appointments", customer_phone="+15550105")["appointments"] == []
    assert "error" in run(conn, "list_appointments", customer_phone="123")


def test_reschedule_and_compensate_restores_slot(conn):
    before = db_state(conn)
    args = {"appointment_id": 101, "day": "Thursday", "time": "14:00"}
    r = TOOLS["reschedule_appointment"].invoke(conn, args)
    assert r["previous_slot"] == "2026-12-08T10:00" and r["slot"] == "2026-12-10T14:00"
    assert db_state(conn)["appointments"][101]["slot"] == "2026-12-10T14:00"
    TOOLS["reschedule_appointment"].undo(conn, args, r)
    assert db_state(conn) == before


def test_compensating_a_failed_run_is_a_noop(conn):
    before = db_state(conn)
    args = {"appointment_id": 101, "day": "Friday", "time": "14:00"}  # taken by 103
    r = TOOLS["reschedule_appointment"].invoke(conn, args)
    assert r["reason"] == "taken"
    TOOLS["reschedule_appointment"].undo(conn, args, r)
    assert db_state(conn) == before


@pytest.mark.parametrize(
    "day,time",
    [("Thursday", "08:00"), ("Thursday", "16:30"), ("Thursday", "17:00"), ("Saturday", "10:00"), ("Sunday", "12:00")],
)
def test_reschedule_rejects_outside_business_hours(conn, day, time):
    before = db_state(conn)
    r = run(conn, "reschedule_appointment", appointment_id=101, day=day, time=time)
    assert r.get("reason") == "closed" and "9 AM to 5 PM" in r["error"]
    assert db_state(conn) == before


def test_reschedule_rejects_taken_and_overlapping_slots(conn):
    assert run(conn, "reschedule_appointment", appointment_id=101, day="Friday", time="14:00")["reason"] == "taken"
    assert run(conn, "reschedule_appointment", appointment_id=101, day="Friday", time="14:30")["reason"] == "taken"
    ok = run(conn, "reschedule_appointment", appointment_id=101, day="Friday", time="15:00")
    assert "error" not in ok
    # a cancelled appointment's slot (105: Monday 16:00) is free
    assert "error" not in run(conn, "reschedule_appointment", appointment_id=102, day="Monday", time="16:00")


def test_reschedule_bad_inputs(conn):
    assert "error" in run(conn, "reschedule_appointment", appointment_id=999, day="Monday", time="10:00")
    assert "error" in run(conn, "reschedule_appointment", appointment_id=101, day="Someday", time="10:00")
    assert "error" in run(conn, "reschedule_appointment", appointment_id=101, day="Monday", time="ten")
    assert "error" in run(conn, "reschedule_appointment", appointment_id=105, day="Monday", time="10:00")
    assert "error" in TOOLS["reschedule_appointment"].invoke(conn, {"appointment_id": "x"})
    same = run(conn, "reschedule_appointment", appointment_id=101, day="Tuesday", time="10:00")
    assert same["reason"] == "same"


def test_cancel_is_irreversible(conn):
    r = run(conn, "cancel_appointment", appointment_id=102)
    assert r["status"] == "cancelled"
    assert db_state(conn)["appointments"][102]["status"] == "cancelled"
    assert "error" in run(conn, "cancel_appointment", appointment_id=102)  # already cancelled
    assert "error" in run(conn, "cancel_appointment", appointment_id=4242)
    with pytest.raises(ValueError, match="irreversible"):
        TOOLS["cancel_appointment"].undo(conn, {"appointment_id": 102}, r)


def test_tool_json_schema():
    s = tool_json_schema(TOOLS["reschedule_appointment"])
    assert s["type"] == "function"
    f = s["function"]
    assert f["name"] == "reschedule_appointment" and f["description"]
    assert f["parameters"]["type"] == "object"
    assert set(f["parameters"]["required"]) == {"appointment_id", "day", "time"}
    assert f["parameters"]["properties"]["appointment_id"]["type"] == "integer"


def test_tool_choice_schema_covers_every_tool():
    branches = tool_choice_schema()["anyOf"]
    names = [b["properties"]["tool"]["enum"][0] for b in branches]
    assert names == [*TOOLS, "none"]
