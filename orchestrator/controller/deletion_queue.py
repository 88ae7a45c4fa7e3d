"""The remote deletion queue: a deleted topic's remote data, partition by partition (KIP-405), pure and immutable.

A sibling of the disablement queue (``queue.py``), with its retry policy: the same backoff (:func:`queue.backoff_ms`,
one declared tenacity policy), the same progress rule (:class:`queue.Progress`: only a reply showing more work done
resets the backoff), at most one request in flight per (topic, broker), numbered by ``attempt`` so that a late or
duplicated reply changes nothing. Nothing here reads a clock, sleeps or does I/O; the driver
(``topic_deletion.py``) feeds it targets read from the RLMM and replies, and sends the
:class:`SendDeleteRemotePartitions` commands it returns.

What is owed comes from the RLMM, not from replies: a target is a topic id the metadata image no longer has whose
RLMM partitions are not all DELETE_PARTITION_FINISHED, with those partitions. So the queue after a controller start
or failover is :func:`reconcile` of an empty queue with the targets (every partition MARKED or STARTED and not
FINISHED), and a broker's "done" is believed only once the RLMM shows its partitions FINISHED: a partition the RLMM
still holds stays assigned, and its broker is asked again after the backoff.

Who deletes: remote deletion never needs a leader (the topic is gone; the RLMM knows every segment), so each
partition left goes to a registered, unfenced broker, ``live[partition % len(live)]`` over the live brokers by id,
as leaderless partitions are assigned under the delete policy (:func:`queue.leaderless_assignment`). The assignment
is a function of the image and the targets, so it moves when a broker is fenced or unregistered; a broker that loses
all its partitions leaves the topic's entry (a late reply from it is ignored), and one with a new registration (a
new incarnation) is asked at once. With no live broker nothing is sent: the topic waits, and the status says so.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from orchestrator.errors import RequestTimedOut
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage

from .queue import DEFAULT_REPOLL_MS, Progress, after_failure, after_poll, live_brokers, reply_error

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class DeletionTarget:
    """A deleted topic id whose remote data is still owed, as the RLMM says: partitions not FINISHED."""

    topic_id: Uuid
    name: str
    remaining: frozenset[int]


@dataclass(frozen=True, slots=True)
class DeletingBroker:
    """A broker deleting some partitions of one deleted topic."""

    broker_epoch: int  # the registration it is sent to
    partitions: frozenset[int]  # assigned now
    attempts: int = 0
    failures: int = 0  # consecutive attempts without progress: the backoff's attempt number
    last_error: str | None = None
    progress: Progress | None = None
    last_attempt_ms: int = -1
    next_attempt_ms: int = 0
    in_flight: bool = False


@dataclass(frozen=True, slots=True)
class DeletingTopic:
    topic_id: Uuid
    name: str
    since_ms: int
    remaining: frozenset[int]
    brokers: Mapping[int, DeletingBroker] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class RemoteDeletionQueue:
    topics: Mapping[Uuid, DeletingTopic] = field(default_factory=lambda: _EMPTY)

    def topic(self, topic_id: Uuid) -> DeletingTopic | None:
        return self.topics.get(topic_id)


EMPTY_DELETION_QUEUE = RemoteDeletionQueue()


@dataclass(frozen=True, slots=True)
class SendDeleteRemotePartitions:
    """A command: send DeleteRemotePartitions for these partitions of ``topic_id`` to ``broker_id``."""

    topic_id: Uuid
    name: str
    broker_id: int
    broker_epoch: int
    partitions: frozenset[int]
    attempt: int


def assignment(partitions: Iterable[int], live: Sequence[int]) -> dict[int, frozenset[int]]:
    """broker -> the partitions it deletes: partition p goes to ``live[p % len(live)]``; empty with no live broker."""
    if not live:
        return {}
    out: dict[int, set[int]] = {}
    for p in partitions:
        out.setdefault(live[p % len(live)], set()).add(p)
    return {b: frozenset(ps) for b, ps in out.items()}


def reconcile(
    queue: RemoteDeletionQueue, targets: Iterable[DeletionTarget], image: MetadataImage, now_ms: int
) -> RemoteDeletionQueue:
    """The queue for these targets and brokers: finished topics leave, partitions move with the live brokers."""
    live = live_brokers(image)
    topics: dict[Uuid, DeletingTopic] = {}
    for target in targets:
        if not target.remaining:
            continue
        entry = queue.topics.get(target.topic_id) or DeletingTopic(
            target.topic_id, target.name, since_ms=now_ms, remaining=target.remaining
        )
        brokers: dict[int, DeletingBroker] = {}
        for broker_id, partitions in sorted(assignment(target.remaining, live).items()):
            epoch = image.brokers[broker_id].broker_epoch
            current = entry.brokers.get(broker_id)
            if current is None:
                brokers[broker_id] = DeletingBroker(epoch, partitions, next_attempt_ms=now_ms)
            elif current.broker_epoch != epoch:  # a new incarnation: what was in flight is moot; ask at once
                brokers[broker_id] = replace(
                    current,
                    broker_epoch=epoch,
                    partitions=partitions,
                    failures=0,
                    progress=None,
                    in_flight=False,
                    next_attempt_ms=now_ms,
                )
            elif current.partitions != partitions:
                brokers[broker_id] = replace(current, partitions=partitions)
            else:
                brokers[broker_id] = current
        if brokers == dict(entry.brokers) and entry.remaining == target.remaining:
            topics[target.topic_id] = entry
        else:
            topics[target.topic_id] = replace(entry, remaining=target.remaining, brokers=MappingProxyType(brokers))
    if topics.keys() == queue.topics.keys() and all(topics[t] is queue.topics[t] for t in topics):
        return queue
    return RemoteDeletionQueue(MappingProxyType(topics))


def expire(queue: RemoteDeletionQueue, now_ms: int, *, timeout_ms: int, rng: random.Random) -> RemoteDeletionQueue:
    """Count as timed out every request in flight for ``timeout_ms`` or more."""
    out = queue
    for t in queue.topics.values():
        for broker_id, b in t.brokers.items():
            if b.in_flight and now_ms - b.last_attempt_ms >= timeout_ms:
                out = _fail(
                    out, t.topic_id, broker_id, b, f"{RequestTimedOut.name}: no reply in {timeout_ms} ms", now_ms, rng
                )
    return out


def due(queue: RemoteDeletionQueue, now_ms: int) -> tuple[RemoteDeletionQueue, list[SendDeleteRemotePartitions]]:
    """The requests to send now (not in flight, backoff elapsed), and the queue with them in flight."""
    sends: list[SendDeleteRemotePartitions] = []
    topics = dict(queue.topics)
    for topic_id, t in queue.topics.items():
        brokers = dict(t.brokers)
        for broker_id, b in t.brokers.items():
            if b.in_flight or b.next_attempt_ms > now_ms:
                continue
            attempt = b.attempts + 1
            brokers[broker_id] = replace(b, attempts=attempt, in_flight=True, last_attempt_ms=now_ms)
            sends.append(SendDeleteRemotePartitions(topic_id, t.name, broker_id, b.broker_epoch, b.partitions, attempt))
        if brokers != dict(t.brokers):
            topics[topic_id] = replace(t, brokers=MappingProxyType(brokers))
    if not sends:
        return queue, sends
    return RemoteDeletionQueue(MappingProxyType(topics)), sends


def on_response(
    queue: RemoteDeletionQueue,
    topic_id: Uuid,
    broker_id: int,
    *,
    attempt: int,
    ok: bool,
    in_progress: bool,
    error_code: int,
    error_message: str | None,
    now_ms: int,
    rng: random.Random,
    repoll_ms: int = DEFAULT_REPOLL_MS,
    progress: Progress | None = None,
) -> RemoteDeletionQueue:
    """Feed one reply (or a timeout: ``ok=False``) to the request ``attempt`` to ``broker_id``.

    Done is not credited here: the driver reconciles with the RLMM next, which drops the broker once its partitions
    are FINISHED. If they are not, the broker is asked again after the backoff, as for a reply without progress.
    """
    t = queue.topics.get(topic_id)
    b = t.brokers.get(broker_id) if t is not None else None
    if t is None or b is None or not b.in_flight or attempt != b.attempts:
        return queue  # a duplicate, a late reply, or a broker no longer assigned
    progressed = progress is not None and progress.beyond(b.progress)
    if progress is not None:
        b = replace(b, progress=progress.merged(b.progress))
    if not ok:
        return _fail(queue, topic_id, broker_id, b, reply_error(error_code, error_message), now_ms, rng)
    polled = after_poll(b, progressed=in_progress and progressed, now_ms=now_ms, rng=rng, repoll_ms=repoll_ms)
    return _with_broker(queue, topic_id, broker_id, polled)


def _fail(
    queue: RemoteDeletionQueue,
    topic_id: Uuid,
    broker_id: int,
    b: DeletingBroker,
    text: str,
    now_ms: int,
    rng: random.Random,
) -> RemoteDeletionQueue:
    return _with_broker(queue, topic_id, broker_id, after_failure(b, text, now_ms, rng))


def _with_broker(queue: RemoteDeletionQueue, topic_id: Uuid, broker_id: int, b: DeletingBroker) -> RemoteDeletionQueue:
    t = queue.topics[topic_id]
    topic = replace(t, brokers=MappingProxyType({**t.brokers, broker_id: b}))
    return RemoteDeletionQueue(MappingProxyType({**queue.topics, topic_id: topic}))
