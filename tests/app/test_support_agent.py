"""The reference support agent's tools on the real SQLite database, with the caller identified by
the runtime's call context (never by the LLM's arguments)."""

from __future__ import annotations

import pytest

from rejoinder.app import support
from rejoinder.app.db import appointments_of
from rejoinder.tools import CallContext, ToolError

from demo_phones import AISHA, JAMES, MARIA


@pytest.fixture
async def call():
    """Open calls by caller ID; each is closed (and its database deleted) afterwards."""
    opened: list[CallContext] = []

    def open_(phone: str | None) -> CallContext:
        ctx = CallContext(f"t{len(opened)}", phone)
        support.open_call(ctx)
        opened.append(ctx)
        return ctx
    yield open_
    for ctx in opened:
        support.close_call(ctx)


async def run(ctx, name, **args):
    return await support.agent.tools[name].run(ctx, args)


async def test_lookup_order_of_the_caller(call):
    ctx = call(MARIA)
    out = await run(ctx, "lookup_order", order_id="4217")
    assert out == {"order 4217": "the wireless headphones of order 4217 shipped on Friday, "
                                 "December 4 and should arrive Wednesday, December 9"}
    assert list(await run(ctx, "lookup_order", order_id="four two one seven")) == ["order 4217"]
    assert (await run(ctx, "lookup_order", order_id="#5031"))["order 5031"] == (
        "the phone case of order 5031 is still processing and should arrive Monday, December 14")
    assert list(await run(ctx, "lookup_order", order_id=4217)) == ["order 4217"]  # a JSON number
    with pytest.raises(ToolError, match="invalid argument 'order_id'"):  # not 4 digits
        await run(ctx, "lookup_order", order_id="42170")


async def test_another_customers_order_is_never_disclosed(call):
    ctx = call(MARIA)
    with pytest.raises(ToolError) as err:
        await run(ctx, "lookup_order", order_id="3388")  # James Chen's coffee grinder
    msg = str(err.value)
    assert "no order 3388" in msg and "4217, 5031" in msg
    assert "grinder" not in msg and "James" not in msg and "delivered" not in msg


async def test_unknown_caller_gets_nothing(call):
    ctx = call("+19995550000")
    with pytest.raises(ToolError, match="not on any account"):
        await run(ctx, "lookup_order", order_id="4217")
    with pytest.raises(ToolError, match="not on any account"):
        await run(ctx, "list_appointments")
    assert support.greeting(ctx) == "Thanks for calling Maple and Company. How can I help?"


async def test_list_appointments_and_greeting(call):
    ctx = call(AISHA)
    out = await run(ctx, "list_appointments")
    assert out == {"appointments": "a consultation on Thursday at 10 AM and a haircut on Friday at 2 PM"}
    assert support.greeting(ctx).startswith("Hi Aisha, thanks for calling")


async def test_reschedule_is_reversible_and_compensated(call):
    ctx = call(MARIA)
    tool = support.agent.tools["reschedule_appointment"]
    assert tool.reversible
    args = {"day": "Thursday", "time": "afternoon"}
    out = await tool.run(ctx, args)
    assert out == {"moved": "the haircut is moved from Tuesday at 10 AM to Thursday at 2 PM"}
    assert support.final_state(ctx)["appointments"]["101"]["slot"] == "2026-12-10T14:00"
    await tool.compensate(ctx, args, out)
    assert support.final_state(ctx)["appointments"]["101"]["slot"] == "2026-12-08T10:00"


async def test_reschedule_rules(call):
    ctx = call(AISHA)  # two appointments: which one must be said
    with pytest.raises(ToolError, match="which appointment"):
        await run(ctx, "reschedule_appointment", day="Monday", time="11:00")
    with pytest.raises(ToolError, match="outside opening hours"):
        await run(ctx, "reschedule_appointment", day="Saturday", time="11:00", service="haircut")
    with pytest.raises(ToolError, match="already taken"):  # Tom's consultation is Friday 11:00
        await run(ctx, "reschedule_appointment", day="Friday", time="11 am", service="haircut")
    with pytest.raises(ToolError, match="invalid argument 'day'"):
        await run(ctx, "reschedule_appointment", day="someday", time="11:00", service="haircut")
    with pytest.raises(ToolError, match="invalid argument 'time'.*cannot read the time 'soon'"):
        await run(ctx, "reschedule_appointment", day="Monday", time="soon", service="haircut")
    out = await run(ctx, "reschedule_appointment", day="monday", time="3:30 pm", service="Haircut")
    assert out["moved"].endswith("to Monday at 3:30 PM")


async def test_cancel_is_irreversible_and_only_touches_the_callers_own(call):
    ctx = call(MARIA)
    tool = support.agent.tools["cancel_appointment"]
    assert not tool.reversible
    with pytest.raises(ToolError, match="which appointment"):  # Maria has no consultation (James does)
        await tool.run(ctx, {"service": "consultation"})
    state = support.final_state(ctx)["appointments"]
    assert state["102"]["status"] == "booked" and state["101"]["status"] == "booked"
    with pytest.raises(ToolError, match="which appointment"):  # a service she does not have
        await tool.run(ctx, {"service": "the consultation"})
    assert await tool.run(ctx, {}) == {"cancelled": "your haircut on Tuesday at 10 AM is cancelled"}
    assert support.final_state(ctx)["appointments"]["101"]["status"] == "cancelled"
    with pytest.raises(ToolError, match="irreversible"):
        await tool.compensate(ctx, {}, {})


@pytest.mark.parametrize("text,hm", [("15:00", (15, 0)), ("3 pm", (15, 0)), ("3:30 PM", (15, 30)),
                                     ("3", (15, 0)), ("10", (10, 0)), ("9 a.m.", (9, 0)),
                                     ("12 pm", (12, 0)), ("afternoon", (14, 0)),
                                     ("Thursday morning", (10, 0)), ("Tuesday at 10 AM", (10, 0)),
                                     ("4 in the afternoon", (16, 0)), ("two", (14, 0)),
                                     ("9 in the morning", (9, 0)), ("2pm", (14, 0)),
                                     ("Monday at 2. Sorry, I mean Tuesday at 3", (15, 0)),
                                     ("three o'clock", (15, 0)), ("11 o'clock", (11, 0)),
                                     ("nine o'clock in the morning", (9, 0)),
                                     ("Thursday at half two", (14, 30)), ("half past 4", (16, 30)),
                                     ("quarter past one", (13, 15)), ("quarter to ten", (9, 45)),
                                     ("quarter to one", (12, 45)), ("at two thirty", (14, 30)),
                                     ("ten forty-five", (10, 45)), ("eleven fifteen", (11, 15)),
                                     ("half past nine in the morning", (9, 30)),
                                     ("Monday at 2, no, Tuesday at half three", (15, 30)),
                                     ("quarter past 3 p.m.", (15, 15))])
def test_parse_time(text, hm):
    assert support.parse_time(text) == hm


def test_parse_time_rejects_nonsense():
    for bad in ("", "soon", "25:00", "7:75", "half an hour later"):
        with pytest.raises(ValueError):
            support.parse_time(bad)


async def test_each_call_gets_a_fresh_database_that_is_deleted_when_it_ends():
    a, b = CallContext("a", JAMES), CallContext("b", JAMES)
    support.open_call(a)
    support.open_call(b)
    folder = a.state["db_dir"]
    await support.agent.tools["cancel_appointment"].run(a, {})
    assert support.final_state(a)["appointments"]["102"]["status"] == "cancelled"
    assert support.final_state(b)["appointments"]["102"]["status"] == "booked"  # calls are isolated
    support.close_call(a)
    support.close_call(b)
    assert not folder.exists()
    assert support.final_state(a) is None


def test_the_tools_the_llm_sees():
    schemas = {t.name: t.schema for t in support.agent.tools.values()}
    assert set(schemas) == {"lookup_order", "list_appointments", "reschedule_appointment",
                            "cancel_appointment", "transfer_to_human", "end_call"}
    assert schemas["lookup_order"].parameters == {
        "type": "object", "additionalProperties": False, "required": ["order_id"],
        "properties": {"order_id": {"type": "string", "pattern": "^[0-9]([,. -]{0,2}[0-9]){3}$",
                                    "description": "the order number as the caller said it "
                                                   "(four digits)."}}}
    # the spoken forms the LLM may copy from the transcript all reach the tool as four digits
    assert [support.lookup_order.parse({"order_id": v})["order_id"]
            for v in ("4217", "4, 2, 1, 7", "4 2 1 7", "4-2-1-7", "four two one seven",
                      "4, 2, 1. 7")] == ["4217"] * 6
    # digits parted by a sentence's full stop (Whisper at a longer pause) are one order number
    from rejoinder.adapters._toolcall import grounded_values
    order = schemas["lookup_order"].parameters["properties"]["order_id"]
    assert grounded_values(order, "Yeah, it's... 5, 0, 3. One.") == ["5, 0, 3. 1"]
    assert grounded_values(order, "They ordered numbers. Two, four, five. 9") == ["2, 4, 5. 9"]
    assert grounded_values(order, "It was 2 p.m. 4 days ago.") == []
    move = schemas["reschedule_appointment"].parameters
    assert move["required"] == ["day", "time"]
    assert move["properties"]["day"]["enum"] == ["Monday", "Tuesday", "Wednesday", "Thursday",
                                                 "Friday", "Saturday", "Sunday"]
    # the time and the service can be grounded in the caller's words: a pattern, an enum
    assert move["properties"]["time"]["pattern"] == support.TIME_PATTERN
    assert move["properties"]["service"]["enum"] == ["haircut", "consultation", ""]
    assert [support.reschedule_appointment.parse({"day": "monday", "time": t})["time"]
            for t in ("3 pm", "Tuesday at 3 PM", "15:00", "three", "3 in the afternoon")] == ["15:00"] * 5
    # the quarter and half hours as spoken are times the argument is grounded in, to the minute
    time = move["properties"]["time"]
    assert grounded_values(time, "Could I move it to Thursday at half two instead?")[0] == "at half two"
    assert grounded_values(time, "Friday, quarter to four if you can") == ["quarter to four", "quarter to 4"]
    assert grounded_values(time, "half an hour later") == []
    assert [support.reschedule_appointment.parse({"day": "Friday", "time": t})["time"]
            for t in ("at half two", "half past two", "two thirty", "quarter to 3")] == [
                "14:30", "14:30", "14:30", "14:45"]
    assert support.reschedule_appointment.parse(
        {"day": "Monday", "time": "3", "service": "the Haircut, 2pm"})["service"] == "haircut"
    # a whole hour said with "o'clock" is a time the argument can be grounded in
    from rejoinder.adapters._toolcall import grounded_values
    time = move["properties"]["time"]
    assert grounded_values(time, "Friday, sorry, make it 4 o'clock.") == ["4 o'clock"]
    assert grounded_values(time, "at ten o'clock in the morning, please") == [
        "at ten o'clock in the morning"]
    assert support.reschedule_appointment.parse(
        {"day": "Friday", "time": "at ten o'clock in the morning"})["time"] == "10:00"
    # "four p.m." transcribed "For PM" is still a time; "to PM" is not (no hour)
    assert grounded_values(time, "On Wednesday instead. For PM, if you've got it.") == ["4 PM"]
    assert support.reschedule_appointment.parse({"day": "Wednesday", "time": "4 PM"})["time"] == "16:00"
    assert grounded_values(time, "Could you move it to PM?") == []
    assert grounded_values(time, "I'm looking for something on Friday.") == []
    # no tool takes the caller's identity: it comes from the runtime
    for s in schemas.values():
        assert not {"phone", "customer_phone", "ctx", "customer_id"} & set(s.parameters["properties"])
    assert schemas["list_appointments"].parameters["properties"] == {}
    assert "said yes" in schemas["cancel_appointment"].description
    assert appointments_of  # the database module is the one the tools use


def test_steps_move_on_a_listing_and_cancelling_asks_first():
    """Every tool is callable from the start (cancelling asks first, ``confirm``); listing the
    appointments moves the call to the step whose instructions cover changing one."""
    from rejoinder.flow import Position, move

    start = Position.start(support.agent)
    assert start.label() == "main" and set(start.allowed()) == set(support.agent.tools)
    assert support.agent.tools["cancel_appointment"].confirm_fn is not None
    pos, reason = move(start, None, "list_appointments", True)
    assert (pos.label(), reason) == ("appointments", "next") and "cancel" in pos.step.instructions
    assert move(start, None, "list_appointments", False) is None  # a failed listing moves nothing
    assert move(start, None, "lookup_order", True) is None


async def test_the_only_appointment_is_used_when_the_service_argument_names_none(call):
    ctx = call(MARIA)  # one appointment: a haircut on Tuesday at 10 AM
    out = await run(ctx, "reschedule_appointment", day="Wednesday", time="Thursday at 11 AM",
                    service="2pm")  # an LLM's misplaced words: no service named
    assert out == {"moved": "the haircut is moved from Tuesday at 10 AM to Wednesday at 11 AM"}
    assert (await run(ctx, "cancel_appointment", service="the haircut")) == {
        "cancelled": "your haircut on Wednesday at 11 AM is cancelled"}


async def test_order_sentences_for_every_status(call):
    ctx = call(JAMES)
    assert await run(ctx, "lookup_order", order_id="3388") == {
        "order 3388": "the coffee grinder of order 3388 was delivered on Thursday, December 3"}
    assert await run(ctx, "lookup_order", order_id="6120") == {
        "order 6120": "the desk lamp of order 6120 was cancelled"}
    assert support.appointments_phrase([]) == "none booked"


async def test_cancelling_asks_the_caller_first(call):
    tool = support.agent.tools["cancel_appointment"]
    assert await tool.question(call(MARIA), {}) == "shall I cancel your haircut on Tuesday at 10 AM?"
    with pytest.raises(ToolError, match="which appointment"):  # Aisha has two
        await tool.question(call(AISHA), {})
