"""A small tool framework and the support assistant's four tools.

A :class:`Tool` is a named, pydantic-typed operation on the SQLite connection. ``run`` returns a
JSON-able dict; an expected failure (unknown order, slot taken, closed hours) comes back as
``{"error": "<sentence the agent can say>"}`` instead of raising, so the dialog can recover.

Reversibility: a ``reversible`` tool may be run speculatively (on a tentative transcript, before
the caller's turn is final) and must provide ``compensate(conn, params, result)`` that undoes it
if the turn changes; read-only tools compensate with a no-op. Irreversible tools
(``cancel_appointment``) run only after the turn is final and confirmed.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, Field, ValidationError, field_validator

from rejoinder.app import db


@dataclass(frozen=True)
class Tool:
    """One callable tool. ``run(conn, params) -> dict`` never raises for caller mistakes."""

    name: str
    description: str
    params: type[BaseModel]
    reversible: bool
    run: Callable[[sqlite3.Connection, BaseModel], dict]
    compensate: Callable[[sqlite3.Connection, BaseModel, dict], None] | None = None

    def __post_init__(self) -> None:
        if self.reversible and self.compensate is None:
            raise ValueError(f"reversible tool {self.name!r} needs a compensate function")

    def parse(self, args: dict[str, Any]) -> BaseModel:
        """Validate ``args`` into the params model. Raises :class:`pydantic.ValidationError`."""
        return self.params.model_validate(args)

    def invoke(self, conn: sqlite3.Connection, args: dict[str, Any]) -> dict:
        """Validate then run; invalid arguments come back as ``{"error": ...}``."""
        try:
            params = self.parse(args)
        except ValidationError as exc:
            first = exc.errors()[0]
            return {"error": f"invalid arguments for {self.name}: {first['msg']}"}
        return self.run(conn, params)

    def undo(self, conn: sqlite3.Connection, args: dict[str, Any], result: dict) -> None:
        """Compensate a run with ``args`` that returned ``result``.

        Raises ValueError for an irreversible tool; a failed run (``"error"`` result) changed
        nothing, so undoing it is a no-op.
        """
        if self.compensate is None:
            raise ValueError(f"tool {self.name!r} is irreversible and cannot be compensated")
        if "error" in result:
            return
        self.compensate(conn, self.parse(args), result)


def _noop(conn: sqlite3.Connection, params: BaseModel, result: dict) -> None:
    """Compensation of a read-only tool."""


# ----------------------------------------------------------------------------------- lookup_order


class LookupOrder(BaseModel):
    order_id: str = Field(description="The 4-digit order number, digits only, e.g. '4217'.")

    @field_validator("order_id", mode="before")
    @classmethod
    def _digits(cls, v: Any) -> str:
        return "".join(ch for ch in str(v) if ch.isdigit())


def _lookup_order(conn: sqlite3.Connection, p: LookupOrder) -> dict:
    row = db.order_row(conn, p.order_id) if p.order_id else None
    if row is None:
        return {"error": f"I couldn't find an order with the number {p.order_id or 'given'}."}
    return {
        "order_id": row["id"],
        "item": row["item"],
        "status": row["status"],
        "ship_date": row["ship_date"],
        "arrival_date": row["arrival_date"],
        "customer_name": row["customer_name"],
        "customer_phone": row["customer_phone"],
    }


# ------------------------------------------------------------------------------ list_appointments


class ListAppointments(BaseModel):
    customer_phone: str = Field(description="The customer's phone number.")


def _appointment_dict(row: dict[str, Any]) -> dict:
    from datetime import datetime

    t = datetime.fromisoformat(row["slot"])
    return {
        "appointment_id": row["id"],
        "service": row["service"],
        "slot": row["slot"],
        "day": t.strftime("%A"),
        "time": t.strftime("%H:%M"),
        "status": row["status"],
    }


def _list_appointments(conn: sqlite3.Connection, p: ListAppointments) -> dict:
    customer = db.customer_by_phone(conn, p.customer_phone)
    if customer is None:
        return {"error": "I couldn't find a customer with that phone number."}
    appts = [_appointment_dict(r) for r in db.appointments_of(conn, customer["id"])]
    return {
        "customer_name": customer["name"],
        "customer_phone": customer["phone"],
        "appointments": [a for a in appts if a["status"] == "booked"],
    }


# ------------------------------------------------------------------------- reschedule_appointment


class RescheduleAppointment(BaseModel):
    appointment_id: int = Field(description="The appointment's id.")
    day: str = Field(description="Weekday name, e.g. 'Thursday'.")
    time: str = Field(description="Start time, 24 h 'HH:MM', e.g. '14:00'.")


def _reschedule(conn: sqlite3.Connection, p: RescheduleAppointment) -> dict:
    try:
        slot = db.slot_iso(p.day, p.time)
    except ValueError:
        return {"error": f"I didn't catch a valid day and time ({p.day} {p.time})."}
    spoken = db.speak_slot(slot)
    if not db.within_hours(slot):
        return {
            "error": f"{spoken} is outside our hours; we take appointments Monday to Friday "
            "from 9 AM to 5 PM.",
            "reason": "closed",
        }
    with db.transaction(conn):
        row = conn.execute("SELECT * FROM appointments WHERE id = ?", (p.appointment_id,)).fetchone()
        if row is None or row["status"] != "booked":
            return {"error": f"I couldn't find a booked appointment number {p.appointment_id}."}
        if row["slot"] == slot:
            return {"error": f"Your {row['service']} is already {spoken}.", "reason": "same"}
        for other_slot, other_id in db.booked_slots(conn).items():
            if other_id != p.appointment_id and db.overlaps(other_slot, slot):
                return {"error": f"{spoken} is already taken.", "reason": "taken"}
        conn.execute("UPDATE appointments SET slot = ? WHERE id = ?", (slot, p.appointment_id))
    return {
        "appointment_id": p.appointment_id,
        "service": row["service"],
        "previous_slot": row["slot"],
        "slot": slot,
        "day": spoken.split(" at ")[0],
        "time": p.time,
    }


def _unreschedule(conn: sqlite3.Connection, p: BaseModel, result: dict) -> None:
    """Put the appointment back in ``result["previous_slot"]`` if it still holds the new slot."""
    with db.transaction(conn):
        conn.execute(
            "UPDATE appointments SET slot = ? WHERE id = ? AND slot = ?",
            (result["previous_slot"], result["appointment_id"], result["slot"]),
        )


# ----------------------------------------------------------------------------- cancel_appointment


class CancelAppointment(BaseModel):
    appointment_id: int = Field(description="The appointment's id.")


def _cancel(conn: sqlite3.Connection, p: CancelAppointment) -> dict:
    with db.transaction(conn):
        row = conn.execute("SELECT * FROM appointments WHERE id = ?", (p.appointment_id,)).fetchone()
        if row is None:
            return {"error": f"I couldn't find appointment number {p.appointment_id}."}
        if row["status"] == "cancelled":
            return {"error": f"That {row['service']} is already cancelled.", "reason": "cancelled"}
        conn.execute("UPDATE appointments SET status = 'cancelled' WHERE id = ?", (p.appointment_id,))
    return {
        "appointment_id": p.appointment_id,
        "service": row["service"],
        "slot": row["slot"],
        "status": "cancelled",
    }


TOOLS: dict[str, Tool] = {
    t.name: t
    for t in (
        Tool(
            "lookup_order",
            "Look up an order's status, item and delivery dates by its 4-digit order number.",
            LookupOrder,
            True,
            _lookup_order,
            _noop,
        ),
        Tool(
            "list_appointments",
            "List a customer's booked appointments by their phone number.",
            ListAppointments,
            True,
            _list_appointments,
            _noop,
        ),
        Tool(
            "reschedule_appointment",
            "Move a booked appointment to another weekday and time within business hours "
            "(Monday to Friday, 09:00 to 17:00).",
            RescheduleAppointment,
            True,
            _reschedule,
            _unreschedule,
        ),
        Tool(
            "cancel_appointment",
            "Cancel a booked appointment. Irreversible: only after the caller confirms.",
            CancelAppointment,
            False,
            _cancel,
            None,
        ),
    )
}


def _inline(schema: dict) -> dict:
    """The pydantic schema without titles (smaller grammar, fewer prompt tokens)."""
    props = {
        k: {kk: vv for kk, vv in v.items() if kk != "title"}
        for k, v in schema.get("properties", {}).items()
    }
    return {
        "type": "object",
        "properties": props,
        "required": list(schema.get("required", [])),
        "additionalProperties": False,
    }


def tool_json_schema(tool: Tool) -> dict:
    """OpenAI-style function schema: ``{"type": "function", "function": {name, description,
    parameters}}``."""
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": _inline(tool.params.model_json_schema()),
        },
    }


def tool_choice_schema(tools: dict[str, Tool] | None = None) -> dict:
    """JSON schema of one tool choice: ``{"tool": <name>, "args": {...}}`` as an ``anyOf`` over
    the tools (each branch pins ``tool`` with a one-element enum), plus ``{"tool": "none"}``."""
    tools = TOOLS if tools is None else tools
    branches: list[dict] = [
        {
            "type": "object",
            "properties": {
                "tool": {"type": "string", "enum": [t.name]},
                "args": _inline(t.params.model_json_schema()),
            },
            "required": ["tool", "args"],
            "additionalProperties": False,
        }
        for t in tools.values()
    ]
    branches.append(
        {
            "type": "object",
            "properties": {"tool": {"type": "string", "enum": ["none"]}},
            "required": ["tool"],
            "additionalProperties": False,
        }
    )
    return {"anyOf": branches}
