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

**The facts come first.** Within those words, SmolLM2-135M still wrote replies that carry none
of the result's facts in whole calls ("The 6120 is a 6120, and the 6120 is a desk lamp."; "The
haircut is not a Sunday, but it's a Monday."): the vocabulary bounds the words, not which of
them are said. So the *first* sentence must also contain the result's fact words
(:func:`reply_facts`: the words of the values the tools just returned that are not common
words — items, numbers, days, dates, statuses), in the order the result gives them, with at
most a few of the model's own words before, between and after them: ordered positive lexical
constraints (Hokamp & Liu's constraints are of this kind; here a grammar, so the search is the
model's own greedy or sampled decoding). The model still writes the sentence — which words join
the facts, their case, how it ends and whether a second sentence follows — but it cannot leave a
fact out or end before it has said them.
"""

from __future__ import annotations

import json
import os.path
import re
from typing import Any, Collection, Sequence

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


#: most fact words the first sentence of a reply after a tool result must contain
MAX_FACTS = 12


def reply_facts(messages: Sequence[ChatMessage], limit: int = MAX_FACTS,
                skip: Collection[str] = ()) -> list[str]:
    """The fact words a reply to ``messages`` must say first: the words of the leaf values of
    the tool results after the last assistant message (the round just returned), not the keys,
    that are not :data:`COMMON_WORDS` (case kept), in the results' order — a word said twice
    there is two facts ("Friday, December 4 … Wednesday, December 9") — at most ``limit``;
    results of the tools named in ``skip`` give none (call control: "the call ends after your
    goodbye" is for the LLM). [] when the last message is not a tool result."""
    if not after_tool_result(messages):
        return []
    last_assistant = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    common = set(COMMON_WORDS)
    facts: list[str] = []
    for m in messages[last_assistant + 1:]:
        if m.role != "tool" or m.name in skip:
            continue
        try:
            value = json.loads(m.content)
        except ValueError:
            value = m.content
        for leaf in _leaves(value):
            facts.extend(w for w in _WORD.findall(leaf) if w.lower() not in common)
    return facts[:limit]


def _leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    if value is None or isinstance(value, bool):
        return []
    return [str(value)]


def _literal(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def alternation(pieces: Collection[str]) -> str:
    """A GBNF expression matching exactly one of ``pieces`` (non-empty strings), written as a
    trie: pieces that share a prefix share its literal, and the alternatives branch only where
    they differ (``"ab" ("le" | "o" ("ut" | "ve"))`` for able, about, above).

    Why: llama.cpp's grammar sampler keeps one stack per alternative it may still be in, and
    matches every candidate token against every stack. A flat alternation of the ≈ 750 words a
    grounded reply may use puts ≈ 750 stacks at each word's start; the trie puts one per
    distinct first character. Measured on SmolLM2-135M (2-core x86-64, quiet; the bundled
    order's result, its reply's 27 tokens, :class:`._fastgrammar.GrammarMask` over the top 40
    tokens): 1.9 ms a step flat, 0.38 ms as a trie. The language is the same, so the sampled
    reply is too.

    Raises:
        ValueError: ``pieces`` is empty or holds ``""``."""
    if not pieces or "" in pieces:
        raise ValueError("alternation needs one or more non-empty pieces")

    def node(rest: set[str]) -> str:
        by_first: dict[str, list[str]] = {}
        for s in rest:
            if s:
                by_first.setdefault(s[0], []).append(s)
        alts = []
        for ch in sorted(by_first):
            group = by_first[ch]
            head = os.path.commonprefix(group)  # the literal they all start with
            tails = {s[len(head):] for s in group}
            alts.append(_literal(head) if tails == {""} else f"{_literal(head)} {node(tails)}")
        body = " | ".join(alts)
        if "" in rest:  # a piece ends here and longer ones go on
            return f"({body})?"
        return f"({body})" if len(alts) > 1 else body

    return node(set(pieces))


def reply_grammar(words: set[str], phrases: set[str], call_opens: Sequence[str] = (),
                  max_words: int = 30, facts: Sequence[str] = (), lead: int = 4, gap: int = 3,
                  tail: int = 8) -> str:
    """GBNF for a reply of one or two sentences made of ``words`` (each also capitalised) and
    ``phrases`` (each as written), joined by spaces or ", ", each sentence ending in ``.``, ``?``
    or ``!``; or one of ``call_opens`` (the model then writes a tool call).

    With ``facts`` (:func:`reply_facts`), the first sentence holds each fact word in that order
    (as written, or capitalised), with at most ``lead`` other words before the first, ``gap``
    between two and ``tail`` after the last; those are ``words`` but the facts and numbers (a
    fact is said at its place only: with the caller's digits free, "order 9150 is a 1, 1, 1"),
    and no phrases (a phrase would hide facts in it). The second sentence
    is as without facts."""
    pieces = set(phrases)
    for w in words:
        if w != "i" and not w.startswith("i'"):
            pieces.add(w)  # ("I", "I'm": capitalised only)
        pieces.add(w[:1].upper() + w[1:])
    pieces.discard("")
    alts = alternation(pieces)
    opens = "".join(f" | {_literal(o)}" for o in call_opens)
    n = max(1, max_words - 1)
    rules = [f'sentence ::= w (sep w){{0,{n}}} [.?!]', 'sep ::= " " | ", "', f"w ::= {alts}"]
    first = "sentence"
    if facts:
        # the words around the facts: any but a fact word (a fact is said at its place only:
        # with them free, "A haircut on Thursday" came before the result's "consultation")
        said = {f.lower() for f in facts}
        lone = set()
        for w in words:
            if w in said or w.isdigit():  # its numbers are the result's, at their places
                continue
            if w != "i" and not w.startswith("i'"):
                lone.add(w)
            lone.add(w[:1].upper() + w[1:])
        rules.append("v ::= " + alternation(lone))
        body = [f"(v sep){{0,{lead}}}"]
        for i, fact in enumerate(facts):
            forms = sorted({fact, fact[:1].upper() + fact[1:]})  # as written, or capitalised
            rules.append(f"f{i} ::= " + " | ".join(_literal(f) for f in forms))
            if i:
                body.append(f"sep (v sep){{0,{gap}}}")
            body.append(f"f{i}")
        body.append(f"(sep v){{0,{tail}}} [.?!]")
        rules.append("first ::= " + " ".join(body))
        first = "first"
    return f'root ::= {first} (" " sentence)?{opens}\n' + "\n".join(rules) + "\n"


def after_tool_result(messages: Sequence[ChatMessage]) -> bool:
    """Whether the request's last message is a tool result (the reply tells its outcome)."""
    return bool(messages) and messages[-1].role == "tool"
