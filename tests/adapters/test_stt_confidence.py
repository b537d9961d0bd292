"""The recogniser's confidence on real recordings (Whisper base, int8), carried through the STT
port, and the decisions made from it (rejoinder.sounds): backchannels and noise over a reply,
hallucinations on babble. Real speech: Asterisk prompts (Allison Smith, CC-BY-SA-3.0) and the
suite's LibriVox sentences (public domain)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from rejoinder.sounds import Heard, SoundPolicy, noise_verdict, overlap_verdict
from rejoinder.turns import TurnPolicy

SUITE = Path(__file__).resolve().parents[2] / "src/rejoinder/harness/suites/reference"
POLICY = SoundPolicy()
BACKCHANNELS = TurnPolicy().backchannels


@pytest.fixture(scope="module")
def stt():
    """Whisper as the reference agent runs it: with its vocabulary as the prompt."""
    from rejoinder.adapters.whisper_stt import WhisperSTT
    from rejoinder.app.support import agent
    return WhisperSTT(initial_prompt=agent.stt_prompt())


def padded(x: np.ndarray) -> np.ndarray:
    """As the session sends a turn: 0.3 s before the sound, 0.12 s after it."""
    return np.concatenate([np.zeros(4800, np.float32), x, np.zeros(1920, np.float32)])


def rendered(scenario: str, turn: int) -> np.ndarray:
    from rejoinder.harness.caller import render_turns
    from rejoinder.scenario import load_scenario
    pcm = asyncio.run(render_turns(load_scenario(SUITE / scenario)))[turn].pcm
    return pcm.astype(np.float32) / 32768.0


def heard(stt, x: np.ndarray, voiced_ms: float) -> Heard:
    from rejoinder.sounds import level_dbfs
    tr = stt.decode_sync(padded(x))
    return Heard(tr.text, voiced_ms, tr.no_speech_prob, tr.avg_logprob, level_dbfs(x))


async def test_the_port_carries_confidence(stt, asterisk):
    x, _ = asterisk("auth-thankyou")

    async def one():
        yield padded(x)
    [tr] = [t async for t in stt.stream(one())]
    assert tr.final and tr.text.lower().startswith("thank you")
    assert 0.0 <= tr.no_speech_prob < 0.3 and -0.7 < tr.avg_logprob <= 0.0
    # the standard 30 s path reports it too, on the same scale
    full = stt.decode_sync(padded(x), short_window=False)
    assert full.text == tr.text and abs(full.avg_logprob - tr.avg_logprob) < 0.3
    assert stt.decode_sync(np.zeros(0, np.float32)).avg_logprob is None


@pytest.mark.parametrize("prompt", ["auth-thankyou", "hello", "vm-no", "digits/4", "digits/oh"])
def test_real_short_answers_are_confident_even_40_db_down(stt, asterisk, prompt):
    x, _ = asterisk(prompt)
    for level in (None, -40.0):
        y = x if level is None else x * np.float32(10 ** (level / 20) / np.sqrt(np.mean(x ** 2)))
        h = heard(stt, y, 600)
        assert h.avg_logprob > -0.8, (prompt, level, h)
        assert noise_verdict(h, POLICY) is None, (prompt, level, h)


@pytest.mark.parametrize("turn", [0, 2])
def test_babble_40_db_down_is_rejected_as_noise(stt, turn):
    """Six other voices 40 dB below full scale (the suite's babble): whatever Whisper writes on
    a turn-sized stretch of it is a hallucination to ignore."""
    babble = rendered("background_babble.yaml", turn)
    for seconds in (0.6, 1.2, 2.4):
        n = int(seconds * 16000)
        for start in range(0, len(babble) - n + 1, n):
            h = heard(stt, babble[start:start + n], 1000.0 * seconds)
            assert noise_verdict(h, POLICY) is not None, (seconds, start, h)


def test_a_recorded_mm_over_the_reply_resumes_it(stt):
    """The suite's "mm" (a 0.47 s hum cut from a real recording of the letter M)."""
    x = rendered("backchannel_mm_real.yaml", 1)
    h = heard(stt, x, 520)
    assert overlap_verdict(h, BACKCHANNELS, POLICY) != "barge_in", h


def test_a_speech_fragment_over_the_reply_resumes_it(stt):
    """0.3 s cut from a real read sentence: Whisper may hear a word, but it is too short."""
    x = rendered("noise_during_reply_real.yaml", 1)
    h = heard(stt, x, 300)
    assert overlap_verdict(h, BACKCHANNELS, POLICY) != "barge_in", h


@pytest.mark.parametrize("prompt", ["vm-no", "conf-getpin"])
def test_real_words_over_the_reply_still_barge_in(stt, asterisk, prompt):
    x, _ = asterisk(prompt)
    h = heard(stt, x, 1000.0 * len(x) / 16000 - 200)
    assert overlap_verdict(h, BACKCHANNELS, POLICY) == "barge_in", h


async def test_a_cancelled_request_does_not_queue_behind_the_model(stt, asterisk):
    """Speculative transcripts superseded by a newer pause are dropped before they reach the
    model (one decode at a time), so they cannot pile up on a busy machine."""
    import threading
    x, _ = asterisk("conf-getpin")
    dropped = threading.Event()
    dropped.set()
    assert stt.decode_sync(padded(x), dropped=dropped).text == ""
    calls = []
    inner = stt._transcribe_short
    stt._transcribe_short = lambda a: calls.append(len(a)) or inner(a)
    try:
        with stt._lock:  # the model is busy: the request waits for it

            async def one():
                yield padded(x)
            task = asyncio.ensure_future(anext(stt.stream(one())))
            await asyncio.sleep(0.2)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0.5)  # the worker thread got the model and gave up
    finally:
        stt._transcribe_short = inner
    assert calls == []


def test_the_first_word_after_babble_is_heard_at_once(silero_vad):
    """Silero's state after the suite's babble damps the next word (the order number read 2.5 s
    later): the tracker resets the state after 1 s of silence, so the word's onset is found
    within a window or two of where it starts, and peaks as high as on a fresh state."""
    from rejoinder.vad import VadTracker
    babble, digits = rendered("background_babble.yaml", 0), rendered("background_babble.yaml", 1)
    word = digits[:int(0.9 * 16000)]

    def peak(after: np.ndarray, reset: bool) -> float:
        silero_vad.reset()
        for k in range(0, len(after) // 512 * 512, 512):
            silero_vad.speech_prob(after[k:k + 512])
            if reset and k == len(after) // 512 * 512 - 16384:  # 1 s before the end
                silero_vad.reset()
        return max(silero_vad.speech_prob(word[k:k + 512]) for k in range(0, len(word) - 511, 512))
    fresh, damped, reset = peak(np.zeros(512, np.float32), False), peak(babble, False), peak(babble, True)
    assert damped < fresh - 0.15 and abs(reset - fresh) < 0.1, (fresh, damped, reset)
    silero_vad.reset()
    tracker = VadTracker(silero_vad)
    audio = np.concatenate([babble, digits])
    onsets = [s.at_ms for i in range(0, len(audio) - 319, 320)
              for s in tracker.push(audio[i:i + 320], i / 16) if s.kind == "onset"]
    first_digit = 1000.0 * len(babble) / 16000 + 158  # the prompt's own lead-in silence
    assert any(abs(t - first_digit) <= 100 for t in onsets), (first_digit, onsets)


def test_digits_read_after_a_long_reply_are_all_heard(silero_vad, asterisk):
    """After 20 s of digital silence (the caller listening to a long reply), Silero v6 reset
    once, 19 s before, misses the first digits of "8 8 1 4" read in real speech 0.7 s after the
    reply; reset when the reply finished playing (:meth:`VadTracker.reset_model`, as the session
    does), it hears all four."""
    from rejoinder.vad import VadTracker
    gap = np.zeros(4000, np.float32)  # 250 ms between digits, as callers read them
    digits = np.concatenate([x for d in "8814" for x in (asterisk(f"digits/{d}")[0], gap)])
    reply, wait = 20 * 16000, int(0.7 * 16000)
    audio = np.concatenate([np.zeros(reply + wait, np.float32), digits, np.zeros(16000, np.float32)])

    def onsets(reset_at_reply_end: bool) -> int:
        silero_vad.reset()
        tracker = VadTracker(silero_vad)
        found = 0
        for k in range(0, len(audio) - 319, 320):
            if k == reply and reset_at_reply_end:
                tracker.reset_model()
            found += sum(s.kind == "onset" for s in tracker.push(audio[k:k + 320], k / 16))
        return found
    assert onsets(True) == 4
    assert onsets(False) < 4
