"""The controller's retry queue: one pure, immutable machine for every job it asks brokers to do.

A job is keyed by a topic id and owed by some brokers: a DISABLING topic's disablement at its tiered epoch
(``disablement_queue.py``), a deleted topic's remote data (``deletion_queue.py``). Two things are each policy's own:
who owes what (each broker's ``duty``: the partitions it hosts, leads and is assigned; the partitions it deletes),
and when the job is done (every required broker acknowledged its duty; the RLMM shows every partition FINISHED).
This module keeps the rest, the same for both: the requests sent to each (job, broker) pair and what their replies
do. Every function takes the queue (and ``now_ms``, and an ``rng`` where randomness is needed) and returns a new
queue; nothing here reads a clock, sleeps, or does I/O. A driver feeds it and sends the commands it returns.

Invariants:
* In flight: at most one request per (job, broker), numbered by ``attempt``. A reply for another attempt than the
  one in flight (a late reply to a request :func:`expire` gave up on and that was sent again), or for a pair with
  nothing in flight (a duplicate), changes nothing (ARCHITECTURE §4 invariant 7).
* A request covers the duty the broker had when it was sent (``sent_duty``). If the duty changes while the request
  is in flight (:func:`owe` sees every change), its answer cannot speak for the new duty: its "done" is not credited,
  and the broker is asked again as soon as it answers.
* Due: a broker is sent to when it is not fenced, has nothing in flight and its backoff has ended.
* Progress and backoff: a broker's replies carry its job's counts (:class:`Progress`). The queue keeps the most work
  each broker has reported and calls a reply *progress* when it shows more than that, or when it is the first
  one. Only progress resets ``attempts_without_progress`` and the stall clock (``waiting_since_ms``) and clears
  ``last_error``; the broker is asked again after ``repoll_ms``. Everything else is one more attempt without
  progress (the backoff's attempt number): an error, a timeout, an IN_PROGRESS reply whose counts did not move (a
  job stuck on a failing S3 answers IN_PROGRESS between its failures), and a "done" the policy does not take a
  reply's word for (remote deletion: the RLMM says). Such a broker is asked again after the backoff (never sooner
  than ``repoll_ms`` for a reply), ever more rarely up to the cap, and ``last_error`` keeps saying why. Segments
  *remaining* are reported but not compared: the count grows as a job plans partition after partition.
* Backoff: full jitter (:class:`orchestrator.backoff.Backoff`, in milliseconds) with the ``[disablement]``
  settings' base and cap (:class:`Retries`), drawn from the injected ``rng``, so a seeded one reproduces it.
* A new incarnation of a broker (a new broker epoch), or one back from fencing, is asked at once with its backoff
  reset; whatever was in flight to it is moot, and a new incarnation loses its progress mark (a new process counts
  from zero).
* Next event (:func:`next_event_ms`): until then the passing of time alone changes nothing :func:`expire`,
  :func:`due` or :func:`stalled` say about the same queue, so a driver ticking over thousands of queued jobs need
  not walk them at every tick.
* The jobs are a persistent (HAMT) map, so a reply changes one entry in O(log32 n) and shares the rest instead of
  copying a map of every queued job (a bulk disablement: thousands); a call that changes nothing returns the very
  same queue.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Generic, TypeVar

import immutables

from orchestrator.backoff import Backoff
from orchestrator.errors import RequestTimedOut, TieredError, as_wire_error, error_name
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage
from orchestrator.settings import DisablementSettings

W = TypeVar("W")  # what a broker owes for one job (its duty): the policy's

_EMPTY: Mapping[Any, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Retries:
    """How the queue retries: the re-poll interval after progress and the backoff (milliseconds) after none."""

    repoll_ms: int
    backoff: Backoff

    @classmethod
    def of(cls, settings: DisablementSettings) -> Retries:
        backoff = Backoff(base=settings.retry_backoff_ms, cap=settings.retry_backoff_max_ms)
        return cls(settings.repoll_ms, backoff)

    def backoff_ms(self, attempts_without_progress: int, rng: random.Random) -> int:
        """Milliseconds to wait after ``attempts_without_progress`` (>= 1) attempts without progress in a row."""
        return round(self.backoff.delay(attempts_without_progress, rng))


DEFAULT_RETRIES = Retries.of(DisablementSettings())


@dataclass(frozen=True, slots=True)
class Progress:
    """The counts a reply carries about the broker's job: partitions done, segments deleted and remaining."""

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
    """One request's outcome as the queue reads it: a reply, a transport error, or neither (a timeout)."""

    error_code: int
    error_message: str | None = None
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


def reply_error(outcome: Outcome) -> str:
    """How a failed reply is shown as ``last_error``: the error's name, and its message when there is one."""
    name = error_name(outcome.error_code)
    return f"{name}: {outcome.error_message}" if outcome.error_message else name


@dataclass(frozen=True, slots=True)
class QueuedBroker(Generic[W]):
    """One broker's part in one queued job: what it owes, and the requests sent to it for it."""

    broker_epoch: int  # the registration it is sent to; a new one means a new incarnation
    duty: W  # what it owes now (the policy's)
    fenced: bool = False  # fenced brokers are not sent to
    attempts: int = 0  # requests sent for this job
    attempts_without_progress: int = 0  # in a row (errors, timeouts, stuck polls): the backoff's attempt number
    last_error: str | None = None  # the last error, kept until a reply shows progress
    progress: Progress | None = None  # the most work this incarnation reported for the job (None: no count yet)
    last_attempt_ms: int = -1
    next_attempt_ms: int = 0  # not sent before this
    in_flight: bool = False
    sent_duty: W | None = None  # the duty the in-flight (or last) request covers
    duty_moved: bool = False  # the duty changed while the request was in flight: its "done" is not credited
    waiting_since_ms: int = 0  # since when it has owed without progress (stall detection)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueuedJob(Generic[W]):
    """One queued job: the topic it is about and the brokers that still owe it (a policy adds its own fields)."""

    topic_id: Uuid
    name: str
    since_ms: int  # when the job entered the queue
    pending: Mapping[int, QueuedBroker[W]] = field(default_factory=lambda: _EMPTY)


J = TypeVar("J", bound=QueuedJob[Any])


@dataclass(frozen=True, slots=True)
class RetryQueue(Generic[J]):
    """The queued jobs by topic id."""

    topics: immutables.Map[Uuid, J] = field(default_factory=immutables.Map)

    def topic(self, topic_id: Uuid) -> J | None:
        return self.topics.get(topic_id)

    def pending_brokers(self, topic_id: Uuid) -> Mapping[int, QueuedBroker[Any]]:
        job = self.topics.get(topic_id)
        return _EMPTY if job is None else job.pending


Credit = Callable[[J, int, QueuedBroker[Any], int], J]
"""A policy's "done": (job, broker id, its entry, now_ms) -> the job once that broker's reply that it is done (to a
request whose duty did not move) is taken; the entry is as the request left it (the reply's counts are not merged
into it: the broker leaves the pending set). A policy without one does not take a reply's word for it: the job is done
when a store says so."""


@dataclass(frozen=True, slots=True)
class Send(Generic[J, W]):
    """A command: send ``broker_id`` (at ``broker_epoch``) the request numbered ``attempt`` about ``job``, covering
    ``duty``; the driver makes the wire request of it."""

    job: J
    broker_id: int
    broker_epoch: int
    attempt: int
    duty: W

    @property
    def topic_id(self) -> Uuid:
        return self.job.topic_id


# --- who can be asked ---------------------------------------------------------------------------------------------


def live_brokers(image: MetadataImage) -> list[int]:
    """Registered, unfenced brokers, by id."""
    return sorted(b.broker_id for b in image.brokers.values() if not b.fenced)


def spread(partitions: Iterable[int], live: Sequence[int]) -> dict[int, int]:
    """partition -> the live broker that takes it: ``live[p % len(live)]`` (by id: every controller computes the
    same); empty with no live broker."""
    if not live:
        return {}
    return {p: live[p % len(live)] for p in partitions}


def owe(current: QueuedBroker[W] | None, duty: W, *, broker_epoch: int, fenced: bool, now_ms: int) -> QueuedBroker[W]:
    """A broker's entry once it owes ``duty`` (as the newest image says, with its registration's epoch and fencing):
    a new one is asked at once; a known one keeps its requests and backoff, unless it is a new incarnation or back
    from fencing (module docstring); a duty that changes while a request is in flight marks it moved."""
    if current is None:
        return QueuedBroker(broker_epoch, duty, fenced, next_attempt_ms=now_ms, waiting_since_ms=now_ms)
    moved = current.duty_moved or (current.in_flight and duty != current.sent_duty)
    if duty == current.duty and fenced == current.fenced and moved == current.duty_moved:
        updated = current
    else:
        updated = replace(current, duty=duty, fenced=fenced, duty_moved=moved)
    reincarnated = broker_epoch != current.broker_epoch
    if reincarnated or (current.fenced and not fenced):
        updated = replace(
            updated,
            broker_epoch=broker_epoch,
            attempts_without_progress=0,
            in_flight=False,
            duty_moved=False,
            next_attempt_ms=now_ms,
            progress=None if reincarnated else updated.progress,
        )
    return updated


# --- requests out -------------------------------------------------------------------------------------------------


def due(queue: RetryQueue[J], now_ms: int) -> tuple[RetryQueue[J], list[Send[J, Any]]]:
    """The requests to send now (unfenced, not in flight, backoff elapsed), and the queue with them in flight."""
    sends: list[Send[J, Any]] = []
    with queue.topics.mutate() as topics:
        for topic_id, job in queue.topics.items():
            pending: dict[int, QueuedBroker[Any]] | None = None
            for broker_id, entry in job.pending.items():
                if entry.in_flight or entry.fenced or entry.next_attempt_ms > now_ms:
                    continue
                if pending is None:
                    pending = dict(job.pending)
                sent = replace(
                    entry,
                    attempts=entry.attempts + 1,
                    in_flight=True,
                    last_attempt_ms=now_ms,
                    sent_duty=entry.duty,
                    duty_moved=False,
                )
                pending[broker_id] = sent
                sends.append(Send(job, broker_id, sent.broker_epoch, sent.attempts, sent.duty))
            if pending is not None:
                topics[topic_id] = replace(job, pending=MappingProxyType(pending))
        updated = topics.finish()
    if not sends:
        return queue, sends
    return RetryQueue(updated), sends


def expire(
    queue: RetryQueue[J], now_ms: int, *, timeout_ms: int, rng: random.Random, retries: Retries
) -> RetryQueue[J]:
    """Count as timed out every request in flight for ``timeout_ms`` or more (a reply that never came)."""
    out = queue
    text = f"{RequestTimedOut.name}: no reply in {timeout_ms} ms"
    for job in queue.topics.values():
        for broker_id, entry in job.pending.items():
            if entry.in_flight and now_ms - entry.last_attempt_ms >= timeout_ms:
                out = _with_broker(out, out.topics[job.topic_id], broker_id, _failed(entry, text, now_ms, rng, retries))
    return out


# --- replies in ---------------------------------------------------------------------------------------------------


def on_reply(
    queue: RetryQueue[J],
    topic_id: Uuid,
    broker_id: int,
    outcome: Outcome,
    *,
    attempt: int | None,
    now_ms: int,
    rng: random.Random,
    retries: Retries,
    credit: Credit[J] | None,
) -> RetryQueue[J]:
    """Feed one reply (or a timeout: a REQUEST_TIMED_OUT outcome) to the request ``attempt`` to ``broker_id``;
    ``attempt`` None matches the request in flight. ``credit`` is the policy's "done" (:data:`Credit`)."""
    job = queue.topics.get(topic_id)
    entry = job.pending.get(broker_id) if job is not None else None
    if job is None or entry is None or not entry.in_flight or (attempt is not None and attempt != entry.attempts):
        return queue  # a duplicate, a late reply to an attempt already given up on, or a broker no longer owing
    progress = outcome.progress
    if outcome.ok and not outcome.in_progress and credit is not None and not entry.duty_moved:
        # Credited: the broker leaves the pending set, so its entry's counts are not kept (nothing to merge).
        return RetryQueue(queue.topics.set(topic_id, credit(job, broker_id, entry, now_ms)))
    progressed = progress is not None and progress.beyond(entry.progress)
    if progress is not None:
        entry = replace(entry, progress=progress.merged(entry.progress))
    if not outcome.ok:
        return _with_broker(queue, job, broker_id, _failed(entry, reply_error(outcome), now_ms, rng, retries))
    # Not (or not provably) the whole duty: asked again at once if the duty moved, soon if the job moved on, and
    # after a growing backoff if it did not. A "done" the duty moved under is progress; a "done" the policy does
    # not credit is not (the store will say; until it does, the broker is asked again ever more rarely).
    moved_on = progressed if outcome.in_progress else credit is not None
    polled = _polled(entry, progressed=moved_on, now_ms=now_ms, rng=rng, retries=retries)
    if entry.duty_moved:
        polled = replace(polled, next_attempt_ms=now_ms)
    return _with_broker(queue, job, broker_id, replace(polled, duty_moved=False))


def _failed(entry: QueuedBroker[W], text: str, now_ms: int, rng: random.Random, retries: Retries) -> QueuedBroker[W]:
    """``entry`` after a failed attempt (an error or a timeout): one more attempt without progress, ``text`` kept as
    its last error, asked again after the backoff."""
    n = entry.attempts_without_progress + 1
    return replace(
        entry,
        in_flight=False,
        attempts_without_progress=n,
        last_error=text,
        next_attempt_ms=now_ms + retries.backoff_ms(n, rng),
        duty_moved=False,
    )


def _polled(
    entry: QueuedBroker[W], *, progressed: bool, now_ms: int, rng: random.Random, retries: Retries
) -> QueuedBroker[W]:
    """``entry`` after a reply that is not (or not provably) the end: asked again soon if it made progress (its last
    error cleared, its stall clock restarted), else after the backoff of one more attempt without progress (its
    last error stays: it is still why nothing moves), and never sooner than ``repoll_ms``."""
    if progressed:
        return replace(
            entry,
            in_flight=False,
            attempts_without_progress=0,
            last_error=None,
            next_attempt_ms=now_ms + retries.repoll_ms,
            waiting_since_ms=now_ms,
        )
    n = entry.attempts_without_progress + 1
    wait = max(retries.repoll_ms, retries.backoff_ms(n, rng))
    return replace(entry, in_flight=False, attempts_without_progress=n, next_attempt_ms=now_ms + wait)


def _with_broker(queue: RetryQueue[J], job: J, broker_id: int, entry: QueuedBroker[Any]) -> RetryQueue[J]:
    updated = replace(job, pending=MappingProxyType({**job.pending, broker_id: entry}))
    return RetryQueue(queue.topics.set(job.topic_id, updated))


# --- what time alone changes --------------------------------------------------------------------------------------


def stalled(queue: RetryQueue[Any], now_ms: int, threshold_ms: int) -> list[tuple[Uuid, int]]:
    """(topic, broker) pairs that have owed without progress for ``threshold_ms`` or more."""
    return [
        (topic_id, broker_id)
        for topic_id, job in queue.topics.items()
        for broker_id, entry in job.pending.items()
        if now_ms - entry.waiting_since_ms >= threshold_ms
    ]


def next_event_ms(queue: RetryQueue[Any], *, timeout_ms: int, stall_threshold_ms: float, stalls_after_ms: int) -> float:
    """The earliest time at which the passing of time alone changes what :func:`expire`, :func:`due` or
    :func:`stalled` say about ``queue`` (``inf``: never): a request in flight reaching ``timeout_ms``, a backoff
    ending, or a pending broker's wait reaching ``stall_threshold_ms`` after ``stalls_after_ms`` (waits that reached
    it earlier are already stalled; ``inf``: stalls are not watched). A fenced broker is sent to only once an image
    unfences it, which is a new queue."""
    earliest = math.inf
    for job in queue.topics.values():
        for entry in job.pending.values():
            if entry.in_flight:
                earliest = min(earliest, entry.last_attempt_ms + timeout_ms)
            elif not entry.fenced:
                earliest = min(earliest, entry.next_attempt_ms)
            stalls_at = entry.waiting_since_ms + stall_threshold_ms
            if stalls_at > stalls_after_ms:
                earliest = min(earliest, stalls_at)
    return earliest


def pending_count(queue: RetryQueue[Any]) -> int:
    return sum(len(job.pending) for job in queue.topics.values())
