"""Probe: SmolLM2-135M's reply after a tool result, with and without *facts first*
(:func:`rejoinder.adapters._grounded.reply_facts`), side by side in one process.

Twelve results written as the reference support agent's tools write them, for callers of the
reference and held-out data (`src/rejoinder/harness/suites/reference`, `…/heldout`: development
sets, never the `unseen` suite), one tool round after the greeting, temperature 0. Prints each
reply per arm; which replies carry the result's facts is read by a person (the scenario checks
are the measure: `rejoinder bench`).

    .venv/bin/python bench/reply_facts.py
"""

from __future__ import annotations

import json
import threading

from rejoinder.adapters.llama_llm import LlamaLLM
from rejoinder.app.support import INSTRUCTIONS, agent
from rejoinder.ports import ChatMessage, LLMRequest, ToolCall

SYSTEM = ChatMessage("system", INSTRUCTIONS)
GREETING = ChatMessage("assistant", "Hi Maria, thanks for calling Maple and Company. How can I help?")
CASES = [  # (the caller's words, the tool, its result)
    ("4, 2, 1, 7.", "lookup_order", {"order 4217": "the wireless headphones of order 4217 shipped on Friday, December 4 and should arrive Wednesday, December 9"}),
    ("Number. 6, 1, 2, 0.", "lookup_order", {"order 6120": "the desk lamp of order 6120 was cancelled"}),
    ("Hey, good afternoon. I ordered a blender last week, the order number is 2, 4, 5, 9. When will it get here?", "lookup_order", {"order 2459": "the blender of order 2459 is still processing and should arrive Tuesday, December 15"}),
    ("8, 8, 1, 4.", "lookup_order", {"order 8814": "the hiking backpack of order 8814 was delivered on Wednesday, December 2"}),
    ("5, 0, 3, 1.", "lookup_order", {"order 5031": "the phone case of order 5031 is still processing and should arrive Friday, December 11"}),
    ("What appointment do I have?", "list_appointments", {"appointments": "a haircut on Tuesday at 10 AM"}),
    ("What have I got booked?", "list_appointments", {"appointments": "a consultation on Thursday at 10 AM and a haircut on Friday at 2 PM"}),
    ("Can you move it to Thursday afternoon?", "reschedule_appointment", {"moved": "the haircut is moved from Tuesday at 10 AM to Thursday at 2 PM"}),
    ("Is there any chance I could move my haircut to Wednesday at 2 PM?", "reschedule_appointment", {"error": "Wednesday at 2 PM is already taken"}),
    ("Can I do Sunday morning instead?", "reschedule_appointment", {"error": "Sunday at 10 AM is outside opening hours (Monday to Friday, 9 AM to 5 PM)"}),
    ("Order 9, 1, 5, 0.", "lookup_order", {"error": "you have no order 9150; your orders are: 4217, 5031"}),
    ("Yes, please.", "cancel_appointment", {"cancelled": "your haircut on Tuesday at 10 AM is cancelled"}),
]


def main() -> None:
    llm = LlamaLLM()
    engine = llm.engine
    tools = tuple(t.schema for t in agent.tools.values())
    for i, (say, name, result) in enumerate(CASES):
        call = ToolCall(f"c{i}", name, {})
        msgs = (SYSTEM, GREETING, ChatMessage("user", say),
                ChatMessage("assistant", "", tool_calls=(call,)),
                ChatMessage("tool", json.dumps(result), name=name, tool_call_id=call.id))
        req = LLMRequest(msgs, tools=tools, temperature=0.0, max_tokens=60)
        print(f"{say!r} → {name}")
        for facts in (False, True):
            engine.facts_first = facts
            out = "".join(x for x in engine.generate(req, threading.Event()) if isinstance(x, str))
            print(f"   {'facts first' if facts else 'words only '}: {out!r}")


if __name__ == "__main__":
    main()
