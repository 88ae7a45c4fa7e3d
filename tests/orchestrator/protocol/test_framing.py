import asyncio
import contextlib
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import ProtocolError, UnsupportedVersion
from orchestrator.ids import Uuid
from orchestrator.metadata.records import decode_record, encode_record, make_record
from orchestrator.protocol import codec
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import (
    ConnectionClosed,
    UnsupportedRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    read_frame,
)
from orchestrator.protocol.schema import schema

pytestmark = pytest.mark.unit


def _payload(framed: bytes) -> bytes:
    (size,) = struct.unpack(">i", framed[:4])
    assert size == len(framed) - 4
    return framed[4:]


def test_flexible_request_uses_header_v2_with_a_classic_client_id():
    tid = Uuid.random()
    framed = encode_request(ApiKey.DISABLE_REMOTE_TOPIC, 0, 7, {"topic_id": tid, "tiered_epoch": 3}, client_id="ctl")
    payload = _payload(framed)
    # api key, version, correlation id, then client id as an int16-length string even in header v2.
    assert payload[:8] == struct.pack(">hhi", ApiKey.DISABLE_REMOTE_TOPIC, 0, 7)
    assert payload[8:13] == b"\x00\x03ctl"
    assert payload[13] == 0  # header tagged fields: none
    req = decode_request(payload)
    assert req.header.client_id == "ctl" and req.header.correlation_id == 7
    assert req.body["topic_id"] == tid and req.body["tiered_epoch"] == 3 and req.body["partition_id"] == -1


def test_non_flexible_request_uses_header_v1():
    framed = encode_request(ApiKey.METADATA, 1, 9, {"topics": None}, client_id=None)
    payload = _payload(framed)
    assert payload[8:10] == b"\xff\xff"  # null client id
    assert decode_request(payload).body["topics"] is None


def test_api_versions_response_always_uses_header_v0():
    req = decode_request(_payload(encode_request(ApiKey.API_VERSIONS, 3, 5, {"client_software_name": "t"})))
    framed = encode_response(
        req.header, {"error_code": 0, "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12}]}
    )
    payload = _payload(framed)
    assert payload[:4] == struct.pack(">i", 5)
    corr, body = decode_response(payload, ApiKey.API_VERSIONS, 3)
    assert corr == 5 and body["api_keys"][0]["max_version"] == 12


def test_flexible_response_uses_header_v1():
    req = decode_request(_payload(encode_request(ApiKey.DISABLE_REMOTE_TOPIC, 0, 11, {"topic_id": Uuid.random()})))
    payload = _payload(encode_response(req.header, {"error_code": 0, "status": 1, "partitions_done": 2}))
    assert payload[:5] == struct.pack(">i", 11) + b"\x00"
    corr, body = decode_response(payload, ApiKey.DISABLE_REMOTE_TOPIC, 0)
    assert corr == 11 and body["status"] == 1 and body["partitions_done"] == 2 and body["error_message"] is None


def test_every_truncation_of_a_request_is_a_protocol_error():
    payload = _payload(
        encode_request(
            ApiKey.METADATA,
            12,
            1,
            {"topics": [{"topic_id": Uuid.random(), "name": "orders"}], "allow_auto_topic_creation": False},
        )
    )
    for cut in range(len(payload)):
        with pytest.raises(ProtocolError):
            decode_request(payload[:cut])


def test_unknown_api_key_and_version_say_what_was_asked_and_keep_the_correlation_id():
    with pytest.raises(UnsupportedRequest) as err:
        decode_request(struct.pack(">hhi", 9999, 0, 42) + b"\x00\x00")
    assert err.value.correlation_id == 42 and "9999" in str(err.value)
    with pytest.raises(UnsupportedRequest) as err:
        decode_request(struct.pack(">hhi", ApiKey.METADATA, 99, 43) + b"\x00\x00")
    assert err.value.api_version == 99 and "version 99" in str(err.value)


def test_bytes_after_a_request_body_are_ignored_and_counted_as_kafka_does():
    payload = _payload(encode_request(ApiKey.METADATA, 1, 1, {"topics": None}))
    request = decode_request(payload + b"\x00\x07")
    assert request.body["topics"] is None and request.trailing_bytes == 2
    assert decode_request(payload).trailing_bytes == 0


def test_librdkafkas_all_topics_metadata_v12_reads_as_kafka_reads_it():
    """librdkafka 2.16 asks Metadata v12 for every topic with its 4-byte topic-count placeholder left in place
    (captured from confluent-kafka 2.16.1): Kafka reads a null topic list, AllowAutoTopicCreation false, no
    tagged fields, and ignores the last three bytes."""
    frame_hex = "0003000c00000003000772646b61666b610000000000010000"
    request = decode_request(bytes.fromhex(frame_hex))
    assert request.header.client_id == "rdkafka" and request.header.api_version == 12
    assert request.body["topics"] is None
    assert request.body["allow_auto_topic_creation"] is False
    assert request.body["include_topic_authorized_operations"] is False
    assert request.trailing_bytes == 3


def test_bad_varint_negative_length_and_oversized_count_are_refused_without_allocating():
    s = schema("DescribeTieredStateRequest")
    with pytest.raises(ProtocolError, match="varint"):
        codec.decode(s, 0, b"\xff\xff\xff\xff\xff\xff\x01")
    # A compact array claiming 2**31 elements in a 10-byte body.
    with pytest.raises(ProtocolError, match="elements"):
        codec.decode(s, 0, b"\xff\xff\xff\xff\x07" + bytes(5))
    md = schema("MetadataRequest")
    with pytest.raises(ProtocolError, match="negative length"):
        codec.decode(md, 1, struct.pack(">i", -5))
    with pytest.raises(ProtocolError, match="truncated"):
        codec.decode(md, 1, struct.pack(">i", 1) + struct.pack(">h", 300) + b"abc")


def test_invalid_utf8_in_a_string_is_a_protocol_error():
    md = schema("MetadataRequest")
    with pytest.raises(ProtocolError, match="UTF-8"):
        codec.decode(md, 1, struct.pack(">i", 1) + struct.pack(">h", 2) + b"\xff\xfe")


def test_a_non_ignorable_field_cannot_be_sent_to_a_version_without_it():
    with pytest.raises(UnsupportedVersion):
        codec.encode(schema("MetadataRequest"), 0, {"topics": [{"name": "a"}], "allow_auto_topic_creation": False})


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_a_protocol_error(data):
    for parse in (decode_request, lambda d: decode_record(d), lambda d: decode_record(d, rlmm=True)):
        with contextlib.suppress(ProtocolError):
            parse(data)


SAMPLE_REQUESTS = [
    (ApiKey.METADATA, 12),
    (ApiKey.API_VERSIONS, 3),
    (ApiKey.DISABLE_REMOTE_TOPIC, 0),
    (ApiKey.CREATE_TOPICS, 7),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1),
]


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.integers(min_value=0, max_value=80))
def test_random_suffixes_after_a_valid_header_never_raise_anything_but_a_protocol_error(tail, key_choice):
    for api_key, version in SAMPLE_REQUESTS:
        head = struct.pack(">hhi", api_key, version, key_choice)
        with contextlib.suppress(ProtocolError):
            decode_request(head + tail)


def test_metadata_record_framing_round_trips_and_rejects_junk():
    tid = Uuid.random()
    rec = make_record("TieredStateRecord", topic_id=tid, tiered_epoch=4, tiered_state=2, policy=2)
    data = encode_record(rec)
    assert data[0] == 1  # frame version
    back = decode_record(data)
    assert back.name == "TieredStateRecord" and back["topic_id"] == tid and back["tiered_epoch"] == 4
    with pytest.raises(ProtocolError, match="frame version"):
        decode_record(b"\x02" + data[1:])
    with pytest.raises(ProtocolError, match="unknown metadata record type"):
        decode_record(b"\x01\x7f\x00")
    with pytest.raises(ProtocolError, match="trailing"):
        decode_record(data + b"\x00")


def _reader(data: bytes, eof: bool = True) -> asyncio.StreamReader:
    r = asyncio.StreamReader()
    r.feed_data(data)
    if eof:
        r.feed_eof()
    return r


@pytest.mark.parametrize(
    "data,match",
    [
        (struct.pack(">i", -1), "negative frame size"),
        (struct.pack(">i", 2**31 - 1), "exceeds the limit"),
        (struct.pack(">i", 10) + b"abc", "truncated frame"),
        (b"\x00\x00", "truncated frame size"),
    ],
)
def test_read_frame_refuses_malformed_sizes(data, match):
    async def go():
        await read_frame(_reader(data), max_frame_bytes=1 << 20)

    with pytest.raises(ProtocolError, match=match):
        asyncio.run(go())


def test_read_frame_reports_a_clean_close_and_reads_frames_back_to_back():
    async def go():
        r = _reader(struct.pack(">i", 3) + b"abc" + struct.pack(">i", 0))
        assert await read_frame(r) == b"abc"
        assert await read_frame(r) == b""
        with pytest.raises(ConnectionClosed):
            await read_frame(r)

    asyncio.run(go())


def test_strings_longer_than_kafkas_limit_are_refused_both_ways():
    s = schema("TopicRecord")
    with pytest.raises(ValueError, match="32767"):
        codec.encode(s, 0, {"name": "x" * 40_000, "topic_id": Uuid.random()})
    body = b"\xc1\xb8\x02" + b"x" * 40_000 + bytes(16) + b"\x00"  # compact length 40000 + 1
    with pytest.raises(ProtocolError, match="32767"):
        codec.decode(s, 0, body)


def test_an_omitted_topic_list_in_describe_tiered_state_means_every_topic():
    s = schema("DescribeTieredStateRequest")
    assert codec.decode(s, 0, codec.encode(s, 0, {}))["topics"] is None
