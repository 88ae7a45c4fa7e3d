"""What the controller's metrics show (:mod:`orchestrator.metrics`), computed from its state: pure functions.

:func:`controller_view` turns an image and, on the active controller, its queues into the numbers the scrape
serves; :func:`disable_result` names the outcome of one DisableRemoteTopic exchange for the ``result`` label.

Invariants:
* No I/O, no clock: the caller passes the image, the queues, the log end offset it read and the time.
* Every tiered state is in ``topics_by_state``, zeros included, so a rule on one state never sees a gap.
* The queue gauges come from the active controller only (``queues`` None on a standby): a standby owes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.errors import RequestTimedOut, TieredError, error_name
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.records import TieredState
from orchestrator.metrics import ControllerView, DisablementQueueView, MetadataView

from . import deletion_queue as dlq
from . import disablement_queue as dq
from . import retry_queue as rq

ACKNOWLEDGED = "acknowledged"
IN_PROGRESS = "in_progress"
TIMEOUT = "timeout"


def disable_result(response: Mapping[str, Any] | None, error: TieredError | None) -> str:
    """The ``result`` label of one DisableRemoteTopic exchange: acknowledged (done), in_progress, timeout, or the
    Kafka error's name (what the broker answered, or why no answer came)."""
    if error is None and response is not None and int(response.get("error_code", 0)) == 0:
        # A reply without an error, read as :func:`retry_queue.read_outcome` reads it, without building the
        # outcome: a batched exchange is counted topic by topic, thousands at a time.
        return IN_PROGRESS if int(response.get("status", 0)) == 1 else ACKNOWLEDGED
    outcome = rq.read_outcome(response, error)
    if outcome.in_progress:
        return IN_PROGRESS
    if outcome.ok:
        return ACKNOWLEDGED
    if outcome.error_code == RequestTimedOut.code:
        return TIMEOUT
    return error_name(outcome.error_code)


def queue_view(
    queue: dq.DisablementQueue, deletions: dlq.RemoteDeletionQueue, *, now_ms: int, stall_threshold_ms: int
) -> DisablementQueueView:
    oldest = min((t.since_ms for t in queue.topics.values()), default=now_ms)
    return DisablementQueueView(
        topics=len(queue.topics),
        pending_acks=rq.pending_count(queue),
        stalled_acks=len(rq.stalled(queue, now_ms, stall_threshold_ms)),
        oldest_age_s=max(0, now_ms - oldest) / 1000,
        remote_deletion_topics=len(deletions.topics),
    )


def controller_view(
    image: MetadataImage,
    *,
    queues: DisablementQueueView | None,
    controller_epoch: int | None,
    log_end_offset: int | None,
) -> ControllerView:
    """The controller's view: ``queues`` (:func:`queue_view`) when it is the active one, None on a standby."""
    by_state = {s.name: 0 for s in TieredState}
    for topic in image.topics.values():
        by_state[topic.tiered_state.name] += 1
    return ControllerView(
        metadata=MetadataView(image_offset=image.offset, log_end_offset=log_end_offset),
        active=queues is not None,
        controller_epoch=controller_epoch,
        topics_by_state=by_state,
        broker_fenced={b.broker_id: b.fenced for b in image.brokers.values()},
        queue=queues,
    )
