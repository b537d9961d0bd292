"""Benchmark: how often the embedded LLM picks the right tool with the right arguments.

Each item is one caller utterance as Whisper transcribes it, sometimes after earlier turns of the
call (the agent asked for the order number; the caller's appointments were listed), labelled with
the acceptable tool calls (or none, for small talk). Each design (``tool_mode`` lazy/eager, few-shot
examples in the system prompt or not, strict or bare argument schemas) answers every item at
temperature 0 through the LLM port, and the table reports:

- right tool: share of tool items where the first call names an acceptable tool;
- right args: … with exactly the labelled arguments;
- no tool: share of small-talk items answered with text and no call;
- latency per decision: time to the complete ToolCall (tool answers) and TTFT (text answers),
  medians in ms;

then what the tool machinery costs before the first delta (tool_choice none vs auto lazy vs auto
eager on the small-talk items, interleaved).

    PYTHONPATH=src .venv/bin/python bench/tool_choice.py [--designs lazy,eager-fewshot]
        [--limit N] [--cost-rounds 3] [--json]

Wall-clock figures are noisy on a shared machine; accuracy at temperature 0 is deterministic.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass

from _support_agent import FEW_SHOT, FEW_SHOT_NO_CALL, SYSTEM, context, tools
from rejoinder.ports import ChatMessage, LLMRequest, PortError, ToolCall

A = 12  # the appointment id in the "appointments" context


@dataclass(frozen=True)
class Item:
    say: str
    expect: tuple[tuple[str, dict | None], ...]  # acceptable (tool, args); args None = any
    ctx: str | None = None

    @property
    def kind(self) -> str:
        return "tool" if self.expect else "none"


def _t(name: str, **args) -> tuple[str, dict]:
    return (name, args)


ITEMS: list[Item] = [
    # order lookups
    Item("4217.", (_t("lookup_order", order_id="4217"),), "asked_order"),
    Item("It's 6402.", (_t("lookup_order", order_id="6402"),), "asked_order"),
    Item("Can you check order 4217?", (_t("lookup_order", order_id="4217"),)),
    Item("Where is my order? The number is 3085.", (_t("lookup_order", order_id="3085"),)),
    Item("I'd like to know the status of order number 5120.", (_t("lookup_order", order_id="5120"),)),
    Item("Order 7734, please.", (_t("lookup_order", order_id="7734"),)),
    Item("Has my order 2291 shipped yet?", (_t("lookup_order", order_id="2291"),)),
    Item("My order number is 9 0 1 3.", (_t("lookup_order", order_id="9013"),)),
    Item("Hi, I'm calling about my order, 1178.", (_t("lookup_order", order_id="1178"),)),
    Item("What's the status of 4420?", (_t("lookup_order", order_id="4420"),)),
    # list appointments
    Item("What appointments do I have?", (_t("list_appointments"),)),
    Item("When is my next appointment?", (_t("list_appointments"),)),
    Item("Do I have anything booked?", (_t("list_appointments"),)),
    Item("Can you tell me my appointments?", (_t("list_appointments"),)),
    Item("I forgot when my appointment is.", (_t("list_appointments"),)),
    # reschedule / cancel without the appointment id known yet: look it up first
    Item("I want to move my haircut to Thursday at 3 pm.", (_t("list_appointments"),)),
    Item("I need to cancel my appointment.", (_t("list_appointments"),)),
    # reschedule with the appointments listed
    Item("I want to move my haircut to Thursday at 3 pm.",
         (_t("reschedule_appointment", appointment_id=A, day="Thursday", time="15:00"),), "appointments"),
    Item("Can you move it to Friday at 10 am?",
         (_t("reschedule_appointment", appointment_id=A, day="Friday", time="10:00"),), "appointments"),
    Item("Reschedule my appointment to Monday at 2:30 pm.",
         (_t("reschedule_appointment", appointment_id=A, day="Monday", time="14:30"),), "appointments"),
    Item("Change it to Wednesday at 11.",
         (_t("reschedule_appointment", appointment_id=A, day="Wednesday", time="11:00"),), "appointments"),
    Item("Let's do Saturday at 9 in the morning instead.",
         (_t("reschedule_appointment", appointment_id=A, day="Saturday", time="09:00"),), "appointments"),
    Item("Move it to Friday. Wait, Thursday afternoon at 4.",
         (_t("reschedule_appointment", appointment_id=A, day="Thursday", time="16:00"),), "appointments"),
    # cancel with the appointments listed
    Item("Cancel my appointment.", (_t("cancel_appointment", appointment_id=A),), "appointments"),
    Item("Please cancel the haircut.", (_t("cancel_appointment", appointment_id=A),), "appointments"),
    Item("I can't make it, cancel it please.", (_t("cancel_appointment", appointment_id=A),), "appointments"),
    # small talk and questions no tool answers
    Item("Hello.", ()),
    Item("Thank you.", ()),
    Item("Goodbye.", ()),
    Item("Okay, thanks.", ()),
    Item("How are you?", ()),
    Item("What are your opening hours?", ()),
    Item("Can I talk to a human?", ()),
    Item("Hi, this is Maria.", ()),
    Item("That's all, thanks.", ()),
    Item("Great, thank you so much.", ()),
    Item("Sorry, I didn't catch that.", ()),
    Item("Thanks, that's great.", (), "appointments"),
]

#: design name → (LlamaLLM tool_mode, few-shot examples ("" for none), strict schemas)
DESIGNS = {
    "lazy": ("lazy", "", True),
    "lazy-fewshot": ("lazy", FEW_SHOT, True),
    "eager": ("eager", "", True),
    "eager-fewshot": ("eager", FEW_SHOT, True),
    "eager-fewshot-nocall": ("eager", FEW_SHOT_NO_CALL, True),
    "eager-fewshot-bare": ("eager", FEW_SHOT, False),
}


def _norm(args: dict) -> dict:
    return {k: (v.strip().lower() if isinstance(v, str) else v) for k, v in args.items()}


def grade(item: Item, call: ToolCall | None) -> tuple[bool, bool]:
    """(right tool, right tool with right arguments) for the first call (None: text only)."""
    if not item.expect:
        return call is None, call is None
    if call is None:
        return False, False
    tool_ok = any(call.name == name for name, _ in item.expect)
    args_ok = any(call.name == name and (args is None or _norm(call.arguments) == _norm(args))
                  for name, args in item.expect)
    return tool_ok, args_ok


async def run_design(llm, name: str, few_shot: str, strict: bool, items: list[Item]) -> dict:
    system = SYSTEM + few_shot
    schemas = tools(strict)
    await asyncio.to_thread(llm.warmup, system, schemas)
    rows = []
    for item in items:
        msgs = (ChatMessage("system", system), *context(item.ctx), ChatMessage("user", item.say))
        req = LLMRequest(msgs, max_tokens=40, temperature=0.0, tools=schemas)
        t0 = time.perf_counter()
        first_text = call_ms = None
        call, text, error = None, "", None
        try:
            async for d in llm.stream(req):
                now = (time.perf_counter() - t0) * 1000
                if isinstance(d, ToolCall):
                    call, call_ms = call or d, call_ms or now
                else:
                    first_text = first_text if first_text is not None else now
                    text += d
        except PortError as exc:  # e.g. a free-string argument that never closes
            error = str(exc)[:120]
        tool_ok, args_ok = grade(item, call) if error is None else (False, False)
        rows.append({"say": item.say, "ctx": item.ctx, "kind": item.kind, "tool_ok": tool_ok,
                     "args_ok": args_ok, "call": [call.name, call.arguments] if call else None,
                     "text": text.strip()[:80], "error": error, "call_ms": call_ms,
                     "ttft_ms": first_text if call is None else None})
        print(f"  [{name}] {'ok ' if args_ok else 'BAD'} {item.say!r} -> "
              f"{rows[-1]['call'] or error or rows[-1]['text']!r}", file=sys.stderr)
    return summarise(name, rows)


def _pct(rows: list[dict], key: str) -> float | None:
    return round(100 * sum(r[key] for r in rows) / len(rows), 1) if rows else None


def _median(values: list) -> float | None:
    v = [x for x in values if x is not None]
    return round(statistics.median(v), 1) if v else None


def summarise(name: str, rows: list[dict]) -> dict:
    tool_rows = [r for r in rows if r["kind"] == "tool"]
    none_rows = [r for r in rows if r["kind"] == "none"]
    return {"design": name, "items": len(rows), "tool_items": len(tool_rows),
            "right_tool_pct": _pct(tool_rows, "tool_ok"),
            "right_args_pct": _pct(tool_rows, "args_ok"),
            "no_tool_pct": _pct(none_rows, "tool_ok"),
            "overall_pct": _pct(rows, "args_ok"),
            "errors": sum(r["error"] is not None for r in rows),
            "call_ms_p50": _median([r["call_ms"] for r in rows]),
            "text_ttft_ms_p50": _median([r["ttft_ms"] for r in rows]),
            "rows": rows}


def print_table(results: list[dict]) -> None:
    head = ("design", "right tool", "right args", "no tool", "overall", "call ms p50",
            "text TTFT ms p50")
    print(f"{head[0]:20s} " + " ".join(f"{h:>16s}" for h in head[1:]))
    for r in results:
        vals = [r["right_tool_pct"], r["right_args_pct"], r["no_tool_pct"], r["overall_pct"],
                r["call_ms_p50"], r["text_ttft_ms_p50"]]
        cells = [f"{v:>15.1f}{'%' if i < 4 else ' '}" if v is not None else f"{'-':>16s}"
                 for i, v in enumerate(vals)]
        print(f"{r['design']:20s} " + " ".join(cells))
    n = results[0]
    print(f"({n['tool_items']} tool items, {n['items'] - n['tool_items']} small-talk items; "
          f"temperature 0; SmolLM2-135M-Instruct Q4_1)")


async def _first_delta_ms(llm, req: LLMRequest) -> tuple[float, bool]:
    t0 = time.perf_counter()
    gen = llm.stream(req)
    try:
        d = await gen.__anext__()
        return (time.perf_counter() - t0) * 1000, isinstance(d, ToolCall)
    finally:
        await gen.aclose()


async def decision_cost(llm, items: list[Item], rounds: int) -> dict:
    """What the tool machinery costs before the first delta, on the small-talk items: the same
    prompt (tools listed) with ``tool_choice`` "none" (text only), "auto" lazy, and "auto"
    eager, interleaved item by item so load drift hits all three alike. Medians in ms."""
    system, schemas = ChatMessage("system", SYSTEM), tools(True)
    times: dict[str, list[float]] = {"none": [], "lazy": [], "eager": []}
    eager_calls = 0
    for _ in range(rounds):
        for item in (i for i in items if i.kind == "none"):
            msgs = (system, *context(item.ctx), ChatMessage("user", item.say))
            for mode in times:
                llm.tool_mode = "eager" if mode == "eager" else "lazy"
                req = LLMRequest(msgs, max_tokens=8, temperature=0.0, tools=schemas,
                                 tool_choice="none" if mode == "none" else "auto")
                ms, is_call = await _first_delta_ms(llm, req)
                times[mode].append(ms)
                eager_calls += is_call and mode == "eager"
    return {"first_delta_ms_p50": {k: _median(v) for k, v in times.items()},
            "eager_first_delta_was_a_call": eager_calls, "samples": len(times["none"])}


async def main(designs: list[str], limit: int | None, cost_rounds: int) -> dict:
    from rejoinder.adapters.llama_llm import LlamaLLM

    items = ITEMS[:limit] if limit else ITEMS
    results = []
    llm = LlamaLLM()
    for name in designs:
        mode, few_shot, strict = DESIGNS[name]
        llm.tool_mode = mode
        results.append(await run_design(llm, name, few_shot, strict, items))
    cost = await decision_cost(llm, items, cost_rounds) if cost_rounds else None
    return {"designs": results, "decision_cost": cost}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--designs", default=",".join(DESIGNS),
                    help=f"comma-separated, from: {', '.join(DESIGNS)}")
    ap.add_argument("--limit", type=int, default=None, help="first N items only (smoke run)")
    ap.add_argument("--cost-rounds", type=int, default=3,
                    help="rounds of the none/lazy/eager first-delta comparison (0: skip)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    names = [d for d in a.designs.split(",") if d]
    bad = [d for d in names if d not in DESIGNS]
    if bad:
        sys.exit(f"unknown design(s) {', '.join(bad)}; choose from {', '.join(DESIGNS)}")
    out = asyncio.run(main(names, a.limit, a.cost_rounds))
    if a.json:
        print(json.dumps(out, indent=2))
    else:
        print_table(out["designs"])
        cost = out["decision_cost"]
        if cost:
            c = cost["first_delta_ms_p50"]
            print(f"first delta on small talk, p50 over {cost['samples']} requests each: "
                  f"tool_choice none {c['none']} ms, auto/lazy {c['lazy']} ms, auto/eager "
                  f"{c['eager']} ms (eager's first delta was a call "
                  f"{cost['eager_first_delta_was_a_call']} times)")
