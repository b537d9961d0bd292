"""The reference application: a phone support assistant for orders and appointments.

Per caller turn the runtime does::

    plan = assistant.plan(final_text)             # deterministic policy, updates the state
    results = [assistant.execute(c) for c in plan.tool_calls]   # the runtime times these
    reply = assistant.compose(plan, results)      # folds results into the state
    speak(reply.first_clause)                     # at once
    speak(LLM continuation of reply.llm_request, or reply.tail when there is no LLM)
    assistant.heard(what_the_caller_actually_heard)

Reversible calls may be executed on a tentative transcript and undone with
:meth:`SupportAssistant.compensate`; use ``plan(text, commit=False)`` for such a preview.
"""

from __future__ import annotations

import re

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from rejoinder.app import db
from rejoinder.app.history import ChatHistory
from rejoinder.app.nlu import analyze
from rejoinder.app.policy import DialogState, Plan, ToolCall, observe
from rejoinder.app.policy import plan as rule_plan
from rejoinder.app.tools import TOOLS, Tool, tool_choice_schema
from rejoinder.ports import ChatMessage, LLMPort, LLMRequest

BUSINESS = "Maple and Company"
SYSTEM_PROMPT = (
    f"You are the friendly phone assistant of {BUSINESS}, a small shop and salon. You help "
    "callers with their orders and appointments. Speak in short, plain sentences. Use only the "
    "facts you are given; never invent order numbers, dates, times or prices."
)
# Domain vocabulary for the recogniser (Whisper's initial prompt biases spelling and word choice):
# measured on the synthetic caller voice, "haircut" stopped coming out as "fair cut".
STT_PROMPT = f"{BUSINESS}: orders, order numbers, appointments, haircut, consultation."
TOOL_PROMPT = (
    "Pick the one tool that serves the caller's last request and answer with JSON only, "
    'e.g. {"tool": "lookup_order", "args": {"order_id": "4217"}}. Use {"tool": "none"} when no '
    "tool fits. Tools:\n"
)
_FACT_WORDS = re.compile(
    r"\d+|\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|"
    r"april|may|june|july|august|september|october|november|december|processing|shipped|"
    r"delivered|arrived|cancel+ed|canceled|booked|tomorrow|today|yesterday|am|pm|noon|midnight|"
    r"morning|afternoon|evening|refund\w*|return\w*)\b", re.IGNORECASE)


_META_WORDS = re.compile(r"\b(?:assistant|facts?|sentence|continue|caller|prompt|json|tool)\b",
                         re.IGNORECASE)


def _ngrams(text: str, n: int = 4) -> set[tuple[str, ...]]:
    w = re.findall(r"[a-z0-9']+", text.lower())
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def grounded(continuation: str, facts: str) -> bool:
    """Every fact-like token of ``continuation`` occurs in ``facts`` (case-insensitive), and it
    does not echo the instructions (no meta words such as "assistant" or "facts", no 4-word run
    copied from the prompt). An empty continuation is not grounded (there is nothing to say)."""
    if not continuation.strip() or _META_WORDS.search(continuation):
        return False
    if _ngrams(continuation) & _ngrams(SYSTEM_PROMPT + " " + _CONTINUE_HINT):
        return False
    known = {m.group(0).lower() for m in _FACT_WORDS.finditer(facts)}
    return all(m.group(0).lower() in known for m in _FACT_WORDS.finditer(continuation))


_CONTINUE_HINT = "Continue the assistant's reply with at most one short sentence that uses only these facts."
_CONTINUE_INTENTS = {"lookup_order", "other_order", "reschedule_appointment", "confirm",
                     "list_appointments", "identify"}  # fmt: skip


@dataclass(frozen=True)
class Reply:
    """What the agent says. ``first_clause`` is spoken at once; then either the LLM's
    continuation of ``llm_request`` (which has ``prefix=first_clause``) or the deterministic
    ``tail`` (also when the continuation comes back empty: a 135M model sometimes stops at
    once). ``end_call`` asks the runtime to hang up after speaking."""

    first_clause: str
    tail: str = ""
    llm_request: LLMRequest | None = None
    intent: str = ""
    end_call: bool = False
    facts: str = ""

    def grounded(self, continuation: str) -> bool:
        """True when every fact-like word of an LLM ``continuation`` (numbers, days, months,
        statuses, times of day) appears in this reply's facts — a 135M model sometimes changes
        a tense or a date; such a continuation is dropped and :attr:`tail` is spoken instead."""
        return grounded(continuation, self.facts)

    @property
    def text(self) -> str:
        """The full deterministic reply (first clause + tail)."""
        return f"{self.first_clause} {self.tail}".strip()


class SupportAssistant:
    """One call's assistant over a SQLite connection (see :mod:`rejoinder.app.db`).

    ``caller_phone`` is the caller ID (identifies the customer when it matches one);
    ``llm`` enables LLM phrasing (``Reply.llm_request``) and is the default for
    :meth:`plan_with_llm`.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        caller_phone: str | None = None,
        llm: LLMPort | None = None,
        *,
        max_turns: int = 6,
    ) -> None:
        self.conn = conn
        self.llm = llm
        self.tools: dict[str, Tool] = dict(TOOLS)
        self.history = ChatHistory(max_turns)
        self.system_prompt = SYSTEM_PROMPT
        customer = db.customer_by_phone(conn, caller_phone)
        self.state = DialogState(caller_phone=customer["phone"] if customer else None)
        self._refresh()
        first = self.state.customer_name.split()[0] if self.state.customer_name else None
        hello = f"Hi {first}, thanks" if first else "Thanks"
        self.greeting = (
            f"{hello} for calling {BUSINESS}. I can check on an order or help with an "
            "appointment. How can I help?"
        )

    # ------------------------------------------------------------------------------- state

    def _refresh(self) -> None:
        """Mirror the caller's orders, booked appointments and all taken slots into the state."""
        s = self.state
        customer = db.customer_by_phone(self.conn, s.caller_phone) if s.caller_phone else None
        if customer is None:
            s.customer_name, s.orders, s.appointments = None, [], []
        else:
            s.customer_name = customer["name"]
            s.orders = [o["id"] for o in db.orders_of(self.conn, customer["id"])]
            s.appointments = [
                {"appointment_id": a["id"], "service": a["service"], "slot": a["slot"]}
                for a in db.appointments_of(self.conn, customer["id"])
                if a["status"] == "booked"
            ]
        s.taken = db.booked_slots(self.conn)

    def plan(self, text: str, *, commit: bool = True) -> Plan:
        """Plan the caller's final ``text`` with the rule policy. ``commit=False`` previews it
        (state and history untouched), e.g. for a tentative transcript."""
        self._refresh()
        p = rule_plan(text, self.state)
        if commit:
            self.state = p.state
            self.history.add_user(text)
        return p

    def adopt(self, plan: Plan, text: str) -> None:
        """Commit a plan previewed with ``plan(text, commit=False)`` for the same final ``text``
        (the runtime may already have run its reversible tools on the tentative transcript)."""
        self.state = plan.state
        self.history.add_user(text)

    def heard(self, text: str) -> None:
        """Record what the caller actually heard of the agent's reply (may be empty)."""
        self.history.add_assistant_heard(text)

    # ------------------------------------------------------------------------------- tools

    def execute(self, call: ToolCall) -> dict:
        """Run one tool call now (synchronous SQLite, ~ms). Errors come back as
        ``{"error": ...}``; nothing is raised for unknown tools or bad arguments."""
        tool = self.tools.get(call.name)
        if tool is None:
            return {"error": f"unknown tool {call.name!r}"}
        return tool.invoke(self.conn, call.args)

    def compensate(self, call: ToolCall, result: dict) -> None:
        """Undo a reversible call that returned ``result``. Raises ValueError for an
        irreversible tool or an unknown tool name."""
        tool = self.tools.get(call.name)
        if tool is None:
            raise ValueError(f"unknown tool {call.name!r}")
        tool.undo(self.conn, call.args, result)

    # ----------------------------------------------------------------------------- compose

    def compose(self, plan: Plan, results: list[dict]) -> Reply:
        """Fold ``results`` (one per ``plan.tool_calls``) into the state and word the reply."""
        before = self.state
        self.state = observe(plan, results, self.state)
        first, tail, facts = _words(plan, results, before, self.state)
        req = None
        if self.llm is not None and facts and plan.intent in _CONTINUE_INTENTS:
            req = self.continuation_request(first, facts)
        return Reply(first, tail, req, plan.intent, end_call=plan.intent == "goodbye", facts=facts or "")

    def continuation_request(self, first_clause: str, facts: str) -> LLMRequest:
        """Ask the LLM to continue ``first_clause`` in ≤ 1 short sentence from ``facts``.

        The stable system prompt comes first (KV-cache reuse across turns); the per-turn facts
        follow the history as a second system message.
        """
        msgs = self.history.messages(self.system_prompt) + (
            ChatMessage(
                "system",
                f"Facts: {facts} {_CONTINUE_HINT}",
            ),
        )
        return LLMRequest(msgs, max_tokens=40, temperature=0.2, prefix=first_clause, stop=("\n",))

    # ----------------------------------------------------------------------- LLM tool choice

    async def plan_with_llm(self, text: str, llm: LLMPort | None = None) -> Plan:
        """Let the LLM choose the tool call (JSON-schema constrained), validated with pydantic
        and grounded in the transcript and the caller's records; otherwise the rule plan.

        An irreversible choice still only sets the pending confirmation. Raises ValueError when
        neither ``llm`` nor ``self.llm`` is set; an LLM failure (:class:`PortError`) falls back.
        """
        model = llm or self.llm
        if model is None:
            raise ValueError("plan_with_llm needs an LLM")
        self._refresh()
        rule = rule_plan(text, self.state)
        call = None
        try:
            out = "".join([d async for d in model.stream(self.tool_request(text))])
            call = self._validated_call(out, text)
        except Exception:  # noqa: BLE001 — any model failure means: use the rules
            call = None
        p = rule if call is None else self._plan_from_call(call, rule)
        self.state = p.state
        self.history.add_user(text)
        return p

    def tool_request(self, text: str) -> LLMRequest:
        """The constrained tool-choice request for the caller's ``text``."""
        tools = "\n".join(f"- {t.name}: {t.description}" for t in self.tools.values())
        s = self.state
        ctx = []
        if s.identified:
            ctx.append(f"Caller phone {s.caller_phone}, orders {', '.join(s.orders) or 'none'}.")
            ctx += [
                f"Appointment {a['appointment_id']}: {a['service']} on {db.speak_slot(a['slot'])}."
                for a in s.appointments
            ]
        if s.last_order:
            ctx.append(f"Last order discussed: {s.last_order}.")
        msgs = (
            ChatMessage("system", TOOL_PROMPT + tools + ("\n" + " ".join(ctx) if ctx else "")),
            ChatMessage("user", text),
        )
        return LLMRequest(msgs, max_tokens=64, temperature=0.0, json_schema=tool_choice_schema(self.tools))

    def _validated_call(self, out: str, text: str) -> ToolCall | None:
        """Parse + validate the LLM's JSON; None unless valid and grounded."""
        try:
            obj = json.loads(out)
            name, args = obj["tool"], obj.get("args", {})
            tool = self.tools[name]
            params = tool.parse(args)
        except (ValueError, KeyError, TypeError, ValidationError):
            return None
        args = params.model_dump()
        u, s = analyze(text), self.state
        if name == "lookup_order":
            spoken = set(u.order_ids) | {r.digits for r in u.numbers}
            ok = args["order_id"] in spoken
        elif name == "list_appointments":
            phone = args["customer_phone"]
            ok = any(db.phones_match(phone, p) for p in (s.caller_phone or "", *u.phones))
        elif name == "reschedule_appointment":
            appt = s.appointment(args["appointment_id"])
            ok = appt is not None and args["day"].capitalize() in u.days
        else:
            ok = s.appointment(args["appointment_id"]) is not None and u.has("cancel")
        return ToolCall(name, args) if ok else None

    def _plan_from_call(self, call: ToolCall, rule: Plan) -> Plan:
        s = rule.state
        s.awaiting, s.resume, s.pending = None, None, None
        if call.name == "cancel_appointment":
            s.pending, s.awaiting = call, "confirm"
            s.last_appointment = call.args["appointment_id"]
            appt = s.appointment(call.args["appointment_id"])
            return Plan("confirm_cancel", [], True, s, {"appointment": appt}, source="llm")
        if call.name == "reschedule_appointment":
            s.last_appointment = call.args["appointment_id"]
            appt = s.appointment(call.args["appointment_id"])
            return Plan(call.name, [call], False, s, {"appointment": appt}, source="llm")
        return Plan(call.name, [call], False, s, source="llm")


# ------------------------------------------------------------------------------------ wording


def _appt_phrase(a: dict[str, Any] | None) -> str:
    return f"your {a['service']} on {db.speak_slot(a['slot'])}" if a else "your appointment"


def _list_phrase(appts: list[dict[str, Any]]) -> str:
    parts = [f"a {a['service']} on {db.speak_slot(a['slot'])}" for a in appts]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _order_words(r: dict[str, Any], other: bool) -> tuple[str, str, str]:
    oid = r["order_id"]
    head = f"Your other order, {oid}," if other else f"Order {oid}"
    item, status = r["item"], r["status"]
    arrive = db.speak_date(r["arrival_date"]) if r["arrival_date"] else None
    facts = f"Order {oid} is the {item}; status {status}."
    if status == "shipped":
        first = f"{head} has shipped,"
        tail = f"your {item} should arrive on {arrive}." if arrive else f"your {item} is on its way."
        facts += f" Shipped {db.speak_date(r['ship_date'])}." if r["ship_date"] else ""
    elif status == "processing":
        first = f"{head} is still being processed,"
        tail = f"your {item} should arrive around {arrive}." if arrive else "it ships soon."
    elif status == "delivered":
        first = f"{head} was delivered on {arrive}," if arrive else f"{head} was delivered,"
        tail = f"it was your {item}. Is there anything else?"
    else:
        first = f"{head} was cancelled,"
        tail = f"so your {item} won't ship. Is there anything else?"
    if arrive:
        facts += f" {'Delivered' if status == 'delivered' else 'Expected arrival'} {arrive}."
    return first, tail, facts


def _words(plan: Plan, results: list[dict], before: DialogState, after: DialogState) -> tuple[str, str, str]:
    """(first clause, deterministic tail, facts for the LLM) for one turn."""
    intent, r = plan.intent, (results[0] if results else {})
    err = r.get("error") if results else None
    anything = "Is there anything else I can help with?"
    if intent in ("lookup_order", "other_order") or (intent == "confirm" and "order_id" in r):
        if err:
            oid = plan.tool_calls[0].args.get("order_id", "")
            return f"I couldn't find order {oid}.", "Could you read me the order number again?", ""
        return _order_words(r, other=intent == "other_order")
    if intent in ("reschedule_appointment", "confirm") and plan.tool_calls and (
        plan.tool_calls[0].name == "reschedule_appointment"
    ):
        if err:
            if after.pending is not None:
                alt = db.speak_time(*db.parse_hhmm(after.pending.args["time"]))
                return f"Sorry, {r['error'][:-1]}.", f"I could do {alt} instead. Shall I book that?", ""
            return f"Sorry, {r['error']}", "What other time would work?", ""
        first = f"Done, your {r['service']} is now {db.speak_slot(r['slot'])}."
        facts = f"The {r['service']} moved from {db.speak_slot(r['previous_slot'])} to {db.speak_slot(r['slot'])}."
        return first, anything, facts
    if intent == "confirm" and plan.tool_calls and plan.tool_calls[0].name == "cancel_appointment":
        if err:
            return f"Sorry, {r['error']}", anything, ""
        first = f"Done, your {r['service']} on {db.speak_slot(r['slot'])} is cancelled."
        return first, anything, f"The {r['service']} on {db.speak_slot(r['slot'])} was cancelled."
    if intent in ("list_appointments", "identify"):
        if err:
            return "I couldn't find an account with that number.", "Could you say the phone number again?", ""
        appts, name = r["appointments"], r["customer_name"].split()[0]
        lead = f"Thanks, {name}. " if intent == "identify" else ""
        if not appts:
            return f"{lead}I don't see any appointments booked for you.", anything, ""
        if after.pending is not None:
            return f"{lead}I see {_list_phrase(appts)}.", "Shall I cancel it?", ""
        if after.awaiting == "slot":
            return f"{lead}I see {_list_phrase(appts)}.", "What day and time would you like instead?", ""
        if after.awaiting == "which_appointment":
            return f"{lead}You have {_list_phrase(appts)}.", "Which one do you mean?", ""
        return f"{lead}You have {_list_phrase(appts)}.", anything, f"Booked: {_list_phrase(appts)}."
    fixed = {
        "confirm_cancel": (f"Just to confirm, shall I cancel {_appt_phrase(plan.slots.get('appointment'))}?", ""),
        "decline": ("Okay, I'll leave it as it is.", anything),
        "ask_order_id": ("Sure, what's the order number?", ""),
        "ask_slot": ("Sure, what day and time would you like?", ""),
        "ask_phone": ("Could you tell me the phone number on your account?", ""),
        "no_appointments": ("I don't see any booked appointments for you.", anything),
        "unsupported": ("I'm sorry, I can't cancel orders by phone,", "but I can check on an order for you."),
        "greet": ("Hi! How can I help you today?", ""),
        "thanks": ("You're welcome!", anything),
        "goodbye": ("Thanks for calling, goodbye!", ""),
        "ack": ("Okay.", anything),
        "unknown": ("Sorry, I didn't catch that.", "I can check on an order or change an appointment."),
    }
    if intent == "ask_other_order":
        others = plan.slots.get("orders") or []
        listing = f" I see orders {' and '.join(others)}." if 1 < len(others) <= 3 else ""
        return f"Which order do you mean?{listing}", "Please read me the order number.", ""
    if intent == "ask_which_appointment":
        return f"You have {_list_phrase(plan.slots.get('appointments') or [])}.", "Which one do you mean?", ""
    if intent == "repeat_confirmation":
        pend = plan.slots["pending"]
        if pend.name == "cancel_appointment":
            a = after.appointment(pend.args["appointment_id"])
            return f"Sorry, shall I cancel {_appt_phrase(a)}? Please say yes or no.", "", ""
        alt = db.speak_time(*db.parse_hhmm(pend.args["time"]))
        return f"Shall I move it to {pend.args['day']} at {alt}? Please say yes or no.", "", ""
    first, tail = fixed.get(intent, fixed["unknown"])
    return first, tail, ""
