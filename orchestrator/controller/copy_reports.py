"""What each broker last said of its copies to remote storage: the uploads in flight and the copy passes that
failed, by partition, as its heartbeats carry them (``CopyStates``), for ``tiering status`` (DescribeTieredState's
``Copies``).

In memory only, like broker liveness: a new controller knows them again from the next heartbeat of each broker
(half a second by default). Invariants:
* A broker's report replaces its previous one whole: a partition it no longer mentions is keeping up again.
* A partition's copy is shown from its current leader's report only, and only while that broker is registered and
  not fenced: a fenced or former leader's last word is stale, not the partition's state.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.protocol import messages as m


class CopyReports:
    def __init__(self) -> None:
        self._by_broker: dict[int, dict[tuple[Uuid, int], m.PartitionCopyState]] = {}

    def update(self, broker_id: int, states: Sequence[m.PartitionCopyState]) -> None:
        """A heartbeat's report, replacing the broker's previous one."""
        self._by_broker[broker_id] = {(s["topic_id"], s["partition"]): s for s in states}

    def forget(self, broker_id: int) -> None:
        self._by_broker.pop(broker_id, None)

    def for_topic(self, topic: TopicImage, image: MetadataImage) -> list[m.PartitionCopy]:
        """The topic's partitions whose copy is in flight or failing, as their current (unfenced) leaders report."""
        out: list[m.PartitionCopy] = []
        for partition_id, p in sorted(topic.partitions.items()):
            broker = image.brokers.get(p.leader)
            if broker is None or broker.fenced:
                continue
            state = self._by_broker.get(p.leader, {}).get((topic.topic_id, partition_id))
            if state is None:
                continue
            out.append(
                m.PartitionCopy(
                    partition_id=partition_id,
                    broker_id=p.leader,
                    in_flight_since_ms=state["in_flight_since_ms"],
                    in_flight=state["in_flight"],
                    stalled=state["stalled"],
                    last_error=state["last_error"],
                    last_error_ms=state["last_error_ms"],
                    failed_passes=state["failed_passes"],
                )
            )
        return out
