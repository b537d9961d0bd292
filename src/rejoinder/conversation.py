"""One call's conversation with the LLM: the agent's instructions and tools, and a chat history
that holds only what the caller actually heard.

The history is append-only within a call; a request carries the system message, then a window of
it (:func:`window`, the last ``LLMSettings.history_turns`` caller turns, default 6; optionally
every earlier turn that ran a tool too, ``keep_tool_turns``). A backend that keeps the conversation's KV cache
(``LLMRequest.cache_key`` = the call id) only prefills what is new since the last request and
shifts the turn that left the window out of its cache, so time to first token does not grow
with the length of the call (``bench/ttft_growth.py``).

A reply's messages (the caller's transcript, the assistant's tool calls and their results, its
text) are added when the reply ends, with the assistant's text cut to the words the caller heard
(barge-in): the rest was never said, so the LLM must not believe it was. Tool calls and results
are kept whatever was heard — they happened.

Tool runs are stamped here (``tool_start`` / ``tool_end``, with name, arguments, reversibility and
whether the run was tentative) — the one place tools are timed.

A call that only *restates* the call's last change of state is not run again
(:meth:`Conversation.restated`): after "move my haircut to Wednesday at eleven" was done, a
caller's "see you on Wednesday then" may come back from a small LLM as the same move (the day said
again, the rest inherited from the earlier call), and running it would change, charge or send a
second time. A tool that changes state is one that is irreversible or has a ``compensate``; a
read-only tool (a lookup) runs again and reads fresh data. The LLM gets the earlier result.

Conversation steps (:mod:`rejoinder.flow`): the conversation is at a :class:`~rejoinder.flow.Position`
(the agent speaking, its current step). A request adds the step's instructions after the
history and restricts the calls to the step's tools (``LLMRequest.allowed_tools``); a reply's
moves are committed with :meth:`Conversation.commit` once the reply is no longer tentative.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

from .agent import Agent
from .errors import ConfigError
from .events import StepEntered, ToolCallEvent
from .flow import CONTROLS, GoTo, HandOff, HangUp, Position, Transfer
from .ports import ChatMessage, LLMRequest, ToolCall
from .stages import Stamper
from .tools import CallContext, ToolError, result_json


# ends the text of a reply the caller interrupted: the written sign of a cut-off utterance. Not a
# bracketed note: a small LLM copies such notes into its next replies (measured: SmolLM2-135M
# said "cut off by the caller" in a fault sweep); a dash it may copy is only a pause when spoken
CUT_MARK = "—"
#: the key of a held call's result: the LLM reads "<tool> result: not done yet, ask the caller:
#: <question>" and says the question (Tool.confirm)
CONFIRM_KEY = "not done yet, ask the caller"


@dataclass
class ToolRun:
    """One tool call of a reply: its result (JSON-able) or error, and whether it ran tentatively."""

    call: ToolCall
    result: Any = None
    error: str | None = None
    tentative: bool = False
    compensated: bool = False
    control: Any = None  # a GoTo / HandOff / HangUp / Transfer the tool returned
    # answered from an earlier run, not run again: the same call earlier in this turn, or a call
    # that only restates the call's last change of state (Conversation.restated)
    repeated: bool = False
    held: bool = False  # not run: the caller is asked to confirm first (Tool.confirm)

    def message(self) -> ChatMessage:
        """The ``tool`` message given back to the LLM."""
        body = {"error": self.error} if self.error is not None else self.result
        return ChatMessage("tool", result_json(body), name=self.call.name, tool_call_id=self.call.id)


@dataclass
class Step:
    """One LLM request of a reply: the text it produced and the tools it called."""

    text: str = ""
    runs: list[ToolRun] = field(default_factory=list)



def _as_run(tool: Any, arguments: Any) -> dict[str, Any]:
    """The arguments a call runs with, as recorded on the timeline: the LLM's ``arguments``
    after the tool's validators (``"4, 2, 1, 7"`` → ``"4217"`` for a normalising type), or
    as written when they do not validate (the run then fails with the reason)."""
    if tool is not None:
        try:
            return tool.params.model_validate(arguments or {}).model_dump(mode="json")
        except ValueError:  # pydantic's ValidationError: recorded as written
            pass
    return dict(arguments or {})


def changes_state(tool: Any) -> bool:
    """Whether ``tool`` changes something outside the call: irreversible, or reversible with a
    ``compensate`` (a read-only tool needs none)."""
    return tool is not None and (not tool.reversible or tool.compensate_fn is not None)


class Conversation:
    """The chat with the LLM for one call (see the module docstring)."""

    def __init__(self, agent: Agent, ctx: CallContext, st: Stamper) -> None:
        self.ctx = ctx
        self.st = st
        self.history: list[ChatMessage] = []
        self._ids = itertools.count(1)
        # tool → (the turn whose reply asked to confirm it, the call's arguments)
        self._asked: dict[str, tuple[int, dict[str, Any]]] = {}
        self.heard_log: list[tuple[int, str]] = []  # (turn id, assistant text added as heard)
        self.position = Position.start(agent)
        self.on_end = None  # called with (turn id, HangUp | Transfer) when a reply ends the call
        # the call's last run of a state-changing tool that succeeded, and its arguments as run
        self._change: tuple[ToolRun, dict[str, Any]] | None = None
        if self.position.step is not None:
            st.emit(StepEntered(agent.name, self.position.step.name, None, "start", None,
                                st.now(), st.call_id, 0))

    @property
    def agent(self) -> Agent:
        """The agent speaking now (another one after a hand-off)."""
        return self.position.agent

    @property
    def system(self) -> ChatMessage:
        return ChatMessage("system", self.agent.instructions)

    @property
    def tool_schemas(self) -> tuple:
        return tuple(t.schema for t in self.agent.tools.values())

    # --- requests -----------------------------------------------------------------------------
    def request(self, pending: list[ChatMessage], *, final_step: bool,
                pos: Position | None = None) -> LLMRequest:
        """The LLM request for the next step of a reply at ``pos`` (default: the committed
        position): system, history, the conversation step's instructions, then ``pending``
        (this reply's messages so far). Every tool of the agent is described; only the step's
        may be called (``allowed_tools``), and a step with ``required`` makes the reply's first
        request a required call. The last allowed step may only speak (``tool_choice`` none)."""
        pos = pos or self.position
        agent = pos.agent
        history = window(self.history, agent.llm.history_turns, agent.llm.keep_tool_turns)
        schemas = tuple(t.schema for t in agent.tools.values())
        allowed = pos.allowed()
        step = pos.step
        note = (ChatMessage("system", step.instructions),) if step and step.instructions else ()
        withheld: tuple[str, ...] = ()
        confirming = next((n for n in self._asked if allowed is None or n in allowed), None)
        if pending and pending[0].role == "user":  # a "yes" needs no cue to answer the question
            allowed, withheld = _offered(agent, allowed, pending[0].content, keep=confirming)
        if confirming is not None and len(pending) == 1:
            allowed = (confirming,)  # the caller answers the tool's question: yes (call) or not
        if final_step or not schemas or allowed == ():
            choice, allowed = "none", None
        elif step is not None and step.required and len(pending) == 1:
            choice = "required"
        else:
            choice = "auto"
        confirming = confirming if allowed == (confirming,) and choice == "auto" else None
        return LLMRequest(
            (ChatMessage("system", agent.instructions), *history, *note, *pending),
            max_tokens=agent.llm.max_tokens, temperature=agent.llm.temperature, tools=schemas,
            tool_choice=choice, cache_key=self.ctx.call_id, allowed_tools=allowed,
            tool_threshold=agent.llm.tool_threshold, talk_examples=tuple(agent.llm.talk_examples),
            scope=agent.llm.scope or "", confirming=confirming,
            withheld=withheld if choice != "none" and confirming is None else ())

    def commit(self, turn_id: int, moves: list[tuple[Position, str, str]], ending: Any = None) -> None:
        """Make a reply's moves the conversation's (``(position, reason, tool)`` each, in order;
        stamped as :class:`~rejoinder.events.StepEntered`) and pass on a call ending
        (:class:`~rejoinder.flow.HangUp` / :class:`~rejoinder.flow.Transfer`) to :attr:`on_end`."""
        for pos, reason, tool in moves:
            prev = self.position
            self.position = pos
            self.st.emit(StepEntered(pos.agent.name, pos.label(), prev.label(), reason, tool,
                                     self.st.now(), self.st.call_id, turn_id,
                                     {"previous_agent": prev.agent.name} if reason == "handoff" else {}))
        if ending is not None and self.on_end is not None:
            self.on_end(turn_id, ending)

    def _confirmed(self, name: str, turn_id: int) -> dict[str, Any] | None:
        """The arguments of the question about ``name`` asked in an earlier reply whose answer
        is this turn, or None (not asked: ask now). The ask is used up either way;
        :meth:`add_heard` drops it once the turn after the question has been answered."""
        asked = self._asked.pop(name, None)
        return asked[1] if asked is not None and asked[0] < turn_id else None

    def withdraw_question(self, name: str, turn_id: int) -> None:
        """Forget the confirmation question about ``name`` that turn ``turn_id``'s reply was to
        ask (that reply was dropped unheard: the turn reopened)."""
        asked = self._asked.get(name)
        if asked is not None and asked[0] == turn_id:
            del self._asked[name]

    def new_call_id(self) -> str:
        return f"call_{next(self._ids)}"

    # --- tools --------------------------------------------------------------------------------
    async def run_tool(self, turn_id: int, call: ToolCall, *, tentative: bool = False,
                       pos: Position | None = None) -> ToolRun:
        """Run one tool call at ``pos`` (default: the committed position), stamped; failures
        (unknown tool, a tool the current step does not allow, bad arguments, an exception, the
        timeout, a control result naming no step or agent) become the run's ``error`` for the
        LLM to read. A control result (:mod:`rejoinder.flow`) is kept as the run's ``control``
        and its ``result`` given to the LLM. A call that only restates the call's last change of
        state (:meth:`restated`) is not run or stamped: it gets that run's result
        (``ToolRun.repeated``). Never raises but for cancellation."""
        pos = pos or self.position
        agent = pos.agent
        tool = agent.tools.get(call.name)
        run = ToolRun(call, tentative=tentative)
        reversible = bool(tool and tool.reversible)
        confirms = tool is not None and tool.confirm_fn is not None and not tentative
        asked = self._confirmed(call.name, turn_id) if confirms else None
        # confirmed: run what the caller said yes to (the question's arguments; the call's add
        # any the question left out)
        run_args = {**call.arguments, **asked} if asked else call.arguments
        args = _as_run(tool, run_args)
        allowed = pos.allowed()
        if (asked is None and (allowed is None or call.name in allowed)
                and (earlier := self.restated(call.name, args, tool)) is not None):
            return ToolRun(call, earlier.result, repeated=True)
        self.st.stamp("tool_start", turn_id, name=call.name, args=args,
                      reversible=reversible, tentative=tentative)
        try:
            if tool is None:
                raise ToolError(f"there is no tool named {call.name!r}; the tools are "
                                f"{', '.join(agent.tools) or 'none'}")
            if allowed is not None and call.name not in allowed:  # a backend that ignored it
                raise ToolError(f"{call.name} cannot be used now; the tools for this part of the "
                                f"call are {', '.join(allowed) or 'none'}")
            if confirms and asked is None:
                run.result = {CONFIRM_KEY: await tool.question(self.ctx, call.arguments)}
                run.held = True
                self._asked[call.name] = (turn_id, dict(call.arguments))
            else:
                run.result = await tool.run(self.ctx, run_args, clock=self.st.clock)
            if isinstance(run.result, CONTROLS):
                run.control, run.result = self._control(agent, run.result), run.result.result
        except ToolError as exc:
            run.error = str(exc)
        except TimeoutError:
            run.error = f"{call.name} timed out after {tool.timeout_s:g} s"  # type: ignore[union-attr]
        finally:
            self.st.stamp("tool_end", turn_id, name=call.name, error=run.error,
                          **({"held": True} if run.held else {}))
        if run.error is None and not run.held and changes_state(tool):
            self._change = (run, args)
        self.st.emit(ToolCallEvent(call.name, args, reversible, self.st.now(),
                                   self.st.call_id, turn_id, result=run.result, error=run.error))
        return run

    def restated(self, name: str, args: dict[str, Any], tool: Any) -> ToolRun | None:
        """The run of the call's last change of state when a call of ``name`` with ``args`` (as
        run) only restates it: the same state-changing tool, and every argument given (not
        None or empty) equal to that run's; else None. Only the *last* change counts: "back to
        Wednesday" after a move to Tuesday is a new move. A compensated run no longer counts."""
        if self._change is None or not changes_state(tool):
            return None
        run, before = self._change
        if run.call.name != name or run.compensated:
            return None
        given = {k: v for k, v in args.items() if v is not None and v != ""}
        return run if all(before.get(k) == v for k, v in given.items()) else None

    @staticmethod
    def _control(agent: Agent, control: Any) -> Any:
        """A tool's control result, checked: a GoTo's step exists, a HandOff's agent is loaded.

        Raises:
            ToolError: naming the unknown step or the agent that cannot be loaded.
        """
        try:
            if isinstance(control, GoTo):
                agent.step(control.step)
            elif isinstance(control, HandOff) and not isinstance(control.agent, Agent):
                from .agent import load_agent
                control = HandOff(load_agent(control.agent), control.step, control.result)
            if isinstance(control, HandOff) and control.agent.steps:
                control.agent.step(control.step)
        except ConfigError as exc:
            raise ToolError(str(exc)) from None
        assert isinstance(control, (GoTo, HandOff, HangUp, Transfer))
        return control

    async def compensate(self, turn_id: int, run: ToolRun) -> None:
        """Undo a tentative reversible run (the transcript it was based on changed)."""
        tool = self.agent.tools.get(run.call.name)
        if tool is None or run.error is not None or run.compensated:
            return
        run.compensated = True
        try:
            await tool.compensate(self.ctx, run.call.arguments, run.result)
        except Exception as exc:  # noqa: BLE001 — reported, the call goes on
            self.st.emit(ToolCallEvent(run.call.name, dict(run.call.arguments), True, self.st.now(),
                                       self.st.call_id, turn_id, error=f"compensation failed: {exc!r}"))
            return
        self.st.emit(ToolCallEvent(run.call.name, dict(run.call.arguments), True, self.st.now(),
                                   self.st.call_id, turn_id, result={"compensated": True}))

    # --- history ------------------------------------------------------------------------------
    def add_heard(self, turn_id: int, user_text: str | None, steps: list[Step], heard: str, *,
                  by_step: list[tuple[int | None, str]] | None = None, cut: bool = False) -> None:
        """Add one reply to the history: the caller's ``user_text`` (None for a greeting), each
        step's tool calls and results, and the assistant's text cut to the ``heard`` words.
        ``by_step`` (from :meth:`rejoinder.reply.Reply.heard_by_step`) says which step wrote
        each heard word; without it they are distributed over the steps in order. ``cut``: the
        caller cut the reply off; its last heard text is marked with :data:`CUT_MARK` so the
        LLM knows it stopped there (the marker is not counted as heard in :attr:`heard_log`)."""
        # a confirmation question is answered in the next turn only
        self._asked = {n: a for n, a in self._asked.items() if a[0] >= turn_id}
        msgs: list[ChatMessage] = []
        if user_text:
            msgs.append(ChatMessage("user", user_text))
        per_step: dict[int, list[str]] = {}
        left = heard.split()
        if by_step is not None:
            left = []
            for k, text in by_step:
                if k is None or not 0 <= k < len(steps):
                    left.extend(text.split())
                else:
                    per_step.setdefault(k, []).extend(text.split())
        said: list[str] = []
        for i, step in enumerate(steps):
            if by_step is not None:
                text = " ".join(per_step.get(i, ()))
            else:
                n = min(len(step.text.split()), len(left))
                text, left = " ".join(left[:n]), left[n:]
            calls = tuple(r.call for r in step.runs)
            if text or calls:
                msgs.append(ChatMessage("assistant", text, tool_calls=calls))
                said.append(text)
            msgs.extend(r.message() for r in step.runs)
        if left:  # heard words not attributed to a step (e.g. a recovery line): keep them
            msgs.append(ChatMessage("assistant", " ".join(left)))
            said.append(" ".join(left))
        if cut:
            for i in range(len(msgs) - 1, -1, -1):
                m = msgs[i]
                if m.role == "assistant" and m.content:
                    msgs[i] = ChatMessage("assistant", m.content + CUT_MARK, tool_calls=m.tool_calls)
                    break
        self._append(msgs)
        self.heard_log.append((turn_id, " ".join(x for x in said if x)))

    def add_late_result(self, run: ToolRun) -> None:
        """A background tool's result, once it came: added as the agent's check on that call
        (a call of the same tool and arguments, with a fresh id, and its result)."""
        call = ToolCall(self.new_call_id(), run.call.name, dict(run.call.arguments))
        late = ToolRun(call, run.result, run.error)
        self._append([ChatMessage("assistant", "", tool_calls=(call,)), late.message()])

    def _append(self, msgs: list[ChatMessage]) -> None:
        """Append, merging consecutive user messages (two caller turns with no reply between)."""
        for m in msgs:
            prev = self.history[-1] if self.history else None
            if (prev is not None and m.role == prev.role == "user"):
                self.history[-1] = ChatMessage("user", f"{prev.content} {m.content}")
            else:
                self.history.append(m)


def window(history: list[ChatMessage], turns: int, keep_tool_turns: bool = False) -> list[ChatMessage]:
    """The history an LLM request carries: the last ``turns`` to ``2 × turns − 1`` caller turns
    (0: all; see below), plus, with
    ``keep_tool_turns``, every earlier turn that ran a tool — its call and result are the facts
    the agent works from (an order's status, the appointment it moved). A turn is a caller
    message and what followed it; what came before the first caller message (the greeting) is
    dropped with the first turn that leaves the window.

    A request drops at most one contiguous span (``turns`` caller turns, once every ``turns``
    requests; with ``keep_tool_turns`` a kept tool turn may split it, and the LLM then prefills
    what follows the first span), which the embedded LLM's KV cache shifts out
    (:func:`rejoinder.adapters._kvcache.reuse_shifted`) instead of prefilling again."""
    if not turns:
        return history
    starts = [i for i, m in enumerate(history) if m.role == "user"]
    if len(starts) <= turns:
        return history
    # drop in chunks of ``turns``: the window holds turns … 2 × turns − 1 caller turns, so its
    # start moves once every ``turns`` requests and the other requests are pure appends (a KV
    # shift re-rotates every kept key: ≈150 ms of CPU at ~1,000 kept tokens for SmolLM2 on one
    # thread, more than the attention a few more turns cost — llama.cpp's own context shift
    # discards in chunks for the same reason)
    keep = turns + (len(starts) - turns) % turns
    cut = starts[-keep]
    if not keep_tool_turns:
        return history[cut:]
    kept: list[ChatMessage] = []
    for a, b in zip(starts, starts[1:] + [len(history)]):
        if a >= cut:
            break
        if any(m.role == "tool" for m in history[a:b]):
            kept.extend(history[a:b])
    return kept + history[cut:]


async def undo_runs(conv: Conversation, turn_id: int, runs: list[ToolRun]) -> None:
    """Compensate ``runs`` (tentative, reversible) in reverse order; shielded from cancellation
    so a barge-in cannot leave a half-undone state."""
    async def undo() -> None:
        for run in reversed(runs):
            await conv.compensate(turn_id, run)
    await asyncio.shield(undo())


def _offered(agent: Agent, allowed: tuple[str, ...] | None, said: str,
             keep: str | None = None) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """``(allowed, withheld)``: ``allowed`` (None: every tool) without the tools not offered
    for a reply to ``said`` (the caller's words): after a question
    (:attr:`rejoinder.tools.Tool.not_on_question`), and those whose ``cue`` the words do not
    match (``end_call`` without a closing), which are also ``withheld``
    (:attr:`rejoinder.ports.LLMRequest.withheld`). ``keep``: a tool whose confirmation
    question ``said`` answers; it stays offered whatever the words."""
    names = allowed if allowed is not None else tuple(agent.tools)
    question = said.rstrip().endswith("?")
    asked = {n for n in names if question and getattr(agent.tools.get(n), "not_on_question", False)}
    cues = {n: getattr(agent.tools.get(n), "cue", None) for n in names if n not in asked and n != keep}
    uncued = tuple(n for n, cue in cues.items() if cue is not None and not cue.search(said))
    if not asked and not uncued:
        return allowed, ()
    return tuple(n for n in names if n not in asked and n not in uncued), uncued
