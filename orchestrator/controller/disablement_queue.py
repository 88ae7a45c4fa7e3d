"""The disablement queue (KIP-950's "local queue within the controller context"): the retry queue's disablement
policy, pure and immutable.

For every topic that is DISABLING at tiered epoch E it tracks which brokers still owe an acknowledgement of E. The
machine (in flight, attempts, backoff, progress, expiry, due, replies, next event) is ``retry_queue.py``; this module
says who owes the work and when it is done. Every function takes the queue (and ``now_ms``, and an ``rng`` where
randomness is needed) and returns a new queue; the controller core feeds it images and replies and sends the
requests :func:`retry_queue.due` hands out (as DisableRemoteTopic).

Who must acknowledge (ARCHITECTURE §4): every *registered* broker that hosts a replica of the topic, and every broker
assigned a leaderless partition (below). A broker's duty is the set of partitions it hosts, the set it leads and
the set it is assigned. An acknowledgement covers the duty the broker had *when the
request was sent* (the broker handles a request with an image at least that new), and a broker whose duty grows
after it acknowledged (KIP-253 partitions added, a leadership change making it leader, a reassignment) owes a new
acknowledgement. So "partitions added" and "leadership change" are one rule, and an in-flight request can never
be credited with a duty that appeared after it was sent. If the duty changes at all while a request is in flight
(a leadership that moves away and back, say), the broker may have handled it under either duty, so its "done" is
not credited and it is asked again at once; this relies on the queue seeing every image, which the core ensures
by reconciling after each of its appends (it is the only writer).

Leaderless partitions under the delete policy: remote deletion must not depend on a live leader (with replication
factor 1, a dead broker's partitions have none, for ever once it is decommissioned), and the RLMM knows every
segment of every partition. So :func:`leaderless_assignment` gives each partition of a DISABLING(delete) topic whose
leader is not a registered, unfenced broker to one that is, spread by partition id over them (sorted by id:
deterministic, so every controller computes the same), and that partition is in the broker's ``assigned`` duty: its
request names it (DisableRemoteTopic's tagged AssignedPartitions) and the broker deletes its remote segments from
the RLMM alone. The assignment is a function of the image, so a partition that regains a leader, or is given to
another broker when the live set changes, is the "duty grew" rule again: whoever now owes it is asked, and an
acknowledgement given as the partition's leader also covers it as an assignment (the leader deleted its remote
data too). Retain assigns nothing: leaderless partitions copy nothing, and their remote data stays.

The RLMM backstop (``disablement.py``): before DISABLED(delete) is appended, the controller checks that the RLMM
holds no segment of the topic id that is not DELETE_SEGMENT_FINISHED. If some remain, :func:`reopen` takes the
acknowledgement back from each broker answerable for those partitions (leader or assignee) and asks it again, after
the backoff of the topic's ``remote_checks_failed`` (so a broker that keeps answering done without deleting is asked
ever more rarely), and the topic stays DISABLING.

Brokers' lives: a fenced broker stays required (its replicas still exist) but is not sent to; when it registers
again (a new broker epoch) or is unfenced, its backoff is reset and it is asked at once. An acknowledgement
survives a re-registration (the work is done and journaled; DisableRemoteTopic is idempotent), but not an
unregistration: an unregistered (decommissioned) broker leaves every pending and acknowledged set, and owes a
fresh acknowledgement if it ever comes back. A topic that is deleted, or leaves DISABLING, leaves the queue; a
new tiered epoch starts the topic over.

Replies: besides the machine's rules (late and duplicate replies), a reply for another epoch than the queued one
changes nothing. Done (to a request whose duty did not move) moves the broker from the pending set to the
acknowledged one. KIP-950 retries "until it receives a successful response", so every error is retried;
:func:`~orchestrator.controller.retry_queue.stalled` reports brokers that make no progress.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.records import DisablePolicy, TieredState

from . import retry_queue as rq

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Duty:
    """What a broker is answerable for in one topic: the partitions it hosts, those it leads, and the leaderless
    ones whose remote data it was assigned to delete (delete policy)."""

    hosted: frozenset[int] = frozenset()
    leading: frozenset[int] = frozenset()
    assigned: frozenset[int] = frozenset()

    def covers(self, other: Duty) -> bool:
        """Whether an acknowledgement of this duty also answers for ``other``. Leading a partition under the delete
        policy includes deleting its remote data, so a led partition covers the same partition assigned."""
        return (
            other.hosted <= self.hosted
            and other.leading <= self.leading
            and other.assigned <= self.assigned | self.leading
        )


NO_DUTY = Duty()


@dataclass(frozen=True, slots=True)
class Ack:
    """A broker's acknowledgement of the queued epoch, and the duty it covers."""

    duty: Duty
    at_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedDisablement(rq.QueuedJob[Duty]):
    """A DISABLING topic in the queue, at one tiered epoch: who still owes (``pending``) and who acknowledged."""

    tiered_epoch: int
    policy: DisablePolicy
    acked: Mapping[int, Ack] = field(default_factory=lambda: _EMPTY)
    remote_checks_failed: int = 0  # RLMM backstops that found remote data left after every broker acknowledged


DisablementQueue = rq.RetryQueue[QueuedDisablement]
EMPTY_QUEUE: DisablementQueue = rq.RetryQueue()


SendDisable = rq.Send[QueuedDisablement, Duty]
"""A command: send DisableRemoteTopic about the job's topic at its tiered epoch and policy, its ``duty.assigned``
naming the leaderless partitions whose remote data the broker is to delete."""


def _acknowledged(
    job: QueuedDisablement, broker_id: int, entry: rq.QueuedBroker[Duty], now_ms: int
) -> QueuedDisablement:
    """The policy's "done": the broker moves from pending to acknowledged, for the duty its request covered."""
    assert entry.sent_duty is not None  # in flight: sent with a duty
    pending = {b: p for b, p in job.pending.items() if b != broker_id}
    acked = {**job.acked, broker_id: Ack(entry.sent_duty, now_ms)}
    return replace(job, pending=MappingProxyType(pending), acked=MappingProxyType(acked))


# --- who owes ------------------------------------------------------------------------------------------------------


def leaderless_assignment(topic: TopicImage, image: MetadataImage) -> dict[int, int]:
    """partition -> broker: who deletes the remote data of each partition of a DISABLING(delete) topic that has no
    live leader (leader -1, or a broker that is not registered and unfenced): the live broker at index
    ``partition_id % len(live)`` of :func:`~orchestrator.controller.retry_queue.live_brokers`. Empty for other
    topics, or when no broker is live."""
    if topic.tiered_state != TieredState.DISABLING or topic.policy != DisablePolicy.DELETE:
        return {}
    live = rq.live_brokers(image)
    alive = set(live)
    return rq.spread((p.partition_id for p in topic.partitions.values() if p.leader not in alive), live)


def deleting_brokers(topic: TopicImage, image: MetadataImage) -> dict[int, int]:
    """partition -> the broker answerable for its remote data under the delete policy: its live leader, or its
    assignee (:func:`leaderless_assignment`); -1 if there is none (retain, or no live broker)."""
    assignment = leaderless_assignment(topic, image)
    alive = set(rq.live_brokers(image))
    return {
        p.partition_id: p.leader if p.leader in alive else assignment.get(p.partition_id, -1)
        for p in topic.partitions.values()
    }


def duties(topic: TopicImage, image: MetadataImage) -> dict[int, Duty]:
    """Every broker named as a replica of ``topic`` (registered or not), or assigned one of its leaderless
    partitions, with its duty."""
    hosted: dict[int, set[int]] = {}
    leading: dict[int, set[int]] = {}
    assigned: dict[int, set[int]] = {}
    for p in topic.partitions.values():
        for b in p.replicas:
            hosted.setdefault(b, set()).add(p.partition_id)
        if p.leader >= 0:
            leading.setdefault(p.leader, set()).add(p.partition_id)
    for partition, b in leaderless_assignment(topic, image).items():
        assigned.setdefault(b, set()).add(partition)
    return {
        b: Duty(frozenset(hosted.get(b, ())), frozenset(leading.get(b, ())), frozenset(assigned.get(b, ())))
        for b in set(hosted) | set(leading) | set(assigned)
    }


def required(topic: TopicImage, image: MetadataImage) -> dict[int, Duty]:
    """The brokers that must acknowledge: registered brokers hosting a replica of the topic or assigned one of its
    leaderless partitions, with their duty."""
    return {b: d for b, d in duties(topic, image).items() if b in image.brokers and (d.hosted or d.assigned)}


def rebuild(image: MetadataImage, now_ms: int) -> DisablementQueue:
    """The queue for ``image`` from scratch (controller start or failover): every DISABLING topic, every
    required broker due now. Acknowledgements made to a previous controller are not known, so everyone is
    asked again; DisableRemoteTopic is idempotent, so that costs one round trip (KIP-950 failure modes)."""
    return on_image(EMPTY_QUEUE, image, now_ms)


def on_image(
    queue: DisablementQueue, image: MetadataImage, now_ms: int, *, previous: MetadataImage | None = None
) -> DisablementQueue:
    """Reconcile the queue with a newer image (see the module docstring for every rule).

    ``previous`` is the image the queue was last reconciled with. Images are copy-on-write, so a topic whose
    TopicImage object is the same in both, with the same brokers map, has nothing to reconcile: its entry is
    kept as is. That makes a reconcile cost what changed, not the size of the queue.
    """
    brokers_same = previous is not None and previous.brokers is image.brokers
    changed = False
    disabling: set[Uuid] = set()
    with queue.topics.mutate() as topics:
        for topic in image.topics.values():
            if topic.tiered_state != TieredState.DISABLING:
                continue
            disabling.add(topic.topic_id)
            current = queue.topics.get(topic.topic_id)
            entry = current
            if entry is None or entry.tiered_epoch != topic.tiered_epoch:
                entry = QueuedDisablement(
                    topic_id=topic.topic_id,
                    name=topic.name,
                    since_ms=now_ms,
                    tiered_epoch=topic.tiered_epoch,
                    policy=topic.policy,
                )
            elif brokers_same and previous is not None and previous.topics.get(topic.topic_id) is topic:
                continue
            reconciled = _reconcile(entry, topic, image, now_ms)
            if reconciled is not current:
                topics[topic.topic_id] = reconciled
                changed = True
        for topic_id in queue.topics:
            if topic_id not in disabling:  # deleted, or no longer DISABLING at this epoch: it leaves the queue
                del topics[topic_id]
                changed = True
        updated = topics.finish()
    return rq.RetryQueue(updated) if changed else queue


def _reconcile(entry: QueuedDisablement, topic: TopicImage, image: MetadataImage, now_ms: int) -> QueuedDisablement:
    pending: dict[int, rq.QueuedBroker[Duty]] = {}
    acked: dict[int, Ack] = {}
    for broker_id, duty in sorted(required(topic, image).items()):
        ack = entry.acked.get(broker_id)
        if ack is not None and ack.duty.covers(duty):
            acked[broker_id] = ack
            continue
        registration = image.brokers[broker_id]
        pending[broker_id] = rq.owe(
            entry.pending.get(broker_id),
            duty,
            broker_epoch=registration.broker_epoch,
            fenced=registration.fenced,
            now_ms=now_ms,
        )
    if pending == dict(entry.pending) and acked == dict(entry.acked):
        return entry
    return replace(entry, pending=MappingProxyType(pending), acked=MappingProxyType(acked))


# --- replies ------------------------------------------------------------------------------------------------------


def on_response(
    queue: DisablementQueue,
    topic_id: Uuid,
    broker_id: int,
    tiered_epoch: int,
    outcome: rq.Outcome,
    *,
    now_ms: int,
    rng: random.Random,
    retries: rq.Retries = rq.DEFAULT_RETRIES,
    attempt: int | None = None,
) -> DisablementQueue:
    """Feed one reply (or timeout) for the request to ``broker_id`` about ``tiered_epoch``; a reply for an epoch (or
    a topic) no longer queued changes nothing. ``attempt`` is the :attr:`retry_queue.Send.attempt` the reply
    answers; None matches the request in flight. An IN_PROGRESS reply without counts shows no progress."""
    job = queue.topics.get(topic_id)
    if job is None or job.tiered_epoch != tiered_epoch:
        return queue
    return rq.on_reply(
        queue,
        topic_id,
        broker_id,
        outcome,
        attempt=attempt,
        now_ms=now_ms,
        rng=rng,
        retries=retries,
        credit=_acknowledged,
    )


# --- when it is done ----------------------------------------------------------------------------------------------


def completed(queue: DisablementQueue, image: MetadataImage, only: Iterable[Uuid] | None = None) -> list[Uuid]:
    """Topics whose disablement at the image's epoch is acknowledged by every required broker, for its current
    duty: the topics to mark DISABLED. Checked against ``image`` itself, so a queue that has not yet seen a
    newer image (e.g. a partition just added) can never complete a topic early. ``only`` limits the check to
    these topics (after one broker's reply only its topic can have completed)."""
    out: list[Uuid] = []
    candidates = queue.topics.items() if only is None else ((t, queue.topics[t]) for t in only if t in queue.topics)
    for topic_id, t in candidates:
        topic = image.topics.get(topic_id)
        if topic is None or topic.tiered_state != TieredState.DISABLING or topic.tiered_epoch != t.tiered_epoch:
            continue
        if t.pending:
            continue
        need = required(topic, image)
        if all(b in t.acked and t.acked[b].duty.covers(d) for b, d in need.items()):
            out.append(topic_id)
    return out


def reopen(
    queue: DisablementQueue,
    image: MetadataImage,
    topic_id: Uuid,
    owed_partitions: Iterable[int],
    *,
    reason: str,
    now_ms: int,
    rng: random.Random,
    retries: rq.Retries = rq.DEFAULT_RETRIES,
) -> DisablementQueue:
    """The RLMM backstop found remote data of ``owed_partitions`` left: take back the acknowledgement of every
    broker answerable for one of them (:func:`deleting_brokers`) and ask it again after the backoff of the topic's
    ``remote_checks_failed`` (counted up), with ``reason`` as its last error. A partition nobody can answer for
    (no live broker) or whose broker is still pending changes nothing: the topic simply does not complete."""
    t = queue.topics.get(topic_id)
    topic = image.topics.get(topic_id)
    if t is None or topic is None or topic.tiered_epoch != t.tiered_epoch:
        return queue
    need = required(topic, image)
    deleting = deleting_brokers(topic, image)
    answerable = {deleting.get(p, -1) for p in owed_partitions}
    again = sorted(b for b in answerable if b in t.acked and b in need)
    if not again:
        return queue
    checks = t.remote_checks_failed + 1
    pending = dict(t.pending)
    acked = {b: a for b, a in t.acked.items() if b not in again}
    for b in again:
        registration = image.brokers[b]
        pending[b] = rq.QueuedBroker(
            broker_epoch=registration.broker_epoch,
            duty=need[b],
            fenced=registration.fenced,
            attempts_without_progress=checks,
            last_error=reason,
            next_attempt_ms=now_ms + retries.backoff_ms(checks, rng),
            waiting_since_ms=now_ms,
        )
    topic_entry = replace(
        t, pending=MappingProxyType(pending), acked=MappingProxyType(acked), remote_checks_failed=checks
    )
    return rq.RetryQueue(queue.topics.set(topic_id, topic_entry))
