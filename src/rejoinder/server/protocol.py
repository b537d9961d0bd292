"""The browser WebSocket protocol at ``/ws``: wire models, binary frame layouts, close codes.

The full description for client writers is ``server/PROTOCOL.md``; this module is its executable
form. Control messages are JSON text frames with a ``type`` tag (validated with pydantic); audio
travels in binary frames:

* client → server: ``float64 LE capture_ms`` (the client's clock, ``performance.now()``, of the
  frame's first sample; NaN when unknown) then ``int16 LE`` mono PCM at the ``sample_rate``
  announced in ``hello``;
* server → client: ``uint32 LE turn_id``, ``uint32 LE seq`` (frame index within the reply), then
  ``int16 LE`` mono PCM at 16 kHz, 20 ms per frame.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

#: sample rates a client may announce (resampled to the 16 kHz line rate by the server)
SAMPLE_RATES = (8000, 16000, 24000, 32000, 44100, 48000)
UP_HEADER = struct.Struct("<d")
DOWN_HEADER = struct.Struct("<II")


class Close:
    """WebSocket close codes the server uses (RFC 6455 ones and 4xxx application ones)."""

    NORMAL = 1000         # the call ended (client ``bye``, or the server hung up)
    BAD_DATA = 1007       # malformed binary frame or JSON
    POLICY = 1008         # rate limit, or the client does not read what it is sent
    TOO_BIG = 1009        # message larger than the limit
    SERVER_ERROR = 1011   # a bug or a failed stage that ended the call (logged)
    BUSY = 1013           # concurrent-call cap reached, or models still loading: try again later
    PROTOCOL = 4400       # wrong message order, unknown type, unsupported sample rate / format
    UNAUTHORIZED = 4401   # missing or wrong token
    TIMEOUT = 4408        # no ``hello`` in time, or the call reached its length limit


class CallEnded(Exception):
    """Ends a call: ``code`` and ``reason`` go in the close frame (reason ≤ 123 bytes)."""

    def __init__(self, code: int, reason: str, *, error_code: str | None = None) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason.encode("utf-8")[:120].decode("utf-8", "ignore")
        self.error_code = error_code


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Hello(_Msg):
    """First message of a call. ``token`` may instead be given as the ``token`` query parameter."""

    type: Literal["hello"]
    token: str | None = Field(None, max_length=256)
    sample_rate: int = 16000
    client: str = Field("unknown", max_length=64)
    caller_phone: str | None = Field(None, max_length=32)
    stats: dict[str, float | None] = Field(default_factory=dict, max_length=16)


class Pong(_Msg):
    """Answer to the server's ``ping``: ``t`` is the client's clock (ms) when it answered."""

    type: Literal["pong"]
    id: int
    t: float


class Played(_Msg):
    """What the client actually played, on the client's clock (ms):
    ``start`` (first voiced sample), ``end`` (last sample), ``cut`` (stopped by ``clear``),
    ``stall`` (buffer ran dry for ``duration_ms``)."""

    type: Literal["played"]
    turn_id: int = Field(ge=0)  # 0: the greeting (played, not measured)
    event: Literal["start", "end", "cut", "stall"]
    t: float
    duration_ms: float | None = Field(None, ge=0, le=600000)
    played_ms: float | None = Field(None, ge=0)
    estimated: bool = False


class Stats(_Msg):
    """Client-side audio facts for the record (input/output latency, jitter buffer)."""

    type: Literal["stats"]
    stats: dict[str, float | None] = Field(default_factory=dict, max_length=16)


class Bye(_Msg):
    type: Literal["bye"]


ClientMessage = Annotated[Union[Hello, Pong, Played, Stats, Bye], Field(discriminator="type")]
_CLIENT = TypeAdapter(ClientMessage)


def load_json_object(text: str, key: str, what: str) -> dict[str, Any]:
    """Parse a text frame that must be a JSON object with a string ``key``.

    Raises:
        CallEnded: ``BAD_DATA`` when it is not JSON, ``PROTOCOL`` when it lacks ``key``.
    """
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise CallEnded(Close.BAD_DATA, "text frame is not JSON", error_code="bad_json") from None
    if not isinstance(data, dict) or not isinstance(data.get(key), str):
        raise CallEnded(Close.PROTOCOL, f"{what} is a JSON object with a '{key}'",
                        error_code="bad_message")
    return data


def parse_control(text: str) -> Hello | Pong | Played | Stats | Bye:
    """Parse one client text frame.

    Raises:
        CallEnded: ``BAD_DATA`` for text that is not JSON, ``PROTOCOL`` for JSON that is not a
            known message (the reason names the problem).
    """
    data = load_json_object(text, "type", "a control message")
    try:
        return _CLIENT.validate_python(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise CallEnded(Close.PROTOCOL, f"bad '{data['type']}' message: {where}: {err['msg']}",
                        error_code="bad_message") from None


def parse_audio(data: bytes) -> tuple[float, bytes]:
    """Split a client audio frame into (capture_ms or NaN, PCM bytes).

    Raises:
        CallEnded: ``BAD_DATA`` when the frame is shorter than its header, holds no samples or an
            odd number of bytes, or the timestamp is infinite.
    """
    if len(data) < UP_HEADER.size + 2 or (len(data) - UP_HEADER.size) % 2:
        raise CallEnded(Close.BAD_DATA, "audio frame: 8-byte float64 capture time then int16 "
                        "samples (even byte count)", error_code="bad_frame")
    (t,) = UP_HEADER.unpack_from(data)
    if math.isinf(t):
        raise CallEnded(Close.BAD_DATA, "audio frame: capture time is infinite", error_code="bad_frame")
    return t, data[UP_HEADER.size:]


def error_message(code: str, message: str) -> str:
    return json.dumps({"type": "error", "code": code, "message": message})
