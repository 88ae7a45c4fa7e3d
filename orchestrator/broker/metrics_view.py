"""What a broker's metrics show (:mod:`orchestrator.metrics`), computed from its state: a pure function.

Invariants:
* No I/O: the caller passes its image, the RemoteLogManager's copy lag and the log end offset it read.
* Copy lag is shown only for partitions the image says this broker leads, of topics whose tiering is ENABLED and
  that still exist, labelled with the topic's current name; anything else the lag map still holds is left out.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.broker.remote_log_manager import PartitionCopyLag, PartitionKey
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.records import TieredState
from orchestrator.metrics import BrokerView, CopyLag, MetadataView


def broker_view(
    image: MetadataImage,
    *,
    broker_id: int,
    copy_lag: Mapping[PartitionKey, PartitionCopyLag],
    log_end_offset: int | None,
) -> BrokerView:
    lags = []
    for (topic_id, partition), lag in copy_lag.items():
        topic = image.topics.get(topic_id)
        p = topic.partitions.get(partition) if topic is not None else None
        if topic is None or p is None or p.leader != broker_id or topic.tiered_state != TieredState.ENABLED:
            continue
        lags.append(CopyLag(topic.name, partition, lag.segments, lag.bytes))
    metadata = MetadataView(image_offset=image.offset, log_end_offset=log_end_offset)
    under = sum(
        1
        for topic in image.topics.values()
        for p in topic.partitions.values()
        if p.leader == broker_id and len(p.isr) < len(p.replicas)
    )
    return BrokerView(metadata=metadata, copy_lag=tuple(lags), under_replicated=under)
