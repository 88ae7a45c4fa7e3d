"""What a store RLMM record is published as in ``__remote_log_metadata``, and how a partition's log tells where it
stands (remote_storage.rlmm_topic.publishing): pure functions over real records and real record batches."""

from __future__ import annotations

import random

import pytest

from orchestrator.ids import Uuid
from orchestrator.metadata.records import MetadataRecord, PartitionDeleteState, SegmentState, make_record
from orchestrator.metadata.store import LogEntry
from orchestrator.protocol.record_batch import build_batch, decode_batches, encode_batch
from remote_storage.rlmm_topic.partitioner import metadata_partition
from remote_storage.rlmm_topic.publishing import (
    STORE_OFFSET_HEADER,
    last_published_in,
    metadata_partition_of,
    publish_batch,
    published_record,
    store_offset_of,
    topic_partition_of,
)
from remote_storage.rlmm_topic.serde import decode_value, encode_value

pytestmark = pytest.mark.unit

TOPIC_ID = Uuid.from_string("xX9kP3q1T0uC5cZx2o8y1w")


def tip(partition: int) -> dict[str, object]:
    return {"name": "orders", "id": TOPIC_ID, "partition": partition}


def copy_started(partition: int, segment: Uuid, *, event_ms: int = 1_700_000_000_000) -> MetadataRecord:
    return make_record(
        "RemoteLogSegmentMetadataRecord",
        remote_log_segment_id={"topic_id_partition": tip(partition), "id": segment},
        start_offset=0,
        end_offset=99,
        broker_id=1,
        max_timestamp_ms=event_ms,
        event_timestamp_ms=event_ms,
        segment_leader_epochs=[{"leader_epoch": 0, "offset": 0}],
        segment_size_in_bytes=4096,
        remote_log_segment_state=int(SegmentState.COPY_SEGMENT_STARTED),
        tiered_epoch=3,
    )


def copy_finished(partition: int, segment: Uuid) -> MetadataRecord:
    return make_record(
        "RemoteLogSegmentMetadataUpdateRecord",
        remote_log_segment_id={"topic_id_partition": tip(partition), "id": segment},
        broker_id=1,
        event_timestamp_ms=1_700_000_000_100,
        remote_log_segment_state=int(SegmentState.COPY_SEGMENT_FINISHED),
        tiered_epoch=3,
    )


def partition_deleted(partition: int) -> MetadataRecord:
    return make_record(
        "RemotePartitionDeleteMetadataRecord",
        topic_id_partition=tip(partition),
        broker_id=1,
        event_timestamp_ms=1_700_000_000_200,
        remote_partition_delete_state=int(PartitionDeleteState.DELETE_PARTITION_FINISHED),
    )


def test_every_record_kind_goes_to_the_partition_kafkas_partitioner_picks_for_its_topic_partition() -> None:
    segment = Uuid.random(random.Random(1).randbytes)
    for partition in range(12):
        expected = metadata_partition(TOPIC_ID, partition, partitions=50)
        for record in (
            copy_started(partition, segment),
            copy_finished(partition, segment),
            partition_deleted(partition),
        ):
            assert topic_partition_of(record) == (TOPIC_ID, partition)
            assert metadata_partition_of(record, partitions=50) == expected
    assert len({metadata_partition_of(partition_deleted(p), partitions=50) for p in range(12)}) > 1


def test_a_published_record_has_a_null_key_kafkas_value_and_its_store_offset_in_a_header() -> None:
    record = copy_finished(3, Uuid.random(random.Random(2).randbytes))
    key, value, timestamp, headers = published_record(LogEntry(41, record, appended_at_ms=1_700_000_009_000), version=0)
    assert key is None and value == encode_value(record, version=0)
    assert decode_value(value).fields == record.fields
    assert timestamp == 1_700_000_009_000  # when the store took it in
    assert headers == ((STORE_OFFSET_HEADER, b"41"),) and store_offset_of(headers) == 41
    _, _, untimed, _ = published_record(LogEntry(41, record), version=0)
    assert untimed == 1_700_000_000_100  # no append time known: the record's own event time


def test_a_record_is_published_at_the_topics_record_version() -> None:
    record = partition_deleted(1)
    _, value, _, _ = published_record(LogEntry(0, record), version=1)
    assert value[:3] == bytes([1, 2, 1]) and decode_value(value).version == 1  # frame 1, apiKey 2, version 1


def test_the_same_entries_give_the_same_batch_bytes_whoever_builds_them() -> None:
    rng = random.Random(3)
    entries = [LogEntry(i, copy_started(i % 4, Uuid.random(rng.randbytes)), appended_at_ms=1000 + i) for i in range(9)]
    assert publish_batch(entries, version=0) == publish_batch(list(entries), version=0)
    [batch] = list(decode_batches(publish_batch(entries, version=0)))
    assert [store_offset_of(r.headers) for r in batch.records] == list(range(9))
    assert [r.key for r in batch.records] == [None] * 9
    assert [decode_value(r.value or b"").fields for r in batch.records] == [e.record.fields for e in entries]


def test_where_a_log_stands_is_the_last_store_offset_it_holds_and_foreign_records_are_passed_over() -> None:
    rng = random.Random(4)
    entries = [LogEntry(i, copy_started(0, Uuid.random(rng.randbytes))) for i in (5, 6, 9)]
    ours = publish_batch(entries, version=0)
    foreign = encode_batch(build_batch(0, [(None, b"written by a client", 1, ()), (b"k", None, 2, (("x", b"7"),))]))
    last = (9, encode_value(entries[-1].record, version=0))
    assert last_published_in(ours) == last
    assert last_published_in(ours + foreign) == last
    assert last_published_in(foreign) is None and last_published_in(b"") is None
    assert store_offset_of([(STORE_OFFSET_HEADER, b"not a number"), (STORE_OFFSET_HEADER, None)]) is None
