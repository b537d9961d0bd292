"""Call outcomes a scenario may expect beyond its turns: the agent transferred the call to a
person, or ended it with its goodbye heard to the end (issue 20: outcomes the seed names).

Checked from what was measured: :attr:`~rejoinder.harness.callrun.CallResult.transfer` (the transfer the
runtime performed, or that a target reported) and :attr:`~rejoinder.harness.callrun.CallResult.hangup`,
and for the last reply before the line closed, whether it was cut (``interrupted_at``) or heard
to its end (``playback_end``) before the agent's :class:`~rejoinder.events.CallEnd` — whose
status says whether the transport confirmed the playout (``confirmed``) or the watchdog closed
the line without a confirmation (``unconfirmed``). Causes: ``no transfer`` / ``unexpected
transfer`` / ``cut goodbye``.
"""

from __future__ import annotations

from typing import Any, Callable


def check_outcomes(sc: Any, result: Any, turns: list, fail: Callable[[str, str], None]) -> int:
    """Check ``sc.transfers`` and the goodbye of ``sc.hangs_up: true`` on ``result``; report each
    failure through ``fail(cause, sentence)``. Returns the number of checks made."""
    checks = 0
    transfer = getattr(result, "transfer", None)
    if getattr(sc, "transfers", None) is not None:
        checks += 1
        if sc.transfers and not transfer:
            fail("no transfer", "the agent did not transfer the call to a person")
        elif not sc.transfers and transfer:
            fail("unexpected transfer", f"the agent transferred the call ({transfer.get('reason')})")
    if (sc.hangs_up or sc.transfers) and (getattr(result, "hangup", None) or transfer):
        checks += 1
        why = last_reply_cut(turns)
        if why:
            fail("cut goodbye", why)
    return checks


def last_reply_cut(turns: list) -> str | None:
    """Why the agent's last reply before it ended the call was not heard to its end (None: it
    was): cut by a barge-in, never finished playing, finished after the line closed, or the
    line closed by the watchdog without the transport confirming the playout."""
    ended = [r for r in turns if getattr(r, "call_end", None)]
    end = ended[-1].call_end if ended else None
    spoken = [r for r in turns if "playback_start" in r.stamps]
    if not spoken:
        return None  # nothing said, nothing cut
    last = max(spoken, key=lambda r: r.stamps["playback_start"])
    if "interrupted_at" in last.stamps:
        return f"the last reply (turn {last.turn_id}) was cut before the line closed"
    done = last.stamps.get("playback_end")
    if done is None:
        return f"the last reply (turn {last.turn_id}) had not finished playing when the line closed"
    if end is not None and end.get("status") == "unconfirmed":
        return (f"the line closed on the watchdog: the transport never confirmed that the last "
                f"reply (turn {last.turn_id}) played")
    if end is not None and end.get("t_ms") is not None and done > end["t_ms"] + 1.0:
        return (f"the line closed at {end['t_ms']:.0f} ms, before the last reply finished playing "
                f"at {done:.0f} ms")
    return None
