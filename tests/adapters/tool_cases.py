"""Tool schemas and checks shared by the LLM adapter tests (imported as ``tool_cases``)."""

from __future__ import annotations

import re

from rejoinder.ports import ChatMessage, ToolCall, ToolSchema

TOOLS = (
    ToolSchema("lookup_order", "Look up the status of one of the caller's orders.",
               {"type": "object", "properties": {"order_id": {
                   "type": "string", "description": "The 4-digit order number",
                   "pattern": "^[0-9]{4}$"}}, "required": ["order_id"]}),
    ToolSchema("list_appointments", "List the caller's booked appointments.",
               {"type": "object", "properties": {}}),
    ToolSchema("reschedule_appointment", "Move an appointment to another day and time.",
               {"type": "object", "properties": {
                   "appointment_id": {"type": "integer"},
                   "day": {"type": "string", "enum": ["Monday", "Tuesday", "Wednesday",
                                                      "Thursday", "Friday"]},
                   "time": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"}},
                "required": ["appointment_id", "day", "time"]}),
)
SUPPORT = ChatMessage("system", "You are the phone assistant of a hair salon. Use the tools to "
                                "look up orders and appointments. Answer in one short sentence.")


def assert_valid_call(call: ToolCall, tools=TOOLS) -> None:
    """``call`` names a declared tool and its arguments satisfy that tool's schema."""
    schema = next(t for t in tools if t.name == call.name).parameters
    assert call.id and set(call.arguments) == set(schema["properties"])
    for key, sub in schema["properties"].items():
        value = call.arguments[key]
        assert isinstance(value, {"string": str, "integer": int}[sub["type"]]), (key, value)
        if "enum" in sub:
            assert value in sub["enum"]
        if "pattern" in sub:
            assert re.fullmatch(sub["pattern"].strip("^$"), value), (key, value)
