"""Calibrate the embedded LLM's tool gate for one agent and one model (``rejoinder calibrate``).

The gate (:mod:`rejoinder.adapters._gate`) calls a tool when the margin ``log Σ P(tool) −
log P(none)`` of the caller's message reaches a threshold. The threshold depends on the model
and on the agent's tools, so it is fitted on the agent's own labelled utterances:

- **positives**: each tool's ``examples`` (``@tool(examples=[…])``, ``examples:`` in YAML);
- **negatives**: the gate's built-in small talk plus the agent's ``llm.talk_examples``.

Each utterance is scored *leave-one-out*: by a gate whose few-shot prompt lacks that utterance,
so an example never vouches for itself. When the model picks the tool by the nearest example
(``tool_which`` "examples", the default), each utterance is also decided as the runtime decides
it once the margin says call (:meth:`rejoinder.adapters._decide.DecideStep.decide`: the
nearest example with small talk competing, the typed arguments said, the irreversible tools'
clear lead), by a matcher that lacks it too: a call is then that decision's tool, and a talk
example the matcher keeps as talk is no spurious call whatever its margin. The threshold chosen
is the one that keeps spurious calls at or under ``max_spurious`` and, among those, calls the
right tool on the most positives; ties go to the middle of the widest such interval. These
utterances are the *calibration set*: benchmarks and scenarios that measure task success must
use other wordings (``src/rejoinder/harness/suites/heldout/``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ._threads import on_model_thread
from .agent import Agent
from .errors import ConfigError
from .ports import ChatMessage, LLMRequest, ToolDecision, ToolSchema


@dataclass(frozen=True)
class Scored:
    """One calibration utterance: its ``label`` (a tool's name, or None for talk), the gate's
    ``margin`` and ``best`` tool; with ``matched``, ``pick`` is the runtime's decision once the
    margin says call (None: talk), else the call goes to ``best``."""

    say: str
    label: str | None
    margin: float
    best: str | None
    pick: str | None = None
    matched: bool = False

    @property
    def called(self) -> str | None:
        """The tool called when the margin reaches the threshold (None: talk)."""
        return self.pick if self.matched else self.best


@dataclass(frozen=True)
class Calibration:
    """The fitted threshold with its figures on the calibration set (rates in 0..1)."""

    threshold: float
    right_tool: float
    spurious: float
    positives: int
    negatives: int
    points: tuple[Scored, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"threshold": round(self.threshold, 3), "right_tool": round(self.right_tool, 3),
                "spurious": round(self.spurious, 3), "positives": self.positives,
                "negatives": self.negatives,
                "utterances": [{"say": p.say, "label": p.label, "margin": round(p.margin, 3),
                                "best": p.best, **({"pick": p.pick} if p.matched else {})}
                               for p in self.points]}


def _score(llm: Any, gate: Any, messages: tuple, request: LLMRequest | None,
           matcher: Callable[[], Any] | None) -> tuple[Any, ToolDecision | None]:
    """One gate score, and with ``request`` the runtime's decision under a threshold of −∞
    (``matcher()`` builds the leave-one-out matcher), on the llama.cpp thread
    (:func:`rejoinder._threads.model_thread`)."""
    with llm._lock:
        llm.cache.activate(gate.key)
        try:
            scores = gate.score(llm._llm, messages)
            if request is None:
                return scores, None
            return scores, llm.engine.decide(request, gate, matcher() if matcher else None)
        finally:
            llm.cache.forget(gate.key)


def _rates(points: Sequence[Scored], t: float) -> tuple[float, float]:
    pos = [p for p in points if p.label is not None]
    neg = [p for p in points if p.label is None]
    right = sum(p.margin >= t and p.called == p.label for p in pos) / max(1, len(pos))
    spurious = sum(p.margin >= t and p.called is not None for p in neg) / max(1, len(neg))
    return right, spurious


def choose_threshold(points: Sequence[Scored], max_spurious: float = 0.05) -> Calibration:
    """The threshold for ``points`` (see the module docstring).

    Raises:
        ConfigError: no positive or no negative utterance.
    """
    pos = [p for p in points if p.label is not None]
    neg = [p for p in points if p.label is None]
    if not pos or not neg:
        raise ConfigError("calibration needs tool examples (each tool's `examples`) and talk "
                          "examples (the gate's defaults or `llm.talk_examples`)")
    margins = sorted({p.margin for p in points})
    cands = [margins[0] - 1.0] + [(a + b) / 2 for a, b in zip(margins, margins[1:])] + \
            [margins[-1] + 1.0]
    scored = [(t, *_rates(points, t)) for t in cands]
    feasible = [s for s in scored if s[2] <= max_spurious + 1e-9] or \
        [min(scored, key=lambda s: (s[2], -s[1]))]
    best_right = max(s[1] for s in feasible)
    run = [s for s in feasible if s[1] == best_right]
    # the middle of the interval of equally good thresholds (robust to a new wording)
    lo, hi = run[0][0], run[-1][0]
    t = (lo + hi) / 2 if len(run) > 1 else lo
    right, spurious = _rates(points, t)
    return Calibration(t, right, spurious, len(pos), len(neg), tuple(points))



def _memoised(embed: Callable[[str], Any]) -> Callable[[str], Any]:
    """``embed`` with each text embedded once for all the leave-one-out matchers (through
    ``embed.examples`` when it has it: the vectors kept on disk, :mod:`.adapters._embedcache`),
    keeping the embedding's own template (None: the words alone)."""
    from .adapters._which import EMBED_TEMPLATE

    vectors: dict[str, Any] = {}
    many = getattr(embed, "examples", None)

    def embedded(text: str) -> Any:
        if text not in vectors:
            vectors[text] = many([text])[0] if many is not None else embed(text)
        return vectors[text]

    embedded.template = getattr(embed, "template", EMBED_TEMPLATE)  # type: ignore[attr-defined]
    return embedded

def labelled(agent: Agent) -> list[tuple[str, str | None]]:
    """The agent's calibration utterances: (utterance, tool name or None)."""
    from .adapters._gate import DEFAULT_TALK_EXAMPLES

    out: list[tuple[str, str | None]] = [(x, t.name) for t in agent.tools.values()
                                         for x in t.schema.examples]
    out += [(x, None) for x in (*DEFAULT_TALK_EXAMPLES, *agent.llm.talk_examples)]
    return out


def fingerprint(agent: Agent) -> str:
    """What a threshold fitted on ``agent`` depends on besides the model, as 16 hex digits of a
    sha256: the gate's few-shot prompt for the agent's tools and talk examples (labels,
    descriptions, the shots shown) and every labelled calibration utterance (:func:`labelled`,
    which the leave-one-out matchers also use). :data:`rejoinder.adapters._gate.CALIBRATED_ON`
    records the reference support agent's at the shipped fits; a test compares them, so a change
    to its examples or to the gate's prompt asks for a re-fit (``rejoinder calibrate``).

    Raises:
        ConfigError: the agent has no tools.
    """
    import hashlib

    from .adapters._gate import DEFAULT_TALK_EXAMPLES, LabelGate

    tools = tuple(t.schema for t in agent.tools.values())
    if not tools:
        raise ConfigError(f"agent {agent.name!r} has no tools: there is nothing to calibrate")
    gate = LabelGate(tools, (*DEFAULT_TALK_EXAMPLES, *agent.llm.talk_examples))
    text = gate.prefix + "\n".join(f"{label}\t{say}" for say, label in labelled(agent))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _without(tools: Sequence[ToolSchema], say: str) -> tuple[ToolSchema, ...]:
    return tuple(replace(t, examples=tuple(x for x in t.examples if x != say)) for t in tools)


def calibrate(agent: Agent, llm: Any, *, max_spurious: float = 0.05,
              opening: str = "How can I help?") -> Calibration:
    """Score ``agent``'s calibration utterances leave-one-out on ``llm`` (a
    :class:`~rejoinder.adapters.llama_llm.LlamaLLM`) and fit the threshold (blocking: run it in
    a thread from async code).

    Raises:
        ConfigError: the agent has no tools, or no examples (see :func:`choose_threshold`).
    """
    from .adapters._gate import DEFAULT_TALK_EXAMPLES, LabelGate
    from .adapters._probe import tool_chooser

    tools = tuple(t.schema for t in agent.tools.values())
    if not tools:
        raise ConfigError(f"agent {agent.name!r} has no tools: there is nothing to calibrate")
    talk = (*DEFAULT_TALK_EXAMPLES, *agent.llm.talk_examples)
    engine = getattr(llm, "engine", None)
    decides = getattr(engine, "tool_mode", None) == "gate"
    kind = getattr(engine, "which", None)
    embed = engine.embed if decides and kind in ("examples", "probe") else None
    embedded = _memoised(embed) if embed is not None else None
    check = getattr(engine, "check_embed", None) if embed is not None else None
    checked = _memoised(check) if check is not None else None

    points: list[Scored] = []
    for say, label in labelled(agent):
        kept, talk_kept = _without(tools, say), tuple(x for x in talk if x != say)
        gate = LabelGate(kept, talk_kept)
        messages = (ChatMessage("assistant", opening), ChatMessage("user", say))
        request = (LLMRequest(messages, tools=kept, tool_threshold=-math.inf)
                   if decides else None)
        matcher = ((lambda k=kept, tk=talk_kept: tool_chooser(kind, embedded, checked, k, tk))
                   if embed is not None and any(t.examples for t in kept) else None)
        s, decision = on_model_thread("llama", _score, llm, gate, messages, request, matcher)
        # a question for a missing argument ("what's the order number?") picked its tool
        pick = (decision.chosen or decision.ask_tool) if decision else None
        points.append(Scored(say, label, s.margin, s.best, pick, decision is not None))
    return choose_threshold(points, max_spurious)
