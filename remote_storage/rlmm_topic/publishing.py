"""A store RLMM record as a ``__remote_log_metadata`` record, and where a partition of the topic stands: pure.

The broker's publisher (``orchestrator/broker/rlmm_publisher.py``) appends, to each partition of the topic it
leads, the store's RLMM records that Kafka's partitioner puts there, in store order. This module says what each
appended record is, so that a partition's log is a function of the store alone:

* the key is null and the value is :func:`~remote_storage.rlmm_topic.serde.encode_value` of the stored record at
  the topic's record version, as Kafka's ``TopicBasedRemoteLogMetadataManager`` writes them;
* the timestamp (CreateTime) is when the store took the record in (``appended_at_ms``), else the record's own
  ``EventTimestampMs``;
* one header, :data:`STORE_OFFSET_HEADER`, holds the record's offset in the store's RLMM log (ASCII decimal). Kafka's
  readers ignore headers they do not know; the publisher reads it back to resume after the last record its log
  holds (:func:`last_published_in`), which is why nothing is published twice or skipped.

Invariants:
* :func:`metadata_partition_of` is Kafka's ``RemoteLogMetadataTopicPartitioner`` applied to the record's topic id and
  partition, so every record of one topic-partition lands in one partition of the topic, in store order.
* :func:`publish_batch` of the same entries gives the same bytes (offsets aside, which the log assigns): two brokers
  that build one partition from the store build the same records at the same offsets.
* :func:`last_published_in` raises nothing on records that carry no header of ours (a topic a client wrote to before
  it was internal): they are passed over.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from orchestrator.ids import Uuid
from orchestrator.metadata.records import MetadataRecord
from orchestrator.metadata.store import LogEntry, rlmm_topic_id
from orchestrator.protocol.batch_records import Header
from orchestrator.protocol.record_batch import RecordInput, build_batch, decode_batches, encode_batch
from remote_storage.rlmm_topic.partitioner import metadata_partition
from remote_storage.rlmm_topic.serde import KEY, encode_value

STORE_OFFSET_HEADER = "tieredctl.rlmm.offset"
"""The header naming, in ASCII decimal, the offset in the store's RLMM log of the record that carries it."""


def topic_partition_of(record: MetadataRecord) -> tuple[Uuid, int]:
    """The topic id and partition an RLMM record is about."""
    f = record.fields
    tip = f["topic_id_partition"] if "topic_id_partition" in f else f["remote_log_segment_id"]["topic_id_partition"]
    return rlmm_topic_id(record), int(tip["partition"])


def metadata_partition_of(record: MetadataRecord, *, partitions: int) -> int:
    """The partition of ``__remote_log_metadata`` (of ``partitions``) Kafka's partitioner picks for ``record``."""
    topic_id, partition = topic_partition_of(record)
    return metadata_partition(topic_id, partition, partitions=partitions)


def store_offset_header(store_offset: int) -> Header:
    return (STORE_OFFSET_HEADER, str(store_offset).encode("ascii"))


def store_offset_of(headers: Iterable[Header]) -> int | None:
    """The store offset a record's headers name, or None when they name none (or not as a number)."""
    for name, value in headers:
        if name == STORE_OFFSET_HEADER and value is not None and value.isdigit():
            return int(value)
    return None


def published_record(entry: LogEntry, *, version: int) -> RecordInput:
    """The ``(key, value, timestamp, headers)`` a store entry is published as (see the module docstring)."""
    record = entry.record
    timestamp = entry.appended_at_ms if entry.appended_at_ms is not None else int(record.fields["event_timestamp_ms"])
    return KEY, encode_value(record, version=version), timestamp, (store_offset_header(entry.offset),)


def publish_batch(entries: Sequence[LogEntry], *, version: int) -> bytes:
    """One uncompressed record batch of ``entries``, in order, as the publisher appends it (base offset 0: the log
    assigns offsets)."""
    return encode_batch(build_batch(0, [published_record(e, version=version) for e in entries]))


def last_published_in(batches: bytes | bytearray | memoryview) -> tuple[int, bytes] | None:
    """The store offset and value of the last record of ``batches`` (a log's record batches, in order) that names a
    store offset; None when no record does."""
    found = None
    for batch in decode_batches(batches):
        for record in batch.records:
            offset = store_offset_of(record.headers)
            if offset is not None and record.value is not None:
                found = offset, bytes(record.value)
    return found
