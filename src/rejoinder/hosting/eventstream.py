"""Encoder for the AWS event-stream framing (``application/vnd.amazon.eventstream``).

Only our SageMaker-shaped server encodes; every client decodes with botocore's
``botocore.eventstream.EventStreamBuffer`` (the decoder boto3 uses), and a test checks this encoder
against it. Layout (big-endian; source: botocore ``eventstream.py``, see shared PROTOCOLS.md §3.3)::

    prelude(12)  total_len u32 | headers_len u32 | prelude_crc u32 = CRC32(first 8 bytes)
    headers      repeated [name_len u8][name utf-8][type u8][value]
    payload      total_len - headers_len - 16 bytes
    message_crc  u32 = CRC32(bytes 0 .. end of payload)

Header values written here: ``bool`` (types 0/1), ``int`` (type 4, int32), ``bytes`` (type 6) and
``str`` (type 7), which is all SageMaker's response stream uses.
"""

from __future__ import annotations

import json
import struct
from binascii import crc32

_PRELUDE = struct.Struct(">II")
_U32 = struct.Struct(">I")
MAX_HEADER_VALUE = 32767          # bytes; botocore rejects longer string/bytes header values
MAX_PAYLOAD = 16 * 1024 * 1024    # bytes; smithy's limit (botocore accepts up to 24 MiB)


def _header(name: str, value: str | bytes | bool | int) -> bytes:
    key = name.encode("utf-8")
    if not 0 < len(key) < 256:
        raise ValueError(f"event-stream header name must be 1..255 bytes: {name!r}")
    out = bytes([len(key)]) + key
    if isinstance(value, bool):
        return out + bytes([0 if value else 1])
    if isinstance(value, int):
        return out + b"\x04" + struct.pack(">i", value)
    raw, kind = (value, 6) if isinstance(value, bytes) else (value.encode("utf-8"), 7)
    if len(raw) > MAX_HEADER_VALUE:
        raise ValueError(f"event-stream header {name!r}: value longer than {MAX_HEADER_VALUE} bytes")
    return out + bytes([kind]) + struct.pack(">H", len(raw)) + raw


def encode_message(headers: dict[str, str | bytes | bool | int], payload: bytes) -> bytes:
    """One event-stream message: prelude, headers, payload and both CRC32s.

    Raises:
        ValueError: a header name or value, or the payload, is over the format's limits.
    """
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"event-stream payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    head = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(head) + len(payload) + 4
    prelude = _PRELUDE.pack(total, len(head))
    prelude += _U32.pack(crc32(prelude) & 0xFFFFFFFF)
    body = prelude + head + payload
    return body + _U32.pack(crc32(body) & 0xFFFFFFFF)


def payload_part(data: bytes) -> bytes:
    """A SageMaker ``PayloadPart`` event carrying ``data`` (the response stream's ``Bytes``)."""
    return encode_message({":event-type": "PayloadPart", ":content-type": "application/octet-stream",
                           ":message-type": "event"}, data)


def model_stream_error(message: str, error_code: str = "StreamBroken") -> bytes:
    """A SageMaker ``ModelStreamError`` exception event (``ErrorCode``: ``StreamBroken`` or
    ``ModelInvocationTimeExceeded``); boto3 raises it as ``EventStreamError``."""
    body = json.dumps({"Message": message, "ErrorCode": error_code}).encode("utf-8")
    return encode_message({":exception-type": "ModelStreamError", ":content-type": "application/json",
                           ":message-type": "exception"}, body)


def internal_stream_failure(message: str) -> bytes:
    """A SageMaker ``InternalStreamFailure`` exception event."""
    body = json.dumps({"Message": message}).encode("utf-8")
    return encode_message({":exception-type": "InternalStreamFailure",
                           ":content-type": "application/json", ":message-type": "exception"}, body)
