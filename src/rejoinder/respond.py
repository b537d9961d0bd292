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
call clock; an LLM in this process, whose requests queue on the machine's own CPU, gets the longer
``llm_in_process_*`` limits) is retried once, continuing from the text it already produced (``prefix``), so
nothing is said twice. If nothing at all could be said, the runtime says :data:`RECOVERY_LINE`
itself — a declared policy (``RecoveryPolicy.recovery_line``), marked ``source="recovery"`` on the
timeline, so the caller never waits in silence.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import replace
from typing import Callable

from .conversation import CONFIRM_KEY, Conversation, Step, ToolRun
from .events import LlmToken, Recovery
from .agent import load_agent
from .flow import HangUp, Transfer, move
from .ports import ChatMessage, LLMPort, ToolCall, ToolDecision
from .repeatguard import RepeatGuard
from .reply import AFTER_TOOLS_FIRST_CHARS, AFTER_TOOLS_FIRST_WORDS, RecoveryPolicy, Say
from .stages import timed_llm, watch
from .text import SpeakableChunker

RECOVERY_LINE = "Sorry, I lost my train of thought. Could you say that again?"
BACKGROUND_STARTED = {"status": "started", "result": "not yet: it comes in a later message; tell the "
                      "caller you are on it"}


#: per LLM port (``id``, with a weak reference that tells a recycled ``id`` from the port it
#: was: an observation never outlives its port), this process's last waits (ms, call clock)
#: from a tool round's results to the first text of the reply that reads them which the speech
#: side can speak (a :class:`~rejoinder.text.SpeakableChunker` chunk): the LLM's share of a tool
#: round's wait, which the filler policy adds to the tools' own
#: (:class:`rejoinder.reply.FillerPolicy`)
_READING: dict[int, tuple[Callable[[], object] | None, list[float]]] = {}


def _readings(llm: LLMPort) -> list[float] | None:
    entry = _READING.get(id(llm))
    if entry is None or (entry[0] is not None and entry[0]() is not llm):
        return None
    return entry[1]


def expected_reading_ms(llm: LLMPort) -> float | None:
    """The median of the last (≤ 16) observed waits from tool results to speakable text for
    ``llm`` in this process (ms); before its first tool round, the port's own declared
    ``reading_prior_ms`` (e.g. :attr:`rejoinder.adapters.llama_llm.LlamaLLM.reading_prior_ms`),
    else None (the filler policy then assumes
    :attr:`rejoinder.reply.FillerPolicy.reading_prior_ms`)."""
    xs = sorted(_readings(llm) or ())
    if xs:
        return xs[len(xs) // 2]
    prior = getattr(llm, "reading_prior_ms", None)
    return float(prior) if isinstance(prior, (int, float)) else None


def _observe_reading(llm: LLMPort, ms: float) -> None:
    xs = _readings(llm)
    if xs is None:
        try:
            ref: Callable[[], object] | None = weakref.ref(llm)
        except TypeError:  # a port without weak references (__slots__): the id alone
            ref = None
        xs = []
        _READING[id(llm)] = (ref, xs)
    xs.append(float(ms))
    del xs[:-16]
    while len(_READING) > 64:
        del _READING[next(iter(_READING))]


class _Pace:
    """Arrival pattern of one LLM stream. Several deltas arriving at one instant
    (``llm_clump_tokens``) mean the stream is buffered between the server and us (a proxy, a
    load balancer): the server sent them earlier, spread out. Such a stream's gaps are the
    buffer's, not a stalled server's, so its stall watchdog is the first-token one; the first
    gap longer than ``llm_stall_ms`` it then survives is flagged (``Recovery`` "buffered").

    An LLM in this process (``in_process``) has limits of its own
    (``llm_in_process_first_token_ms``, ``llm_in_process_stall_ms``) and no buffer between it
    and us: its clumps are the event loop's lateness, never flagged."""

    def __init__(self, policy: RecoveryPolicy, now: float, in_process: bool = False) -> None:
        self.policy = policy
        self.last = now
        self.run = 0
        self.buffered = False
        self.flagged = False
        self.in_process = in_process
        self.first_ms = (policy.llm_in_process_first_token_ms if in_process
                         else policy.llm_first_token_ms)

    def stall_ms(self) -> float:
        if self.in_process:
            return self.policy.llm_in_process_stall_ms
        return self.first_ms if self.buffered else self.policy.llm_stall_ms

    def arrived(self, now: float) -> str | None:
        gap, self.last = now - self.last, now
        if self.in_process:
            return None
        self.run = self.run + 1 if gap < 1.0 else 1
        if self.run >= self.policy.llm_clump_tokens:
            self.buffered = True
        if self.buffered and not self.flagged and gap > self.policy.llm_stall_ms:
            self.flagged = True
            return (f"a {gap:.0f} ms gap in a stream whose tokens arrive in clumps: buffered on "
                    "its way, not stalled")
        return None


class Draft:
    """One reply's LLM work for ``user_text`` (see the module docstring). Start :meth:`run` as a
    task; the speech side reads :meth:`items`."""

    def __init__(self, conv: Conversation, turn_id: int, user_text: str, llm: LLMPort,
                 recovery: RecoveryPolicy, *, tentative: bool = False,
                 prior: list[ToolRun] | None = None) -> None:
        """``prior``: tool runs that already happened in this turn (a draft dropped when the turn
        reopened): the LLM is given their results, and an irreversible call with the same name
        and arguments is answered from them instead of running again."""
        self.conv = conv
        self.prior = list(prior or ())
        # called with the task of each background tool run started (its result comes later)
        self.on_background: Callable[[asyncio.Task], None] | None = None
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
        # after a tool round: when its results were ready, and the chunker that tells when the
        # reply reading them first has speakable text (expected_reading_ms)
        self._results_at: float | None = None
        self._reading = SpeakableChunker(first_max_words=AFTER_TOOLS_FIRST_WORDS,
                                         first_max_chars=AFTER_TOOLS_FIRST_CHARS)
        self._tool_tasks: list[asyncio.Task] = []
        self._items: list[Say] = []
        self._wake = asyncio.Event()
        self._confirmed = asyncio.Event()
        if not tentative:
            self._confirmed.set()
        # conversation steps (rejoinder.flow): this reply's position, its moves not yet
        # committed to the conversation (a tentative reply's wait for the commit), and a call
        # ending (HangUp / Transfer) with the index of the LLM step that should say goodbye
        self.pos = conv.position
        self._moves: list = []
        self.ending: HangUp | Transfer | None = None
        self._ending_at = 0
        self._question = ""  # a held irreversible call's question, said by the runtime
        self._repeats = RepeatGuard()  # a sentence said twice ends the reply
        self._ending_sent = False
        self._fillers: dict[int, list[str]] = {}  # step index → the filler phrases said in its round

    def filler_said(self, step: int, phrase: str) -> None:
        """The speech side said ``phrase`` (a filler or hold phrase) while step ``step``'s tool
        round ran (the Reply's ``on_filler``). Until the LLM is sent that round's results, its
        request carries the phrases in the step's call message, as the history will once they
        are heard; else the next turn's prompt parts from the KV state there and prefills the
        whole round again (136 tokens instead of 23 on the bundled call's lookup)."""
        self._fillers.setdefault(step, []).append(phrase)

    @property
    def tentative(self) -> bool:
        return not self._confirmed.is_set()

    def confirm(self) -> None:
        """The turn is final with this transcript: irreversible tools may run now, and the
        reply's step moves become the conversation's."""
        self._confirmed.set()
        self._commit()

    def _commit(self) -> None:
        ending = self.ending if not self._ending_sent else None
        if self._moves or ending is not None:
            moves, self._moves = self._moves, []
            self._ending_sent = self._ending_sent or ending is not None
            self.conv.commit(self.turn_id, moves, ending)

    def _after_run(self, run: ToolRun) -> None:
        """Follow a tool run: a call ending, a GoTo / HandOff, or the step's ``next``."""
        if isinstance(run.control, (HangUp, Transfer)):
            self.ending, self._ending_at = run.control, len(self.steps)
        moved = move(self.pos, run.control, run.call.name, run.error is None, load_agent)
        if moved is not None:
            self.pos = moved[0]
            self._moves.append((moved[0], moved[1], run.call.name))
        if not self.tentative:
            self._commit()

    def done_tools(self) -> bool:
        """True when no tool run this draft started is still running."""
        return all(t.done() for t in self._tool_tasks)

    async def settled_runs(self) -> list:
        """Every tool run this draft started, once each has finished (a run is never cut short
        by a barge-in: its effect must be known to be compensated)."""
        done = await asyncio.gather(*self._tool_tasks, return_exceptions=True)
        return [r for r in done if not isinstance(r, BaseException)]

    # --- output -------------------------------------------------------------------------------
    def _put(self, item: Say) -> None:
        if self.steps:  # attributed to the step being written
            item = replace(item, step=len(self.steps) - 1)
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

    def _say(self, step: Step, text: str) -> None:
        if text:
            step.text += text
            self._put(Say(text))

    # --- the loop -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Run the steps; always ends with ``done`` set (and the speech side woken)."""
        try:
            await self._loop()
        finally:
            self.done = True
            self._wake.set()

    async def _loop(self) -> None:
        # a follow-up of the agent's own (no caller words) continues from the context as it is
        pending: list[ChatMessage] = [ChatMessage("user", self.user_text)] if self.user_text else []
        if self.prior:  # work of a dropped draft of this turn: done, and told to the LLM once
            self.steps.append(Step(runs=list(self.prior)))
            pending.append(ChatMessage("assistant", "", tool_calls=tuple(r.call for r in self.prior)))
            pending.extend(r.message() for r in self.prior)
        max_steps = self.pos.agent.llm.max_steps
        for k in range(max_steps):
            if self.ending is not None and self.ending.say:
                break  # the runtime says the goodbye itself
            if self._question:  # a held tool's own question (Tool.confirm), said as written
                if any(s.text for s in self.steps):
                    self._put(Say(" "))
                self._put(Say(self._question, "confirm"))
                break
            step = Step()
            self.steps.append(step)
            if k and any(s.text for s in self.steps[:-1]):
                self._put(Say(" "))  # the previous step's last sentence ends here
            calls = await self._step(pending, step,
                                     final=k == max_steps - 1 or self.ending is not None, index=k)
            if not calls:
                break
            tools = [self.pos.agent.tools.get(c.name) for c in calls]
            self._round_coming(tools)
            at = len(pending)
            pending.append(ChatMessage("assistant", step.text, tool_calls=tuple(calls)))
            for call, tool in zip(calls, tools):
                if not (tool and tool.reversible):
                    await self._confirmed.wait()  # never act irreversibly on a tentative turn
                # the same call again in this turn is answered from the earlier run, never run
                # twice: one a dropped draft ran (the first step holds those) or an earlier step
                # of this reply ran (a small model repeats its call after the result)
                earlier = [r for s in self.steps for r in s.runs]
                done = next((r for r in earlier if r.call.name == call.name and not r.held
                             and not r.compensated
                             and dict(r.call.arguments) == dict(call.arguments)), None)
                if done is not None:
                    run = ToolRun(call, done.result, done.error, repeated=True)
                    step.runs.append(run)
                    pending.append(run.message())
                    continue
                if tool is not None and tool.background and not self.tentative:
                    run = ToolRun(call, BACKGROUND_STARTED)  # the reply does not wait for it
                    step.runs.append(run)
                    pending.append(run.message())
                    task = asyncio.ensure_future(self.conv.run_tool(self.turn_id, call))
                    if self.on_background is not None:
                        self.on_background(task)
                    continue
                task = asyncio.ensure_future(
                    self.conv.run_tool(self.turn_id, call, tentative=self.tentative, pos=self.pos))
                self._tool_tasks.append(task)
                # recorded when it finishes, even if this draft is cancelled meanwhile (barge-in):
                # a tool that outlives its reply still reaches the context
                task.add_done_callback(lambda t, step=step: t.cancelled() or t.exception()
                                       or step.runs.append(t.result()))
                t0 = self.conv.st.now()
                run = await asyncio.shield(task)
                if tool is not None and not run.repeated:  # (a restatement did not run)
                    tool.observe(self.conv.st.now() - t0)
                pending.append(run.message())
                self._after_run(run)
                if run.held:
                    q = str(run.result.get(CONFIRM_KEY, "")).strip()
                    self._question = q[:1].upper() + q[1:]
            self._results_at = self.conv.st.now()
            self._reading.flush()
            if phrases := self._fillers.get(len(self.steps) - 1):
                said = " ".join(f"{step.text} {' '.join(phrases)}".split())  # as the history does
                pending[at] = ChatMessage("assistant", said, tool_calls=pending[at].tool_calls)
        if self.ending is not None:
            if self.ending.say or not any(s.text.strip() for s in self.steps[self._ending_at:]):
                source = "goodbye" if isinstance(self.ending, HangUp) else "transfer"
                if any(s.text for s in self.steps):
                    self._put(Say(" "))
                self._put(Say(self.ending.say or self.ending.fallback, source))
        elif (not any(s.text.strip() for s in self.steps) and not self._question
              and self.policy.recovery_line):
            self._recovered("recovery_line", "the LLM wrote nothing to say")
            self._put(Say(RECOVERY_LINE, "recovery"))

    def _round_coming(self, tools: list) -> None:
        """Tell the speech side a tool round is coming (a flush with its expected wait): the
        tools, then the LLM reading their results up to words it can say. A call-control round
        (``Tool.filler`` False) is never filled: the goodbye or the transfer line comes next,
        not a wait."""
        wait = sum((t.expected_ms() or 0.0) for t in tools if t is not None)
        fill = all(t is None or t.filler for t in tools)
        held = self.tentative and any(t is None or not t.reversible for t in tools)
        self._put(Say("", flush=True, wait_ms=wait, at_ms=self.conv.st.now(), tools=fill,
                      reading_ms=expected_reading_ms(self.llm), held=held))

    async def _step(self, pending: list[ChatMessage], step: Step, *, final: bool,
                    index: int = 0) -> list[ToolCall]:
        """One LLM request (retried once from the text so far) of the reply's step ``index`` (0:
        its first request; k: after k tool rounds); returns its tool calls."""
        request = self.conv.request(pending, final_step=final, pos=self.pos)
        st = self.conv.st
        for attempt in range(self.policy.llm_retries + 1):
            calls: list[ToolCall] = []
            req = request if attempt == 0 else replace(
                request, prefix=request.prefix + step.text,
                max_tokens=max(8, request.max_tokens - len(step.text) // 4))
            pace = _Pace(self.policy, st.now(), bool(getattr(self.llm, "in_process", False)))
            try:
                self.llm_requests += 1
                stream = timed_llm(st, self.turn_id, self.llm, req, step=index, retry=attempt)
                async for delta in watch(stream, st.clock, pace.first_ms,
                                         pace.stall_ms, "llm",
                                         lambda d: isinstance(d, ToolDecision)):
                    if isinstance(delta, ToolDecision):  # stamped by timed_llm; never spoken
                        if delta.chosen is not None and not step.text:
                            # the round is known now, before the call is written: a filler
                            # can cover the writing too
                            self._round_coming([self.pos.agent.tools.get(delta.chosen)])
                        continue
                    why = pace.arrived(st.now())
                    if why:  # buffered on its way: waited out, not retried (nothing said twice)
                        self._recovered("buffered", why)
                    if isinstance(delta, ToolCall):
                        calls.append(delta if delta.id else replace(delta, id=self.conv.new_call_id()))
                        continue
                    if not delta:
                        continue
                    if not step.text and not any(s.text for s in self.steps[:-1]):
                        delta = delta.lstrip()
                        if not delta:
                            continue
                    self.tokens += 1
                    st.emit(LlmToken(delta, st.now(), st.call_id, self.turn_id))
                    said, repeat = self._repeats.feed(delta)
                    self._say(step, said)
                    if self._results_at is not None and self._reading.push(delta):
                        _observe_reading(self.llm, st.now() - self._results_at)
                        self._results_at = None
                    if repeat:  # a loop: the reply ends before the repeated sentence
                        self._recovered("stop_repeat", f"the LLM repeated {self._repeats.repeated!r}")
                        return calls
                self._say(step, self._repeats.flush())
                if self._results_at is not None and step.text.strip():  # all of it one chunk
                    _observe_reading(self.llm, st.now() - self._results_at)
                self._results_at = None
                return calls
            except (asyncio.CancelledError, GeneratorExit):
                raise
            except Exception as exc:  # noqa: BLE001 — a failed stage is recovered, never fatal
                retry = attempt < self.policy.llm_retries
                self._say(step, self._repeats.flush())
                # say what we have while we recover; what the retry writes is a recovery point
                self._put(Say("", flush=True, resume=retry))
                if retry:
                    self._recovered("retry", repr(exc), step.text[-40:])
                    continue
                self._recovered("give_up", repr(exc))
                return []
        return []
