"""Builders for the metadata and RLMM records the store tests write (real records, encoded by the real codec)."""

from __future__ import annotations

from orchestrator.ids import Uuid
from orchestrator.metadata.records import (
    DisablePolicy,
    MetadataRecord,
    PartitionDeleteState,
    SegmentState,
    TieredState,
    make_record,
)


def topic(name: str, topic_id: Uuid) -> MetadataRecord:
    return make_record("TopicRecord", name=name, topic_id=topic_id)


def tiered(
    topic_id: Uuid, epoch: int, state: TieredState, policy: DisablePolicy = DisablePolicy.NONE
) -> MetadataRecord:
    return make_record(
        "TieredStateRecord", topic_id=topic_id, tiered_epoch=epoch, tiered_state=int(state), policy=int(policy)
    )


def remove_topic(topic_id: Uuid) -> MetadataRecord:
    return make_record("RemoveTopicRecord", topic_id=topic_id)


def _segment_id(topic_id: Uuid, segment_id: Uuid, partition: int = 0, name: str = "orders") -> dict[str, object]:
    return {"topic_id_partition": {"name": name, "id": topic_id, "partition": partition}, "id": segment_id}


def copy_started(
    topic_id: Uuid, tiered_epoch: int | None, *, segment_id: Uuid | None = None, start_offset: int = 0
) -> MetadataRecord:
    fields: dict[str, object] = {
        "remote_log_segment_id": _segment_id(topic_id, segment_id or Uuid.random()),
        "start_offset": start_offset,
        "end_offset": start_offset + 99,
        "broker_id": 1,
        "max_timestamp_ms": 1_700_000_000_000,
        "event_timestamp_ms": 1_700_000_000_000,
        "segment_leader_epochs": [{"leader_epoch": 0, "offset": start_offset}],
        "segment_size_in_bytes": 4096,
        "custom_metadata": None,
        "remote_log_segment_state": int(SegmentState.COPY_SEGMENT_STARTED),
        "txn_index_empty": True,
    }
    if tiered_epoch is not None:
        fields["tiered_epoch"] = tiered_epoch
    return make_record("RemoteLogSegmentMetadataRecord", **fields)


def segment_update(topic_id: Uuid, segment_id: Uuid, state: SegmentState, tiered_epoch: int) -> MetadataRecord:
    return make_record(
        "RemoteLogSegmentMetadataUpdateRecord",
        remote_log_segment_id=_segment_id(topic_id, segment_id),
        broker_id=1,
        event_timestamp_ms=1_700_000_000_000,
        custom_metadata=None,
        remote_log_segment_state=int(state),
        tiered_epoch=tiered_epoch,
    )


def partition_delete(topic_id: Uuid, state: PartitionDeleteState, tiered_epoch: int = -1) -> MetadataRecord:
    return make_record(
        "RemotePartitionDeleteMetadataRecord",
        topic_id_partition={"name": "orders", "id": topic_id, "partition": 0},
        broker_id=1,
        event_timestamp_ms=1_700_000_000_000,
        remote_partition_delete_state=int(state),
        tiered_epoch=tiered_epoch,
    )
