"""The remote deletion driver: a deleted topic's remote data goes, partition by partition (KIP-405).

DeleteTopics appends RemoveTopicRecord and, for a topic with remote data (a tiered history, or any segment in the
RLMM), the DELETE_PARTITION_MARKED of each of its partitions (:meth:`RemoteDeletionDriver.removal_marks`) in one
store transaction (the store's ``append`` with ``remote_log_metadata``, store invariant 1): a controller that dies
at any moment leaves the topic either in place and unmarked or removed and marked, never removed and unmarked.
From the removal on, the store refuses every copy record of the topic id, so nothing new lands.
:meth:`RemoteDeletionDriver.sync` still marks, as a safety net for stores written before the removal and the marks
were one transaction: every topic id the RLMM knows and the image does not have is a deleted topic, and any of its
RLMM partitions without a delete state is marked. Sync reads the RLMM *before* it refreshes the image: a segment
read there was admitted by the store's fence while its topic existed, so the image read after it has that topic
unless it was removed since (a topic created meanwhile is never taken for a deleted one).

The queue (``deletion_queue.py``: the disablement's retry queue with the deletion's policy, pure) is rebuilt from
the RLMM on every sync, so after a controller start or failover it holds every partition MARKED or STARTED and not
FINISHED; requests go to live brokers (DeleteRemotePartitions, fenced there by controller epoch, broker epoch and the
partition's RLMM delete state), with the disablement's timeouts and backoff
(:class:`~orchestrator.settings.DisablementSettings`), the queue walked only when something can be due
(``queue_walk.py``). A topic leaves the queue when the RLMM shows all its partitions FINISHED
(``topic_deletion.completed`` is logged). A deposed controller hands out no request (the lease is checked first),
and a broker answering STALE_CONTROLLER_EPOCH makes it step down.
DescribeTieredState lists the topics still being deleted (:meth:`RemoteDeletionDriver.describe`).
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from orchestrator.errors import StaleControllerEpoch, TieredError
from orchestrator.ids import Uuid
from orchestrator.metadata.image import TopicImage
from orchestrator.metadata.records import MetadataRecord, PartitionDeleteState
from orchestrator.protocol import messages as m
from orchestrator.settings import DisablementSettings
from remote_storage.rlmm import RemoteLogMetadataManager

from . import deletion_queue as dlq
from . import retry_queue as rq
from .queue_walk import QueueWalk
from .state import ControllerState

log = structlog.get_logger(__name__)

CONTROLLER_WRITER = -1  # the broker id RLMM records written by the controller carry


class DeleteRemotePartitionsBody(m.DeleteRemotePartitionsRequest):
    """A DeleteRemotePartitions request as the driver hands it out; ``attempt`` is not a wire field (the codec
    encodes schema fields only): given back with the outcome, it tells a late reply from the current one."""

    attempt: int


DeleteOutcome = tuple[DeleteRemotePartitionsBody, m.DeleteRemotePartitionsResponse | None, TieredError | None]
"""One request's outcome as the sender hands it back: the body it was given, and a reply, an error, or neither."""


class RemoteDeletionDriver:
    def __init__(
        self, state: ControllerState, settings: DisablementSettings, *, remote_log: RemoteLogMetadataManager
    ) -> None:
        self._state = state
        self._rlmm = remote_log
        self._walk: QueueWalk[dlq.QueuedDeletion] = QueueWalk(state, settings, watch_stalls=True)
        self.queue = dlq.EMPTY_DELETION_QUEUE
        self._done_topics: set[Uuid] = set()  # finished deletions already seen: not looked at again
        self._synced: tuple[int, int, bool] | None = None  # (RLMM offset, image offset, mark) of the last sync

    def removal_marks(self, topic: TopicImage) -> list[MetadataRecord]:
        """The DELETE_PARTITION_MARKED records to append with ``topic``'s RemoveTopicRecord, in one transaction: one
        for every partition of a topic with remote data (its own and any the RLMM knows); none for a topic never
        tiered with nothing remote (no copy of it can start: the store's fence admits none while it is not ENABLED)."""
        self._rlmm.refresh()
        if topic.tiered_epoch == 0 and not self._rlmm.segments(topic.topic_id):
            return []
        partitions = set(topic.partitions) | {p.partition for p in self._rlmm.remote_partitions(topic.topic_id)}
        marked = PartitionDeleteState.DELETE_PARTITION_MARKED
        now = self._state.now_ms()
        tid = topic.topic_id
        return self._rlmm.partition_delete_records(
            topic.name, tid, partitions, marked, broker_id=CONTROLLER_WRITER, now_ms=now
        )

    def removed(self, topic: TopicImage, marks: int) -> None:
        """After ``topic``'s removal with its ``marks`` partitions marked: queue its remote deletion."""
        if marks:
            log.info("topic_deletion.marked", topic=topic.name, topic_id=str(topic.topic_id), partitions=marks)
        self.sync()

    def sync(self, *, mark: bool = True) -> None:
        """Read what is owed from the RLMM (marking what a crash left unmarked, unless ``mark`` is False) and
        reconcile the queue with it."""
        rlmm, state = self._rlmm, self._state
        rlmm.refresh()  # before the image: see the module docstring
        image = state.refresh()
        # Runs on every tick of the core: with neither the RLMM nor the image moved there is nothing new to mark or
        # reconcile, so the walk over every topic id the RLMM knows is skipped.
        seen = (rlmm.applied_offset, image.offset, mark)
        if seen == self._synced:
            return
        targets: list[dlq.DeletionTarget] = []
        for topic_id in rlmm.topic_ids() - self._done_topics:
            if topic_id in image.topics:
                continue
            if rlmm.deletion_finished(topic_id):
                self._done_topics.add(topic_id)
                continue
            partitions = rlmm.remote_partitions(topic_id)
            unmarked = [p.partition for p in partitions if p.delete_state is None]
            name = partitions[0].topic
            if unmarked and mark:
                state.check_lease()
                marked = PartitionDeleteState.DELETE_PARTITION_MARKED
                rlmm.mark_partitions_delete(
                    name, topic_id, unmarked, marked, broker_id=CONTROLLER_WRITER, now_ms=state.now_ms()
                )
                log.info("topic_deletion.marked", topic=name, topic_id=str(topic_id), partitions=len(unmarked))
            finished = PartitionDeleteState.DELETE_PARTITION_FINISHED
            remaining = frozenset(p.partition for p in partitions if p.delete_state != finished)
            targets.append(dlq.DeletionTarget(topic_id, name, remaining))
        before = self.queue
        self.queue = dlq.reconcile(before, targets, image, state.now_ms())
        for topic_id in set(before.topics) - set(self.queue.topics):
            log.info("topic_deletion.completed", topic=before.topics[topic_id].name, topic_id=str(topic_id))
        self._synced = seen  # only once the whole sync is done: one that raised is done again

    def due_requests(self) -> list[tuple[int, DeleteRemotePartitionsBody]]:
        """The DeleteRemotePartitions requests to send now, as (broker id, body); they are now in flight.
        Raises :class:`StaleControllerEpoch` instead once the lease has moved on."""
        state = self._state
        self.queue, sends = self._walk.take_due(self.queue)
        out = []
        for s in sends:
            log.debug("topic_deletion.send", topic_id=str(s.topic_id), broker_id=s.broker_id, partitions=sorted(s.duty))
            body = DeleteRemotePartitionsBody(
                topic_id=s.topic_id,
                topic_name=s.job.name,
                partitions=sorted(s.duty),
                controller_epoch=state.controller_epoch,
                broker_epoch=s.broker_epoch,
                attempt=s.attempt,
            )
            out.append((s.broker_id, body))
        return out

    def on_responses(self, broker_id: int, outcomes: Sequence[DeleteOutcome]) -> None:
        """Feed the outcomes of requests to ``broker_id``, then reconcile with the RLMM (which says what is done).
        Raises :class:`StaleControllerEpoch` if the broker says a newer controller exists (after recording them)."""
        state = self._state
        deposed = False
        for request_body, response_body, error in outcomes:
            topic_id = request_body["topic_id"]
            outcome = rq.read_outcome(response_body, error)
            self.queue = dlq.on_response(
                self.queue,
                topic_id,
                broker_id,
                outcome,
                attempt=request_body["attempt"],
                now_ms=state.now_ms(),
                rng=state.rng,
                retries=self._walk.retries,
            )
            fields = {"topic_id": str(topic_id), "broker_id": broker_id, "error_code": outcome.error_code}
            if not outcome.ok:
                log.warning("topic_deletion.retry", **fields, detail=outcome.error_message)
            else:
                log.debug("topic_deletion.reply", **fields, in_progress=outcome.in_progress)
            deposed = deposed or outcome.error_code == StaleControllerEpoch.code
        if deposed:
            state.deposed_by_broker(broker_id)
        self.sync()

    def report_stalled(self, now: int) -> None:
        """Log each (deleted topic, broker) pair once when it becomes stalled (owing partitions with no progress
        for the stall threshold), with its attempts and last error; again if it recovers and stalls anew."""
        for topic_id, broker_id in self._walk.new_stalls(self.queue, now):
            entry = self.queue.topic(topic_id)
            owed = entry.pending.get(broker_id) if entry is not None else None
            log.warning(
                "topic_deletion.stalled",
                topic=entry.name if entry is not None else None,
                topic_id=str(topic_id),
                broker_id=broker_id,
                partitions=sorted(owed.duty) if owed is not None else None,
                attempts=owed.attempts if owed is not None else None,
                last_error=owed.last_error if owed is not None else None,
            )

    def describe(self, names: list[str] | None) -> list[m.DeletingTopic]:
        """The deleted topics (of ``names``, if given) whose remote data is still owed, with who deletes it. Never
        writes (an unmarked partition is listed; the next tick marks it)."""
        self.sync(mark=False)
        now = self._state.now_ms()
        out: list[m.DeletingTopic] = []
        for topic_id, t in sorted(self.queue.topics.items(), key=lambda kv: (kv[1].name, str(kv[0]))):
            if names is not None and t.name not in names:
                continue
            left = [p for p in self._rlmm.remote_partitions(topic_id) if p.partition in t.remaining]
            brokers = [
                m.DeletingBroker(
                    broker_id=b,
                    partitions=sorted(d.duty),
                    attempts=d.attempts,
                    last_error=d.last_error,
                    next_attempt_ms=-1 if d.in_flight else max(d.next_attempt_ms, now),
                )
                for b, d in sorted(t.pending.items())
            ]
            out.append(
                m.DeletingTopic(
                    name=t.name,
                    topic_id=topic_id,
                    partitions_remaining=sorted(t.remaining),
                    segments_remaining=sum(p.segments_left for p in left),
                    bytes_remaining=sum(p.bytes_left for p in left),
                    brokers=brokers,
                )
            )
        return out
