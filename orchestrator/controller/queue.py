"""The disablement queue (KIP-950's "local queue within the controller context"), pure and immutable.

For every topic that is DISABLING at tiered epoch E it tracks which brokers still owe an acknowledgement of E.
Every function takes the queue (and ``now_ms``, and an ``rng`` where randomness is needed) and returns a new
queue; nothing here reads a clock, sleeps, or does I/O. The controller core feeds it images and replies and
executes the :class:`SendDisable` commands it returns.

Who must acknowledge (DESIGN §4): every *registered* broker that hosts a replica of the topic, and every broker
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
again (a new broker epoch) or is unfenced, its backoff is reset and it is asked at once (a new incarnation also
loses its progress mark: a new process counts from zero). An acknowledgement
survives a re-registration (the work is done and journaled; DisableRemoteTopic is idempotent), but not an
unregistration: an unregistered (decommissioned) broker leaves every pending and acknowledged set, and owes a
fresh acknowledgement if it ever comes back. A topic that is deleted, or leaves DISABLING, leaves the queue; a
new tiered epoch starts the topic over.

Replies: at most one request per (topic, broker) is in flight, numbered by ``attempt``. A reply for another
epoch than the queued one, for another attempt than the one in flight (a late reply to a request that
:func:`expire` gave up on and that was sent again), or for a (topic, broker) with nothing in flight (a
duplicate) changes nothing (DESIGN §4 invariant 7). Done removes the broker from the pending set. KIP-950 retries
"until it receives a successful response", so every error is retried; :func:`stalled` reports brokers that make no
progress.

Progress and backoff: a broker's replies carry its job's counts (:class:`Progress`). The queue keeps the most work
each pending broker has reported (``progress``: partitions done, segments deleted) and calls a reply *progress*
when it shows more than that, or when it is the first one. Only progress resets ``failures`` and the stall clock
and clears ``last_error``; it re-polls after ``repoll_ms``. Everything else is one more attempt without progress
(``failures`` + 1, the backoff's attempt number): an error, a timeout, and also an IN_PROGRESS reply whose counts
did not move (a job stuck on a failing S3 answers IN_PROGRESS between its failures), which keeps the last error
and waits at least ``repoll_ms``. So a broker that cannot make progress is asked ever more rarely, up to the cap,
and ``last_error`` keeps saying why. Segments *remaining* are reported but not compared: the count grows as a job
plans partition after partition, and a restarted job plans afresh.

Backoff: ONE declared tenacity policy for the whole DisableRemoteTopic call family, :data:`DISABLE_RPC_WAIT`
(full jitter: a uniform draw in a window that doubles per consecutive attempt without progress, capped).
tenacity's ``wait_random_exponential`` draws from the global ``random`` module, so :func:`backoff_ms` takes the
window's upper bound from the same policy object (its deterministic ``wait_exponential`` part, evaluated on a
``RetryCallState`` carrying the attempt number) and draws the point in it from the injected ``rng``: the
schedule is the declared policy's, and a seeded ``rng`` reproduces it exactly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, TypeVar

import immutables
import tenacity

from orchestrator.errors import RequestTimedOut, TieredError, as_wire_error, error_name
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.records import DisablePolicy, TieredState

DISABLE_RPC_WAIT = tenacity.wait_random_exponential(multiplier=0.2, max=30)  # seconds: 0.2, 0.4, 0.8 ... 30
DEFAULT_REPOLL_MS = 200  # an IN_PROGRESS broker that made progress is asked again this soon

_EMPTY: Mapping[Any, Any] = MappingProxyType({})
_RETRY_STATE_OWNER = tenacity.Retrying(wait=DISABLE_RPC_WAIT)


def backoff_ms(failures: int, rng: random.Random) -> int:
    """Milliseconds to wait after ``failures`` consecutive failures (>= 1), per :data:`DISABLE_RPC_WAIT`.

    The window's upper bound is ``wait_exponential``'s value for attempt ``failures`` (0.2 s * 2**(n-1), capped
    at 30 s); the wait is ``rng.uniform(min, upper)``, as ``wait_random_exponential`` would draw it.
    """
    state = tenacity.RetryCallState(_RETRY_STATE_OWNER, fn=None, args=(), kwargs={})
    state.attempt_number = max(1, failures)
    upper = tenacity.wait_exponential.__call__(DISABLE_RPC_WAIT, state)
    return round(rng.uniform(DISABLE_RPC_WAIT.min, upper) * 1000)


class RetriedEntry(Protocol):
    """What both controller queues (disablement, remote deletion) keep per broker about their requests to it: a
    frozen dataclass with these fields (and ``in_flight``, ``last_error``, ``next_attempt_ms``)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def failures(self) -> int: ...


_Entry = TypeVar("_Entry", bound=RetriedEntry)


def reply_error(error_code: int, error_message: str | None) -> str:
    """How a failed reply is shown as ``last_error``: the error's name, and its message when there is one."""
    return f"{error_name(error_code)}: {error_message}" if error_message else error_name(error_code)


def after_failure(entry: _Entry, text: str, now_ms: int, rng: random.Random) -> _Entry:
    """``entry`` after a failed attempt (an error or a timeout): one more failure, ``text`` kept as its last error,
    asked again after the backoff."""
    failures = entry.failures + 1
    return replace(
        entry, in_flight=False, failures=failures, last_error=text, next_attempt_ms=now_ms + backoff_ms(failures, rng)
    )


def after_poll(entry: _Entry, *, progressed: bool, now_ms: int, rng: random.Random, repoll_ms: int) -> _Entry:
    """``entry`` after a reply that is not (or not provably) the end: asked again soon if it made progress (its last
    error is cleared), else after the backoff of one more attempt without progress (its last error stays: it is
    still why nothing moves), and never sooner than ``repoll_ms``."""
    if progressed:
        return replace(entry, in_flight=False, failures=0, last_error=None, next_attempt_ms=now_ms + repoll_ms)
    failures = entry.failures + 1
    wait = max(repoll_ms, backoff_ms(failures, rng))
    return replace(entry, in_flight=False, failures=failures, next_attempt_ms=now_ms + wait)


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
class Progress:
    """The counts a DisableRemoteTopic reply carries about the broker's job for the epoch."""

    partitions_done: int = 0
    segments_deleted: int = 0
    segments_remaining: int = 0

    def beyond(self, mark: Progress | None) -> bool:
        """Whether these counts show more work done than ``mark`` (the most seen so far; None: nothing seen)."""
        if mark is None:
            return True
        return self.partitions_done > mark.partitions_done or self.segments_deleted > mark.segments_deleted

    def merged(self, mark: Progress | None) -> Progress:
        """The new mark: the most work done of both, and the latest remaining count."""
        if mark is None:
            return self
        return Progress(
            max(self.partitions_done, mark.partitions_done),
            max(self.segments_deleted, mark.segments_deleted),
            self.segments_remaining,
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request's outcome as the queues read it: a reply, a transport error, or neither (a timeout)."""

    error_code: int
    error_message: str | None
    in_progress: bool = False
    progress: Progress | None = None  # the job's counts; None when the reply carries none about the job

    @property
    def ok(self) -> bool:
        return self.error_code == 0


def read_outcome(reply: Mapping[str, Any] | None, error: TieredError | None, *, about_the_job: bool = True) -> Outcome:
    """Read a request's outcome; ``reply`` is a DisableRemoteTopic or DeleteRemotePartitions response (their job
    fields: status, partitions_done, segments_deleted, segments_remaining). ``about_the_job`` says whether the
    reply's counts describe the job asked about (a DisableRemoteTopic reply for another tiered epoch does not)."""
    if error is not None:
        wire = as_wire_error(error)
        return Outcome(wire.code, wire.message)
    if reply is None:
        return Outcome(RequestTimedOut.code, "no reply (timed out)")
    code = int(reply.get("error_code", 0))
    progress = None
    if about_the_job:
        progress = Progress(
            int(reply.get("partitions_done", 0)),
            int(reply.get("segments_deleted", 0)),
            int(reply.get("segments_remaining", 0)),
        )
    in_progress = code == 0 and int(reply.get("status", 0)) == 1
    return Outcome(code, reply.get("error_message"), in_progress, progress)


@dataclass(frozen=True, slots=True)
class PendingBroker:
    """A broker that owes an acknowledgement of the queued epoch."""

    broker_epoch: int  # the registration it is sent to; a new one means a new incarnation
    duty: Duty  # its duty in the latest image
    fenced: bool = False  # fenced brokers are not sent to
    attempts: int = 0  # requests sent for this epoch
    failures: int = 0  # consecutive attempts without progress (errors, timeouts, stuck polls): the backoff's number
    last_error: str | None = None  # the last error, kept until a reply shows progress
    progress: Progress | None = None  # the most work this incarnation reported for the epoch (None: no count yet)
    last_attempt_ms: int = -1
    next_attempt_ms: int = 0  # not sent before this
    in_flight: bool = False
    sent_duty: Duty = NO_DUTY  # the duty the in-flight (or last) request covers
    duty_moved: bool = False  # the duty changed while the request was in flight: its "done" is not credited
    waiting_since_ms: int = 0  # since when it has owed without progress (stall detection)


@dataclass(frozen=True, slots=True)
class Ack:
    """A broker's acknowledgement of the queued epoch, and the duty it covers."""

    duty: Duty
    at_ms: int


@dataclass(frozen=True, slots=True)
class PendingTopic:
    topic_id: Uuid
    name: str
    tiered_epoch: int
    policy: DisablePolicy
    since_ms: int  # when this epoch's disablement entered the queue
    pending: Mapping[int, PendingBroker] = field(default_factory=lambda: _EMPTY)
    acked: Mapping[int, Ack] = field(default_factory=lambda: _EMPTY)
    remote_checks_failed: int = 0  # RLMM backstops that found remote data left after every broker acknowledged


TopicMap = immutables.Map[Uuid, PendingTopic]
"""The queue's topics: a persistent (hash array mapped trie) map, so that one reply changes one entry in
O(log32 n) and shares the rest, instead of copying a map of every queued topic (bulk disablement: thousands)."""


@dataclass(frozen=True, slots=True)
class DisablementQueue:
    topics: TopicMap = field(default_factory=immutables.Map)

    def topic(self, topic_id: Uuid) -> PendingTopic | None:
        return self.topics.get(topic_id)

    def pending_brokers(self, topic_id: Uuid) -> Mapping[int, PendingBroker]:
        t = self.topics.get(topic_id)
        return _EMPTY if t is None else t.pending


EMPTY_QUEUE = DisablementQueue()


@dataclass(frozen=True, slots=True)
class SendDisable:
    """A command: send DisableRemoteTopic for ``topic_id`` at ``tiered_epoch`` to ``broker_id``."""

    topic_id: Uuid
    broker_id: int
    broker_epoch: int
    tiered_epoch: int
    policy: DisablePolicy
    attempt: int
    assigned: frozenset[int] = frozenset()  # leaderless partitions whose remote data the broker is to delete


def live_brokers(image: MetadataImage) -> list[int]:
    """Registered, unfenced brokers, by id."""
    return sorted(b.broker_id for b in image.brokers.values() if not b.fenced)


def leaderless_assignment(topic: TopicImage, image: MetadataImage) -> dict[int, int]:
    """partition -> broker: who deletes the remote data of each partition of a DISABLING(delete) topic that has no
    live leader (leader -1, or a broker that is not registered and unfenced): the live broker at index
    ``partition_id % len(live)`` of :func:`live_brokers`. Empty for other topics, or when no broker is live."""
    if topic.tiered_state != TieredState.DISABLING or topic.policy != DisablePolicy.DELETE:
        return {}
    live = live_brokers(image)
    if not live:
        return {}
    alive = set(live)
    return {
        p.partition_id: live[p.partition_id % len(live)] for p in topic.partitions.values() if p.leader not in alive
    }


def deleting_brokers(topic: TopicImage, image: MetadataImage) -> dict[int, int]:
    """partition -> the broker answerable for its remote data under the delete policy: its live leader, or its
    assignee (:func:`leaderless_assignment`); -1 if there is none (retain, or no live broker)."""
    assignment = leaderless_assignment(topic, image)
    alive = set(live_brokers(image))
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
                entry = PendingTopic(topic.topic_id, topic.name, topic.tiered_epoch, topic.policy, since_ms=now_ms)
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
    return DisablementQueue(updated) if changed else queue


def _reconcile(entry: PendingTopic, topic: TopicImage, image: MetadataImage, now_ms: int) -> PendingTopic:
    pending: dict[int, PendingBroker] = {}
    acked: dict[int, Ack] = {}
    for broker_id, duty in sorted(required(topic, image).items()):
        registration = image.brokers[broker_id]
        ack = entry.acked.get(broker_id)
        if ack is not None and ack.duty.covers(duty):
            acked[broker_id] = ack
            continue
        current = entry.pending.get(broker_id)
        if current is None:
            pending[broker_id] = PendingBroker(
                broker_epoch=registration.broker_epoch,
                duty=duty,
                fenced=registration.fenced,
                next_attempt_ms=now_ms,
                waiting_since_ms=now_ms,
            )
            continue
        moved = current.duty_moved or (current.in_flight and duty != current.sent_duty)
        updated = replace(current, duty=duty, fenced=registration.fenced, duty_moved=moved)
        reincarnated = registration.broker_epoch != current.broker_epoch
        unfenced = current.fenced and not registration.fenced
        if reincarnated or unfenced:
            # A new incarnation, or a broker back from fencing: whatever was in flight is moot; ask at once.
            updated = replace(
                updated,
                broker_epoch=registration.broker_epoch,
                failures=0,
                in_flight=False,
                duty_moved=False,
                next_attempt_ms=now_ms,
            )
            if reincarnated:
                updated = replace(updated, progress=None)
        pending[broker_id] = updated
    if pending == dict(entry.pending) and acked == dict(entry.acked):
        return entry
    return replace(entry, pending=MappingProxyType(pending), acked=MappingProxyType(acked))


def expire(queue: DisablementQueue, now_ms: int, *, timeout_ms: int, rng: random.Random) -> DisablementQueue:
    """Count as timed out every request in flight for ``timeout_ms`` or more (a reply that never came)."""
    out = queue
    for t in queue.topics.values():
        for broker_id, pb in t.pending.items():
            if pb.in_flight and now_ms - pb.last_attempt_ms >= timeout_ms:
                text = f"{RequestTimedOut.name}: no reply in {timeout_ms} ms"
                out = _fail(out, out.topics[t.topic_id], broker_id, pb, text, now_ms, rng)
    return out


def due(queue: DisablementQueue, now_ms: int) -> tuple[DisablementQueue, list[SendDisable]]:
    """The requests to send now (unfenced, not in flight, backoff elapsed), and the queue with them in flight."""
    sends: list[SendDisable] = []
    with queue.topics.mutate() as topics:
        for topic_id, t in queue.topics.items():
            pending: dict[int, PendingBroker] | None = None
            for broker_id, pb in t.pending.items():
                if pb.in_flight or pb.fenced or pb.next_attempt_ms > now_ms:
                    continue
                attempt = pb.attempts + 1
                if pending is None:
                    pending = dict(t.pending)
                pending[broker_id] = replace(
                    pb, attempts=attempt, in_flight=True, last_attempt_ms=now_ms, sent_duty=pb.duty, duty_moved=False
                )
                send = SendDisable(
                    topic_id, broker_id, pb.broker_epoch, t.tiered_epoch, t.policy, attempt, assigned=pb.duty.assigned
                )
                sends.append(send)
            if pending is not None:
                topics[topic_id] = replace(t, pending=MappingProxyType(pending))
        updated = topics.finish()
    if not sends:
        return queue, sends
    return DisablementQueue(updated), sends


def on_response(
    queue: DisablementQueue,
    topic_id: Uuid,
    broker_id: int,
    tiered_epoch: int,
    *,
    ok: bool,
    in_progress: bool,
    error_code: int,
    error_message: str | None,
    now_ms: int,
    rng: random.Random,
    repoll_ms: int = DEFAULT_REPOLL_MS,
    attempt: int | None = None,
    progress: Progress | None = None,
) -> DisablementQueue:
    """Feed one reply (or timeout: ``ok=False`` with REQUEST_TIMED_OUT) for the request to ``broker_id``.

    ``attempt`` is the :attr:`SendDisable.attempt` the reply answers; None matches the request in flight.
    ``progress`` is the counts the reply carries (None: it carries none, e.g. a timeout); an IN_PROGRESS reply
    without counts shows no progress.
    """
    t = queue.topics.get(topic_id)
    if t is None or t.tiered_epoch != tiered_epoch:
        return queue  # a reply for an epoch (or a topic) no longer queued
    pb = t.pending.get(broker_id)
    if pb is None or not pb.in_flight or (attempt is not None and attempt != pb.attempts):
        return queue  # a duplicate, or a late reply to an attempt already given up on
    progressed = progress is not None and progress.beyond(pb.progress)
    if progress is not None:
        pb = replace(pb, progress=progress.merged(pb.progress))
    if not ok:
        return _fail(queue, t, broker_id, pb, reply_error(error_code, error_message), now_ms, rng)
    if not in_progress and not pb.duty_moved:
        pending = {b: p for b, p in t.pending.items() if b != broker_id}
        acked = {**t.acked, broker_id: Ack(pb.sent_duty, now_ms)}
        topic = replace(t, pending=MappingProxyType(pending), acked=MappingProxyType(acked))
        return DisablementQueue(queue.topics.set(topic_id, topic))
    # Not (or not provably) the whole duty: ask again, at once if the duty moved, soon if the job moved on, and
    # after a growing backoff if it did not (its last error stays: it is still why nothing moves).
    moved_on = not in_progress or progressed  # a "done" the duty moved under is progress too
    polled = after_poll(pb, progressed=moved_on, now_ms=now_ms, rng=rng, repoll_ms=repoll_ms)
    if moved_on:
        polled = replace(polled, waiting_since_ms=now_ms)
    if pb.duty_moved:
        polled = replace(polled, next_attempt_ms=now_ms)
    return _with_pending(queue, t, broker_id, replace(polled, duty_moved=False))


def _fail(
    queue: DisablementQueue,
    t: PendingTopic,
    broker_id: int,
    pb: PendingBroker,
    text: str,
    now_ms: int,
    rng: random.Random,
) -> DisablementQueue:
    return _with_pending(queue, t, broker_id, replace(after_failure(pb, text, now_ms, rng), duty_moved=False))


def _with_pending(queue: DisablementQueue, t: PendingTopic, broker_id: int, pb: PendingBroker) -> DisablementQueue:
    topic = replace(t, pending=MappingProxyType({**t.pending, broker_id: pb}))
    return DisablementQueue(queue.topics.set(t.topic_id, topic))


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
        pending[b] = PendingBroker(
            broker_epoch=registration.broker_epoch,
            duty=need[b],
            fenced=registration.fenced,
            failures=checks,
            last_error=reason,
            next_attempt_ms=now_ms + backoff_ms(checks, rng),
            waiting_since_ms=now_ms,
        )
    topic_entry = replace(
        t, pending=MappingProxyType(pending), acked=MappingProxyType(acked), remote_checks_failed=checks
    )
    return DisablementQueue(queue.topics.set(topic_id, topic_entry))


def stalled(queue: DisablementQueue, now_ms: int, threshold_ms: int) -> list[tuple[Uuid, int]]:
    """(topic, broker) pairs that have owed an acknowledgement without progress for ``threshold_ms`` or more."""
    return [
        (topic_id, broker_id)
        for topic_id, t in queue.topics.items()
        for broker_id, pb in t.pending.items()
        if now_ms - pb.waiting_since_ms >= threshold_ms
    ]


def next_event_ms(queue: DisablementQueue, *, timeout_ms: int, stall_threshold_ms: int, stalls_after_ms: int) -> float:
    """The earliest time at which the passing of time alone changes what :func:`expire`, :func:`due` or
    :func:`stalled` say about ``queue`` (``inf``: never): a request in flight reaching ``timeout_ms``, a backoff
    ending, or a pending broker's wait reaching ``stall_threshold_ms`` after ``stalls_after_ms`` (waits that reached
    it earlier are already stalled). A fenced broker is sent to only once an image unfences it, which is a new
    queue. So until then, with the same queue, all three answer as they did: a controller ticking over thousands of
    queued topics need not walk them at every tick."""
    earliest = math.inf
    for t in queue.topics.values():
        for pb in t.pending.values():
            if pb.in_flight:
                earliest = min(earliest, pb.last_attempt_ms + timeout_ms)
            elif not pb.fenced:
                earliest = min(earliest, pb.next_attempt_ms)
            stalls_at = pb.waiting_since_ms + stall_threshold_ms
            if stalls_at > stalls_after_ms:
                earliest = min(earliest, stalls_at)
    return earliest


def pending_count(queue: DisablementQueue) -> int:
    return sum(len(t.pending) for t in queue.topics.values())
