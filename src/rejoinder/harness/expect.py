"""Check a finished call against its scenario's expectations (task success).

Which agent turns answer which caller turn is decided from the caller's ground truth: an agent
turn belongs to the last caller utterance that had ended when the runtime decided the turn was
over (``eot_decided``). A turn the agent took on its own (an idle reprompt: no ``eot_decided``)
belongs to the caller turn that was playing when it was heard (from the caller's cue log).
Everything else is read from what was measured: tool calls (name and arguments) per turn, the words the caller actually *heard* (an interrupted reply only counts up
to the cut; a number may be heard as digits or in any way a TTS reads it out), V2V, the
interruption labels, and the application's database at the end of the call.

Every failed check becomes one plain sentence in :attr:`Verdict.failures`; those sentences are
stored with the run and are searchable (``rejoinder runs search``). Each failure is also
attributed to a cause (:attr:`Verdict.causes`, one per failure), from what was measured:

* ``recognition error`` — the caller's words an expectation depends on (the expected tool
  arguments the caller's script says, e.g. an order number read out) are not in the final
  transcript: the LLM never had a chance;
* ``no tool`` / ``wrong tool`` / ``wrong argument`` — the transcript had them, the LLM did not call
  the expected tool, called another, or called it with other arguments;
* ``tool failed`` — the expected call was made but returned an error;
* ``not said`` — the right tool ran but the caller did not hear the expected words (the LLM's
  wording, or a cut);
* ``timeout`` — no reply was heard, or it came after the V2V budget;
* ``interruption`` (barge-in expectations), ``unexpected tool``, ``state`` (final database),
  ``call failed``;
* ``echo`` — the reply was the caller's own words back (``not_echo``; :mod:`.answers`, which
  also checks ``reply_contains_any``, ``no_tools`` and ``tools_absent``);
* ``turn-taking`` — a noise was answered, a number read out was split over turns, an idle
  prompt came too soon after the agent's audio ended, or the agent did (not) hang up;
* ``no transfer`` / ``unexpected transfer`` / ``cut goodbye`` — call outcomes
  (:mod:`rejoinder.harness.outcomes`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..scenario import Scenario
from ..turns import TurnPolicy
from .answers import answer_checks
from .heldout import turn_words
from .outcomes import check_outcomes
from .wordforms import _digit_runs, _spoken_forms, _words


@dataclass
class Verdict:
    success: bool
    checks: int
    failures: list[str] = field(default_factory=list)
    owners: dict[int, int | None] = field(default_factory=dict)  # agent turn id → caller turn index
    causes: list[str] = field(default_factory=list)  # one per failure (see the module docstring)
    skipped: list[str] = field(default_factory=list)  # checks the agent's reports cannot support


def _in_transcript(value: Any, transcript: str) -> bool:
    """Whether ``value`` (an expected argument) was recognised: it, or a spoken form of it,
    occurs in ``transcript`` (digits may be split by spaces or dashes: "4 2 1 7")."""
    v = _norm(value)
    words = _words(transcript)
    if v.isdigit():
        return v in re.sub(r"[^0-9]", "", transcript) or any(
            _words(form) in words for form in _spoken_forms(v))
    return _words(v) in words


def _tool_cause(calls: list[dict[str, Any]], name: str, args: dict[str, Any], transcript: str,
                said: str = "") -> str:
    """The cause of a missing expected call. ``said``: the words the caller's script says ("" when
    unknown); an argument the script never says (the caller's "other order", known from the
    account) is the agent's to find, so its absence from the transcript is no recognition error."""
    heard = [v for v in args.values() if not said or _in_transcript(v, said)]
    if not all(_in_transcript(v, transcript) for v in heard):
        return "recognition error"
    same = [c for c in calls if c.get("name") == name]
    if not calls:
        return "no tool"
    if not same:
        return "wrong tool"
    return "wrong argument"


def _norm(v: Any) -> str:
    return str(v).strip().lower()


def owners(turns: list, truth: list[tuple[int, float, float]],
           cues: list[dict] | None = None) -> dict[int, int | None]:
    """Agent turn id → index of the caller turn it answers (None when no caller turn had ended).
    With ``cues``, a turn the agent took on its own belongs to the caller turn playing then."""
    out: dict[int, int | None] = {}
    ends = sorted((end, idx) for idx, _, end in truth)
    for r in turns:
        eot = r.stamps.get("eot_decided")
        owner = None
        if eot is not None:
            for end, idx in ends:
                if end <= eot + 1.0:
                    owner = idx
        elif r.initiated and cues and r.stamps:
            owner = _playing_at(cues, min(r.stamps.values()))
        out[r.turn_id] = owner
    return out


def cut_off_within(turns: list, truth: list[tuple[int, float, float]]) -> dict[int, int]:
    """Agent turn id → index of the caller turn *during* which it was decided, for turns the
    caller talked on through (status ``interrupted``, end of turn decided between that caller
    turn's first and last voiced sample: a false cut-off). What such a turn did — the tools it
    ran and kept — was done on that caller turn's words, so the tool checks of that caller turn
    count it; its words, if any were heard, were said over the caller and do not count as the
    answer to any caller turn. (``owners`` would give them to the caller turn before, or none.)"""
    out: dict[int, int] = {}
    for r in turns:
        eot = r.stamps.get("eot_decided")
        if eot is None or r.status != "interrupted" or r.initiated:
            continue
        for idx, start, end in truth:
            if start <= eot < end:
                out[r.turn_id] = idx
                break
    return out


def _playing_at(cues: list[dict], t_ms: float) -> int | None:
    """Index of the caller turn whose cue came last before ``t_ms`` (None before the first)."""
    started = [c for c in cues if c["at_ms"] <= t_ms]
    return max(started, key=lambda c: c["at_ms"])["turn"] if started else None


def _digits_words(text: str) -> str:
    """Lower-case letters and digits only, digit words as digits: "Four one-five, 555" → "415555"."""
    from ..dictation import _DIGIT_WORDS
    toks = re.findall(r"[a-z]+|\d+", text.lower())
    return "".join(_DIGIT_WORDS.get(t, t) if t != "o" else t for t in toks)


def _tool_matches(call: dict[str, Any], name: str, args: dict[str, Any]) -> bool:
    got = call.get("args") or {}
    return call.get("name") == name and all(_norm(got.get(k)) == _norm(v) for k, v in args.items())


def _audible_at(turns: list, t_ms: float):
    """The agent reply the caller was hearing at ``t_ms`` (or None)."""
    for r in turns:
        s = r.stamps
        start = s.get("playback_start")
        if start is None or start > t_ms:
            continue
        end = s.get("interrupted_at", s.get("playback_end", float("inf")))
        if t_ms < end:
            return r
    return None


def evaluate(sc: Scenario, result: Any, truth: list[tuple[int, float, float]],
             cues: list[dict] | None = None, *, owned: dict[int, int | None] | None = None,
             observable: set[str] | None = None) -> Verdict:
    """Check ``result`` (a :class:`~rejoinder.harness.callrun.CallResult`) against ``sc``.

    ``truth`` is the caller's ground truth ``(caller turn index, start_ms, end_ms)`` and ``cues``
    the caller's cue log (:attr:`~rejoinder.harness.caller.SimulatedCaller.cues`). A remote agent gives
    ``owned`` (agent turn id → caller turn index, from what the caller heard) and ``observable``:
    which of ``"tools"`` and ``"db"`` it reports; checks it cannot support are listed in
    :attr:`Verdict.skipped`, not failed.
    """
    fails: list[str] = []
    causes: list[str] = []
    skipped: list[str] = []
    checks = 0
    see_tools = observable is None or "tools" in observable
    see_db = observable is None or "db" in observable

    def fail(cause: str, text: str) -> None:
        causes.append(cause)
        fails.append(text)
    turns = list(result.turns)
    own = owned if owned is not None else owners(turns, truth, cues)
    within = cut_off_within(turns, truth) if owned is None else {}
    cue_at = {c["turn"]: c for c in cues or []}
    checks += 1
    if result.error:
        fail("call failed", f"the call failed: {result.error}")
    for i, spec in enumerate(sc.turns):
        ex = spec.expect
        mine = [r for r in turns if own.get(r.turn_id) == i and r.turn_id not in within]
        cut = [r for r in turns if within.get(r.turn_id) == i]
        label = f"caller turn {i + 1}"
        cue = cue_at.get(i)
        if cue is not None and cue.get("missed") and spec.barge_in_ms is not None:
            checks += 1
            fail("timeout", f"{label}: the agent never spoke, so the scripted barge-in could not happen")
        calls = [t for r in (*cut, *mine) for t in r.tools
                 if not t.get("compensated") and not t.get("held")]
        transcript = " ".join(r.transcript for r in (*cut, *mine))
        tool_ok = True
        if ex.tools and not see_tools:
            skipped.append(f"{label}: tool calls (the agent does not report them)")
        for tool in ex.tools if see_tools else ():
            checks += 1
            match = [c for c in calls if _tool_matches(c, tool.name, tool.args)]
            if not match:
                tool_ok = False
                got = ", ".join(f"{c.get('name')}({c.get('args')})" for c in calls) or "no tool"
                fail(_tool_cause(calls, tool.name, tool.args, transcript, turn_words(spec)),
                     f"{label}: expected {tool.name}({tool.args}), got {got} "
                     f"(transcript: {transcript.strip()!r})")
            elif all(c.get("error") for c in match):
                tool_ok = False
                fail("tool failed", f"{label}: {tool.name}({tool.args}) failed: {match[0]['error']}")
        heard = _words(" ".join(r.heard_text for r in mine))
        joined = _digit_runs(heard)
        for words in ex.reply_contains:
            checks += 1
            if not any(_words(form) in heard or _words(form) in joined for form in _spoken_forms(words)):
                cause = ("timeout" if not any(r.heard_text for r in mine) else
                         "not said" if tool_ok else causes[-1])
                fail(cause, f"{label}: the caller did not hear {words!r} (heard: {heard.strip()!r})")
        for words in ex.reply_excludes:
            checks += 1
            if any(_words(form) in heard for form in _spoken_forms(words)):
                fail("leak", f"{label}: the caller heard {words!r}, which must not be said")
        checks += answer_checks(ex, mine, label, calls=calls, see_tools=see_tools, fail=fail, skipped=skipped,
                                tool_cause=None if tool_ok else causes[-1])
        if ex.v2v_budget_ms is not None:
            checks += 1
            v2v = next((r.v2v_ms() for r in mine if r.v2v_ms() is not None), None)
            if v2v is None:
                fail("timeout", f"{label}: no reply was heard (V2V budget {ex.v2v_budget_ms:.0f} ms)")
            elif v2v > ex.v2v_budget_ms:
                fail("timeout", f"{label}: V2V {v2v:.0f} ms over the budget of {ex.v2v_budget_ms:.0f} ms")
        for want in ex.transcript_contains:
            checks += 1
            got = [r.transcript for r in mine if r.transcript]
            if not any(_digits_words(want) in _digits_words(t) for t in got):
                split = _digits_words(want) in _digits_words(" ".join(got))
                fail("turn-taking" if split else "recognition error",
                     f"{label}: no single turn heard {want!r} (transcripts: {got or 'none'})")
        if ex.answered is not None:
            checks += 1
            start = cue["at_ms"] if cue is not None else None
            nxt = cue_at.get(i + 1)
            end = nxt["at_ms"] if nxt is not None else float("inf")
            replies = [] if start is None else [
                r for r in turns if "playback_start" in r.stamps and not r.initiated
                and start <= r.stamps.get("eot_decided", -1.0) < end]
            if ex.answered and not replies:
                fail("timeout", f"{label}: the agent did not answer it")
            elif not ex.answered and replies:
                said = "; ".join(repr(r.heard_text) for r in replies)
                heard_as = "; ".join(repr(r.transcript) for r in replies)
                fail("turn-taking", f"{label}: a {spec.kind} was answered (heard as {heard_as}; "
                     f"the agent said {said})")
        if ex.interrupts is not None:
            checks += 1
            at = cue["at_ms"] if cue is not None else None
            victim = _audible_at(turns, at) if at is not None else None
            if victim is None:
                fail("interruption", f"{label}: the agent was not speaking when the caller spoke "
                             f"({'at %.0f ms' % at if at is not None else 'turn never played'})")
            else:
                cut = "interrupted_at" in victim.stamps
                if ex.interrupts and not cut:
                    fail("interruption", f"{label}: expected to cut the agent off, but its reply played on")
                elif not ex.interrupts and cut:
                    fail("interruption", f"{label}: a {spec.kind} cut the agent off (it should have talked on)")
    all_calls = [t for r in turns for t in r.tools if not t.get("compensated") and not t.get("held")]
    if sc.only_expected_tools and not see_tools:
        skipped.append("only_expected_tools (the agent does not report its tool calls)")
    elif sc.only_expected_tools:
        checks += 1
        allowed = {t.name for spec in sc.turns for t in spec.expect.tools}
        extra = sorted({c.get("name") for c in all_calls} - allowed)
        if extra:
            fail("unexpected tool", f"unexpected tool calls: {', '.join(map(str, extra))}")
    if sc.agent_silent:
        checks += 1
        spoke = [r.turn_id for r in turns if "playback_start" in r.stamps]
        if spoke:
            fail("spoke", f"the agent spoke (turns {spoke}) but should have stayed silent")
    if sc.hangs_up is not None:
        checks += 1
        hung = getattr(result, "hangup", None)
        if sc.hangs_up and not hung:
            fail("turn-taking", "the agent did not end the call")
        elif not sc.hangs_up and hung:
            fail("turn-taking", f"the agent ended the call ({hung})")
    checks += check_outcomes(sc, result, turns, fail)  # transfer; the goodbye heard to its end
    idle = TurnPolicy().merged(sc.turn_policy).idle if sc.turn_policy else None
    if idle is not None and idle.reprompt_ms is not None:
        checks += 1
        early = _early_idle_prompts(turns, idle.reprompt_ms, idle.hangup_ms)
        if early:
            fail("turn-taking", "an idle prompt came too soon after the agent's audio finished "
                 "playing: " + "; ".join(early))
    if sc.final_db and not see_db:
        skipped.append("final_db (the agent does not report its final state)")
    elif sc.final_db:
        state = getattr(result, "final_state", None)
        for table, rows in sc.final_db.items():
            for row_id, cols in rows.items():
                checks += 1
                if not isinstance(state, dict):
                    fail("state", "final_db: the agent reported no final state to check "
                         "(its report_state hook)")
                    break
                row = state.get(table, {}).get(str(row_id))
                if row is None:
                    fail("state", f"final_db: {table} {row_id} does not exist")
                    continue
                bad = {k: row.get(k) for k, v in cols.items() if _norm(row.get(k)) != _norm(v)}
                if bad:
                    want = {k: cols[k] for k in bad}
                    fail("state", f"final_db: {table} {row_id} has {bad}, expected {want}")
    return Verdict(not fails, checks, fails, own, causes, skipped)


def _early_idle_prompts(turns: list, reprompt_ms: float, hangup_ms: float | None) -> list[str]:
    """Idle prompts heard sooner than the shorter idle wait after the previous agent audio ended
    (the timer must start when that audio has finished playing at the caller, not when it was
    generated, so a long reply never triggers one early)."""
    wait = min(reprompt_ms, hangup_ms or reprompt_ms)
    out = []
    for k, r in enumerate(turns):
        if r.initiated != "idle_prompt" or "playback_start" not in r.stamps:
            continue
        ends = [e for p in turns[:k] if (e := p.stamps.get("playback_end", p.stamps.get("interrupted_at")))
                is not None]
        if ends and r.stamps["playback_start"] - max(ends) < wait:
            out.append(f"turn {r.turn_id} {r.stamps['playback_start'] - max(ends):.0f} ms after, "
                       f"expected ≥ {wait:.0f} ms")
    return out
