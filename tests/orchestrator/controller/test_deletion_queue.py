"""The remote deletion queue (a deleted topic's remote data), pure: assignment, retries, late replies, rebuild."""

from __future__ import annotations

import random

import pytest

from orchestrator.controller import deletion_queue as rq
from orchestrator.controller.queue import Progress, backoff_ms
from orchestrator.errors import KafkaStorageError
from orchestrator.ids import Uuid
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, replay
from orchestrator.metadata.records import MetadataRecord, make_record

pytestmark = pytest.mark.unit

T = Uuid.from_string("AAAAAAAAQACAAAAAAAAAAQ")
NOW = 1_000_000


def _apply(image: MetadataImage, *records: MetadataRecord) -> MetadataImage:
    return replay(image, enumerate(records, start=image.offset + 1))


def _register(broker_id: int, epoch: int, *, fenced: bool = False) -> MetadataRecord:
    return make_record(
        "RegisterBrokerRecord",
        broker_id=broker_id,
        incarnation_id=Uuid.random(random.Random(broker_id * 1000 + epoch).randbytes),
        broker_epoch=epoch,
        end_points=[],
        rack=None,
        fenced=fenced,
    )


def _brokers(*ids: int, fenced: tuple[int, ...] = ()) -> MetadataImage:
    return _apply(EMPTY_IMAGE, *(_register(b, 10 + b, fenced=b in fenced) for b in ids))


def _target(*partitions: int) -> rq.DeletionTarget:
    return rq.DeletionTarget(T, "clicks", frozenset(partitions))


def _sent(queue: rq.RemoteDeletionQueue) -> tuple[rq.RemoteDeletionQueue, dict[int, rq.SendDeleteRemotePartitions]]:
    queue, sends = rq.due(queue, NOW)
    return queue, {s.broker_id: s for s in sends}


def test_each_partition_left_goes_to_a_live_broker_spread_by_partition_id_and_fenced_ones_get_none() -> None:
    image = _brokers(1, 2, 3, fenced=(2,))
    queue = rq.reconcile(rq.EMPTY_DELETION_QUEUE, [_target(0, 1, 2, 3)], image, NOW)
    _, sends = _sent(queue)
    assert {b: sorted(s.partitions) for b, s in sends.items()} == {1: [0, 2], 3: [1, 3]}
    assert sends[1].broker_epoch == 11 and sends[1].name == "clicks" and sends[1].attempt == 1


def test_with_no_live_broker_nothing_is_sent_and_the_topic_waits() -> None:
    queue = rq.reconcile(rq.EMPTY_DELETION_QUEUE, [_target(0)], _brokers(1, fenced=(1,)), NOW)
    assert queue.topics[T].remaining == {0} and not queue.topics[T].brokers
    assert rq.due(queue, NOW)[1] == []


def test_a_rebuild_from_the_rlmm_state_asks_every_broker_at_once_and_finished_topics_leave() -> None:
    image = _brokers(1, 2)
    queue = rq.reconcile(rq.EMPTY_DELETION_QUEUE, [_target(0, 1)], image, NOW)
    queue, sends = _sent(queue)
    assert set(sends) == {1, 2}
    # partition 1 FINISHED in the RLMM: broker 2 leaves; then everything FINISHED: the topic leaves
    queue = rq.reconcile(queue, [_target(0)], image, NOW)
    assert set(queue.topics[T].brokers) == {1}
    assert rq.reconcile(queue, [], image, NOW).topics == {}


def test_errors_back_off_with_the_disablement_policy_and_keep_their_cause() -> None:
    image = _brokers(1)
    queue, _ = _sent(rq.reconcile(rq.EMPTY_DELETION_QUEUE, [_target(0)], image, NOW))
    failed = rq.on_response(
        queue,
        T,
        1,
        attempt=1,
        ok=False,
        in_progress=False,
        error_code=KafkaStorageError.code,
        error_message="S3 said 503",
        now_ms=NOW,
        rng=random.Random(7),
    )
    b = failed.topics[T].brokers[1]
    assert not b.in_flight and b.failures == 1 and b.last_error == "KAFKA_STORAGE_ERROR: S3 said 503"
    assert b.next_attempt_ms == NOW + backoff_ms(1, random.Random(7))
    assert rq.due(failed, NOW)[1] == [], "not before the backoff"
    assert [s.attempt for s in rq.due(failed, b.next_attempt_ms)[1]] == [2]


def test_a_late_or_duplicate_reply_changes_nothing_and_a_timeout_counts_as_a_failure() -> None:
    image = _brokers(1)
    queue, _ = _sent(rq.reconcile(rq.EMPTY_DELETION_QUEUE, [_target(0)], image, NOW))
    reply = {"ok": True, "in_progress": True, "error_code": 0, "error_message": None, "rng": random.Random(1)}
    assert rq.on_response(queue, T, 1, attempt=2, now_ms=NOW, **reply) is queue  # type: ignore[arg-type]
    assert rq.on_response(queue, T, 9, attempt=1, now_ms=NOW, **reply) is queue  # type: ignore[arg-type]
    expired = rq.expire(queue, NOW + 5000, timeout_ms=5000, rng=random.Random(1))
    b = expired.topics[T].brokers[1]
    assert not b.in_flight and b.failures == 1 and b.last_error is not None and "REQUEST_TIMED_OUT" in b.last_error
    # the reply to the attempt that timed out arrives late: nothing changes
    assert rq.on_response(expired, T, 1, attempt=1, now_ms=NOW + 5001, **reply) is expired  # type: ignore[arg-type]


def test_progress_repolls_soon_and_no_progress_backs_off() -> None:
    image = _brokers(1)
    queue, _ = _sent(rq.reconcile(rq.EMPTY_DELETION_QUEUE, [_target(0)], image, NOW))
    common = {"ok": True, "in_progress": True, "error_code": 0, "error_message": None, "repoll_ms": 100}
    moved = rq.on_response(
        queue, T, 1, attempt=1, now_ms=NOW, rng=random.Random(1), progress=Progress(0, 5, 10), **common
    )  # type: ignore[arg-type]
    b = moved.topics[T].brokers[1]
    assert b.failures == 0 and b.next_attempt_ms == NOW + 100
    again, _ = rq.due(moved, NOW + 100)
    stuck = rq.on_response(
        again, T, 1, attempt=2, now_ms=NOW + 100, rng=random.Random(1), progress=Progress(0, 5, 10), **common
    )  # type: ignore[arg-type]
    assert stuck.topics[T].brokers[1].failures == 1


def test_a_new_incarnation_is_asked_at_once_and_its_old_request_is_moot() -> None:
    queue, _ = _sent(rq.reconcile(rq.EMPTY_DELETION_QUEUE, [_target(0)], _brokers(1), NOW))
    reborn = _apply(_brokers(1), _register(1, 99))
    queue = rq.reconcile(queue, [_target(0)], reborn, NOW + 1)
    _, sends = rq.due(queue, NOW + 1)
    assert [(s.broker_id, s.broker_epoch, s.attempt) for s in sends] == [(1, 99, 2)]


def test_a_broker_fenced_mid_deletion_hands_its_partitions_to_the_others() -> None:
    queue, _ = _sent(rq.reconcile(rq.EMPTY_DELETION_QUEUE, [_target(0, 1)], _brokers(1, 2), NOW))
    queue = rq.reconcile(queue, [_target(0, 1)], _brokers(1, 2, fenced=(2,)), NOW + 1)
    assert {b: sorted(d.partitions) for b, d in queue.topics[T].brokers.items()} == {1: [0, 1]}
