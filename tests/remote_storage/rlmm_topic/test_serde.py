"""``__remote_log_metadata`` values: the framing, version moves, typed errors, and the topic's settings.

Byte-for-byte agreement with Kafka's layout is judged in ``tests/orchestrator/protocol/test_kafka_rlmm_values.py``
(an independent encoder built from Kafka's schema files); here, the behaviour around it.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.errors import ProtocolError, SettingsError, UnsupportedVersion
from orchestrator.ids import Uuid
from orchestrator.metadata.records import MetadataRecord, decode_record, encode_record, make_record
from remote_storage.rlmm_topic.layout import TOPIC_NAME, RemoteLogMetadataTopicSettings
from remote_storage.rlmm_topic.serde import (
    KEY,
    UnknownRecordType,
    UnknownRecordVersion,
    at_version,
    decode_value,
    encode_value,
)
from tests.support import kafka_json_serde as kafka

pytestmark = pytest.mark.unit

TIP = {"name": "orders", "id": Uuid.from_string("xX9kP3q1T0uC5cZx2o8y1w"), "partition": 3}
SID = {"topic_id_partition": TIP, "id": Uuid.from_string("AAECAwQFBgcICQoLDA0ODw")}


def update(version: int = 0, **fields: object) -> MetadataRecord:
    return make_record(
        "RemoteLogSegmentMetadataUpdateRecord",
        version,
        remote_log_segment_id=SID,
        broker_id=2,
        event_timestamp_ms=1_700_000_001_000,
        remote_log_segment_state=1,
        tiered_epoch=4,
        **fields,
    )


def test_a_value_is_frame_version_1_then_api_key_then_version_then_the_body() -> None:
    record = update()
    for version in (0, 1):
        value = encode_value(record, version=version)
        assert value[:3] == bytes([1, 1, version])
    assert KEY is None


def test_the_default_version_is_0_and_a_stored_record_is_its_own_value() -> None:
    record = update()
    assert encode_value(record) == encode_record(record)
    assert decode_value(encode_value(record)) == record


def test_a_record_moved_up_to_version_1_takes_kafkas_defaults_and_reads_back() -> None:
    record = update()
    moved = at_version(record, 1)
    assert moved.version == 1
    assert (moved["broker_leader_epoch"], moved["end_offset"], moved["tiered_epoch"]) == (-1, -1, 4)
    assert decode_value(encode_value(record, version=1)) == moved
    # the defaults are not written: version 1 of this record is version 0's bytes with another version number
    assert encode_value(record, version=1)[3:] == encode_value(record, version=0)[3:]


def test_a_version_1_field_that_is_set_refuses_to_go_down_to_version_0() -> None:
    record = update(1, broker_leader_epoch=6, end_offset=199)
    assert decode_value(encode_value(record, version=1)) == record
    with pytest.raises(UnsupportedVersion, match="broker_leader_epoch"):
        encode_value(record, version=0)
    assert at_version(at_version(update(1), 0), 1) == update(1)


def test_only_remote_log_metadata_records_are_values() -> None:
    with pytest.raises(ValueError, match="TopicRecord"):
        encode_value(make_record("TopicRecord", name="orders", topic_id=TIP["id"]))


def test_an_unknown_api_key_or_version_is_a_typed_error_naming_it() -> None:
    snapshot = bytes([1, 3, 0]) + bytes(40)  # Kafka's apiKey 3 never travels in the topic
    with pytest.raises(UnknownRecordType, match=r"apiKey\) 3") as unknown:
        decode_value(snapshot)
    assert unknown.value.api_key == 3
    newer = bytes([1, 0, 2]) + encode_value(update())[3:]
    with pytest.raises(UnknownRecordVersion, match="version 2") as too_new:
        decode_value(newer)
    assert (too_new.value.record_name, too_new.value.version) == ("RemoteLogSegmentMetadataRecord", 2)


def test_frame_version_0_and_trailing_bytes_are_refused_as_kafka_refuses_them() -> None:
    value = encode_value(update())
    with pytest.raises(ProtocolError, match="frame version 0"):
        decode_value(b"\x00" + value[1:])
    with pytest.raises(ProtocolError, match="trailing"):
        decode_value(value + b"\x00")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.binary(max_size=120))
def test_random_bytes_never_raise_anything_but_a_protocol_error(data: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        decode_value(data)


def test_the_topic_settings_default_to_kafkas_layout_and_refuse_nonsense() -> None:
    default = RemoteLogMetadataTopicSettings()
    assert (TOPIC_NAME, default.partitions, default.record_version) == ("__remote_log_metadata", 50, 0)
    assert RemoteLogMetadataTopicSettings(partitions=3, record_version=1).record_version == 1
    with pytest.raises(SettingsError, match="partitions"):
        RemoteLogMetadataTopicSettings(partitions=0)
    with pytest.raises(SettingsError, match="record version"):
        RemoteLogMetadataTopicSettings(record_version=2)


def test_a_record_stored_before_the_tag_move_is_published_with_its_epoch_on_tag_10950() -> None:
    legacy_file = Path(__file__).parents[2] / "orchestrator" / "metadata" / "golden" / "legacy_rlmm_records.jsonl"
    kafka_schemas = Path(__file__).parents[2] / "orchestrator" / "protocol" / "golden" / "kafka"
    for line in legacy_file.read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        value = encode_value(decode_record(bytes.fromhex(case["hex"]), rlmm=True))
        _, version, body = kafka.unframe(value)
        _, unknown = kafka.read(kafka.load_schema(kafka_schemas / f"{case['record']}.json"), version, body)
        epoch = case["tiered_epoch"]
        assert unknown == ({} if epoch == -1 else {10950: epoch.to_bytes(4, "big", signed=True)}), case["case"]
