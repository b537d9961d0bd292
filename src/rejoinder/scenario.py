"""Call scenarios: scripted callers (YAML, validated with pydantic).

A scenario is a list of caller turns. Each turn's audio is a list of segments — a file, an
Asterisk prompt (``asterisk: digits/4``, real human speech installed from Debian's
``asterisk-core-sounds-en-wav``; voice by Allison Smith, CC-BY-SA-3.0), silence, text spoken by
the caller voice (espeak-ng, distinct from the agent's voice), or a ``mix`` of segments played at
once (babble: several voices overlaid). A file or prompt may be cut (``start_ms``,
``duration_ms``: a 0.3 s fragment of a word is a speech-like noise) and any segment set to a
level (``level_dbfs``, RMS dB below full scale: babble 40 dB down). Timing is relative to the agent:
``after_agent_ms`` waits for the agent to stop talking (as heard by the caller) then that long;
``barge_in_ms`` starts the turn that long into the agent's reply; ``at_ms`` is absolute. A turn
made only of silence is dead air: the caller stays quiet that long (a silent caller).

Expectations (checked by :mod:`rejoinder.harness.expect`):

* per caller turn (``expect``): ``tools`` called with (a subset of) the given arguments while
  answering that turn, words the caller must *hear* in the reply (``reply_contains``), a
  voice-to-voice budget (``v2v_budget_ms``), and whether the turn must cut the agent off
  (``interrupts: true``, a barge-in) or must not (``interrupts: false``, a backchannel);
  ``answered: false`` — no reply to this turn (noise, babble: no agent reply decided while it
  plays is heard); ``transcript_contains`` — what the runtime must have heard in *one* turn
  (digits compared without separators: a phone number read in groups is not split);
  ``reply_contains_any`` — at least one of these words must be heard; ``not_echo: true`` — the
  reply must not be the caller's own words back; ``no_tools: true`` — no tool call while
  answering (small talk); ``tools_absent`` — these tools must not be called while answering;
* per call: ``final_db`` — the rows the database must hold at the end
  (``{table: {row id: {column: value}}}``, a subset of the application's ``db_state``),
  ``only_expected_tools`` (no tool beyond those expected may run), ``agent_silent`` (the agent
  must not speak at all, e.g. for a silent caller), ``hangs_up`` (the agent must / must not
  end the call itself; when it must, its last reply must have been heard to the end before the
  line closed) and ``transfers`` (the agent must / must not transfer the call to a person,
  after its last reply was heard).

``turn_policy`` sets turn-taking options this call needs over the agent's configuration, e.g.
``{idle: {reprompt_ms: 4000, hangup_ms: 4000}}`` — idle handling is off unless a scenario asks.

Errors name the file, the line and the field (:class:`ScenarioError`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError
from .turns import TurnPolicy

ASTERISK_DIR = Path("/usr/share/asterisk/sounds/en")


class ScenarioError(ConfigError):
    """A scenario file is malformed; the message names file, line and field."""


class Segment(BaseModel):
    """One piece of a caller turn's audio: exactly one of file/asterisk/say/silence_ms/mix, with
    optional cut (``start_ms``/``duration_ms``) and level (``level_dbfs``)."""

    model_config = ConfigDict(extra="forbid")
    file: str | None = None
    asterisk: str | None = Field(None, description="prompt name under /usr/share/asterisk/sounds/en, no .wav")
    say: str | None = Field(None, description="text spoken by the synthetic caller voice")
    silence_ms: float | None = Field(None, ge=0, le=60000)
    mix: list["Segment"] | None = Field(None, min_length=1, description="segments played at once "
                                        "(each looped to duration_ms when given)")
    start_ms: float | None = Field(None, ge=0, description="cut: start this far into the audio")
    duration_ms: float | None = Field(None, gt=0, le=60000, description="cut: keep this long")
    level_dbfs: float | None = Field(None, ge=-90, le=0, description="scale to this RMS level (dBFS)")

    @model_validator(mode="after")
    def _one(self) -> "Segment":
        given = [k for k in ("file", "asterisk", "say", "silence_ms", "mix") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a segment needs exactly one of file/asterisk/say/silence_ms/mix, "
                             f"got {given or 'none'}")
        if self.silence_ms is not None and (self.start_ms, self.duration_ms, self.level_dbfs) != (None,) * 3:
            raise ValueError("silence_ms takes no start_ms/duration_ms/level_dbfs")
        return self

    def sources(self) -> list["Segment"]:
        """This segment and every segment inside its mix (depth first)."""
        return [self] + [s for m in self.mix or [] for s in m.sources()]


class ToolExpect(BaseModel):
    """A tool that must be called; ``args`` must be a subset of the call's arguments (compared as
    text, so ``103`` matches ``"103"``)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class Expect(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[ToolExpect] = Field(default_factory=list, description="tools that must be called")
    reply_contains: list[str] = Field(default_factory=list, description="words the caller must hear")
    reply_excludes: list[str] = Field(default_factory=list, description="words the caller must not "
                                      "hear (e.g. another customer's order details)")
    # answers, not echoes (rejoinder.harness.answers)
    reply_contains_any: list[str] = Field(default_factory=list, description="the caller must hear at "
                                          "least one of these (e.g. an order's status or its date)")
    not_echo: bool = Field(False, description="true: the reply must not repeat the caller's own words "
                           "(word error rate against the turn's transcript < 0.5, or contained in it)")
    no_tools: bool = Field(False, description="true: no tool may be called while answering this turn "
                           "(small talk, out-of-scope requests)")
    tools_absent: list[str] = Field(default_factory=list, description="tools that must not be called "
                                    "while answering this turn (e.g. a cancellation before it is confirmed)")
    v2v_budget_ms: float | None = Field(None, gt=0)
    interrupts: bool | None = Field(None, description="true: must cut the agent off; false: must not")
    answered: bool | None = Field(None, description="false: no agent reply decided while this turn "
                                  "plays may be heard (noise, babble); true: one must be")
    transcript_contains: list[str] = Field(default_factory=list, description="what the runtime must "
                                           "have heard in one turn (digits compared without separators)")


class CallerTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    audio: list[Segment] = Field(min_length=1)
    after_agent_ms: float | None = Field(None, ge=0)
    barge_in_ms: float | None = Field(None, ge=0)
    at_ms: float | None = Field(None, ge=0)
    kind: Literal["request", "backchannel", "noise"] = "request"
    expect: Expect = Field(default_factory=Expect)

    @model_validator(mode="after")
    def _one_cue(self) -> "CallerTurn":
        given = [k for k in ("after_agent_ms", "barge_in_ms", "at_ms") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"a turn has at most one of after_agent_ms/barge_in_ms/at_ms, got {given}")
        return self

    @property
    def silent(self) -> bool:
        """Only silence: the caller holds dead air this long."""
        return all(seg.silence_ms is not None for seg in self.audio)


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    caller_phone: str | None = None
    turns: list[CallerTurn] = Field(min_length=1)
    tail_ms: float = Field(2500, ge=0, description="listen this long after the last reply")
    final_db: dict[str, dict[str, dict[str, Any]]] = Field(
        default_factory=dict, description="{table: {row id: {column: value}}} at the end of the call")
    only_expected_tools: bool = False
    agent_silent: bool = False
    hangs_up: bool | None = Field(None, description="true: the agent must end the call itself "
                                  "(idle goodbye); false: it must not")
    transfers: bool | None = Field(None, description="true: the agent must transfer the call to a "
                                   "person (after its reply played); false: it must not")
    turn_policy: dict[str, Any] = Field(default_factory=dict, description="turn-taking settings "
                                        "over the agent's, e.g. {idle: {reprompt_ms: 4000}}")
    caller_voice: str = Field("en-us+m1", description="espeak-ng voice of the say: segments (not the agent's)")
    caller_rate: int = Field(140, ge=80, le=450, description="words per minute of the caller voice")
    tags: list[str] = Field(default_factory=list)
    path: str | None = None

    @field_validator("turn_policy")
    @classmethod
    def _policy_valid(cls, v: dict[str, Any]) -> dict[str, Any]:
        try:  # an unknown or invalid setting fails at load, named
            TurnPolicy().merged(v)
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ValueError(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}") from None
        return v

    @model_validator(mode="before")
    @classmethod
    def _ids_as_text(cls, data: Any) -> Any:
        """YAML reads ``103:`` as an int; row ids are compared as text."""
        if isinstance(data, dict) and isinstance(data.get("final_db"), dict):
            data = dict(data)
            data["final_db"] = {t: ({str(k): v for k, v in rows.items()} if isinstance(rows, dict) else rows)
                                for t, rows in data["final_db"].items()}
        return data


def _line_of(text: str, loc: tuple) -> int | None:
    """Best-effort line number of the field at ``loc`` in the YAML ``text``."""
    try:
        node = yaml.compose(text)
        for key in loc:
            if node is None:
                return None
            if isinstance(key, int) and node.id == "sequence":
                node = node.value[key]
            elif node.id == "mapping":
                node = next((v for k, v in node.value if k.value == key), None)
                if node is None:
                    return None
            else:
                return None
        return node.start_mark.line + 1 if node is not None else None
    except Exception:
        return None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file.

    Raises:
        ScenarioError: unreadable file, YAML syntax error or invalid field (file:line: field: why).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read scenario: {exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ScenarioError(f"{path}{where}: YAML syntax error: {exc}") from exc
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}:1: a scenario is a mapping with 'name' and 'turns'")
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors()[:5]:
            loc = tuple(err["loc"])
            line = _line_of(text, loc) or _line_of(text, loc[:-1]) or 1
            field = ".".join(str(x) for x in loc) or "(top level)"
            lines.append(f"{path}:{line}: field '{field}': {err['msg']}")
        more = exc.error_count() - len(lines)
        raise ScenarioError("\n".join(lines) + (f"\n(and {more} more)" if more > 0 else "")) from exc
    for i, turn in enumerate(sc.turns):
        for j, top in enumerate(turn.audio):
            for seg in top.sources():
                _check_source(path, text, i, j, seg)
    sc.path = str(path)
    return sc


def _check_source(path: Path, text: str, i: int, j: int, seg: Segment) -> None:
    """A prompt or file that a segment (or a segment in its mix) plays must exist."""
    line = _line_of(text, ("turns", i, "audio", j)) or 1
    if seg.asterisk and not (ASTERISK_DIR / f"{seg.asterisk}.wav").exists():
        raise ScenarioError(f"{path}:{line}: field 'turns.{i}.audio.{j}.asterisk': prompt '{seg.asterisk}' "
                            f"not found in {ASTERISK_DIR}; " + (
                                "check the name (ls that folder; no .wav suffix)" if ASTERISK_DIR.is_dir()
                                else "install the prompts: apt-get install asterisk-core-sounds-en-wav"))
    if seg.file and not (path.parent / seg.file).exists() and not Path(seg.file).exists():
        raise ScenarioError(f"{path}:{line}: field 'turns.{i}.audio.{j}.file': {seg.file} does not exist")
