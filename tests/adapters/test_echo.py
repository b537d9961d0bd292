"""The no-echo rule (:mod:`rejoinder.adapters._echo`): its word matching, its logits mask, and
the engine on the real SmolLM2-135M model, which echoes "Hello." at temperature 0 without it."""

from __future__ import annotations

import numpy as np
import pytest

from rejoinder.adapters._echo import echo_words, end_mask, is_echo
from rejoinder.ports import ChatMessage, LLMRequest

from tool_cases import SUPPORT, TOOLS

GREETING = ChatMessage("assistant", "Thanks for calling. How can I help?")


def test_words_drop_case_and_punctuation_and_join_spoken_digits():
    assert echo_words("Hello, THERE!") == ["hello", "there"]
    assert echo_words("4, 2, 1, 7.") == ["4217"]
    assert echo_words("order 4 2 1 7 please") == ["order", "4217", "please"]
    assert echo_words("I'm here.") == ["i'm", "here"]


@pytest.mark.parametrize("reply, caller, echo", [
    ("Hello!", "Hello.", True),
    ("Thank you.", "Thank you so much.", True),  # a contiguous run of the caller's words
    ("4217.", "4, 2, 1, 7.", True),
    ("Hello. How can I help?", "Hello.", False),
    ("You're welcome.", "Thank you.", False),
    ("you so", "Thank you so much.", True),
    ("much thank", "Thank you so much.", False),  # not contiguous in order
    ("", "Hello.", False), ("Hello.", "", False), ("...", "Hello.", False),
    # an acknowledgement, then the caller's words (Qwen2.5-Coder-1.5B, 2026-12-07)
    ("Got it. I'll set an early alarm for an hour.", "Eh, I'll set an early alarm for an hour.", True),
    ("Okay, thank you.", "Thank you.", True),
    ("Sure. 4217.", "4, 2, 1, 7.", True),
    ("Got it.", "Thank you.", False),  # an acknowledgement alone is no copy
    ("Okay. Great.", "Great!", False),
    ("Got it. Your alarm is not something I can set.", "I'll set an alarm.", False),
    ("Sure, thank you for calling.", "Thank you.", False),
])
def test_echo_is_a_contiguous_run_of_the_callers_words(reply, caller, echo):
    assert is_echo(reply, caller) is echo


def test_mask_bans_the_end_tokens_only_while_echoing():
    echoing = [True]
    mask = end_mask([0, 2], lambda: echoing[0])
    scores = np.zeros(5, dtype=np.float32)
    out = mask(None, scores)
    assert np.isneginf(out[[0, 2]]).all() and (out[[1, 3, 4]] == 0).all()
    echoing[0] = False
    fresh = np.ones(5, dtype=np.float32)
    assert (mask(None, fresh) == 1).all()


async def _reply(llm, say: str, tools=()) -> str:
    req = LLMRequest((SUPPORT, GREETING, ChatMessage("user", say)), tools=tools,
                     temperature=0.0, max_tokens=24)
    return "".join(d for d in [d async for d in llm.stream(req)] if isinstance(d, str))


@pytest.mark.parametrize("tools", [(), TOOLS], ids=["no tools", "tools"])
async def test_the_model_does_not_end_a_reply_on_the_callers_words(llama_llm, tools):
    engine = llama_llm.engine
    try:
        engine.no_echo = False
        plain = await _reply(llama_llm, "Hello.", tools)
        assert is_echo(plain, "Hello.")  # SmolLM2-135M at temperature 0: "Hello."
        assert llama_llm.last_stats.echo_resumed == 0
        engine.no_echo = True
        guarded = await _reply(llama_llm, "Hello.", tools)
    finally:
        engine.no_echo = True
    assert llama_llm.last_stats.echo_resumed == 1
    assert not is_echo(guarded, "Hello.")
    assert guarded.startswith(plain)  # the model's own words, continued, not replaced
    assert len(guarded.split()) > len(plain.split())


def test_a_reply_after_the_turns_tool_results_still_answers_the_caller():
    """The no-echo rule holds after the turn's calls and results (Qwen2.5-Coder-1.5B said a
    request for a person back word for word after the transfer's result), not after a prefix
    or an assistant's reply."""
    from rejoinder.adapters._llama_engine import ChatEngine
    from rejoinder.ports import ToolCall

    user = ChatMessage("user", "Can I talk to someone?")
    call = ChatMessage("assistant", "", tool_calls=(ToolCall("c1", "transfer_to_human", {}),))
    result = ChatMessage("tool", '{"status": "transferred"}', tool_call_id="c1")
    answers = ChatEngine._answers_caller
    assert answers(LLMRequest((SUPPORT, GREETING, user)))
    assert answers(LLMRequest((SUPPORT, GREETING, user, call, result)))
    assert not answers(LLMRequest((SUPPORT, GREETING, user), prefix="Sure"))
    assert not answers(LLMRequest((SUPPORT, GREETING, user, ChatMessage("assistant", "Sure."))))
    assert not answers(LLMRequest((SUPPORT, GREETING)))


async def test_a_reply_after_a_prefix_is_not_checked(llama_llm):
    req = LLMRequest((SUPPORT, GREETING, ChatMessage("user", "Hello.")), temperature=0.0,
                     max_tokens=8, prefix="Hello")
    [d async for d in llama_llm.stream(req)]
    assert llama_llm.last_stats.echo_resumed == 0


def test_repeats_itself_finds_a_loop_of_words_said_three_times():
    from rejoinder.adapters._echo import repeats_itself

    assert repeats_itself("The appointment is a haircut a haircut a haircut")
    assert repeats_itself("order status is shipped, order status is shipped, order status is shipped")
    assert repeats_itself("no, no, no")
    assert not repeats_itself("a haircut a haircut")  # twice is speech, not yet a loop
    assert not repeats_itself("Your number is 5 5 5 5 5 5")  # read-out digits are never a loop
    assert not repeats_itself("Order 4217 was shipped on Friday, and it arrives on Wednesday.")
    assert not repeats_itself("")
