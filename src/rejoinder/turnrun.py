"""One caller turn's work and state, in one place: :class:`TurnRun`.

The session keeps one :class:`TurnRun` per live turn (its only per-turn table) instead of a table
per kind of state. A run holds the turn's speculative transcription, its LLM draft (with the tool
runs it started), the reply speaking it, and what the turn-taking code needs to judge the turn's
text (the latest pause's transcript, the digit groups read at long pauses).

Invariants, kept by the session's lifecycle methods:

* ``reply_task`` is set iff a reply task for the turn has been started and not cancelled;
* ``speaking`` is set from the moment a reply begins until the playout reports it done or cut;
* ``done_runs`` holds the tool runs of drafts dropped when the turn *reopened* (the caller went
  on talking after the commit): work that really ran, so the turn's next draft starts from it —
  its results are given to the LLM, they enter the context once, and an irreversible run is
  never repeated (:meth:`TurnRun.earlier_run`);
* ``settling`` holds tasks that finish accounting for dropped work (compensating tentative
  runs, waiting for tools still running); a later draft waits for them first.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .conversation import Step, ToolRun
    from .reply import Reply
    from .respond import Draft
    from .sounds import Heard


@dataclass
class TurnRun:
    """The state of caller turn ``turn_id`` (times in ms on the call clock)."""

    turn_id: int
    onset_ms: float = 0.0
    interim: str | None = None             # the latest interim transcript
    interim_at: float | None = None        # when it arrived
    spec: tuple[float, asyncio.Task] | None = None  # (pause end, its speculative STT task)
    heard: "tuple[float, Heard, bool] | None" = None  # (pause end, transcript, number still open)
    pauses: list[int] = field(default_factory=list)  # digits read at each long pause
    reply_task: asyncio.Task | None = None
    speaking: "tuple[Reply, str | None, list[Step]] | None" = None
    draft: "Draft | None" = None
    done_runs: "list[ToolRun]" = field(default_factory=list)
    reopened: bool = False                 # the last cut of a reply was a reopen, not a barge-in

    def earlier_run(self, name: str, arguments: dict[str, Any]) -> "ToolRun | None":
        """A finished run of tool ``name`` with ``arguments`` from a dropped draft of this turn."""
        for run in self.done_runs:
            if run.call.name == name and dict(run.call.arguments) == dict(arguments):
                return run
        return None

    def busy(self) -> bool:
        """True while any of the turn's tasks still runs."""
        tasks = [self.reply_task, self.spec[1] if self.spec else None,
                 self.draft.task if self.draft else None]
        return any(t is not None and not t.done() for t in tasks)
