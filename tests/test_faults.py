"""Issue 17's failure kinds, each on a scripted timeline with the virtual clock.

Each test failed on main before the fix it names (kinds 1-5, 7, 8; kind 6 and 9 belong to other
work, kind 10 is tests/e2e/test_remote_recovery.py)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from rejoinder.agent import Agent
from rejoinder.harness.callrun import run_call
from rejoinder.clock import VirtualClock
from rejoinder.conversation import CUT_MARK
from rejoinder.events import AgentSpeech, Boundary, EventBus, Recovery, SpeakableText, TurnDecision
from rejoinder.ports import PortError, ToolCall, Transcript, TTSAudio
from rejoinder.session import Session
from rejoinder.stages import Stamper
from rejoinder.tools import tool

from fakes import ScriptedLLM, ToneTTS, ToolLog, heard, lookup, scripted_agent, silence, tone
from test_session import make_stack, turn

CANCEL = [ToolCall("", "cancel_order", {"order_id": "4217"})]


def recording_bus():
    bus, events = EventBus(), []
    bus.subscribe(events.append)
    return bus, events


# --- kind 1: a turn that reopens keeps the dropped work's effects ------------------------------
async def test_a_reopened_turn_never_redoes_irreversible_work_nor_loses_its_result():
    clock = VirtualClock()
    log = ToolLog()
    stack = make_stack(clock, ["Cancel order 4217.", "Cancel order 4217, please."], calls=CANCEL)
    stack.llm.ttft_ms = 300.0
    bus, events = recording_bus()
    # the caller goes on 800 ms after the first pause: the tool has run, the reply is not audible
    pcm = np.concatenate([tone(600), silence(800), tone(400)])
    res = await run_call([turn(pcm)], stack, scripted_agent(log), clock=clock, tail_ms=2500, bus=bus)
    assert [r.turn_id for r in res.turns] == [1]
    assert any(isinstance(e, TurnDecision) and e.reason == "reopen" for e in events)
    # kind 10: the reply dropped before it was heard is no reply of the turn: one AgentSpeech
    speech = [e for e in events if isinstance(e, AgentSpeech)]
    assert [(e.turn_id, e.interrupted) for e in speech] == [(1, False)]
    assert res.unheard_context_words == 0
    assert log.executed == [""]  # the irreversible tool ran once, not once per draft
    roles = [(m.role, m.content if m.role != "tool" else "result") for m in res.context]
    # the caller's words once, the call and its result once, then what was heard
    assert roles[0] == ("user", "Cancel order 4217, please.")
    assert [m.role for m in res.context] == ["user", "assistant", "tool", "assistant"]
    assert res.context[1].tool_calls[0].name == "cancel_order"
    assert '"cancelled": "4217"' in res.context[2].content
    # the LLM was given the result; it was not asked to decide the call again
    second_reply = [r for r in stack.llm.requests if r.messages[-1].role == "tool"]
    assert second_reply and '"cancelled"' in second_reply[-1].messages[-1].content
    # the segments measure the reply that was heard, not the dropped one
    rec = res.turns[0]
    segs = rec.segments()
    assert rec.stamps["first_speakable_text"] > rec.stamps["user_speech_end"]
    assert segs["llm_ttft"] > 0 and segs["tts_ttfb"] == pytest.approx(80, abs=5)
    assert sum(segs.values()) == pytest.approx(rec.v2v_ms(), abs=1)


async def test_speech_over_a_filler_alone_reopens_the_turn_and_keeps_its_irreversible_work():
    """The caller pauses after "Yes, cancel it." and goes on "Please do, …" 900 ms later, while
    only the tool round's filler ("One moment.") has played: the same turn goes on (one reply
    to the whole, the cancellation run once and given to the LLM), not a barge-in that leaves
    the result unsaid. The turn's times are those of the reply heard. Speech that starts more
    than ``filler_reopen_ms`` (1 s) after the caller's last word is a barge-in, as is speech
    once the answer's own words are audible."""
    from rejoinder.reply import FillerPolicy

    texts = ["Yes, cancel it.", "Yes, cancel it. Please do, there's no way round it."]

    async def call(gap_ms: float):
        clock = VirtualClock()
        log = ToolLog()
        stack = make_stack(clock, texts, calls=CANCEL)
        stack.llm.ttft_ms = 300.0
        bus, events = recording_bus()
        pcm = np.concatenate([tone(600), silence(gap_ms), tone(700)])
        res = await run_call([turn(pcm)], stack, scripted_agent(log), clock=clock, tail_ms=3000,
                             bus=bus, filler=FillerPolicy(reading_prior_ms=1000))
        return res, events, log

    res, events, log = await call(900)  # resumes 120 ms into the filler
    fill = next(e for e in events if isinstance(e, SpeakableText) and e.source == "filler")
    audible = next(e.t_ms for e in events if isinstance(e, Boundary) and e.name == "playback_start")
    reopen = next(e.t_ms for e in events if isinstance(e, TurnDecision) and e.reason == "reopen")
    assert fill.text.strip() == "One moment." and audible < reopen
    assert [r.turn_id for r in res.turns] == [1]
    speech = [e for e in events if isinstance(e, AgentSpeech)]
    assert [(e.turn_id, e.interrupted) for e in speech] == [(1, False)]
    assert log.executed == [""]  # the irreversible tool ran once
    assert [m.role for m in res.context] == ["user", "assistant", "tool", "assistant"]
    assert res.context[0].content == texts[1]
    [rec] = res.turns
    assert rec.status == "completed" and "interrupted_at" not in rec.stamps
    assert rec.stamps["playback_start"] == rec.stamps["answer_start"] > reopen
    assert sum(rec.segments().values()) == pytest.approx(rec.v2v_ms(), abs=1)

    for gap in (1200, 2300):  # a filler still playing but 1.2 s on; the answer audible
        res, events, log = await call(gap)
        assert [r.turn_id for r in res.turns] == [1, 2] and res.turns[0].status == "interrupted"
        assert not any(isinstance(e, TurnDecision) and e.reason == "reopen" for e in events)


async def test_a_reopened_turn_decides_a_reversible_call_again_on_the_whole_turn():
    """ "8 8 4 1" is committed and looked up, then the caller corrects it ("sorry, 8 8 1 4"):
    the first lookup is compensated and the call is decided again on the whole turn's words,
    rather than the LLM answering the superseded lookup's result."""
    clock = VirtualClock()
    log = ToolLog()
    first, whole = "Order 8 8 4 1.", "Order 8 8 4 1. Sorry, 8 8 1 4."
    stack = make_stack(clock, [first, whole], calls=lookup())
    stack.llm.ttft_ms = 300.0
    bus, events = recording_bus()
    pcm = np.concatenate([tone(600), silence(800), tone(400)])
    res = await run_call([turn(pcm)], stack, scripted_agent(log), clock=clock, tail_ms=2500, bus=bus)
    assert [r.turn_id for r in res.turns] == [1]
    assert any(isinstance(e, TurnDecision) and e.reason == "reopen" for e in events)
    assert log.executed == [first, whole] and log.compensated == [first]
    [rec] = res.turns
    assert [(t["args"]["text"], bool(t.get("compensated"))) for t in rec.tools] == \
        [(first, True), (whole, False)]
    # the context holds the call on the whole turn only, and its result once
    assert [m.role for m in res.context] == ["user", "assistant", "tool", "assistant"]
    assert res.context[0].content == whole
    assert res.context[1].tool_calls[0].arguments["text"] == whole


class CallsByWords(ScriptedLLM):
    """Calls the tool its ``by_words`` maps the caller's last words to (else it speaks)."""

    by_words: dict = {}

    async def stream(self, request):
        last = request.messages[-1]
        self.calls = self.by_words.get(last.content, []) if last.role == "user" else []
        async for d in super().stream(request):
            yield d


@pytest.mark.parametrize("first_call", ["end_call", "cancel_order"])
async def test_a_reopened_turn_decides_again_after_a_hang_up_or_a_question_that_did_nothing(first_call):
    """The first pause's words went to ``end_call`` (a hang-up asked for) or to a cancel that
    must be confirmed first (only its question written); the caller went on and gave an order
    number. Neither did anything — the reopen cancels the hang-up, and the question was never
    heard — so the turn's next draft decides on the whole turn's words (a lookup) instead of
    reading the dropped call's result, and no question is left waiting for a yes."""
    from rejoinder.calltools import end_call

    clock = VirtualClock()
    log = ToolLog()
    first, whole = "Morning.", "Morning. Order 8 8 1 4, please."

    @tool(confirm=lambda order_id, text="": f"shall I cancel order {order_id}?")
    async def cancel_order(order_id: str, text: str = "") -> dict:
        """Cancel an order."""
        log.executed.append(text)
        return {"cancelled": order_id}

    agent = Agent("You are a test agent.", tools=[
        scripted_agent(log).tools["lookup_order"], cancel_order, end_call()])
    stack = make_stack(clock, [first, whole])
    stack.llm = CallsByWords(clock, ["Order", " 8814", " has", " shipped."])
    stack.llm.by_words = {first: [ToolCall("", first_call, {} if first_call == "end_call"
                                           else {"order_id": "8814", "text": "{user}"})],
                          whole: lookup()}
    stack.llm.ttft_ms = 300.0
    stack.tts.ttfb_ms = 400.0  # the caller goes on before the first reply is audible
    bus, events = recording_bus()
    pcm = np.concatenate([tone(600), silence(800), tone(400)])
    res = await run_call([turn(pcm)], stack, agent, clock=clock, tail_ms=2500, bus=bus)
    assert any(isinstance(e, TurnDecision) and e.reason == "reopen" for e in events)
    assert res.hangup is None and res.error is None
    assert log.executed == [whole]  # the lookup, on the whole turn; nothing cancelled
    [rec] = res.turns
    assert [t["name"] for t in rec.tools] == [first_call, "lookup_order"]
    # the context holds the lookup on the whole turn only: the dropped call is not told
    assert [m.role for m in res.context] == ["user", "assistant", "tool", "assistant"]
    assert res.context[0].content == whole
    assert res.context[1].tool_calls[0].name == "lookup_order"
    # the next request of the call is no answer to a confirmation question
    assert all(r.confirming is None for r in stack.llm.requests)


# --- kind 2: a tool that outlives an interrupted reply ------------------------------------------
async def test_a_tool_still_running_at_barge_in_reaches_the_context_when_it_ends():
    clock = VirtualClock()
    ran: list[str] = []

    @tool(timeout_s=None)
    async def cancel_order(order_id: str) -> dict:
        """Cancel an order."""
        await clock.sleep_until(clock.now_ms() + 3000)  # a slow back end
        ran.append(order_id)
        return {"cancelled": order_id}

    agent = Agent("test", tools=[cancel_order])
    stack = make_stack(clock, ["Cancel order 4217.", "Hello? Are you there?"], calls=CANCEL,
                       tokens=["Cancelling", " order", " 4217", " now", "."])

    class SaysFirst(ScriptedLLM):  # writes a sentence before its tool call, like real LLMs do
        async def stream(self, request):
            if request.messages[-1].role == "user" and request.tool_choice != "none" \
                    and len(self.requests) == 0:
                self.requests.append(request)
                await self.clock.sleep_until(self.clock.now_ms() + self.ttft_ms)
                for tok in ["One", " moment,", " cancelling", " it."]:
                    yield tok
                yield ToolCall("", "cancel_order", {"order_id": "4217"})
                return
            async for d in super().stream(request):
                yield d

    stack.llm = SaysFirst(clock, ["Done,", " it", " is", " cancelled."], calls=[])
    # the caller talks over the sentence while the tool runs (barge-in after 1 s of speech)
    res = await run_call([turn(tone(600)), turn(tone(1500), barge_in_ms=600)], stack, agent,
                         clock=clock, tail_ms=5000)
    assert ran == ["4217"]
    msgs = [(m.role, m.tool_calls[0].name if m.tool_calls else m.content) for m in res.context]
    # the first reply: its heard words (cut), its tool call and result, then the caller's barge-in
    assert msgs[0] == ("user", "Cancel order 4217.")
    assert ("assistant", "cancel_order") in msgs
    tool_msgs = [m for m in res.context if m.role == "tool"]
    assert len(tool_msgs) == 1 and '"cancelled": "4217"' in tool_msgs[0].content
    # ... and it was there, before the caller's next words, when the LLM answered them
    nxt = next(r for r in stack.llm.requests if r.messages[-1].content == "Hello? Are you there?")
    assert any(m.role == "tool" and "cancelled" in m.content for m in nxt.messages)


# --- kind 3: blocking tools that time out must not starve recognition ---------------------------
async def test_hung_blocking_tools_time_out_on_the_call_clock_and_leave_model_threads_free():
    clock = VirtualClock()
    release = threading.Event()

    @tool(reversible=True, timeout_s=1.0)
    def lookup_order(order_id: str, text: str = "") -> dict:
        """Look up an order (a blocking client that hangs)."""
        release.wait(30)
        return {}

    from rejoinder.conversation import Conversation
    from rejoinder.tools import CallContext

    bus, events = recording_bus()
    st = Stamper("c", clock, bus)
    conv = Conversation(Agent("t", tools=[lookup_order]), CallContext("c"), st)
    try:
        # more hung calls than the default executor has threads
        n = 40
        runs = [asyncio.ensure_future(conv.run_tool(1, ToolCall(f"c{i}", "lookup_order",
                                                                {"order_id": str(i)})))
                for i in range(n)]
        await clock.advance(1000.0)
        await asyncio.wait_for(asyncio.gather(*runs), 10)  # the timeout is on the call clock
        results = [r.result() for r in runs]
        assert all(r.error and ("timed out" in r.error or "busy" in r.error) for r in results)
        assert sum("timed out" in r.error for r in results) >= 4
        # model inference (STT, end of turn) still gets threads: not starved by the hung tools
        assert await asyncio.wait_for(asyncio.to_thread(lambda: 42), 10) == 42
    finally:
        release.set()


# --- kind 4: waits without a watchdog; clock ticks independent of arriving audio ----------------
async def test_the_transcript_of_a_sound_over_the_reply_has_a_watchdog_and_a_stamp():
    clock = VirtualClock()
    many = ["Order 4217 has shipped,"] + [f" word{i}" for i in range(20)] + ["."]
    stack = make_stack(clock, ["Check order 4217."], tokens=many)
    inner = stack.stt

    class HangsOnShortAudio:
        sample_rate = 16000

        async def stream(self, audio):
            chunks = [c async for c in audio]
            if sum(len(c) for c in chunks) < 16000 * 0.8:
                await clock.sleep_until(clock.now_ms() + 600000)  # never answers

            async def again():
                for c in chunks:
                    yield c
            async for tr in inner.stream(again()):
                yield tr

    stack.stt = HangsOnShortAudio()
    bus, events = recording_bus()
    res = await run_call([turn(tone(600)), turn(tone(250), barge_in_ms=1500)], stack,
                         scripted_agent(), clock=clock, tail_ms=1500, bus=bus)
    assert [r.turn_id for r in res.turns] == [1]
    assert heard(res) == ["".join(many)]  # the held reply resumed and finished
    recs = [e for e in events if isinstance(e, Recovery) and e.stage == "stt"]
    assert [(r.action, r.reason) for r in recs] == [("resume", "no transcript in time")]
    stt = [e for e in events if isinstance(e, Boundary) and e.name == "stt_request"]
    assert len(stt) == 2  # the turn's and the overlap's: every STT request is stamped


async def test_end_of_turn_is_decided_when_the_transport_stops_sending_frames():
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"])
    bus, events = recording_bus()
    session = Session(Stamper("c", clock, bus), stack, scripted_agent())
    speech = tone(600)
    t = 0.0
    try:
        for k in range(0, len(speech), 320):  # 600 ms of speech, then the transport goes quiet
            await clock.pace(t)
            session.on_frame(speech[k:k + 320], t)
            t += 20.0
        await clock.advance(4000.0)
    finally:
        await session.close()
    decided = [e for e in events if isinstance(e, Boundary) and e.name == "eot_decided"]
    assert len(decided) == 1 and decided[0].t_ms < 600 + 500 + 200 + 900 + 100
    assert stack.llm.requests  # and the reply was started


# --- kind 5: what the LLM is told was heard -----------------------------------------------------
class UntimedTTS(ToneTTS):
    """No word timings; its speaking rate changes from one request to the next (250 / 400 ms a
    word), as a real engine's does with the text, or after a fallback to another engine."""

    def __init__(self, clock):
        super().__init__(clock)
        self.made: list[tuple[int, int]] = []  # (words, ms per word) per request

    async def stream(self, text):
        self.texts.append(text)
        await self.clock.sleep_until(self.clock.now_ms() + self.ttfb_ms)
        per = 250 if len(self.made) % 2 else 400
        self.made.append((len(text.split()), per))
        n = len(text.split()) * int(per * self.sample_rate / 1000)
        t = np.arange(n) / self.sample_rate
        yield TTSAudio((0.3 * 32767 * np.sin(2 * np.pi * 440 * t)).astype(np.int16), ())


async def test_heard_text_without_word_timings_counts_only_what_played_and_is_marked_cut():
    clock = VirtualClock()
    many = ["Go on, go on."] + [" Go on, go on, go on."] * 8
    stack = make_stack(clock, ["Tell me.", "Stop."], tokens=many)
    stack.tts = UntimedTTS(clock)
    res = await run_call([turn(tone(600)), turn(tone(800), barge_in_ms=3000)], stack,
                         scripted_agent(), clock=clock, tail_ms=1500)
    first = res.turns[0]
    played_ms = first.stamps["interrupted_at"] - first.stamps["playback_start"]
    ends, t = [], 0.0
    for n, per in stack.tts.made:
        for _ in range(n):
            t += per
            ends.append(t)
    played_words = sum(1 for e in ends if e <= played_ms + 1)
    kept = heard(res)[0].split()
    assert played_words - 1 <= len(kept) <= played_words  # never a word that had not played
    prior = stack.llm.requests[-1].messages[-2]
    assert prior.role == "assistant" and prior.content.endswith(CUT_MARK)


async def test_heard_text_is_the_written_text_kept_with_the_step_that_wrote_it():
    from rejoinder.adapters.faults import FaultyTTS, parse_faults

    clock = VirtualClock()
    stack = make_stack(clock, ["Where is order 4217?"],
                       calls=[ToolCall("", "lookup_order", {"order_id": "4217"})],
                       tokens=["Order", " 4217", " ships", " on", " May", " 3rd", "."])

    class SpeaksThenCalls(ScriptedLLM):
        async def stream(self, request):
            if request.messages[-1].role == "user" and request.tool_choice != "none":
                self.requests.append(request)
                await self.clock.sleep_until(self.clock.now_ms() + self.ttft_ms)
                yield "Let me check 4217."
                yield ToolCall("", "lookup_order", {"order_id": "4217"})
                return
            async for d in super().stream(request):
                yield d

    stack.llm = SpeaksThenCalls(clock, ["Order", " 4217", " ships", " on", " May", " 3rd", "."])
    stack.tts = FaultyTTS(stack.tts, parse_faults("tts:drop@0"), clock)  # every request dies halfway
    stack.backup_tts = ToneTTS(clock, ttfb_ms=20)
    res = await run_call([turn(tone(600))], stack, scripted_agent(), clock=clock, tail_ms=4000)
    msgs = [(m.role, m.content) for m in res.context if m.role != "tool"]
    assert msgs == [("user", "Where is order 4217?"), ("assistant", "Let me check 4217."),
                    ("assistant", "Order 4217 ships on May 3rd.")]


# --- kind 7: a reply that cannot be synthesised and no backup TTS -------------------------------
class DeadTTS(ToneTTS):
    async def stream(self, text):
        raise PortError("TTS server unreachable")
        yield  # pragma: no cover


async def test_a_reply_that_cannot_be_synthesised_is_answered_with_the_spoken_recovery():
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"])
    stack.tts = DeadTTS(clock)
    stack.recovery_audio = tone(1500)  # rendered at warm-up, while the TTS was up
    bus, events = recording_bus()
    res = await run_call([turn(tone(600))], stack, scripted_agent(), clock=clock, tail_ms=2500,
                         bus=bus)
    rec = res.turns[0]
    assert "playback_start" in rec.stamps  # the caller was not left in silence
    assert any(isinstance(e, Recovery) and e.action == "spoken_recovery" for e in events)
    assert res.context[-1].role == "assistant" and "trouble" in res.context[-1].content


async def test_warmup_renders_the_spoken_recovery_opens_sockets_and_warms_the_stt():
    from rejoinder.runtime import warm_ports

    clock = VirtualClock()
    stack = make_stack(clock, ["x"])
    opened: list[str] = []

    class Connecting(ToneTTS):
        async def connect(self):
            opened.append("tts")

    stack.tts = Connecting(clock, ttfb_ms=0)
    stack.stt.warmup = lambda: opened.append("stt decoded")  # (WhisperSTT's first decode)
    task = asyncio.ensure_future(warm_ports(stack))
    await clock.advance(100)
    await task
    assert opened == ["tts", "stt decoded"]
    assert stack.recovery_audio is not None and len(stack.recovery_audio) > 16000  # > 1 s


# --- kind 8: a stream that arrives in clumps ----------------------------------------------------
class ClumpedLLM(ScriptedLLM):
    """Tokens reach us three at a time every 900 ms (a buffering proxy), longer than the stall
    watchdog (700 ms)."""

    async def stream(self, request):
        self.requests.append(request)
        await self.clock.sleep_until(self.clock.now_ms() + self.ttft_ms)
        done = max((k for k in range(len(self.tokens) + 1)
                    if k and request.prefix.endswith("".join(self.tokens[:k]))), default=0)
        for i, tok in enumerate(self.tokens[done:]):
            if i and i % 3 == 0:
                await self.clock.sleep_until(self.clock.now_ms() + 900)
            yield tok


async def test_a_clumped_stream_is_flagged_as_buffered_not_retried():
    clock = VirtualClock()
    tokens = ["Your", " order", " has", " shipped", " and", " it", " comes", " on", " Friday", "."]
    stack = make_stack(clock, ["Where is my order?"])
    stack.llm = ClumpedLLM(clock, tokens)
    bus, events = recording_bus()
    res = await run_call([turn(tone(600))], stack, scripted_agent(), clock=clock, tail_ms=4000,
                         bus=bus)
    recs = [(e.stage, e.action) for e in events if isinstance(e, Recovery)]
    assert ("llm", "retry") not in recs
    assert ("llm", "buffered") in recs
    assert len(stack.llm.requests) == 1
    assert heard(res) == ["".join(tokens)]


# --- a background tool finishes after its reply: the agent follows up on its own ----------------
async def test_a_background_tool_result_is_followed_up_by_the_agent_on_its_own():
    clock = VirtualClock()

    @tool(background=True, timeout_s=None)
    async def check_refund(order_id: str) -> dict:
        """Check a refund with the bank (slow)."""
        await clock.sleep_until(clock.now_ms() + 4000)
        return {"refund": "approved", "order_id": order_id}

    agent = Agent("test", tools=[check_refund])
    stack = make_stack(clock, ["Is my refund through?"],
                       calls=[ToolCall("", "check_refund", {"order_id": "4217"})],
                       tokens=["I", " am", " on", " it."])
    bus, events = recording_bus()
    res = await run_call([turn(tone(600))], stack, agent, clock=clock, tail_ms=9000, bus=bus)
    follow = [e for e in events if isinstance(e, TurnDecision) and e.reason == "follow_up"]
    assert len(follow) == 1
    assert [(r.turn_id, r.initiated) for r in res.turns] == [(1, None), (2, "follow_up")]
    # the reply did not wait for the tool: it was said before the tool ended
    first, second = res.turns
    assert first.stamps["playback_end"] < follow[0].t_ms
    # the agent's own follow-up was asked with the real result, and was heard
    req = stack.llm.requests[-1]
    assert req.messages[-1].role == "tool" and '"approved"' in req.messages[-1].content
    assert heard(res) == ["I am on it.", "I am on it."]
    assert "playback_start" in second.stamps


async def test_an_earlier_pause_s_interim_is_never_promoted_for_a_later_pause():
    from dataclasses import dataclass

    @dataclass
    class StreamingSTT:  # interims, then the final 400 ms later (a remote streaming STT)
        clock: VirtualClock
        sample_rate: int = 16000
        calls: int = 0

        async def stream(self, audio):
            async for _ in audio:
                pass
            self.calls += 1
            first = self.calls == 1
            if not first:  # this time the first interim takes a while
                await self.clock.sleep_until(self.clock.now_ms() + 300)
            yield Transcript("I want to" if first else "I want to check order 4217", False)
            await self.clock.sleep_until(self.clock.now_ms() + 400)
            yield Transcript("I want to" if first else "I want to check order 4217.", True)

    clock = VirtualClock()
    stack = make_stack(clock, ["unused"])
    stack.stt = StreamingSTT(clock)
    bus, events = recording_bus()
    # a pause long enough for the first interim to age past the interim watchdog, then more
    pcm = np.concatenate([tone(500), silence(300), tone(1500)])
    res = await run_call([turn(pcm)], stack, scripted_agent(), clock=clock, tail_ms=2500, bus=bus)
    assert res.turns[0].transcript == "I want to check order 4217."
    assert not [e for e in events if isinstance(e, Recovery) and e.action == "promoted"]


async def test_audio_arriving_after_a_silent_gap_is_heard_late_not_dropped():
    clock = VirtualClock()
    stack = make_stack(clock, ["Hello.", "And another thing."])
    bus, events = recording_bus()
    session = Session(Stamper("c", clock, bus), stack, scripted_agent())
    speech = np.concatenate([tone(600), silence(400)])
    t = 0.0
    try:
        for k in range(0, len(speech), 320):
            await clock.pace(t)
            session.on_frame(speech[k:k + 320], t)
            t += 20.0
        await clock.advance(3000.0)  # the transport stalls; the session fills in silence
        for k in range(0, len(speech), 320):  # then delivers more, stamped on its own sample clock
            await clock.pace(clock.now_ms() + 20.0)
            session.on_frame(speech[k:k + 320], t)
            t += 20.0
        await clock.advance(3000.0)
    finally:
        await session.close()
    assert session.late_frames > 0
    ends = [e.t_ms for e in events if isinstance(e, Boundary) and e.name == "user_speech_end"]
    # the late speech reached the VAD (after the filled-in silence): a second pause was heard
    assert len(ends) == 2 and ends[0] == pytest.approx(600, abs=40) and ends[1] > 3000
