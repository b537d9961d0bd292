"""The owner of one caller turn (rejoinder.turnrun): its transitions keep the invariants its
docstring states, and the session keeps its turns in one TurnRuns (no per-turn dict)."""

from __future__ import annotations

import asyncio

import numpy as np
from fakes import scripted_agent, silence, tone
from test_session import make_stack

from rejoinder.clock import VirtualClock
from rejoinder.events import EventBus
from rejoinder.session import Session
from rejoinder.stages import Stamper
from rejoinder.turnrun import TurnRun, TurnRuns


class _Draft:
    """Only what TurnRun reads of a rejoinder.respond.Draft."""

    def __init__(self, user_text: str, *, tentative: bool) -> None:
        self.user_text = user_text
        self._tentative = tentative
        self.parked = False
        self.confirmed = False
        self.task = None

    @property
    def tentative(self) -> bool:
        return self._tentative

    def confirm(self) -> None:
        self._tentative = False
        self.confirmed = True

    async def settled_runs(self) -> list:
        return []


def test_a_new_pause_replaces_the_last_ones_transcription():
    async def main() -> None:
        run = TurnRun(1)
        first = asyncio.ensure_future(asyncio.sleep(10))
        run.speculate(900.0, first)
        run.note_interim(900.0, "I want to", 950.0)
        assert (run.interim, run.interim_at) == ("I want to", 950.0)
        second = asyncio.ensure_future(asyncio.sleep(10))
        run.speculate(1500.0, second)
        await asyncio.gather(first, return_exceptions=True)
        assert first.cancelled() and run.interim is None and run.interim_at is None
        run.note_interim(900.0, "stale", 1600.0)  # the earlier pause's STT: ignored
        assert run.interim is None and run.latest(1500.0) and not run.latest(900.0)
        third = asyncio.ensure_future(asyncio.sleep(10))
        run.retry_stt(third)
        assert run.spec == (1500.0, third)
        second.cancel()
        third.cancel()
    asyncio.run(main())


def test_a_parked_draft_runs_on_only_for_the_same_request():
    run = TurnRun(1)
    run.begin(_Draft("Check order 4217", tentative=True))
    assert run.park() and run.draft.parked
    assert not run.unpark("Check order 4217, please.", fits=True) and not run.draft.parked
    run.draft.parked = True
    assert run.unpark("Check order 4217 and cancel it", fits=True)  # another request
    assert run.unpark("Check order 4217", fits=False)  # same words, but a number still open
    confirmed = TurnRun(2)
    confirmed.begin(_Draft("Hello", tentative=False))
    assert not confirmed.park()  # a confirmed draft is not parked: the session discards it


def test_adopting_a_draft_records_then_confirms():
    run = TurnRun(1)
    draft = _Draft("Check order 4217", tentative=True)
    draft.parked = True
    run.begin(draft)
    seen = []
    assert run.adopt("check order 4217 please", lambda d, how: seen.append((how, d.confirmed))) is draft
    assert seen == [("extended", False)] and draft.confirmed and not draft.parked
    # a confirmed draft is kept only for its very words (a retried reply)
    assert run.adopt("Check order 4217", lambda d, how: None) is draft
    assert run.adopt("Cancel order 4217", lambda d, how: None) is None
    other = TurnRun(2)
    other.begin(_Draft("Check order 4217", tentative=True))
    assert other.adopt("Cancel my order", lambda d, how: seen.append(how)) is None
    assert len(seen) == 1 and TurnRun(3).adopt("Hi", lambda d, how: None) is None


def test_discarding_a_confirmed_draft_keeps_its_runs_for_the_next():
    async def main() -> list:
        run = TurnRun(1)
        draft = _Draft("Book it", tentative=False)
        draft.task = asyncio.ensure_future(asyncio.sleep(10))
        done = object()

        async def settled() -> list:
            return [done]
        draft.settled_runs = settled
        run.begin(draft)
        dropped = run.discard(conv=None)
        assert dropped is not None and dropped[0] is draft and run.draft is None
        await dropped[1]
        assert draft.task.cancelled() and run.discard(conv=None) is None
        return run.done_runs, done
    runs, done = asyncio.run(main())
    assert runs == [done]


def test_cut_finished_and_hold_keep_the_reply_invariants():
    async def main() -> None:
        run = TurnRun(1)
        task = asyncio.ensure_future(asyncio.sleep(10))
        run.commit(task)
        run.cut("reopen")
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled() and run.reply_task is None and run.reopened
        run.cut("barge_in")
        assert not run.reopened
        draft = _Draft("Hi", tentative=False)
        run.begin(draft)
        run.commit(asyncio.ensure_future(asyncio.sleep(0)))
        run.speak("reply", "Hi", [], draft)
        assert run.finished(interrupted=True) == ("reply", "Hi", [], draft)
        assert run.speaking is None and run.draft is None and run.reply_task is not None
        run.speak("reply", "Hi", [], None)
        run.finished(interrupted=False)
        assert run.reply_task is None
        assert run.finished(interrupted=False) == (None, None, [], None)
        run.commit(asyncio.ensure_future(asyncio.sleep(0)))
        run.hold()
        assert run.reply_task is None
        await asyncio.sleep(0)
    asyncio.run(main())


def test_turn_runs_open_once_and_prune_only_idle_earlier_turns():
    async def main() -> None:
        runs = TurnRuns()
        assert runs.get(1) is None and 1 not in runs
        one = runs.open(1)
        assert runs.open(1) is one and runs.get(1) is one and len(runs) == 1
        two = runs.open(2)
        two.commit(asyncio.ensure_future(asyncio.sleep(10)))  # still running
        runs.open(3).speak("reply", None, [], None)            # still on the line
        runs.open(5)
        runs.prune(4)
        assert [r.turn_id for r in runs] == [2, 3, 5]
        two.reply_task.cancel()
        await asyncio.gather(two.reply_task, return_exceptions=True)
        runs.prune(4)
        assert [r.turn_id for r in runs] == [3, 5]
    asyncio.run(main())


async def test_the_session_keeps_its_turns_in_one_owner_collection():
    clock = VirtualClock()
    stack = make_stack(clock, ["Hello.", "And another thing."])
    session = Session(Stamper("c", clock, EventBus()), stack, scripted_agent())
    speech = np.concatenate([tone(600), silence(1500), tone(600), silence(1500)])
    try:
        for k, t in zip(range(0, len(speech), 320), np.arange(0.0, 1e6, 20.0)):
            await clock.pace(float(t))
            session.on_frame(speech[k:k + 320], float(t))
            session.tick_playout(float(t))  # the agent's audio plays: the second turn is new
        await clock.advance(2000.0)
    finally:
        await session.close()
    assert isinstance(session.turns, TurnRuns)
    assert 2 in session.turns and session.turns.get(2).onset_ms > 2000.0
    per_turn = [name for name, v in vars(session).items()
                if isinstance(v, dict) and any(isinstance(k, int) for k in v)]
    assert per_turn == []
