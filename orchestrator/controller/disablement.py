"""The disablement driver: DisableRemoteTopic requests out, their outcomes in, DISABLED appended when a topic is done.

The asyncio driver (``service.py``) sends the requests :meth:`DisablementDriver.due_requests` returns and feeds every
outcome (reply, error, or timeout) to :meth:`DisablementDriver.on_response`; the controller's timer expires lost
requests, completes finished topics and reports stalled ones. The queue itself (who owes what, backoff, late
replies) is ``queue.py``, pure; this module applies it to the :class:`ControllerState`.

Invariants:
* DISABLED for (topic, epoch E) is appended only when the queue says every required broker acknowledged E for its
  current duty, and only while the image says DISABLING at E, so it is appended at most once: after the append the
  image says DISABLED and the topic leaves the queue (DESIGN §4 invariants 2 and 7).
* DISABLED(delete) means the remote data is gone, whoever led it (DESIGN §4 invariant 4): leaderless partitions are
  assigned to live brokers by the queue and named in their requests (``assigned_partitions``), and before the
  append the controller's RLMM (the shared store, folded here) must hold no segment of the topic id that is not
  DELETE_SEGMENT_FINISHED. Otherwise the topic stays DISABLING, the brokers answerable for the partitions left are
  asked again (:func:`queue.reopen`), and ``disable.remote_data_owed`` is logged (once per topic, epoch and set of
  partitions). DescribeTieredState lists those partitions (``owed_partitions``: who deletes them, what is left).
* A deposed controller hands out no request: :meth:`DisablementDriver.due_requests` checks the lease first. A broker
  answering STALE_CONTROLLER_EPOCH raises :class:`StaleControllerEpoch` (after its reply is recorded), so the
  driver steps down (invariant 6).
* Progress (segments deleted / remaining per broker) and the stalled pairs already reported are in memory only: a
  new controller learns them again from the requests it re-sends.
* Every reply that speaks of the broker's job at the request's epoch (IN_PROGRESS, DONE, or the job's failure) hands
  its counts to the queue, which decides from them whether the broker made progress (and so how soon it is asked
  again); a refusal (stale epoch, unknown topic) carries none. DescribeTieredState shows, per pending broker, the
  queue's last error, attempts without progress and next attempt (-1 while a request is in flight or it is fenced).
* :meth:`DisablementDriver.describe_tiered_state` never writes.
* Each DISABLED appended is one observation of ``tieredctl_disablement_duration_seconds`` (when metrics are given):
  from when this controller's queue took the topic's epoch in to the append.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import structlog

from orchestrator import crash_points
from orchestrator.admin_api.responses import normalized
from orchestrator.errors import (
    StaleControllerEpoch,
    StaleTieredEpoch,
    TieredError,
    UnknownTopicOrPartition,
)
from orchestrator.ids import ZERO_UUID, Uuid
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.metrics import ControllerMetrics
from orchestrator.protocol import messages as m
from orchestrator.settings import DisablementSettings
from remote_storage.rlmm import RemoteLogMetadataManager

from . import queue as dq
from . import tiering
from .state import ControllerState

log = structlog.get_logger(__name__)

ALL_PARTITIONS = -1


class DisableRequestBody(m.DisableRemoteTopicRequest):
    """A DisableRemoteTopic request as the driver hands it out, to be given back with its outcome.

    Besides the schema's fields it carries ``attempt``: not a wire field (the codec encodes schema fields only), it
    numbers the request so that :meth:`DisablementDriver.on_response`, given the same body back, can tell a late
    reply to an attempt already timed out from the reply to the attempt in flight.
    """

    attempt: int


@dataclass(frozen=True, slots=True)
class OwedRemoteData:
    """What the RLMM still holds of one partition of a delete-policy topic: segments not DELETE_SEGMENT_FINISHED."""

    partition: int
    segments: int
    size_bytes: int


class DisablementDriver:
    def __init__(
        self,
        state: ControllerState,
        settings: DisablementSettings,
        *,
        remote_log: RemoteLogMetadataManager,
        metrics: ControllerMetrics | None = None,
    ) -> None:
        """``remote_log`` is the RLMM over the same store: the backstop and DescribeTieredState read it."""
        self._state = state
        self._metrics = metrics
        self._settings = settings
        self._rlmm = remote_log
        self._owed_reported: dict[tuple[Uuid, int], frozenset[int]] = {}
        self._stalled_reported: set[tuple[Uuid, int]] = set()
        self._progress: dict[Uuid, dict[int, dict[int, tuple[int, int]]]] = {}  # topic -> epoch -> broker -> counts

    def due_requests(self) -> list[tuple[int, DisableRequestBody]]:
        """The DisableRemoteTopic requests to send now, as (broker id, request body); they are now in flight.

        Raises :class:`StaleControllerEpoch` instead of handing out requests once the lease has moved on.
        """
        state = self._state
        state.refresh()
        now = state.now_ms()
        expired = dq.expire(state.queue, now, timeout_ms=self._settings.request_timeout_ms, rng=state.rng)
        queue, sends = dq.due(expired, now)
        if sends:
            state.check_lease()
        state.queue = queue
        out: list[tuple[int, DisableRequestBody]] = []
        for s in sends:
            log.debug(
                "disable.send",
                topic_id=str(s.topic_id),
                broker_id=s.broker_id,
                tiered_epoch=s.tiered_epoch,
                attempt=s.attempt,
                assigned_partitions=sorted(s.assigned),
            )
            body = DisableRequestBody(
                partition_id=ALL_PARTITIONS,
                topic_id=s.topic_id,
                tiered_epoch=s.tiered_epoch,
                controller_epoch=state.controller_epoch,
                broker_epoch=s.broker_epoch,
                policy=int(s.policy),
                assigned_partitions=sorted(s.assigned),
                attempt=s.attempt,
            )
            out.append((s.broker_id, body))
        return out

    def on_response(
        self,
        broker_id: int,
        request_body: DisableRequestBody,
        response_body: m.DisableRemoteTopicResponse | None,
        error: TieredError | None,
    ) -> None:
        """Feed the outcome of one DisableRemoteTopic: a response body, a transport error, or neither (timeout).

        Appends DISABLED for every topic this completes. Raises :class:`StaleControllerEpoch` if the broker says a
        newer controller exists (after recording the reply; the driver steps down).
        """
        state = self._state
        topic_id = request_body["topic_id"]
        tiered_epoch = request_body["tiered_epoch"]
        about_the_job = response_body is not None and response_body.get("tiered_epoch", -1) == tiered_epoch
        outcome = dq.read_outcome(response_body, error, about_the_job=about_the_job)
        code, message, in_progress = outcome.error_code, outcome.error_message, outcome.in_progress
        if code == 0 and response_body is not None:
            self._record_progress(topic_id, tiered_epoch, broker_id, response_body)
        before = state.queue
        state.queue = dq.on_response(
            before,
            topic_id,
            broker_id,
            tiered_epoch,
            ok=code == 0,
            in_progress=in_progress,
            error_code=code,
            error_message=message,
            now_ms=state.now_ms(),
            rng=state.rng,
            repoll_ms=self._settings.repoll_ms,
            attempt=request_body["attempt"],
            progress=outcome.progress,
        )
        fields = {"topic_id": str(topic_id), "broker_id": broker_id, "tiered_epoch": tiered_epoch}
        pending = state.queue.pending_brokers(topic_id).get(broker_id)
        if state.queue is before:
            log.debug("disable.reply_ignored", **fields, error_code=code)
        elif code != 0:
            assert pending is not None
            retry = {"attempts_without_progress": pending.failures, "next_attempt_ms": pending.next_attempt_ms}
            log.warning("disable.retry", **fields, error_code=code, detail=message, **retry)
        elif in_progress:
            assert response_body is not None and pending is not None
            log.debug(
                "disable.in_progress",
                **fields,
                partitions_done=response_body.get("partitions_done"),
                partitions_total=response_body.get("partitions_total"),
                segments_deleted=response_body.get("segments_deleted"),
                segments_remaining=response_body.get("segments_remaining"),
                attempts_without_progress=pending.failures,
                next_attempt_ms=pending.next_attempt_ms,
            )
        else:
            log.info("disable.ack", **fields, pending=sorted(state.queue.pending_brokers(topic_id)))
        if code == StaleControllerEpoch.code:
            state.log_deposed()
            raise StaleControllerEpoch(
                f"broker {broker_id} knows a newer controller than epoch {state.controller_epoch}"
            )
        if code == StaleTieredEpoch.code:
            log.info("disable.stale_tiered_epoch", **fields)  # the refresh below catches the image up
        self.complete_finished(only=[topic_id])

    def expire_requests(self, now: int) -> None:
        """Give up on requests in flight for longer than the request timeout (they are retried after a backoff)."""
        state = self._state
        state.queue = dq.expire(state.queue, now, timeout_ms=self._settings.request_timeout_ms, rng=state.rng)

    def complete_finished(self, only: Iterable[Uuid] | None = None) -> None:
        """Append DISABLED for every topic (of ``only``, if given) whose required brokers all acknowledged and, under
        the delete policy, whose remote segments the RLMM shows all deleted (else ask again: the module docstring)."""
        state = self._state
        image = state.refresh()
        done = [t for t in dq.completed(state.queue, image, only) if self._remote_data_gone(image.topics[t])]
        if not done:
            return
        since_ms = {t: state.queue.topics[t].since_ms for t in done}  # the topics leave the queue with the append
        crash_points.reached("controller.after_ack_before_disabled")
        state.append([tiering.complete(image.topics[t], state.queue.topics[t].tiered_epoch) for t in done])
        now = state.now_ms()
        for t in done:
            topic = image.topics[t]
            if self._metrics is not None:
                self._metrics.disablement_completed(topic.policy.name.lower(), (now - since_ms[t]) / 1000)
            log.info(
                "disable.completed",
                topic=topic.name,
                topic_id=str(t),
                tiered_epoch=topic.tiered_epoch,
                policy=topic.policy.name,
            )

    def _remote_data_gone(self, topic: TopicImage) -> bool:
        """The backstop before DISABLED: True unless ``topic`` is delete-policy and the RLMM still holds some of its
        remote segments; then the brokers answerable for them are asked again (:func:`queue.reopen`)."""
        if topic.policy != DisablePolicy.DELETE:
            return True
        owed = self.owed_remote_data(topic)
        if not owed:
            self._owed_reported.pop((topic.topic_id, topic.tiered_epoch), None)
            return True
        state = self._state
        partitions = frozenset(o.partition for o in owed)
        segments = sum(o.segments for o in owed)
        reason = (
            f"remote data still owed after every broker acknowledged: {segments} segment(s) of partition(s) "
            f"{sorted(partitions)} not DELETE_SEGMENT_FINISHED in the RLMM"
        )
        before = state.queue
        state.queue = dq.reopen(
            before, state.image, topic.topic_id, partitions, reason=reason, now_ms=state.now_ms(), rng=state.rng
        )
        key = (topic.topic_id, topic.tiered_epoch)
        if state.queue is not before or self._owed_reported.get(key) != partitions:
            self._owed_reported[key] = partitions
            deleting = dq.deleting_brokers(topic, state.image)
            log.warning(
                "disable.remote_data_owed",
                topic=topic.name,
                topic_id=str(topic.topic_id),
                tiered_epoch=topic.tiered_epoch,
                partitions=sorted(partitions),
                segments=segments,
                asked_again=sorted(
                    set(before.pending_brokers(topic.topic_id)) ^ set(state.queue.pending_brokers(topic.topic_id))
                ),
                deleting_brokers={p: deleting.get(p, -1) for p in sorted(partitions)},
            )
        return False

    def owed_remote_data(self, topic: TopicImage) -> list[OwedRemoteData]:
        """Per partition of ``topic`` (by id), its remote segments the RLMM holds that are not deleted yet."""
        self._rlmm.refresh()
        counts: dict[int, tuple[int, int]] = {}
        for seg in self._rlmm.segments(topic.topic_id):
            if seg.state != SegmentState.DELETE_SEGMENT_FINISHED:
                n, size = counts.get(seg.partition, (0, 0))
                counts[seg.partition] = (n + 1, size + seg.size_bytes)
        return [OwedRemoteData(p, n, size) for p, (n, size) in sorted(counts.items())]

    def report_stalled(self, now: int) -> None:
        """Log each (topic, broker) pair once when it becomes stalled, with its last error; again if it recovers
        and stalls anew."""
        queue = self._state.queue
        stalled = set(dq.stalled(queue, now, self._settings.stall_threshold_ms))
        for topic_id, broker_id in sorted(stalled - self._stalled_reported, key=lambda p: (str(p[0]), p[1])):
            entry = queue.topic(topic_id)
            pb = entry.pending.get(broker_id) if entry is not None else None
            log.warning(
                "disable.stalled",
                topic=entry.name if entry is not None else None,
                topic_id=str(topic_id),
                broker_id=broker_id,
                attempts=pb.attempts if pb is not None else None,
                last_error=pb.last_error if pb is not None else None,
                fenced=pb.fenced if pb is not None else None,
            )
        self._stalled_reported = stalled

    def describe_tiered_state(self, body: m.DescribeTieredStateRequest) -> m.DescribeTieredStateResponse:
        req = normalized("DescribeTieredStateRequest", 0, body)
        state = self._state
        image = state.refresh()
        stalled = set(dq.stalled(state.queue, state.now_ms(), self._settings.stall_threshold_ms))
        names = req["topics"]
        wanted = sorted(image.topics_by_name) if names is None else list(names)
        out: list[m.DescribedTopic] = []
        for name in wanted:
            topic = image.topic_by_name(name)
            if topic is None:
                err = UnknownTopicOrPartition(f"topic '{name}' does not exist")
                unknown = m.DescribedTopic(
                    name=name, topic_id=ZERO_UUID, error_code=err.code, error_message=err.message
                )
                out.append(unknown)
                continue
            pending = [
                m.PendingBroker(
                    broker_id=b,
                    attempts=pb.attempts,
                    last_error=pb.last_error,
                    last_attempt_ms=pb.last_attempt_ms,
                    fenced=pb.fenced,
                    stalled=(topic.topic_id, b) in stalled,
                    next_attempt_ms=-1 if pb.in_flight or pb.fenced else pb.next_attempt_ms,
                    attempts_without_progress=pb.failures,
                )
                for b, pb in sorted(state.queue.pending_brokers(topic.topic_id).items())
            ]
            acknowledged, deleted, remaining = self._progress_of(topic, image)
            owed: list[m.OwedPartition] = []
            if topic.policy == DisablePolicy.DELETE and topic.tiered_state != TieredState.ENABLED:
                deleting = dq.deleting_brokers(topic, image)
                owed = [
                    m.OwedPartition(
                        partition_id=o.partition,
                        leader=topic.partitions[o.partition].leader if o.partition in topic.partitions else -1,
                        assigned_broker=deleting.get(o.partition, -1),
                        segments_remaining=o.segments,
                        bytes_remaining=o.size_bytes,
                    )
                    for o in self.owed_remote_data(topic)
                ]
            described = m.DescribedTopic(
                name=topic.name,
                topic_id=topic.topic_id,
                error_code=0,
                tiered_state=int(topic.tiered_state),
                tiered_epoch=topic.tiered_epoch,
                policy=int(topic.policy),
                partition_count=len(topic.partitions),
                pending_brokers=pending,
                acknowledged_brokers=acknowledged,
                segments_deleted=deleted,
                segments_remaining=remaining,
                owed_partitions=owed,
            )
            out.append(described)
        return normalized("DescribeTieredStateResponse", 0, m.DescribeTieredStateResponse(error_code=0, topics=out))

    # --- progress reporting (in memory; a new controller learns it again from the re-sent requests) -------------

    def _record_progress(self, topic_id: Uuid, epoch: int, broker_id: int, body: m.DisableRemoteTopicResponse) -> None:
        per_epoch = self._progress.setdefault(topic_id, {})
        for old_epoch in [e for e in per_epoch if e != epoch]:
            del per_epoch[old_epoch]
        per_epoch.setdefault(epoch, {})[broker_id] = (
            int(body.get("segments_deleted", 0)),
            int(body.get("segments_remaining", 0)),
        )

    def _progress_of(self, topic: TopicImage, image: MetadataImage) -> tuple[int, int, int]:
        """(brokers that acknowledged the topic's epoch, segments deleted, segments remaining) of a topic.

        A DISABLED topic has left the queue, and every broker that had to acknowledged its epoch (that is when it
        became DISABLED): they are counted from the image, so a new controller says the same."""
        epoch = topic.tiered_epoch
        reports = self._progress.get(topic.topic_id, {}).get(epoch, {})
        entry = self._state.queue.topic(topic.topic_id)
        if topic.tiered_state == TieredState.DISABLED:
            acknowledged = len(dq.required(topic, image))
        else:
            acknowledged = 0 if entry is None or entry.tiered_epoch != epoch else len(entry.acked)
        return acknowledged, sum(d for d, _ in reports.values()), sum(r for _, r in reports.values())
