"""The broker's DeleteRemotePartitions handler: a deleted topic's remote data, partition by partition (KIP-405).

Transport-agnostic: request body in, response body out. The controller marks each partition of a deleted topic
DELETE_PARTITION_MARKED in the RLMM and sends its partitions to live brokers (``controller/topic_deletion.py``).

Fencing, in this order, each refusal changing nothing:
1. controller epoch: below the highest this broker has seen or the store's lease epoch: STALE_CONTROLLER_EPOCH;
2. the topic must be deleted: the broker catches its image up with the store, and a topic id it still has is
   refused (INVALID_REQUEST): remote data is only deleted here for a topic that no longer exists;
3. every partition named must be marked for deletion in the RLMM (MARKED, STARTED or FINISHED): INVALID_REQUEST
   otherwise. The topic is not in the image any more, so the RLMM's partition-delete state is the fence here,
   as the tiered epoch is for DisableRemoteTopic. (The broker epoch is checked by the agent.)

Work: one job per topic id, in the background (the controller's request never waits on S3). First the broker's
copies of the topic in flight are waited for (none starts again: the topic is gone, and the RLMM refuses copy
records of a marked partition); then, per partition not FINISHED: STARTED, every segment not DELETE_SEGMENT_FINISHED
deleted (COPY_SEGMENT_STARTED ones too: their objects may exist), journaled batch by batch
(:func:`remote_storage.deletion.delete_segments` through the delete plan), then FINISHED. A crash anywhere leaves a
partition STARTED with segments a rerun finds again. The answer is DONE (every partition asked for FINISHED) or
IN_PROGRESS with counts; a re-delivered request finds the job and reports it; a request naming a partition the job
does not cover, or one that is not FINISHED after the job, starts a new job once the current one ended. A failed
job's failure is the next request's answer (its Kafka code, KAFKA_STORAGE_ERROR for a storage failure, with the
cause), and that request restarts it, which resumes where the RLMM journal says it stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from orchestrator import crash_points
from orchestrator.broker.disable_handler import DisableStatus
from orchestrator.broker.fencing import ControllerEpochFence
from orchestrator.broker.jobs import start_job
from orchestrator.broker.remote_log_manager import RemoteLogManager
from orchestrator.errors import (
    InvalidRequest,
    KafkaError,
    KafkaStorageError,
    TieredError,
    as_wire_error,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.records import PartitionDeleteState
from orchestrator.metadata.store import MetadataStore
from orchestrator.protocol import messages as m
from policies.disable import plan_delete
from policies.disable_executor import execute_delete_plan

log = structlog.get_logger(__name__)

COPIES_STOPPED_EPOCH = 2**31 - 1  # stop_partitions at this epoch: no copy of a deleted topic id ever starts again
COPY_WAIT_S = 60.0


@dataclass
class _Job:
    """One deletion job on this broker; written by its worker thread, read under the lock."""

    topic_id: Uuid
    topic_name: str
    partitions: frozenset[int]
    partitions_done: int = 0
    segments_deleted: int = 0
    segments_remaining: int = 0
    done: bool = False
    error: KafkaError | None = None


class DeleteRemotePartitionsHandler:
    def __init__(
        self,
        *,
        broker_id: int,
        store: MetadataStore,
        rlm: RemoteLogManager,
        refresh_image: Callable[[], MetadataImage],
        now_ms: Callable[[], int],
        run_in_background: Callable[[Callable[[], None]], None] = start_job,
        fence: ControllerEpochFence | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._store = store
        self._rlm = rlm
        self._refresh_image = refresh_image
        self._now_ms = now_ms
        self._run = run_in_background
        self._lock = threading.Lock()
        self._jobs: dict[Uuid, _Job] = {}
        self._fence = fence if fence is not None else ControllerEpochFence(store)

    def handle(self, body: m.DeleteRemotePartitionsRequest) -> m.DeleteRemotePartitionsResponse:
        try:
            return self._handle(body)
        except TieredError as exc:
            wire = as_wire_error(exc)
            log.warning("remote_delete.refused", error=wire.name, detail=wire.message)
            return {"error_code": wire.code, "error_message": wire.message}

    def _handle(self, body: m.DeleteRemotePartitionsRequest) -> m.DeleteRemotePartitionsResponse:
        topic_id = body["topic_id"]
        controller_epoch = body.get("controller_epoch", -1)
        self._fence.admit(controller_epoch)
        image = self._refresh_image()
        if topic_id in image.topics:
            raise InvalidRequest(
                f"topic {image.topics[topic_id].name} ({topic_id}) exists: its remote data is deleted only once the "
                "topic is deleted"
            )
        rlmm = self._rlm.rlmm
        rlmm.refresh()
        wanted = frozenset(body.get("partitions") or ())
        unmarked = sorted(p for p in wanted if rlmm.partition_delete_state(topic_id, p) is None)
        if unmarked:
            raise InvalidRequest(f"partition(s) {unmarked} of topic id {topic_id} are not marked for deletion")
        finished = PartitionDeleteState.DELETE_PARTITION_FINISHED
        left = {p for p in wanted if rlmm.partition_delete_state(topic_id, p) != finished}
        with self._lock:
            job = self._jobs.get(topic_id)
            if job is not None and job.error is None and (not job.done or not left):
                return self._response(job, wanted)
            failed = self._response(job, wanted) if job is not None and job.error is not None else None
            new = _Job(
                topic_id,
                body.get("topic_name") or rlmm.topic_name(topic_id) or "",
                wanted,
                segments_deleted=job.segments_deleted if job is not None else 0,
            )
            self._jobs[topic_id] = new
            restarted = {"restarted_after": failed.get("error_message")} if failed is not None else {}
            log.info("remote_delete.started", topic_id=str(topic_id), partitions=sorted(wanted), **restarted)
            self._run(lambda: self._work(new))
            return failed if failed is not None else self._response(new, wanted)

    def _response(self, job: _Job, wanted: frozenset[int]) -> m.DeleteRemotePartitionsResponse:
        out: m.DeleteRemotePartitionsResponse = {
            "error_code": 0,
            "status": int(DisableStatus.DONE if job.done and wanted <= job.partitions else DisableStatus.IN_PROGRESS),
            "partitions_total": len(job.partitions),
            "partitions_done": job.partitions_done,
            "segments_deleted": job.segments_deleted,
            "segments_remaining": job.segments_remaining,
        }
        if job.error is not None:
            out["error_code"] = job.error.code
            out["error_message"] = job.error.message
        return out

    def _work(self, job: _Job) -> None:
        where = {"topic_id": str(job.topic_id)}
        try:
            if not self._rlm.stop_partitions(job.topic_id, tiered_epoch=COPIES_STOPPED_EPOCH, timeout_s=COPY_WAIT_S):
                raise KafkaStorageError(f"copies of {job.topic_name} still in flight on broker {self.broker_id}")
            for partition in sorted(job.partitions):
                self._delete_partition(job, partition)
            with self._lock:
                job.done = True
            log.info("remote_delete.done", **where, segments_deleted=job.segments_deleted)
        except TieredError as exc:
            wire = as_wire_error(exc)
            log.warning("remote_delete.failed", **where, error=exc.name, detail=exc.message)
            with self._lock:
                job.error = wire
        except Exception as exc:  # a bug or an unexpected library error: report it, keep the broker serving
            log.exception("remote_delete.crashed", **where)
            with self._lock:
                job.error = KafkaStorageError(f"{type(exc).__name__}: {exc}")

    def _delete_partition(self, job: _Job, partition: int) -> None:
        rlmm = self._rlm.rlmm
        rlmm.refresh()
        state = rlmm.partition_delete_state(job.topic_id, partition)
        mark = {"broker_id": self.broker_id}
        if state != PartitionDeleteState.DELETE_PARTITION_FINISHED:
            started = PartitionDeleteState.DELETE_PARTITION_STARTED
            rlmm.mark_partition_delete(job.topic_name, job.topic_id, partition, started, **mark, now_ms=self._now_ms())
            plan = plan_delete(job.topic_id, rlmm.segments(job.topic_id, partition), {})
            with self._lock:
                job.segments_remaining += plan.segment_count
                deleted_base, remaining_base = job.segments_deleted, job.segments_remaining

            def progress(done: int, _total: int, counted: int) -> None:
                with self._lock:
                    job.segments_deleted = deleted_base + counted  # each segment once, if another broker raced
                    job.segments_remaining = remaining_base - done
                crash_points.reached("broker.mid_partition_delete")  # a batch journaled; the partition not FINISHED

            result = execute_delete_plan(
                plan,
                rsm=self._rlm.rsm,
                rlmm=rlmm,
                broker_id=self.broker_id,
                now_ms=self._now_ms,
                advance_log_start=lambda _p, _o: None,  # the topic is gone: no log start offset to move
                on_progress=progress,
            )
            if not result.complete:
                key, cause = next(iter(result.failed_keys.items()))
                raise KafkaStorageError(
                    f"{len(result.failed_keys)} object(s) of deleted topic {job.topic_name}-{partition} could not be "
                    f"deleted from bucket {self._rlm.rsm.bucket}: {cause}; e.g. {key}; resumes on the next request"
                )
            rlmm.refresh()
            undeleted = [s for s in rlmm.segments(job.topic_id, partition) if not s.deleted]
            if undeleted:  # cannot happen (copy records of a marked partition are refused); never finish over one
                raise KafkaStorageError(
                    f"{len(undeleted)} segment(s) of {job.topic_name}-{partition} appeared during its deletion"
                )
            finished = PartitionDeleteState.DELETE_PARTITION_FINISHED
            rlmm.mark_partition_delete(job.topic_name, job.topic_id, partition, finished, **mark, now_ms=self._now_ms())
            log.info("remote_delete.partition_finished", topic_id=str(job.topic_id), partition=partition)
        with self._lock:
            job.partitions_done += 1
