"""The README's LiveSession example, run as written: a transport of our own drives a call."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from rejoinder import LiveSession
from rejoinder.clock import VirtualClock

from fakes import heard as _heard, scripted_agent, silence, tone  # noqa: F401
from test_session import make_stack

README = Path(__file__).resolve().parents[1] / "README.md"


def example() -> str:
    text = README.read_text(encoding="utf-8")
    m = re.search(r"<!-- livesession-example -->\s*```python\n(.*?)```", text, re.S)
    assert m, "README.md lost its LiveSession example"
    return m.group(1)


def test_the_readme_example_is_about_twenty_lines():
    assert 15 <= len(example().strip().splitlines()) <= 25


async def test_the_readme_example_runs_a_call_on_a_transport_of_our_own():
    ns: dict = {}
    exec(compile(example(), "README.md", "exec"), ns)
    clock = VirtualClock()
    stack = make_stack(clock, ["Where is my order?"])
    caller = np.concatenate([silence(300), tone(600), silence(400)])

    async def mic():  # a transport delivering 60 ms packets as they are captured
        for k in range(0, len(caller), 960):
            await clock.sleep_until(k / 16.0 + 60.0)
            yield caller[k:k + 960]

    played: list[np.ndarray] = []
    heard = await ns["one_call"](stack, scripted_agent(), mic(), played.append, clock=clock)
    assert heard == ["Order 4217 has shipped and arrives Friday."]
    # every frame 20 ms, and together as long as the reply's audio (ToneTTS: 200 ms a spoken word)
    assert played and all(len(f) == 320 for f in played)
    spoken_words = sum(len(t.split()) for t in stack.tts.texts)
    assert len(played) * 20 == pytest.approx(spoken_words * 200, abs=40)


async def test_push_rejects_audio_that_is_not_mono_int16():
    clock = VirtualClock()
    call = LiveSession(make_stack(clock, ["x"]), scripted_agent(), clock=clock, greet=False)
    with pytest.raises(ValueError, match="mono int16"):
        call.push(np.zeros(320, dtype=np.float32))
    await call.close()


async def test_on_a_real_clock_the_call_is_a_lane_of_the_shared_pacer():
    """A real clock: playout runs on the process's one pacing timer (rejoinder.pacing), and the
    same README call still completes (no timing asserted, only what was heard)."""
    from rejoinder.clock import RealClock
    from rejoinder.pacing import shared_pacer

    ns: dict = {}
    exec(compile(example(), "README.md", "exec"), ns)
    clock = RealClock()
    stack = make_stack(clock, ["Where is my order?"])
    caller = np.concatenate([silence(300), tone(600), silence(400)])
    lanes: list[int] = []

    async def mic():
        for k in range(0, len(caller), 960):
            await clock.sleep_until(k / 16.0 + 60.0)
            lanes.append(len(shared_pacer().lanes))
            yield caller[k:k + 960]

    played: list[np.ndarray] = []
    heard = await ns["one_call"](stack, scripted_agent(), mic(), played.append, clock=clock)
    assert heard == ["Order 4217 has shipped and arrives Friday."]
    assert lanes and max(lanes) == 1  # the call's playout was the pacer's lane
    assert played and all(len(f) == 320 for f in played)
