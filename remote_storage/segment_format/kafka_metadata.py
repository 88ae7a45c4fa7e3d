"""Kafka's ``RemoteLogSegmentMetadata`` as Aiven writes it into the manifest's ``remoteLogSegmentMetadata``.

Owner: the JSON form is Aiven's, defined by ``core/src/main/java/io/aiven/kafka/tieredstorage/manifest/serde/
KafkaTypeSerdeModule.java`` (commit in :mod:`remote_storage.segment_format`); the fields are Kafka's
(``org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata``). Aiven writes only these members, in
this order, and never reads them back (its reader ignores the member)::

    {"remoteLogSegmentId": {"topicIdPartition": {"topicId": "<22 chars>",
                                                 "topicPartition": {"topic": "<name>", "partition": <int>}},
                            "id": "<22 chars>"},
     "startOffset": <long>, "endOffset": <long>, "maxTimestampMs": <long>, "brokerId": <int>,
     "eventTimestampMs": <long>, "segmentLeaderEpochs": {"<epoch>": <start offset>, ...}}

Ids are KIP-516 strings (:class:`~orchestrator.ids.Uuid`); ``segmentLeaderEpochs`` maps each leader epoch of the
segment to the first offset written in it, ordered by epoch (Kafka keeps it in a sorted map), the epoch as a JSON
member name. Kafka's state, custom metadata and segment size are not written.

Invariants: the topic name is a legal Kafka name (so no character of it needs a JSON escape); there is at least
one leader epoch (Kafka refuses a segment without); epochs are unique and in ascending order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import InvalidArgument, InvalidRequest, InvalidTopic
from orchestrator.ids import Uuid, validate_topic_name
from remote_storage.keys import SegmentKey
from remote_storage.segment_format.errors import SegmentFormatError
from remote_storage.segment_format.json_text import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    require_int,
    require_object,
    require_str,
)

INT32_MIN = -(2**31)
_EPOCH = re.compile(r"-?[0-9]+")


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """The fields of Kafka's RemoteLogSegmentMetadata that Aiven's manifest carries."""

    topic_id: Uuid
    topic: str
    partition: int
    segment_id: Uuid
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_leader_epochs: tuple[tuple[int, int], ...]  # (leader epoch, its first offset), by epoch

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        epochs = tuple(sorted(self.segment_leader_epochs))
        if not epochs:
            raise InvalidArgument("a remote segment has at least one leader epoch")
        if len({epoch for epoch, _ in epochs}) != len(epochs):
            raise InvalidArgument(f"leader epochs are unique, got {epochs}")
        for value, lo, hi, what in (
            (self.partition, 0, INT32_MAX, "partition"),
            (self.broker_id, INT32_MIN, INT32_MAX, "brokerId"),
            (self.start_offset, INT64_MIN, INT64_MAX, "startOffset"),
            (self.end_offset, INT64_MIN, INT64_MAX, "endOffset"),
            (self.max_timestamp_ms, INT64_MIN, INT64_MAX, "maxTimestampMs"),
            (self.event_timestamp_ms, INT64_MIN, INT64_MAX, "eventTimestampMs"),
            *((epoch, INT32_MIN, INT32_MAX, "a leader epoch") for epoch, _ in epochs),
            *((offset, INT64_MIN, INT64_MAX, "a leader epoch's offset") for _, offset in epochs),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                raise InvalidArgument(f"{what} must be an integer in [{lo}, {hi}], got {value!r}")
        object.__setattr__(self, "segment_leader_epochs", epochs)

    @property
    def segment_key(self) -> SegmentKey:
        """The segment's key in the object key layout (:mod:`remote_storage.keys`)."""
        return SegmentKey(self.topic, self.topic_id, self.partition, self.start_offset, self.segment_id)


def remote_log_segment_metadata_to_json(metadata: RemoteLogSegmentMetadata) -> dict[str, Any]:
    """The JSON object Aiven's serde writes, members in its order."""
    return {
        "remoteLogSegmentId": {
            "topicIdPartition": {
                "topicId": str(metadata.topic_id),
                "topicPartition": {"topic": metadata.topic, "partition": metadata.partition},
            },
            "id": str(metadata.segment_id),
        },
        "startOffset": metadata.start_offset,
        "endOffset": metadata.end_offset,
        "maxTimestampMs": metadata.max_timestamp_ms,
        "brokerId": metadata.broker_id,
        "eventTimestampMs": metadata.event_timestamp_ms,
        "segmentLeaderEpochs": {str(epoch): offset for epoch, offset in metadata.segment_leader_epochs},
    }


def remote_log_segment_metadata_from_json(
    obj: Mapping[str, Any], where: str = "remoteLogSegmentMetadata"
) -> RemoteLogSegmentMetadata:
    """Read the object back (Aiven never does; the scan and our tests do)."""
    segment_id_obj = require_object(obj, "remoteLogSegmentId", where)
    tip_where = f"{where}.remoteLogSegmentId.topicIdPartition"
    tip = require_object(segment_id_obj, "topicIdPartition", f"{where}.remoteLogSegmentId")
    tp = require_object(tip, "topicPartition", tip_where)
    epochs_obj = require_object(obj, "segmentLeaderEpochs", where)
    epochs = []
    for epoch_text in epochs_obj:
        if not _EPOCH.fullmatch(epoch_text):
            raise SegmentFormatError(f"{where}.segmentLeaderEpochs has a member {epoch_text!r} that is not an epoch")
        epochs.append((int(epoch_text), require_int(epochs_obj, epoch_text, where, lo=INT64_MIN, hi=INT64_MAX)))
    try:
        return RemoteLogSegmentMetadata(
            topic_id=Uuid.from_string(require_str(tip, "topicId", tip_where)),
            topic=require_str(tp, "topic", f"{tip_where}.topicPartition"),
            partition=require_int(tp, "partition", f"{tip_where}.topicPartition", lo=0, hi=INT32_MAX),
            segment_id=Uuid.from_string(require_str(segment_id_obj, "id", f"{where}.remoteLogSegmentId")),
            start_offset=require_int(obj, "startOffset", where, lo=INT64_MIN, hi=INT64_MAX),
            end_offset=require_int(obj, "endOffset", where, lo=INT64_MIN, hi=INT64_MAX),
            max_timestamp_ms=require_int(obj, "maxTimestampMs", where, lo=INT64_MIN, hi=INT64_MAX),
            broker_id=require_int(obj, "brokerId", where, lo=INT32_MIN, hi=INT32_MAX),
            event_timestamp_ms=require_int(obj, "eventTimestampMs", where, lo=INT64_MIN, hi=INT64_MAX),
            segment_leader_epochs=tuple(epochs),
        )
    except (InvalidArgument, InvalidRequest, InvalidTopic) as exc:
        raise SegmentFormatError(f"{where}: {exc.message}") from exc
