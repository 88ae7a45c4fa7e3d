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

Work: one job per topic id, kept and run by the broker's job registry (:mod:`orchestrator.broker.job_registry`,
shared with DisableRemoteTopic), in the background (the controller's request never waits on S3). First the broker's
copies of the topic in flight are waited for (none starts again: the topic is gone, and the RLMM refuses copy
records of a marked partition); then, per partition not FINISHED: STARTED, every segment not DELETE_SEGMENT_FINISHED
deleted (COPY_SEGMENT_STARTED ones too: their objects may exist), journaled batch by batch
(:func:`remote_storage.deletion.delete_segments` through the delete plan), then FINISHED. A crash anywhere leaves a
partition STARTED with segments a rerun finds again. The answer is DONE (every partition asked for FINISHED) or
IN_PROGRESS with counts; a re-delivered request finds the job and reports it; a request naming a partition the job
does not cover, or one that is not FINISHED after the job, starts a new job once the current one ended. A failed
job's failure is the next request's answer (its Kafka code, KAFKA_STORAGE_ERROR for a storage failure, with the
cause), and that request restarts it, which resumes where the RLMM journal says it stopped. ``segments_deleted``
counts only the segments this broker's journal record deleted first, so racing deleters count each once. These
rules are the registry's; this module keeps the fencing, the partitions (the request's) and the work. Log events:
``remote_delete.started``, ``.done``, ``.failed``, ``.crashed`` (the registry's, under these names),
``remote_delete.refused`` and ``remote_delete.partition_finished``; crash point ``broker.mid_partition_delete``
(a batch journaled, the partition not FINISHED).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable

import structlog

from orchestrator.broker.fencing import ControllerEpochFence
from orchestrator.broker.job_registry import JobEvents, JobRegistry, JobRun, job_answer, refused
from orchestrator.broker.jobs import start_job
from orchestrator.broker.partition_deletion import delete_planned_segments
from orchestrator.broker.remote_log_manager import RemoteLogManager
from orchestrator.errors import InvalidRequest, KafkaStorageError, TieredError
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.records import PartitionDeleteState
from orchestrator.metadata.store import MetadataStore
from orchestrator.protocol import messages as m
from policies.disable import plan_delete

log = structlog.get_logger(__name__)

COPIES_STOPPED_EPOCH = 2**31 - 1  # stop_partitions at this epoch: no copy of a deleted topic id ever starts again
COPY_WAIT_S = 60.0

EVENTS = JobEvents(
    started="remote_delete.started",
    done="remote_delete.done",
    failed="remote_delete.failed",
    crashed="remote_delete.crashed",
)


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` (seconds) times the jobs for their log lines."""
        self.broker_id = broker_id
        self._store = store
        self._rlm = rlm
        self._refresh_image = refresh_image
        self._now_ms = now_ms
        self._jobs: JobRegistry[Uuid] = JobRegistry(events=EVENTS, run_in_background=run_in_background, clock=clock)
        self._fence = fence if fence is not None else ControllerEpochFence(store)

    def on_job_end(self, listener: Callable[[], None]) -> contextlib.AbstractContextManager[None]:
        """While inside, ``listener`` is called each time one of this handler's jobs ends
        (:mod:`~orchestrator.broker.job_registry`)."""
        return self._jobs.on_end(listener)

    def handle(self, body: m.DeleteRemotePartitionsRequest) -> m.DeleteRemotePartitionsResponse:
        try:
            return self._handle(body)
        except TieredError as exc:
            return refused(exc, m.DeleteRemotePartitionsResponse, "remote_delete.refused")

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
        left = any(rlmm.partition_delete_state(topic_id, p) != finished for p in wanted)
        topic_name = body.get("topic_name") or rlmm.topic_name(topic_id) or ""
        progress = self._jobs.request(
            topic_id,
            covers=wanted,
            begin=lambda: functools.partial(self._work, topic_id, topic_name, sorted(wanted)),
            work_left=lambda _job: left,
            context={"topic_id": str(topic_id)},
            started={"partitions": sorted(wanted)},
        )
        return job_answer(progress, m.DeleteRemotePartitionsResponse)

    def _work(self, topic_id: Uuid, topic_name: str, partitions: list[int], run: JobRun) -> None:
        if not self._rlm.stop_partitions(topic_id, tiered_epoch=COPIES_STOPPED_EPOCH, timeout_s=COPY_WAIT_S):
            raise KafkaStorageError(f"copies of {topic_name} still in flight on broker {self.broker_id}")
        for partition in partitions:
            self._delete_partition(run, topic_id, topic_name, partition)

    def _delete_partition(self, run: JobRun, topic_id: Uuid, topic_name: str, partition: int) -> None:
        rlmm = self._rlm.rlmm
        rlmm.refresh()
        state = rlmm.partition_delete_state(topic_id, partition)
        mark = {"broker_id": self.broker_id}
        if state != PartitionDeleteState.DELETE_PARTITION_FINISHED:
            started = PartitionDeleteState.DELETE_PARTITION_STARTED
            rlmm.mark_partition_delete(topic_name, topic_id, partition, started, **mark, now_ms=self._now_ms())
            delete_planned_segments(
                run,
                plan_delete(topic_id, rlmm.segments(topic_id, partition), {}),  # the topic is gone: no log start
                rlm=self._rlm,
                broker_id=self.broker_id,
                now_ms=self._now_ms,
                partition_name=lambda p: f"deleted topic {topic_name}-{p}",
                journaled_crash_point="broker.mid_partition_delete",  # a batch journaled; the partition not FINISHED
            )
            rlmm.refresh()
            undeleted = [s for s in rlmm.segments(topic_id, partition) if not s.deleted]
            if undeleted:  # cannot happen (copy records of a marked partition are refused); never finish over one
                raise KafkaStorageError(
                    f"{len(undeleted)} segment(s) of {topic_name}-{partition} appeared during its deletion"
                )
            finished = PartitionDeleteState.DELETE_PARTITION_FINISHED
            rlmm.mark_partition_delete(topic_name, topic_id, partition, finished, **mark, now_ms=self._now_ms())
            log.info("remote_delete.partition_finished", topic_id=str(topic_id), partition=partition)
        run.partitions_finished()
