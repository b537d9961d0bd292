"""Amazon Nova Sonic's bidirectional event protocol: the JSON events, built and parsed.

Every event is one JSON object ``{"event": {<name>: {…}}}`` (shared PROTOCOLS.md §4.3–4.4; AWS
"Nova Sonic input events" / "output events" pages). Input events (client → model), in order:
``sessionStart`` → ``promptStart`` (output formats, tool specs) → a SYSTEM ``TEXT`` content
block (``contentStart`` / ``textInput`` / ``contentEnd``) → one long-lived USER ``AUDIO`` content
(``contentStart`` then many ``audioInput`` of base64 16-bit mono LPCM) → per tool call a ``TOOL``
content block carrying ``toolResult`` → ``contentEnd`` / ``promptEnd`` / ``sessionEnd``.

Output events (model → client) carry ``sessionId``, ``promptName``, ``completionId`` and, for
content, ``contentId``: ``completionStart``, ``contentStart`` (``type`` TEXT/AUDIO/TOOL, ``role``
USER/ASSISTANT/TOOL, ``additionalModelFields`` a JSON *string* with ``generationStage``
SPECULATIVE/FINAL), ``textOutput`` (USER: the transcript; ASSISTANT SPECULATIVE: what it plans to
say; ASSISTANT FINAL: what was said; ``{ "interrupted" : true }`` on barge-in), ``audioOutput``
(base64 LPCM), ``toolUse`` (``toolName``, ``toolUseId``, ``content``: the arguments as a JSON
string), ``contentEnd`` (``stopReason`` PARTIAL_TURN / END_TURN / INTERRUPTED / TOOL_USE),
``completionEnd`` and ``usageEvent``.

:func:`parse_output` turns a received event into an :class:`OutputEvent`; the builders return
dicts ready for ``json.dumps``. Both ends of rejoinder (the adapter and the local server) use
this one module, so what the local server accepts is what the adapter sends.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ports import PortError, ToolSchema

INPUT_EVENTS = ("sessionStart", "promptStart", "contentStart", "textInput", "audioInput", "toolResult",
                "contentEnd", "promptEnd", "sessionEnd")
OUTPUT_EVENTS = ("completionStart", "contentStart", "textOutput", "audioOutput", "toolUse", "contentEnd",
                 "completionEnd", "usageEvent")
STOP_REASONS = ("PARTIAL_TURN", "END_TURN", "INTERRUPTED", "TOOL_USE")
ENDPOINTING = ("HIGH", "MEDIUM", "LOW")
BARGE_IN = '{ "interrupted" : true }'


def _ev(name: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"event": {name: body}}


def session_start(*, max_tokens: int = 1024, top_p: float = 0.9, temperature: float = 0.7,
                  endpointing: str | None = "MEDIUM") -> dict[str, Any]:
    """``sessionStart`` (Nova 2: ``turnDetectionConfiguration.endpointingSensitivity``)."""
    body: dict[str, Any] = {"inferenceConfiguration": {"maxTokens": int(max_tokens), "topP": float(top_p),
                                                       "temperature": float(temperature)}}
    if endpointing is not None:
        body["turnDetectionConfiguration"] = {"endpointingSensitivity": endpointing}
    return _ev("sessionStart", body)


def audio_config(rate: int, **extra: Any) -> dict[str, Any]:
    return {"mediaType": "audio/lpcm", "sampleRateHertz": int(rate), "sampleSizeBits": 16, "channelCount": 1,
            **extra, "encoding": "base64", "audioType": "SPEECH"}


def prompt_start(prompt: str, *, voice: str = "matthew", output_rate: int = 16000,
                 tools: tuple[ToolSchema, ...] = ()) -> dict[str, Any]:
    """``promptStart``: text and audio output formats and the tools, each ``toolSpec`` with its
    JSON Schema as a *string* (``inputSchema.json``)."""
    body: dict[str, Any] = {
        "promptName": prompt, "textOutputConfiguration": {"mediaType": "text/plain"},
        "audioOutputConfiguration": audio_config(output_rate, voiceId=voice)}
    if tools:
        body["toolUseOutputConfiguration"] = {"mediaType": "application/json"}
        body["toolConfiguration"] = {"tools": [
            {"toolSpec": {"name": t.name, "description": t.description,
                          "inputSchema": {"json": json.dumps(t.parameters)}}} for t in tools]}
    return _ev("promptStart", body)


def text_block(prompt: str, role: str, text: str, *, interactive: bool = False) -> list[dict[str, Any]]:
    """A TEXT content block (``contentStart`` / ``textInput`` / ``contentEnd``): the SYSTEM prompt,
    history (USER / ASSISTANT) or, ``interactive``, a typed user turn."""
    name = uuid.uuid4().hex
    return [_ev("contentStart", {"promptName": prompt, "contentName": name, "type": "TEXT",
                                 "interactive": interactive, "role": role,
                                 "textInputConfiguration": {"mediaType": "text/plain"}}),
            _ev("textInput", {"promptName": prompt, "contentName": name, "content": text}),
            _ev("contentEnd", {"promptName": prompt, "contentName": name})]


def audio_start(prompt: str, content: str, rate: int = 16000) -> dict[str, Any]:
    """The USER AUDIO ``contentStart`` (interactive) that every ``audioInput`` then refers to."""
    return _ev("contentStart", {"promptName": prompt, "contentName": content, "type": "AUDIO",
                                "interactive": True, "role": "USER", "audioInputConfiguration": audio_config(rate)})


def audio_input(prompt: str, content: str, pcm: np.ndarray) -> dict[str, Any]:
    """One ``audioInput``: int16 mono PCM, base64 of its little-endian bytes."""
    data = base64.b64encode(np.asarray(pcm, dtype="<i2").tobytes()).decode("ascii")
    return _ev("audioInput", {"promptName": prompt, "contentName": content, "content": data})


def tool_result(prompt: str, tool_use_id: str, result_text: str) -> list[dict[str, Any]]:
    """A TOOL content block answering ``tool_use_id``: ``result_text`` is the result as JSON text."""
    name = uuid.uuid4().hex
    return [_ev("contentStart", {"promptName": prompt, "contentName": name, "interactive": False, "type": "TOOL",
                                 "role": "TOOL", "toolResultInputConfiguration": {
                                     "toolUseId": tool_use_id, "type": "TEXT",
                                     "textInputConfiguration": {"mediaType": "text/plain"}}}),
            _ev("toolResult", {"promptName": prompt, "contentName": name, "content": result_text}),
            _ev("contentEnd", {"promptName": prompt, "contentName": name})]


def content_end(prompt: str, content: str) -> dict[str, Any]:
    return _ev("contentEnd", {"promptName": prompt, "contentName": content})


def prompt_end(prompt: str) -> dict[str, Any]:
    return _ev("promptEnd", {"promptName": prompt})


def session_end() -> dict[str, Any]:
    return _ev("sessionEnd", {})


def event_name(event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(name, body) of one ``{"event": {name: body}}``.

    Raises:
        PortError: not of that shape (names what was received).
    """
    inner = event.get("event") if isinstance(event, dict) else None
    if not isinstance(inner, dict) or len(inner) != 1:
        raise PortError(f"not a Nova Sonic event (expected {{\"event\": {{NAME: {{…}}}}}}): {str(event)[:120]}")
    [(name, body)] = inner.items()
    if not isinstance(body, dict):
        raise PortError(f"Nova Sonic event {name!r} has a body that is not an object")
    return name, body


@dataclass(frozen=True, slots=True)
class OutputEvent:
    """A parsed output event. ``stage`` is the ``generationStage`` of the content it belongs to
    (SPECULATIVE / FINAL, None when not given); ``pcm`` the decoded audio of an ``audioOutput``
    (int16); ``arguments`` the parsed ``toolUse`` content."""

    name: str
    body: dict[str, Any]
    role: str | None = None
    kind: str | None = None  # content type: TEXT / AUDIO / TOOL
    stage: str | None = None
    pcm: np.ndarray | None = None
    arguments: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return str(self.body.get("content", ""))

    @property
    def interrupted(self) -> bool:
        """A barge-in signal (``textOutput`` ``{ "interrupted" : true }``)."""
        if self.name != "textOutput":
            return False
        try:
            return json.loads(self.text).get("interrupted") is True
        except (ValueError, AttributeError):
            return False


class OutputParser:
    """Parses the output events of one session, remembering each content's role, type and
    generation stage from its ``contentStart`` (text and audio events do not repeat them)."""

    def __init__(self) -> None:
        self._contents: dict[str, tuple[str | None, str | None, str | None]] = {}

    def parse(self, raw: str | bytes | dict[str, Any]) -> OutputEvent:
        """One output event (JSON text or an already decoded dict).

        Raises:
            PortError: malformed JSON, an unknown event name, bad base64 audio or bad tool arguments.
        """
        if isinstance(raw, (str, bytes)):
            try:
                raw = json.loads(raw)
            except ValueError:
                raise PortError(f"Nova Sonic sent malformed JSON: {str(raw)[:80]!r}") from None
        name, body = event_name(raw)  # type: ignore[arg-type]
        if name not in OUTPUT_EVENTS:
            raise PortError(f"unknown Nova Sonic output event {name!r}; known: {', '.join(OUTPUT_EVENTS)}")
        cid = str(body.get("contentId", ""))
        if name == "contentStart":
            stage = None
            extra = body.get("additionalModelFields")
            if isinstance(extra, str) and extra:
                try:
                    stage = json.loads(extra).get("generationStage")
                except (ValueError, AttributeError):
                    stage = None
            self._contents[cid] = (body.get("role"), body.get("type"), stage)
        role, kind, stage = self._contents.get(cid, (body.get("role"), body.get("type"), None))
        if name == "contentEnd":
            self._contents.pop(cid, None)
        pcm = None
        arguments: dict[str, Any] = {}
        if name == "audioOutput":
            try:
                data = base64.b64decode(str(body.get("content", "")), validate=True)
            except binascii.Error as exc:
                raise PortError(f"Nova Sonic audioOutput with invalid base64: {exc}") from None
            if len(data) % 2:
                raise PortError(f"Nova Sonic audioOutput of {len(data)} bytes is not whole int16 samples")
            pcm = np.frombuffer(data, dtype="<i2").astype(np.int16)
        elif name == "toolUse":
            try:
                arguments = json.loads(body.get("content") or "{}")
            except ValueError:
                raise PortError(f"Nova Sonic toolUse {body.get('toolName')!r} with arguments that are not "
                                f"JSON: {str(body.get('content'))[:80]!r}") from None
            if not isinstance(arguments, dict):
                raise PortError(f"Nova Sonic toolUse {body.get('toolName')!r}: arguments must be a JSON object")
        return OutputEvent(name, body, role, kind, stage, pcm, arguments)


# -- the model side: output events, as the local server sends them --------------------------------
def out_event(name: str, ids: dict[str, str], **body: Any) -> dict[str, Any]:
    """An output event with the session's ids (``sessionId``, ``promptName``, ``completionId``)."""
    return _ev(name, {**ids, **body})


def out_content_start(ids: dict[str, str], content: str, kind: str, role: str, stage: str | None = None,
                      **config: Any) -> dict[str, Any]:
    extra = {"additionalModelFields": json.dumps({"generationStage": stage})} if stage else {}
    return out_event("contentStart", ids, contentId=content, type=kind, role=role, **extra, **config)


def out_audio(ids: dict[str, str], content: str, pcm: np.ndarray) -> dict[str, Any]:
    data = base64.b64encode(np.asarray(pcm, dtype="<i2").tobytes()).decode("ascii")
    return out_event("audioOutput", ids, contentId=content, content=data)
