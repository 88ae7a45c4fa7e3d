"""The broker's DisableRemoteTopic handler (KIP-950), transport-agnostic: request body in, response body out.

Fencing, checked in this order, each refusal changing nothing:
1. controller epoch: a request whose ControllerEpoch is below the highest this broker has seen, or below the
   store's current lease epoch, comes from a deposed controller: STALE_CONTROLLER_EPOCH (ARCHITECTURE §4 inv. 6; the
   broker's one :class:`~orchestrator.broker.fencing.ControllerEpochFence`, shared with DeleteRemotePartitions);
2. topic: unknown topic id: UNKNOWN_TOPIC_ID;
3. tiered epoch: the request must name the topic's current tiered epoch (the broker first catches its image up
   with the store), and the topic must be DISABLING or DISABLED at it: STALE_TIERED_EPOCH otherwise.

Work: one job per (topic id, tiered epoch), kept and run by the broker's job registry
(:mod:`orchestrator.broker.job_registry`, shared with DeleteRemotePartitions), in the background so the
controller's request never waits on S3:
``stop_partitions`` (no copy below the epoch, in-flight copies finished or cleaned), then, for the delete policy, on
each partition this broker leads: the log start offset moves to the local log start offset and every remote segment
of the partition is deleted (journaled, resumable); and on each partition the request assigns it
(``assigned_partitions``: the controller gives every partition with no live leader to a live broker, see
``controller/disablement_queue.py``): every remote segment of the partition is deleted from what the RLMM knows
alone, with no local log and no log start offset to move, fenced by the tiered epoch exactly as led partitions are
(the checks above). Assignments are ignored under retain. The response says DONE or IN_PROGRESS with progress
counts. A re-delivered request (a retry, or a new controller after failover) finds the job and reports it, so
nothing is done twice (ARCHITECTURE §4 invariant 7); a finished job is started again if the request names a partition it
did not cover (a leadership change while DISABLING), or, for the delete policy, if the RLMM still holds a segment of
a partition it covered that is not deleted (the controller's backstop asks again when it sees one: the answer "done"
must mean the remote data is gone). Re-applying the policy to covered partitions is harmless: a plan only holds
segments not yet deleted. Retain only has to fence the copies: when none is in flight the fence is complete at once,
and the first request is answered DONE.

Failures are answered, never swallowed: the request that finds its job failed gets that failure (its Kafka code,
KAFKA_STORAGE_ERROR for a storage failure, and a message with the cause: the S3 error's class and text, the
partition and the bucket) and restarts the job, which resumes where the RLMM journal says it stopped. So the
controller sees the error, shows it, and backs off (``controller/retry_queue.py``); the restarted job keeps counting
``segments_deleted`` from where the failed one stopped, so the counts only show progress when there is some.
``segments_deleted`` counts only the segments this broker's journal record deleted first: when two brokers race
on a partition (its old leader and the broker it was assigned to), the counts summed over brokers still name
each segment once (``remote_storage/deletion.py``). These rules are the registry's; this module keeps the fencing,
the choice of partitions (led, and assigned under delete) and the work. Log events: ``disable.started``,
``disable.done``, ``disable.failed``, ``disable.crashed`` (the registry's, under these names), ``disable.refused``
and ``disable.batch``; crash points ``broker.mid_delete_batch`` and ``broker.before_disable_ack``.

Never acknowledged without the policy applied: a partition this broker leads but whose local log is not open (its
directory could not be created or opened, e.g. a read-only disk) makes the request fail with KAFKA_STORAGE_ERROR
naming the partition and its directory, for either policy: the delete policy moves the log start offset of that
log, and under retain the leader is the one that keeps serving and expiring the remote data. Nothing is started
until every led partition's log is open.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import structlog

from orchestrator import crash_points
from orchestrator.broker.fencing import ControllerEpochFence
from orchestrator.broker.job_registry import (
    BrokerJobStatus,
    JobEvents,
    JobProgress,
    JobRegistry,
    JobRun,
    Work,
    job_answer,
    refused,
)
from orchestrator.broker.jobs import start_job
from orchestrator.broker.local_log import PartitionLog
from orchestrator.broker.partition_deletion import delete_planned_segments
from orchestrator.broker.remote_log_manager import RemoteLogManager
from orchestrator.errors import KafkaStorageError, StaleTieredEpoch, TieredError, UnknownTopicId, error_name
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.metadata.store import MetadataStore
from orchestrator.protocol import messages as m
from policies.disable import plan_delete

log = structlog.get_logger(__name__)

ALL_PARTITIONS = -1

EVENTS = JobEvents(started="disable.started", done="disable.done", failed="disable.failed", crashed="disable.crashed")


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``data_dir`` is where the broker keeps its partition directories (``<topic>-<partition>``, Kafka's
        layout); when given, a log that is not open is reported with its directory and what is wrong with it.
        ``clock`` (seconds) times the jobs for their log lines."""
        self.broker_id = broker_id
        self._store = store
        self._rlm = rlm
        self._logs = logs
        self._refresh_image = refresh_image
        self._now_ms = now_ms
        self._data_dir = data_dir
        self._jobs: JobRegistry[tuple[Uuid, int]] = JobRegistry(
            events=EVENTS, run_in_background=run_in_background, clock=clock
        )
        self._fence = fence if fence is not None else ControllerEpochFence(store)

    def on_job_end(self, listener: Callable[[], None]) -> contextlib.AbstractContextManager[None]:
        """While inside, ``listener`` is called each time one of this handler's jobs ends
        (:mod:`~orchestrator.broker.job_registry`)."""
        return self._jobs.on_end(listener)

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
            return refused(exc, m.DisableRemoteTopicResponse, "disable.refused")
        if response["error_code"] == 0 and response.get("status") == BrokerJobStatus.DONE:
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
            whole = refused(exc, m.DisableRemoteTopicResponse, "disable.refused", topics=len(body["topics"]))
            whole["topics"] = []
            return whole
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
                answer = refused(
                    exc, m.DisableRemoteTopicResponse, "disable.refused", quiet=True, topic_id=str(topic_id)
                )
            if answer["error_code"] == 0:
                outcome = BrokerJobStatus(answer.get("status", BrokerJobStatus.DONE)).name
            else:  # refused, or the job's failure (answered once, then the job restarts)
                outcome = error_name(answer["error_code"])
            answered[outcome] = answered.get(outcome, 0) + 1
            results.append(_topic_result(topic_id, answer))
        log.info("disable.batch", topics=len(body["topics"]), answered=answered)
        if answered.get(BrokerJobStatus.DONE.name):
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
        progress = self._jobs.request(
            (topic_id, tiered_epoch),
            covers=[*led, *assigned],
            begin=functools.partial(self._begin, topic, led, assigned),
            work_left=functools.partial(self._remote_left, topic),
            context={"topic_id": str(topic_id), "tiered_epoch": tiered_epoch},
            started={"policy": topic.policy.name, "partitions": len(led), "assigned_partitions": assigned},
            quiet=batched,
        )
        answer = job_answer(progress, m.DisableRemoteTopicResponse)
        answer["tiered_epoch"] = tiered_epoch
        return answer

    def _begin(self, topic: TopicImage, led: list[int], assigned: list[int]) -> Work | None:
        """Before a job starts: every led partition's log must be open. Retain only has to fence the copies: if
        none is in flight the fence is complete at once (it is set under the lock copies start under), so the job
        is DONE now (None) instead of IN_PROGRESS and a re-poll."""
        self._check_logs_open(topic, led)
        if topic.policy != DisablePolicy.DELETE and self._rlm.stop_partitions(
            topic.topic_id, tiered_epoch=topic.tiered_epoch, timeout_s=0
        ):
            return None
        return functools.partial(self._work, topic, led, assigned)

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

    def _remote_left(self, topic: TopicImage, job: JobProgress) -> bool:
        """Whether the RLMM holds a segment not yet deleted of a partition this delete job covered."""
        if topic.policy != DisablePolicy.DELETE:
            return False
        rlmm = self._rlm.rlmm
        rlmm.refresh()
        return any(
            s.state != SegmentState.DELETE_SEGMENT_FINISHED
            for p in sorted(job.covers)
            for s in rlmm.segments(topic.topic_id, p)
        )

    def _work(self, topic: TopicImage, led: list[int], assigned: list[int], run: JobRun) -> None:
        if not self._rlm.stop_partitions(topic.topic_id, tiered_epoch=topic.tiered_epoch):
            raise KafkaStorageError(f"copies of {topic.name} still in flight; will retry")
        if topic.policy != DisablePolicy.DELETE:
            run.partitions_finished(len(led))
            return
        # The delete policy on the led partitions (log start offsets, then remote segments) and on the assigned
        # leaderless ones (remote segments only), in one plan: its batches, whichever partition they hold, share
        # the deletion's window of DeleteObjects calls in flight and its two journal appends a window, instead of
        # a partition's one or two batches at a time.
        plogs: dict[int, PartitionLog] = {}
        for partition in led:
            plog = self._logs.get((topic.topic_id, partition))
            if plog is None:  # checked before the job started; a log is never closed under it, but never skip one
                raise KafkaStorageError(
                    f"{self._unopened_log(topic.name, partition)}: the delete policy cannot be applied"
                )
            plogs[partition] = plog
        rlmm = self._rlm.rlmm
        rlmm.refresh()
        segments = [s for p in (*led, *assigned) for s in rlmm.segments(topic.topic_id, p)]
        local_starts = {p: plog.local_log_start_offset for p, plog in plogs.items()}
        delete_planned_segments(
            run,
            plan_delete(topic.topic_id, segments, local_starts),
            rlm=self._rlm,
            broker_id=self.broker_id,
            now_ms=self._now_ms,
            partition_name=lambda p: f"{topic.name}-{p}",
            advance_log_start=_log_start_mover(plogs),
            partitions=(*led, *assigned),
            crash_point="broker.mid_delete_batch",
        )


def _log_start_mover(plogs: Mapping[int, PartitionLog]) -> Callable[[int, int], None]:
    """A plan's log start offset moves, applied to the led partitions' logs (a plan moves only the offsets it was
    given: led partitions' only)."""

    def advance(partition: int, offset: int) -> None:
        plogs[partition].advance_log_start_offset(offset)

    return advance


def _topic_result(topic_id: Uuid, answer: m.DisableRemoteTopicResponse) -> m.DisableTopicResult:
    """One topic's answer (a version 0 response body) as its entry of a version 1 response."""
    return m.DisableTopicResult(
        topic_id=topic_id,
        error_code=answer["error_code"],
        error_message=answer.get("error_message"),
        status=answer.get("status", int(BrokerJobStatus.DONE)),
        tiered_epoch=answer.get("tiered_epoch", -1),
        partitions_total=answer.get("partitions_total", 0),
        partitions_done=answer.get("partitions_done", 0),
        segments_deleted=answer.get("segments_deleted", 0),
        segments_remaining=answer.get("segments_remaining", 0),
    )
