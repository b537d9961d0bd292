"""The agent under benchmark, asked exactly as the runtime asks it (shared by ``tool_choice.py``
and ``ttft_growth.py``).

Requests are built by the runtime's own :class:`rejoinder.conversation.Conversation` from an
:class:`rejoinder.agent.Agent` (default: the reference support agent, ``--agent`` in the
benchmarks): its instructions as the system message, its tools' schemas (``Tool.schema``, built
from the type hints), its LLM settings, the greeting as the first heard reply, and tool results
from its real tools on a fresh copy of the demo database for a real demo caller. The LLM is built
with the product's default options (``rejoinder.adapters.registry.LlamaOptions``) and warmed as
:meth:`rejoinder.runtime.Runtime.warmup` warms it.

Design variants for ``tool_choice.py``: :func:`variant` adds worked examples to the instructions
and reshapes the tool schemas (:data:`SCHEMAS`) without touching the agent's code.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from typing import Any, Callable

from rejoinder.agent import Agent, call_hook, load_agent
from rejoinder.clock import RealClock
from rejoinder.conversation import Conversation, Step
from rejoinder.events import EventBus
from rejoinder.ports import ChatMessage, LLMRequest, ToolCall
from rejoinder.stages import Stamper
from rejoinder.tools import CallContext

#: The demo caller (Maria Garcia in ``rejoinder.app.db``): orders 4217 and 5031, one booked
#: appointment (haircut, Tuesday at 10 AM).
CALLER = "+15550101"

WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_HHMM = "^([01][0-9]|2[0-3]):[0-5][0-9]$"

#: Constraints a typed signature can declare, by parameter name: "strict" adds a 4-digit order
#: number and a weekday enum; "hhmm" also a 24-hour time pattern.
_STRICT = {"order_id": {"pattern": "^[0-9]{4}$"}, "day": {"enum": WEEKDAYS}}
_HHMM_TIME = {"time": {"pattern": _HHMM}}
_CONSTRAINTS = ("enum", "pattern", "const", "format", "minimum", "maximum", "minLength", "maxLength")


def _props(schema: dict[str, Any], fn: Callable[[str, dict[str, Any]], dict[str, Any]]) -> dict:
    out = copy.deepcopy(schema)
    out["properties"] = {k: fn(k, v) for k, v in (out.get("properties") or {}).items()}
    return out


def _overlay(extra: dict[str, dict]) -> Callable[[dict], dict]:
    return lambda s: _props(s, lambda k, v: {**{x: y for x, y in v.items()
                                                  if k not in extra or x not in _CONSTRAINTS},
                                              **extra.get(k, {})})


#: How a design reshapes each tool's parameter schema: "declared" (as the agent's type hints
#: make it), "strict" / "hhmm" (:data:`_STRICT`, plus :data:`_HHMM_TIME`), "bare" (every
#: constraint dropped: only types and descriptions).
SCHEMAS: dict[str, Callable[[dict], dict]] = {
    "declared": lambda s: s,
    "strict": _overlay(_STRICT),
    "hhmm": _overlay({**_STRICT, **_HHMM_TIME}),
    "bare": lambda s: _props(s, lambda k, v: {x: y for x, y in v.items() if x not in _CONSTRAINTS}),
}

#: Worked examples appended to the instructions in the "fewshot" designs, in plain words that
#: any LLM backend reads alike (no example is a benchmark item).
FEW_SHOT = (
    "\n\nExamples: \"Can you check order 1234?\" calls lookup_order with order_id \"1234\". "
    "\"Am I booked in this week?\" calls list_appointments. \"Move my consultation to Tuesday "
    "at 11 am.\" calls reschedule_appointment with day \"Tuesday\", time \"11:00\" and service "
    "\"consultation\". \"Hi there.\" and \"Thanks, bye.\" need no tool: just reply."
)


def _calls(pairs: list[tuple[str, str, dict]]) -> str:
    import json
    return "".join(f"\nCaller: {say}\nYou: <tool_call>[{json.dumps({'name': n, 'arguments': a})}]"
                   "</tool_call>" for say, n, a in pairs)


_CALL_EXAMPLES = [
    ("Can you check order 1234?", "lookup_order", {"order_id": "1234"}),
    ("Am I booked in this week?", "list_appointments", {}),
    ("Move my consultation to Tuesday at 11 am.", "reschedule_appointment",
     {"day": "Tuesday", "time": "11:00", "service": "consultation"})]
_TALK = [("Hi there.", "Hi! How can I help you today?"), ("Thanks, bye.", "You're welcome. Goodbye!")]

#: The same examples in SmolLM2's own call syntax (the "fewcall" designs; model-specific).
FEW_CALL = "\n\nExamples:" + _calls(_CALL_EXAMPLES) + "".join(
    f"\nCaller: {c}\nYou: {y}" for c, y in _TALK)

#: ... with SmolLM2's "no call" form (``<tool_call>[]</tool_call>``) before the small-talk
#: replies (the "nocall" designs: an eager decision then sees ``[]`` as an option).
NO_CALL = "\n\nExamples:" + _calls(_CALL_EXAMPLES) + "".join(
    f"\nCaller: {c}\nYou: <tool_call>[]</tool_call>{y}" for c, y in _TALK)

EXAMPLES = {"": "", "fewshot": FEW_SHOT, "fewcall": FEW_CALL, "nocall": NO_CALL}


def variant(agent: Agent, examples: str = "", schemas: str = "declared",
            extra: dict[str, tuple[str, ...]] | None = None, **llm: Any) -> Agent:
    """``agent`` with ``examples`` appended to its instructions, each tool's schema reshaped by
    :data:`SCHEMAS` ``[schemas]``, ``extra`` labelled utterances (tool name or ``"none"`` → words)
    appended to the tools' ``examples`` and the talk examples, and ``llm`` over its LLM settings
    (e.g. ``history_turns``); the tools and hooks are the agent's own.

    Raises:
        KeyError: an unknown ``schemas`` name.
    """
    shape = SCHEMAS[schemas]
    extra = extra or {}
    tools = []
    for t in agent.tools.values():
        t2 = copy.copy(t)
        # the schema's other fields (irreversible, tells) as the agent's: calls decide with them
        t2.schema = dataclasses.replace(
            t.schema, parameters=shape(t.schema.parameters),
            examples=tuple(t.schema.examples) + tuple(extra.get(t.name, ())))
        tools.append(t2)
    if extra.get("none"):
        llm = {"talk_examples": [*agent.llm.talk_examples, *extra["none"]], **llm}
    return Agent(agent.instructions + examples, name=agent.name, greeting=agent.greeting,
                 tools=tools, llm=agent.llm.model_copy(update=llm), on_call_start=agent.on_call_start,
                 on_call_end=agent.on_call_end, report_state=agent.report_state)


def make_llm(**overrides: Any):
    """The embedded LLM with the product's default options (``LlamaOptions``), ``overrides`` on
    top (e.g. ``tool_mode``)."""
    from rejoinder.adapters.llama_llm import LlamaLLM
    from rejoinder.adapters.registry import LlamaOptions

    return LlamaLLM(**{**LlamaOptions().model_dump(), **overrides})


async def warm(llm, agent: Agent) -> None:
    """Prefill the system turn as ``Runtime.warmup`` does (instructions and tool schemas)."""
    tools = tuple(t.schema for t in agent.tools.values())
    await asyncio.to_thread(llm.warmup, agent.instructions, tools)
    await asyncio.to_thread(llm.warm_gate, tools, tuple(agent.llm.talk_examples))


class DemoCall:
    """One call of ``agent`` with the demo caller: its ``on_call_start`` hook, a
    :class:`Conversation` holding the greeting as heard, and helpers that add turns the way the
    reply loop does. Close it (``await close()``) to run ``on_call_end``."""

    def __init__(self, agent: Agent, call_id: str, caller: str = CALLER) -> None:
        self.agent = agent
        self.ctx = CallContext(call_id, caller)
        self.conv = Conversation(agent, self.ctx, Stamper(call_id, RealClock(), EventBus()))
        self.turn = 0

    async def open(self) -> "DemoCall":
        await call_hook(self.agent.on_call_start, self.ctx)
        g = self.agent.greeting
        text = g(self.ctx) if callable(g) else g
        if text:
            self.conv.add_heard(0, None, [Step(text)], text)
        return self

    async def close(self) -> None:
        await call_hook(self.agent.on_call_end, self.ctx)

    def request(self, say: str, pending: list[ChatMessage] = (), *, final: bool = False) -> LLMRequest:
        """The request of a reply's step to the caller's ``say`` (``pending``: the reply's tool
        calls and results so far), as ``rejoinder.respond`` asks it."""
        return self.conv.request([ChatMessage("user", say), *pending], final_step=final)

    async def run_tool(self, name: str, args: dict) -> tuple[list[ChatMessage], Step]:
        """Run the agent's real tool: the pending messages (assistant call, tool result) and the
        reply step that holds the run."""
        self.turn += 1
        call = ToolCall(self.conv.new_call_id(), name, dict(args))
        run = await self.conv.run_tool(self.turn, call)
        return [ChatMessage("assistant", "", tool_calls=(call,)), run.message()], Step("", [run])

    def heard(self, say: str, reply: str, steps: list[Step] = ()) -> None:
        """Add a finished turn: the caller's ``say``, the steps' tool runs, the ``reply`` heard."""
        self.turn += 1
        self.conv.add_heard(self.turn, say, [*steps, Step(reply)], reply)

    async def context(self, kind: str | None) -> None:
        """Earlier turns before a benchmark utterance: ``"asked_order"`` (the agent asked for the
        order number) or ``"appointments"`` (the caller's appointments were listed by the real
        ``list_appointments``)."""
        if kind is None:
            return
        if kind == "asked_order":
            self.heard("I'm calling about an order.", "Sure, what is your order number?")
        elif kind == "appointments":
            _, step = await self.run_tool("list_appointments", {})
            said = (step.runs[0].result or {}).get("appointments") or "no appointments"
            self.heard("What appointments do I have?", f"You have {said}.", [step])
        else:
            raise ValueError(f"unknown context {kind!r}")


def agent_for(spec: str | None) -> Agent:
    """The agent named by ``--agent`` (default: the reference support agent)."""
    return load_agent(spec)
