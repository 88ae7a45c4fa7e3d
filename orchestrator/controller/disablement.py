"""The disablement driver: DisableRemoteTopic requests out, their outcomes in, DISABLED appended when a topic is done.

The sender (``sender.py``) sends the requests :meth:`DisablementDriver.due_requests` returns (coalesced per
broker into version 1 requests of many topics: :func:`batch_request`, :func:`split_batch_response`) and feeds every
outcome (reply, error, or timeout) to :meth:`DisablementDriver.on_responses`, all of one exchange at once; the
controller's timer expires lost requests, completes finished topics and reports stalled ones. A reply costs the
queue O(log n) (a persistent map, ``retry_queue.py``), and the topics one exchange completes are appended DISABLED in
one batch, so a bulk disablement of thousands of topics costs what it sends, not the square of the queue. The queue
itself is pure: who owes what is ``disablement_queue.py``, the machine (backoff, late replies) ``retry_queue.py``;
this module applies it to the :class:`ControllerState`.

Invariants:
* DISABLED for (topic, epoch E) is appended only when the queue says every required broker acknowledged E for its
  current duty, and only while the image says DISABLING at E, so it is appended at most once: after the append the
  image says DISABLED and the topic leaves the queue (ARCHITECTURE §4 invariants 2 and 7).
* DISABLED(delete) means the remote data is gone, whoever led it (ARCHITECTURE §4 invariant 4): leaderless partitions
  are assigned to live brokers by the queue and named in their requests (``assigned_partitions``), and before the
  append the controller's RLMM (the shared store, folded here) must hold no segment of the topic id that is not
  DELETE_SEGMENT_FINISHED. Otherwise the topic stays DISABLING, the brokers answerable for the partitions left are
  asked again (:func:`disablement_queue.reopen`), and ``disable.remote_data_owed`` is logged (once per topic, epoch
  and set of partitions). DescribeTieredState lists those partitions (``owed_partitions``: who deletes them, what
  is left).
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
* The timer walks the queue only when something can have changed: the queue is not the very object the last walk
  left (a reply, an image, a send), or the clock reached the earliest time at which a backoff ends, a request times
  out or a wait reaches the stall threshold (:class:`~orchestrator.controller.queue_walk.QueueWalk`). Until then
  expiring, sending and stall reports would find nothing, so a tick over thousands of queued topics costs O(1).
* Each DISABLED appended is one observation of ``tieredctl_disablement_duration_seconds`` (when metrics are given):
  from when this controller's queue took the topic's epoch in to the append.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import structlog

from orchestrator import crash_points
from orchestrator.admin_api.responses import normalized
from orchestrator.errors import (
    StaleControllerEpoch,
    StaleTieredEpoch,
    TieredError,
    UnknownServerError,
    UnknownTopicOrPartition,
)
from orchestrator.ids import ZERO_UUID, Uuid
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.metrics import ControllerMetrics
from orchestrator.protocol import messages as m
from orchestrator.settings import DisablementSettings
from remote_storage.rlmm import RemoteLogMetadataManager

from . import disablement_queue as dq
from . import retry_queue as rq
from . import tiering
from .queue_walk import QueueWalk
from .state import ControllerState

log = structlog.get_logger(__name__)

ALL_PARTITIONS = -1

#: Newly stalled topics of one broker logged one line each; past this many they are logged in one line.
STALLS_LOGGED_ONE_BY_ONE = 20


class DisableRequestBody(m.DisableRemoteTopicRequest):
    """A DisableRemoteTopic request as the driver hands it out, to be given back with its outcome.

    Besides the schema's fields it carries ``attempt``: not a wire field (the codec encodes schema fields only), it
    numbers the request so that :meth:`DisablementDriver.on_responses`, given the same body back, can tell a late
    reply to an attempt already timed out from the reply to the attempt in flight.
    """

    attempt: int


DisableOutcome = tuple[DisableRequestBody, m.DisableRemoteTopicResponse | None, TieredError | None]
"""One request's outcome as the sender hands it back: the body it was given, and a reply, an error, or neither."""


def batch_request(bodies: Sequence[DisableRequestBody]) -> m.DisableRemoteTopicRequest:
    """The version 1 request carrying ``bodies`` (requests to one broker incarnation, every partition of each
    topic) in one exchange."""
    first = bodies[0]
    return m.DisableRemoteTopicRequest(
        controller_epoch=first["controller_epoch"],
        broker_epoch=first["broker_epoch"],
        topics=[
            m.DisableTopic(
                topic_id=b["topic_id"],
                tiered_epoch=b["tiered_epoch"],
                policy=b["policy"],
                assigned_partitions=b["assigned_partitions"],
            )
            for b in bodies
        ],
    )


def split_batch_response(
    bodies: Sequence[DisableRequestBody], response: m.DisableRemoteTopicResponse
) -> list[DisableOutcome]:
    """Each body's outcome from the version 1 ``response`` to :func:`batch_request` (``bodies``), as a version 0
    answer of its own: the request's error for every topic when the whole request was refused, else the topic's
    entry. A topic the response does not answer for is an UNKNOWN_SERVER_ERROR outcome (retried like any error)."""
    if response["error_code"] != 0:
        refused = m.DisableRemoteTopicResponse(
            error_code=response["error_code"], error_message=response.get("error_message")
        )
        return [(b, refused, None) for b in bodies]
    answers = {entry["topic_id"]: entry for entry in response["topics"]}
    out: list[DisableOutcome] = []
    for b in bodies:
        entry = answers.get(b["topic_id"])
        if entry is None:
            missing = UnknownServerError(
                f"the broker's DisableRemoteTopic reply has no entry for topic {b['topic_id']}"
            )
            out.append((b, None, missing))
            continue
        answer = m.DisableRemoteTopicResponse(
            error_code=entry["error_code"],
            error_message=entry["error_message"],
            status=entry["status"],
            tiered_epoch=entry["tiered_epoch"],
            partitions_total=entry["partitions_total"],
            partitions_done=entry["partitions_done"],
            segments_deleted=entry["segments_deleted"],
            segments_remaining=entry["segments_remaining"],
        )
        out.append((b, answer, None))
    return out


@dataclass(frozen=True, slots=True)
class OwedRemoteData:
    """What the RLMM still holds of one partition of a delete-policy topic: segments not DELETE_SEGMENT_FINISHED."""

    partition: int
    segments: int
    size_bytes: int


def _where(topic_id: Uuid, broker_id: int, tiered_epoch: int) -> dict[str, object]:
    """A reply's fields in a log line (built only for a line that is written: a bulk disablement reads thousands)."""
    return {"topic_id": str(topic_id), "broker_id": broker_id, "tiered_epoch": tiered_epoch}


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
        self._progress: dict[Uuid, dict[int, dict[int, tuple[int, int]]]] = {}  # topic -> epoch -> broker -> counts
        self._walk: QueueWalk[dq.QueuedDisablement] = QueueWalk(state, settings, watch_stalls=True)

    def due_requests(self) -> list[tuple[int, DisableRequestBody]]:
        """The DisableRemoteTopic requests to send now, as (broker id, request body); they are now in flight.

        Raises :class:`StaleControllerEpoch` instead of handing out requests once the lease has moved on.
        """
        state = self._state
        state.refresh()
        state.queue, sends = self._walk.take_due(state.queue)
        out: list[tuple[int, DisableRequestBody]] = []
        if sends:
            per_broker: dict[int, int] = {}
            for s in sends:
                per_broker[s.broker_id] = per_broker.get(s.broker_id, 0) + 1
            log.debug("disable.send", topics_per_broker=per_broker)
        for s in sends:
            body = DisableRequestBody(
                partition_id=ALL_PARTITIONS,
                topic_id=s.topic_id,
                tiered_epoch=s.job.tiered_epoch,
                controller_epoch=state.controller_epoch,
                broker_epoch=s.broker_epoch,
                policy=int(s.job.policy),
                assigned_partitions=sorted(s.duty.assigned),
                attempt=s.attempt,
            )
            out.append((s.broker_id, body))
        return out

    def on_responses(self, broker_id: int, outcomes: Sequence[DisableOutcome]) -> None:
        """Feed the outcomes of requests to ``broker_id`` (the topics of one batched request, or one request), each
        a response body (version 0's shape: one topic's answer), a transport error, or neither (a timeout).

        Every outcome is recorded first; then DISABLED is appended, in one batch, for every topic they complete.
        Raises :class:`StaleControllerEpoch` if the broker says a newer controller exists (after recording the
        replies, before any append; the driver steps down).

        Logged per call, not per topic (a bulk disablement answers thousands of topics at once): one
        ``disable.ack`` line listing every topic acknowledged (``topics``: topic id and tiered epoch), one
        ``disable.retry`` warning per distinct error with the topics it hit, one ``disable.stale_tiered_epoch``
        line; replies ignored and IN_PROGRESS polls at debug, per topic.
        """
        state = self._state
        acked: list[dict[str, object]] = []
        retried: dict[tuple[int, str | None], list[tuple[str, rq.QueuedBroker[dq.Duty]]]] = {}
        stale_epoch: list[str] = []
        deposed = False
        for request_body, response_body, error in outcomes:
            topic_id, tiered_epoch = request_body["topic_id"], request_body["tiered_epoch"]
            kind, code, message = self._record(broker_id, request_body, response_body, error)
            if kind == "ack":
                acked.append({"topic_id": str(topic_id), "tiered_epoch": tiered_epoch})
            elif kind == "retry":
                pending = state.queue.pending_brokers(topic_id)[broker_id]
                retried.setdefault((code, message), []).append((str(topic_id), pending))
            if code == StaleTieredEpoch.code:
                stale_epoch.append(str(topic_id))
            deposed = deposed or code == StaleControllerEpoch.code
        if acked:
            log.info("disable.ack", broker_id=broker_id, topics=acked)
        for (code, message), topics in retried.items():
            log.warning(
                "disable.retry",
                broker_id=broker_id,
                error_code=code,
                detail=message,
                topic_ids=[t for t, _ in topics],
                attempts_without_progress=max(p.attempts_without_progress for _, p in topics),
                next_attempt_ms=min(p.next_attempt_ms for _, p in topics),
            )
        if stale_epoch:
            log.info("disable.stale_tiered_epoch", broker_id=broker_id, topic_ids=stale_epoch)
        if deposed:
            state.deposed_by_broker(broker_id)
        self.complete_finished(only=[body["topic_id"] for body, _, _ in outcomes])

    def _record(
        self,
        broker_id: int,
        request_body: DisableRequestBody,
        response_body: m.DisableRemoteTopicResponse | None,
        error: TieredError | None,
    ) -> tuple[str, int, str | None]:
        """Feed one outcome to the queue; returns what it was ("ignored", "retry", "in_progress", "ack") with its
        error code and message."""
        state = self._state
        topic_id = request_body["topic_id"]
        tiered_epoch = request_body["tiered_epoch"]
        about_the_job = response_body is not None and response_body.get("tiered_epoch", -1) == tiered_epoch
        outcome = rq.read_outcome(response_body, error, about_the_job=about_the_job)
        code, message, in_progress = outcome.error_code, outcome.error_message, outcome.in_progress
        if code == 0 and response_body is not None:
            self._record_progress(topic_id, tiered_epoch, broker_id, response_body)
        before = state.queue
        state.queue = dq.on_response(
            before,
            topic_id,
            broker_id,
            tiered_epoch,
            outcome,
            now_ms=state.now_ms(),
            rng=state.rng,
            retries=self._walk.retries,
            attempt=request_body["attempt"],
        )
        if state.queue is before:
            log.debug("disable.reply_ignored", **_where(topic_id, broker_id, tiered_epoch), error_code=code)
            return "ignored", code, message
        if code != 0:
            return "retry", code, message
        if in_progress:
            assert response_body is not None
            pending = state.queue.pending_brokers(topic_id)[broker_id]
            log.debug(
                "disable.in_progress",
                **_where(topic_id, broker_id, tiered_epoch),
                partitions_done=response_body.get("partitions_done"),
                partitions_total=response_body.get("partitions_total"),
                segments_deleted=response_body.get("segments_deleted"),
                segments_remaining=response_body.get("segments_remaining"),
                attempts_without_progress=pending.attempts_without_progress,
                next_attempt_ms=pending.next_attempt_ms,
            )
            return "in_progress", code, message
        return "ack", code, message

    def expire_requests(self, now: int) -> None:
        """Give up on requests in flight for longer than the request timeout (they are retried after a backoff)."""
        state = self._state
        state.queue = self._walk.expire(state.queue, now)

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
        completed: list[dict[str, object]] = []
        for t in done:
            topic = image.topics[t]
            if self._metrics is not None:
                self._metrics.disablement_completed(topic.policy.name.lower(), (now - since_ms[t]) / 1000)
            completed.append(
                {
                    "topic": topic.name,
                    "topic_id": str(t),
                    "tiered_epoch": topic.tiered_epoch,
                    "policy": topic.policy.name,
                }
            )
        log.info("disable.completed", topics=completed)

    def _remote_data_gone(self, topic: TopicImage) -> bool:
        """The backstop before DISABLED: True unless ``topic`` is delete-policy and the RLMM still holds some of its
        remote segments; then the brokers answerable for them are asked again (:func:`disablement_queue.reopen`)."""
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
            before,
            state.image,
            topic.topic_id,
            partitions,
            reason=reason,
            now_ms=state.now_ms(),
            rng=state.rng,
            retries=self._walk.retries,
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
        and stalls anew. A broker with more than :data:`STALLS_LOGGED_ONE_BY_ONE` newly stalled topics at one check
        (a fenced broker in a bulk disablement of thousands) gets one line instead: how many, the first topics by
        name, and its errors counted, so a bulk stall is read at a glance and not as thousands of lines."""
        queue = self._state.queue
        by_broker: dict[int, list[tuple[Uuid, str | None, rq.QueuedBroker[dq.Duty] | None]]] = {}
        for topic_id, broker_id in self._walk.new_stalls(queue, now):
            entry = queue.topic(topic_id)
            pb = entry.pending.get(broker_id) if entry is not None else None
            by_broker.setdefault(broker_id, []).append((topic_id, entry.name if entry is not None else None, pb))
        for broker_id, stalls in sorted(by_broker.items()):
            if len(stalls) > STALLS_LOGGED_ONE_BY_ONE:
                errors = Counter(pb.last_error for _, _, pb in stalls if pb is not None and pb.last_error)
                log.warning(
                    "disable.stalled",
                    broker_id=broker_id,
                    topics=len(stalls),
                    first_topics=sorted(str(name) for _, name, _ in stalls)[:STALLS_LOGGED_ONE_BY_ONE],
                    fenced=any(pb is not None and pb.fenced for _, _, pb in stalls),
                    last_errors=dict(errors.most_common()),
                )
                continue
            for topic_id, name, pb in stalls:
                log.warning(
                    "disable.stalled",
                    topic=name,
                    topic_id=str(topic_id),
                    broker_id=broker_id,
                    attempts=pb.attempts if pb is not None else None,
                    last_error=pb.last_error if pb is not None else None,
                    fenced=pb.fenced if pb is not None else None,
                )

    def describe_tiered_state(self, body: m.DescribeTieredStateRequest) -> m.DescribeTieredStateResponse:
        req = normalized("DescribeTieredStateRequest", 0, body)
        state = self._state
        image = state.refresh()
        stalled = set(rq.stalled(state.queue, state.now_ms(), self._settings.stall_threshold_ms))
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
                    attempts_without_progress=pb.attempts_without_progress,
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
