"""The retry queue, the one machine under both of the controller's pipelines (pure; no sleeping).

Every test that speaks of the machine (in flight, attempts, backoff, progress, expiry, due, replies, next event)
runs against both policies: the disablement (brokers 1 and 2 owe DISABLING topic T's epoch 2) and the remote
deletion (brokers 1 and 2 each delete one partition of deleted topic T). What each policy owes and when it is done
is tested in ``test_disablement_queue.py`` and ``test_deletion_queue.py``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import immutables
import pytest

from orchestrator.controller import deletion_queue as dlq
from orchestrator.controller import disablement_queue as dq
from orchestrator.controller import retry_queue as rq
from orchestrator.controller.disablement_queue import Duty
from orchestrator.controller.retry_queue import DEFAULT_RETRIES, Outcome, Progress, Retries
from orchestrator.errors import KafkaStorageError, RequestTimedOut
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy
from orchestrator.settings import DisablementSettings
from tests.orchestrator.controller.queue_images import NOW, T, apply_records, brokers, cluster, register

pytestmark = pytest.mark.unit

Queue = rq.RetryQueue[Any]


@dataclass(frozen=True)
class Pipeline:
    """One policy of the machine, with brokers 1 and 2 owing a job about topic T and nothing sent yet."""

    name: str
    start: Callable[[], Queue]
    due: Callable[[Queue, int], tuple[Queue, list[Any]]]
    # (queue, broker, outcome, attempt or None for the one in flight, now, rng, retries) -> queue
    answer: Callable[[Queue, int, Outcome, int | None, int, random.Random, Retries], Queue]
    reincarnate: Callable[[Queue, int, int, int], Queue]  # (queue, broker, its new epoch, now) -> queue
    credits_done: bool  # whether a broker's "done" ends its part (the disablement) or a store says (the deletion)


def _disable_answer(
    q: Queue, b: int, outcome: Outcome, attempt: int | None, now: int, rng: random.Random, retries: Retries
) -> Queue:
    return dq.on_response(q, T, b, 2, outcome, now_ms=now, rng=rng, retries=retries, attempt=attempt)


DISABLEMENT = Pipeline(
    "disablement",
    start=lambda: dq.rebuild(cluster(), NOW),
    due=rq.due,
    answer=_disable_answer,
    reincarnate=lambda q, b, epoch, now: dq.on_image(q, apply_records(cluster(), register(b, epoch)), now),
    credits_done=True,
)

TARGET = dlq.DeletionTarget(T, "clicks", frozenset({0, 1}))  # live brokers 1 and 2: p0 goes to 1, p1 to 2


def _delete_answer(
    q: Queue, b: int, outcome: Outcome, attempt: int | None, now: int, rng: random.Random, retries: Retries
) -> Queue:
    if attempt is None:  # the attempt in flight, as the disablement's None means
        entry = q.topics[T].pending.get(b)
        attempt = entry.attempts if entry is not None else 1
    return dlq.on_response(q, T, b, outcome, attempt=attempt, now_ms=now, rng=rng, retries=retries)


DELETION = Pipeline(
    "deletion",
    start=lambda: dlq.reconcile(dlq.EMPTY_DELETION_QUEUE, [TARGET], brokers(1, 2), NOW),
    due=rq.due,
    answer=_delete_answer,
    reincarnate=lambda q, b, epoch, now: dlq.reconcile(
        q, [TARGET], apply_records(brokers(1, 2), register(b, epoch)), now
    ),
    credits_done=False,
)

PIPELINES = pytest.mark.parametrize("p", [DISABLEMENT, DELETION], ids=lambda p: p.name)


def _send_all(p: Pipeline, q: Queue, now: int = NOW) -> tuple[Queue, dict[int, Any]]:
    q, sends = p.due(q, now)
    return q, {s.broker_id: s for s in sends}


def _reply(
    p: Pipeline,
    q: Queue,
    broker_id: int,
    *,
    now: int = NOW,
    rng: random.Random | None = None,
    attempt: int | None = None,
    in_progress: bool = False,
    error: str | None = None,
    progress: Progress | None = None,
    retries: Retries = DEFAULT_RETRIES,
) -> Queue:
    """A reply from ``broker_id``: done, IN_PROGRESS with ``progress``, or the job's ``error`` (with ``progress``)."""
    code = 0 if error is None else KafkaStorageError.code
    outcome = Outcome(code, error, in_progress and error is None, progress)
    return p.answer(q, broker_id, outcome, attempt, now, rng or random.Random(0), retries)


def _fail(p: Pipeline, q: Queue, broker_id: int, rng: random.Random, now: int = NOW) -> Queue:
    return _reply(p, q, broker_id, now=now, rng=rng, error="S3 said SlowDown")


def _poll(
    p: Pipeline, q: Queue, now: int, rng: random.Random, *, progress: Progress | None, error: str | None = None
) -> Queue:
    """Send what is due to broker 1 at ``now`` and answer it: IN_PROGRESS with ``progress``, or ``error``."""
    q, sends = _send_all(p, q, now)
    assert 1 in sends
    return _reply(p, q, 1, now=now, rng=rng, in_progress=True, error=error, progress=progress, retries=REPOLL_100)


REPOLL_100 = Retries(100, DEFAULT_RETRIES.backoff)


@PIPELINES
def test_a_redelivered_reply_changes_nothing(p: Pipeline) -> None:
    q, _ = _send_all(p, p.start())
    once = _reply(p, q, 1)
    assert _reply(p, once, 1, now=NOW + 5) is once
    assert _reply(p, p.start(), 1) == p.start(), "nothing was in flight"


@PIPELINES
def test_a_late_or_duplicate_reply_changes_nothing_and_a_timeout_counts_as_a_failure(p: Pipeline) -> None:
    q, sends = _send_all(p, p.start())
    first = sends[1].attempt
    assert _reply(p, q, 1, attempt=first + 1, in_progress=True) is q, "no such attempt in flight"
    assert _reply(p, q, 9, attempt=first, in_progress=True) is q, "a broker that owes nothing"
    expired = rq.expire(q, NOW + 5_000, timeout_ms=5_000, rng=random.Random(1), retries=DEFAULT_RETRIES)
    entry = expired.topics[T].pending[1]
    assert not entry.in_flight and entry.attempts_without_progress == 1
    assert entry.last_error is not None and "REQUEST_TIMED_OUT" in entry.last_error
    late = _reply(p, expired, 1, attempt=first, now=NOW + 5_001, in_progress=True)
    assert late is expired, "the reply to the attempt that timed out arrives late: nothing changes"
    q, sends = _send_all(p, expired, NOW + 10**6)
    assert sends[1].attempt == first + 1
    assert _reply(p, q, 1, attempt=first) is q, "a late reply is not credited to the next attempt"
    answered = _reply(p, q, 1, attempt=first + 1)
    assert answered is not q and not answered.pending_brokers(T).get(1, entry).in_flight
    assert (1 not in answered.topics[T].pending) == p.credits_done


@PIPELINES
def test_a_request_with_no_reply_times_out_into_a_backoff(p: Pipeline) -> None:
    q, _ = _send_all(p, p.start())
    assert rq.expire(q, NOW + 999, timeout_ms=1000, rng=random.Random(0), retries=DEFAULT_RETRIES) is q
    q = rq.expire(q, NOW + 1000, timeout_ms=1000, rng=random.Random(0), retries=DEFAULT_RETRIES)
    for entry in q.topics[T].pending.values():
        assert not entry.in_flight and entry.attempts_without_progress == 1
        assert entry.last_error is not None and entry.last_error.startswith(RequestTimedOut.name)


@PIPELINES
def test_in_progress_with_progress_is_polled_again_after_the_repoll_interval_and_without_it_backs_off(
    p: Pipeline,
) -> None:
    repoll_250 = Retries(250, DEFAULT_RETRIES.backoff)
    q, _ = _send_all(p, p.start())
    q = _reply(p, q, 1, in_progress=True, retries=repoll_250, progress=Progress(0, 5, 10))
    entry = q.topics[T].pending[1]
    assert (entry.in_flight, entry.next_attempt_ms, entry.waiting_since_ms) == (False, NOW + 250, NOW)
    assert entry.attempts_without_progress == 0
    assert _send_all(p, q, NOW + 249)[1] == {}
    q, sends = _send_all(p, q, NOW + 250)
    assert list(sends) == [1]
    stuck = _reply(p, q, 1, now=NOW + 250, in_progress=True, retries=repoll_250, progress=Progress(0, 5, 10))
    assert stuck.topics[T].pending[1].attempts_without_progress == 1, "the same counts again: no progress"


@PIPELINES
def test_consecutive_failures_back_off_on_the_declared_schedule_reproducibly_with_a_seeded_rng(p: Pipeline) -> None:
    seed = 1234
    rng = random.Random(seed)
    q, _ = _send_all(p, p.start())
    now = NOW
    waits = []
    for _ in range(12):
        q = _fail(p, q, 1, rng, now)
        entry = q.topics[T].pending[1]
        assert not entry.in_flight and entry.last_error == "KAFKA_STORAGE_ERROR: S3 said SlowDown"
        waits.append(entry.next_attempt_ms - now)
        assert 1 not in _send_all(p, q, now)[1] or entry.next_attempt_ms == now, "not before the backoff"
        now = entry.next_attempt_ms
        q, sends = _send_all(p, q, now)
        assert sends[1].attempt == entry.attempts + 1
    # Full jitter over a window of 0.2 s * 2**(n-1), capped at 30 s: the [disablement] settings' backoff, drawn
    # from our rng.
    expected_rng = random.Random(seed)
    expected = [round(expected_rng.uniform(0, min(30.0, 0.2 * 2 ** (n - 1))) * 1000) for n in range(1, 13)]
    assert waits == expected
    assert all(0 <= w <= min(30_000, 200 * 2 ** (n - 1)) for n, w in enumerate(waits, start=1))
    assert [DEFAULT_RETRIES.backoff_ms(n, random.Random(seed)) for n in (1, 9, 30)] == [
        round(random.Random(seed).uniform(0, high) * 1000) for high in (0.2, 30.0, 30.0)
    ]
    settings = DisablementSettings()
    assert (settings.retry_backoff_ms, settings.retry_backoff_max_ms) == (200, 30_000)
    assert Retries.of(settings) == DEFAULT_RETRIES


@PIPELINES
def test_a_reply_showing_progress_resets_the_failure_count_and_clears_the_last_error(p: Pipeline) -> None:
    q, _ = _send_all(p, p.start())
    q = _fail(p, q, 1, random.Random(0))
    q, _ = _send_all(p, q, NOW + 10**6)
    q = _reply(p, q, 1, in_progress=True, now=NOW + 10**6, progress=Progress(0, 3, 9))
    entry = q.topics[T].pending[1]
    assert (entry.attempts_without_progress, entry.last_error, entry.waiting_since_ms) == (0, None, NOW + 10**6)


@PIPELINES
def test_in_progress_without_progress_backs_off_and_keeps_the_failure_count_and_the_last_error(p: Pipeline) -> None:
    """The S3 outage seen from the queue: the broker's job fails, is restarted by the next request, and answers
    IN_PROGRESS with counts that do not move between its failures. Only the first answer (the job started) is
    progress; every later one waits longer, the error stays, and the stall clock keeps running."""
    seed = 7
    rng, expected_rng = random.Random(seed), random.Random(seed)
    stuck = Progress(partitions_done=0, segments_deleted=4, segments_remaining=12)
    q = p.start()
    q = _poll(p, q, NOW, rng, progress=Progress(0, 4, 0))  # first answer: the broker took the job
    entry = q.topics[T].pending[1]
    assert (entry.attempts_without_progress, entry.next_attempt_ms) == (0, NOW + 100)
    now = entry.next_attempt_ms
    error = "12 object(s) of orders-0 could not be deleted: EndpointConnectionError: ..."
    for n in range(1, 9):
        is_error = n % 3 == 2
        q = _poll(p, q, now, rng, progress=stuck, error=error if is_error else None)
        entry = q.topics[T].pending[1]
        assert entry.attempts_without_progress == n, "no progress: neither reply kind resets the count"
        assert entry.last_error == (f"KAFKA_STORAGE_ERROR: {error}" if n >= 2 else None), "the error stays"
        assert entry.waiting_since_ms == NOW, "nor the stall clock"
        window = DEFAULT_RETRIES.backoff_ms(n, expected_rng)
        assert entry.next_attempt_ms - now == (window if is_error else max(100, window))
        now = entry.next_attempt_ms
    assert rq.stalled(q, NOW + 60_000, 60_000) == [(T, 1), (T, 2)]
    q = _poll(p, q, now, rng, progress=Progress(0, 5, 11))  # S3 is back: one more segment deleted
    entry = q.topics[T].pending[1]
    assert (entry.attempts_without_progress, entry.last_error, entry.next_attempt_ms, entry.waiting_since_ms) == (
        0,
        None,
        now + 100,
        now,
    )


@PIPELINES
def test_a_broker_that_never_progresses_is_asked_ever_more_rarely_up_to_the_cap(p: Pipeline) -> None:
    """Five minutes of a job stuck on S3: with a fixed 100 ms re-poll that is 3,000 requests; with the backoff a
    few dozen, every wait within the declared cap, so it is still asked regularly."""
    rng = random.Random(42)
    stuck = Progress(0, 0, 12)
    q = _poll(p, p.start(), NOW, rng, progress=Progress())
    now = q.topics[T].pending[1].next_attempt_ms
    while now < NOW + 300_000:
        q = _poll(p, q, now, rng, progress=stuck, error="KAFKA_STORAGE_ERROR: S3 down" if rng.random() < 0.3 else None)
        entry = q.topics[T].pending[1]
        assert 0 < entry.next_attempt_ms - now <= 30_000
        now = entry.next_attempt_ms
    attempts = q.topics[T].pending[1].attempts
    assert 12 <= attempts <= 60, attempts


@PIPELINES
def test_progress_is_counted_against_the_most_work_reported_not_the_last_reply(p: Pipeline) -> None:
    """A job restarted after a failure reports again from where it starts: only counts beyond the most seen are
    progress. The remaining count alone is not (it grows as partitions are planned)."""
    rng = random.Random(0)
    q = _poll(p, p.start(), NOW, rng, progress=Progress(1, 10, 5))
    now = NOW + 100
    q = _poll(p, q, now, rng, progress=Progress(0, 10, 3), error="KAFKA_STORAGE_ERROR: S3 down")
    assert q.topics[T].pending[1].progress == Progress(1, 10, 3)
    for counts in (Progress(0, 10, 0), Progress(1, 10, 2), Progress(1, 9, 1)):
        now = q.topics[T].pending[1].next_attempt_ms
        before = q.topics[T].pending[1].attempts_without_progress
        q = _poll(p, q, now, rng, progress=counts)
        assert q.topics[T].pending[1].attempts_without_progress == before + 1, counts
    now = q.topics[T].pending[1].next_attempt_ms
    q = _poll(p, q, now, rng, progress=Progress(1, 11, 0))
    assert q.topics[T].pending[1].attempts_without_progress == 0
    now = q.topics[T].pending[1].next_attempt_ms
    q = _poll(p, q, now, rng, progress=Progress(2, 11, 0))
    assert q.topics[T].pending[1].attempts_without_progress == 0, "a partition done is progress too"
    q, _ = _send_all(p, q, q.topics[T].pending[1].next_attempt_ms)
    no_counts = _reply(p, q, 1, in_progress=True)
    assert no_counts.topics[T].pending[1].attempts_without_progress == 1, "a reply without counts shows none"


@PIPELINES
def test_a_new_incarnation_resets_the_backoff_drops_the_request_in_flight_and_is_asked_at_once(p: Pipeline) -> None:
    q, _ = _send_all(p, p.start())
    q = _fail(p, q, 1, random.Random(3))
    q, _ = _send_all(p, q, NOW + 10**6)
    assert q.topics[T].pending[1].in_flight and q.topics[T].pending[1].attempts_without_progress == 1
    q = p.reincarnate(q, 1, 99, NOW + 10**6 + 1)
    entry = q.topics[T].pending[1]
    assert (entry.broker_epoch, entry.attempts_without_progress, entry.in_flight, entry.next_attempt_ms) == (
        99,
        0,
        False,
        NOW + 10**6 + 1,
    )
    _, sends = p.due(q, NOW + 10**6 + 1)
    assert [(s.broker_id, s.broker_epoch, s.attempt) for s in sends] == [(1, 99, 3)], "the old request is moot"


@PIPELINES
def test_a_new_incarnation_forgets_the_progress_mark(p: Pipeline) -> None:
    q = _poll(p, p.start(), NOW, random.Random(0), progress=Progress(1, 10, 0))
    assert q.topics[T].pending[1].progress == Progress(1, 10, 0)
    q = p.reincarnate(q, 1, 77, NOW + 1)
    assert q.topics[T].pending[1].progress is None
    q = _poll(p, q, NOW + 1, random.Random(0), progress=Progress(0, 0, 4))
    assert q.topics[T].pending[1].attempts_without_progress == 0, "a new process counts from zero: it progressed"


@PIPELINES
def test_stalled_reports_brokers_without_progress_for_the_threshold(p: Pipeline) -> None:
    q, _ = _send_all(p, p.start())
    assert rq.stalled(q, NOW + 59_999, 60_000) == []
    assert sorted(rq.stalled(q, NOW + 60_000, 60_000)) == [(T, 1), (T, 2)]
    q = _reply(p, q, 1, in_progress=True, now=NOW + 30_000, progress=Progress(0, 1, 4))
    assert rq.stalled(q, NOW + 60_000, 60_000) == [(T, 2)]
    q = _fail(p, q, 2, random.Random(0), NOW + 60_000)
    assert rq.stalled(q, NOW + 60_000, 60_000) == [(T, 2)], "failures are not progress"


def test_next_event_is_the_earliest_timeout_backoff_end_or_new_stall_and_never_for_a_fenced_broker() -> None:
    def topic(**entries: rq.QueuedBroker[Duty]) -> rq.QueuedJob[Duty]:
        pending = {int(b[1:]): entry for b, entry in entries.items()}
        return rq.QueuedJob(topic_id=Uuid.random(), name="t", since_ms=0, pending=pending)

    def queue(*topics: rq.QueuedJob[Duty]) -> Queue:
        return rq.RetryQueue(immutables.Map({t.topic_id: t for t in topics}))

    waiting = rq.QueuedBroker(broker_epoch=1, duty=Duty(), next_attempt_ms=5_000, waiting_since_ms=1_000)
    in_flight = rq.QueuedBroker(broker_epoch=1, duty=Duty(), in_flight=True, last_attempt_ms=2_000)
    fenced = rq.QueuedBroker(broker_epoch=1, duty=Duty(), fenced=True, next_attempt_ms=0, waiting_since_ms=1_000)

    def nxt(q: Queue, *, stalls_after: int = 0, stall: float = 100_000) -> float:
        return rq.next_event_ms(q, timeout_ms=10_000, stall_threshold_ms=stall, stalls_after_ms=stalls_after)

    assert nxt(rq.RetryQueue()) == float("inf")
    assert nxt(queue(topic(b1=waiting))) == 5_000, "its backoff ends"
    assert nxt(queue(topic(b1=in_flight))) == 12_000, "its request times out"
    assert nxt(queue(topic(b1=waiting), topic(b2=in_flight))) == 5_000, "the earliest of all topics"
    assert nxt(queue(topic(b1=fenced))) == 101_000, "a fenced broker is sent to only when an image unfences it"
    assert nxt(queue(topic(b1=fenced)), stalls_after=101_000) == float("inf"), "already stalled: nothing new"
    assert nxt(queue(topic(b1=waiting)), stall=2_000) == 3_000, "it stalls before its backoff ends"
    assert nxt(queue(topic(b1=fenced)), stall=float("inf")) == float("inf"), "stalls not watched: never"
    q = queue(
        dq.QueuedDisablement(
            topic_id=Uuid.random(),
            name="t",
            since_ms=0,
            tiered_epoch=2,
            policy=DisablePolicy.RETAIN,
            pending={1: waiting},
        )
    )
    assert rq.due(q, 4_999) == (q, []), "nothing due before the next event: the queue as it was"
    assert rq.due(q, 5_000)[1], "due at the next event"
