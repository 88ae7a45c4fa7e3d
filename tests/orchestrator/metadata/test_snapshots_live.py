"""Snapshots on real processes: the active controller snapshots every few records and the log's old records go;
a restarted broker starts from the latest snapshot (``metadata.snapshot_loaded`` in its log, at an offset above 0,
with the log starting above 0), a failover controller continues from the image its standby follower kept current,
and both know every topic, including those whose records are gone. Every wait is bounded; no duration is asserted."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from orchestrator.local import cluster as lc
from orchestrator.metadata.sqlite import SqliteMetadataStore
from tests.support.live_cluster import LiveCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

EVERY_RECORDS = 10
OLD_TOPICS = [f"old-{i}" for i in range(6)]  # their records end up below the log's start
NEW_TOPICS = [f"new-{i}" for i in range(6)]
TOPICS = OLD_TOPICS + NEW_TOPICS


def _store_bounds(live: LiveCluster) -> tuple[int, int, int | None]:
    """(log start offset, log end offset, latest snapshot offset) read from the shared store."""
    with SqliteMetadataStore(live.dir / "metadata.db", recover_on_open=False) as store:
        snap = store.latest_snapshot()
        return store.start_offset(), store.end_offset(), None if snap is None else snap.offset


def _log_events(path: str, event: str, *, after_byte: int = 0) -> list[dict[str, Any]]:
    out = []
    with open(path, "rb") as f:
        f.seek(after_byte)
        for line in f:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("event") == event:
                out.append(entry)
    return out


@pytest.fixture
def live(tmp_path: Path) -> Any:
    cluster = LiveCluster(
        tmp_path / "cluster",
        brokers=2,
        controllers=2,
        controller_overrides={"snapshots": {"every_records": EVERY_RECORDS, "every_ms": 500, "retained": 2}},
    )
    try:
        yield cluster
    finally:
        cluster.close()


def test_a_restarted_broker_and_a_failover_controller_start_from_a_snapshot(live: LiveCluster) -> None:
    batch_ends = []
    for batch in (OLD_TOPICS, NEW_TOPICS):
        for name in batch:
            live.call(lambda c, name=name: c.create_topic(name, partitions=2, replication_factor=1))
        end_of_batch = _store_bounds(live)[1] - 1
        wait_until(
            "a snapshot of every topic created so far",
            lambda end_of_batch=end_of_batch: (_store_bounds(live)[2] or -1) >= end_of_batch,
        )
        batch_ends.append(end_of_batch)
    # Two snapshots kept, the older one past every old topic's records: their TopicRecords are gone from the log.
    start, end, snap = _store_bounds(live)
    assert snap is not None and batch_ends[0] <= start <= snap < end

    # A broker restarted after a kill -9 starts from the latest snapshot and serves a topic created long before it.
    broker = live.process("broker", 1)
    offset_in_log = Path(broker.log).stat().st_size
    lc.kill_process(broker)
    lc.restart(live.dir, "broker", 1)
    loaded = wait_until(
        "the broker to load a snapshot",
        lambda: _log_events(broker.log, "metadata.snapshot_loaded", after_byte=offset_in_log),
    )
    assert loaded[0]["snapshot_offset"] >= start and loaded[0]["log_start_offset"] > 0
    # A broker down longer than the session timeout was fenced, and its partitions (one replica each) are leaderless
    # until it has registered again: it loads the snapshot before that, so its leadership comes back a little later.
    led = wait_until("broker 1 to lead some partition of an old topic again", lambda: _led_by(live, 1, OLD_TOPICS))
    topic, partition = led[0]
    base, last = wait_until(
        "a produce to the restarted broker",
        lambda: _try(lambda: live.call(lambda c: c.produce(topic, [b"after-restart"], partition=partition))),
    )
    assert last == base

    # The active controller killed: the standby takes over from the image its follower kept current while it
    # waited (it catches up with the log's tail, never replays the whole log again), with every topic, including
    # those whose records are gone.
    active = live.active_controller()
    standby_id = next(p.id for p in live.state.processes if p.role == "controller" and p.id != active.id)
    standby = live.process("controller", standby_id)
    offset_in_log = Path(standby.log).stat().st_size
    live.signal("controller", active.id, signal.SIGKILL)
    wait_until("the standby to become active", lambda: (c := live.maybe_active_controller()) and c.id == standby_id)
    started = wait_until(
        "the new active controller's core",
        lambda: _log_events(standby.log, "controller.started", after_byte=offset_in_log),
    )
    assert started[0]["log_end_offset"] > start, "its image is past the snapshot the log starts after"
    names = wait_until("the new controller to list the topics", lambda: _try(lambda: _topic_names(live)))
    assert set(TOPICS) <= names
    assert _store_bounds(live)[0] > 0


def _led_by(live: LiveCluster, broker_id: int, topics: list[str]) -> list[tuple[str, int]]:
    return [
        (t, p["partition_index"])
        for t in topics
        for p in live.call(lambda c, t=t: c.topic(t))["partitions"]
        if p["leader_id"] == broker_id
    ]


def _topic_names(live: LiveCluster) -> set[str]:
    return {t["name"] for t in live.call(lambda c: c.metadata())["topics"]}


def _try(fn: Any) -> Any:
    try:
        return fn()
    except Exception:
        return None
