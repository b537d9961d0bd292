"""Expectations that a reply *answers* the caller: it is not the caller's words echoed back, it
carries one of the facts it should (``reply_contains_any``), and small talk or a request no tool
serves is answered without a tool call (``no_tools``, ``tools_absent``).

An echo is what a small LLM does when it cannot decide: "Hello." → "Hello.", "Thank you." →
"Thank you." The check compares the words the caller *heard* (``heard_text``) with the words the
agent heard in that turn (its final transcript), both lower case, punctuation dropped, digits
read one by one joined ("4, 2, 1, 7" = "4217"). The reply is an echo when its words are a
contiguous part of the transcript, or when its word error rate against the transcript (jiwer;
edits ÷ transcript words) is below :data:`ECHO_WER`: "Thank you!" to "Thank you." is an echo,
"You're welcome, Maria." is not. A turn with no reply heard echoes nothing (``answered: true``
says whether one must be heard).

Causes (:attr:`rejoinder.harness.expect.Verdict.causes`): ``echo``; ``not said`` (the words were
not heard although any expected tool ran; the tool's own cause when it did not; ``timeout`` when
nothing was heard; ``recognition error`` when the agent heard no words in that turn at all);
``unexpected tool``.
"""

from __future__ import annotations

from typing import Any, Callable

from .wordforms import _digit_runs, _spoken_forms, _words

ECHO_WER = 0.5  # below this, the reply is the caller's words back
NO_TOOL_TEXT = "expected no tool call"


def _norm_words(text: str) -> list[str]:
    return _digit_runs(_words(text)).split()


def is_echo(reply: str, transcript: str) -> bool:
    """Whether ``reply`` is ``transcript`` (the caller's words) back: contained in it word for
    word, or within :data:`ECHO_WER` word error rate of it. Empty reply or transcript: False."""
    import jiwer

    r, t = _norm_words(reply), _norm_words(transcript)
    if not r or not t:
        return False
    if any(t[i:i + len(r)] == r for i in range(len(t) - len(r) + 1)):
        return True
    return jiwer.wer(" ".join(t), " ".join(r)) < ECHO_WER


def _heard_one(words: str, heard_text: str) -> bool:
    heard = _words(heard_text)
    joined = _digit_runs(heard)
    return any(_words(form) in heard or _words(form) in joined for form in _spoken_forms(words))


def answer_checks(ex: Any, mine: list, label: str, *, calls: list[dict[str, Any]], see_tools: bool,
                  tool_cause: str | None, fail: Callable[[str, str], None], skipped: list[str]) -> int:
    """Check one caller turn's ``reply_contains_any``, ``not_echo``, ``no_tools`` and
    ``tools_absent`` (``ex``, a :class:`rejoinder.scenario.Expect`) against the agent turns that
    answered it (``mine``, :class:`~rejoinder.timeline.TurnRecord`) and their tool ``calls``.

    ``tool_cause`` is the cause of this turn's failed tool expectation (None when none failed);
    ``fail(cause, text)`` records a failure. Returns the number of checks made."""
    checks = 0
    heard = " ".join(r.heard_text for r in mine if r.heard_text)
    transcript = " ".join(r.transcript for r in mine if r.transcript)
    if ex.reply_contains_any:
        checks += 1
        if not any(_heard_one(w, heard) for w in ex.reply_contains_any):
            cause = ("timeout" if not heard.strip() else tool_cause or
                     ("not said" if transcript.strip() else "recognition error"))
            fail(cause, f"{label}: the caller heard none of {ex.reply_contains_any!r} (heard: {heard.strip()!r})")
    if ex.not_echo:
        checks += 1
        if is_echo(heard, transcript):
            fail("echo", f"{label}: the reply echoed the caller's words (caller: {transcript.strip()!r}; "
                 f"agent: {heard.strip()!r})")
    if (ex.no_tools or ex.tools_absent) and not see_tools:
        skipped.append(f"{label}: no_tools/tools_absent (the agent does not report its tool calls)")
        return checks
    if ex.no_tools:
        checks += 1
        if calls:
            got = ", ".join(f"{c.get('name')}({c.get('args')})" for c in calls)
            fail("unexpected tool", f"{label}: {NO_TOOL_TEXT}, got {got}")
    for name in ex.tools_absent:
        checks += 1
        bad = [c for c in calls if c.get("name") == name]
        if bad:
            fail("unexpected tool", f"{label}: {name} must not be called here, got {name}({bad[0].get('args')})")
    return checks


def small_talk_counts(sc: Any, failures: list[str], skipped: list[str]) -> dict[str, int] | None:
    """``{"turns": caller turns with no_tools, "with_tool": those answered with a tool call}``
    from a call's verdict (its ``failures`` and ``skipped`` checks); None when the scenario has
    no such turn or the agent does not report its tool calls. Summed over calls, this is the
    spurious-call rate on small talk."""
    turns = [i for i, t in enumerate(sc.turns) if t.expect.no_tools]
    if not turns or any("no_tools" in x for x in skipped):
        return None
    bad = sum(1 for i in turns if any(f.startswith(f"caller turn {i + 1}: {NO_TOOL_TEXT}") for f in failures))
    return {"turns": len(turns), "with_tool": bad}
