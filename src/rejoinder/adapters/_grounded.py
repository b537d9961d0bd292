"""Grounded replies: the reply after a tool result may use only words it can stand on.

Why: asked to tell the caller a tool's result, SmolLM2-135M answered with the facts in 6 of 10
synthetic tuning results (garden hose, rain jacket, kettle …; none is a benchmark or held-out
item) and otherwise wrote "The caller says: …", "I'm sorry for your loss, but as a chatbot …" or
an invented reason. Few-shot wordings of the result prompt did worse (it copied the example's
facts: 1–3 of 10). A *lexical constraint* keeps the model's own choice of words and order but
limits the words it may choose from (constrained decoding in the sense of Hokamp & Liu,
"Lexically Constrained Decoding for Sequence Generation Using Grid Beam Search", ACL 2017, here
as a grammar): with it the same probe answered from the facts in 8 of 10.

The words allowed (:func:`reply_vocabulary`):

- every word and whole value of the tool results of this reply (``"Friday, December 4"`` as one
  piece as well as its words) and the words of their keys (``expected_arrival``);
- the caller's last message;
- :data:`COMMON_WORDS`, a closed list of spoken-English function words and everyday words.

Not the agent's instructions' words, nor the tools' names: with them the probe's replies turned
to "The caller is …" (the instructions speak of "the caller") and "Reschedule a …".

Numbers therefore come only from the results or the caller: the reply cannot invent an order
number, a date or a price. The reply is one or two sentences (:func:`reply_grammar`), or the
format's call opener, so the model may still call another tool in the same reply.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from ..ports import ChatMessage

#: Spoken-English function words, pronouns, auxiliaries and everyday verbs and nouns a reply to a
#: caller is made of (written for rejoinder; lower case, contractions included).
COMMON_WORDS: tuple[str, ...] = tuple("""
a able about afraid after again all already also am an and any anything are as at back be
because been bye care course day fine glad goodbye great happy hello hi nice problem welcome
before being but by can can't cannot check checked come comes coming could day days did didn't
do does doesn't done don't each else find for found from get gets getting give go goes going
good got had has hasn't have haven't help here how i i'd i'll i'm i've if in into is isn't it
it's its just know let let's like look looked make may me more morning afternoon evening much
my need next no not nothing now of off okay on one only or other our out over please ready
right see set should so some soon sorry still sure than thank thanks that that's the their them
then there there's these they this those through time to today tomorrow too two up us very
want was wasn't we we'll we're well were what what's when where which while who will with
won't would yes yet you you'd you'll you're you've your
""".split())

_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?|\d+")


def _result_values(content: str) -> list[str]:
    """The leaf values of a JSON tool result (the text itself when it is not JSON), then the keys
    of its objects as words (``expected_arrival`` → "expected arrival"), but for a failed call's
    ``error``: SmolLM2-135M answered "The error is an error in the order of 7002." for "you have
    no order 7002; your orders are: 2459"."""
    try:
        value = json.loads(content)
    except ValueError:
        return [content]
    leaves: list[str] = []
    keys: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k != "error":  # a failed call's key: with it the reply was "The error is…"
                    keys.append(str(k).replace("_", " "))
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif v is not None and not isinstance(v, bool):
            leaves.append(str(v))

    walk(value)
    return leaves + keys


def reply_vocabulary(messages: Sequence[ChatMessage]) -> tuple[set[str], set[str]]:
    """``(words, phrases)`` a reply to ``messages`` may use (see the module docstring).

    ``messages``: a request's messages, the system message first and the reply's tool results
    (``role == "tool"``) after the caller's last message."""
    words = set(COMMON_WORDS)
    phrases: set[str] = set()
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    if last_user >= 0:
        words.update(w.lower() for w in _WORD.findall(messages[last_user].content))
    for m in messages[last_user + 1:]:
        if m.role != "tool":
            continue
        for value in _result_values(m.content):
            value = " ".join(value.split())
            if " " in value and len(value) <= 60:
                phrases.add(value)
            words.update(w.lower() for w in _WORD.findall(value))
    return words, phrases


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def reply_grammar(words: set[str], phrases: set[str], call_opens: Sequence[str] = (),
                  max_words: int = 30) -> str:
    """GBNF for a reply of one or two sentences made of ``words`` (each also capitalised) and
    ``phrases`` (each as written), joined by spaces or ", ", each sentence ending in ``.``, ``?``
    or ``!``; or one of ``call_opens`` (the model then writes a tool call)."""
    pieces = set(phrases)
    for w in words:
        if w != "i" and not w.startswith("i'"):
            pieces.add(w)  # ("I", "I'm": capitalised only)
        pieces.add(w[:1].upper() + w[1:])
    alts = " | ".join(_literal(p) for p in sorted(pieces, key=lambda p: (-len(p), p)))
    opens = "".join(f" | {_literal(o)}" for o in call_opens)
    n = max(1, max_words - 1)
    return (f'root ::= sentence (" " sentence)?{opens}\n'
            f'sentence ::= w (sep w){{0,{n}}} [.?!]\n'
            f'sep ::= " " | ", "\n'
            f"w ::= {alts}\n")


def after_tool_result(messages: Sequence[ChatMessage]) -> bool:
    """Whether the request's last message is a tool result (the reply tells its outcome)."""
    return bool(messages) and messages[-1].role == "tool"
