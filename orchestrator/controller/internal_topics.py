"""The active controller creates the cluster's internal topic ``__remote_log_metadata``, as Kafka's
``TopicBasedRemoteLogMetadataManager`` creates it when it starts: idempotently, and on a cluster of any age.

Every tick of the active core looks (:meth:`RemoteLogMetadataTopicCreator.tick`); while the topic is missing, it is
created once brokers are there to hold it, with the layout of :mod:`remote_storage.rlmm_topic.layout` (its
configs, ``[remote_log_metadata] partitions`` partitions, one replica each) in ONE append, so it exists whole or
not at all. A cluster started by an older build gets it the first time a controller of this build is active.

When (:func:`creation_due`, pure): the set of live (registered, unfenced) brokers must not be empty, and must have
stayed the same for ``placement_settle_ms``. Replicas are placed over the live brokers, and with one replica per
partition a placement is for good; without the wait, a cluster whose brokers register one by one would put every
partition on the first broker to register. The wait starts again whenever the set changes, and from nothing after a
failover (the new controller saw no broker yet): creation is delayed, never wrong.

Idempotence: the topic is looked up by name in the image caught up with the log, just before the append, and only
the active controller appends (the append is fenced by its epoch), so two controllers never both create it. A topic
of that name already there (one a client created before it was internal) is kept as it is; a partition count other
than the settings' is logged once (``rlmm_topic.partition_count_differs``): records still go where Kafka's
partitioner puts them for the topic's own count (Kafka's TBRLMM would refuse to start instead).
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.topic_configs import validate_config_map
from orchestrator.settings import RemoteLogMetadataTopicSettings
from remote_storage.rlmm_topic.layout import REPLICATION_FACTOR, TOPIC_CONFIGS, TOPIC_NAME

from .partitions import new_topic_id, new_topic_records, place
from .state import ControllerState

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class LiveBrokers:
    """The live brokers last seen, and since when (ms) they have been exactly these."""

    broker_ids: frozenset[int]
    since_ms: int


def live_brokers(image: MetadataImage) -> frozenset[int]:
    """The registered, unfenced brokers: those a new partition can be placed on."""
    return frozenset(b.broker_id for b in image.brokers.values() if not b.fenced)


def creation_due(
    seen: LiveBrokers | None, live: frozenset[int], *, now_ms: int, settle_ms: int
) -> tuple[LiveBrokers | None, bool]:
    """Whether to create the topic now, and what to remember of the live brokers (see the module docstring)."""
    if not live:
        return None, False
    if seen is None or seen.broker_ids != live:
        seen = LiveBrokers(live, now_ms)
    return seen, now_ms - seen.since_ms >= settle_ms


class RemoteLogMetadataTopicCreator:
    """Creates ``__remote_log_metadata`` for the active core (see the module docstring)."""

    def __init__(self, state: ControllerState, settings: RemoteLogMetadataTopicSettings) -> None:
        self._state = state
        self._settings = settings
        self._seen: LiveBrokers | None = None
        self._count_checked = False
        self._cursor = state.rng.randrange(1 << 16)

    def tick(self, now_ms: int) -> Uuid | None:
        """Create the topic if it is missing and due; return its id when this call created it."""
        image = self._state.image
        existing = image.topic_by_name(TOPIC_NAME)
        if existing is not None:
            self._seen = None
            self._check_partition_count(len(existing.partitions))
            return None
        self._seen, due = creation_due(
            self._seen, live_brokers(image), now_ms=now_ms, settle_ms=self._settings.placement_settle_ms
        )
        if not due:
            return None
        return self._create(image)

    def _create(self, image: MetadataImage) -> Uuid:
        count = self._settings.partitions
        assignment, self._cursor = place(image, count, REPLICATION_FACTOR, cursor=self._cursor)
        topic_id = new_topic_id(image, self._state.rng)
        records, _ = new_topic_records(image, TOPIC_NAME, topic_id, assignment, validate_config_map(TOPIC_CONFIGS))
        self._state.append(records)
        self._count_checked = True
        log.info(
            "rlmm_topic.created",
            topic=TOPIC_NAME,
            topic_id=str(topic_id),
            partitions=count,
            replication_factor=REPLICATION_FACTOR,
            brokers=sorted({b for replicas in assignment for b in replicas}),
            configs=TOPIC_CONFIGS,
        )
        return topic_id

    def _check_partition_count(self, count: int) -> None:
        if self._count_checked:
            return
        self._count_checked = True
        if count != self._settings.partitions:
            log.warning(
                "rlmm_topic.partition_count_differs",
                topic=TOPIC_NAME,
                partitions=count,
                configured_partitions=self._settings.partitions,
            )
