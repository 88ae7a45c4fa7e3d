"""One step of a broker's remote-data job: a partition's remote segments deleted from its delete plan.

Both jobs that delete remote data (DisableRemoteTopic under the delete policy, DeleteRemotePartitions for a deleted
topic) run this step per partition: the plan's segments are counted as remaining, deleted through
:func:`policies.disable_executor.execute_delete_plan` (journaled batch by batch in the RLMM, so a crash or a failure
leaves segments a rerun plans again), and counted off as the batches are journaled, each segment once over racing
deleters (:meth:`~orchestrator.broker.job_registry.JobRun.deletion_progress`). Objects that could not be deleted
fail the step with KAFKA_STORAGE_ERROR naming how many, the partition, the bucket and the cause (the S3 error's
class and text), never counted as deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from orchestrator import crash_points
from orchestrator.broker.job_registry import JobRun
from orchestrator.broker.remote_log_manager import RemoteLogManager
from orchestrator.errors import KafkaStorageError
from policies.disable import DeletePlan
from policies.disable_executor import execute_delete_plan
from remote_storage.segment_format.errors import SegmentFormatError


def no_log_start_to_move(_partition: int, _offset: int) -> None:
    """For a partition with no local log here (a leaderless one, or a deleted topic's): its plan moves no offset."""


def delete_planned_segments(
    run: JobRun,
    plan: DeletePlan,
    *,
    rlm: RemoteLogManager,
    broker_id: int,
    now_ms: Callable[[], int],
    partition_name: Callable[[int], str],
    advance_log_start: Callable[[int, int], None] = no_log_start_to_move,
    crash_point: str | None = None,
    journaled_crash_point: str | None = None,
) -> None:
    """Apply ``plan`` (one partition's, or several of one topic id's: their batches then share the deletion's
    window of DeleteObjects calls in flight) as a step of ``run``. ``crash_point`` is reached after each batch's
    objects are deleted, before its FINISHED is journaled; ``journaled_crash_point`` after each batch is journaled
    and counted. Raise KAFKA_STORAGE_ERROR naming the partitions whose objects could not all be deleted
    (``partition_name`` names one) if any object could not be deleted."""
    count = run.deletion_progress(plan.segment_count)

    def progress(done: int, planned: int, counted: int) -> None:
        count(done, planned, counted)
        if journaled_crash_point is not None:
            crash_points.reached(journaled_crash_point)

    result = execute_delete_plan(
        plan,
        rsm=rlm.rsm,
        rlmm=rlm.rlmm,
        broker_id=broker_id,
        now_ms=now_ms,
        advance_log_start=advance_log_start,
        on_progress=progress,
        crash_point=crash_point,
        settle_ms=rlm.rsm.late_write_window_ms,  # a deleted topic's or a delete policy's objects never come back
    )
    if not result.complete:
        key, cause = next(iter(result.failed_keys.items()))
        causes = len(set(result.failed_keys.values()))
        others = f" (and {causes - 1} other cause(s))" if causes > 1 else ""
        where = ", ".join(partition_name(p) for p in failed_partitions(plan, result.failed_keys, rlm.rsm.prefix))
        raise KafkaStorageError(
            f"{len(result.failed_keys)} object(s) of {where} could not be deleted from bucket "
            f"{rlm.rsm.bucket}: {cause}{others}; e.g. {key}; resumes on the next request"
        )


def failed_partitions(plan: DeletePlan, failed_keys: Mapping[str, str], configured_prefix: str) -> list[int]:
    """The partitions of ``plan`` with a segment among ``failed_keys`` (its object keys, or the name a segment
    whose location could not be read is reported under: :mod:`remote_storage.deletion`)."""
    out: set[int] = set()
    for seg in (s for batch in plan.batches for s in batch):
        try:
            keys: Iterable[str] = seg.object_keys(configured_prefix).values()
        except SegmentFormatError:
            keys = (f"<segment {seg.segment_id}>",)
        if any(k in failed_keys for k in keys):
            out.add(seg.partition)
    return sorted(out)
