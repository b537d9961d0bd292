"""Our AWS event-stream encoder, checked against botocore's decoder (the one boto3 uses)."""

from __future__ import annotations

import json

import pytest
from botocore.eventstream import ChecksumMismatch, EventStream, EventStreamBuffer
from botocore.exceptions import EventStreamError

from rejoinder.hosting import eventstream as es


def _decode(data: bytes, step: int = 0):
    buf = EventStreamBuffer()
    out = []
    for i in range(0, len(data), step or len(data)):
        buf.add_data(data[i:i + (step or len(data))])
        out.extend(buf)
    return out


def test_round_trip_every_header_type_fed_in_small_pieces():
    msg = es.encode_message({":message-type": "event", "flag": True, "off": False, "n": -7,
                             "raw": b"\x00\xff", "text": "héllo"}, b"payload \x00 bytes")
    [m] = _decode(msg * 1, step=3)
    assert m.headers == {":message-type": "event", "flag": True, "off": False, "n": -7,
                         "raw": b"\x00\xff", "text": "héllo"}
    assert m.payload == b"payload \x00 bytes"
    assert len(_decode(msg + es.payload_part(b"x") + es.payload_part(b""), step=5)) == 3


def test_a_flipped_byte_fails_the_crc():
    bad = bytearray(es.payload_part(b"hello"))
    bad[-6] ^= 1
    with pytest.raises(ChecksumMismatch):
        _decode(bytes(bad))


def test_limits_are_enforced():
    with pytest.raises(ValueError, match="header"):
        es.encode_message({"k": "x" * 40000}, b"")
    with pytest.raises(ValueError, match="payload"):
        es.encode_message({}, b"\x00" * (es.MAX_PAYLOAD + 1))


class _Raw:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self):
        yield self.data


def _boto_stream(data: bytes) -> EventStream:
    """What boto3's ``invoke_endpoint_with_response_stream(...)["Body"]`` iterates."""
    from botocore.parsers import EventStreamJSONParser
    from botocore.session import get_session

    op = get_session().get_service_model("sagemaker-runtime").operation_model(
        "InvokeEndpointWithResponseStream")
    return EventStream(_Raw(data), op.output_shape.members["Body"], EventStreamJSONParser(), op.name)


def test_boto3_reads_payload_parts_and_raises_on_model_stream_error():
    data = es.payload_part(b'{"type": "chunk"}\n') + es.payload_part(b'{"type": "done"}\n')
    assert [e["PayloadPart"]["Bytes"] for e in _boto_stream(data)] == [b'{"type": "chunk"}\n',
                                                                        b'{"type": "done"}\n']
    events = iter(_boto_stream(es.payload_part(b"{}\n") + es.model_stream_error("model died", "StreamBroken")))
    assert next(events) == {"PayloadPart": {"Bytes": b"{}\n"}}
    with pytest.raises(EventStreamError) as err:
        next(events)
    assert err.value.response["Error"] == {"Code": "ModelStreamError", "Message": "model died"}
    with pytest.raises(EventStreamError, match="InternalStreamFailure"):
        list(_boto_stream(es.internal_stream_failure("oops")))
    assert json.loads(_decode(es.model_stream_error("m", "ModelInvocationTimeExceeded"))[0].payload) == {
        "Message": "m", "ErrorCode": "ModelInvocationTimeExceeded"}
