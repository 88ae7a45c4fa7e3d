"""RLMM records as a broker writing Aiven's format leaves them: a copy finished with custom metadata.

The records are written through the store's own API (``append_remote_log_metadata``), exactly as Kafka's schema
carries them: the nullable ``CustomMetadata`` bytes of the COPY_SEGMENT_FINISHED RemoteLogSegmentMetadataUpdateRecord
(Aiven's tagged fields, :mod:`remote_storage.segment_format.custom_metadata`), so that the scan's export is tested
against the contract, not against any one writer's helper.
"""

from __future__ import annotations

from orchestrator.metadata.records import SegmentState, make_record
from orchestrator.metadata.store import MetadataStore
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment


def finish_copy(
    store: MetadataStore, seg: RemoteSegment, *, custom_metadata: bytes | None, now_ms: int, broker_id: int = 1
) -> None:
    """COPY_SEGMENT_STARTED then COPY_SEGMENT_FINISHED for ``seg``, the latter carrying ``custom_metadata``."""
    RemoteLogMetadataManager(store).copy_started(seg, now_ms=now_ms)
    finished = make_record(
        "RemoteLogSegmentMetadataUpdateRecord",
        remote_log_segment_id={
            "topic_id_partition": {"name": seg.topic, "id": seg.topic_id, "partition": seg.partition},
            "id": seg.segment_id,
        },
        broker_id=broker_id,
        event_timestamp_ms=now_ms,
        remote_log_segment_state=int(SegmentState.COPY_SEGMENT_FINISHED),
        tiered_epoch=seg.tiered_epoch,
        custom_metadata=custom_metadata,
    )
    store.append_remote_log_metadata([finished], now_ms=now_ms)
