"""The remote deletion queue: a deleted topic's remote data, partition by partition (KIP-405), as a policy of the
retry queue, pure and immutable.

The machine (in flight, attempts, backoff, progress, expiry, due, replies, next event) is ``retry_queue.py``, the
one the disablement runs on; this module says who owes the work and when it is done. Nothing here reads a clock,
sleeps or does I/O; the driver (``topic_deletion.py``) feeds it targets read from the RLMM and replies, and sends
the requests :func:`retry_queue.due` hands out (as DeleteRemotePartitions, naming the broker's ``duty``).

What is owed comes from the RLMM, not from replies: a target is a topic id the metadata image no longer has whose
RLMM partitions are not all DELETE_PARTITION_FINISHED, with those partitions. So the queue after a controller start
or failover is :func:`reconcile` of an empty queue with the targets (every partition MARKED or STARTED and not
FINISHED), and a broker's "done" is believed only once the RLMM shows its partitions FINISHED: a partition the RLMM
still holds stays assigned, and its broker is asked again after the backoff.

Who deletes: remote deletion never needs a leader (the topic is gone; the RLMM knows every segment), so each
partition left goes to a registered, unfenced broker, ``live[partition % len(live)]`` over the live brokers by id,
as leaderless partitions are assigned under the delete policy (:func:`retry_queue.spread`). The assignment is a
function of the image and the targets, so it moves when a broker is fenced or unregistered; a broker that loses
all its partitions leaves the topic's entry (a late reply from it is ignored), and one with a new registration (a
new incarnation) is asked at once. With no live broker nothing is sent: the topic waits, and the status says so.
A topic leaves the queue when the RLMM shows all its partitions FINISHED.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType

from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage

from . import retry_queue as rq

Partitions = frozenset[int]  # a broker's duty here: the partitions it deletes


@dataclass(frozen=True, slots=True)
class DeletionTarget:
    """A deleted topic id whose remote data is still owed, as the RLMM says: partitions not FINISHED."""

    topic_id: Uuid
    name: str
    remaining: frozenset[int]


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedDeletion(rq.QueuedJob[Partitions]):
    """A deleted topic in the queue: the partitions the RLMM still holds, and who deletes them (``pending``)."""

    remaining: frozenset[int]


RemoteDeletionQueue = rq.RetryQueue[QueuedDeletion]
EMPTY_DELETION_QUEUE: RemoteDeletionQueue = rq.RetryQueue()


SendDeleteRemotePartitions = rq.Send[QueuedDeletion, Partitions]
"""A command: send DeleteRemotePartitions for the partitions of ``duty`` of the job's topic."""


def assignment(partitions: Iterable[int], live: Sequence[int]) -> dict[int, Partitions]:
    """broker -> the partitions it deletes: partition p goes to ``live[p % len(live)]``; empty with no live broker."""
    out: dict[int, set[int]] = {}
    for p, b in rq.spread(partitions, live).items():
        out.setdefault(b, set()).add(p)
    return {b: frozenset(ps) for b, ps in out.items()}


def reconcile(
    queue: RemoteDeletionQueue, targets: Iterable[DeletionTarget], image: MetadataImage, now_ms: int
) -> RemoteDeletionQueue:
    """The queue for these targets and brokers: finished topics leave, partitions move with the live brokers."""
    live = rq.live_brokers(image)
    owed: set[Uuid] = set()
    changed = False
    with queue.topics.mutate() as topics:
        for target in targets:
            if not target.remaining:
                continue
            owed.add(target.topic_id)
            current = queue.topics.get(target.topic_id)
            entry = current or QueuedDeletion(
                topic_id=target.topic_id, name=target.name, since_ms=now_ms, remaining=target.remaining
            )
            pending = {
                broker_id: rq.owe(
                    entry.pending.get(broker_id),
                    partitions,
                    broker_epoch=image.brokers[broker_id].broker_epoch,
                    fenced=False,
                    now_ms=now_ms,
                )
                for broker_id, partitions in sorted(assignment(target.remaining, live).items())
            }
            if pending != dict(entry.pending) or entry.remaining != target.remaining:
                entry = replace(entry, remaining=target.remaining, pending=MappingProxyType(pending))
            if entry is not current:
                topics[target.topic_id] = entry
                changed = True
        for topic_id in queue.topics:
            if topic_id not in owed:  # every partition FINISHED: the topic leaves the queue
                del topics[topic_id]
                changed = True
        updated = topics.finish()
    return rq.RetryQueue(updated) if changed else queue


def on_response(
    queue: RemoteDeletionQueue,
    topic_id: Uuid,
    broker_id: int,
    outcome: rq.Outcome,
    *,
    attempt: int,
    now_ms: int,
    rng: random.Random,
    retries: rq.Retries = rq.DEFAULT_RETRIES,
) -> RemoteDeletionQueue:
    """Feed one reply (or a timeout) to the request ``attempt`` to ``broker_id``.

    Done is not credited here (no credit): the driver reconciles with the RLMM next, which drops the broker once its
    partitions are FINISHED. If they are not, the broker is asked again after the backoff, as for a reply without
    progress.
    """
    return rq.on_reply(
        queue, topic_id, broker_id, outcome, attempt=attempt, now_ms=now_ms, rng=rng, retries=retries, credit=None
    )
