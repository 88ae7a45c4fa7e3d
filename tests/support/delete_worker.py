"""A separate process that runs the delete policy for one topic id; the crash test kills it with SIGKILL.

Usage: python -m tests.support.delete_worker STORE ENDPOINT BUCKET PREFIX TOPIC_ID hold|go
Prints one line per finished batch ("progress DONE TOTAL") and "complete" at the end. With ``hold`` it stops after
the first batch's line until its standard input ends, so the test kills it at a known point, whatever the
machine's load; with ``go`` it runs through.
"""

from __future__ import annotations

import sys
import time

from orchestrator.ids import Uuid
from orchestrator.logging import configure_logging
from orchestrator.metadata.sqlite import SqliteMetadataStore
from policies.disable import plan_delete
from policies.disable_executor import execute_delete_plan
from remote_storage.rlmm import RemoteLogMetadataManager
from remote_storage.s3 import S3RemoteStorage, make_s3_client


def main() -> None:
    configure_logging("service")
    store_path, endpoint, bucket, prefix, topic_id, mode = sys.argv[1:7]
    if mode not in ("hold", "go"):
        raise SystemExit(f"the last argument is hold or go, not {mode!r}")
    store = SqliteMetadataStore(store_path)
    rlmm = RemoteLogMetadataManager(store)
    rlmm.refresh()
    rsm = S3RemoteStorage(client=make_s3_client(endpoint_url=endpoint), bucket=bucket, prefix=prefix)
    tid = Uuid.from_string(topic_id)
    plan = plan_delete(tid, rlmm.segments(tid), {}, batch_segments=3)

    def progress(done: int, total: int, _counted: int) -> None:
        print(f"progress {done} {total}", flush=True)
        if mode == "hold":
            sys.stdin.read()  # until the test closes it, or (as it does) kills this process

    def now_ms() -> int:
        return int(time.time() * 1000)

    result = execute_delete_plan(
        plan, rsm=rsm, rlmm=rlmm, broker_id=1, now_ms=now_ms, advance_log_start=lambda p, o: None, on_progress=progress
    )
    print("complete" if result.complete else f"incomplete {dict(result.failed_keys)}", flush=True)
    store.close()


if __name__ == "__main__":
    main()
