"""Retention's executor: applies an :class:`~policies.retention.ExpiryPlan` to one partition on its leader.

Thin: the log start offset moves first, so nothing expired is still served, then the expired segments are deleted
through :func:`remote_storage.deletion.delete_segments` (journaled in the RLMM).
"""

from __future__ import annotations

from collections.abc import Callable

from policies.retention import ExpiryPlan
from remote_storage.deletion import DeleteResult, delete_segments
from remote_storage.rlmm import RemoteLogMetadataManager
from remote_storage.s3 import S3RemoteStorage


def execute_expiry_plan(
    plan: ExpiryPlan,
    *,
    rsm: S3RemoteStorage,
    rlmm: RemoteLogMetadataManager,
    broker_id: int,
    now_ms: Callable[[], int],
    advance_log_start: Callable[[int], None],
) -> DeleteResult:
    """Retention expiry of one partition: the log start offset moves first, so nothing expired is still served."""
    if not plan.expired:
        return DeleteResult()
    advance_log_start(plan.log_start_offset)
    return delete_segments(list(plan.expired), rsm=rsm, rlmm=rlmm, broker_id=broker_id, now_ms=now_ms)
