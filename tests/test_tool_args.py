"""What the timeline records of a tool call: the arguments the tool ran with (after its
validators), on a scripted timeline with a virtual clock."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, Field

from rejoinder import Agent, tool
from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.events import EventBus, ToolCallEvent

from fakes import tone
from test_session import turn
from test_steps import FlowLLM, call, events_of, stack

Spoken = Annotated[str, Field(pattern=r"^[0-9]([, -]{0,2}[0-9]){3}$"),
                   BeforeValidator(lambda v: re.sub(r"[^0-9]", "", str(v)))]


def agent(ran: list[str]) -> Agent:
    @tool(reversible=True)
    async def lookup_order(order_id: Spoken) -> dict:
        """Look up an order."""
        ran.append(order_id)
        return {"order_id": order_id}
    return Agent("You are a test agent.", tools=[lookup_order])


async def test_recorded_arguments_are_the_validated_ones_and_bad_ones_stay_as_written():
    clock, bus, ran = VirtualClock(), EventBus(), []
    events = events_of(bus, ToolCallEvent)
    llm = FlowLLM(clock, {"It's 4, 2, 1, 7.": call("lookup_order", order_id="4, 2, 1, 7"),
                          "Twelve.": call("lookup_order", order_id="12")})
    res = await run_call([turn(tone(600)), turn(tone(600), after_agent_ms=500)],
                         stack(clock, ["It's 4, 2, 1, 7.", "Twelve."], llm), agent(ran),
                         clock=clock, tail_ms=1500, bus=bus)
    assert res.error is None
    assert ran == ["4217"]  # the tool ran once, with the normalised value
    assert [(e.args, e.error is None) for e in events] == [({"order_id": "4217"}, True),
                                                          ({"order_id": "12"}, False)]
    recorded = [t["args"] for r in res.turns for t in r.tools]
    assert recorded == [{"order_id": "4217"}, {"order_id": "12"}]
    # the LLM's own words stay in its context (the KV cache holds what it wrote)
    after = [r for r in llm.requests if r.messages[-1].role == "tool"]
    assert after[0].messages[-2].tool_calls[0].arguments == {"order_id": "4, 2, 1, 7"}


def test_schemas_say_whose_results_hold_facts_for_the_caller():
    from rejoinder.calltools import end_call, transfer_to_human

    @tool(reversible=True)
    def lookup(order_id: str) -> dict:
        """Look up an order."""
        return {}

    @tool(background=True)
    def export(year: int) -> dict:
        """Export a year of invoices."""
        return {}

    assert lookup.schema.tells  # its result is read to the caller (facts first)
    assert not export.schema.tells  # "started": the result comes later
    assert not end_call().schema.tells and not transfer_to_human().schema.tells  # call control
