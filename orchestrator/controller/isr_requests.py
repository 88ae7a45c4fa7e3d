"""AlterPartition (Kafka's key 56, versions 2-3) on the active controller: partition leaders change their ISRs.

Each partition of a request is decided by :func:`.isr_changes.decide` (pure, the rules are there) against the image
caught up with the store; the changes of one request are appended in one batch, and every partition is answered from
the image after it: the ISR, leader, leader epoch and partition epoch the leader goes on from.

Invariants:
* A request from an incarnation that is not the registered one (STALE_BROKER_EPOCH) changes nothing and is answered
  with that error at the top level, as Kafka's controller answers it.
* A partition named twice in one request is refused (INVALID_REQUEST) after its first entry: each decision is made
  against the state that entry saw.
* A write refused because this controller was deposed raises :class:`StaleControllerEpoch` (the dispatcher steps
  down and answers NOT_CONTROLLER, which the broker's link follows to the new active controller).
"""

from __future__ import annotations

import structlog

from orchestrator.errors import InvalidRequest
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.records import MetadataRecord
from orchestrator.protocol import messages as m

from .isr_changes import IsrDecision, IsrMember, IsrRequest, check_sender, decide
from .state import ControllerState

log = structlog.get_logger(__name__)


class IsrRequests:
    def __init__(self, state: ControllerState) -> None:
        self._state = state

    def alter_partition(self, body: m.AlterPartitionRequest, version: int) -> m.AlterPartitionResponse:
        state = self._state
        image = state.refresh()
        broker_id = body["broker_id"]
        stale = check_sender(image, broker_id, body["broker_epoch"])
        if stale is not None:
            log.info("controller.alter_partition_refused", broker_id=broker_id, error=stale.name, detail=stale.message)
            return m.AlterPartitionResponse(throttle_time_ms=0, error_code=stale.code, topics=[])
        decided: list[tuple[Uuid, int, IsrDecision]] = []
        seen: set[tuple[Uuid, int]] = set()
        for topic in body["topics"]:
            for p in topic["partitions"]:
                key = (topic["topic_id"], p["partition_index"])
                if key in seen:
                    repeated = InvalidRequest(f"partition {key[1]} of topic id {key[0]} is named twice")
                    decided.append((*key, IsrDecision(repeated)))
                    continue
                seen.add(key)
                decided.append((*key, decide(image, _request(broker_id, key, p, version))))
        records: list[MetadataRecord] = [d.record for _, _, d in decided if d.record is not None]
        if records:
            state.append(records)  # all of the request's changes in one batch
            image = state.image
        for topic_id, partition_id, d in decided:
            _log(broker_id, topic_id, partition_id, d, image)
        return m.AlterPartitionResponse(throttle_time_ms=0, error_code=0, topics=_answer(decided, image))


def _request(
    broker_id: int, key: tuple[Uuid, int], p: m.AlterPartitionRequestPartitionData, version: int
) -> IsrRequest:
    if version >= 3:
        members = tuple(IsrMember(s["broker_id"], s["broker_epoch"]) for s in p["new_isr_with_epochs"])
    else:
        members = tuple(IsrMember(b) for b in p["new_isr"])
    return IsrRequest(
        broker_id=broker_id,
        topic_id=key[0],
        partition_id=key[1],
        leader_epoch=p["leader_epoch"],
        partition_epoch=p["partition_epoch"],
        new_isr=members,
    )


def _answer(
    decided: list[tuple[Uuid, int, IsrDecision]], image: MetadataImage
) -> list[m.AlterPartitionResponseTopicData]:
    """Entries by topic in the request's order; a partition decided without error answers its state in ``image``."""
    topics: dict[Uuid, list[m.AlterPartitionResponsePartitionData]] = {}
    for topic_id, partition_id, d in decided:
        entry = m.AlterPartitionResponsePartitionData(
            partition_index=partition_id, error_code=0, leader_id=-1, leader_epoch=-1, isr=[], partition_epoch=-1
        )
        topic = image.topics.get(topic_id)
        now = None if topic is None else topic.partitions.get(partition_id)
        if d.error is not None:
            entry["error_code"] = d.error.code
        elif now is not None:
            entry["leader_id"], entry["leader_epoch"] = now.leader, now.leader_epoch
            entry["isr"], entry["partition_epoch"] = list(now.isr), now.partition_epoch
        topics.setdefault(topic_id, []).append(entry)
    return [m.AlterPartitionResponseTopicData(topic_id=t, partitions=ps) for t, ps in topics.items()]


def _log(broker_id: int, topic_id: Uuid, partition_id: int, d: IsrDecision, image: MetadataImage) -> None:
    before = d.partition
    if d.error is not None:
        log.info(
            "controller.isr_change_refused",
            broker_id=broker_id,
            topic_id=str(topic_id),
            partition=partition_id,
            error=d.error.name,
            detail=d.error.message,
        )
    elif d.record is not None and before is not None:
        topic = image.topics.get(topic_id)
        after = None if topic is None else topic.partitions.get(partition_id)
        log.info(
            "controller.isr_changed",
            broker_id=broker_id,
            topic_id=str(topic_id),
            partition=partition_id,
            isr_before=list(before.isr),
            isr=None if after is None else list(after.isr),
            partition_epoch=None if after is None else after.partition_epoch,
        )
