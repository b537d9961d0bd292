"""The reference support agent's instructions and four tools, as LLM-port schemas, for the
benchmarks in this folder (until the reference agent defined with the public agent API lands).

Spec (issue 8): the runtime supplies the caller's identity, so no tool takes a phone number.
- lookup_order(order_id: 4-digit order number, digits only) — reversible (read-only)
- list_appointments() — the caller's booked appointments — reversible (read-only)
- reschedule_appointment(appointment_id: int, day: weekday name, time: 24-hour "HH:MM") — reversible
- cancel_appointment(appointment_id: int) — irreversible
"""

from __future__ import annotations

import json

from rejoinder.ports import ChatMessage, ToolCall, ToolSchema

WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

SYSTEM = (
    "You are the phone assistant of Bella Hair Salon. You help callers check their orders and "
    "see, move or cancel their appointments. Use a tool whenever the caller asks about an order "
    "or an appointment; never make up order or appointment details. The caller is already "
    "identified. Answer in one or two short spoken sentences. Opening hours: Monday to Saturday, "
    "9:00 to 18:00."
)

_CALLS = [("Can you check order 1234?",
           '<tool_call>[{"name": "lookup_order", "arguments": {"order_id": "1234"}}]</tool_call>'),
          ("When is my appointment?",
           '<tool_call>[{"name": "list_appointments", "arguments": {}}]</tool_call>')]
_TALK = [("Hi there.", "Hi! How can I help you today?"),
         ("Thanks a lot, bye.", "You're welcome. Goodbye!")]


def _examples(pairs: list[tuple[str, str]]) -> str:
    return "\n\nExamples:\n" + "\n".join(f"Caller: {c}\nYou: {y}" for c, y in pairs)


#: Worked examples appended to the system prompt in the "few-shot" designs (no example is a
#: benchmark item).
FEW_SHOT = _examples(_CALLS + _TALK)

#: The same examples with SmolLM2's own "no call" form (``<tool_call>[]</tool_call>``) before
#: the small-talk replies, for the eager designs (the model then sees ``[]`` as an option).
FEW_SHOT_NO_CALL = _examples(_CALLS + [(c, "<tool_call>[]</tool_call>" + y) for c, y in _TALK])


def _params(props: dict, required: list[str] | None = None) -> dict:
    return {"type": "object", "properties": props,
            "required": list(props) if required is None else required}


def tools(strict: bool = True) -> tuple[ToolSchema, ...]:
    """The four tools. ``strict`` adds what a typed tool signature can say (a 4-digit pattern, a
    weekday enum, an HH:MM pattern, an id range); without it every argument is a bare string or
    integer."""
    order = {"type": "string", "description": "The 4-digit order number, digits only"}
    day = {"type": "string", "description": "Weekday name, e.g. Thursday"}
    time = {"type": "string", "description": "24-hour time HH:MM, e.g. 15:00"}
    if strict:
        order["pattern"] = "^[0-9]{4}$"
        day["enum"] = WEEKDAYS
        time["pattern"] = "^([01][0-9]|2[0-3]):[0-5][0-9]$"
    appt = {"type": "integer", "description": "The appointment's id from list_appointments"}
    if strict:
        appt.update(minimum=1, maximum=9999)
    return (
        ToolSchema("lookup_order", "Look up the status of one of the caller's orders.",
                   _params({"order_id": order})),
        ToolSchema("list_appointments", "List the caller's booked appointments.", _params({})),
        ToolSchema("reschedule_appointment", "Move one of the caller's appointments to another "
                   "day and time.", _params({"appointment_id": appt, "day": day, "time": time})),
        ToolSchema("cancel_appointment", "Cancel one of the caller's appointments.",
                   _params({"appointment_id": appt})),
    )


APPOINTMENTS = [{"appointment_id": 12, "service": "haircut", "day": "Tuesday", "time": "10:00"}]


def context(kind: str | None) -> list[ChatMessage]:
    """Earlier turns of the call before a benchmark utterance: ``"asked_order"`` (the agent asked
    for the order number) or ``"appointments"`` (the caller's appointments were listed)."""
    if kind is None:
        return []
    if kind == "asked_order":
        return [ChatMessage("user", "I'm calling about an order."),
                ChatMessage("assistant", "Sure, what is your order number?")]
    if kind == "appointments":
        call = ToolCall("call_ctx1", "list_appointments", {})
        return [ChatMessage("user", "What appointments do I have?"),
                ChatMessage("assistant", "", tool_calls=(call,)),
                ChatMessage("tool", json.dumps({"appointments": APPOINTMENTS}),
                            tool_call_id=call.id),
                ChatMessage("assistant", "You have a haircut on Tuesday at 10:00.")]
    raise ValueError(f"unknown context {kind!r}")
