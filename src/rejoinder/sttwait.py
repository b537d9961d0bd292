"""The session's waits on speech recognition, each with a watchdog on the call clock.

* :func:`final_transcript`: the transcript a committed turn is answered on. The pause's
  speculative STT is awaited for ``promote_ms`` (``TurnPolicy.promote_interim_ms``), and for
  ``stall_ms`` (``RecoveryPolicy.stt_interim_stall_ms``) after the latest interim result: an STT
  that sent an interim and then nothing has its interim *promoted* to final. A failure or a
  timeout without an interim is retried once, then given up (the session says its recovery
  line). Each step is a :class:`~rejoinder.events.Recovery` event on the timeline.
* :func:`short_sound`: the transcript of short caller speech over a reply (the reply is held
  while it runs), within ``RecoveryPolicy.stt_check_ms``; when it cannot be had the sound is
  taken as noise and the reply resumes.

Both wait with :func:`rejoinder.clock.wait_within`, so a virtual clock drives them in tests
exactly like the real one in calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from .clock import wait_within
from .events import Recovery
from .ports import Transcript
from .stages import Stamper
from .turnrun import TurnRun


async def final_transcript(st: Stamper, run: TurnRun, *, promote_ms: float, stall_ms: float,
                           retry: Callable[[float], asyncio.Task]) -> str | None:
    """The text of turn ``run``'s latest pause (see the module docstring); ``retry(end_ms)``
    starts a new transcription of the pause at ``end_ms``. None when STT could not deliver."""
    end_ms, stt_task = run.spec
    turn_id = run.turn_id
    for attempt in range(2):
        deadline = st.now() + promote_ms
        try:
            while True:
                limit = deadline - st.now()
                if run.interim and run.interim_at is not None:
                    limit = min(limit, run.interim_at + stall_ms - st.now())
                try:
                    return await wait_within(st.clock, stt_task, max(0.0, limit))
                except TimeoutError:
                    stalled = (run.interim and run.interim_at is not None
                               and st.now() >= run.interim_at + stall_ms)
                    if stalled or st.now() >= deadline:
                        raise
        except Exception as exc:  # failed or timed out: say so on the timeline, retry once
            stt_task.cancel()
            reason = "no final transcript in time" if isinstance(exc, TimeoutError) else repr(exc)
            interim = run.interim
            if isinstance(exc, TimeoutError) and interim:  # a turn with only interim results
                st.emit(Recovery("stt", "promoted", reason, interim, st.now(), st.call_id, turn_id))
                return interim
            action = "retry" if attempt == 0 else "recovery_line"
            st.emit(Recovery("stt", action, reason, "", st.now(), st.call_id, turn_id))
            if attempt == 0:
                stt_task = retry(end_ms)
                run.retry_stt(stt_task)
    return None


async def short_sound(st: Stamper, turn_id: int, transcripts: AsyncIterator[Transcript],
                      limit_ms: float) -> Transcript:
    """The last of ``transcripts`` (an STT stream over the sound) within ``limit_ms`` on the
    call clock; an empty final one (and a ``Recovery("stt", "resume")`` event) when the stream
    fails or takes longer."""
    async def last() -> Transcript:
        tr = Transcript("", True)
        async for tr in transcripts:
            pass
        return tr
    task = asyncio.ensure_future(last())
    try:
        return await wait_within(st.clock, task, limit_ms)
    except Exception as exc:  # cannot tell: treat the short sound as noise and go on talking
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        reason = "no transcript in time" if isinstance(exc, TimeoutError) else repr(exc)
        st.emit(Recovery("stt", "resume", reason, "", st.now(), st.call_id, turn_id))
        return Transcript("", True)
