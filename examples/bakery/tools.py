"""Tools of the example bakery agent (see README.md): plain Python functions with type hints and
docstrings. rejoinder builds each tool's JSON Schema from them; nothing else is needed."""

from __future__ import annotations

from rejoinder import CallContext, ToolError, tool

HOURS = {
    "monday": None, "tuesday": ("7 AM", "6 PM"), "wednesday": ("7 AM", "6 PM"),
    "thursday": ("7 AM", "6 PM"), "friday": ("7 AM", "8 PM"), "saturday": ("8 AM", "4 PM"),
    "sunday": ("8 AM", "1 PM"),
}


def opening_hours(day: str) -> dict:
    """When the bakery is open on a given day.

    Args:
        day: the weekday the caller asks about, e.g. "Saturday".
    """
    key = day.strip().lower()
    if key not in HOURS:
        raise ToolError(f"{day!r} is not a weekday; ask the caller which day they mean")
    hours = HOURS[key]
    if hours is None:
        return {"day": key.capitalize(), "open": False}
    return {"day": key.capitalize(), "open": True, "opens": hours[0], "closes": hours[1]}


@tool(reversible=False, timeout_s=2.0)
def reserve_cake(ctx: CallContext, flavour: str, day: str) -> dict:
    """Reserve a whole cake for pick-up. Only once the caller has confirmed flavour and day.

    Args:
        flavour: e.g. "chocolate" or "lemon".
        day: the pick-up weekday.
    """
    booked = ctx.state.setdefault("reservations", [])
    booked.append({"flavour": flavour, "day": day, "caller": ctx.caller_id})
    return {"reserved": f"{flavour} cake", "pick_up": day, "reference": f"C{len(booked):03d}"}
