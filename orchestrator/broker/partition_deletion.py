"""One step of a broker's remote-data job: a partition's remote segments deleted from its delete plan.

Both jobs that delete remote data (DisableRemoteTopic under the delete policy, DeleteRemotePartitions for a deleted
topic) run this step per partition: the plan's segments are counted as remaining, deleted through
:func:`policies.disable_executor.execute_delete_plan` (journaled batch by batch in the RLMM, so a crash or a failure
leaves segments a rerun plans again), and counted off as the batches are journaled, each segment once over racing
deleters (:meth:`~orchestrator.broker.job_registry.JobRun.deletion_progress`). The partitions the step is asked to
count are counted done one by one: at once for one with nothing to delete, and when the window that finished its
last segment is journaled for the others (never one with a segment left), so a long delete reports partitions done
as it goes. Objects that could not be deleted fail the step with KAFKA_STORAGE_ERROR naming how many, the
partitions, the bucket and the cause (the S3 error's class and text), never counted as deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from orchestrator import crash_points
from orchestrator.broker.job_registry import JobRun
from orchestrator.broker.remote_log_manager import RemoteLogManager
from orchestrator.errors import KafkaStorageError
from policies.disable import DeletePlan
from policies.disable_executor import execute_delete_plan


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
    partitions: Collection[int] = (),
    crash_point: str | None = None,
    journaled_crash_point: str | None = None,
) -> None:
    """Apply ``plan`` (one partition's, or several of one topic id's: their batches then share the deletion's
    window of DeleteObjects calls in flight) as a step of ``run``. ``crash_point`` is reached after each batch's
    objects are deleted, before its FINISHED is journaled; ``journaled_crash_point`` after each batch is journaled
    and counted. ``partitions``: the ones ``run`` counts done through this step (module docstring). Raise
    KAFKA_STORAGE_ERROR naming the partitions whose objects could not all be deleted (``partition_name`` names one)
    if any object could not be deleted."""
    count = run.deletion_progress(plan.segment_count)
    covered = frozenset(partitions)
    if nothing_planned := covered - {s.partition for batch in plan.batches for s in batch}:
        run.partitions_finished(len(nothing_planned))

    def partitions_done(ended: frozenset[int]) -> None:
        if ended & covered:
            run.partitions_finished(len(ended & covered))

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
        on_partitions_done=partitions_done,
        crash_point=crash_point,
        settle_ms=rlm.rsm.late_write_window_ms,  # a deleted topic's or a delete policy's objects never come back
    )
    if not result.complete:
        key, cause = next(iter(result.failed_keys.items()))
        causes = len(set(result.failed_keys.values()))
        others = f" (and {causes - 1} other cause(s))" if causes > 1 else ""
        where = ", ".join(partition_name(p) for p in sorted(result.unfinished_partitions))
        raise KafkaStorageError(
            f"{len(result.failed_keys)} object(s) of {where} could not be deleted from bucket "
            f"{rlm.rsm.bucket}: {cause}{others}; e.g. {key}; resumes on the next request"
        )
