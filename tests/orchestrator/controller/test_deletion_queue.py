"""The remote deletion queue's policy (a deleted topic's remote data), pure: who deletes which partition, rebuild
from the RLMM's state, and when a topic leaves. The machine under it (replies, retries, backoff, progress, late
replies, new incarnations) is tested, for both pipelines, in ``test_retry_queue.py``."""

from __future__ import annotations

import random

import immutables
import pytest

from orchestrator.controller import deletion_queue as dlq
from orchestrator.controller import retry_queue as rq
from tests.orchestrator.controller.queue_images import NOW, T, brokers

pytestmark = pytest.mark.unit


def _target(*partitions: int) -> dlq.DeletionTarget:
    return dlq.DeletionTarget(T, "clicks", frozenset(partitions))


def _sent(
    queue: dlq.RemoteDeletionQueue, now: int = NOW
) -> tuple[dlq.RemoteDeletionQueue, dict[int, dlq.SendDeleteRemotePartitions]]:
    queue, sends = rq.due(queue, now)
    return queue, {s.broker_id: s for s in sends}


def test_each_partition_left_goes_to_a_live_broker_spread_by_partition_id_and_fenced_ones_get_none() -> None:
    image = brokers(1, 2, 3, fenced=(2,))
    queue = dlq.reconcile(dlq.EMPTY_DELETION_QUEUE, [_target(0, 1, 2, 3)], image, NOW)
    _, sends = _sent(queue)
    assert {b: sorted(s.duty) for b, s in sends.items()} == {1: [0, 2], 3: [1, 3]}
    assert sends[1].broker_epoch == 11 and sends[1].job.name == "clicks" and sends[1].attempt == 1


def test_with_no_live_broker_nothing_is_sent_and_the_topic_waits() -> None:
    queue = dlq.reconcile(dlq.EMPTY_DELETION_QUEUE, [_target(0)], brokers(1, fenced=(1,)), NOW)
    assert queue.topics[T].remaining == {0} and not queue.topics[T].pending
    assert rq.due(queue, NOW)[1] == []


def test_a_rebuild_from_the_rlmm_state_asks_every_broker_at_once_and_finished_topics_leave() -> None:
    image = brokers(1, 2)
    queue = dlq.reconcile(dlq.EMPTY_DELETION_QUEUE, [_target(0, 1)], image, NOW)
    queue, sends = _sent(queue)
    assert set(sends) == {1, 2}
    # partition 1 FINISHED in the RLMM: broker 2 leaves; then everything FINISHED: the topic leaves
    queue = dlq.reconcile(queue, [_target(0)], image, NOW)
    assert set(queue.topics[T].pending) == {1}
    assert dlq.reconcile(queue, [], image, NOW).topics == immutables.Map()
    assert dlq.reconcile(queue, [_target(0)], image, NOW + 1) is queue, "nothing new: the very same queue"


def test_a_done_is_not_credited_the_broker_is_asked_again_after_the_backoff_until_the_rlmm_says_finished() -> None:
    image = brokers(1)
    queue, _ = _sent(dlq.reconcile(dlq.EMPTY_DELETION_QUEUE, [_target(0)], image, NOW))
    done = dlq.on_response(queue, T, 1, rq.Outcome(0), attempt=1, now_ms=NOW, rng=random.Random(5))
    entry = done.topics[T].pending[1]
    assert not entry.in_flight and entry.attempts_without_progress == 1
    assert entry.next_attempt_ms == NOW + max(
        rq.DEFAULT_RETRIES.repoll_ms, rq.DEFAULT_RETRIES.backoff_ms(1, random.Random(5))
    )
    assert dlq.reconcile(done, [_target()], image, NOW).topics == immutables.Map(), "FINISHED in the RLMM: it leaves"


def test_a_broker_fenced_mid_deletion_hands_its_partitions_to_the_others() -> None:
    queue, _ = _sent(dlq.reconcile(dlq.EMPTY_DELETION_QUEUE, [_target(0, 1)], brokers(1, 2), NOW))
    queue = dlq.reconcile(queue, [_target(0, 1)], brokers(1, 2, fenced=(2,)), NOW + 1)
    assert {b: sorted(d.duty) for b, d in queue.topics[T].pending.items()} == {1: [0, 1]}


def test_partitions_handed_to_a_broker_while_its_request_is_in_flight_are_asked_for_as_soon_as_it_answers() -> None:
    """Its request named the partitions it had when it was sent: whatever it answers, the ones it was handed since
    were not asked for, so it is asked again at once, naming them."""
    queue, sends = _sent(dlq.reconcile(dlq.EMPTY_DELETION_QUEUE, [_target(0, 1)], brokers(1, 2), NOW))
    assert sends[1].duty == {0}
    queue = dlq.reconcile(queue, [_target(0, 1)], brokers(1, 2, fenced=(2,)), NOW + 1)
    entry = queue.topics[T].pending[1]
    assert entry.in_flight and entry.duty_moved and entry.duty == {0, 1}
    answered = dlq.on_response(
        queue, T, 1, rq.Outcome(0, None, True, rq.Progress(0, 3, 0)), attempt=1, now_ms=NOW + 2, rng=random.Random(0)
    )
    assert answered.topics[T].pending[1].next_attempt_ms == NOW + 2
    _, sends = _sent(answered, NOW + 2)
    assert sends[1].duty == {0, 1} and sends[1].attempt == 2
