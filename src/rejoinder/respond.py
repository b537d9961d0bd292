"""The LLM side of a reply: the agent loop. The LLM writes every word and picks the tools.

A :class:`Draft` answers one caller transcript. Each *step* is one streaming LLM request
(stamped ``llm_request`` / ``llm_first_token`` in :mod:`rejoinder.stages`); its text deltas go out
at once, as :class:`Say` items, to the speech side (:class:`rejoinder.reply.Reply`), which chunks
and synthesizes them while the LLM is still generating. When a step calls tools, they run
(stamped ``tool_start`` / ``tool_end``, each within its timeout), their results or errors are
given back to the LLM, and the next step continues, up to ``LLMSettings.max_steps`` steps; the
last step may only speak. A tool error or timeout is told to the LLM, which tells the caller.

Preemptive generation: a draft may start *tentatively*, on the transcript of a pause before the
turn is decided over. Its text is held back (nothing is spoken before the turn is final) and it
runs only reversible tools; an irreversible tool call waits until :meth:`Draft.confirm`. If the
caller goes on talking or the final transcript differs, the session discards the draft and the
reversible tools that ran are compensated (:func:`rejoinder.conversation.undo_runs`).

Recovery: an LLM that fails or stalls (watchdogs ``llm_first_token_ms``, ``llm_stall_ms`` on the
call clock) is retried once, continuing from the text it already produced (``prefix``), so
nothing is said twice. If nothing at all could be said, the runtime says :data:`RECOVERY_LINE`
itself — a declared policy (``RecoveryPolicy.recovery_line``), marked ``source="recovery"`` on the
timeline, so the caller never waits in silence.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from .conversation import Conversation, Step
from .events import LlmToken, Recovery
from .ports import ChatMessage, LLMPort, ToolCall
from .reply import RecoveryPolicy
from .stages import timed_llm, watch

RECOVERY_LINE = "Sorry, I lost my train of thought. Could you say that again?"


@dataclass(frozen=True, slots=True)
class Say:
    """Text for the speech side. ``source`` tells who wrote it: ``"llm"``, or words the runtime
    says on its own (``"greeting"``, ``"filler"``, ``"recovery"``, ``"idle"``). ``flush`` ends the
    current chunk (a tool round is coming: speak what is pending now); ``wait_ms`` is then the
    round's expected duration (the tools' declared or observed latency, :meth:`Tool.expected_ms`),
    written at ``at_ms`` — what the speech side's filler policy decides on."""

    text: str
    source: str = "llm"
    flush: bool = False
    wait_ms: float = 0.0  # with flush: the tool round coming is expected to take this long
    at_ms: float = 0.0    # when the item was written (call clock)


class Draft:
    """One reply's LLM work for ``user_text`` (see the module docstring). Start :meth:`run` as a
    task; the speech side reads :meth:`items`."""

    def __init__(self, conv: Conversation, turn_id: int, user_text: str, llm: LLMPort,
                 recovery: RecoveryPolicy, *, tentative: bool = False) -> None:
        self.conv = conv
        self.turn_id = turn_id
        self.user_text = user_text
        self.llm = llm
        self.policy = recovery
        self.steps: list[Step] = []
        self.done = False
        # the speculation record (rejoinder.speculation): cost and first text of this draft
        self.speculative = tentative
        self.parked = False  # a tentative draft kept while the next pause's transcript comes
        self.started_ms = conv.st.now()
        self.first_text_ms: float | None = None
        self.llm_requests = 0
        self.tokens = 0
        self.task: asyncio.Task | None = None  # set by the session that runs it
        self._tool_tasks: list[asyncio.Task] = []
        self._items: list[Say] = []
        self._wake = asyncio.Event()
        self._confirmed = asyncio.Event()
        if not tentative:
            self._confirmed.set()

    @property
    def tentative(self) -> bool:
        return not self._confirmed.is_set()

    def confirm(self) -> None:
        """The turn is final with this transcript: irreversible tools may run now."""
        self._confirmed.set()

    async def settled_runs(self) -> list:
        """Every tool run this draft started, once each has finished (a run is never cut short
        by a barge-in: its effect must be known to be compensated)."""
        done = await asyncio.gather(*self._tool_tasks, return_exceptions=True)
        return [r for r in done if not isinstance(r, BaseException)]

    # --- output -------------------------------------------------------------------------------
    def _put(self, item: Say) -> None:
        if self.first_text_ms is None and item.text.strip():
            self.first_text_ms = self.conv.st.now()
        self._items.append(item)
        self._wake.set()

    async def items(self):
        """Everything said so far, then each new item as it comes, until the draft is done."""
        i = 0
        while True:
            if i < len(self._items):
                yield self._items[i]
                i += 1
                continue
            if self.done:
                return
            self._wake.clear()
            await self._wake.wait()

    def _recovered(self, action: str, reason: str, resume_from: str = "") -> None:
        st = self.conv.st
        st.emit(Recovery("llm", action, reason, resume_from, st.now(), st.call_id, self.turn_id))

    # --- the loop -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Run the steps; always ends with ``done`` set (and the speech side woken)."""
        try:
            await self._loop()
        finally:
            self.done = True
            self._wake.set()

    async def _loop(self) -> None:
        pending: list[ChatMessage] = [ChatMessage("user", self.user_text)]
        max_steps = self.conv.agent.llm.max_steps
        for k in range(max_steps):
            step = Step()
            self.steps.append(step)
            if k and any(s.text for s in self.steps[:-1]):
                self._put(Say(" "))  # the previous step's last sentence ends here
            calls = await self._step(pending, step, final=k == max_steps - 1)
            if not calls:
                break
            tools = [self.conv.agent.tools.get(c.name) for c in calls]
            wait = sum((t.expected_ms() or 0.0) for t in tools if t is not None)
            self._put(Say("", flush=True, wait_ms=wait, at_ms=self.conv.st.now()))
            pending.append(ChatMessage("assistant", step.text, tool_calls=tuple(calls)))
            for call, tool in zip(calls, tools):
                if not (tool and tool.reversible):
                    await self._confirmed.wait()  # never act irreversibly on a tentative turn
                task = asyncio.ensure_future(
                    self.conv.run_tool(self.turn_id, call, tentative=self.tentative))
                self._tool_tasks.append(task)
                t0 = self.conv.st.now()
                run = await asyncio.shield(task)
                if tool is not None:
                    tool.observe(self.conv.st.now() - t0)
                step.runs.append(run)
                pending.append(run.message())
        if not any(s.text.strip() for s in self.steps) and self.policy.recovery_line:
            self._recovered("recovery_line", "the LLM wrote nothing to say")
            self._put(Say(RECOVERY_LINE, "recovery"))

    async def _step(self, pending: list[ChatMessage], step: Step, *, final: bool) -> list[ToolCall]:
        """One LLM request (retried once from the text so far); returns its tool calls."""
        request = self.conv.request(pending, final_step=final)
        st = self.conv.st
        for attempt in range(self.policy.llm_retries + 1):
            calls: list[ToolCall] = []
            req = request if attempt == 0 else replace(
                request, prefix=request.prefix + step.text,
                max_tokens=max(8, request.max_tokens - len(step.text) // 4))
            try:
                self.llm_requests += 1
                stream = timed_llm(st, self.turn_id, self.llm, req)
                async for delta in watch(stream, st.clock, self.policy.llm_first_token_ms,
                                         self.policy.llm_stall_ms, "llm"):
                    if isinstance(delta, ToolCall):
                        calls.append(delta if delta.id else replace(delta, id=self.conv.new_call_id()))
                        continue
                    if not delta:
                        continue
                    if not step.text and not any(s.text for s in self.steps[:-1]):
                        delta = delta.lstrip()
                        if not delta:
                            continue
                    step.text += delta
                    self.tokens += 1
                    st.emit(LlmToken(delta, st.now(), st.call_id, self.turn_id))
                    self._put(Say(delta))
                return calls
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except Exception as exc:  # noqa: BLE001 — a failed stage is recovered, never fatal
                self._put(Say("", flush=True))  # say what we have while we recover
                if attempt < self.policy.llm_retries:
                    self._recovered("retry", repr(exc), step.text[-40:])
                    continue
                self._recovered("give_up", repr(exc))
                return []
        return []
