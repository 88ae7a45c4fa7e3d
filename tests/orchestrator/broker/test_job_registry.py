"""The broker's job registry, alone: its rules with fake work functions, a hand-set clock and a runner that collects
the jobs it is given, so each test runs them when it chooses and reads every answer in between."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.broker.job_registry import (
    BrokerJobStatus,
    JobEvents,
    JobProgress,
    JobRegistry,
    JobRun,
    NextStep,
    Work,
    error_body,
    failure_of,
    job_answer,
    next_step,
)
from orchestrator.errors import (
    InvalidRequest,
    KafkaStorageError,
    RemoteStorageError,
    StaleTieredEpoch,
)
from orchestrator.protocol import messages as m
from tests.support.clocks import FakeClock

pytestmark = pytest.mark.unit

EVENTS = JobEvents(started="job.started", done="job.done", failed="job.failed", crashed="job.crashed")
TOPIC = "topic-a"


class World:
    """A registry whose jobs are collected, a clock set by hand, and a count of the work functions begun."""

    def __init__(self) -> None:
        self.clock = FakeClock(100.0)
        self.jobs: list[Callable[[], None]] = []
        self.registry: JobRegistry[str] = JobRegistry(
            events=EVENTS, run_in_background=self.jobs.append, clock=self.clock
        )
        self.begun = 0

    def ask(
        self,
        covers: Iterable[int] = (0, 1),
        work: Work | None = None,
        *,
        work_left: Callable[[JobProgress], bool] = lambda _job: False,
        key: str = TOPIC,
    ) -> JobProgress:
        def begin() -> Work | None:
            self.begun += 1
            return work

        return self.registry.request(
            key, covers=covers, begin=begin, work_left=work_left, context={"topic": key}, started={"why": "test"}
        )

    def run_jobs(self) -> None:
        while self.jobs:
            self.jobs.pop(0)()


def deletes(segments: int, *, counted: int | None = None) -> Work:
    """A work function that deletes ``segments`` segments of each covered partition in one batch, of which it
    counts ``counted`` (fewer when a racing deleter journaled some first)."""

    def work(run: JobRun) -> None:
        for _partition in sorted(run.progress.covers):
            report = run.deletion_progress(segments)
            report(segments, segments, segments if counted is None else counted)
            run.partitions_finished()

    return work


def fails_with(exc: Exception, *, after_segments: int = 0) -> Work:
    def work(run: JobRun) -> None:
        if after_segments:
            run.deletion_progress(after_segments)(after_segments, after_segments, after_segments)
        raise exc

    return work


# -- the pure rules -----------------------------------------------------------------------------------------------

RUNNING = JobProgress(frozenset({0, 1}))
DONE = JobProgress(frozenset({0, 1}), partitions_done=2, done=True)
FAILED = JobProgress(frozenset({0, 1}), failure=KafkaStorageError("S3 down"))


@pytest.mark.parametrize(
    ("job", "covers", "work_left", "step"),
    [
        (None, {0}, False, NextStep.START),
        (RUNNING, {0, 1}, False, NextStep.REPORT),
        (RUNNING, {0, 1, 2}, False, NextStep.REPORT),  # uncovered work waits for the running job to end
        (DONE, {0}, False, NextStep.REPORT),
        (DONE, {0, 1}, True, NextStep.START),  # remote data left after DONE: apply the work again
        (DONE, {1, 2}, False, NextStep.START),  # a partition the job did not cover
        (FAILED, {0, 1}, False, NextStep.RESTART),
        (FAILED, {5}, True, NextStep.RESTART),
    ],
)
def test_the_next_step_follows_the_registry_rule(
    job: JobProgress | None, covers: set[int], work_left: bool, step: NextStep
) -> None:
    assert next_step(job, covers=frozenset(covers), work_left=work_left) is step


def test_an_answer_carries_the_status_the_counts_and_a_failure_with_its_cause() -> None:
    job = JobProgress(frozenset({0, 1, 2}), partitions_done=1, segments_deleted=7, segments_remaining=3)
    assert job_answer(job, m.DeleteRemotePartitionsResponse) == {
        "error_code": 0,
        "status": BrokerJobStatus.IN_PROGRESS,
        "partitions_total": 3,
        "partitions_done": 1,
        "segments_deleted": 7,
        "segments_remaining": 3,
    }
    failed = job_answer(FAILED, m.DisableRemoteTopicResponse)
    assert (failed["error_code"], failed["error_message"]) == (KafkaStorageError.code, "S3 down")
    assert job_answer(DONE, m.DisableRemoteTopicResponse)["status"] == BrokerJobStatus.DONE


def test_a_jobs_exception_is_mapped_to_a_kafka_error_with_its_cause() -> None:
    coded = StaleTieredEpoch("epoch 3 is not the topic's")
    assert failure_of(coded) is coded
    storage = failure_of(RemoteStorageError("DeleteObjects: SlowDown"))
    assert (type(storage), storage.message) == (KafkaStorageError, "REMOTE_STORAGE_ERROR: DeleteObjects: SlowDown")
    unexpected = failure_of(ValueError("bad offset"))
    assert (type(unexpected), unexpected.message) == (KafkaStorageError, "ValueError: bad offset")
    refused = error_body(InvalidRequest("not marked"), m.DeleteRemotePartitionsResponse)
    assert refused == {"error_code": InvalidRequest.code, "error_message": "not marked"}
    assert error_body(RemoteStorageError("x"), m.DisableRemoteTopicResponse)["error_code"] == KafkaStorageError.code


# -- the registry ---------------------------------------------------------------------------------------------------


def test_a_first_request_starts_one_job_in_the_background_and_answers_it_in_progress() -> None:
    world = World()
    started = world.ask((0, 1), deletes(4))
    assert (started.status, started.partitions_total, started.partitions_done) == (BrokerJobStatus.IN_PROGRESS, 2, 0)
    assert len(world.jobs) == 1 and world.begun == 1
    world.run_jobs()
    done = world.ask((0, 1), deletes(4))
    assert (done.status, done.partitions_done, done.segments_deleted, done.segments_remaining) == (
        BrokerJobStatus.DONE,
        2,
        8,
        0,
    )


def test_a_duplicate_delivery_finds_the_job_and_starts_nothing() -> None:
    world = World()
    first = world.ask((0, 1), deletes(4))
    assert world.ask((0, 1), deletes(4)) == first, "a running job is reported"
    assert world.ask((1,), deletes(4)) == first, "a request for part of it too"
    assert len(world.jobs) == 1 and world.begun == 1
    world.run_jobs()
    done = world.ask((0, 1), deletes(4))
    assert world.ask((0, 1), deletes(4)) == done and world.jobs == [] and world.begun == 1, "DONE is reported"


def test_progress_is_counted_as_the_work_reports_it() -> None:
    world = World()
    seen: list[JobProgress | None] = []

    def work(run: JobRun) -> None:
        report = run.deletion_progress(10)
        seen.append(world.registry.progress(TOPIC))
        report(4, 10, 4)
        seen.append(world.registry.progress(TOPIC))
        report(10, 10, 10)
        run.partitions_finished()
        seen.append(world.registry.progress(TOPIC))

    world.ask((0,), work)
    world.run_jobs()
    counts = [(p.segments_deleted, p.segments_remaining, p.partitions_done, p.done) for p in seen if p is not None]
    assert counts == [(0, 10, 0, False), (4, 6, 0, False), (10, 0, 1, False)]
    assert world.ask((0,)).done


def test_a_racing_deleters_segments_are_counted_once_by_whoever_journaled_them_first() -> None:
    world = World()
    world.ask((0,), deletes(5, counted=2))  # another broker's FINISHED moved 3 of the 5 first
    world.run_jobs()
    done = world.ask((0,))
    assert (done.done, done.segments_deleted, done.segments_remaining) == (True, 2, 0)


def test_a_failed_jobs_failure_is_answered_once_and_that_request_restarts_it() -> None:
    world = World()
    world.ask((0, 1), fails_with(KafkaStorageError("orders-1: EndpointConnectionError"), after_segments=3))
    world.run_jobs()
    with capture_logs() as logs:
        failed = world.ask((0, 1), deletes(2))
    assert failed.failure is not None and failed.failure.message == "orders-1: EndpointConnectionError"
    assert failed.segments_deleted == 3, "the failure is answered with the counts the job reached"
    assert len(world.jobs) == 1, "the request that found the failure restarted the job"
    assert [e for e in logs if e["event"] == "job.started"] == [
        {
            "event": "job.started",
            "log_level": "info",
            "topic": TOPIC,
            "why": "test",
            "restarted_after": "orders-1: EndpointConnectionError",
        }
    ]
    restarted = world.ask((0, 1), deletes(2))
    assert (restarted.failure, restarted.status) == (None, BrokerJobStatus.IN_PROGRESS), "answered once"
    assert restarted.segments_deleted == 3, "the restarted job counts on from the failed one"
    assert len(world.jobs) == 1
    world.run_jobs()
    assert world.ask((0, 1)).segments_deleted == 3 + 4


def test_an_unexpected_exception_fails_the_job_with_a_storage_error_naming_it() -> None:
    world = World()
    world.ask((0,), fails_with(ZeroDivisionError("division by zero")))
    with capture_logs() as logs:
        world.run_jobs()
    assert [e["event"] for e in logs] == ["job.crashed"] and logs[0]["exc_info"] is True
    failed = world.ask((0,), deletes(1))
    assert failed.failure is not None
    assert (failed.failure.code, failed.failure.message) == (
        KafkaStorageError.code,
        "ZeroDivisionError: division by zero",
    )


def test_a_request_naming_work_the_job_does_not_cover_starts_a_new_job_once_the_current_one_ended() -> None:
    world = World()
    world.ask((0,), deletes(2))
    running = world.ask((0, 1), deletes(2))
    assert running.covers == {0} and len(world.jobs) == 1, "never a second job beside the running one"
    world.run_jobs()
    wider = world.ask((0, 1), deletes(2))
    assert (wider.covers, wider.status, wider.segments_deleted) == (frozenset({0, 1}), BrokerJobStatus.IN_PROGRESS, 2)
    assert len(world.jobs) == 1 and world.begun == 2
    world.run_jobs()
    assert world.ask((0, 1)).status == BrokerJobStatus.DONE


def test_work_left_is_asked_only_of_a_done_job_and_starts_it_again() -> None:
    world = World()
    asked: list[JobProgress] = []
    remote_left = [True]

    def work_left(job: JobProgress) -> bool:
        asked.append(job)
        return remote_left[0]

    world.ask((0,), deletes(1), work_left=work_left)
    world.ask((0,), deletes(1), work_left=work_left)
    assert asked == [], "a running job is not looked at"
    world.run_jobs()
    again = world.ask((0,), deletes(1), work_left=work_left)
    assert [j.done for j in asked] == [True] and again.status == BrokerJobStatus.IN_PROGRESS and world.begun == 2
    remote_left[0] = False
    world.run_jobs()
    assert world.ask((0,), work_left=work_left).status == BrokerJobStatus.DONE and world.begun == 2


def test_a_refusal_before_a_job_starts_changes_nothing() -> None:
    world = World()
    world.ask((0,), fails_with(KafkaStorageError("S3 down")))
    world.run_jobs()

    def log_not_open() -> Work | None:
        raise KafkaStorageError("partition 0's local log is not open")

    with pytest.raises(KafkaStorageError, match="not open"):
        world.registry.request(TOPIC, covers=(0,), begin=log_not_open, context={})
    still = world.registry.progress(TOPIC)
    assert still is not None and still.failure is not None and world.jobs == []
    assert world.ask((0,), deletes(1)).failure == still.failure, "the failure is still the next request's answer"


def test_work_complete_at_once_answers_done_and_runs_nothing() -> None:
    world = World()
    done = world.ask((0, 1), None)
    assert (done.status, done.partitions_done, done.segments_deleted) == (BrokerJobStatus.DONE, 2, 0)
    assert world.jobs == []


def test_each_job_is_logged_under_its_handlers_names_and_timed_by_the_injected_clock() -> None:
    world = World()

    def slow(run: JobRun) -> None:
        world.clock.now += 2.5
        deletes(3)(run)

    with capture_logs() as logs:
        world.ask((0,), slow, key="t1")
        world.run_jobs()
        world.ask((0,), fails_with(KafkaStorageError("S3 down")), key="t2")
        world.clock.now += 1.0
        world.run_jobs()
    assert [(e["event"], e["topic"], e.get("elapsed_s")) for e in logs] == [
        ("job.started", "t1", None),
        ("job.done", "t1", 2.5),
        ("job.started", "t2", None),
        ("job.failed", "t2", 1.0),
    ]
    assert logs[1]["segments_deleted"] == 3
    assert (logs[3]["error"], logs[3]["detail"]) == ("KAFKA_STORAGE_ERROR", "S3 down")


def test_a_runner_that_runs_the_job_at_once_does_not_deadlock_the_registry() -> None:
    registry: JobRegistry[str] = JobRegistry(events=EVENTS, run_in_background=lambda job: job())
    answer = registry.request(TOPIC, covers=(0,), begin=lambda: deletes(2), context={})
    assert answer.status == BrokerJobStatus.IN_PROGRESS, "the answer is the job as it started"
    progress = registry.progress(TOPIC)
    assert progress is not None and (progress.done, progress.segments_deleted) == (True, 2)


def test_requests_racing_from_many_threads_start_one_job_per_key() -> None:
    world = World()
    threads = 8
    barrier = threading.Barrier(threads)
    answers: list[Any] = []

    def request(key: str) -> None:
        barrier.wait()
        answers.append(world.ask((0, 1), deletes(1), key=key))

    workers = [threading.Thread(target=request, args=(f"t{i % 2}",)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(answers) == threads and len(world.jobs) == 2 and world.begun == 2, "one job for each of the 2 keys"
