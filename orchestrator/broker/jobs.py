"""The broker's pool for remote-data jobs: DisableRemoteTopic's policy work and DeleteRemotePartitions' deletions.

Invariant: a bulk disable or deletion of thousands of topics queues its jobs here, never one thread per request;
four workers keep S3 deletes of several topics overlapping without flooding the bucket.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable

_JOBS = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="remote-data-job")


def start_job(fn: Callable[[], None]) -> None:
    """Run ``fn`` on the shared pool; it reports its own outcome (it must not raise)."""
    _JOBS.submit(fn)
