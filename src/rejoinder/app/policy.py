"""The deterministic dialog policy: final transcript + :class:`DialogState` → :class:`Plan`.

The task logic never depends on the LLM: a 135M model cannot be trusted to pick ids, days or
confirmations, so :func:`plan` decides the intent and the exact tool calls, and :func:`observe`
folds the tool results back into the state. Both are pure: they return a new state (in
``Plan.state`` / as the return value) and never mutate their input, so a runtime may plan on a
tentative transcript and throw the plan away.

Irreversible actions (``cancel_appointment``) are never planned directly from a request: the
request sets ``state.pending`` and asks; only an explicit "yes" in a later turn emits the call.

Intents (``Plan.intent``): ``lookup_order``, ``other_order``, ``list_appointments``,
``reschedule_appointment``, ``confirm_cancel`` (asks), ``confirm`` (runs the pending call),
``decline``, ``identify`` (phone lookup), ``ask_order_id``, ``ask_other_order``, ``ask_slot``,
``ask_which_appointment``, ``ask_phone``, ``repeat_confirmation``, ``no_appointments``, ``unsupported``, ``greet``,
``thanks``, ``goodbye``, ``ack``, ``unknown``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rejoinder.app import db
from rejoinder.app.nlu import AFTERNOON, MORNING, Utterance, analyze

AFTERNOON_HOURS = (14, 15, 16, 13)
MORNING_HOURS = (10, 9, 11)
SERVICES = ("haircut", "consultation")

_YES = ("yes", "yeah", "yep", "yup", "sure", "correct", "ok", "okay", "please", "absolutely",
        "definitely", "go ahead", "do it", "that's right", "sounds good", "alright")  # fmt: skip
_NO = ("no", "nope", "nah", "don't", "never mind", "keep it", "leave it")
_ORDER_WORDS = ("order", "orders", "package", "parcel", "shipment", "delivery", "track",
                "tracking", "shipped", "arrive", "headphones")  # fmt: skip
_APPT_WORDS = ("appointment", "appointments", "booking", "haircut", "consultation", "slot")
_MOVE_WORDS = ("move", "reschedule", "change", "push", "switch", "rebook", "shift", "bring")
_OTHER = ("other order", "other one", "not that one", "wrong order", "wrong one",
          "different order", "different one", "the other", "not that order", "another order")  # fmt: skip
_BYE = ("bye", "goodbye", "that's all", "that's it", "have a good day", "hang up")
_THANKS = ("thanks", "thank you", "cheers", "appreciate it")
_HELLO = ("hi", "hello", "hey", "good morning", "good afternoon", "hiya")


@dataclass(frozen=True)
class ToolCall:
    """A tool invocation: tool ``name`` and JSON-able ``args``."""

    name: str
    args: dict[str, Any]


@dataclass
class DialogState:
    """What the policy remembers across the turns of one call.

    ``orders`` (the identified customer's order ids), ``appointments`` (their booked ones, as
    dicts with ``appointment_id``, ``service``, ``slot``) and ``taken`` (every booked slot →
    appointment id) mirror the database; :class:`~rejoinder.app.assistant.SupportAssistant`
    refreshes them before each turn.
    """

    caller_phone: str | None = None
    customer_name: str | None = None
    orders: list[str] = field(default_factory=list)
    appointments: list[dict[str, Any]] = field(default_factory=list)
    taken: dict[str, int] = field(default_factory=dict)
    last_order: str | None = None
    mentioned_orders: list[str] = field(default_factory=list)
    last_appointment: int | None = None
    pending: ToolCall | None = None  # awaits an explicit "yes"
    awaiting: str | None = None  # what the agent last asked for
    resume: dict[str, Any] | None = None  # interrupted request: {"intent", "day", "time"}
    turn: int = 0

    @property
    def identified(self) -> bool:
        return self.caller_phone is not None and self.customer_name is not None

    def appointment(self, appointment_id: int | None) -> dict[str, Any] | None:
        return next((a for a in self.appointments if a["appointment_id"] == appointment_id), None)

    @property
    def candidate_orders(self) -> list[str]:
        """Orders the caller may mean: their own, else those mentioned in this call."""
        return list(self.orders) or list(self.mentioned_orders)


@dataclass
class Plan:
    """The policy's decision for one turn.

    ``tool_calls`` are safe to run now (reversible ones may run speculatively);
    ``needs_confirmation`` means the reply asks the caller to confirm ``state.pending``.
    ``slots`` carries facts for the reply (requested day/time, the appointment asked about).
    ``source`` is ``"rules"`` or ``"llm"`` (see ``SupportAssistant.plan_with_llm``).
    """

    intent: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    needs_confirmation: bool = False
    state: DialogState = field(default_factory=DialogState)
    slots: dict[str, Any] = field(default_factory=dict)
    source: str = "rules"


# ---------------------------------------------------------------------------------- slot choice


def _free(state: DialogState, slot: str, appointment_id: int) -> bool:
    return db.within_hours(slot) and not any(
        other != appointment_id and db.overlaps(s, slot) for s, other in state.taken.items()
    )


def resolve_time(state: DialogState, appointment_id: int, day: str, time: str) -> str:
    """Resolve :data:`MORNING`/:data:`AFTERNOON` to the earliest free matching hour on ``day``
    (14:00 / 10:00 first; the preferred hour when none is free). "HH:MM" passes through."""
    hours = {AFTERNOON: AFTERNOON_HOURS, MORNING: MORNING_HOURS}.get(time)
    if hours is None:
        return time
    for h in hours:
        if _free(state, db.slot_iso(day, f"{h:02d}:00"), appointment_id):
            return f"{h:02d}:00"
    return f"{hours[0]:02d}:00"


def nearest_free(state: DialogState, appointment_id: int, day: str, time: str) -> str | None:
    """The free business-hours start on ``day`` nearest to ``time`` (hourly grid), or None."""
    want = db.parse_hhmm(time)[0]
    for h in sorted(range(db.OPEN_HOUR, db.CLOSE_HOUR), key=lambda h: (abs(h - want), -h)):
        if h != want and _free(state, db.slot_iso(day, f"{h:02d}:00"), appointment_id):
            return f"{h:02d}:00"
    return None


def _day_time_of(slot: str) -> tuple[str, str]:
    t = datetime.fromisoformat(slot)
    return t.strftime("%A"), t.strftime("%H:%M")


# ------------------------------------------------------------------------------------- planning


def plan(text: str, state: DialogState) -> Plan:
    """Decide what to do with the caller's final ``text``. Pure: ``state`` is not modified; the
    next state is ``Plan.state``. Never raises for any text."""
    s = copy.deepcopy(state)
    s.turn += 1
    u = analyze(text)
    p = _plan(u, s)
    p.state = s
    return p


def _plan(u: Utterance, s: DialogState) -> Plan:
    yes = u.has(*_YES) and not u.has("no", "nope", "don't", "not")
    no = u.has(*_NO)
    has_new = bool(u.order_ids or u.days or u.times or u.phones or u.has(*_MOVE_WORDS, *_OTHER))
    awaiting, s.awaiting = s.awaiting, None

    if s.pending is not None:
        pending, s.pending = s.pending, None
        if (yes or (pending.name == "cancel_appointment" and u.has("cancel"))) and not no:
            if pending.name != "cancel_appointment" or not has_new:
                s.resume = None
                return Plan("confirm", [pending])
        topical = u.has(*_ORDER_WORDS, *_APPT_WORDS, "cancel", *_BYE, *_THANKS)
        if no and not has_new and not topical:
            s.resume = None
            return Plan("decline", slots={"declined": pending.name})
        if not has_new and not topical:  # neither yes nor no: ask again
            s.pending, s.awaiting = pending, awaiting
            return Plan("repeat_confirmation", needs_confirmation=True, slots={"pending": pending})
        if pending.name == "reschedule_appointment" and (u.days or u.times):
            awaiting = "slot"  # "no, how about 4 then?" continues the reschedule
            s.resume = {"intent": "reschedule", "day": pending.args["day"], "time": None}
            s.last_appointment = pending.args["appointment_id"]

    if u.has(*_BYE):
        return Plan("goodbye")

    wants_appt = u.has(*_APPT_WORDS) or (awaiting in ("slot", "which_appointment", "phone"))
    wants_order = u.has(*_ORDER_WORDS) or bool(u.order_ids) and awaiting != "phone"

    if awaiting == "phone" and u.phones:
        return Plan("identify", [ToolCall("list_appointments", {"customer_phone": u.phones[-1]})])

    if u.has("cancel"):
        if wants_order and not u.has(*_APPT_WORDS):
            return Plan("unsupported", slots={"what": "cancel_order"})
        return _appointment_action(u, s, "cancel", awaiting)
    if u.has(*_MOVE_WORDS) and (wants_appt or u.days or u.times) and not u.order_ids:
        return _appointment_action(u, s, "reschedule", awaiting)
    if awaiting in ("slot", "which_appointment") and (u.days or u.times or _service_in(u)):
        return _appointment_action(u, s, (s.resume or {}).get("intent", "reschedule"), awaiting)
    if awaiting == "which_appointment" and u.has("first", "second", "last"):
        return _appointment_action(u, s, (s.resume or {}).get("intent", "reschedule"), awaiting)

    if u.has(*_OTHER) and not u.has(*_APPT_WORDS):
        return _other_order(s)
    if u.order_ids and (wants_order or awaiting == "order_id" or not (u.days or u.times)):
        return Plan("lookup_order", [ToolCall("lookup_order", {"order_id": u.order_ids[-1]})])
    if awaiting == "order_id" and u.numbers:
        return Plan("lookup_order", [ToolCall("lookup_order", {"order_id": u.numbers[-1].digits})])
    if wants_order and not u.has("appointment", "appointments"):
        if u.has("my order", "my package", "my orders") and len(s.orders) == 1:
            return Plan("lookup_order", [ToolCall("lookup_order", {"order_id": s.orders[0]})])
        s.awaiting = "order_id"
        return Plan("ask_order_id")
    if wants_appt:
        if u.days or u.times:
            return _appointment_action(u, s, "reschedule", awaiting)
        if not s.identified:
            s.awaiting, s.resume = "phone", {"intent": "list"}
            return Plan("ask_phone")
        return Plan(
            "list_appointments",
            [ToolCall("list_appointments", {"customer_phone": s.caller_phone})],
        )
    if u.has(*_THANKS):
        return Plan("thanks")
    if u.has(*_HELLO):
        return Plan("greet")
    if yes or no:
        return Plan("ack")
    if awaiting:  # the question was not answered: ask again
        s.awaiting = awaiting
        return Plan({"order_id": "ask_order_id", "slot": "ask_slot", "phone": "ask_phone",
                     "which_appointment": "ask_which_appointment"}.get(awaiting, "unknown"))  # fmt: skip
    return Plan("unknown")


def _other_order(s: DialogState) -> Plan:
    """"No, the other order": the one candidate order that is not the last one discussed."""
    others = [o for o in s.candidate_orders if o != s.last_order]
    if s.last_order is not None and len(others) == 1:
        return Plan("other_order", [ToolCall("lookup_order", {"order_id": others[0]})])
    s.awaiting = "order_id"
    return Plan("ask_other_order", slots={"orders": others})


def _service_in(u: Utterance) -> str | None:
    found = [svc for svc in SERVICES if u.has(svc, svc + "s")]
    return found[-1] if found else None


def _pick_appointment(u: Utterance, s: DialogState, choosing: bool) -> dict[str, Any] | None | str:
    """The appointment the caller means; ``"ambiguous"`` when several fit. While ``choosing``
    (answering "which one?"), a weekday or "first"/"last" names the appointment."""
    booked = s.appointments
    svc = _service_in(u)
    if svc:
        booked = [a for a in booked if a["service"] == svc]
    elif s.last_appointment is not None and s.appointment(s.last_appointment):
        return s.appointment(s.last_appointment)
    if choosing and len(booked) > 1 and u.days:  # "the Friday one"
        on_day = [a for a in booked if _day_time_of(a["slot"])[0] == u.days[-1]]
        booked = on_day or booked
    if choosing and len(booked) > 1 and u.has("first", "second", "last"):
        return booked[0] if u.has("first") else booked[-1]
    if len(booked) == 1:
        return booked[0]
    return "ambiguous" if booked else None


def _appointment_action(u: Utterance, s: DialogState, intent: str, awaiting: str | None) -> Plan:
    """Cancel or reschedule: find the appointment, the day and time; ask for what is missing."""
    resume = s.resume or {}
    day = u.last_day() or resume.get("day")
    time = u.last_time() or resume.get("time")
    s.resume = {"intent": intent, "day": day, "time": time}
    if not s.identified:
        s.awaiting = "phone"
        return Plan("ask_phone")
    if not s.appointments:
        s.resume = None
        return Plan("no_appointments")
    # while choosing which appointment, the day names the appointment, not the new slot
    choosing = awaiting == "which_appointment"
    appt = _pick_appointment(u, s, choosing)
    if choosing:
        day, time = resume.get("day"), resume.get("time")
        s.resume = {"intent": intent, "day": day, "time": time}
    if appt == "ambiguous" or appt is None:
        s.awaiting = "which_appointment"
        return Plan("ask_which_appointment", slots={"appointments": list(s.appointments)})
    assert isinstance(appt, dict)
    aid = appt["appointment_id"]
    s.last_appointment = aid
    if intent == "cancel":
        s.resume = None
        s.pending = ToolCall("cancel_appointment", {"appointment_id": aid})
        s.awaiting = "confirm"
        return Plan("confirm_cancel", needs_confirmation=True, slots={"appointment": appt})
    if intent == "list":
        s.resume = None
        return Plan(
            "list_appointments",
            [ToolCall("list_appointments", {"customer_phone": s.caller_phone})],
        )
    if day is None and time is None:
        s.awaiting = "slot"
        return Plan("ask_slot", slots={"appointment": appt})
    cur_day, cur_time = _day_time_of(appt["slot"])
    day = day or cur_day
    time = resolve_time(s, aid, day, time or cur_time)
    s.resume = None
    call = ToolCall("reschedule_appointment", {"appointment_id": aid, "day": day, "time": time})
    return Plan("reschedule_appointment", [call], slots={"appointment": appt})


# ----------------------------------------------------------------------------------- observing


def observe(plan_: Plan, results: list[dict], state: DialogState) -> DialogState:
    """Fold the results of ``plan_.tool_calls`` (same order) into a copy of ``state``.

    A failed lookup re-asks for the order number; a taken slot proposes the nearest free time
    as a pending reschedule (confirmed by "yes"); a successful lookup becomes ``last_order``.
    """
    s = copy.deepcopy(state)
    for call, result in zip(plan_.tool_calls, results):
        err = "error" in result
        if call.name == "lookup_order":
            if err:
                s.awaiting = "order_id"
            else:
                s.last_order = result["order_id"]
                if result["order_id"] not in s.mentioned_orders:
                    s.mentioned_orders.append(result["order_id"])
        elif call.name == "list_appointments" and not err:
            s.caller_phone = result["customer_phone"]
            s.customer_name = result["customer_name"]
            s.appointments = [dict(a) for a in result["appointments"]]
            resume, s.resume = s.resume, None
            if plan_.intent == "identify" and resume and resume.get("intent") in (
                "cancel",
                "reschedule",
            ):
                if len(s.appointments) == 1:
                    a = s.appointments[0]
                    s.last_appointment = a["appointment_id"]
                    if resume["intent"] == "cancel":
                        s.pending = ToolCall("cancel_appointment", {"appointment_id": a["appointment_id"]})
                        s.awaiting = "confirm"
                    else:
                        s.resume, s.awaiting = resume, "slot"
                else:
                    s.resume, s.awaiting = resume, "which_appointment"
        elif call.name == "list_appointments":
            s.awaiting = "phone"
        elif call.name == "reschedule_appointment":
            aid = call.args["appointment_id"]
            if not err:
                s.last_appointment = aid
                for a in s.appointments:
                    if a["appointment_id"] == aid:
                        a["slot"] = result["slot"]
                s.taken = {k: v for k, v in s.taken.items() if v != aid} | {result["slot"]: aid}
            elif result.get("reason") == "taken":
                alt = nearest_free(s, aid, call.args["day"], call.args["time"])
                if alt is not None:
                    s.pending = ToolCall("reschedule_appointment", {**call.args, "time": alt})
                    s.awaiting = "slot_confirm"
                else:
                    s.awaiting, s.resume = "slot", {"intent": "reschedule", "day": None, "time": None}
            else:
                s.awaiting, s.resume = "slot", {"intent": "reschedule", "day": None, "time": None}
        elif call.name == "cancel_appointment" and not err:
            s.appointments = [a for a in s.appointments if a["appointment_id"] != call.args["appointment_id"]]
            s.taken = {k: v for k, v in s.taken.items() if v != call.args["appointment_id"]}
            if s.last_appointment == call.args["appointment_id"]:
                s.last_appointment = None
    return s
