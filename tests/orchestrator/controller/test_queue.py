"""The disablement queue: who owes an acknowledgement, when it is asked, and what replies do (pure; no sleeping)."""

from __future__ import annotations

import random

import immutables
import pytest

from orchestrator.controller import queue as dq
from orchestrator.controller.queue import DISABLE_RPC_WAIT, Duty, backoff_ms
from orchestrator.errors import KafkaStorageError, RequestTimedOut
from orchestrator.ids import Uuid
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, replay
from orchestrator.metadata.records import DisablePolicy, MetadataRecord, TieredState, make_record

pytestmark = pytest.mark.unit

T = Uuid.from_string("AAAAAAAAQACAAAAAAAAAAQ")
OTHER = Uuid.from_string("AAAAAAAAQACAAAAAAAAAAg")
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


def _tiered(topic_id: Uuid, epoch: int, state: TieredState, policy: DisablePolicy) -> MetadataRecord:
    return make_record(
        "TieredStateRecord", topic_id=topic_id, tiered_epoch=epoch, tiered_state=int(state), policy=int(policy)
    )


def _partition(topic_id: Uuid, pid: int, replicas: list[int], leader: int) -> MetadataRecord:
    return make_record(
        "PartitionRecord",
        partition_id=pid,
        topic_id=topic_id,
        replicas=replicas,
        isr=replicas,
        leader=leader,
        leader_epoch=0,
        partition_epoch=0,
    )


def _leader(topic_id: Uuid, pid: int, leader: int) -> MetadataRecord:
    return make_record("PartitionChangeRecord", topic_id=topic_id, partition_id=pid, leader=leader)


def _cluster(*, brokers: tuple[int, ...] = (1, 2, 3), policy: DisablePolicy = DisablePolicy.DELETE) -> MetadataImage:
    """Brokers 1-3; topic T "orders" DISABLING at epoch 2: p0 on [1, 2] led by 1, p1 on [2, 4] led by 2 (4 never
    registered), so the required brokers are 1 and 2; broker 3 hosts nothing of it."""
    return _apply(
        EMPTY_IMAGE,
        *(_register(b, 10 * b) for b in brokers),
        make_record("TopicRecord", name="orders", topic_id=T),
        _partition(T, 0, [1, 2], 1),
        _partition(T, 1, [2, 4], 2),
        _tiered(T, 1, TieredState.ENABLED, DisablePolicy.NONE),
        _tiered(T, 2, TieredState.DISABLING, policy),
    )


def _send_all(q: dq.DisablementQueue, now: int = NOW) -> tuple[dq.DisablementQueue, dict[int, dq.SendDisable]]:
    q, sends = dq.due(q, now)
    return q, {s.broker_id: s for s in sends}


def _ack(q: dq.DisablementQueue, broker_id: int, epoch: int = 2, now: int = NOW, **kw: object) -> dq.DisablementQueue:
    args: dict[str, object] = {"ok": True, "in_progress": False, "error_code": 0, "error_message": None}
    args.update(kw)
    return dq.on_response(q, T, broker_id, epoch, now_ms=now, rng=random.Random(0), **args)  # type: ignore[arg-type]


def _fail(q: dq.DisablementQueue, broker_id: int, rng: random.Random, now: int = NOW) -> dq.DisablementQueue:
    return dq.on_response(
        q,
        T,
        broker_id,
        2,
        ok=False,
        in_progress=False,
        error_code=KafkaStorageError.code,
        error_message="S3 said SlowDown",
        now_ms=now,
        rng=rng,
    )


def test_rebuild_queues_every_disabling_topic_with_every_registered_broker_hosting_a_replica_due_now() -> None:
    image = _apply(
        _cluster(),
        make_record("TopicRecord", name="enabled", topic_id=OTHER),
        _partition(OTHER, 0, [3], 3),
        _tiered(OTHER, 1, TieredState.ENABLED, DisablePolicy.NONE),
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
    assert sends[1] == dq.SendDisable(T, 1, 10, 2, DisablePolicy.DELETE, attempt=1)
    assert all(pb.in_flight and pb.attempts == 1 for pb in q.topics[T].pending.values())
    assert dq.due(q, NOW + 10**9)[1] == [], "nothing is sent twice while a request is in flight"


def test_the_topic_completes_only_when_every_required_broker_acknowledged_the_epoch() -> None:
    image = _cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(q, 1)
    assert dq.completed(q, image) == []
    assert sorted(q.topics[T].pending) == [2] and sorted(q.topics[T].acked) == [1]
    q = _ack(q, 2)
    assert dq.completed(q, image) == [T]


def test_a_reply_for_an_older_epoch_is_ignored() -> None:
    q, _ = _send_all(dq.rebuild(_cluster(), NOW))
    assert _ack(q, 1, epoch=1) is q
    assert _ack(q, 1, epoch=3) is q


def test_a_redelivered_reply_changes_nothing() -> None:
    q, _ = _send_all(dq.rebuild(_cluster(), NOW))
    once = _ack(q, 1)
    assert _ack(once, 1, now=NOW + 5) is once
    assert _ack(dq.rebuild(_cluster(), NOW), 1) == dq.rebuild(_cluster(), NOW), "nothing was in flight"


def test_a_late_reply_to_an_attempt_that_timed_out_is_not_credited_to_the_next_attempt() -> None:
    q, sends = _send_all(dq.rebuild(_cluster(), NOW))
    first = sends[1].attempt
    q = dq.expire(q, NOW + 5_000, timeout_ms=5_000, rng=random.Random(0))
    q, sends = _send_all(q, NOW + 10**6)
    assert sends[1].attempt == first + 1
    assert _ack(q, 1, attempt=first) is q
    assert 1 not in _ack(q, 1, attempt=first + 1).topics[T].pending


def test_reconciling_with_the_same_image_changes_nothing() -> None:
    image = _cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    assert dq.on_image(q, image, NOW + 12345) is q


def test_a_leadership_change_makes_the_new_leader_owe_a_new_acknowledgement() -> None:
    image = _cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(_ack(q, 1), 2)
    moved = _apply(image, _leader(T, 0, 2))  # broker 2 now leads p0 too
    assert dq.completed(q, moved) == [], "the old queue must not complete against the newer image"
    q = dq.on_image(q, moved, NOW + 1)
    assert sorted(q.topics[T].pending) == [2]
    assert q.topics[T].pending[2].duty.leading == frozenset({0, 1})
    q, sends = _send_all(q, NOW + 1)
    assert list(sends) == [2]
    q = _ack(q, 2, now=NOW + 2)
    assert dq.completed(q, moved) == [T]


def test_an_ack_covers_only_the_duty_the_request_was_sent_with() -> None:
    image = _cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    moved = _apply(image, _leader(T, 0, 2))
    q = dq.on_image(q, moved, NOW + 1)  # broker 2 becomes leader of p0 while its request is in flight
    q = _ack(_ack(q, 1), 2)
    assert dq.completed(q, moved) == []
    q = dq.on_image(q, moved, NOW + 2)
    assert 2 in q.topics[T].pending, "the in-flight request did not cover p0's leadership"
    assert 1 in q.topics[T].pending, "broker 1's duty moved in flight too (it lost p0), so its done is not credited"


def test_a_done_from_a_broker_whose_duty_moved_while_in_flight_is_not_credited_and_it_is_asked_again() -> None:
    image = _cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))  # broker 1 is asked while it leads p0
    away = _apply(image, _leader(T, 0, 2))
    back = _apply(away, _leader(T, 0, 1))
    q = dq.on_image(dq.on_image(q, away, NOW + 1), back, NOW + 2)  # p0's leadership leaves broker 1 and returns
    assert q.topics[T].pending[1].duty == q.topics[T].pending[1].sent_duty
    q = _ack(_ack(q, 1, now=NOW + 3), 2, now=NOW + 3)  # broker 2 led p0 for a while: its duty moved too
    for pb in q.topics[T].pending.values():
        assert (pb.in_flight, pb.next_attempt_ms, pb.failures) == (False, NOW + 3, 0)
    assert dq.completed(q, back) == []
    q, sends = _send_all(q, NOW + 3)
    assert sorted(sends) == [1, 2]
    q = _ack(_ack(q, 1, now=NOW + 4), 2, now=NOW + 4)
    assert dq.completed(q, back) == [T]


def test_added_partitions_make_every_broker_hosting_them_owe_an_acknowledgement() -> None:
    image = _cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(_ack(q, 1), 2)
    grown = _apply(image, _partition(T, 2, [3, 1], 3))  # KIP-253: p2 on brokers 3 and 1
    q = dq.on_image(q, grown, NOW + 1)
    assert sorted(q.topics[T].pending) == [1, 3]
    assert sorted(q.topics[T].acked) == [2]
    assert q.topics[T].pending[3].duty == Duty(frozenset({2}), frozenset({2}))


def test_a_fenced_broker_is_not_sent_to_and_is_asked_at_once_when_it_registers_again_and_is_unfenced() -> None:
    image = _cluster()
    q = dq.rebuild(image, NOW)
    fenced = _apply(image, make_record("FenceBrokerRecord", id=1, epoch=10))
    q = dq.on_image(q, fenced, NOW)
    assert q.topics[T].pending[1].fenced
    q, sends = _send_all(q)
    assert list(sends) == [2]
    q = dq.on_response(
        q, T, 2, 2, ok=False, in_progress=False, error_code=7, error_message="x", now_ms=NOW, rng=random.Random(1)
    )
    assert q.topics[T].pending[2].next_attempt_ms > NOW
    reregistered = _apply(fenced, _register(1, 77, fenced=True))  # a new incarnation, fenced until caught up
    q = dq.on_image(q, reregistered, NOW + 50)
    assert q.topics[T].pending[1].broker_epoch == 77
    assert 1 not in _send_all(q, NOW + 50)[1], "still fenced"
    unfenced = _apply(reregistered, make_record("UnfenceBrokerRecord", id=1, epoch=77))
    q = dq.on_image(q, unfenced, NOW + 60)
    q, sends = _send_all(q, NOW + 60)
    assert sends[1].broker_epoch == 77 and q.topics[T].pending[1].failures == 0


def test_a_new_incarnation_resets_the_backoff_and_drops_the_request_in_flight_to_the_old_one() -> None:
    image = _cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _fail(q, 1, random.Random(3))
    q, _ = _send_all(q, NOW + 10**6)
    assert q.topics[T].pending[1].in_flight and q.topics[T].pending[1].failures == 1
    q = dq.on_image(q, _apply(image, _register(1, 99)), NOW + 10**6 + 1)
    pb = q.topics[T].pending[1]
    assert (pb.broker_epoch, pb.failures, pb.in_flight, pb.next_attempt_ms) == (99, 0, False, NOW + 10**6 + 1)


def test_an_acknowledgement_survives_a_re_registration_but_not_an_unregistration() -> None:
    image = _cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(q, 1)
    q = dq.on_image(q, _apply(image, _register(1, 99)), NOW + 1)
    assert 1 in q.topics[T].acked
    gone = _apply(image, make_record("UnregisterBrokerRecord", broker_id=1, broker_epoch=10))
    q = dq.on_image(q, gone, NOW + 2)
    assert 1 not in q.topics[T].acked and 1 not in q.topics[T].pending
    back = _apply(gone, _register(1, 200))
    q = dq.on_image(q, back, NOW + 3)
    assert 1 in q.topics[T].pending, "a broker that comes back owes a fresh acknowledgement"


def test_decommissioning_a_dead_broker_removes_it_from_every_pending_set_and_lets_the_topic_complete() -> None:
    image = _cluster(policy=DisablePolicy.RETAIN)  # retain: a leaderless partition owes no remote deletion
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(q, 2)
    dead = _apply(image, make_record("FenceBrokerRecord", id=1, epoch=10))
    q = dq.on_image(q, dead, NOW + 1)
    assert dq.completed(q, dead) == []
    decommissioned = _apply(dead, make_record("UnregisterBrokerRecord", broker_id=1, broker_epoch=10))
    q = dq.on_image(q, decommissioned, NOW + 2)
    assert q.topics[T].pending == {}
    assert dq.completed(q, decommissioned) == [T]


def test_a_deleted_topic_and_a_topic_no_longer_disabling_leave_the_queue() -> None:
    image = _cluster()
    q = dq.rebuild(image, NOW)
    assert dq.on_image(q, _apply(image, make_record("RemoveTopicRecord", topic_id=T)), NOW).topics == immutables.Map()
    done = _apply(image, _tiered(T, 2, TieredState.DISABLED, DisablePolicy.DELETE))
    assert dq.on_image(q, done, NOW).topics == immutables.Map()
    assert dq.completed(q, done) == [], "a DISABLED topic is never completed twice"


def test_a_new_tiered_epoch_starts_the_topic_over() -> None:
    image = _cluster(policy=DisablePolicy.RETAIN)
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(_ack(q, 1), 2)
    purge = _apply(
        image,
        _tiered(T, 2, TieredState.DISABLED, DisablePolicy.RETAIN),
        _tiered(T, 3, TieredState.DISABLING, DisablePolicy.DELETE),
    )
    q = dq.on_image(q, purge, NOW + 1)
    entry = q.topics[T]
    assert (entry.tiered_epoch, entry.policy, dict(entry.acked)) == (3, DisablePolicy.DELETE, {})
    assert sorted(entry.pending) == [1, 2] and not any(pb.in_flight for pb in entry.pending.values())
    assert _ack(q, 1, epoch=2) is q, "a late reply for epoch 2 counts nothing towards epoch 3"


def test_in_progress_with_progress_is_polled_again_after_the_repoll_interval() -> None:
    q, _ = _send_all(dq.rebuild(_cluster(), NOW))
    q = _ack(q, 1, in_progress=True, repoll_ms=250, progress=dq.Progress(0, 0, 5))
    pb = q.topics[T].pending[1]
    assert (pb.in_flight, pb.next_attempt_ms, pb.waiting_since_ms) == (False, NOW + 250, NOW)
    assert _send_all(q, NOW + 249)[1] == {}
    assert list(_send_all(q, NOW + 250)[1]) == [1]


def test_consecutive_failures_back_off_on_the_declared_schedule_reproducibly_with_a_seeded_rng() -> None:
    seed = 1234
    rng = random.Random(seed)
    q, _ = _send_all(dq.rebuild(_cluster(), NOW))
    now = NOW
    waits = []
    for _ in range(12):
        q = _fail(q, 1, rng, now)
        pb = q.topics[T].pending[1]
        assert pb.last_error == "KAFKA_STORAGE_ERROR: S3 said SlowDown"
        waits.append(pb.next_attempt_ms - now)
        now = pb.next_attempt_ms
        q, sends = _send_all(q, now)
        assert 1 in sends
    # Full jitter over a window of 0.2 s * 2**(n-1), capped at 30 s: the tenacity policy, drawn from our rng.
    expected_rng = random.Random(seed)
    expected = [round(expected_rng.uniform(0, min(30.0, 0.2 * 2 ** (n - 1))) * 1000) for n in range(1, 13)]
    assert waits == expected
    assert all(0 <= w <= min(30_000, 200 * 2 ** (n - 1)) for n, w in enumerate(waits, start=1))
    assert [backoff_ms(n, random.Random(seed)) for n in (1, 9, 30)] == [
        round(random.Random(seed).uniform(0, high) * 1000) for high in (0.2, 30.0, 30.0)
    ]
    assert DISABLE_RPC_WAIT.max == 30


def test_a_reply_showing_progress_resets_the_failure_count_and_clears_the_last_error() -> None:
    q, _ = _send_all(dq.rebuild(_cluster(), NOW))
    q = _fail(q, 1, random.Random(0))
    q, _ = _send_all(q, NOW + 10**6)
    q = _ack(q, 1, in_progress=True, now=NOW + 10**6, progress=dq.Progress(0, 3, 9))
    pb = q.topics[T].pending[1]
    assert (pb.failures, pb.last_error, pb.waiting_since_ms) == (0, None, NOW + 10**6)


def _poll(
    q: dq.DisablementQueue, now: int, rng: random.Random, *, progress: dq.Progress | None, error: str | None = None
) -> dq.DisablementQueue:
    """Send what is due to broker 1 at ``now`` and answer it: IN_PROGRESS with ``progress``, or ``error``."""
    q, sends = _send_all(q, now)
    assert 1 in sends
    return dq.on_response(
        q,
        T,
        1,
        2,
        ok=error is None,
        in_progress=error is None,
        error_code=0 if error is None else KafkaStorageError.code,
        error_message=error,
        now_ms=now,
        rng=rng,
        repoll_ms=100,
        progress=progress,
    )


def test_in_progress_without_progress_backs_off_and_keeps_the_failure_count_and_the_last_error() -> None:
    """The S3 outage seen from the queue: the broker's job fails, is restarted by the next request, and answers
    IN_PROGRESS with counts that do not move between its failures. Only the first answer (the job started) is
    progress; every later one waits longer, the error stays, and the stall clock keeps running."""
    seed = 7
    rng, expected_rng = random.Random(seed), random.Random(seed)
    stuck = dq.Progress(partitions_done=0, segments_deleted=4, segments_remaining=12)
    q = dq.rebuild(_cluster(), NOW)
    q = _poll(q, NOW, rng, progress=dq.Progress(0, 4, 0))  # first answer: the broker took the job
    pb = q.topics[T].pending[1]
    assert (pb.failures, pb.next_attempt_ms) == (0, NOW + 100)
    now = pb.next_attempt_ms
    error = "12 object(s) of orders-0 could not be deleted: EndpointConnectionError: ..."
    for n in range(1, 9):
        is_error = n % 3 == 2
        q = _poll(q, now, rng, progress=stuck, error=error if is_error else None)
        pb = q.topics[T].pending[1]
        assert pb.failures == n, "no progress: neither reply kind resets the count"
        assert pb.last_error == (f"KAFKA_STORAGE_ERROR: {error}" if n >= 2 else None), "the error stays"
        assert pb.waiting_since_ms == NOW, "nor the stall clock"
        window = backoff_ms(n, expected_rng)
        assert pb.next_attempt_ms - now == (window if is_error else max(100, window))
        now = pb.next_attempt_ms
    assert dq.stalled(q, NOW + 60_000, 60_000) == [(T, 1), (T, 2)]
    q = _poll(q, now, rng, progress=dq.Progress(0, 5, 11))  # S3 is back: one more segment deleted
    pb = q.topics[T].pending[1]
    assert (pb.failures, pb.last_error, pb.next_attempt_ms, pb.waiting_since_ms) == (0, None, now + 100, now)


def test_a_broker_that_never_progresses_is_asked_ever_more_rarely_up_to_the_cap() -> None:
    """Five minutes of a job stuck on S3: with a fixed 100 ms re-poll that is 3,000 requests; with the backoff a
    few dozen, every wait within the declared cap, so it is still asked regularly."""
    rng = random.Random(42)
    stuck = dq.Progress(0, 0, 12)
    q = _poll(dq.rebuild(_cluster(), NOW), NOW, rng, progress=dq.Progress())
    now = q.topics[T].pending[1].next_attempt_ms
    while now < NOW + 300_000:
        q = _poll(q, now, rng, progress=stuck, error="KAFKA_STORAGE_ERROR: S3 down" if rng.random() < 0.3 else None)
        pb = q.topics[T].pending[1]
        assert 0 < pb.next_attempt_ms - now <= 30_000
        now = pb.next_attempt_ms
    attempts = q.topics[T].pending[1].attempts
    assert 12 <= attempts <= 60, attempts


def test_progress_is_counted_against_the_most_work_reported_not_the_last_reply() -> None:
    """A job restarted after a failure reports again from where it starts: only counts beyond the most seen are
    progress. The remaining count alone is not (it grows as partitions are planned)."""
    rng = random.Random(0)
    q = _poll(dq.rebuild(_cluster(), NOW), NOW, rng, progress=dq.Progress(1, 10, 5))
    now = NOW + 100
    q = _poll(q, now, rng, progress=dq.Progress(0, 10, 3), error="KAFKA_STORAGE_ERROR: S3 down")
    assert q.topics[T].pending[1].progress == dq.Progress(1, 10, 3)
    for counts in (dq.Progress(0, 10, 0), dq.Progress(1, 10, 2), dq.Progress(1, 9, 1)):
        now = q.topics[T].pending[1].next_attempt_ms
        before = q.topics[T].pending[1].failures
        q = _poll(q, now, rng, progress=counts)
        assert q.topics[T].pending[1].failures == before + 1, counts
    now = q.topics[T].pending[1].next_attempt_ms
    q = _poll(q, now, rng, progress=dq.Progress(1, 11, 0))
    assert q.topics[T].pending[1].failures == 0
    now = q.topics[T].pending[1].next_attempt_ms
    q = _poll(q, now, rng, progress=dq.Progress(2, 11, 0))
    assert q.topics[T].pending[1].failures == 0, "a partition done is progress too"
    q, _ = _send_all(q, q.topics[T].pending[1].next_attempt_ms)
    assert _ack(q, 1, in_progress=True).topics[T].pending[1].failures == 1, "a reply without counts shows none"


def test_a_new_incarnation_forgets_the_progress_mark() -> None:
    image = _cluster()
    q = _poll(dq.rebuild(image, NOW), NOW, random.Random(0), progress=dq.Progress(1, 10, 0))
    assert q.topics[T].pending[1].progress == dq.Progress(1, 10, 0)
    q = dq.on_image(q, _apply(image, _register(1, 11)), NOW + 1)
    assert q.topics[T].pending[1].progress is None
    q = _poll(q, NOW + 1, random.Random(0), progress=dq.Progress(0, 0, 4))
    assert q.topics[T].pending[1].failures == 0, "a new process counts from zero: its first answer is progress"


def test_a_request_with_no_reply_times_out_into_a_backoff() -> None:
    q, _ = _send_all(dq.rebuild(_cluster(), NOW))
    assert dq.expire(q, NOW + 999, timeout_ms=1000, rng=random.Random(0)) is q
    q = dq.expire(q, NOW + 1000, timeout_ms=1000, rng=random.Random(0))
    for pb in q.topics[T].pending.values():
        assert not pb.in_flight and pb.failures == 1
        assert pb.last_error is not None and pb.last_error.startswith(RequestTimedOut.name)


def test_stalled_reports_brokers_without_progress_for_the_threshold() -> None:
    q, _ = _send_all(dq.rebuild(_cluster(), NOW))
    assert dq.stalled(q, NOW + 59_999, 60_000) == []
    assert sorted(dq.stalled(q, NOW + 60_000, 60_000)) == [(T, 1), (T, 2)]
    q = _ack(q, 1, in_progress=True, now=NOW + 30_000, progress=dq.Progress(0, 1, 4))
    assert dq.stalled(q, NOW + 60_000, 60_000) == [(T, 2)]
    q = _fail(q, 2, random.Random(0), NOW + 60_000)
    assert dq.stalled(q, NOW + 60_000, 60_000) == [(T, 2)], "failures are not progress"


def test_a_topic_with_no_registered_replica_brokers_completes_at_once() -> None:
    image = _apply(
        EMPTY_IMAGE,
        make_record("TopicRecord", name="orphan", topic_id=T),
        _partition(T, 0, [7], 7),
        _tiered(T, 1, TieredState.ENABLED, DisablePolicy.NONE),
        _tiered(T, 2, TieredState.DISABLING, DisablePolicy.RETAIN),
    )
    q = dq.rebuild(image, NOW)
    assert q.topics[T].pending == {}
    assert dq.completed(q, image) == [T]


# --- leaderless partitions under the delete policy ---------------------------------------------------------------


def _leaderless_cluster(policy: DisablePolicy = DisablePolicy.DELETE) -> MetadataImage:
    """Replication factor 1 over brokers 1-3, topic T DISABLING at epoch 2: p0-p3 on broker 4, which was
    decommissioned (leader -1), p4 on broker 1 (its leader)."""
    return _apply(
        EMPTY_IMAGE,
        *(_register(b, 10 * b) for b in (1, 2, 3)),
        make_record("TopicRecord", name="orders", topic_id=T),
        *(_partition(T, p, [4], -1) for p in range(4)),
        _partition(T, 4, [1], 1),
        _tiered(T, 1, TieredState.ENABLED, DisablePolicy.NONE),
        _tiered(T, 2, TieredState.DISABLING, policy),
    )


def test_leaderless_partitions_of_a_delete_topic_are_spread_over_the_live_brokers_and_named_in_their_requests() -> None:
    image = _leaderless_cluster()
    topic = image.topics[T]
    assert dq.leaderless_assignment(topic, image) == {0: 1, 1: 2, 2: 3, 3: 1}
    assert dq.deleting_brokers(topic, image) == {0: 1, 1: 2, 2: 3, 3: 1, 4: 1}
    q, sends = _send_all(dq.rebuild(image, NOW))
    assert sorted(sends) == [1, 2, 3], "brokers 2 and 3 host nothing of it but owe the remote data they are assigned"
    assert sends[1].assigned == frozenset({0, 3}) and sends[2].assigned == frozenset({1})
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
    image = _apply(_leaderless_cluster(), make_record("FenceBrokerRecord", id=1, epoch=10))
    assert dq.leaderless_assignment(image.topics[T], image) == {0: 2, 1: 3, 2: 2, 3: 3, 4: 2}
    nobody = _apply(image, *(make_record("FenceBrokerRecord", id=b, epoch=10 * b) for b in (2, 3)))
    assert dq.leaderless_assignment(nobody.topics[T], nobody) == {}
    assert dq.deleting_brokers(nobody.topics[T], nobody) == dict.fromkeys(range(5), -1)


def test_a_partition_regaining_a_leader_goes_back_to_the_normal_path_and_the_new_leader_owes_it() -> None:
    image = _leaderless_cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    for b in (1, 2, 3):
        q = _ack(q, b)
    # Broker 4 comes back (a new registration) and leads p0-p3 again: it owes them (its duty is new); broker 1's
    # acknowledgement still covers its smaller duty, and 2 and 3 (assigned nothing, hosting nothing) owe nothing.
    back = _apply(image, _register(4, 40), *(_leader(T, p, 4) for p in range(4)))
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
    fenced = _apply(image, make_record("FenceBrokerRecord", id=3, epoch=30))
    q = dq.on_image(q, fenced, NOW + 1)
    assert dq.leaderless_assignment(fenced.topics[T], fenced) == {0: 1, 1: 2, 2: 1, 3: 2}
    assert sorted(q.topics[T].pending) == [1, 2], "both gained an assigned partition"
    assert 3 not in q.topics[T].acked, "broker 3 hosts nothing and is assigned nothing any more: not required"
    assert dq.completed(q, fenced) == []


def test_an_assignment_that_changes_while_the_request_is_in_flight_is_not_credited() -> None:
    image = _leaderless_cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    fenced = _apply(image, make_record("FenceBrokerRecord", id=3, epoch=30))
    q = dq.on_image(q, fenced, NOW + 1)
    q = _ack(q, 2, now=NOW + 2)  # answers a request that named {1}; it now owes {1, 3}
    assert 2 in q.topics[T].pending and 2 not in q.topics[T].acked
    q, sends = _send_all(q, NOW + 2)
    assert sends[2].assigned == frozenset({1, 3})


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
    assert (pb.failures, pb.last_error, pb.in_flight) == (1, "still owed", False)
    assert NOW + 5 + DISABLE_RPC_WAIT.min * 1000 <= pb.next_attempt_ms <= NOW + 5 + 200
    assert dq.completed(q, image) == []
    q, sends = _send_all(q, NOW + 1_000)
    assert sends[2].assigned == frozenset({1})
    for b in (1, 2):
        q = _ack(q, b, now=NOW + 1_001)
    q = dq.reopen(q, image, T, [1], reason="still owed", now_ms=NOW + 2_000, rng=rng)
    assert q.topics[T].remote_checks_failed == 2 and q.topics[T].pending[2].failures == 2


def test_reopen_changes_nothing_when_nobody_acknowledged_can_answer_for_the_owed_partitions() -> None:
    image = _leaderless_cluster()
    q, _ = _send_all(dq.rebuild(image, NOW))
    q = _ack(q, 1)
    assert dq.reopen(q, image, T, [1], reason="x", now_ms=NOW, rng=random.Random(0)) is q  # 2 is still pending
    assert dq.reopen(q, image, T, [99], reason="x", now_ms=NOW, rng=random.Random(0)) is q  # no such partition
    assert dq.reopen(q, image, OTHER, [0], reason="x", now_ms=NOW, rng=random.Random(0)) is q


def test_next_event_is_the_earliest_timeout_backoff_end_or_new_stall_and_never_for_a_fenced_broker() -> None:
    def topic(**brokers: dq.PendingBroker) -> dq.PendingTopic:
        pending = {int(b[1:]): pb for b, pb in brokers.items()}
        return dq.PendingTopic(Uuid.random(), "t", 2, DisablePolicy.RETAIN, since_ms=0, pending=pending)

    def queue(*topics: dq.PendingTopic) -> dq.DisablementQueue:
        return dq.DisablementQueue(immutables.Map({t.topic_id: t for t in topics}))

    waiting = dq.PendingBroker(broker_epoch=1, duty=Duty(), next_attempt_ms=5_000, waiting_since_ms=1_000)
    in_flight = dq.PendingBroker(broker_epoch=1, duty=Duty(), in_flight=True, last_attempt_ms=2_000)
    fenced = dq.PendingBroker(broker_epoch=1, duty=Duty(), fenced=True, next_attempt_ms=0, waiting_since_ms=1_000)

    def nxt(q: dq.DisablementQueue, *, stalls_after: int = 0, stall: int = 100_000) -> float:
        return dq.next_event_ms(q, timeout_ms=10_000, stall_threshold_ms=stall, stalls_after_ms=stalls_after)

    assert nxt(dq.EMPTY_QUEUE) == float("inf")
    assert nxt(queue(topic(b1=waiting))) == 5_000, "its backoff ends"
    assert nxt(queue(topic(b1=in_flight))) == 12_000, "its request times out"
    assert nxt(queue(topic(b1=waiting), topic(b2=in_flight))) == 5_000, "the earliest of all topics"
    assert nxt(queue(topic(b1=fenced))) == 101_000, "a fenced broker is sent to only when an image unfences it"
    assert nxt(queue(topic(b1=fenced)), stalls_after=101_000) == float("inf"), "already stalled: nothing new"
    assert nxt(queue(topic(b1=waiting)), stall=2_000) == 3_000, "it stalls before its backoff ends"
    q = queue(topic(b1=waiting))
    assert dq.due(q, 4_999) == (q, []), "nothing due before the next event: the queue as it was"
    assert dq.due(q, 5_000)[1], "due at the next event"
