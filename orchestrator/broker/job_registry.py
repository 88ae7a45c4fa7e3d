"""The broker's remote-data jobs: one registry for DisableRemoteTopic and DeleteRemotePartitions.

Both controller RPCs that make a broker work on remote data run the same machine, written here once: a job per key
(a disablement's ``(topic id, tiered epoch)``, a deletion's topic id) run in the background so the controller's
request never waits on S3, its progress counts, the answer to every request about it, and what its failure becomes
on the wire. Each handler (``disable_handler``, ``remote_partition_deleter``) keeps only its own fencing, its choice
of partitions and its work function. The decisions are pure functions of an immutable :class:`JobProgress`
(:func:`next_step`, :func:`job_answer`, :func:`failure_of`); :class:`JobRegistry` keeps the jobs and runs them.

Invariants:

1. One job per key at a time. A request whose job is running, or ended DONE covering every partition the request
   names with no work left, is answered with the job's progress and starts nothing: a re-delivered request (a retry,
   or a new controller after a failover) finds its job, so nothing is done twice (ARCHITECTURE §4 invariant 7).
2. A request naming partitions the current job does not cover, or finding work left after it ended DONE (the
   handler says what is left, from the RLMM: the answer "done" must mean the remote data is gone), starts a new job
   covering what this request names, once the current one ended, never beside it.
3. Failures are answered, never swallowed: a failed job keeps its failure until a request finds it; that request is
   answered with the failure (its Kafka code, the cause in the message, the counts the job reached) and restarts the
   job, which resumes where the RLMM journal says it stopped. So each failure is answered once, the controller shows
   it and backs off (``controller/retry_queue.py``), and the next request sees the restarted job.
4. Counts only show progress: a new job of a key counts ``segments_deleted`` on from the last one, and a deletion
   step counts only the segments its own journal record deleted first (``segments_counted`` of
   ``remote_storage/deletion.py``), so when two brokers race on one partition (its old leader and the broker it was
   assigned to) the counts summed over brokers name each segment once.
5. A job's exception becomes a Kafka error with its cause: one of ours its wire error (a storage failure
   KAFKA_STORAGE_ERROR); anything else (a bug, an unexpected library error) KAFKA_STORAGE_ERROR with the
   exception's class and text, logged with its traceback. The broker keeps serving either way.
6. Thread-safety: jobs run on the pool's threads (:func:`orchestrator.broker.jobs.start_job`) while requests are
   answered on the event loop's worker threads. A job's progress is an immutable snapshot, replaced whole under the
   registry's lock, so an answer never mixes two moments. The handler's last checks before a new job (``begin``)
   run under that lock, so two requests never start two jobs of one key; its look at the RLMM for work left runs
   outside it.
7. Ends are announced: a listener added with :meth:`JobRegistry.on_end` is called (on the job's thread, outside
   the lock) each time a job ends, DONE or failed, so a request that found its job running can be answered again
   then, instead of the controller learning of it at its next poll. Progress is not announced: a deletion reports
   it just before it ends, and an answer sent then would say "in progress" a moment before "done".
8. Log events are named by each handler (:class:`JobEvents`) and stay stable: ``<handler>.started`` (with
   ``restarted_after`` when a failure restarted it), ``.done``, ``.failed`` and ``.crashed``, with the job's
   context (topic id, and tiered epoch for a disablement) and how long the job ran, by the injected clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Generic, TypeVar

import structlog

from orchestrator.broker.jobs import start_job
from orchestrator.errors import KafkaError, KafkaStorageError, TieredError, as_wire_error
from orchestrator.protocol import messages as m
from remote_storage.deletion import ProgressCallback

log = structlog.get_logger(__name__)

Key = TypeVar("Key", bound=Hashable)

# The answers of the two RPCs: each carries error_code, error_message, status and the progress counts.
Response = TypeVar("Response", m.DisableRemoteTopicResponse, m.DeleteRemotePartitionsResponse)


class BrokerJobStatus(IntEnum):
    """A broker job's ``status`` in DisableRemoteTopic's and DeleteRemotePartitions' answers."""

    DONE = 0
    IN_PROGRESS = 1


@dataclass(frozen=True, slots=True)
class JobProgress:
    """One moment of a job: what it covers, how far it got, how it ended (``done``, or ``failure``)."""

    covers: frozenset[int]  # the partitions this job applies its work to
    partitions_done: int = 0
    segments_deleted: int = 0  # counted once over racing deleters (invariant 4)
    segments_remaining: int = 0
    done: bool = False
    failure: KafkaError | None = None

    @property
    def partitions_total(self) -> int:
        return len(self.covers)

    @property
    def status(self) -> BrokerJobStatus:
        return BrokerJobStatus.DONE if self.done else BrokerJobStatus.IN_PROGRESS


class NextStep(Enum):
    """What a request does about the job of its key."""

    REPORT = "report"  # the job covers the request: answer its progress, start nothing
    START = "start"  # no job, or one that ended DONE without covering the request: start a new one
    RESTART = "restart"  # the job failed: answer its failure and start it again


def next_step(job: JobProgress | None, *, covers: frozenset[int], work_left: bool) -> NextStep:
    """The registry's rule (invariants 1 to 3). ``work_left`` is the handler's look at a job that ended DONE
    covering the request: whether the RLMM still holds remote data of a partition it covered."""
    if job is None:
        return NextStep.START
    if job.failure is not None:
        return NextStep.RESTART
    if not job.done or (covers <= job.covers and not work_left):
        return NextStep.REPORT
    return NextStep.START


def asks_work_left(job: JobProgress | None, covers: frozenset[int]) -> bool:
    """Whether :func:`next_step` needs the handler's ``work_left`` for ``job``: it ended DONE covering ``covers``."""
    return job is not None and job.done and job.failure is None and covers <= job.covers


def next_job(previous: JobProgress | None, covers: frozenset[int]) -> JobProgress:
    """A new job covering ``covers``; it counts ``segments_deleted`` on from the job it replaces (invariant 4)."""
    return JobProgress(covers, segments_deleted=previous.segments_deleted if previous is not None else 0)


def failure_of(exc: Exception) -> KafkaError:
    """What a job's exception is answered as (invariant 5)."""
    if isinstance(exc, TieredError):
        return as_wire_error(exc)
    return KafkaStorageError(f"{type(exc).__name__}: {exc}")


def job_answer(job: JobProgress, response: type[Response]) -> Response:
    """The answer a request gets about ``job``: its status and counts, and its failure with the cause if it failed."""
    out = response(
        error_code=0,
        status=int(job.status),
        partitions_total=job.partitions_total,
        partitions_done=job.partitions_done,
        segments_deleted=job.segments_deleted,
        segments_remaining=job.segments_remaining,
    )
    if job.failure is not None:
        out["error_code"] = job.failure.code
        out["error_message"] = job.failure.message
    return out


def error_body(exc: TieredError, response: type[Response]) -> Response:
    """The answer to a request refused with ``exc``: its Kafka code (a storage failure is KAFKA_STORAGE_ERROR)."""
    wire = as_wire_error(exc)
    return response(error_code=wire.code, error_message=wire.message)


def refused(
    exc: TieredError, response: type[Response], event: str, *, quiet: bool = False, **context: object
) -> Response:
    """:func:`error_body`, logged as ``event`` (at info level when ``quiet``: one topic of a batch)."""
    wire = as_wire_error(exc)
    (log.info if quiet else log.warning)(event, **context, error=wire.name, detail=wire.message)
    return response(error_code=wire.code, error_message=wire.message)


@dataclass(frozen=True, slots=True)
class JobEvents:
    """The stable names of a handler's job log events."""

    started: str
    done: str
    failed: str
    crashed: str


@dataclass(eq=False)
class _Job:
    """A job's slot in the registry: its latest progress, replaced whole under the registry's lock."""

    progress: JobProgress
    started_s: float


class JobRun:
    """What a work function reports its progress through, from the pool's thread."""

    def __init__(self, lock: threading.Lock, job: _Job) -> None:
        self._lock = lock
        self._job = job

    @property
    def progress(self) -> JobProgress:
        with self._lock:
            return self._job.progress

    def partitions_finished(self, count: int = 1) -> None:
        """``count`` more covered partitions have their work applied."""
        self._update(lambda p: dataclasses.replace(p, partitions_done=p.partitions_done + count))

    def deletion_progress(self, planned: int) -> ProgressCallback:
        """Count ``planned`` more segments as remaining, and return the progress callback of their deletion
        (:func:`remote_storage.deletion.delete_segments`): it counts the segments done off the remaining ones, and
        adds to ``segments_deleted`` only those this deletion counted (invariant 4)."""
        with self._lock:
            base = self._job.progress
            base = self._job.progress = dataclasses.replace(base, segments_remaining=base.segments_remaining + planned)

        def progress(done: int, _planned: int, counted: int) -> None:
            self._update(
                lambda p: dataclasses.replace(
                    p,
                    segments_deleted=base.segments_deleted + counted,
                    segments_remaining=base.segments_remaining - done,
                )
            )

        return progress

    def _update(self, change: Callable[[JobProgress], JobProgress]) -> None:
        with self._lock:
            self._job.progress = change(self._job.progress)


Work = Callable[[JobRun], None]  # a job's work: reports through its JobRun; raises to fail the job


class JobRegistry(Generic[Key]):
    """The jobs of one handler, by key (see the module docstring)."""

    def __init__(
        self,
        *,
        events: JobEvents,
        run_in_background: Callable[[Callable[[], None]], None] = start_job,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._events = events
        self._run = run_in_background
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[Key, _Job] = {}
        self._listeners: list[Callable[[], None]] = []

    @contextlib.contextmanager
    def on_end(self, listener: Callable[[], None]) -> Iterator[None]:
        """While inside, call ``listener`` (on the job's thread; it must not block) each time a job ends (invariant
        7)."""
        with self._lock:
            self._listeners.append(listener)
        try:
            yield
        finally:
            with self._lock:
                self._listeners.remove(listener)

    def _ended(self) -> None:
        with self._lock:
            listeners = tuple(self._listeners)
        for listener in listeners:
            listener()

    def progress(self, key: Key) -> JobProgress | None:
        """The latest progress of ``key``'s job (None: no job yet)."""
        with self._lock:
            job = self._jobs.get(key)
            return job.progress if job is not None else None

    def request(
        self,
        key: Key,
        *,
        covers: Iterable[int],
        begin: Callable[[], Work | None],
        work_left: Callable[[JobProgress], bool] = lambda _job: False,
        context: Mapping[str, object],
        started: Mapping[str, object] | None = None,
        quiet: bool = False,
    ) -> JobProgress:
        """A request for ``key``'s work on the partitions ``covers``: what it is answered (the job's progress, or
        the failure it found) after the registry's rule (:func:`next_step`) ran.

        ``begin`` is called, under the lock, only when a job is to be started: it raises to refuse the request
        (nothing changes), and returns the work to run in the background, or None when the work is complete at
        once. ``work_left`` is asked, outside the lock, about a job that ended DONE covering the request.
        ``context`` goes with every log event of the job, ``started`` with its start; ``quiet`` (a batched request,
        which logs one summary line) logs a first start and a job complete at once at debug level."""
        wanted = frozenset(covers)
        answer, job, work = self._decide(key, wanted, begin, work_left, context, started, quiet)
        if job is not None and work is not None:  # outside the lock: a runner that runs it at once must not deadlock
            self._run(functools.partial(self._execute, job, work, context))
        return answer

    def _decide(
        self,
        key: Key,
        wanted: frozenset[int],
        begin: Callable[[], Work | None],
        work_left: Callable[[JobProgress], bool],
        context: Mapping[str, object],
        started: Mapping[str, object] | None,
        quiet: bool,
    ) -> tuple[JobProgress, _Job | None, Work | None]:
        """The answer, and the job started with its work to run (None when none is started or none is left)."""
        while True:
            seen = self._slot(key)
            seen_progress = seen.progress if seen is not None else None
            asked = asks_work_left(seen_progress, wanted)
            left = asked and seen_progress is not None and work_left(seen_progress)
            with self._lock:
                job = self._jobs.get(key)
                current = job.progress if job is not None else None
                if job is not seen or asks_work_left(current, wanted) != asked:
                    continue  # another request replaced the job, or it ended, while the RLMM was looked at
                step = next_step(current, covers=wanted, work_left=left)
                if step is NextStep.REPORT:
                    assert current is not None
                    return current, None, None
                work = begin()
                new = _Job(next_job(current, wanted), started_s=self._clock())
                self._jobs[key] = new
                failed = current if step is NextStep.RESTART else None
                self._log_start(context, started, failed, quiet)
                if work is None:
                    new.progress = dataclasses.replace(new.progress, partitions_done=len(wanted), done=True)
                    (log.debug if quiet else log.info)(self._events.done, **context, segments_deleted=0)
                return (failed if failed is not None else new.progress), new, work

    def _slot(self, key: Key) -> _Job | None:
        with self._lock:
            return self._jobs.get(key)

    def _log_start(
        self,
        context: Mapping[str, object],
        started: Mapping[str, object] | None,
        failed: JobProgress | None,
        quiet: bool,
    ) -> None:
        restarted = {}
        if failed is not None and failed.failure is not None:
            restarted = {"restarted_after": failed.failure.message}
        # A restart is always worth a line, even in a batch.
        (log.info if failed is not None or not quiet else log.debug)(
            self._events.started, **context, **(started or {}), **restarted
        )

    def _execute(self, job: _Job, work: Work, context: Mapping[str, object]) -> None:
        """Run ``work`` on the pool's thread; the job ends DONE, or failed with its exception as a Kafka error."""
        try:
            work(JobRun(self._lock, job))
        except TieredError as exc:  # e.g. a storage failure: answered as KAFKA_STORAGE_ERROR, retried, then resumed
            elapsed = {"elapsed_s": self._elapsed(job)}
            log.warning(self._events.failed, **context, error=exc.name, detail=exc.message, **elapsed)
            self._end(job, failure_of(exc))
        except Exception as exc:  # a bug or an unexpected library error: report it, keep the broker serving
            log.exception(self._events.crashed, **context, elapsed_s=self._elapsed(job))
            self._end(job, failure_of(exc))
        else:
            ended = self._end(job, None)
            log.info(
                self._events.done, **context, segments_deleted=ended.segments_deleted, elapsed_s=self._elapsed(job)
            )

    def _end(self, job: _Job, failure: KafkaError | None) -> JobProgress:
        """The job ended: DONE without ``failure``, failed with it."""
        with self._lock:
            job.progress = dataclasses.replace(job.progress, done=failure is None, failure=failure)
            ended = job.progress
        self._ended()
        return ended

    def _elapsed(self, job: _Job) -> float:
        return round(self._clock() - job.started_s, 3)
