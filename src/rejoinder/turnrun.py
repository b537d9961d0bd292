"""One caller turn's work and state, in one place: :class:`TurnRun`, kept in :class:`TurnRuns`.

The session keeps the live turns in one :class:`TurnRuns` (no table per kind of state). A run
holds the turn's speculative transcription, its LLM draft (with the tool runs it started), the
reply speaking it, and what the turn-taking code needs to judge the turn's text (the latest
pause's :class:`~rejoinder.turntext.TextVerdict`, the digit groups read at long pauses).

The run owns the turn's state and its transitions; the session owns the tasks (it spawns them,
stamps the timeline and performs the turn state machine's actions) and calls:

=================  ==========================================================================
speculate          a new pause: its STT task replaces the last one, whose interim is stale
park / unpark      a tentative draft waits for the new pause's transcript, then is kept or not
begin              a draft starts (after the last one was discarded)
commit             the turn is decided over: its reply task
hold               the reply stands down (a number is still read out); the next commit resumes
adopt              the final transcript keeps the draft (confirmed: irreversible tools may run)
discard            the draft stops; what it did is accounted for by the coroutine returned
speak / finished   a reply is on the line / the playout finished or cut it
cut                barge-in, reopen, retraction or noise: the reply task is cancelled
=================  ==========================================================================

Invariants:

* ``reply_task`` is set from :meth:`TurnRun.commit` until the reply is cut (:meth:`cut`), stands
  down (:meth:`hold`) or finished playing uncut (:meth:`finished`); a reply task that ended
  without a reply on the line (an empty transcript, an error) stays set, done;
* ``speaking`` is set from the moment a reply begins (:meth:`speak`) until the playout reports it
  done or cut (:meth:`finished`);
* ``draft`` is the turn's one live draft: a new one starts only after the last was discarded,
  and it is cleared when discarded or when the reply speaking it is finished;
* ``done_runs`` holds the irreversible tool runs of confirmed drafts dropped when the turn
  *reopened* (the caller went on talking after the commit; their reversible runs are compensated
  and decided again on the whole turn, and so are a held call's question and a requested
  hang-up or transfer, which did nothing): work that really ran, so the turn's next draft
  starts from it (its ``prior``, :class:`rejoinder.respond.Draft`) — its results are given to
  the LLM, they enter the context once, and an irreversible call with the same name and
  arguments is answered from them, never run again. A dropped *tentative*
  draft's reversible runs are compensated instead (:func:`rejoinder.conversation.undo_runs`);
* the session's ``settling`` tasks finish accounting for dropped work (:meth:`discard`'s
  coroutine); a later draft waits for them first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .conversation import undo_runs
from .flow import HangUp, Transfer
from .speculation import same_request

if TYPE_CHECKING:
    from .conversation import Conversation, Step, ToolRun
    from .reply import Reply
    from .respond import Draft
    from .turntext import TextVerdict

    Speaking = tuple[Reply | None, str | None, list[Step], Draft | None]


@dataclass
class TurnRun:
    """The state of caller turn ``turn_id`` (times in ms on the call clock)."""

    turn_id: int
    onset_ms: float = 0.0
    interim: str | None = None             # the latest interim transcript
    interim_at: float | None = None        # when it arrived
    spec: tuple[float, asyncio.Task] | None = None  # (pause end, its speculative STT task)
    judged: TextVerdict | None = None      # the judgement of the latest pause's transcript
    pauses: list[int] = field(default_factory=list)  # digits read at each long pause
    reply_task: asyncio.Task | None = None
    speaking: tuple[Reply, str | None, list[Step], Draft | None] | None = None
    draft: Draft | None = None
    done_runs: list[ToolRun] = field(default_factory=list)
    reopened: bool = False                 # the last cut of a reply was a reopen, not a barge-in

    # --- transcription ------------------------------------------------------------------------
    def speculate(self, end_ms: float, stt: asyncio.Task) -> None:
        """A pause at ``end_ms``: ``stt`` transcribes the turn up to it. The last pause's STT is
        cancelled and its interim dropped (stale)."""
        if self.spec:
            self.spec[1].cancel()
        self.interim = self.interim_at = None
        self.spec = (end_ms, stt)

    def retry_stt(self, stt: asyncio.Task) -> None:
        """The latest pause's transcription failed: ``stt`` tries again (same pause)."""
        assert self.spec is not None
        self.spec = (self.spec[0], stt)

    def latest(self, end_ms: float) -> bool:
        """True while the pause at ``end_ms`` is still the turn's latest."""
        return self.spec is not None and self.spec[0] == end_ms

    def note_interim(self, end_ms: float, text: str, now: float) -> None:
        """An interim transcript of the pause at ``end_ms`` came at ``now`` (kept if that pause is
        still the latest: promoted when the final does not come)."""
        if self.latest(end_ms):
            self.interim, self.interim_at = text, now

    # --- the draft ----------------------------------------------------------------------------
    def begin(self, draft: Draft) -> None:
        """``draft`` (its task started) becomes the turn's draft (:meth:`discard` the last one
        first: a turn has one live draft)."""
        self.draft = draft

    def park(self) -> bool:
        """A new pause of the turn: a tentative draft is *parked*, kept until that pause's
        transcript says whether it still answers the caller (:meth:`unpark`). False when there
        is no tentative draft: the caller discards whatever draft there is."""
        if self.draft is not None and self.draft.tentative:
            self.draft.parked = True
            return True
        return False

    def unpark(self, text: str, *, fits: bool) -> bool:
        """The parked draft's new transcript ``text`` came (``fits``: it is no open number and
        no noise). The draft runs on when it asks the same (courtesy words added at most);
        True when it answers another request and must be discarded."""
        draft = self.draft
        if draft is None or not draft.parked:
            return False
        if fits and same_request(draft.user_text, text):
            draft.parked = False
            return False
        return True

    def adopt(self, text: str, record: Callable[[Draft, str], None]) -> Draft | None:
        """The final transcript ``text`` came: the draft that answers it, or None (discard it and
        start another). A tentative draft for the same request (:func:`same_request`) is kept:
        ``record(draft, "kept" | "extended")`` is called, then it is confirmed (irreversible
        tools may run from then on). A confirmed draft of these very words (a retried reply) is
        kept as it is."""
        draft = self.draft
        if draft is None:
            return None
        if draft.tentative:
            kept = same_request(draft.user_text, text)
            if not kept:
                return None
            draft.parked = False
            record(draft, kept)
            draft.confirm()
            return draft
        return draft if draft.user_text == text else None

    def discard(self, conv: Conversation) -> tuple[Draft, Coroutine[Any, Any, None]] | None:
        """Stop the turn's draft: it is no longer the turn's and its task is cancelled. Returns the
        draft and the coroutine that accounts for its work once it has stopped (run it as a
        settling task): a tentative draft's reversible tool runs are compensated; of a confirmed
        draft's runs, the reversible ones are compensated too (:func:`_redoable`) and the others,
        which really happened, are kept in ``done_runs``. None: no draft."""
        draft = self.draft
        if draft is None:
            return None
        self.draft = None
        draft.task.cancel()
        return draft, self._account(draft, draft.tentative, conv)

    async def _account(self, draft: Draft, tentative: bool, conv: Conversation) -> None:
        await asyncio.gather(draft.task, return_exceptions=True)
        runs = await draft.settled_runs()
        if tentative:
            await undo_runs(conv, self.turn_id, [r for r in runs if r.tentative])
            return
        # the caller went on after the commit, so the request may have changed ("8841. Sorry,
        # 8814"): a reversible run is compensated and the next draft decides again on the whole
        # turn; irreversible work (and a run that moved the conversation) is kept, never redone
        redo = [r for r in runs if _redoable(conv, r)]
        await undo_runs(conv, self.turn_id, redo)
        # a question not yet asked (a held call) and a hang-up or transfer that the reopen
        # cancelled did nothing: they are decided again on the whole turn too, never "kept"
        # (a 135M gate's end_call on "Mourning", a cancel asked on the first clause of "Which
        # day did my grinder get dropped off. … Three, three, eight, eight.": 2026-12-04)
        unmade = [r for r in runs if conv is not None and _unmade(r)]
        for run in unmade:
            if run.held:
                conv.withdraw_question(run.call.name, self.turn_id)
        self.done_runs.extend(r for r in runs if r not in redo and r not in unmade
                              and r not in self.done_runs)

    def earlier_run(self, name: str, arguments: dict[str, Any]) -> ToolRun | None:
        """A finished run of tool ``name`` with ``arguments`` from a dropped draft of this turn."""
        for run in self.done_runs:
            if run.call.name == name and dict(run.call.arguments) == dict(arguments):
                return run
        return None

    # --- the reply ----------------------------------------------------------------------------
    def commit(self, reply_task: asyncio.Task) -> None:
        """The turn is decided over (or the agent takes the floor): ``reply_task`` answers it."""
        self.reply_task = reply_task

    def hold(self) -> None:
        """The reply task stands down on its own (the final transcript ends in a number still
        read out): the turn waits for the rest, and its next :meth:`commit` resumes it."""
        self.reply_task = None

    def speak(self, reply: Reply, user_text: str | None, steps: list[Step],
              draft: Draft | None) -> None:
        """``reply`` (for ``user_text``, written as ``steps`` by ``draft``) is on the line."""
        self.speaking = (reply, user_text, steps, draft)

    def cut(self, reason: str) -> None:
        """The turn's reply is dropped for ``reason`` (a :class:`~rejoinder.turns.CancelReply`
        reason): its task is cancelled. Anything but a barge-in *reopens* the turn (the caller
        goes on: more words, digits, noise), which :attr:`reopened` records."""
        self.reopened = reason != "barge_in"
        if self.reply_task is not None:
            self.reply_task.cancel()
            self.reply_task = None

    def finished(self, interrupted: bool) -> Speaking:
        """The playout finished (or, ``interrupted``, cut) the turn's reply. Returns what was
        speaking (reply, user text, steps, draft; ``(None, None, [], None)`` when none was); the
        reply's draft is done with, and an uncut reply's task is over."""
        spoken = self.speaking or (None, None, [], None)
        self.speaking = None
        if self.draft is not None and self.draft is spoken[3]:
            self.draft = None
        if not interrupted:
            self.reply_task = None
        return spoken

    def busy(self) -> bool:
        """True while any of the turn's tasks still runs."""
        tasks = [self.reply_task, self.spec[1] if self.spec else None,
                 self.draft.task if self.draft else None]
        return any(t is not None and not t.done() for t in tasks)


class TurnRuns:
    """The session's live turns, by turn id: the only per-turn table it keeps."""

    def __init__(self) -> None:
        self._runs: dict[int, TurnRun] = {}

    def get(self, turn_id: int) -> TurnRun | None:
        """Turn ``turn_id``'s run, None if it has none (never opened, or pruned)."""
        return self._runs.get(turn_id)

    def open(self, turn_id: int) -> TurnRun:
        """Turn ``turn_id``'s run, opened if it has none yet."""
        run = self._runs.get(turn_id)
        if run is None:
            run = self._runs[turn_id] = TurnRun(turn_id)
        return run

    def prune(self, current: int) -> None:
        """Forget turns before ``current`` that have nothing left running or on the line."""
        for tid, run in list(self._runs.items()):
            if tid < current and run.speaking is None and not run.busy():
                del self._runs[tid]

    def __iter__(self) -> Iterator[TurnRun]:
        return iter(list(self._runs.values()))

    def __len__(self) -> int:
        return len(self._runs)

    def __contains__(self, turn_id: object) -> bool:
        return turn_id in self._runs


def _unmade(run: ToolRun) -> bool:
    """A confirmed run that left nothing behind once its draft was dropped: a held call (only
    its confirmation question was written, and that reply is not heard) or the end of the call
    it asked for (a hang-up or transfer happens after the reply has played, and a reopened
    turn cancels it: :meth:`rejoinder.ending.CallEnder.reply_done`)."""
    return run.held or isinstance(run.control, (HangUp, Transfer))


def _redoable(conv: Conversation | None, run: ToolRun) -> bool:
    """A confirmed run the turn's next draft may do again: its tool is reversible, and it
    neither moved the conversation nor was held for the caller's yes."""
    tool = conv.agent.tools.get(run.call.name) if conv is not None else None
    return bool(tool is not None and tool.reversible and run.control is None and not run.held)
