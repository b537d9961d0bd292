"""The pure judging of a caller turn's text (rejoinder.turntext) and the turn owner's transitions
(rejoinder.turnrun): real transcripts and values, no clock, no models."""

from __future__ import annotations

import asyncio

from rejoinder.sounds import Heard
from rejoinder.turnrun import TurnRun, TurnRuns
from rejoinder.turns import State, TurnPolicy
from rejoinder.turntext import digit_group, judge_pause, number_still_open

POLICY = TurnPolicy()


def heard(text: str, duration_ms: float = 1500.0, **kw) -> Heard:
    return Heard(text, duration_ms, **kw)


# --- judging one pause's transcript ----------------------------------------------------------
def test_a_complete_request_reads_complete_and_may_be_drafted():
    v = judge_pause(1800.0, heard("I want to check order 4217."), POLICY)
    assert (v.end_ms, v.held, v.noise) == (1800.0, False, None)
    assert v.reading.complete and v.reading.number_complete and not v.reading.dangling
    assert v.fits and v.drafts


def test_a_dangling_ending_is_not_drafted():
    v = judge_pause(900.0, heard("I'd like to check my"), POLICY)
    assert v.reading.dangling and not v.reading.complete
    assert v.fits and not v.drafts


def test_a_phone_number_half_read_holds():
    v = judge_pause(2100.0, heard("My phone number is 415 555"), POLICY)
    assert v.held and v.reading.number_open
    assert not v.reading.complete and not v.reading.number_complete
    assert not v.fits and not v.drafts


def test_the_agents_question_is_the_context_of_bare_digits():
    # "4217" alone is a complete order number, but not once the agent asked for a phone number
    assert not judge_pause(800.0, heard("4217."), POLICY).held
    asked = judge_pause(800.0, heard("4217."), POLICY, agent_said="What's your phone number?")
    assert asked.held and not asked.reading.number_complete


def test_the_pauses_of_the_turn_are_the_digit_groups():
    # "1 800" as written is groups 1-3 of 1-3-3-4 (open); "1800" as one group shows no
    # grouping: 4 digits, a complete bare number
    assert number_still_open("1 800", POLICY)
    assert not number_still_open("1800", POLICY)
    # 415 then 555 with a long pause between: 3-3 of a 3-3-4 phone number, still open
    assert number_still_open("call me at 415555", POLICY, pauses=(3,))


def test_fewer_words_after_a_held_number_keep_holding():
    first = judge_pause(2100.0, heard("My phone number is 415 555"), POLICY)
    assert first.held
    # the recogniser dropped the digits on the longer audio: fewer words, still holding
    later = judge_pause(4200.0, heard("My phone number is", 3800.0), POLICY, previous=first)
    assert later.held
    # without the held verdict before it, the same text is just a dangling phrase
    alone = judge_pause(4200.0, heard("My phone number is", 3800.0), POLICY)
    assert not alone.held and alone.reading.dangling
    # more words after a hold: judged on its own (the number was finished)
    done = judge_pause(5200.0, heard("My phone number is 415 555 0101.", 4800.0), POLICY,
                       previous=first)
    assert not done.held and done.reading.complete


def test_noise_is_judged_on_the_recognisers_confidence():
    babble = judge_pause(600.0, heard("The.", 400.0, no_speech_prob=0.8, avg_logprob=-1.4), POLICY)
    assert babble.noise == "no_speech" and not babble.fits and not babble.drafts
    low = judge_pause(600.0, heard("Thanks for watching.", 900.0, no_speech_prob=0.1,
                                   avg_logprob=-1.3), POLICY)
    assert low.noise == "low_confidence"
    assert judge_pause(600.0, heard(""), POLICY).noise == "no_words"
    clear = judge_pause(600.0, heard("Yes, please.", 700.0, no_speech_prob=0.05,
                                     avg_logprob=-0.2), POLICY)
    assert clear.noise is None and clear.fits


def test_noise_rejection_can_be_switched_off():
    policy = TurnPolicy(sounds={"reject_noise": False})
    v = judge_pause(600.0, heard("The.", 400.0, no_speech_prob=0.8, avg_logprob=-1.4), policy)
    assert v.noise is None and v.fits
    assert not v.drafts  # "the" still dangles: no preemptive draft on it


# --- digit groups at long pauses -------------------------------------------------------------
def test_a_long_pause_after_digits_closes_a_group():
    last = judge_pause(2000.0, heard("My phone number is 415"), POLICY)
    gap = POLICY.numbers.group_pause_ms
    assert digit_group(last, 2000.0 + gap, state=State.USER_PAUSED, last_voiced_ms=2000.0,
                       policy=POLICY) == 3
    assert digit_group(last, 2000.0 + gap, state=State.THINKING, last_voiced_ms=2000.0,
                       policy=POLICY) == 3


def test_no_group_on_a_short_pause_a_stale_transcript_or_speech_without_a_pause():
    last = judge_pause(2000.0, heard("My phone number is 415"), POLICY)
    gap = POLICY.numbers.group_pause_ms
    assert digit_group(last, 2000.0 + gap - 1.0, state=State.USER_PAUSED, last_voiced_ms=2000.0,
                       policy=POLICY) == 0
    # the transcript is of an earlier pause than the one speech resumes from
    assert digit_group(last, 2600.0 + gap, state=State.USER_PAUSED, last_voiced_ms=2600.0,
                       policy=POLICY) == 0
    assert digit_group(last, 2000.0 + gap, state=State.SPEAKING, last_voiced_ms=2000.0,
                       policy=POLICY) == 0
    assert digit_group(None, 2000.0 + gap, state=State.USER_PAUSED, last_voiced_ms=2000.0,
                       policy=POLICY) == 0
    words_only = judge_pause(2000.0, heard("My phone number is"), POLICY)
    assert digit_group(words_only, 2000.0 + gap, state=State.USER_PAUSED, last_voiced_ms=2000.0,
                       policy=POLICY) == 0


# --- the turn owner's transitions --------------------------------------------------------------
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
