"""Conversation steps: an agent's conversation as a few narrow steps, each with its own
instructions and the tools it may call, and what moves the conversation between them.

The anchors are LiveKit Agents' tasks and handoffs and Pipecat Flows' nodes: a small model does
the right thing more often when each part of a call is narrow. Declare steps on an
:class:`~rejoinder.agent.Agent`::

    Agent("You are the phone assistant of …", tools=[lookup_order, list_appointments, …],
          steps=[AgentStep("triage", tools=["lookup_order", "list_appointments"],
                           next={"lookup_order": "order"}),
                 AgentStep("order", "Tell the caller what the order lookup said.",
                           tools=["lookup_order", "end_call"])])

What a step holds:

* ``instructions`` — added to the agent's for every LLM request while the step is current. They
  go in a system message after the call's history, not into the first system message, so the
  conversation's prefix (and the LLM's KV cache of it) stays the same when the step changes.
* ``tools`` — the names of the agent's tools the LLM may *call* in this step (None: all). Every
  request still *describes* all of the agent's tools; only the call is restricted
  (:attr:`rejoinder.ports.LLMRequest.allowed_tools`): on the 38 tool-choice items, required calls
  held to one step's tools raised SmolLM2-135M's right tool from 65 to 77 %, while listing only
  the step's tools in the prompt lowered it (issue 16).
* ``required`` — the first LLM request of each reply in this step must call one of them
  (``tool_choice: required``); the reply then goes on from the tool's result.
* ``next`` — where the conversation goes after a tool of this step succeeds: a step name (any
  tool) or ``{tool name: step name}``.

A tool moves the conversation itself by returning a control result: :class:`GoTo` (another
step), :class:`HandOff` (another agent: its instructions, tools and steps from the next LLM
request on; the history goes on), :class:`HangUp` (end the call once the goodbye has played) or
:class:`Transfer` (hand the call to a person once the reply has played). ``result`` is what the
LLM is told. Built-in tools that do these: :mod:`rejoinder.calltools`.

A move made by a *tentative* reply (preemptive generation, before the caller's turn was decided
over) takes effect only when that reply is adopted; a discarded reply moves nothing. Each move is
stamped on the timeline as a :class:`~rejoinder.events.StepEntered` event (reason ``tool``,
``next``, ``goto``, ``handoff``) and listed per turn (``rejoinder call --json``: ``steps``).
An agent without steps behaves as before: every tool may be called, nothing moves.

Errors: :class:`~rejoinder.errors.ConfigError` for a step that names an unknown tool or step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Union

from .errors import ConfigError

if TYPE_CHECKING:
    from .agent import Agent
    from .tools import Tool


class AgentStep:
    """One step of an agent's conversation (see the module docstring).

    ``tools`` holds tool names or :class:`~rejoinder.tools.Tool` objects (a Tool is added to the
    agent's tools if the agent does not list it); None allows every tool of the agent.

    Raises:
        ConfigError: an empty name, ``required`` without tools, a bad ``next``.
    """

    def __init__(self, name: str, instructions: str = "", *,
                 tools: Iterable[Union[str, "Tool"]] | None = None, required: bool = False,
                 next: Union[str, Mapping[str, str], None] = None) -> None:  # noqa: A002
        if not isinstance(name, str) or not name.strip():
            raise ConfigError("a step needs a name")
        self.name = name.strip()
        self.instructions = (instructions or "").strip()
        self.tool_objects: list[Tool] = []
        names: list[str] | None = None
        if tools is not None:
            names = []
            for t in tools:
                if isinstance(t, str):
                    names.append(t)
                else:
                    self.tool_objects.append(t)
                    names.append(t.name)
        self.tools: tuple[str, ...] | None = tuple(dict.fromkeys(names)) if names is not None else None
        self.required = bool(required)
        if self.required and self.tools == ():
            raise ConfigError(f"step {self.name!r} requires a call but allows no tool")
        if next is not None and not isinstance(next, (str, Mapping)):
            raise ConfigError(f"step {self.name!r}: next is a step name or {{tool: step}}")
        self.next = next

    def __repr__(self) -> str:
        return f"AgentStep({self.name!r}, tools={self.tools}, required={self.required})"

    def next_after(self, tool_name: str) -> str | None:
        """The step to go to after ``tool_name`` succeeded in this step (None: stay)."""
        if isinstance(self.next, str):
            return self.next
        if isinstance(self.next, Mapping):
            return self.next.get(tool_name)
        return None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "tools": list(self.tools) if self.tools is not None else None,
                "required": self.required,
                "next": dict(self.next) if isinstance(self.next, Mapping) else self.next,
                "instructions": self.instructions}


def check_steps(agent_name: str, steps: list[AgentStep], tools: Mapping[str, Any],
                start: str | None) -> None:
    """Check that steps are uniquely named and name only known tools and steps.

    Raises:
        ConfigError: the first problem found, naming the step and what to fix.
    """
    names = [s.name for s in steps]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"agent {agent_name!r}: two steps are named {dupes[0]!r}")
    known = set(names)
    if start is not None and start not in known:
        raise ConfigError(f"agent {agent_name!r}: start step {start!r} is not one of its steps "
                          f"({', '.join(names) or 'none'})")
    for s in steps:
        for t in s.tools or ():
            if t not in tools:
                raise ConfigError(f"agent {agent_name!r}, step {s.name!r}: no tool named {t!r}; "
                                  f"the agent's tools are {', '.join(tools) or 'none'}")
        targets = ([s.next] if isinstance(s.next, str) else
                   list(s.next.values()) if isinstance(s.next, Mapping) else [])
        for tgt in targets:
            if tgt not in known:
                raise ConfigError(f"agent {agent_name!r}, step {s.name!r}: next step {tgt!r} does "
                                  f"not exist (steps: {', '.join(names)})")
        if isinstance(s.next, Mapping):
            for t in s.next:
                if t not in tools:
                    raise ConfigError(f"agent {agent_name!r}, step {s.name!r}: next names no "
                                      f"tool {t!r}")


# ----------------------------------------------------------------------------- control results


@dataclass(frozen=True)
class GoTo:
    """Returned by a tool: move the conversation to ``step`` of the current agent; the LLM is
    told ``result``."""

    step: str
    result: Any = None


@dataclass(frozen=True)
class HandOff:
    """Returned by a tool: hand the conversation over to ``agent`` (an
    :class:`~rejoinder.agent.Agent`, or anything :func:`~rejoinder.agent.load_agent` accepts)
    from the next LLM request on, at its ``step`` (default: its start step). The history goes
    on; the call's hooks and state stay those of the agent the call started with."""

    agent: Any
    step: str | None = None
    result: Any = None


@dataclass(frozen=True)
class HangUp:
    """Returned by a tool: end the call once the reply has played at the caller (the transport
    confirms it: Twilio's mark, the browser's playout end; with a watchdog). ``say``: the
    goodbye the runtime says itself (None: the LLM writes it; if it writes nothing, ``fallback``)."""

    reason: str = "goodbye"
    say: str | None = None
    fallback: str = "Thanks for calling. Goodbye!"
    result: Any = None


@dataclass(frozen=True)
class Transfer:
    """Returned by a tool: transfer the call to a person once the reply has played. ``target``
    is the transport's destination (a phone number or SIP URI for Twilio's ``<Dial>``, a queue
    name); None uses the transport's configured one."""

    target: str | None = None
    reason: str = "caller asked for a person"
    say: str | None = None
    fallback: str = "Please hold while I connect you to a member of our team."
    result: Any = None


Control = Union[GoTo, HandOff, HangUp, Transfer]
CONTROLS = (GoTo, HandOff, HangUp, Transfer)


@dataclass(frozen=True)
class Position:
    """Where a conversation is: the agent speaking and its current step (None: no steps)."""

    agent: "Agent"
    step: AgentStep | None

    @classmethod
    def start(cls, agent: "Agent", step: str | None = None) -> "Position":
        return cls(agent, agent.step(step) if agent.steps else None)

    def allowed(self) -> tuple[str, ...] | None:
        """The tool names that may be called here (None: all the agent's tools)."""
        return self.step.tools if self.step is not None else None

    def label(self) -> str | None:
        return self.step.name if self.step is not None else None


def move(pos: Position, control: Control | None, tool_name: str, ok: bool,
         load: Callable[[Any], "Agent"] | None = None) -> tuple[Position, str] | None:
    """Where the conversation goes after a run of ``tool_name`` that returned ``control`` (or a
    plain result; ``ok`` False: it failed): ``(new position, reason)``, or None to stay.

    Raises:
        ConfigError: a GoTo naming no step of the agent, a HandOff whose agent cannot be loaded.
    """
    if isinstance(control, GoTo):
        return Position(pos.agent, pos.agent.step(control.step)), "goto"
    if isinstance(control, HandOff):
        # ``load``: the caller's agent loader (rejoinder.agent.load_agent) for a YAML path or
        # ``module:attribute``; an Agent object is used as it is
        agent = control.agent
        if not hasattr(agent, "tools"):
            if load is None:
                raise ConfigError(f"cannot hand over to {agent!r}: no agent loader given")
            agent = load(agent)
        return Position.start(agent, control.step), "handoff"
    if ok and pos.step is not None:
        target = pos.step.next_after(tool_name)
        if target is not None and target != pos.step.name:
            return Position(pos.agent, pos.agent.step(target)), "next"
    return None
