"""The disablement queue's policy: who owes an acknowledgement, and when a topic is done (pure; no sleeping).

The machine under it (replies, retries, backoff, progress, timeouts) is tested, for both pipelines, in
``test_retry_queue.py``."""

from __future__ import annotations

import random

import immutables
import pytest

from orchestrator.controller import disablement_queue as dq
from orchestrator.controller import retry_queue as rq
from orchestrator.controller.disablement_queue import Duty
from orchestrator.errors import KafkaStorageError
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage
from orchestrator.metadata.records import DisablePolicy, TieredState, make_record
from tests.orchestrator.controller.queue_images import (
    NOW,
    OTHER,
    T,
    apply_records,
    cluster,
    leader,
    partition,
    register,
    tiered,
)

pytestmark = pytest.mark.unit


def _send_all(q: dq.DisablementQueue, now: int = NOW) -> tuple[dq.DisablementQueue, dict[int, dq.SendDisable]]:
    q, sends = rq.due(q, now)
    return q, {s.broker_id: s for s in sends}


def _ack(
    q: dq.DisablementQueue,
    broker_id: int,
    epoch: int = 2,
    now: int = NOW,
    *,
    in_progress: bool = False,
    attempt: int | None = None,
) -> dq.DisablementQueue:
    done = rq.Outcome(0, None, in_progress)
    return dq.on_response(q, T, broker_id, epoch, done, now_ms=now, rng=random.Random(0), attempt=attempt)


def _fail(q: dq.DisablementQueue, broker_id: int, rng: random.Random, now: int = NOW) -> dq.DisablementQueue:
    failed = rq.Outcome(KafkaStorageError.code, "S3 said SlowDown")
    return dq.on_response(q, T, broker_id, 2, failed, now_ms=now, rng=rng)


def test_rebuild_queues_every_disabling_topic_with_every_registered_broker_hosting_a_replica_due_now() -> None:
    image = apply_records(
        cluster(),
        make_record("TopicRecord", name="enabled", topic_id=OTHER),
        partition(OTHER, 0, [3], 3),
        tiered(OTHER, 1, TieredState.ENABLED, DisablePolicy.NONE),
    )
    q = dq.rebuild(image, NOW)
    assert list(q.topics) == [T]
    entry = q.topics[T]
    assert (entry.tiered_epoch, entry.policy, entry.name) == (2, DisablePolicy.DELETE, "orders")
    assert sorted(entry.pending) == [1, 2]  # 3 hosts nothing of it; 4 is not registered
    assert entry.pending[1].duty == Duty(frozenset({0}), frozenset({0}))
    assert entry.pending[2].duty == Duty(frozenset({0, 1}), frozenset({1}))
    q, sends = _send_all(q)
    assert sorted(sends) == [1, 2]
    s = sends[1]
    assert (s.topic_id, s.broker_id, s.broker_epoch, s.job.tiered_epoch, s.job.policy, s.attempt, s.duty.assigned) == (
        T,
        1,
        10,
        2,
        DisablePolicy.DELETE,
        1,
        frozenset(),
    )
    assert all(pb.in_flight and pb.attempts == 1 for pb in q.topics[T].pending.values())
    assert rq.due(q, NOW + 10**9)[1] == [], "nothing is sent twice while a request is in flight"


def test_the_topic_completes_only_when_every_required_broker_acknowledged_the_epoch() -> None:
    image = cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(q, 1)
    assert dq.completed(q, image) == []
    assert sorted(q.topics[T].pending) == [2] and sorted(q.topics[T].acked) == [1]
    q = _ack(q, 2)
    assert dq.completed(q, image) == [T]


def test_a_reply_for_an_older_epoch_is_ignored() -> None:
    q, _ = _send_all(dq.rebuild(cluster(), NOW))
    assert _ack(q, 1, epoch=1) is q
    assert _ack(q, 1, epoch=3) is q


def test_reconciling_with_the_same_image_changes_nothing() -> None:
    image = cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    assert dq.on_image(q, image, NOW + 12345) is q


def test_a_leadership_change_makes_the_new_leader_owe_a_new_acknowledgement() -> None:
    image = cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(_ack(q, 1), 2)
    moved = apply_records(image, leader(T, 0, 2))  # broker 2 now leads p0 too
    assert dq.completed(q, moved) == [], "the old queue must not complete against the newer image"
    q = dq.on_image(q, moved, NOW + 1)
    assert sorted(q.topics[T].pending) == [2]
    assert q.topics[T].pending[2].duty.leading == frozenset({0, 1})
    q, sends = _send_all(q, NOW + 1)
    assert list(sends) == [2]
    q = _ack(q, 2, now=NOW + 2)
    assert dq.completed(q, moved) == [T]


def test_an_ack_covers_only_the_duty_the_request_was_sent_with() -> None:
    image = cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    moved = apply_records(image, leader(T, 0, 2))
    q = dq.on_image(q, moved, NOW + 1)  # broker 2 becomes leader of p0 while its request is in flight
    q = _ack(_ack(q, 1), 2)
    assert dq.completed(q, moved) == []
    q = dq.on_image(q, moved, NOW + 2)
    assert 2 in q.topics[T].pending, "the in-flight request did not cover p0's leadership"
    assert 1 in q.topics[T].pending, "broker 1's duty moved in flight too (it lost p0), so its done is not credited"


def test_a_done_from_a_broker_whose_duty_moved_while_in_flight_is_not_credited_and_it_is_asked_again() -> None:
    image = cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))  # broker 1 is asked while it leads p0
    away = apply_records(image, leader(T, 0, 2))
    back = apply_records(away, leader(T, 0, 1))
    q = dq.on_image(dq.on_image(q, away, NOW + 1), back, NOW + 2)  # p0's leadership leaves broker 1 and returns
    assert q.topics[T].pending[1].duty == q.topics[T].pending[1].sent_duty
    q = _ack(_ack(q, 1, now=NOW + 3), 2, now=NOW + 3)  # broker 2 led p0 for a while: its duty moved too
    for pb in q.topics[T].pending.values():
        assert (pb.in_flight, pb.next_attempt_ms, pb.attempts_without_progress) == (False, NOW + 3, 0)
    assert dq.completed(q, back) == []
    q, sends = _send_all(q, NOW + 3)
    assert sorted(sends) == [1, 2]
    q = _ack(_ack(q, 1, now=NOW + 4), 2, now=NOW + 4)
    assert dq.completed(q, back) == [T]


def test_added_partitions_make_every_broker_hosting_them_owe_an_acknowledgement() -> None:
    image = cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(_ack(q, 1), 2)
    grown = apply_records(image, partition(T, 2, [3, 1], 3))  # KIP-253: p2 on brokers 3 and 1
    q = dq.on_image(q, grown, NOW + 1)
    assert sorted(q.topics[T].pending) == [1, 3]
    assert sorted(q.topics[T].acked) == [2]
    assert q.topics[T].pending[3].duty == Duty(frozenset({2}), frozenset({2}))


def test_a_fenced_broker_is_not_sent_to_and_is_asked_at_once_when_it_registers_again_and_is_unfenced() -> None:
    image = cluster()
    q = dq.rebuild(image, NOW)
    fenced = apply_records(image, make_record("FenceBrokerRecord", id=1, epoch=10))
    q = dq.on_image(q, fenced, NOW)
    assert q.topics[T].pending[1].fenced
    q, sends = _send_all(q)
    assert list(sends) == [2]
    q = dq.on_response(q, T, 2, 2, rq.Outcome(7, "x"), now_ms=NOW, rng=random.Random(1))
    assert q.topics[T].pending[2].next_attempt_ms > NOW
    reregistered = apply_records(fenced, register(1, 77, fenced=True))  # a new incarnation, fenced until caught up
    q = dq.on_image(q, reregistered, NOW + 50)
    assert q.topics[T].pending[1].broker_epoch == 77
    assert 1 not in _send_all(q, NOW + 50)[1], "still fenced"
    unfenced = apply_records(reregistered, make_record("UnfenceBrokerRecord", id=1, epoch=77))
    q = dq.on_image(q, unfenced, NOW + 60)
    q, sends = _send_all(q, NOW + 60)
    assert sends[1].broker_epoch == 77 and q.topics[T].pending[1].attempts_without_progress == 0


def test_an_acknowledgement_survives_a_re_registration_but_not_an_unregistration() -> None:
    image = cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(q, 1)
    q = dq.on_image(q, apply_records(image, register(1, 99)), NOW + 1)
    assert 1 in q.topics[T].acked
    gone = apply_records(image, make_record("UnregisterBrokerRecord", broker_id=1, broker_epoch=10))
    q = dq.on_image(q, gone, NOW + 2)
    assert 1 not in q.topics[T].acked and 1 not in q.topics[T].pending
    back = apply_records(gone, register(1, 200))
    q = dq.on_image(q, back, NOW + 3)
    assert 1 in q.topics[T].pending, "a broker that comes back owes a fresh acknowledgement"


def test_decommissioning_a_dead_broker_removes_it_from_every_pending_set_and_lets_the_topic_complete() -> None:
    image = cluster(policy=DisablePolicy.RETAIN)  # retain: a leaderless partition owes no remote deletion
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(q, 2)
    dead = apply_records(image, make_record("FenceBrokerRecord", id=1, epoch=10))
    q = dq.on_image(q, dead, NOW + 1)
    assert dq.completed(q, dead) == []
    decommissioned = apply_records(dead, make_record("UnregisterBrokerRecord", broker_id=1, broker_epoch=10))
    q = dq.on_image(q, decommissioned, NOW + 2)
    assert q.topics[T].pending == {}
    assert dq.completed(q, decommissioned) == [T]


def test_a_deleted_topic_and_a_topic_no_longer_disabling_leave_the_queue() -> None:
    image = cluster()
    q = dq.rebuild(image, NOW)
    assert (
        dq.on_image(q, apply_records(image, make_record("RemoveTopicRecord", topic_id=T)), NOW).topics
        == immutables.Map()
    )
    done = apply_records(image, tiered(T, 2, TieredState.DISABLED, DisablePolicy.DELETE))
    assert dq.on_image(q, done, NOW).topics == immutables.Map()
    assert dq.completed(q, done) == [], "a DISABLED topic is never completed twice"


def test_a_new_tiered_epoch_starts_the_topic_over() -> None:
    image = cluster(policy=DisablePolicy.RETAIN)
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(_ack(q, 1), 2)
    purge = apply_records(
        image,
        tiered(T, 2, TieredState.DISABLED, DisablePolicy.RETAIN),
        tiered(T, 3, TieredState.DISABLING, DisablePolicy.DELETE),
    )
    q = dq.on_image(q, purge, NOW + 1)
    entry = q.topics[T]
    assert (entry.tiered_epoch, entry.policy, dict(entry.acked)) == (3, DisablePolicy.DELETE, {})
    assert sorted(entry.pending) == [1, 2] and not any(pb.in_flight for pb in entry.pending.values())
    assert _ack(q, 1, epoch=2) is q, "a late reply for epoch 2 counts nothing towards epoch 3"


def test_a_topic_with_no_registered_replica_brokers_completes_at_once() -> None:
    image = apply_records(
        EMPTY_IMAGE,
        make_record("TopicRecord", name="orphan", topic_id=T),
        partition(T, 0, [7], 7),
        tiered(T, 1, TieredState.ENABLED, DisablePolicy.NONE),
        tiered(T, 2, TieredState.DISABLING, DisablePolicy.RETAIN),
    )
    q = dq.rebuild(image, NOW)
    assert q.topics[T].pending == {}
    assert dq.completed(q, image) == [T]


# --- leaderless partitions under the delete policy ---------------------------------------------------------------


def _leaderless_cluster(policy: DisablePolicy = DisablePolicy.DELETE) -> MetadataImage:
    """Replication factor 1 over brokers 1-3, topic T DISABLING at epoch 2: p0-p3 on broker 4, which was
    decommissioned (leader -1), p4 on broker 1 (its leader)."""
    return apply_records(
        EMPTY_IMAGE,
        *(register(b, 10 * b) for b in (1, 2, 3)),
        make_record("TopicRecord", name="orders", topic_id=T),
        *(partition(T, p, [4], -1) for p in range(4)),
        partition(T, 4, [1], 1),
        tiered(T, 1, TieredState.ENABLED, DisablePolicy.NONE),
        tiered(T, 2, TieredState.DISABLING, policy),
    )


def test_leaderless_partitions_of_a_delete_topic_are_spread_over_the_live_brokers_and_named_in_their_requests() -> None:
    image = _leaderless_cluster()
    topic = image.topics[T]
    assert dq.leaderless_assignment(topic, image) == {0: 1, 1: 2, 2: 3, 3: 1}
    assert dq.deleting_brokers(topic, image) == {0: 1, 1: 2, 2: 3, 3: 1, 4: 1}
    q, sends = _send_all(dq.rebuild(image, NOW))
    assert sorted(sends) == [1, 2, 3], "brokers 2 and 3 host nothing of it but owe the remote data they are assigned"
    assert sends[1].duty.assigned == frozenset({0, 3}) and sends[2].duty.assigned == frozenset({1})
    assert q.topics[T].pending[1].duty == Duty(frozenset({4}), frozenset({4}), frozenset({0, 3}))
    for b in (1, 2):
        q = _ack(q, b)
    assert dq.completed(q, image) == [], "DISABLED waits for the broker assigned p2"
    q = _ack(q, 3)
    assert dq.completed(q, image) == [T]


def test_retain_assigns_no_leaderless_partition() -> None:
    image = _leaderless_cluster(DisablePolicy.RETAIN)
    assert dq.leaderless_assignment(image.topics[T], image) == {}
    assert sorted(dq.rebuild(image, NOW).topics[T].pending) == [1]


def test_a_partition_whose_leader_is_fenced_is_assigned_and_no_live_broker_means_no_assignment() -> None:
    image = apply_records(_leaderless_cluster(), make_record("FenceBrokerRecord", id=1, epoch=10))
    assert dq.leaderless_assignment(image.topics[T], image) == {0: 2, 1: 3, 2: 2, 3: 3, 4: 2}
    nobody = apply_records(image, *(make_record("FenceBrokerRecord", id=b, epoch=10 * b) for b in (2, 3)))
    assert dq.leaderless_assignment(nobody.topics[T], nobody) == {}
    assert dq.deleting_brokers(nobody.topics[T], nobody) == dict.fromkeys(range(5), -1)


def test_a_partition_regaining_a_leader_goes_back_to_the_normal_path_and_the_new_leader_owes_it() -> None:
    image = _leaderless_cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    for b in (1, 2, 3):
        q = _ack(q, b)
    # Broker 4 comes back (a new registration) and leads p0-p3 again: it owes them (its duty is new); broker 1's
    # acknowledgement still covers its smaller duty, and 2 and 3 (assigned nothing, hosting nothing) owe nothing.
    back = apply_records(image, register(4, 40), *(leader(T, p, 4) for p in range(4)))
    assert dq.leaderless_assignment(back.topics[T], back) == {}
    q = dq.on_image(q, back, NOW + 1)
    assert sorted(q.topics[T].pending) == [4] and sorted(q.topics[T].acked) == [1]
    assert dq.completed(q, back) == []
    q, _ = _send_all(q, NOW + 2)
    q = _ack(q, 4, now=NOW + 2)
    assert dq.completed(q, back) == [T]


def test_an_assignment_that_moves_to_another_broker_makes_that_broker_owe_it() -> None:
    image = _leaderless_cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    for b in (1, 2, 3):
        q = _ack(q, b)
    # Broker 3 is fenced: p2 (its assignment) goes to broker 2, whose acknowledgement did not cover it.
    fenced = apply_records(image, make_record("FenceBrokerRecord", id=3, epoch=30))
    q = dq.on_image(q, fenced, NOW + 1)
    assert dq.leaderless_assignment(fenced.topics[T], fenced) == {0: 1, 1: 2, 2: 1, 3: 2}
    assert sorted(q.topics[T].pending) == [1, 2], "both gained an assigned partition"
    assert 3 not in q.topics[T].acked, "broker 3 hosts nothing and is assigned nothing any more: not required"
    assert dq.completed(q, fenced) == []


def test_an_assignment_that_changes_while_the_request_is_in_flight_is_not_credited() -> None:
    image = _leaderless_cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    fenced = apply_records(image, make_record("FenceBrokerRecord", id=3, epoch=30))
    q = dq.on_image(q, fenced, NOW + 1)
    q = _ack(q, 2, now=NOW + 2)  # answers a request that named {1}; it now owes {1, 3}
    assert 2 in q.topics[T].pending and 2 not in q.topics[T].acked
    q, sends = _send_all(q, NOW + 2)
    assert sends[2].duty.assigned == frozenset({1, 3})


def test_an_acknowledgement_as_leader_covers_the_same_partition_assigned() -> None:
    led = Duty(frozenset({0}), frozenset({0}))
    assert led.covers(Duty(frozenset({0}), frozenset(), frozenset({0})))
    assert not Duty(frozenset({0})).covers(Duty(frozenset({0}), frozenset(), frozenset({0})))
    assert not Duty(assigned=frozenset({0})).covers(Duty(leading=frozenset({0})))


def test_reopen_takes_back_the_acknowledgement_of_the_broker_answerable_for_owed_remote_data_with_backoff() -> None:
    image = _leaderless_cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    for b in (1, 2, 3):
        q = _ack(q, b)
    assert dq.completed(q, image) == [T]
    rng = random.Random(7)
    q = dq.reopen(q, image, T, [1, 4], reason="still owed", now_ms=NOW + 5, rng=rng)
    entry = q.topics[T]
    assert sorted(entry.pending) == [1, 2] and sorted(entry.acked) == [3]  # p1: assignee 2; p4: leader 1
    assert entry.remote_checks_failed == 1
    pb = entry.pending[2]
    assert (pb.attempts_without_progress, pb.last_error, pb.in_flight) == (1, "still owed", False)
    assert NOW + 5 + rq.DEFAULT_RETRIES.backoff.floor <= pb.next_attempt_ms <= NOW + 5 + 200
    assert dq.completed(q, image) == []
    q, sends = _send_all(q, NOW + 1_000)
    assert sends[2].duty.assigned == frozenset({1})
    for b in (1, 2):
        q = _ack(q, b, now=NOW + 1_001)
    q = dq.reopen(q, image, T, [1], reason="still owed", now_ms=NOW + 2_000, rng=rng)
    assert q.topics[T].remote_checks_failed == 2 and q.topics[T].pending[2].attempts_without_progress == 2


def test_reopen_changes_nothing_when_nobody_acknowledged_can_answer_for_the_owed_partitions() -> None:
    image = _leaderless_cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(q, 1)
    assert dq.reopen(q, image, T, [1], reason="x", now_ms=NOW, rng=random.Random(0)) is q  # 2 is still pending
    assert dq.reopen(q, image, T, [99], reason="x", now_ms=NOW, rng=random.Random(0)) is q  # no such partition
    assert dq.reopen(q, image, OTHER, [0], reason="x", now_ms=NOW, rng=random.Random(0)) is q
