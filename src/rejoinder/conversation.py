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
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

from .agent import Agent
from .events import ToolCallEvent
from .ports import ChatMessage, LLMRequest, ToolCall
from .stages import Stamper
from .tools import CallContext, ToolError, result_json


@dataclass
class ToolRun:
    """One tool call of a reply: its result (JSON-able) or error, and whether it ran tentatively."""

    call: ToolCall
    result: Any = None
    error: str | None = None
    tentative: bool = False
    compensated: bool = False

    def message(self) -> ChatMessage:
        """The ``tool`` message given back to the LLM."""
        body = {"error": self.error} if self.error is not None else self.result
        return ChatMessage("tool", result_json(body), name=self.call.name, tool_call_id=self.call.id)


@dataclass
class Step:
    """One LLM request of a reply: the text it produced and the tools it called."""

    text: str = ""
    runs: list[ToolRun] = field(default_factory=list)


class Conversation:
    """The chat with the LLM for one call (see the module docstring)."""

    def __init__(self, agent: Agent, ctx: CallContext, st: Stamper) -> None:
        self.agent = agent
        self.ctx = ctx
        self.st = st
        self.history: list[ChatMessage] = []
        self._ids = itertools.count(1)
        self.system = ChatMessage("system", agent.instructions)
        self.tool_schemas = tuple(t.schema for t in agent.tools.values())
        self.heard_log: list[tuple[int, str]] = []  # (turn id, assistant text added as heard)

    # --- requests -----------------------------------------------------------------------------
    def request(self, pending: list[ChatMessage], *, final_step: bool) -> LLMRequest:
        """The LLM request for the next step of a reply: system, history, then ``pending`` (this
        reply's messages so far). The last allowed step may only speak (``tool_choice`` none)."""
        history = window(self.history, self.agent.llm.history_turns, self.agent.llm.keep_tool_turns)
        return LLMRequest(
            (self.system, *history, *pending), max_tokens=self.agent.llm.max_tokens,
            temperature=self.agent.llm.temperature, tools=self.tool_schemas,
            tool_choice="none" if final_step or not self.tool_schemas else "auto",
            cache_key=self.ctx.call_id, tool_threshold=self.agent.llm.tool_threshold,
            talk_examples=tuple(self.agent.llm.talk_examples))

    def new_call_id(self) -> str:
        return f"call_{next(self._ids)}"

    # --- tools --------------------------------------------------------------------------------
    async def run_tool(self, turn_id: int, call: ToolCall, *, tentative: bool = False) -> ToolRun:
        """Run one tool call, stamped; failures (unknown tool, bad arguments, an exception, the
        timeout) become the run's ``error`` for the LLM to read. Never raises but for
        cancellation."""
        tool = self.agent.tools.get(call.name)
        run = ToolRun(call, tentative=tentative)
        reversible = bool(tool and tool.reversible)
        self.st.stamp("tool_start", turn_id, name=call.name, args=dict(call.arguments),
                      reversible=reversible, tentative=tentative)
        try:
            if tool is None:
                raise ToolError(f"there is no tool named {call.name!r}; the tools are "
                                f"{', '.join(self.agent.tools) or 'none'}")
            run.result = await tool.run(self.ctx, call.arguments)
        except ToolError as exc:
            run.error = str(exc)
        except TimeoutError:
            run.error = f"{call.name} timed out after {tool.timeout_s:g} s"  # type: ignore[union-attr]
        finally:
            self.st.stamp("tool_end", turn_id, name=call.name, error=run.error)
        self.st.emit(ToolCallEvent(call.name, dict(call.arguments), reversible, self.st.now(),
                                   self.st.call_id, turn_id, result=run.result, error=run.error))
        return run

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
    def add_heard(self, turn_id: int, user_text: str | None, steps: list[Step], heard: str) -> None:
        """Add one reply to the history: the caller's ``user_text`` (None for a greeting), each
        step's tool calls and results, and the assistant's text cut to the ``heard`` words
        (distributed over the steps in order)."""
        msgs: list[ChatMessage] = []
        if user_text:
            msgs.append(ChatMessage("user", user_text))
        left = heard.split()
        said: list[str] = []
        for step in steps:
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
        self._append(msgs)
        self.heard_log.append((turn_id, " ".join(x for x in said if x)))

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
