"""A decoded ``__remote_log_metadata`` record, printed as Kafka's console consumer prints it, and as JSON.

Text (:func:`format_text`) is what ``kafka-console-consumer --formatter
org.apache.kafka.server.log.remote.metadata.storage.serialization.RemoteLogMetadataSerde$RemoteLogMetadataFormatter``
prints: ``partition: P, offset: O, value: V``, where V is the ``toString()`` of the object Kafka's serde decodes
(``RemoteLogSegmentMetadata{...}``, ``RemoteLogSegmentMetadataUpdate{...}``, ``RemotePartitionDeleteMetadata{...}``)
as Kafka 4 writes it: Java's renderings of a topic id (URL-safe base64), ``Optional`` custom metadata
(``Optional[CustomMetadata{N bytes}]`` or ``Optional.empty``), the leader epochs as a sorted map (``{4=100, 5=150}``,
the last offset of a repeated epoch winning, as Kafka's ``HashMap`` does) and ``true``/``false``. Kafka prints only
its objects' fields, so BrokerLeaderEpoch, EndOffset (version 1) and our tiered epoch appear in the JSON form only.
Where Kafka's formatter would throw (a state id it does not know) we print the number, so a dump never stops.

JSON (:func:`to_json`) has the same keys for every record of a type, whatever its version: fields a version lacks
are null; ids are their string form; custom metadata is base64 (or null); states are their names (or the number
when unknown); ``tiered_epoch`` is null when unset (-1).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from orchestrator.metadata.records import MetadataRecord, PartitionDeleteState, SegmentState, record_schema_by_name

SEGMENT = "RemoteLogSegmentMetadataRecord"
SEGMENT_UPDATE = "RemoteLogSegmentMetadataUpdateRecord"
PARTITION_DELETE = "RemotePartitionDeleteMetadataRecord"


def format_text(record: MetadataRecord, *, partition: int, offset: int) -> str:
    """One line (no newline) as Kafka's ``RemoteLogMetadataFormatter`` prints the record."""
    return f"partition: {partition}, offset: {offset}, value: {kafka_to_string(record)}"


def kafka_to_string(record: MetadataRecord) -> str:
    """The ``toString()`` of the object Kafka's ``RemoteLogMetadataSerde`` decodes ``record`` into."""
    f = record.fields
    if record.name == SEGMENT:
        return (
            "RemoteLogSegmentMetadata{"
            f"remoteLogSegmentId={_segment_id(f['remote_log_segment_id'])}"
            f", startOffset={f['start_offset']}"
            f", endOffset={f['end_offset']}"
            f", brokerId={f['broker_id']}"
            f", maxTimestampMs={f['max_timestamp_ms']}"
            f", eventTimestampMs={f['event_timestamp_ms']}"
            f", segmentLeaderEpochs={_epoch_map(f['segment_leader_epochs'])}"
            f", segmentSizeInBytes={f['segment_size_in_bytes']}"
            f", customMetadata={_optional_custom(f['custom_metadata'])}"
            f", state={_state_name(SegmentState, f['remote_log_segment_state'])}"
            f", txnIdxEmpty={_java_bool(f['txn_index_empty'])}"
            "}"
        )
    if record.name == SEGMENT_UPDATE:
        return (
            "RemoteLogSegmentMetadataUpdate{"
            f"remoteLogSegmentId={_segment_id(f['remote_log_segment_id'])}"
            f", customMetadata={_optional_custom(f['custom_metadata'])}"
            f", state={_state_name(SegmentState, f['remote_log_segment_state'])}"
            f", eventTimestampMs={f['event_timestamp_ms']}"
            f", brokerId={f['broker_id']}"
            "}"
        )
    if record.name == PARTITION_DELETE:
        return (
            "RemotePartitionDeleteMetadata{"
            f"topicPartition={_topic_id_partition(f['topic_id_partition'])}"
            f", state={_state_name(PartitionDeleteState, f['remote_partition_delete_state'])}"
            f", eventTimestampMs={f['event_timestamp_ms']}"
            f", brokerId={f['broker_id']}"
            "}"
        )
    raise ValueError(f"{record.name} is not a remote log metadata record")


def to_json(record: MetadataRecord, *, partition: int, offset: int) -> dict[str, Any]:
    """The record as a JSON object with stable keys (see the module docstring)."""
    f = record.fields
    out: dict[str, Any] = {
        "partition": partition,
        "offset": offset,
        "type": record.name,
        "api_key": record_schema_by_name(record.name).api_key,
        "version": record.version,
    }
    if record.name in (SEGMENT, SEGMENT_UPDATE):
        out.update(_segment_id_json(f["remote_log_segment_id"]))
    elif record.name == PARTITION_DELETE:
        out.update(_topic_id_partition_json(f["topic_id_partition"]))
    else:
        raise ValueError(f"{record.name} is not a remote log metadata record")
    out["broker_id"] = f["broker_id"]
    out["event_timestamp_ms"] = f["event_timestamp_ms"]
    if record.name == SEGMENT:
        out["start_offset"] = f["start_offset"]
        out["end_offset"] = f["end_offset"]
        out["max_timestamp_ms"] = f["max_timestamp_ms"]
        out["segment_leader_epochs"] = [
            {"leader_epoch": e["leader_epoch"], "offset": e["offset"]} for e in f["segment_leader_epochs"]
        ]
        out["segment_size_in_bytes"] = f["segment_size_in_bytes"]
    if record.name in (SEGMENT, SEGMENT_UPDATE):
        out["custom_metadata"] = _base64(f["custom_metadata"])
        out["state"] = _state_name(SegmentState, f["remote_log_segment_state"])
    else:
        out["state"] = _state_name(PartitionDeleteState, f["remote_partition_delete_state"])
    if record.name == SEGMENT:
        out["txn_index_empty"] = f["txn_index_empty"]
    else:
        out["end_offset"] = _since_version_1(record, f["end_offset"])
    out["broker_leader_epoch"] = _since_version_1(record, f["broker_leader_epoch"])
    out["tiered_epoch"] = None if f["tiered_epoch"] == -1 else f["tiered_epoch"]
    return out


# --- Java's renderings


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _topic_id_partition(tip: Mapping[str, Any]) -> str:
    """``org.apache.kafka.common.TopicIdPartition.toString()``: ``topicId:topic-partition``."""
    return f"{tip['id']}:{tip['name']}-{tip['partition']}"


def _segment_id(sid: Mapping[str, Any]) -> str:
    return f"RemoteLogSegmentId{{topicIdPartition={_topic_id_partition(sid['topic_id_partition'])}, id={sid['id']}}}"


def _epoch_map(entries: list[Mapping[str, Any]]) -> str:
    """A ``TreeMap<Integer, Long>`` built by putting each entry in order, then printed."""
    epochs = {e["leader_epoch"]: e["offset"] for e in entries}
    return "{" + ", ".join(f"{k}={epochs[k]}" for k in sorted(epochs)) + "}"


def _optional_custom(value: bytes | None) -> str:
    return "Optional.empty" if value is None else f"Optional[CustomMetadata{{{len(value)} bytes}}]"


def _state_name(states: type[IntEnum], value: int) -> str | int:
    try:
        return states(value).name
    except ValueError:
        return value


# --- JSON


def _base64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def _topic_id_partition_json(tip: Mapping[str, Any]) -> dict[str, Any]:
    return {"topic_id": str(tip["id"]), "topic": tip["name"], "topic_partition": tip["partition"]}


def _segment_id_json(sid: Mapping[str, Any]) -> dict[str, Any]:
    return {**_topic_id_partition_json(sid["topic_id_partition"]), "segment_id": str(sid["id"])}


def _since_version_1(record: MetadataRecord, value: int) -> int | None:
    return value if record.version >= 1 else None
