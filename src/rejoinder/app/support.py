"""The reference application: a phone support assistant for a small business (orders and
appointments), defined with the public agent API like any user's agent.

The LLM reads the instructions, picks the tools and writes every reply. The tools work on a real
SQLite database (:mod:`rejoinder.app.db`); each call gets a fresh copy of the demo data
(``on_call_start``), deleted when the call ends (``on_call_end``). The caller is identified by
caller ID from the runtime's :class:`~rejoinder.tools.CallContext`, never from the LLM's
arguments: every tool only sees the identified customer's own orders and appointments, so a
caller cannot read or change someone else's by saying its number, whatever the LLM decides.

Reversibility: ``lookup_order`` and ``list_appointments`` only read (reversible, nothing to undo);
``reschedule_appointment`` is reversible (compensated by moving the appointment back);
``cancel_appointment`` is irreversible, so it never runs before the caller's turn is final, and
it asks first (``confirm``): its first call gives the LLM the question "shall I cancel your …?",
and it runs when the LLM calls it again after the caller's answer.
``transfer_to_human`` and ``end_call`` (:mod:`rejoinder.calltools`) hand the call to a person or
end it, each once the agent's last reply has played. Steps (:data:`STEPS`): listing the
appointments moves the call to a step whose instructions cover changing one.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from rejoinder.agent import Agent
from rejoinder.app import db
from rejoinder.app.examples import (CANCEL_CUE, CANCEL_EXAMPLES, END_EXAMPLES, LIST_CUE, LIST_EXAMPLES, MOVE_CUE,
                                     MOVE_EXAMPLES, ORDER_EXAMPLES, TALK_EXAMPLES, TRANSFER_EXAMPLES)
from rejoinder.calltools import end_call, transfer_to_human
from rejoinder.dictation import DIGIT_WORDS
from rejoinder.flow import AgentStep
from rejoinder.tools import CallContext, ToolError, tool

BUSINESS = "Maple and Company"

INSTRUCTIONS = (
    f"You are the phone assistant of {BUSINESS}, a small shop and hair salon. The caller is "
    "already identified by their phone number. Use the tools to answer: lookup_order when the "
    "caller gives an order number (a number alone is an order number), list_appointments to see "
    "their appointments, reschedule_appointment to move one, cancel_appointment to cancel one "
    "once the caller has confirmed. Reply in one or two short spoken sentences with the facts "
    "from the tools. Never invent order numbers, dates, times or prices. When the caller only "
    "greets or thanks you, answer in a few friendly words and ask how you can help. If they "
    "ask for anything else, say you can only help with their orders and appointments."
)


def _conn(ctx: CallContext):
    conn = ctx.state.get("db")
    if conn is None:
        raise ToolError("the database is not open for this call")
    return conn


def _customer(ctx: CallContext) -> dict[str, Any]:
    customer = ctx.state.get("customer")
    if customer is None:
        raise ToolError("your phone number is not on any account, so I can't look up your "
                        "orders or appointments")
    return customer


def _digits(text: str) -> str:
    """"4 2 1 7", "#4217", "four two one seven" → "4217"."""
    tokens = re.findall(r"[a-z]+|\d", text.lower())
    return "".join(DIGIT_WORDS.get(t, t) for t in tokens if t.isdigit() or t in DIGIT_WORDS)


def _weekday(value: Any) -> Any:
    """" thursday" → "Thursday"."""
    return value.strip().capitalize() if isinstance(value, str) else value


# Typed arguments: the LLM is shown (and a grammar-constrained LLM held to) four digits, written
# as the caller read them ("4217", "4, 2, 1, 7", "4 2 1 7"), and a weekday name; the validators,
# which run first, normalise what any LLM writes ("#4217", "four two one seven", 4217,
# "thursday"). Because the pattern accepts the spoken forms, the embedded LLM copies the caller's
# own span into the argument (rejoinder.adapters._toolcall.grounded_values) instead of writing
# digits itself: SmolLM2-135M wrote 4234 or 1234 for "4, 2, 1, 7." under a four-digit pattern.
# All seven days, so a weekend request reaches the tool and hears the opening hours instead of
# being bent into a weekday. A 24-hour time pattern did worse, so the time stays free text.
# A full stop may part two digits: Whisper ends a sentence at a caller's longer pause inside the
# number ("Yeah, it's... 5, 0, 3. One.", "Two, four, five. 9" in stored suite runs of 2026-12-05).
OrderNumber = Annotated[str, Field(pattern=r"^[0-9]([,. -]{0,2}[0-9]){3}$"),
                        BeforeValidator(lambda v: _digits(str(v)))]
Weekday = Annotated[Literal["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
                            "Sunday"], BeforeValidator(_weekday)]

# A time of day as callers say it ("at 2", "2 pm", "2:30 PM", "14:00", "two pm", "noon", "4 in
# the afternoon", "three o'clock", "morning"). With a pattern the argument is grounded like the
# order number: the embedded LLM chooses among the spans of the caller's words that are times
# (rejoinder.adapters._toolcall.grounded_values); free text let SmolLM2-135M write the day
# ("time": "Tuesday") or the old slot. parse_time reads every form the pattern accepts.
_HOUR = r"(1[0-2]|0?[0-9]|1[3-9]|2[0-3]|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_PART = r"(morning|afternoon|evening)"
_AMPM = r"( ?[aApP]\.? ?[mM]\.?)"
# a bare hour counts only after "at" ("at 11"): digits read out ("8, 1, 4") are not times
# "o'clock" is how most callers say a whole hour ("three o'clock", "9 o'clock in the morning")
# the quarter and half hours as spoken ("half past two", British "half two", "quarter to
# four", "two thirty", "ten fifteen"): every set of move requests written blind said some
# (2 of the 10 of 2026-12-07's), and read "two" alone they were 14:00, or no time at all
_QUARTERS = (rf"(half|quarter) past {_HOUR}|quarter to {_HOUR}|half {_HOUR}"
             rf"|{_HOUR} (fifteen|thirty|forty[- ]five)")
TIME_PATTERN = (rf"^((at )?({_HOUR}([:.][0-5][0-9])?{_AMPM}|{_HOUR}[:.][0-5][0-9]"
                rf"|({_QUARTERS})( ?{_AMPM}| in the {_PART})?"
                rf"|{_HOUR} in the {_PART}|{_HOUR} o'clock( in the {_PART})?|noon|midday|{_PART})"
                rf"|at {_HOUR})$")
def _time_of_day(value: Any) -> str:
    """Any time parse_time reads, as "HH:MM" (so an LLM that is not held to the pattern may
    write "Tuesday at 3 pm"). Raises ValueError naming the text otherwise."""
    hh, mm = parse_time(str(value))
    return f"{hh:02d}:{mm:02d}"


TimeOfDay = Annotated[str, Field(pattern=TIME_PATTERN), BeforeValidator(_time_of_day)]


def _service(value: Any) -> Any:
    """"the Haircut" → "haircut"; words that name no service (an LLM's misplaced "2pm" or its
    tool's name) → "" (not given)."""
    if not isinstance(value, str):
        return value
    low = value.lower()
    return next((s for s in SERVICES if s in low), "")


#: The services the salon offers. As an enum the argument is grounded: the embedded LLM writes
#: it only when the caller named one (rejoinder.adapters._toolcall.object_plan).
SERVICES = ("haircut", "consultation")
Service = Annotated[Literal["haircut", "consultation", ""], BeforeValidator(_service)]


# Tool and talk examples (the tool decision's few-shot prompt, matcher and calibration set):
# rejoinder.app.examples.

#: what the agent helps with: a request its tools do not serve is answered with it
SCOPE = "your orders and appointments"


@tool(reversible=True, timeout_s=2.0, examples=ORDER_EXAMPLES)
def lookup_order(ctx: CallContext, order_id: OrderNumber) -> dict[str, Any]:
    """Look up one of the caller's orders: its item, status and delivery date.

    Args:
        order_id: the order number as the caller said it (four digits).
    """
    customer = _customer(ctx)
    row = db.order_row(_conn(ctx), order_id)
    if row is None or db.normalize_phone(row["customer_phone"] or "") != db.normalize_phone(customer["phone"]):
        mine = ", ".join(o["id"] for o in db.orders_of(_conn(ctx), customer["id"])) or "none"
        raise ToolError(f"you have no order {order_id}; your orders are: {mine}")
    return {f"order {row['id']}": order_sentence(row)}


def order_sentence(row: Any) -> str:
    """An order's state as the agent would say it: "the wireless headphones of order 4217
    shipped on Friday, December 4 and should arrive Wednesday, December 9".

    Tool results are written as spoken facts, one sentence per record, because a 135M model
    reads a sentence back faithfully and a ``key: value`` list poorly. Probed on SmolLM2-135M
    with seven orders of every status and the support agent's prompt (2026-12-02, requests not
    from any benchmark or held-out scenario): this form was read back with the order number and
    the right dates 6 of 7 times; the ``{"order_id", "item", "status", "shipped_on", …}`` form
    answered 4 of 6 with a status or date, once mixing the ship and arrival dates ("shipped on
    Wednesday, December 9")."""
    what = f"the {row['item']} of order {row['id']}"
    status = row["status"]
    if status == "delivered" and row["arrival_date"]:
        return f"{what} was delivered on {db.speak_date(row['arrival_date'])}"
    if status == "cancelled":
        return f"{what} was cancelled"
    if status == "shipped" and row["ship_date"]:
        when = f" and should arrive {db.speak_date(row['arrival_date'])}" if row["arrival_date"] else ""
        return f"{what} shipped on {db.speak_date(row['ship_date'])}{when}"
    if row["arrival_date"]:
        return f"{what} is still {status} and should arrive {db.speak_date(row['arrival_date'])}"
    return f"{what} is {status}"


def _appointments(ctx: CallContext) -> list[dict[str, Any]]:
    customer = _customer(ctx)
    return [{"appointment_id": a["id"], "service": a["service"], "when": db.speak_slot(a["slot"])}
            for a in db.appointments_of(_conn(ctx), customer["id"]) if a["status"] == "booked"]


@tool(reversible=True, timeout_s=2.0, examples=LIST_EXAMPLES, cue=LIST_CUE)
def list_appointments(ctx: CallContext) -> dict[str, Any]:
    """List the caller's booked appointments (service, day and time)."""
    return {"appointments": appointments_phrase(_appointments(ctx))}


def appointments_phrase(appts: list[dict[str, Any]]) -> str:
    """Booked appointments as one spoken phrase: "a consultation on Thursday at 10 AM and a
    haircut on Friday at 2 PM" ("none booked" when there are none).

    Why one phrase: given the list of records (``[{"service": …, "when": …}, …]``), SmolLM2-135M
    answered a caller with two appointments "A haircut, a haircut, a haircut" in 3 of 4 probe
    wordings; given this phrase it read both back in all 12 probes (three callers, four wordings
    written for the probe, 2026-12-02)."""
    parts = [f"a {a['service']} on {a['when']}" for a in appts]
    if not parts:
        return "none booked"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _pick(ctx: CallContext, service: str) -> dict[str, Any]:
    """The caller's booked appointment for ``service`` (or their only one)."""
    appts = _appointments(ctx)
    said = (service or "").lower().strip()
    wanted = [a for a in appts if said and (said in a["service"] or a["service"] in said)]
    if len(wanted) == 1:
        return wanted[0]
    if len(appts) == 1 and (not service or not any(s in service.lower() for s in SERVICES)):
        return appts[0]  # the caller's only one: no service named (a day or a time written there)
    if not appts:
        raise ToolError("you have no booked appointments")
    listing = "; ".join(f"{a['service']} on {a['when']}" for a in appts)
    raise ToolError(f"which appointment? you have: {listing}")


_PARTS_OF_DAY = {"afternoon": (14, 0), "evening": (17, 0), "morning": (10, 0), "noon": (12, 0),
                 "midday": (12, 0)}
_HOUR_WORDS = {w: i for i, w in enumerate("one two three four five six seven eight nine ten "
                                          "eleven twelve".split(), start=1)}
_H = "|".join([r"\d{1,2}", *_HOUR_WORDS])
_TIME = re.compile(rf"\b({_H})(?:[:.](\d{{2}}))?(?:\s*([ap])\.?\s*m\b\.?)?", re.IGNORECASE)
#: a quarter or half hour as spoken; "half two" is British for 2:30
_SPOKEN = re.compile(rf"\b(?:(?P<past>half|quarter) past (?P<h1>{_H})|quarter to (?P<h2>{_H})"
                     rf"|half (?P<h3>{_H})|(?P<h4>{_H}) (?P<mins>fifteen|thirty|forty[- ]five))\b"
                     r"(?:\s*(?P<ap>[ap])\.?\s*m\b\.?)?", re.IGNORECASE)
_SPOKEN_MINUTES = {"half": 30, "quarter": 15, "fifteen": 15, "thirty": 30}


def _hour(raw: str) -> int:
    return _HOUR_WORDS[raw] if raw in _HOUR_WORDS else int(raw)


def _spoken(m: re.Match) -> tuple[int, int, str | None]:
    """(hour, minutes, "a", "p" or None) of a :data:`_SPOKEN` match; "quarter to one" → 12:45."""
    g = m.groupdict()
    if g["h1"]:
        return _hour(g["h1"]), _SPOKEN_MINUTES[g["past"]], g["ap"]
    if g["h2"]:
        return (_hour(g["h2"]) - 2) % 12 + 1, 45, g["ap"]
    if g["h3"]:
        return _hour(g["h3"]), 30, g["ap"]
    return _hour(g["h4"]), _SPOKEN_MINUTES.get(g["mins"], 45), g["ap"]


def parse_time(text: str) -> tuple[int, int]:
    """A time of day as a caller or an LLM writes it, alone or inside words: "15:00", "3 pm",
    "3:30 PM", "two", "half past two" or "half two" (14:30), "quarter to four" (15:45),
    "ten fifteen", "Thursday at 10 AM", "4 in the afternoon", "3" (an hour without am/pm
    inside business hours: 1–5 → afternoon), or a part of the day alone ("morning" → 10:00,
    "afternoon" → 14:00). With several times ("2, sorry, 3 pm") the last one counts, as a
    caller's self-correction does. Raises ValueError when no time can be read."""
    low = (text or "").lower()
    spoken = list(_SPOKEN.finditer(low))
    taken = [(m.start(), m.end()) for m in spoken]
    found = [(m.start(), m) for m in _TIME.finditer(low)
             if not any(a <= m.start() < b for a, b in taken)]
    found += [(m.start(), m) for m in spoken]
    part = next((w for w in _PARTS_OF_DAY if w in low), None)
    if not found:
        if part is None:
            raise ValueError(f"cannot read the time {text!r}")
        return _PARTS_OF_DAY[part]
    m = max(found, key=lambda f: f[0])[1]
    if m.re is _SPOKEN:
        h, mins, ap = _spoken(m)
    else:
        h, mins, ap = _hour(m.group(1)), int(m.group(2) or 0), m.group(3)
    if ap is None and part in ("afternoon", "evening"):
        ap = "p"
    elif ap is None and part == "morning":
        ap = "a"
    if ap == "p" and h < 12:
        h += 12
    elif ap == "a" and h == 12:
        h = 0
    elif ap is None and 1 <= h <= 5:
        h += 12
    if h > 23 or mins > 59:
        raise ValueError(f"cannot read the time {text!r}")
    return h, mins


def _undo_reschedule(ctx: CallContext, result: dict[str, Any], **args: Any) -> None:
    """Put the last moved appointment back where it was, if it still holds the new slot
    (compensations run newest first, so the last move is the one to undo)."""
    appt_id, previous, new = ctx.state["moves"].pop()
    conn = _conn(ctx)
    with db.transaction(conn):
        conn.execute("UPDATE appointments SET slot = ? WHERE id = ? AND slot = ?",
                     (previous, appt_id, new))


@tool(reversible=True, timeout_s=2.0, compensate=_undo_reschedule, examples=MOVE_EXAMPLES, cue=MOVE_CUE)
def reschedule_appointment(ctx: CallContext, day: Weekday, time: TimeOfDay,
                           service: Service = "") -> dict[str, Any]:
    """Move the caller's appointment to another weekday and time (Monday to Friday, 9 AM to 5 PM).

    Args:
        day: the new weekday, e.g. "Thursday".
        time: the new start time, e.g. "15:00" or "3 pm".
        service: which appointment, e.g. "haircut" (optional when the caller has only one).
    """
    appt = _pick(ctx, service)
    try:
        hh, mm = parse_time(time)
        slot = db.slot_iso(day, f"{hh:02d}:{mm:02d}")
    except ValueError as exc:
        raise ToolError(f"I need a weekday and a time: {exc}") from None
    spoken = db.speak_slot(slot)
    if not db.within_hours(slot):
        raise ToolError(f"{spoken} is outside opening hours (Monday to Friday, 9 AM to 5 PM)")
    conn = _conn(ctx)
    with db.transaction(conn):
        row = conn.execute("SELECT * FROM appointments WHERE id = ?", (appt["appointment_id"],)).fetchone()
        if row["slot"] == slot:
            raise ToolError(f"the {row['service']} is already on {spoken}")
        for other_slot, other_id in db.booked_slots(conn).items():
            if other_id != row["id"] and db.overlaps(other_slot, slot):
                raise ToolError(f"{spoken} is already taken")
        conn.execute("UPDATE appointments SET slot = ? WHERE id = ?", (slot, row["id"]))
    ctx.state.setdefault("moves", []).append((row["id"], row["slot"], slot))
    return {"moved": f"the {row['service']} is moved from {db.speak_slot(row['slot'])} to {spoken}"}


def _ask_cancel(ctx: CallContext, service: Service = "") -> str:
    """The question the caller says yes to before an appointment is cancelled."""
    appt = _pick(ctx, service)
    return f"shall I cancel your {appt['service']} on {appt['when']}?"


@tool(reversible=False, timeout_s=2.0, examples=CANCEL_EXAMPLES, confirm=_ask_cancel, cue=CANCEL_CUE)
def cancel_appointment(ctx: CallContext, service: Service = "") -> dict[str, Any]:
    """Cancel the caller's appointment. Only after the caller has said yes to cancelling it.

    Args:
        service: which appointment, e.g. "haircut" (optional when the caller has only one).
    """
    appt = _pick(ctx, service)
    conn = _conn(ctx)
    with db.transaction(conn):
        conn.execute("UPDATE appointments SET status = 'cancelled' WHERE id = ?", (appt["appointment_id"],))
    return {"cancelled": f"your {appt['service']} on {appt['when']} is cancelled"}


# ------------------------------------------------------------------------------------ the call


def open_call(ctx: CallContext) -> None:
    """A fresh copy of the demo database for this call; identify the caller by caller ID."""
    folder = Path(tempfile.mkdtemp(prefix="rejoinder-call-"))
    ctx.state["db_dir"] = folder
    conn = db.fresh_demo_db(folder / "support.sqlite")
    ctx.state["db"] = conn
    ctx.state["customer"] = db.customer_by_phone(conn, ctx.caller_id) if ctx.caller_id else None


def close_call(ctx: CallContext) -> None:
    """Close and delete the call's database."""
    conn = ctx.state.pop("db", None)
    if conn is not None:
        conn.close()
    folder = ctx.state.pop("db_dir", None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def final_state(ctx: CallContext) -> dict[str, Any] | None:
    """The database's mutable tables at the end of the call (row ids as text)."""
    conn = ctx.state.get("db")
    if conn is None:
        return None
    return {t: {str(k): dict(v) for k, v in rows.items()} for t, rows in db.db_state(conn).items()}


def greeting(ctx: CallContext) -> str:
    customer = ctx.state.get("customer")
    hello = f"Hi {customer['name'].split()[0]}, thanks" if customer else "Thanks"
    return f"{hello} for calling {BUSINESS}. How can I help?"


# Conversation steps (rejoinder.flow): every tool is described in every request and callable
# from the start, so a caller can switch topics at any time; cancelling asks first (confirm).
# Once the appointments were listed ("appointments", entered when list_appointments succeeds,
# in the same reply), the step's instructions say how to handle a change to one of them.
_DOMAIN = ["lookup_order", "list_appointments", "reschedule_appointment", "cancel_appointment"]
_CALL = ["transfer_to_human", "end_call"]
STEPS = [
    AgentStep("main", tools=_DOMAIN + _CALL, next={"list_appointments": "appointments"}),
    AgentStep("appointments", "Move or cancel one of the appointments you listed when the "
              "caller asks; cancel only after the caller has said yes.", tools=_DOMAIN + _CALL),
]

agent = Agent(
    INSTRUCTIONS, name="support", greeting=greeting,
    tools=[lookup_order, list_appointments, reschedule_appointment, cancel_appointment,
           transfer_to_human(examples=TRANSFER_EXAMPLES), end_call(examples=END_EXAMPLES)],
    steps=STEPS,
    stt_vocabulary=[BUSINESS, "orders", "order numbers", "appointments", "haircut", "consultation"],
    llm={"temperature": 0.0, "max_tokens": 60, "max_steps": 3, "talk_examples": list(TALK_EXAMPLES),
         "scope": SCOPE},
    on_call_start=open_call, on_call_end=close_call, report_state=final_state,
)
