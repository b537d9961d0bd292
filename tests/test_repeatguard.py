"""A reply that loops ends at the first repeated sentence; everything else passes unchanged."""

from __future__ import annotations

import pytest

from rejoinder.clock import VirtualClock
from rejoinder.events import Recovery
from rejoinder.harness.callrun import run_call
from rejoinder.repeatguard import RepeatGuard

from fakes import scripted_agent, tone
from test_faults import recording_bus
from test_session import make_stack, turn

LOOP = ["I'm", " sorry", " for", " any", " confu", "sion.", " I'm", " sorry", " for", " any",
        " confusion.", " I'm", " sorry"]


def _run(tokens: list[str]) -> tuple[str, bool, RepeatGuard]:
    guard, out = RepeatGuard(), ""
    for tok in tokens:
        said, stop = guard.feed(tok)
        out += said
        if stop:
            return out, True, guard
    return out + guard.flush(), False, guard


def test_the_reply_ends_before_a_sentence_it_already_said():
    out, stop, guard = _run(LOOP)
    assert (out, stop) == ("I'm sorry for any confusion.", True)
    assert guard.repeated == "I'm sorry for any confusion."


@pytest.mark.parametrize("tokens", [
    ["I'm", " sorry", " for", " the", " wait.", " I'm", " sorry", " for", " any", " confusion."],
    ["Okay.", " Okay.", " Okay."],  # too short to be a loop
    ["Order", " 4217", " shipped.", " Order", " 4217", " should", " arrive", " Friday."],
    ["It", " is", " four", " two.", " It", " is", " four", " two", " one", " seven."],
])
def test_text_that_does_not_repeat_a_whole_sentence_passes_unchanged(tokens):
    out, stop, _ = _run(tokens)
    assert (out, stop) == ("".join(tokens), False)


def test_a_sentence_that_begins_like_an_earlier_one_is_held_only_until_it_differs():
    guard = RepeatGuard()
    said = [guard.feed(t)[0] for t in ["Your order", " shipped.", " Your", " order", " of", " May."]]
    # released as soon as it diverges ("of" ≠ "shipped"), nothing lost or reordered
    assert "".join(said) + guard.flush() == "Your order shipped. Your order of May."
    assert said[2:4] == ["", ""] and said[4] != ""


def test_a_repeat_cut_off_by_the_token_limit_is_not_said():
    out, stop, _ = _run(LOOP[:-2])  # ends inside the third copy, before its sentence end
    assert (out, stop) == ("I'm sorry for any confusion.", False)


async def test_a_looping_llm_reply_is_cut_at_the_repeat_and_the_context_holds_what_was_heard():
    clock = VirtualClock()
    stack = make_stack(clock, ["Hello?"], tokens=LOOP + [" for", " any", " confusion."])
    bus, events = recording_bus()
    res = await run_call([turn(tone(600))], stack, scripted_agent(), clock=clock, tail_ms=4000, bus=bus)
    assert res.error is None
    assert [m.content for m in res.context if m.role == "assistant"] == ["I'm sorry for any confusion."]
    assert stack.tts.texts and " ".join(stack.tts.texts).split() == "I'm sorry for any confusion.".split()
    stops = [e for e in events if isinstance(e, Recovery) and e.action == "stop_repeat"]
    assert len(stops) == 1 and "I'm sorry for any confusion." in stops[0].reason
