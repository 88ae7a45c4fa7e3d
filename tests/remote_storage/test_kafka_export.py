"""The export written from a Kafka cluster's answers (:mod:`remote_storage.kafka_export`), without a cluster: the
refusal of a metadata topic that may have lost records, the refusal of topics in another layout, the tiered state
read from configs, and records of Kafka's versions 0 and 1 (with and without our TieredEpoch tag) folded per
topic-partition into the export's files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, MetadataRecord, SegmentState, TieredState, make_record
from policies.orphans import Metadata, segment_anomalies
from remote_storage.export import load_export, read_export_source
from remote_storage.export_format import SOURCE_FILE, ExportSource, SegmentMeta, TopicMeta
from remote_storage.kafka_export import (
    KafkaTopic,
    MetadataRecordAt,
    MetadataTopicNotKept,
    MetadataTopicState,
    UnreadableMetadataRecord,
    UnsupportedSegmentFormat,
    check_metadata_topic_kept,
    check_segment_formats,
    decoded_record,
    export_kafka,
    tiered_status,
)
from remote_storage.rlmm import RemoteSegment, copy_started_record, update_record
from remote_storage.rlmm_topic.serde import encode_value
from remote_storage.scan import contract as c

pytestmark = pytest.mark.unit

KEPT = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
ORDERS = Uuid.from_string("lZ6vvmajTWKDBUTV6SQAtQ")
GONE = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ")
SOURCE = ExportSource("kafka", "broker:9092", "__remote_log_metadata", 0)


def _topic_state(configs: dict[str, str] = KEPT, starts: dict[int, int] | None = None) -> MetadataTopicState:
    return MetadataTopicState("__remote_log_metadata", configs, starts or {0: 0, 1: 0}, {0: 4, 1: 2})


def test_a_metadata_topic_that_keeps_every_record_passes() -> None:
    check_metadata_topic_kept(_topic_state())


@pytest.mark.parametrize(
    ("configs", "starts", "said"),
    [
        ({**KEPT, "retention.ms": "604800000"}, None, "retention.ms is 604800000"),
        ({**KEPT, "retention.bytes": "1073741824"}, None, "retention.bytes is 1073741824"),
        ({"retention.bytes": "-1"}, None, "retention.ms is not described"),
        (KEPT, {0: 0, 1: 17}, "partition(s) 1 starts at 17"),
    ],
)
def test_a_metadata_topic_that_may_have_lost_records_is_refused_naming_it_its_retention_and_what_to_do(
    configs: dict[str, str], starts: dict[int, int] | None, said: str
) -> None:
    with pytest.raises(MetadataTopicNotKept) as refused:
        check_metadata_topic_kept(_topic_state(configs, starts))
    message = str(refused.value)
    assert message.startswith("RLMM_TOPIC_NOT_KEPT: the remote log metadata topic __remote_log_metadata ")
    assert said in message
    assert "Set retention.ms=-1 and retention.bytes=-1 on __remote_log_metadata" in message
    assert "or scan with --source store" in message


def test_topics_in_another_layout_than_log_segments_are_refused_by_name() -> None:
    topics = [
        KafkaTopic("orders", ORDERS, {"segment.format": "log"}),
        KafkaTopic("lake", GONE, {"segment.format": "iceberg"}),
        KafkaTopic("plain", Uuid.random(), {}),
    ]
    with pytest.raises(UnsupportedSegmentFormat, match=r"topic\(s\) lake \(segment.format=iceberg\) keep"):
        check_segment_formats(topics)
    check_segment_formats([topics[0], topics[2]])


@pytest.mark.parametrize(
    ("configs", "status"),
    [
        ({"remote.storage.enable": "true"}, (TieredState.ENABLED, DisablePolicy.NONE)),
        (
            {"remote.storage.enable": "true", "remote.log.copy.disable": "true"},
            (TieredState.DISABLED, DisablePolicy.RETAIN),
        ),
        (
            {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"},
            (TieredState.DISABLED, DisablePolicy.DELETE),
        ),
        (
            {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"},
            (TieredState.DISABLED, DisablePolicy.DELETE),
        ),
        (
            {"remote.storage.enable": "false", "remote.log.disable.policy": "retain"},
            (TieredState.DISABLED, DisablePolicy.RETAIN),
        ),
        ({"remote.storage.enable": "false"}, (TieredState.NOT_TIERED, DisablePolicy.NONE)),
        ({}, (TieredState.NOT_TIERED, DisablePolicy.NONE)),
    ],
)
def test_a_topic_s_tiered_state_is_read_from_its_kafka_configs(
    configs: dict[str, str], status: tuple[TieredState, DisablePolicy]
) -> None:
    assert tiered_status(configs) == status


@pytest.mark.parametrize("value", [None, b"\x00\x07\x00", b"\x00"])
def test_a_value_that_is_not_a_record_stops_the_read_naming_where_it_is(value: bytes | None) -> None:
    with pytest.raises(UnreadableMetadataRecord, match="__remote_log_metadata-3 offset 41 "):
        decoded_record(3, 41, value, topic="__remote_log_metadata")


def _segment(topic: str, topic_id: Uuid, start: int, *, epoch: int = -1) -> RemoteSegment:
    return RemoteSegment(topic, topic_id, 0, Uuid.random(), start, start + 9, 1_000, 500, epoch)


def _at(partition: int, offset: int, record: MetadataRecord, version: int) -> MetadataRecordAt:
    """As a reader of the topic gets it: the record written at ``version``, decoded from its bytes."""
    return decoded_record(partition, offset, encode_value(record, version=version), topic="__remote_log_metadata")


def _copied(seg: RemoteSegment, partition: int, first: int, version: int) -> list[MetadataRecordAt]:
    finished = update_record(seg, SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=2)
    return [
        _at(partition, first, copy_started_record(seg, now_ms=1), version),
        _at(partition, first + 1, finished, version),
    ]


def test_records_of_versions_0_and_1_fold_per_topic_partition_into_the_export_with_deleted_topics_and_no_history(
    tmp_path: Path,
) -> None:
    first, second = _segment("orders", ORDERS, 0), _segment("orders", ORDERS, 10, epoch=3)
    old = _segment("gone", GONE, 0)
    deleting = update_record(old, SegmentState.DELETE_SEGMENT_STARTED, broker_id=1, now_ms=3)
    partition_marked = make_record(
        "RemotePartitionDeleteMetadataRecord",
        topic_id_partition={"name": "gone", "id": GONE, "partition": 0},
        broker_id=1,
        event_timestamp_ms=3,
        remote_partition_delete_state=0,
    )
    records = [
        *_copied(second, 0, 2, 1),
        *_copied(first, 0, 0, 0),
        *_copied(old, 1, 0, 0),
        _at(1, 2, deleting, 1),
        _at(1, 3, partition_marked, 0),
    ]
    records.reverse()  # as they may come, partitions interleaved: each partition is folded in offset order
    topics = [KafkaTopic("orders", ORDERS, {"remote.storage.enable": "true", "retention.ms": "-1"})]
    result = export_kafka(tmp_path, topics=topics, metadata_topic=_topic_state(), records=records, source=SOURCE)

    assert (result.topics, result.deleted_topics, result.segments) == (2, 1, 3)
    exported, segments, epochs = load_export(tmp_path)
    by_name = {t.name: t for t in exported}
    assert by_name["orders"].state == "ENABLED" and not by_name["orders"].deleted
    assert by_name["orders"].retention_ms == -1
    assert by_name["gone"].deleted and by_name["gone"].topic_id == str(GONE)
    states = {s.segment_id: (s.state, s.tiered_epoch) for s in segments}
    assert states == {
        str(first.segment_id): ("COPY_SEGMENT_FINISHED", -1),
        str(second.segment_id): ("COPY_SEGMENT_FINISHED", 3),
        str(old.segment_id): ("DELETE_SEGMENT_STARTED", -1),
    }
    assert epochs == []
    assert read_export_source(tmp_path) == SOURCE
    assert json.loads((tmp_path / SOURCE_FILE).read_text())["source"] == "kafka"


def test_a_refused_metadata_topic_writes_no_export(tmp_path: Path) -> None:
    refused = _topic_state({**KEPT, "retention.ms": "86400000"})
    with pytest.raises(MetadataTopicNotKept):
        export_kafka(tmp_path / "export", topics=[], metadata_topic=refused, records=[], source=SOURCE)
    assert not (tmp_path / "export").exists()


def test_an_export_without_source_json_is_a_store_s() -> None:
    assert read_export_source(Path("/nonexistent")) == ExportSource()


def test_a_topic_without_tiered_state_history_gets_no_stale_epoch_verdict() -> None:
    topic = TopicMeta(str(ORDERS), "orders", "ENABLED", 0, "NONE", -1, -1, False)
    seg = SegmentMeta(str(ORDERS), "orders", 0, str(Uuid.random()), 0, 9, 10, 5, "COPY_SEGMENT_FINISHED", 0, 0)
    without = Metadata.build([topic], [seg], [], now_ms=0)
    with_history = Metadata.build([topic], [seg], [(str(ORDERS), 1, "ENABLED")], now_ms=0)
    assert c.STALE_EPOCH_COPY not in {a.type for a in segment_anomalies(without, {})}
    assert c.STALE_EPOCH_COPY in {a.type for a in segment_anomalies(with_history, {})}
