"""A topic deleted and re-created with the same name on one running cluster (real controller and broker processes,
the embedded S3), with no broker restarted: the broker retires the old topic id's partition directories (moved to
stale/) as soon as its image says so, and serves the new topic id from the same data directory, across tiers.

Before the fix the old directories were only moved aside at start-up, and every produce to the re-created topic
was refused with INCONSISTENT_TOPIC_ID until the broker restarted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.broker.local_log import read_partition_metadata
from orchestrator.metadata.sqlite import SqliteMetadataStore
from remote_storage.rlmm import RemoteLogMetadataManager
from tests.support.live_cluster import LiveCluster, live_cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

# Tiered, local segments dropped once copied: reading from offset 0 goes to the remote tier.
TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0"}
PARTITIONS = 2
RECORDS = 60  # of about 200 bytes: three or four of the live cluster's 4 KiB segments per partition


@pytest.fixture
def live(tmp_path):
    with live_cluster(tmp_path / "cluster", brokers=1, controllers=1) as cluster:
        yield cluster


def _values(generation: str, partition: int) -> list[bytes]:
    return [f"{generation}-{partition}-{i:03d}:".encode().ljust(200, b"x") for i in range(RECORDS)]


def _produce(live: LiveCluster, generation: str) -> None:
    async def produce(c: Any) -> None:
        for p in range(PARTITIONS):
            assert await c.produce("again", _values(generation, p), partition=p) == (0, RECORDS - 1)

    live.call(produce)


def _consume(live: LiveCluster, partition: int) -> list[tuple[int, bytes, bool]]:
    async def consume(c: Any) -> list[tuple[int, bytes, bool]]:
        return [(r.offset, r.value, r.remote) async for r in c.consume("again", partition)]

    return live.call(consume)


def _highest_copied_offset(live: LiveCluster, topic_id: Any, partition: int) -> int:
    with SqliteMetadataStore(live.dir / "metadata.db", recover_on_open=False) as store:
        rlmm = RemoteLogMetadataManager(store)
        rlmm.refresh()
        return rlmm.highest_copied_offset(topic_id, partition)


def _local_log_start(live: LiveCluster, partition: int) -> int:
    return live.call(lambda c: c.offsets("again", partition)).local_log_start_offset


def _log_events(path: str, event: str) -> list[dict[str, Any]]:
    found = []
    for line in Path(path).read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == event:
            found.append(entry)
    return found


def _tiered_and_trimmed(live: LiveCluster, topic_id: Any) -> None:
    """Wait until each partition has copied segments and dropped them locally, so offset 0 is read remotely."""
    for p in range(PARTITIONS):
        wait_until(f"a segment of partition {p} copied", lambda p=p: _highest_copied_offset(live, topic_id, p) >= 0, 60)
        wait_until(f"local retention of partition {p}", lambda p=p: _local_log_start(live, p) > 0, 60)


def test_a_topic_deleted_and_recreated_with_the_same_name_is_served_without_restarting_the_broker(live):
    broker = live.process("broker", 1)
    data_dir = live.dir / "data" / "broker-1"
    old = live.call(lambda c: c.create_topic("again", partitions=PARTITIONS, configs=TIERED))
    _produce(live, "old")
    _tiered_and_trimmed(live, old)  # the tiering loop is busy with the old id's logs

    live.call(lambda c: c.delete_topic("again"))
    new = live.call(lambda c: c.create_topic("again", partitions=PARTITIONS, configs=TIERED))
    assert new != old
    _produce(live, "new")  # at once: no broker restart, no INCONSISTENT_TOPIC_ID
    _tiered_and_trimmed(live, new)

    for p in range(PARTITIONS):
        consumed = _consume(live, p)
        assert [(offset, value) for offset, value, _ in consumed] == list(enumerate(_values("new", p)))
        assert consumed[0][2], "offset 0 should have been read from the new topic id's remote segments"
        assert read_partition_metadata(data_dir / f"again-{p}" / "partition.metadata") == new

    # The old id's directories went to stale/, whole; the broker process is the one that served the old topic.
    stale = sorted(p.name for p in (data_dir / "stale").iterdir())
    assert [name.rsplit(".", 1)[0] for name in stale] == [f"again-{p}.{old}" for p in range(PARTITIONS)]
    for name in stale:
        assert read_partition_metadata(data_dir / "stale" / name / "partition.metadata") == old
    assert live.process("broker", 1).pid == broker.pid
    os.kill(broker.pid, 0)  # still alive (raises if the process is gone)
    moved = _log_events(broker.log, "broker.stale_partition_dir")
    assert sorted((e["directory"], e["topic_id"]) for e in moved) == [
        (f"again-{p}", str(old)) for p in range(PARTITIONS)
    ]
    assert "INCONSISTENT_TOPIC_ID" not in Path(broker.log).read_text()
    assert _log_events(broker.log, "broker.loop_crashed") == []
