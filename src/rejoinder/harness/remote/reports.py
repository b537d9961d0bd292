"""What a target reports about itself and about a call, and how it joins our measurement.

A target *may* answer two authenticated HTTP requests on the host and port of its socket
(``Authorization: Bearer <token>``; see ``server/PROTOCOL.md``, "Call reports"):

* ``GET /info`` — what it is: versions, models, configuration (stored with the run's conditions);
* ``GET /calls/{id}`` — one call, by the id the socket gave (``ready.call_id`` on ``/ws``, the
  ``streamSid`` we chose on Media Streams): ``status`` (``running`` | ``ended``),
  ``caller_origin_ms`` (the target's clock time of the first caller sample it received), its
  own per-turn summaries (boundaries on its clock), its tool calls and, for an application with a
  database, the final database state.

``rejoinder serve`` and the Pipecat reference bot in ``bench/peers/`` answer both; any other
target is measured as a black box (a 404 is not an error). The target's boundaries are moved
onto the caller's clock with ``caller_origin_ms``: our clock time of a sample is its time on the
target's clock − ``caller_origin_ms`` + the time we sent the first caller sample (error: the first
frame's network delay; on loopback well under 1 ms). Only the target's *internal* moments are
taken (end of turn decided, transcript, LLM, tools, TTS, first audio out); the caller's own
truth and ears always win for ``user_speech_end``, ``playback_start`` and the rest.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .call import RemoteCallResult

INTERNAL = ("eot_decided", "transcript_final", "llm_request", "llm_first_token", "first_speakable_text",
            "tts_request", "tts_first_audio", "first_audio_out")
MATCH_SLACK_MS = 5.0


def http_base(ws_url: str) -> str:
    """``ws://h:p/x?y`` → ``http://h:p`` (``wss`` → ``https``)."""
    u = urlsplit(ws_url)
    return urlunsplit(("https" if u.scheme == "wss" else "http", u.netloc, "", "", ""))


async def get_json(url: str, token: str | None, timeout_s: float = 5.0) -> tuple[int, Any]:
    """(HTTP status, JSON body or None); status 0 when the request could not be made."""
    import httpx
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            r = await client.get(url, headers=headers)
    except httpx.HTTPError:
        return 0, None
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, None


async def fetch_call(ws_url: str, ref: str, token: str | None, wait_s: float = 5.0) -> dict[str, Any] | None:
    """The target's report of call ``ref`` once it says ``ended`` (None: the target has none)."""
    url = f"{http_base(ws_url)}/calls/{ref}"
    deadline = asyncio.get_running_loop().time() + wait_s
    while True:
        status, body = await get_json(url, token)
        if status != 200 or not isinstance(body, dict):
            if status in (401, 403) or status >= 500:
                return {"error": f"HTTP {status}", "body": body}
            return None  # no such endpoint: a black box
        if body.get("status") == "ended" or asyncio.get_running_loop().time() >= deadline:
            return body
        await asyncio.sleep(0.1)


def merge_report(result: RemoteCallResult, report: dict[str, Any], origin_ms: float, *, keyed: bool,
                 wall_origin_s: float | None = None) -> None:
    """Join the target's report of the call into ``result`` (in place): internal boundaries on the
    caller's clock, tool calls per turn, the final database, and the target's self-reported
    figures per turn (kept beside ours in ``result.target["self_reported"]``).

    A target without turn summaries may list its tool calls with a Unix time ``at`` (seconds);
    with ``wall_origin_s`` (the Unix time of the caller's clock zero, same machine) each is given
    to the first reply whose audio arrived after it."""
    if "error" in report:
        result.target["report_error"] = report["error"]
        return
    origin = report.get("caller_origin_ms")
    shift = origin_ms - origin if isinstance(origin, (int, float)) else None
    result.target["clock"] = {"caller_origin_ms": origin, "shift_ms": shift}
    if "tools" in report:
        result.observable.add("tools")
    if report.get("db") is not None:
        result.observable.add("db")
        result.final_state = report["db"]
    if report.get("hangup"):  # the target ended the call itself (scenario hangs_up / transfers):
        result.hangup = report["hangup"]  # its normal close is an outcome, not a failed call
        result.transfer = report.get("transfer")
        if (result.error or "").startswith("the target hung up mid-call (close code 1000"):
            result.error = None
    by_id = {r.turn_id: r for r in result.turns}
    free = [r for r in result.turns if "first_audio_in" in r.stamps]
    selfrep = []
    for srv in report.get("turns") or []:
        b = srv.get("boundaries") or {}
        rec = by_id.get(srv.get("turn_id")) if keyed else None
        if not keyed and shift is not None and b.get("first_audio_out") is not None:
            out = b["first_audio_out"] + shift
            rec = min((r for r in free if r.stamps["first_audio_in"] >= out - MATCH_SLACK_MS),
                      key=lambda r: r.stamps["first_audio_in"], default=None)
        if rec is None:
            if srv.get("tools"):
                result.target.setdefault("unmatched_tools", []).extend(srv["tools"])
            continue
        if rec in free:
            free.remove(rec)
        selfrep.append({"turn_id": rec.turn_id, "target_turn_id": srv.get("turn_id"),
                        **{k: srv.get(k) for k in ("v2v_ms", "time_to_answer_ms", "segments", "status", "heard_text")}})
        if srv.get("status") in ("failed", "recovered") and rec.status == "completed":
            rec.status = srv["status"]  # what went wrong inside is the target's to say
        if shift is not None:
            for name in INTERNAL:
                if name in b:
                    rec.stamps[name] = round(b[name] + shift, 3)
            firsts = srv.get("llm_first_tokens") or ([b["llm_first_token"]] if "llm_first_token" in b else [])
            rec.llm_first_tokens.extend(round(t + shift, 3) for t in firsts)   # every LLM request's
            ours, theirs = rec.stamps.get("playback_start"), b.get("playback_start")
            if ours is not None and theirs is not None and b.get("answer_start") is not None:
                rec.stamps["answer_start"] = round(ours + b["answer_start"] - theirs, 3)
        for t in srv.get("tools") or []:
            moved = dict(t)
            for k in ("start_ms", "end_ms"):
                if shift is not None and isinstance(t.get(k), (int, float)):
                    moved[k] = round(t[k] + shift, 3)
            rec.tools.append(moved)
        rec.transcript = srv.get("transcript") or rec.transcript
        rec.errors.extend(srv.get("errors") or [])
        rec.recoveries.extend(srv.get("recoveries") or [])
    if wall_origin_s is not None:
        for t in report.get("tools") or []:
            if "turn_id" in t or not isinstance(t.get("at"), (int, float)):
                continue
            at = 1000.0 * (t["at"] - wall_origin_s)
            rec = min((r for r in result.turns if r.stamps.get("first_audio_in", -1.0) >= at),
                      key=lambda r: r.stamps["first_audio_in"], default=None)
            if rec is not None:
                rec.tools.append({"name": t.get("name"), "args": t.get("args"), "start_ms": round(at, 3)})
    result.target["self_reported"] = selfrep
    if report.get("self_reported"):  # a target's own metrics beyond turn summaries (Pipecat's)
        result.target["metrics"] = report["self_reported"]
