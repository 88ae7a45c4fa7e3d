"""The disablement policies' executor: applies a :class:`~policies.disable.DeletePlan` on a broker.

Thin: the log start offsets move first (so nothing planned for deletion is still served), then every planned
segment is deleted through :func:`remote_storage.deletion.delete_segments`, journaled batch by batch in the RLMM,
so a crash anywhere leaves a plan that a rerun finishes.
"""

from __future__ import annotations

from collections.abc import Callable

from policies.disable import DeletePlan
from remote_storage.deletion import DeleteResult, PartitionsCallback, ProgressCallback, delete_segments
from remote_storage.rlmm import RemoteLogMetadataManager
from remote_storage.s3 import S3RemoteStorage


def execute_delete_plan(
    plan: DeletePlan,
    *,
    rsm: S3RemoteStorage,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
    now_ms: Callable[[], int],
    advance_log_start: Callable[[int, int], None],
    on_progress: ProgressCallback | None = None,
    on_partitions_done: PartitionsCallback | None = None,
    crash_point: str | None = None,
    settle_ms: int = 0,
) -> DeleteResult:
    """The delete policy: move each partition's log start offset first, then delete every planned segment
    (``on_progress``, ``on_partitions_done``, ``crash_point`` and ``settle_ms``, the late-write window: see
    :func:`~remote_storage.deletion.delete_segments`)."""
    for partition, offset in sorted(plan.log_start_offsets.items()):
        advance_log_start(partition, offset)
    segments = [s for b in plan.batches for s in b]
    return delete_segments(
        segments,
        rsm=rsm,
        rlmm=rlmm,
        broker_id=broker_id,
        now_ms=now_ms,
        batches=plan.batches,
        on_progress=on_progress,
        on_partitions_done=on_partitions_done,
        crash_point=crash_point,
        settle_ms=settle_ms,
    )
