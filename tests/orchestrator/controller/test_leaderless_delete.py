"""Leaderless partitions under the delete policy, on real processes (issue 13, item 1).

Replication factor 1 over three brokers: one broker is SIGKILLed and decommissioned, so its partition has no
leader for good, and the topic is disabled with ``delete``. The controller assigns the leaderless partition to a
live broker, which deletes its remote segments from the RLMM alone; the topic becomes DISABLED only once the RLMM
shows every partition's remote segments deleted (and the bucket holds none of them), the dead broker's included.
While S3 is unreachable, ``tiering status`` shows each partition whose remote data is still owed and who deletes it.

The cluster's S3 is moto's server behind a :class:`~tests.support.tcp_gate.TcpGate`, shut while the status is read
so that nothing can be deleted yet (the assertions never depend on how fast a deletion is).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from typing import Any

import pytest

from orchestrator.metadata.records import SegmentState, TieredState
from remote_storage.keys import topic_prefix
from tests.support.live_cluster import LiveCluster, bucket_keys, wait_until
from tests.support.tcp_gate import TcpGate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _tieredctl(live: LiveCluster, *args: str) -> str:
    command = [sys.executable, "-m", "orchestrator.cli", "--bootstrap-server", live.bootstrap, *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_dead_brokers_partitions_are_deleted_by_an_assigned_broker_before_the_topic_is_disabled(
    live: LiveCluster, gate: TcpGate, s3_client: Any, bucket: str
) -> None:
    configs = {"remote.storage.enable": "true", "local.retention.ms": "0"}
    tid = live.call(lambda c: c.create_topic("orders", partitions=3, replication_factor=1, configs=configs))

    async def produce(c):  # type: ignore[no-untyped-def]
        for p in range(3):
            await c.produce("orders", [b"v" * 200 for _ in range(100)], partition=p)

    live.call(produce)
    live.wait_tiering_settled(tid, 3)
    prefix = topic_prefix(live.state.prefix, "orders", tid)

    def partition_of(key: str) -> int:
        return int(key[len(prefix) :].split("/", 1)[0])

    assert {partition_of(k) for k in bucket_keys(s3_client, bucket, prefix)} == {0, 1, 2}, "every partition tiered"
    leaders = {p["partition_index"]: p["leader_id"] for p in live.call(lambda c: c.topic("orders"))["partitions"]}
    assert sorted(leaders.values()) == [1, 2, 3], "replication factor 1: one partition per broker"
    victim = 3
    orphaned = next(p for p, b in leaders.items() if b == victim)

    live.signal("broker", victim, signal.SIGKILL)

    def orphaned_is_leaderless() -> bool:
        partitions = live.call(lambda c: c.topic("orders"))["partitions"]
        return any(p["partition_index"] == orphaned and p["leader_id"] == -1 for p in partitions)

    wait_until("the dead broker's partition to lose its leader", orphaned_is_leaderless, 60, 0.2)
    live.call(lambda c: c.decommission_broker(victim))  # for good: nobody will ever lead that partition again

    # S3 unreachable: nothing can be deleted, so the status shows every partition's remote data owed.
    gate.shut()
    live.call(lambda c: c.disable_tiering("orders", "delete"))

    def all_partitions_owed() -> Any:
        st = live.status("orders")
        assert st.state == TieredState.DISABLING
        return st if sorted(o.partition for o in st.owed_partitions) == [0, 1, 2] else None

    owing = wait_until("the status to list the owed partitions", all_partitions_owed, 60, 0.2)
    owed = {o.partition: o for o in owing.owed_partitions}
    live_brokers = sorted(set(leaders.values()) - {victim})
    assert owed[orphaned].leader == -1 and owed[orphaned].leaderless
    assert owed[orphaned].assigned_broker == live_brokers[orphaned % len(live_brokers)]
    assert all(owed[p].assigned_broker == leaders[p] and not owed[p].leaderless for p in owed if p != orphaned)
    assert all(o.segments_remaining > 0 and o.bytes_remaining > 0 for o in owed.values())
    doc = json.loads(_tieredctl(live, "--output", "json", "tiering", "status", "orders"))[0]
    by_partition = {o["partition"]: o for o in doc["owed_partitions"]}
    assert sorted(by_partition) == [0, 1, 2] and by_partition[orphaned]["leaderless"] is True
    assert by_partition[orphaned]["assigned_broker"] == owed[orphaned].assigned_broker
    text = _tieredctl(live, "tiering", "status", "orders")
    expected = f"orders: partition {orphaned} owes "
    assert expected in text and f"no live leader, assigned to broker {owed[orphaned].assigned_broker}" in text, text

    # S3 back: the live brokers delete their led partitions and the assignee the dead broker's one. Whenever the
    # status says DISABLED, it owes nothing.
    gate.open()

    def disabled() -> Any:
        st = live.status("orders")
        if st.state != TieredState.DISABLED:
            return None
        assert st.owed_partitions == (), "DISABLED while remote data is still owed"
        return st

    final = wait_until("DISABLED", disabled, 120, 0.2)
    assert final.pending_brokers == () and final.acknowledged_brokers == len(live_brokers)
    assert bucket_keys(s3_client, bucket, prefix) == [], "the objects are really gone, the dead broker's included"
    segments = live.segments(tid)
    assert segments and all(states[-1] == SegmentState.DELETE_SEGMENT_FINISHED for states in segments.values())
