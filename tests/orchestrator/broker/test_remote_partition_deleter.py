"""The broker's DeleteRemotePartitions handler and the zombie-upload fence of a deleted topic (KIP-405).

A real SQLite store, real segment files and moto's S3 server (through the broker harness); the handler's jobs are
collected and run when each test chooses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import botocore.exceptions as bce
import pytest

from orchestrator.broker.job_registry import BrokerJobStatus
from orchestrator.broker.remote_partition_deleter import DeleteRemotePartitionsHandler
from orchestrator.errors import InvalidRequest, KafkaStorageError, StaleControllerEpoch, StaleTieredEpoch
from orchestrator.ids import Uuid
from orchestrator.metadata.records import PartitionDeleteState, SegmentState
from remote_storage.keys import Suffix, build_key
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment
from tests.support.broker_harness import BrokerJobsWorld, BrokerUnderTest

pytestmark = pytest.mark.integration

MARKED = PartitionDeleteState.DELETE_PARTITION_MARKED
FINISHED = PartitionDeleteState.DELETE_PARTITION_FINISHED


class Env(BrokerJobsWorld):
    topic_name = "clicks"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.controller_rlmm = RemoteLogMetadataManager(self.writer.store)
        self.handler = self.handler_of(self.broker)

    def handler_of(self, broker: BrokerUnderTest) -> DeleteRemotePartitionsHandler:
        """``broker``'s DeleteRemotePartitions handler, its jobs collected in ``jobs`` instead of run."""
        return DeleteRemotePartitionsHandler(
            broker_id=broker.broker_id,
            store=broker.store,
            rlm=broker.rlm,
            refresh_image=broker.follower.refresh,
            now_ms=broker.now_ms,
            run_in_background=self.jobs.append,
        )

    def delete_topic(self, tid: Uuid, name: str, partitions: range) -> None:
        """What the controller does: RemoveTopicRecord, then every partition DELETE_PARTITION_MARKED."""
        self.writer.delete_topic(tid)
        self.controller_rlmm.mark_partitions_delete(name, tid, partitions, MARKED, broker_id=-1, now_ms=1)

    def ask(self, tid: Uuid, partitions: list[int], *, controller_epoch: int | None = None) -> dict[str, Any]:
        epoch = self.writer.epoch if controller_epoch is None else controller_epoch
        body = {"topic_id": tid, "topic_name": "clicks", "partitions": partitions, "controller_epoch": epoch}
        return dict(self.handler.handle(body))  # type: ignore[arg-type]

    def partition_states(self, tid: Uuid, partitions: range) -> list[PartitionDeleteState | None]:
        self.controller_rlmm.refresh()
        return [self.controller_rlmm.partition_delete_state(tid, p) for p in partitions]


@pytest.fixture
def env(tmp_path, s3_client, bucket) -> Iterator[Env]:  # type: ignore[no-untyped-def]
    with contextlib.closing(Env(tmp_path, s3_client, bucket)) as world:
        yield world


def _tiered(env: Env, partitions: int) -> Uuid:
    tid = env.writer.create_topic("clicks", partitions=partitions)
    for p in range(partitions):
        env.broker.produce(tid, 60, partition=p)
        assert env.broker.tier(tid, p) > 0
    return tid


def _started_copy(env: Env, tid: Uuid, partition: int) -> RemoteSegment:
    """A copy whose COPY_SEGMENT_STARTED is recorded and whose log object is uploaded, but never finished."""
    seg = RemoteSegment("clicks", tid, partition, Uuid.random(), 10_000, 10_050, 0, 100, tiered_epoch=1, broker_id=1)
    env.broker.rlmm.copy_started(seg, now_ms=1)
    env.s3.put_object(Bucket=env.bucket, Key=build_key("tiered/", seg.key, Suffix.LOG), Body=b"x" * 100)
    return seg


def test_a_deleted_topics_partitions_are_deleted_every_object_goes_and_each_partition_is_finished(env: Env) -> None:
    tid = _tiered(env, 2)
    _started_copy(env, tid, 1)  # started, never finished: its objects may exist and go too
    env.broker.rlmm.refresh()
    segments = len(env.broker.rlmm.segments(tid))
    env.delete_topic(tid, "clicks", range(2))

    started = env.ask(tid, [0, 1])
    first_answer = (started["error_code"], started["status"], started["partitions_total"])
    assert first_answer == (0, BrokerJobStatus.IN_PROGRESS, 2)
    env.run_jobs()
    done = env.ask(tid, [0, 1])
    assert (done["error_code"], done["status"], done["partitions_done"]) == (0, BrokerJobStatus.DONE, 2)
    assert done["segments_deleted"] == segments and done["segments_remaining"] == 0
    assert env.objects(tid) == []
    assert env.partition_states(tid, range(2)) == [FINISHED, FINISHED]
    env.controller_rlmm.refresh()
    assert {s.state for s in env.controller_rlmm.segments(tid)} == {SegmentState.DELETE_SEGMENT_FINISHED}
    assert env.ask(tid, [0, 1]) == done and env.jobs == [], "re-delivery is answered, nothing started again"


def test_requests_for_a_live_topic_an_unmarked_partition_or_from_a_deposed_controller_are_refused(env: Env) -> None:
    tid = _tiered(env, 2)
    alive = env.ask(tid, [0])
    assert alive["error_code"] == InvalidRequest.code and "exists" in alive["error_message"]
    env.writer.delete_topic(tid)
    env.controller_rlmm.mark_partitions_delete("clicks", tid, [0], MARKED, broker_id=-1, now_ms=1)
    unmarked = env.ask(tid, [0, 1])
    assert unmarked["error_code"] == InvalidRequest.code and "[1]" in unmarked["error_message"]
    stale = env.ask(tid, [0], controller_epoch=env.writer.epoch - 1)
    assert stale["error_code"] == StaleControllerEpoch.code
    assert env.jobs == [] and len(env.objects(tid)) > 0, "a refusal changes nothing"


def test_an_s3_failure_is_answered_with_its_cause_and_the_restarted_job_resumes_from_the_journal(env: Env) -> None:
    tid = _tiered(env, 2)
    env.delete_topic(tid, "clicks", range(2))
    down = [True]

    def outage(request: Any, **_: Any) -> None:
        if down[0] and f"-{tid}/1/".encode() in request.body:
            raise bce.EndpointConnectionError(endpoint_url=request.url)

    env.s3.meta.events.register("before-send.s3.DeleteObjects", outage)
    env.ask(tid, [0, 1])
    env.run_jobs()
    failed = env.ask(tid, [0, 1])
    assert failed["error_code"] == KafkaStorageError.code
    assert "clicks-1" in failed["error_message"] and "EndpointConnectionError" in failed["error_message"]
    assert env.partition_states(tid, range(2)) == [FINISHED, PartitionDeleteState.DELETE_PARTITION_STARTED]
    assert len(env.jobs) == 1, "the request that found the failure restarted the job"
    down[0] = False
    env.run_jobs()
    assert env.ask(tid, [0, 1])["status"] == BrokerJobStatus.DONE
    assert env.objects(tid) == [] and env.partition_states(tid, range(2)) == [FINISHED, FINISHED]


def test_a_partition_the_ended_job_did_not_cover_starts_a_new_job_even_if_another_broker_finished_it(
    env: Env,
) -> None:
    tid = _tiered(env, 2)
    env.delete_topic(tid, "clicks", range(2))
    env.ask(tid, [0])
    env.run_jobs()
    assert env.ask(tid, [0])["status"] == BrokerJobStatus.DONE
    env.controller_rlmm.mark_partitions_delete("clicks", tid, [1], FINISHED, broker_id=2, now_ms=1)  # broker 2's
    wider = env.ask(tid, [0, 1])
    assert (wider["status"], wider["partitions_total"]) == (BrokerJobStatus.IN_PROGRESS, 2) and len(env.jobs) == 1
    env.run_jobs()
    done = env.ask(tid, [0, 1])
    assert (done["error_code"], done["status"], done["partitions_done"]) == (0, BrokerJobStatus.DONE, 2)
    assert env.jobs == [] and env.partition_states(tid, range(2)) == [FINISHED, FINISHED]


def test_the_rlmm_refuses_copies_of_a_partition_marked_for_deletion(env: Env) -> None:
    tid = _tiered(env, 1)
    env.controller_rlmm.mark_partitions_delete("clicks", tid, [0], MARKED, broker_id=-1, now_ms=1)
    seg = RemoteSegment("clicks", tid, 0, Uuid.random(), 50_000, 50_010, 0, 10, tiered_epoch=1, broker_id=1)
    with pytest.raises(StaleTieredEpoch, match="DELETE_PARTITION_MARKED"):
        env.broker.rlmm.copy_started(seg, now_ms=1)
    env.broker.rlmm.refresh()
    assert seg.segment_id not in {s.segment_id for s in env.broker.rlmm.segments(tid)}


def test_a_copy_in_flight_when_its_topic_is_deleted_does_not_land_its_objects_are_removed(env: Env) -> None:
    """The zombie upload: COPY_SEGMENT_STARTED is accepted, then the topic is deleted and another broker deletes the
    partition's remote data (the started segment included) before the upload lands. The finish is refused and the
    copier removes what it uploaded, so the bucket holds nothing of the topic id. (On the copying broker itself the
    deletion first waits for its copies in flight.)"""
    other = env.another_broker(2)
    env.handler = env.handler_of(other)
    tid = env.writer.create_topic("clicks", partitions=1)
    env.broker.produce(tid, 60)
    env.broker.log(tid).roll()
    upload = env.broker.rsm.copy_segment

    def delete_then_upload(*args: Any, **kwargs: Any) -> Any:
        env.delete_topic(tid, "clicks", range(1))
        assert env.ask(tid, [0])["error_code"] == 0
        env.run_jobs()  # the deletion runs to FINISHED while the copy is "uploading"
        assert env.partition_states(tid, range(1)) == [FINISHED]
        return upload(*args, **kwargs)  # the zombie's objects land after the deletion

    env.broker.rsm.copy_segment = delete_then_upload  # type: ignore[method-assign]
    result = env.broker.rlm.copy_partition(tid, 0)
    assert (result.copied, result.aborted) == (0, 1)
    assert env.objects(tid) == [], "the zombie upload removed its own objects"
    env.broker.rlmm.refresh()
    assert {s.state for s in env.broker.rlmm.segments(tid)} == {SegmentState.DELETE_SEGMENT_FINISHED}
    other.close()
