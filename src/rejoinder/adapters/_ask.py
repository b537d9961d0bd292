"""Asking for a missing argument: the narrow step after the tool gate chose a tool whose typed
argument the caller did not say ("Did my backpack ever arrive?": ``lookup_order`` without an
order number).

The gate then talks (a call would make the number up, :meth:`._llama_engine.ChatEngine.decide`),
and a free reply of SmolLM2-135M to such a request was rarely a question: "I'm sorry for your
loss", or an invented status. This step narrows that reply the way a form-filling dialogue
system (Pipecat Flows' nodes, LiveKit's ``AgentTask``) narrows a turn to one slot: the LLM is
told what is missing (:func:`ask_note`, a system message after the caller's words) and writes
one question, under :data:`QUESTION_GRAMMAR` (a question opener, then its own words, ending in
"?"). It still writes every word after the opener, from the conversation and the note.

Probe, 2026-12-04 (SmolLM2-135M Q4_1, greedy, the support agent, 8 order questions without a
number written for it, none from a suite, the step forced on each): a question for the order
number in 8 of 8 replies with the note and the grammar, 3 of 8 with the note alone (two read
the note back), 0 of 8 with neither (six "I'm sorry for your loss").

The same narrowing serves a caller who does not say yes to an irreversible tool's question
("Shall I cancel your haircut on Tuesday at 10 AM?" — "Hmm, no, don't bother."): nothing was
done, and the reply says so (:data:`DEFAULT_DECLINED_PROMPT`, :data:`DECLINED_GRAMMAR`: an
acknowledgement and "I won't" / "I'll leave" / "I'll keep", the rest the LLM's). Probe,
2026-12-05 (two written declines, not from a suite, 2 runs each through ``rejoinder bench``):
free, SmolLM2-135M said "That's a great way to start a conversation." or echoed the caller;
with the note alone it read the note back ("The caller did not say yes, so nothing was done.");
with the grammar alone "No problem, I'll keep going."; with both "No problem, I'll leave it as
it is." (4 of 4).
"""

from __future__ import annotations

import re
from typing import Any

from ._toolcall import argument_sources, grounded_values, groundable

#: the reply when an argument is missing: one question, opened as a question is
QUESTION_GRAMMAR = ('root ::= ("Could you " | "Can you " | "What is " | "What' "'" 's " | "Which ") '
                    r'[^.?!\n]{1,80} "?"')
#: the note after the caller's words (``{what}``: the missing arguments; ``{it}``: it / them)
DEFAULT_ASK_PROMPT = "The caller did not say the {what}. Ask for {it} in one short question."

#: the note after a caller's answer to an irreversible tool's question that was not a yes
#: (``LLMRequest.confirming``; :meth:`._llama_engine.ChatEngine.generate`): nothing was done
DEFAULT_DECLINED_PROMPT = ("The caller said no, so nothing was done. Tell them in one short "
                           "sentence that you will leave it as it is.")
#: that reply: an acknowledgement, then that nothing is done, in the LLM's own words after it
DECLINED_GRAMMAR = ('root ::= ("Okay, " | "Alright, " | "No problem, ") '
                    '("I won' "'" 't " | "I will not " | "I' "'" 'll leave " | "I' "'" 'll keep ") '
                    r'[^.?!\n]{1,80} "."')

_CUT = re.compile(r"\s+as\s+|\s*\(|,|;|\.(?:\s|$)|\s+e\.g\.|\s+for example", re.IGNORECASE)


def argument_phrase(name: str, schema: dict[str, Any]) -> str:
    """How to name argument ``name`` to the caller: its description's first noun phrase ("the
    order number as the caller said it (four digits)" → "order number"; "the new weekday, e.g.
    Thursday" → "new weekday"), else the name in words ("order_id" → "order id")."""
    text = str(schema.get("description") or "").strip()
    head = _CUT.split(text, maxsplit=1)[0].strip() if text else ""
    head = re.sub(r"^(?:the|a|an)\s+", "", head, flags=re.IGNORECASE)
    return head if head and len(head.split()) <= 6 else name.replace("_", " ")


def missing_arguments(params: dict[str, Any], said: str, before: str = "") -> tuple[str, ...]:
    """The phrases (:func:`argument_phrase`) of the required typed arguments of a tool with
    parameter schema ``params`` that neither ``said`` nor, as
    :func:`._toolcall.argument_sources` allows, ``before`` grounds; in schema order."""
    props = (params or {}).get("properties") or {}
    need = [k for k in (params or {}).get("required") or () if groundable(props.get(k) or {})]
    if not need:
        return ()
    sources = argument_sources(params, said, before)
    return tuple(argument_phrase(k, props[k]) for k in need
                 if not grounded_values(props[k], sources.get(k, said)))


def ask_note(phrases: tuple[str, ...], template: str = DEFAULT_ASK_PROMPT) -> str:
    """The system note asking for ``phrases`` ("order number"; "new weekday and new start
    time")."""
    what = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]
    return template.format(what=what, it="it" if len(phrases) == 1 else "them")
