"""The broker's DisableRemoteTopic handler (KIP-950), transport-agnostic: request body in, response body out.

Fencing, checked in this order, each refusal changing nothing:
1. controller epoch: a request whose ControllerEpoch is below the highest this broker has seen, or below the
   store's current lease epoch, comes from a deposed controller: STALE_CONTROLLER_EPOCH (DESIGN §4 inv. 6; the
   broker's one :class:`~orchestrator.broker.fencing.ControllerEpochFence`, shared with DeleteRemotePartitions);
2. topic: unknown topic id: UNKNOWN_TOPIC_ID;
3. tiered epoch: the request must name the topic's current tiered epoch (the broker first catches its image up
   with the store), and the topic must be DISABLING or DISABLED at it: STALE_TIERED_EPOCH otherwise.

Work: one job per (topic id, tiered epoch), run in the background so the controller's request never waits on S3:
``stop_partitions`` (no copy below the epoch, in-flight copies finished or cleaned), then, for the delete policy,
on each partition this broker leads: the log start offset moves to the local log start offset and every remote
segment of the partition is deleted (journaled, resumable); and on each partition the request assigns it
(``assigned_partitions``: the controller gives every partition with no live leader to a live broker, see
``controller/queue.py``): every remote segment of the partition is deleted from what the RLMM knows alone, with no
local log and no log start offset to move, fenced by the tiered epoch exactly as led partitions are (the checks
above). Assignments are ignored under retain. The response says DONE or IN_PROGRESS with progress counts. A
re-delivered request (a retry, or a new controller after failover) finds the job and reports it, so nothing is done
twice (DESIGN §4 invariant 7); a finished delete job is started again if the request names a partition it did not
cover, or if the RLMM still holds a segment of a partition it covered that is not deleted (the controller's
backstop asks again when it sees one: the answer "done" must mean the remote data is gone).

Failures are answered, never swallowed: the request that finds its job failed gets that failure (its Kafka code,
KAFKA_STORAGE_ERROR for a storage failure, and a message with the cause: the S3 error's class and text, the
partition and the bucket) and restarts the job, which resumes where the RLMM journal says it stopped. So the
controller sees the error, shows it, and backs off (``controller/queue.py``); the restarted job keeps counting
``segments_deleted`` from where the failed one stopped, so the counts only show progress when there is some.
``segments_deleted`` counts only the segments this broker's journal record deleted first: when two brokers race
on a partition (its old leader and the broker it was assigned to), the counts summed over brokers still name
each segment once (``remote_storage/deletion.py``).

Never acknowledged without the policy applied: a partition this broker leads but whose local log is not open (its
directory could not be created or opened, e.g. a read-only disk) makes the request fail with KAFKA_STORAGE_ERROR
naming the partition and its directory, for either policy: the delete policy moves the log start offset of that
log, and under retain the leader is the one that keeps serving and expiring the remote data. Nothing is started
until every led partition's log is open.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import structlog

from orchestrator import crash_points
from orchestrator.broker.fencing import ControllerEpochFence
from orchestrator.broker.jobs import start_job
from orchestrator.broker.local_log import PartitionLog
from orchestrator.broker.remote_log_manager import RemoteLogManager
from orchestrator.errors import (
    KafkaError,
    KafkaStorageError,
    StaleTieredEpoch,
    TieredError,
    UnknownTopicId,
    as_wire_error,
    error_name,
)
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.metadata.store import MetadataStore
from orchestrator.protocol import messages as m
from policies.disable import plan_delete
from policies.disable_executor import execute_delete_plan

log = structlog.get_logger(__name__)

ALL_PARTITIONS = -1


class DisableStatus(IntEnum):
    DONE = 0
    IN_PROGRESS = 1


@dataclass
class _Job:
    """Progress of one disablement on this broker; written by its worker thread, read under the lock."""

    topic_id: Uuid
    topic_name: str
    tiered_epoch: int
    policy: DisablePolicy
    partitions_total: int
    partitions_done: int = 0
    segments_deleted: int = 0
    segments_remaining: int = 0
    done: bool = False
    error: KafkaError | None = None
    covered: frozenset[int] = frozenset()  # the partitions this job applies the policy to (led and assigned)


class DisableRemoteTopicHandler:
    def __init__(
        self,
        *,
        broker_id: int,
        store: MetadataStore,
        rlm: RemoteLogManager,
        logs: Mapping[tuple[Uuid, int], PartitionLog],
        refresh_image: Callable[[], MetadataImage],
        now_ms: Callable[[], int],
        run_in_background: Callable[[Callable[[], None]], None] = start_job,
        fence: ControllerEpochFence | None = None,
        data_dir: Path | None = None,
    ) -> None:
        """``data_dir`` is where the broker keeps its partition directories (``<topic>-<partition>``, Kafka's
        layout); when given, a log that is not open is reported with its directory and what is wrong with it."""
        self.broker_id = broker_id
        self._store = store
        self._rlm = rlm
        self._logs = logs
        self._refresh_image = refresh_image
        self._now_ms = now_ms
        self._run = run_in_background
        self._data_dir = data_dir
        self._lock = threading.Lock()
        self._jobs: dict[tuple[Uuid, int], _Job] = {}
        self._fence = fence if fence is not None else ControllerEpochFence(store)

    def handle(self, body: m.DisableRemoteTopicRequest) -> m.DisableRemoteTopicResponse:
        """A version 0 request: one topic."""
        try:
            self._fence.admit(body["controller_epoch"])
            response = self._handle_topic(
                self._refresh_image(),
                body["topic_id"],
                body["tiered_epoch"],
                body.get("partition_id", ALL_PARTITIONS),
                body.get("assigned_partitions") or (),
            )
        except TieredError as exc:
            wire = as_wire_error(exc)
            log.warning("disable.refused", error=wire.name, detail=wire.message)
            return {"error_code": wire.code, "error_message": wire.message}
        if response["error_code"] == 0 and response.get("status") == DisableStatus.DONE:
            crash_points.reached("broker.before_disable_ack")
        return response

    def handle_topics(self, body: m.DisableRemoteTopicRequest) -> m.DisableRemoteTopicResponse:
        """A version 1 request: many topics, each answered in its own entry, in the request's order. The controller
        epoch is checked once (a stale one refuses the whole request, changing nothing) and the image is caught up
        with the store once, before the first topic: every topic is then checked as in version 0."""
        try:
            self._fence.admit(body["controller_epoch"])
            image = self._refresh_image()
        except TieredError as exc:
            wire = as_wire_error(exc)
            log.warning("disable.refused", error=wire.name, detail=wire.message, topics=len(body["topics"]))
            return {"error_code": wire.code, "error_message": wire.message, "topics": []}
        results: list[m.DisableTopicResult] = []
        answered: dict[str, int] = {}  # DONE, IN_PROGRESS or an error name -> topics
        for entry in body["topics"]:
            topic_id = entry["topic_id"]
            try:
                answer = self._handle_topic(
                    image,
                    topic_id,
                    entry["tiered_epoch"],
                    ALL_PARTITIONS,
                    entry["assigned_partitions"] or (),
                    batched=True,
                )
            except TieredError as exc:
                wire = as_wire_error(exc)
                log.info("disable.refused", topic_id=str(topic_id), error=wire.name, detail=wire.message)
                answer = {"error_code": wire.code, "error_message": wire.message}
            if answer["error_code"] == 0:
                outcome = DisableStatus(answer.get("status", DisableStatus.DONE)).name
            else:  # refused, or the job's failure (answered once, then the job restarts)
                outcome = error_name(answer["error_code"])
            answered[outcome] = answered.get(outcome, 0) + 1
            results.append(_topic_result(topic_id, answer))
        log.info("disable.batch", topics=len(body["topics"]), answered=answered)
        if answered.get(DisableStatus.DONE.name):
            crash_points.reached("broker.before_disable_ack")
        return {"error_code": 0, "topics": results}

    def _handle_topic(
        self,
        image: MetadataImage,
        topic_id: Uuid,
        tiered_epoch: int,
        wanted: int,
        assigned_partitions: Iterable[int],
        *,
        batched: bool = False,
    ) -> m.DisableRemoteTopicResponse:
        topic = image.topics.get(topic_id)
        if topic is None:
            raise UnknownTopicId(f"topic id {topic_id} is not in this broker's metadata")
        if tiered_epoch != topic.tiered_epoch or topic.tiered_state not in (
            TieredState.DISABLING,
            TieredState.DISABLED,
        ):
            raise StaleTieredEpoch(
                f"request for tiered epoch {tiered_epoch}; {topic.name} is {topic.tiered_state.name} "
                f"at epoch {topic.tiered_epoch}"
            )
        key = (topic_id, tiered_epoch)
        led = sorted(
            p.partition_id
            for p in topic.partitions.values()
            if p.leader == self.broker_id and wanted in (ALL_PARTITIONS, p.partition_id)
        )
        assigned: list[int] = []
        if topic.policy == DisablePolicy.DELETE:
            named = set(assigned_partitions)
            assigned = sorted(
                p for p in named if p in topic.partitions and p not in led and wanted in (ALL_PARTITIONS, p)
            )
        with self._lock:
            finished = self._jobs.get(key)
        left = self._remote_left(finished) if finished is not None and finished.done and not finished.error else False
        with self._lock:
            job = self._jobs.get(key)
            # A new job when there is none, the last one failed, this broker now leads (or is assigned) partitions
            # the finished job did not cover (a leadership change while DISABLING), or the RLMM still holds remote
            # data of a covered partition: the policy must be applied to them (again). Re-applying it to covered
            # partitions is harmless: a plan only holds segments not yet deleted.
            covered = set(led) | set(assigned)
            if job is not None and job.error is None and (not job.done or (covered <= job.covered and not left)):
                return self._response(job)
            self._check_logs_open(topic, led)
            failed = self._response(job) if job is not None and job.error is not None else None
            job = _Job(
                topic_id,
                topic.name,
                tiered_epoch,
                topic.policy,
                partitions_total=len(led) + len(assigned),
                segments_deleted=job.segments_deleted if job is not None else 0,
                covered=frozenset(covered),
            )
            self._jobs[key] = job
            where = {"topic_id": str(topic_id), "tiered_epoch": tiered_epoch}
            restarted = {"restarted_after": failed.get("error_message")} if failed is not None else {}
            # A batched request logs one summary line instead (handle_topics); a restart is always worth a line.
            (log.info if failed is not None or not batched else log.debug)(
                "disable.started",
                **where,
                policy=topic.policy.name,
                partitions=len(led),
                assigned_partitions=assigned,
                **restarted,
            )
            # Retain only has to fence the copies. If none is in flight the fence is complete at once (it is set
            # under the lock copies start under), so answer DONE now instead of IN_PROGRESS and a re-poll.
            if topic.policy != DisablePolicy.DELETE and self._rlm.stop_partitions(
                topic_id, tiered_epoch=tiered_epoch, timeout_s=0
            ):
                job.partitions_done = len(led)
                job.done = True
                (log.debug if batched else log.info)("disable.done", **where, segments_deleted=0)
            else:
                self._run(lambda: self._work(job, led, assigned))
            # The failure the last job ended with is this request's answer: the controller records it and backs
            # off; the job it just restarted is reported to the next request.
            return failed if failed is not None else self._response(job)

    def _check_logs_open(self, topic: TopicImage, led: list[int]) -> None:
        """Raise KAFKA_STORAGE_ERROR naming every led partition whose local log is not open."""
        unopened = [p for p in led if (topic.topic_id, p) not in self._logs]
        if unopened:
            what = "; ".join(self._unopened_log(topic.name, p) for p in unopened)
            raise KafkaStorageError(
                f"{what}: the {topic.policy.name.lower()} policy cannot be applied to "
                f"{'it' if len(unopened) == 1 else 'them'} until the log is open"
            )

    def _unopened_log(self, topic_name: str, partition: int) -> str:
        """Which partition's log is not open, and, with ``data_dir``, its directory and what is wrong with it."""
        what = f"partition {topic_name}-{partition} is led by broker {self.broker_id} but its local log is not open"
        if self._data_dir is None:
            return what
        directory = self._data_dir / f"{topic_name}-{partition}"
        if directory.is_dir():
            return f"{what} (log directory {directory} exists but could not be opened)"
        if not os.access(self._data_dir, os.W_OK):
            return f"{what} (log directory {directory} does not exist and {self._data_dir} is not writable)"
        return f"{what} (log directory {directory} does not exist: not created yet, or creating it failed)"

    def _response(self, job: _Job) -> m.DisableRemoteTopicResponse:
        out: m.DisableRemoteTopicResponse = {
            "error_code": 0,
            "status": int(DisableStatus.DONE if job.done else DisableStatus.IN_PROGRESS),
            "tiered_epoch": job.tiered_epoch,
            "partitions_total": job.partitions_total,
            "partitions_done": job.partitions_done,
            "segments_deleted": job.segments_deleted,
            "segments_remaining": job.segments_remaining,
        }
        if job.error is not None:
            out["error_code"] = job.error.code
            out["error_message"] = job.error.message
        return out

    def _remote_left(self, job: _Job) -> bool:
        """Whether the RLMM holds a segment not yet deleted of a partition this delete job covered."""
        if job.policy != DisablePolicy.DELETE:
            return False
        rlmm = self._rlm.rlmm
        rlmm.refresh()
        return any(
            s.state != SegmentState.DELETE_SEGMENT_FINISHED
            for p in sorted(job.covered)
            for s in rlmm.segments(job.topic_id, p)
        )

    def _work(self, job: _Job, partitions: list[int], assigned: list[int]) -> None:
        try:
            if not self._rlm.stop_partitions(job.topic_id, tiered_epoch=job.tiered_epoch):
                raise KafkaStorageError(f"copies of {job.topic_name} still in flight; will retry")
            if job.policy == DisablePolicy.DELETE:
                self._apply_delete(job, partitions, assigned)
            else:
                with self._lock:
                    job.partitions_done = len(partitions)
            with self._lock:
                job.done = True
            where = {"topic_id": str(job.topic_id), "tiered_epoch": job.tiered_epoch}
            log.info("disable.done", **where, segments_deleted=job.segments_deleted)
        except TieredError as exc:  # a storage failure is answered as KAFKA_STORAGE_ERROR: retried, then resumed
            wire = as_wire_error(exc)
            where = {"topic_id": str(job.topic_id), "tiered_epoch": job.tiered_epoch}
            log.warning("disable.failed", **where, error=exc.name, detail=exc.message)
            with self._lock:
                job.error = wire
        except Exception as exc:  # a bug or an unexpected library error: report it, keep the broker serving
            log.exception("disable.crashed", topic_id=str(job.topic_id))
            with self._lock:
                job.error = KafkaStorageError(f"{type(exc).__name__}: {exc}")

    def _apply_delete(self, job: _Job, partitions: list[int], assigned: list[int]) -> None:
        """The delete policy on the led ``partitions`` (log start offset, then remote segments), then on the
        ``assigned`` leaderless ones (remote segments only)."""
        self._rlm.rlmm.refresh()
        for partition in partitions:
            plog = self._logs.get((job.topic_id, partition))
            if plog is None:  # checked before the job started; a log is never closed under it, but never skip one
                raise KafkaStorageError(
                    f"{self._unopened_log(job.topic_name, partition)}: the delete policy cannot be applied"
                )
            self._delete_partition(job, partition, plog)
        for partition in assigned:
            self._delete_partition(job, partition, None)

    def _delete_partition(self, job: _Job, partition: int, plog: PartitionLog | None) -> None:
        """Delete every remote segment of ``partition`` not yet deleted; with ``plog`` (a led partition) move its log
        start offset to the local log start offset first. Without it (an assigned leaderless partition), the RLMM
        alone says what to delete."""
        rlmm = self._rlm.rlmm
        local_starts = {} if plog is None else {partition: plog.local_log_start_offset}
        plan = plan_delete(job.topic_id, rlmm.segments(job.topic_id, partition), local_starts)
        with self._lock:
            job.segments_remaining += plan.segment_count
            deleted_base, remaining_base = job.segments_deleted, job.segments_remaining

        def progress(
            done: int,
            _total: int,
            counted: int,
            deleted_base: int = deleted_base,
            remaining_base: int = remaining_base,
        ) -> None:
            with self._lock:
                job.segments_deleted = deleted_base + counted  # each segment once, if another broker raced
                job.segments_remaining = remaining_base - done

        def advance(_partition: int, offset: int, plog: PartitionLog | None = plog) -> None:
            assert plog is not None  # a plan moves only the offsets it was given: led partitions' only
            plog.advance_log_start_offset(offset)

        result = execute_delete_plan(
            plan,
            rsm=self._rlm.rsm,
            rlmm=rlmm,
            broker_id=self.broker_id,
            now_ms=self._now_ms,
            advance_log_start=advance,
            on_progress=progress,
            crash_point="broker.mid_delete_batch",
        )
        if not result.complete:
            key, cause = next(iter(result.failed_keys.items()))
            causes = len(set(result.failed_keys.values()))
            others = f" (and {causes - 1} other cause(s))" if causes > 1 else ""
            raise KafkaStorageError(
                f"{len(result.failed_keys)} object(s) of {job.topic_name}-{partition} could not be deleted from "
                f"bucket {self._rlm.rsm.bucket}: {cause}{others}; e.g. {key}; resumes on the next request"
            )
        with self._lock:
            job.partitions_done += 1


def _topic_result(topic_id: Uuid, answer: m.DisableRemoteTopicResponse) -> m.DisableTopicResult:
    """One topic's answer (a version 0 response body) as its entry of a version 1 response."""
    return m.DisableTopicResult(
        topic_id=topic_id,
        error_code=answer["error_code"],
        error_message=answer.get("error_message"),
        status=answer.get("status", int(DisableStatus.DONE)),
        tiered_epoch=answer.get("tiered_epoch", -1),
        partitions_total=answer.get("partitions_total", 0),
        partitions_done=answer.get("partitions_done", 0),
        segments_deleted=answer.get("segments_deleted", 0),
        segments_remaining=answer.get("segments_remaining", 0),
    )
