"""The broker's DisableRemoteTopic handler: failures are answered with their cause, and never acknowledged.

A real SQLite store, real segment files and moto's S3 server (through the broker harness); the handler's jobs are
collected instead of run on its pool, so each test runs them when it chooses and reads every answer in between.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import botocore.exceptions as bce
import pytest

from orchestrator.broker.disable_handler import DisableRemoteTopicHandler
from orchestrator.broker.job_registry import BrokerJobStatus
from orchestrator.errors import KafkaStorageError, StaleControllerEpoch, StaleTieredEpoch, UnknownTopicId
from orchestrator.ids import Uuid
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState, make_record
from tests.support.broker_harness import BrokerJobsWorld, BrokerUnderTest

pytestmark = pytest.mark.integration


class Env(BrokerJobsWorld):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.handler = _handler(self.broker, self.jobs)

    def ask(self, tid: Uuid) -> dict[str, Any]:
        """One DisableRemoteTopic for the topic's current epoch, as the controller sends it."""
        epoch = self.broker.follower.refresh().topics[tid].tiered_epoch
        body = {"topic_id": tid, "partition_id": -1, "tiered_epoch": epoch, "controller_epoch": self.writer.epoch}
        return dict(self.handler.handle(body))  # type: ignore[arg-type]


@pytest.fixture
def env(tmp_path, s3_client, bucket) -> Iterator[Env]:  # type: ignore[no-untyped-def]
    with contextlib.closing(Env(tmp_path, s3_client, bucket)) as world:
        yield world


def _tiered(env: Env, name: str, partitions: int, *, produced_to: range | None = None) -> Uuid:
    tid = env.writer.create_topic(name, partitions=partitions)
    for p in produced_to if produced_to is not None else range(partitions):
        env.broker.produce(tid, 60, partition=p)
        assert env.broker.tier(tid, p) > 0
        env.broker.trim_local(tid, p)
    return tid


def _handler(broker: BrokerUnderTest, jobs: list[Callable[[], None]]) -> DisableRemoteTopicHandler:
    """``broker``'s DisableRemoteTopic handler, its jobs collected in ``jobs`` instead of run."""
    return DisableRemoteTopicHandler(
        broker_id=broker.broker_id,
        store=broker.store,
        rlm=broker.rlm,
        logs=broker.logs,
        refresh_image=broker.follower.refresh,
        now_ms=broker.now_ms,
        run_in_background=jobs.append,
        data_dir=broker.data_dir,
    )


def test_a_failed_job_is_answered_with_its_storage_error_and_cause_then_restarted_where_it_stopped(env: Env) -> None:
    tid = _tiered(env, "orders", 2)
    env.broker.rlmm.refresh()
    per_partition = {p: len(env.broker.rlmm.segments(tid, p)) for p in (0, 1)}
    s3_down_for_partition_1 = [True]

    def outage(request: Any, **_: Any) -> None:  # S3 refuses connections for partition 1's DeleteObjects
        if s3_down_for_partition_1[0] and f"-{tid}/1/".encode() in request.body:
            raise bce.EndpointConnectionError(endpoint_url=request.url)

    env.s3.meta.events.register("before-send.s3.DeleteObjects", outage)
    env.writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)

    started = env.ask(tid)
    assert (started["error_code"], started["status"]) == (0, BrokerJobStatus.IN_PROGRESS)
    env.run_jobs()  # partition 0 is deleted, partition 1 fails after the S3 retries

    failed = env.ask(tid)
    assert failed["error_code"] == KafkaStorageError.code, failed
    message = failed["error_message"]
    assert "orders-1" in message and env.bucket in message, message
    assert "EndpointConnectionError: Could not connect to the endpoint URL" in message, "the cause, class and text"
    assert failed["segments_deleted"] == per_partition[0] and failed["tiered_epoch"] == 2
    assert failed["partitions_done"] == 1, "partition 0 was counted when its last window was journaled; 1 never"
    assert len(env.jobs) == 1, "the request that found the failure restarted the job"

    restarted = env.ask(tid)
    assert (restarted["error_code"], restarted["status"]) == (0, BrokerJobStatus.IN_PROGRESS)
    assert restarted["segments_deleted"] == per_partition[0], "the restarted job counts on from the failed one"
    assert env.ask(tid) == restarted, "a job in progress is reported, not started again"
    assert len(env.jobs) == 1

    s3_down_for_partition_1[0] = False
    env.run_jobs()
    done = env.ask(tid)
    assert (done["error_code"], done["status"]) == (0, BrokerJobStatus.DONE)
    assert done["segments_deleted"] == sum(per_partition.values()) and done["partitions_done"] == 2
    assert env.objects(tid) == []
    env.broker.rlmm.refresh()
    assert {s.state for s in env.broker.rlmm.segments(tid)} == {SegmentState.DELETE_SEGMENT_FINISHED}
    assert env.jobs == [] and env.ask(tid) == done


def test_the_partitions_of_a_delete_share_the_window_of_deleteobjects_calls_in_flight(env: Env) -> None:
    tid = _tiered(env, "orders", 3)
    in_flight: list[int] = []  # partitions whose DeleteObjects call is under way
    most = [0]
    lock = threading.Condition()

    def enter(request: Any, **_: Any) -> None:  # a call waits (bounded) for all three to be under way
        partition = next(p for p in range(3) if f"-{tid}/{p}/".encode() in request.body)
        with lock:
            in_flight.append(partition)
            most[0] = max(most[0], len(in_flight))
            lock.notify_all()
            lock.wait_for(lambda: len(in_flight) == 3, timeout=10)

    def leave(**_: Any) -> None:
        with lock:
            in_flight.pop()

    env.s3.meta.events.register("before-send.s3.DeleteObjects", enter)
    env.s3.meta.events.register("after-call.s3.DeleteObjects", leave)
    env.writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    env.ask(tid)
    env.run_jobs()
    done = env.ask(tid)
    assert (done["error_code"], done["status"], done["partitions_done"]) == (0, BrokerJobStatus.DONE, 3), done
    assert most[0] == 3, "each partition's batch went out beside the others', not a partition at a time"
    assert env.objects(tid) == []


@pytest.mark.parametrize("policy", [DisablePolicy.DELETE, DisablePolicy.RETAIN])
def test_a_led_partition_whose_log_is_not_open_is_never_acknowledged(env: Env, policy: DisablePolicy) -> None:
    tid = _tiered(env, "orders", 2, produced_to=range(1))  # partition 1's log was never opened on this broker
    before = env.objects(tid)
    env.writer.set_state(tid, TieredState.DISABLING, policy)

    refused = env.ask(tid)
    assert refused["error_code"] == KafkaStorageError.code, refused
    message = refused["error_message"]
    assert "orders-1" in message and str(env.broker.data_dir / "orders-1") in message and "does not exist" in message
    assert f"the {policy.name.lower()} policy cannot be applied" in message
    assert env.jobs == [] and env.objects(tid) == before, "nothing was started: no partition is half done"

    (env.broker.data_dir / "orders-1").mkdir(parents=True)
    assert "exists but could not be opened" in env.ask(tid)["error_message"]

    env.broker.log(tid, 1)  # the log opens (the disk is back)
    env.ask(tid)
    env.run_jobs()
    done = env.ask(tid)
    assert (done["error_code"], done["status"], done["partitions_done"]) == (0, BrokerJobStatus.DONE, 2)
    assert (env.objects(tid) == []) == (policy == DisablePolicy.DELETE)


def test_a_leaderless_partition_assigned_to_a_broker_has_its_remote_segments_deleted_from_the_rlmm_alone(
    env: Env,
) -> None:
    """Replication factor 1: broker 1 tiered both partitions and died; partition 1 is leaderless (leader -1).
    Broker 2 hosts nothing of the topic and is assigned partition 1: it deletes that partition's remote segments
    from what the RLMM knows, with no local log, fenced by the tiered epoch; partition 0 (still led by 1) is not
    its to touch."""
    tid = _tiered(env, "orders", 2)
    partition_1 = [k for k in env.objects(tid) if f"-{tid}/1/" in k]
    assert partition_1 and len(partition_1) < len(env.objects(tid))
    change = {"topic_id": tid, "partition_id": 1, "leader": -1, "isr": [1]}
    env.writer.store.append([make_record("PartitionChangeRecord", **change)], controller_epoch=env.writer.epoch)
    env.writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    broker_2 = env.another_broker(2)
    jobs: list[Callable[[], None]] = []
    handler = _handler(broker_2, jobs)

    def ask(epoch: int, assigned: list[int]) -> dict[str, Any]:
        body = {
            "topic_id": tid,
            "partition_id": -1,
            "tiered_epoch": epoch,
            "controller_epoch": env.writer.epoch,
            "assigned_partitions": assigned,
        }
        return dict(handler.handle(body))  # type: ignore[arg-type]

    try:
        stale = ask(1, [1])
        assert stale["error_code"] == StaleTieredEpoch.code and jobs == [], "fenced by the tiered epoch"
        nothing = ask(2, [])
        assert (nothing["error_code"], nothing["partitions_total"]) == (0, 0), "leads nothing, assigned nothing"
        jobs.pop(0)()
        started = ask(2, [1])
        assert (started["error_code"], started["status"], started["partitions_total"]) == (0, 1, 1), started
        assert len(jobs) == 1, "an assignment the finished job did not cover starts a new job"
        jobs.pop(0)()
        done = ask(2, [1])
        assert (done["error_code"], done["status"], done["partitions_done"]) == (0, BrokerJobStatus.DONE, 1), done
        assert done["segments_deleted"] == len(partition_1) // 3
        assert not [k for k in env.objects(tid) if f"-{tid}/1/" in k], "partition 1's objects are gone"
        assert [k for k in env.objects(tid) if f"-{tid}/0/" in k], "partition 0 is its leader's (broker 1's) to delete"
        broker_2.rlmm.refresh()
        assert {s.state for s in broker_2.rlmm.segments(tid, 1)} == {SegmentState.DELETE_SEGMENT_FINISHED}
        assert SegmentState.DELETE_SEGMENT_FINISHED not in {s.state for s in broker_2.rlmm.segments(tid, 0)}
        assert ask(2, [1]) == done and jobs == [], "re-delivered: nothing is done twice"
    finally:
        broker_2.close()


def test_a_retain_request_ignores_assigned_partitions(env: Env) -> None:
    tid = _tiered(env, "orders", 1)
    before = env.objects(tid)
    env.writer.set_state(tid, TieredState.DISABLING, DisablePolicy.RETAIN)
    body = {"topic_id": tid, "partition_id": -1, "tiered_epoch": 2, "controller_epoch": env.writer.epoch}
    answer = env.handler.handle({**body, "assigned_partitions": [0]})  # type: ignore[arg-type]
    env.run_jobs()
    assert answer["error_code"] == 0 and answer["partitions_total"] == 1  # its led partition only
    assert env.objects(tid) == before


def test_a_version_1_request_answers_each_of_its_topics_in_its_own_entry_in_order(env: Env) -> None:
    deleted = _tiered(env, "orders", 2)
    retained = _tiered(env, "payments", 1)
    enabled = _tiered(env, "audit", 1)
    env.writer.set_state(deleted, TieredState.DISABLING, DisablePolicy.DELETE)
    env.writer.set_state(retained, TieredState.DISABLING, DisablePolicy.RETAIN)
    unknown = Uuid.random()

    def entry(tid: Uuid, epoch: int) -> dict[str, Any]:
        return {"topic_id": tid, "tiered_epoch": epoch, "policy": 0, "assigned_partitions": []}

    body = {
        "controller_epoch": env.writer.epoch,
        "broker_epoch": -1,
        "topics": [entry(deleted, 2), entry(unknown, 1), entry(retained, 2), entry(enabled, 1)],
    }
    first = env.handler.handle_topics(body)  # type: ignore[arg-type]
    assert first["error_code"] == 0
    answers = first["topics"]
    assert [a["topic_id"] for a in answers] == [deleted, unknown, retained, enabled], "one entry per topic, in order"
    assert (answers[0]["error_code"], answers[0]["status"]) == (0, BrokerJobStatus.IN_PROGRESS)
    assert answers[0]["partitions_total"] == 2 and answers[0]["tiered_epoch"] == 2
    assert answers[1]["error_code"] == UnknownTopicId.code and str(unknown) in answers[1]["error_message"]
    assert (answers[2]["error_code"], answers[2]["status"]) == (0, BrokerJobStatus.DONE), "retain: fenced at once"
    assert answers[3]["error_code"] == StaleTieredEpoch.code, "ENABLED: nothing to disable at that epoch"
    assert len(env.jobs) == 1, "only the delete policy has work in the background"

    env.run_jobs()
    again = env.handler.handle_topics(body)["topics"]  # type: ignore[arg-type]
    assert (again[0]["error_code"], again[0]["status"], again[0]["partitions_done"]) == (0, BrokerJobStatus.DONE, 2)
    assert env.objects(deleted) == [] and env.objects(retained, "payments") and env.objects(enabled, "audit")
    assert again[2] == answers[2] and env.jobs == [], "re-delivered: each job is reported, nothing started twice"


def test_a_version_1_request_from_a_deposed_controller_is_refused_whole_and_starts_nothing(env: Env) -> None:
    tid = _tiered(env, "orders", 1)
    env.writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    topics = [{"topic_id": tid, "tiered_epoch": 2, "policy": 2, "assigned_partitions": []}]
    body = {"controller_epoch": env.writer.epoch - 1, "broker_epoch": -1, "topics": topics}
    answer = env.handler.handle_topics(body)  # type: ignore[arg-type]
    assert answer["error_code"] == StaleControllerEpoch.code and answer["topics"] == []
    assert env.jobs == [] and env.objects(tid) != []


def test_two_brokers_racing_on_one_partition_report_each_deleted_segment_once(env: Env) -> None:
    """A leaderless partition assigned to broker 2 while broker 1 (its old leader) still deletes it: broker 1's job
    runs whole between broker 2's DELETE_SEGMENT_STARTED and its FINISHED. Both jobs end DONE, and the
    ``segments_deleted`` the controller sums over brokers names each segment once (broker 2's FINISHED moved none)."""
    tid = _tiered(env, "orders", 1)
    segments = len(env.objects(tid)) // 3
    assert segments > 1
    change = {"topic_id": tid, "partition_id": 0, "leader": -1, "isr": [1]}
    env.writer.store.append([make_record("PartitionChangeRecord", **change)], controller_epoch=env.writer.epoch)
    epoch = env.writer.set_state(tid, TieredState.DISABLING, DisablePolicy.DELETE)
    broker_2 = env.another_broker(2)
    jobs_2: list[Callable[[], None]] = []
    handler_2 = _handler(broker_2, jobs_2)
    body = {"topic_id": tid, "partition_id": -1, "tiered_epoch": epoch, "controller_epoch": env.writer.epoch}
    assigned = {**body, "assigned_partitions": [0]}
    raced: list[int] = []

    def broker_1_first(**_: Any) -> None:  # broker 2's first DeleteObjects: broker 1 deletes everything first
        if not raced:
            raced.append(1)
            assert env.handler.handle(assigned)["status"] == BrokerJobStatus.IN_PROGRESS  # type: ignore[arg-type]
            env.run_jobs()

    env.s3.meta.events.register("before-send.s3.DeleteObjects", broker_1_first)
    try:
        assert handler_2.handle(assigned)["status"] == BrokerJobStatus.IN_PROGRESS  # type: ignore[arg-type]
        jobs_2.pop(0)()
        assert raced
        answers = [dict(h.handle(assigned)) for h in (env.handler, handler_2)]  # type: ignore[arg-type]
        assert [(a["error_code"], a["status"]) for a in answers] == [(0, BrokerJobStatus.DONE)] * 2, answers
        assert [a["segments_deleted"] for a in answers] == [segments, 0], "each segment counted once, by broker 1"
        assert [a["segments_remaining"] for a in answers] == [0, 0]
        assert env.objects(tid) == []
        broker_2.rlmm.refresh()
        assert {s.state for s in broker_2.rlmm.segments(tid, 0)} == {SegmentState.DELETE_SEGMENT_FINISHED}
    finally:
        env.s3.meta.events.unregister("before-send.s3.DeleteObjects", broker_1_first)
        broker_2.close()
