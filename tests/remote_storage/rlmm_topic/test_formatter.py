"""The console consumer's rendering of ``__remote_log_metadata`` records, and the JSON form.

The expected lines are written by hand from Kafka's sources: ``RemoteLogMetadataSerde.RemoteLogMetadataFormatter``
(``partition: %d, offset: %d, value: %s``) and the ``toString()`` of ``RemoteLogSegmentMetadata`` (Kafka 4, with
``txnIdxEmpty``), ``RemoteLogSegmentMetadataUpdate``, ``RemotePartitionDeleteMetadata``, ``RemoteLogSegmentId``,
``TopicIdPartition``, ``Uuid``, ``CustomMetadata`` and Java's ``Optional`` and ``TreeMap``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from orchestrator.ids import Uuid
from orchestrator.metadata.records import MetadataRecord, make_record
from remote_storage.rlmm_topic.formatter import format_text, kafka_to_string, to_json
from remote_storage.rlmm_topic.serde import decode_value, encode_value

pytestmark = pytest.mark.unit

TOPIC_ID, SEGMENT_ID = "xX9kP3q1T0uC5cZx2o8y1w", "AAECAwQFBgcICQoLDA0ODw"
TIP = {"name": "orders", "id": Uuid.from_string(TOPIC_ID), "partition": 3}
SID = {"topic_id_partition": TIP, "id": Uuid.from_string(SEGMENT_ID)}


def segment(version: int = 0, **fields: object) -> MetadataRecord:
    values: dict[str, object] = {
        "remote_log_segment_id": SID,
        "start_offset": 100,
        "end_offset": 199,
        "broker_id": 2,
        "max_timestamp_ms": 1_700_000_000_000,
        "event_timestamp_ms": 1_700_000_000_500,
        "segment_leader_epochs": [{"leader_epoch": 4, "offset": 100}, {"leader_epoch": 5, "offset": 150}],
        "segment_size_in_bytes": 4096,
        "custom_metadata": b"\x01\x02",
        "remote_log_segment_state": 1,
        "txn_index_empty": False,
        "tiered_epoch": 7,
    }
    values.update(fields)
    return make_record("RemoteLogSegmentMetadataRecord", version, **values)


def update(version: int = 0, **fields: object) -> MetadataRecord:
    values: dict[str, object] = {
        "remote_log_segment_id": SID,
        "broker_id": 2,
        "event_timestamp_ms": 1_700_000_001_000,
        "remote_log_segment_state": 3,
    }
    values.update(fields)
    return make_record("RemoteLogSegmentMetadataUpdateRecord", version, **values)


def partition_delete(version: int = 0, **fields: object) -> MetadataRecord:
    values: dict[str, object] = {
        "topic_id_partition": TIP,
        "broker_id": 1,
        "event_timestamp_ms": 1_700_000_002_000,
        "remote_partition_delete_state": 2,
    }
    values.update(fields)
    return make_record("RemotePartitionDeleteMetadataRecord", version, **values)


SEGMENT_ID_TEXT = f"RemoteLogSegmentId{{topicIdPartition={TOPIC_ID}:orders-3, id={SEGMENT_ID}}}"


def test_a_segment_record_prints_as_kafkas_console_consumer_prints_it() -> None:
    assert format_text(segment(), partition=12, offset=345) == (
        "partition: 12, offset: 345, value: RemoteLogSegmentMetadata{"
        f"remoteLogSegmentId={SEGMENT_ID_TEXT}, startOffset=100, endOffset=199, brokerId=2, "
        "maxTimestampMs=1700000000000, eventTimestampMs=1700000000500, segmentLeaderEpochs={4=100, 5=150}, "
        "segmentSizeInBytes=4096, customMetadata=Optional[CustomMetadata{2 bytes}], state=COPY_SEGMENT_FINISHED, "
        "txnIdxEmpty=false}"
    )


def test_an_update_and_a_partition_delete_print_as_kafka_prints_them() -> None:
    assert format_text(update(), partition=0, offset=1) == (
        "partition: 0, offset: 1, value: RemoteLogSegmentMetadataUpdate{"
        f"remoteLogSegmentId={SEGMENT_ID_TEXT}, customMetadata=Optional.empty, state=DELETE_SEGMENT_FINISHED, "
        "eventTimestampMs=1700000001000, brokerId=2}"
    )
    assert format_text(partition_delete(), partition=49, offset=0) == (
        "partition: 49, offset: 0, value: RemotePartitionDeleteMetadata{"
        f"topicPartition={TOPIC_ID}:orders-3, state=DELETE_PARTITION_FINISHED, eventTimestampMs=1700000002000, "
        "brokerId=1}"
    )


def test_leader_epochs_print_as_a_sorted_map_where_a_repeated_epoch_keeps_its_last_offset() -> None:
    epochs = [{"leader_epoch": 5, "offset": 150}, {"leader_epoch": -1, "offset": 0}, {"leader_epoch": 5, "offset": 170}]
    text = kafka_to_string(segment(segment_leader_epochs=epochs, custom_metadata=None, txn_index_empty=True))
    assert "segmentLeaderEpochs={-1=0, 5=170}" in text
    assert "customMetadata=Optional.empty" in text and text.endswith("txnIdxEmpty=true}")


def test_version_1_fields_and_our_tiered_epoch_are_not_in_kafkas_text() -> None:
    """Kafka's objects carry neither; the text is the same at both versions."""
    assert kafka_to_string(segment(1, broker_leader_epoch=9)) == kafka_to_string(segment())
    assert kafka_to_string(update(1, broker_leader_epoch=9, end_offset=199)) == kafka_to_string(update())


def test_a_state_kafka_does_not_know_prints_as_its_number() -> None:
    assert "state=9," in kafka_to_string(update(remote_log_segment_state=9))
    assert to_json(partition_delete(remote_partition_delete_state=7), partition=0, offset=0)["state"] == 7


def test_the_json_form_of_each_record_holds_every_field() -> None:
    assert to_json(segment(1, broker_leader_epoch=9), partition=12, offset=345) == {
        "partition": 12,
        "offset": 345,
        "type": "RemoteLogSegmentMetadataRecord",
        "api_key": 0,
        "version": 1,
        "topic_id": TOPIC_ID,
        "topic": "orders",
        "topic_partition": 3,
        "segment_id": SEGMENT_ID,
        "broker_id": 2,
        "event_timestamp_ms": 1_700_000_000_500,
        "start_offset": 100,
        "end_offset": 199,
        "max_timestamp_ms": 1_700_000_000_000,
        "segment_leader_epochs": [{"leader_epoch": 4, "offset": 100}, {"leader_epoch": 5, "offset": 150}],
        "segment_size_in_bytes": 4096,
        "custom_metadata": "AQI=",
        "state": "COPY_SEGMENT_FINISHED",
        "txn_index_empty": False,
        "broker_leader_epoch": 9,
        "tiered_epoch": 7,
    }
    assert to_json(update(tiered_epoch=3), partition=0, offset=1) == {
        "partition": 0,
        "offset": 1,
        "type": "RemoteLogSegmentMetadataUpdateRecord",
        "api_key": 1,
        "version": 0,
        "topic_id": TOPIC_ID,
        "topic": "orders",
        "topic_partition": 3,
        "segment_id": SEGMENT_ID,
        "broker_id": 2,
        "event_timestamp_ms": 1_700_000_001_000,
        "custom_metadata": None,
        "state": "DELETE_SEGMENT_FINISHED",
        "end_offset": None,
        "broker_leader_epoch": None,
        "tiered_epoch": 3,
    }
    assert to_json(partition_delete(1, broker_leader_epoch=4, end_offset=4999), partition=49, offset=0) == {
        "partition": 49,
        "offset": 0,
        "type": "RemotePartitionDeleteMetadataRecord",
        "api_key": 2,
        "version": 1,
        "topic_id": TOPIC_ID,
        "topic": "orders",
        "topic_partition": 3,
        "broker_id": 1,
        "event_timestamp_ms": 1_700_000_002_000,
        "state": "DELETE_PARTITION_FINISHED",
        "end_offset": 4999,
        "broker_leader_epoch": 4,
        "tiered_epoch": None,
    }


@pytest.mark.parametrize("make", [segment, update, partition_delete], ids=lambda m: m.__name__)
def test_the_json_keys_of_a_record_type_are_the_same_at_every_version_and_serialize(
    make: Callable[[int], MetadataRecord],
) -> None:
    forms = [to_json(make(version), partition=0, offset=0) for version in (0, 1)]
    assert list(forms[0]) == list(forms[1])
    for form in forms:
        json.dumps(form)


def test_a_decoded_value_formats_like_the_record_it_came_from() -> None:
    for record in (segment(), update(), partition_delete()):
        back = decode_value(encode_value(record))
        assert format_text(back, partition=1, offset=2) == format_text(record, partition=1, offset=2)


def test_a_record_of_the_cluster_metadata_log_is_refused() -> None:
    topic = make_record("TopicRecord", name="orders", topic_id=TIP["id"])
    with pytest.raises(ValueError, match="TopicRecord"):
        kafka_to_string(topic)
    with pytest.raises(ValueError, match="TopicRecord"):
        to_json(topic, partition=0, offset=0)
