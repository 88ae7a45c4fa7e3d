"""Deleting a tiered topic deletes its remote data, on real processes (issue 13, item 2; KIP-405 partition deletion).

Produce to a tiered topic until segments are in S3, delete the topic: every object under the topic id's prefix goes
and every partition reaches DELETE_PARTITION_FINISHED in the RLMM. Then the same with S3 shut (moto behind a
:class:`~tests.support.tcp_gate.TcpGate`) while the active controller is SIGKILLed: the status shows the deleted
topic's remote data still owed, and the deletion finishes after the failover once S3 is back.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import pytest

from orchestrator.metadata.records import PartitionDeleteState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.keys import topic_prefix
from tests.support.live_cluster import S3_OUTAGE_TIMINGS, LiveCluster, bucket_keys, wait_until
from tests.support.tcp_gate import TcpGate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CONFIGS = {"remote.storage.enable": "true", "local.retention.ms": "0"}


def _cluster(tmp_path, gate: TcpGate, bucket: str, controllers: int) -> LiveCluster:  # type: ignore[no-untyped-def]
    return LiveCluster(
        tmp_path / "cluster",
        brokers=2,
        controllers=controllers,
        s3_endpoint=gate.url,
        bucket=bucket,
        broker_overrides=S3_OUTAGE_TIMINGS,
    )


def _partition_states(live: LiveCluster, topic_id: Any) -> dict[int, PartitionDeleteState]:
    """The latest RemotePartitionDeleteMetadata state of each partition of the topic id, from the shared store."""
    with SqliteMetadataStore(live.dir / "metadata.db", recover_on_open=False) as store:
        out: dict[int, PartitionDeleteState] = {}
        for e in store.read_remote_log_metadata(topic_id=topic_id):
            if e.record.name == "RemotePartitionDeleteMetadataRecord":
                f = e.record.fields
                out[f["topic_id_partition"]["partition"]] = PartitionDeleteState(f["remote_partition_delete_state"])
        return out


def _tiered_topic(live: LiveCluster, s3_client: Any, bucket: str) -> tuple[Any, str]:
    tid = live.call(lambda c: c.create_topic("clicks", partitions=3, replication_factor=1, configs=CONFIGS))

    async def produce(c):  # type: ignore[no-untyped-def]
        for p in range(3):
            await c.produce("clicks", [b"v" * 200 for _ in range(100)], partition=p)

    live.call(produce)
    live.wait_tiering_settled(tid, 3)
    prefix = topic_prefix(live.state.prefix, "clicks", tid)
    assert bucket_keys(s3_client, bucket, prefix), "segments are in S3"
    return tid, prefix


def _tieredctl(live: LiveCluster, *args: str) -> str:
    command = [sys.executable, "-m", "orchestrator.cli", "--bootstrap-server", live.bootstrap, *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_deleting_a_tiered_topic_deletes_every_object_and_finishes_every_partition(
    tmp_path, gate: TcpGate, s3_client: Any, bucket: str
) -> None:  # type: ignore[no-untyped-def]
    live = _cluster(tmp_path, gate, bucket, controllers=1)
    try:
        tid, prefix = _tiered_topic(live, s3_client, bucket)
        live.call(lambda c: c.delete_topic("clicks"))

        def gone() -> bool:
            states = _partition_states(live, tid)
            finished = states == {p: PartitionDeleteState.DELETE_PARTITION_FINISHED for p in range(3)}
            return finished and not bucket_keys(s3_client, bucket, prefix)

        wait_until("every object of the deleted topic id to go", gone, 120, 0.3)
        segments = live.segments(tid)
        assert segments and all(s[-1].name == "DELETE_SEGMENT_FINISHED" for s in segments.values())
        wait_until("the deletion to leave the status", lambda: live.call(lambda c: c.remote_deletions()) == [], 30)
    finally:
        live.close()


def test_a_deletion_cut_off_by_an_s3_outage_and_a_controller_kill_finishes_after_failover(
    tmp_path, gate: TcpGate, s3_client: Any, bucket: str
) -> None:  # type: ignore[no-untyped-def]
    live = _cluster(tmp_path, gate, bucket, controllers=2)
    try:
        tid, prefix = _tiered_topic(live, s3_client, bucket)
        before = bucket_keys(s3_client, bucket, prefix)
        gate.shut()  # nothing can be deleted: the deletion is stuck half way for as long as the gate is shut
        live.call(lambda c: c.delete_topic("clicks"))

        def owed() -> Any:
            deletions = live.call(lambda c: c.remote_deletions(["clicks"]))
            return deletions if deletions and deletions[0].partitions_remaining == (0, 1, 2) else None

        status = wait_until("the status to show the deleted topic's remote data owed", owed, 60, 0.2)[0]
        assert status.topic_id == tid and status.segments_remaining > 0 and status.brokers
        text = _tieredctl(live, "tiering", "status")
        assert f"clicks ({tid}): DELETED, remote data still being deleted" in text, text
        doc = json.loads(_tieredctl(live, "tiering", "status", "clicks", "--output", "json"))
        assert [d["state"] for d in doc] == ["DELETED"] and doc[0]["remote_deletion"]["partitions_remaining"] == [
            0,
            1,
            2,
        ]
        assert set(_partition_states(live, tid).values()) <= {
            PartitionDeleteState.DELETE_PARTITION_MARKED,
            PartitionDeleteState.DELETE_PARTITION_STARTED,
        }
        assert bucket_keys(s3_client, bucket, prefix) == before, "nothing could be deleted while S3 was shut"

        first = live.active_controller()
        live.signal("controller", first.id, signal.SIGKILL)

        def other_controller_active() -> bool:
            active = live.maybe_active_controller()
            return active is not None and active.id != first.id

        wait_until("the standby to take over", other_controller_active, 60, 0.2)
        gate.open()

        def gone() -> bool:
            states = _partition_states(live, tid)
            finished = states == {p: PartitionDeleteState.DELETE_PARTITION_FINISHED for p in range(3)}
            return finished and not bucket_keys(s3_client, bucket, prefix)

        wait_until("the new controller to finish the deletion", gone, 180, 0.3)
        wait_until("the deletion to leave the status", lambda: live.call(lambda c: c.remote_deletions()) == [], 30)
    finally:
        gate.open()
        live.close()
