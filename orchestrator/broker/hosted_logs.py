"""The logs of the partitions a broker hosts (leads or follows): opened on first use, shared by every part of the
broker through one dict (``logs``), and the one way to get the log of a partition this broker leads;
:func:`split_by_leadership` tells the hosted logs it leads from the others, in one pass.

Invariants:

* A log is opened only under ``open_lock`` and only for a topic id the newest image still has (a caller holding an
  older image cannot re-create a retired topic's directory: UNKNOWN_TOPIC_ID), so two PartitionLogs of one directory
  never hand out the same offsets twice.
* A directory that lost offsets the RLMM knows (a lost data directory) is rebuilt from the RLMM
  (:func:`orchestrator.broker.log_recovery.open_partition_log`), its producers from the snapshot uploaded with the
  newest finished segment (``producer_snapshot``, read from the remote tier), when the RLMM is the only other
  record: the partition has one replica, or this broker is to lead it (:meth:`HostedLogs.leader_log`, e.g. the last
  in-sync replica back on a new disk). A follower of a replicated partition is not rebuilt: it opens what its disk
  holds and copies the rest from its leader (from offset 0 if it lost everything, as a Kafka follower does, down to
  the leader's local log start when older records are tiered). A rebuild would start it past records that only the
  leader's local log holds (a copy that started but never finished names their offsets), and once in sync it could
  lead without them.
* :meth:`HostedLogs.leader_log` serves only a partition this broker leads (NOT_LEADER_OR_FOLLOWER otherwise), looking
  at the store once more when its image says otherwise (a client may know of a change not replayed here yet), and
  only once this process's incarnation is the broker's registered, unfenced one, as a KRaft broker serves no client
  before the controller unfenced it. A restarted broker's image still names it leader of what its previous
  incarnation led until that one's session expires: leading then would hand out offsets from whatever its disk
  holds (nothing at all, if the disk was lost) while the partition's other in-sync replicas hold more; a
  directory still held by a deleted topic id of the same name is moved aside at once (the broker's reconciliation),
  not refused until the metadata round does it.
* A log is made fit to lead once per leader epoch (a broker that led a partition before, lost it and leads it again
  looks again: much may have happened in between). Fit to lead also means a log start offset it can serve: a log of
  a topic DISABLING or DISABLED under the delete policy starts no lower than its local log start offset, and any
  other log no lower than its first live remote segment (read from the RLMM just then), or its local log start when
  the RLMM has none below it. The broker that applies the policy to a partition it leads moves its log start itself;
  a partition that had no leader then had its remote segments deleted by the broker the controller assigned it to,
  with no log start to move, and a follower never learns of a move whose leader died first (the topic may even be
  tiered again since, under a new tiered epoch: the policy's deletions behind it). Whichever replica leads it next
  would otherwise answer ListOffsets with an earliest offset it cannot serve (OFFSET_OUT_OF_RANGE on the fetch that
  follows). A segment missing from the middle of the remote tier moves nothing: a read of it stays an error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import structlog

from orchestrator.broker.local_log import LogConfig, PartitionLog
from orchestrator.broker.log_recovery import needs_rebuild, open_partition_log, remote_bounds
from orchestrator.broker.partition_dirs import PartitionKey, partition_dir_name
from orchestrator.clock import wall_ms
from orchestrator.errors import InconsistentTopicId, NotLeaderOrFollower, UnknownTopicId
from orchestrator.ids import Uuid
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.records import DisablePolicy, TieredState
from orchestrator.metadata.topic_configs import SEGMENT_BYTES, SEGMENT_MS
from orchestrator.settings import BrokerSettings
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment

log = structlog.get_logger(__name__)


class HostedLogs:
    def __init__(
        self,
        settings: BrokerSettings,
        *,
        logs: Callable[[], dict[PartitionKey, PartitionLog]],
        follower: MetadataFollower,
        rlmm: RemoteLogMetadataManager,
        open_lock: threading.Lock,
        reconcile: Callable[[MetadataImage], object],
        producer_snapshot: Callable[[RemoteSegment], bytes | None] | None = None,
        on_failure: Callable[[Path, OSError], None] | None = None,
        incarnation_id: Uuid | None = None,
    ) -> None:
        self._settings = settings
        self._incarnation_id = incarnation_id  # None: not checked (a harness without a controller)
        self._data_dir = Path(settings.data_dir)
        self._logs = logs  # the broker's dict of open logs (looked up each time: a test may wrap it)
        self._follower = follower
        self._rlmm = rlmm
        self._open_lock = open_lock
        self._reconcile = reconcile
        self._producer_snapshot = producer_snapshot
        self._on_failure = on_failure  # every log's OS errors, told to the broker's failed-directory channel
        # The open logs found, or made, fit to lead, with the leader epoch they were looked at for: not behind the
        # RLMM, and holding no offset the delete policy removed (each log is looked at once per leader epoch).
        self._leader_checked: dict[PartitionKey, tuple[PartitionLog, int]] = {}

    def open_log(
        self,
        image: MetadataImage,
        topic_id: Uuid,
        partition: int,
        *,
        refresh_rlmm: bool = True,
        as_leader: bool = False,
    ) -> PartitionLog:
        """The partition's open log, opened now if it is not. A directory that lost offsets the RLMM knows is rebuilt
        from it (:func:`open_partition_log`) when this broker is the partition's only replica, or opens it to lead
        (``as_leader``: an open log found behind the RLMM then is rebuilt; a log is looked at once per leader epoch);
        a follower of a replicated partition opens what its disk holds, and copies the rest from its leader (see the
        module docstring). ``refresh_rlmm=False``: the caller refreshed the RLMM since it last could have changed for
        an unopened partition (the metadata round does, once for all)."""
        key = (topic_id, partition)
        with self._open_lock:  # two PartitionLogs of one directory would hand out the same offsets twice
            logs = self._logs()
            plog = logs.get(key)
            if plog is not None and not as_leader:
                return plog
            topic = image.topics.get(topic_id)
            if topic_id not in self._follower.image.topics or topic is None:  # retired since the caller's image
                raise UnknownTopicId(f"topic id {topic_id} was deleted")
            p = topic.partitions.get(partition)
            leader_epoch = p.leader_epoch if p is not None else -1
            checked = self._leader_checked.get(key)
            if plog is not None and checked is not None and checked[0] is plog and checked[1] == leader_epoch:
                return plog
            replicated = p is not None and len(p.replicas) > 1
            if plog is not None:  # open as a follower's, or led at an earlier epoch: behind the RLMM, it cannot lead
                if refresh_rlmm:
                    self._rlmm.refresh()
                if not needs_rebuild(plog.log_end_offset, remote_bounds(self._rlmm.segments(topic_id, partition))):
                    self._fit_to_lead(key, plog, topic, leader_epoch)
                    return plog
                plog.close()
                del logs[key]
            elif refresh_rlmm and (as_leader or not replicated):
                self._rlmm.refresh()
            configs = image.topic_configs(topic.name)
            log_config = LogConfig(
                segment_bytes=int(configs.get(SEGMENT_BYTES, self._settings.segment_bytes)),
                segment_ms=int(configs.get(SEGMENT_MS, self._settings.segment_ms)),
            )
            rebuild = as_leader or not replicated
            plog = open_partition_log(
                self._data_dir / partition_dir_name(topic.name, partition),
                topic_id=topic_id,
                config=log_config,
                clock=wall_ms,
                segments=self._rlmm.segments(topic_id, partition) if rebuild else (),
                producer_snapshot=self._producer_snapshot,
                on_failure=self._on_failure,
            )
            logs[key] = plog
            if rebuild:
                self._fit_to_lead(key, plog, topic, leader_epoch)
            if len(self._leader_checked) > 2 * len(logs):  # forget the logs closed since (retired partitions)
                self._leader_checked = {k: v for k, v in self._leader_checked.items() if logs.get(k) is v[0]}
        return plog

    def _fit_to_lead(self, key: PartitionKey, plog: PartitionLog, topic: TopicImage, leader_epoch: int) -> None:
        """Mark ``plog`` fit to lead at ``leader_epoch``, first moving its log start offset up to the first offset it
        can serve, if what lies below is gone (see the module docstring)."""
        if plog.log_start_offset < plog.local_log_start_offset:
            deleted = topic.policy == DisablePolicy.DELETE and topic.tiered_state in (
                TieredState.DISABLING,
                TieredState.DISABLED,
            )
            floor = plog.local_log_start_offset if deleted else self._first_remote_offset(key, plog)
            if plog.log_start_offset < floor:
                before = plog.log_start_offset
                plog.advance_log_start_offset(floor)
                log.info(
                    "broker.log_start_moved_by_policy" if deleted else "broker.log_start_moved_to_remote_start",
                    topic_id=str(topic.topic_id),
                    partition=key[1],
                    leader_epoch=leader_epoch,
                    log_start_before=before,
                    log_start_offset=plog.log_start_offset,
                )
        self._leader_checked[key] = (plog, leader_epoch)

    def _first_remote_offset(self, key: PartitionKey, plog: PartitionLog) -> int:
        """Where the offsets below ``plog``'s local log start begin to be served from the remote tier: the start of
        the first live remote segment at or above the log start offset, or the local log start when there is none (a
        delete policy removed them, under a tiered epoch since ended). An answer above the log start offset is
        taken only from an RLMM read again just then (a segment another leader copied must not be missed); the
        usual answer, the log start itself, needs no read."""

        def first() -> int:
            starts = [
                seg.start_offset
                for seg in self._rlmm.live_segments(*key)
                if seg.end_offset >= plog.log_start_offset and seg.start_offset < plog.local_log_start_offset
            ]
            return max(plog.log_start_offset, min(starts, default=plog.local_log_start_offset))

        if first() == plog.log_start_offset:
            return plog.log_start_offset
        self._rlmm.refresh()
        return first()

    def _registration_refusal(self, image: MetadataImage) -> str | None:
        """Why this process may not lead yet (None: it is the broker's registered, unfenced incarnation)."""
        if self._incarnation_id is None:
            return None
        broker_id = self._settings.broker_id
        registration = image.brokers.get(broker_id)
        if registration is None or registration.incarnation_id != self._incarnation_id:
            return (
                f"broker {broker_id} restarted and is not registered yet (its previous incarnation's session has not "
                "expired)"
            )
        return f"broker {broker_id} is fenced" if registration.fenced else None

    def leader_log(self, topic_id: Uuid, partition: int) -> PartitionLog:
        """The open log of a partition this broker leads. The caller holds the broker's log lock."""
        broker_id = self._settings.broker_id
        image = self._follower.image
        topic = image.topics.get(topic_id)
        p = topic.partitions.get(partition) if topic is not None else None
        refusal = self._registration_refusal(image)
        if p is None or p.leader != broker_id or refusal is not None:
            # The client may know of a change this broker has not replayed yet, or it was registered since.
            image = self._follower.refresh()
            topic = image.topics.get(topic_id)
            refusal = self._registration_refusal(image)
        if topic is None or partition not in topic.partitions:
            raise UnknownTopicId(f"no partition {partition} of topic id {topic_id}")
        if topic.partitions[partition].leader != broker_id:
            raise NotLeaderOrFollower(f"broker {broker_id} does not lead {topic.name}-{partition}")
        if refusal is not None:
            raise NotLeaderOrFollower(f"{refusal}: it does not lead {topic.name}-{partition} until then")
        try:
            return self.open_log(image, topic_id, partition, as_leader=True)
        except InconsistentTopicId:
            # The directory still holds a deleted topic id of the same name (deleted and re-created since the
            # metadata round last reconciled): move it aside now rather than refuse until the round does.
            self._reconcile(image)
            return self.open_log(image, topic_id, partition, as_leader=True)


def split_by_leadership(
    keys: list[PartitionKey], image: MetadataImage, broker_id: int
) -> tuple[list[PartitionKey], list[PartitionKey]]:
    """``keys`` (open logs) split into those ``broker_id`` leads in ``image`` and the others, each in ``keys``' order.

    One pass, one image look-up per key and no comparison between keys: a tiering round runs it over every log the
    broker holds, so it must stay linear (a list-membership test here was quadratic: at 20,000 logs a broker spent
    each round's CPU comparing ids)."""
    led: list[PartitionKey] = []
    followed: list[PartitionKey] = []
    topics = image.topics
    for key in keys:
        topic = topics.get(key[0])
        p = None if topic is None else topic.partitions.get(key[1])
        (led if p is not None and p.leader == broker_id else followed).append(key)
    return led, followed
