"""A frozen active controller (SIGSTOP, held until the end of the test) does not freeze the cluster.

Real controller and broker processes (:class:`~tests.support.live_cluster.LiveCluster`, fast timings: lease TTL
1.5 s, broker session 2.5 s, broker request timeout 3 s). A stopped process keeps its listening socket: the kernel
accepts connections and requests for it and nothing answers, so every client of the frozen controller sees timeouts,
never a refused connection. The standby takes the lease; the brokers, whose heartbeats time out, must find it
through their bootstrap list and be unfenced there; clients whose bootstrap list starts with the frozen controller
must still reach the new one; and a disablement left pending on the frozen controller must finish on the new one.

A process is paused only outside an SQLite write transaction (checked, and paused again if not): one stopped while
holding the shared store's write lock blocks every writer, a known limit of the one-file store, not what this test
is about. Every wait is bounded; no duration is asserted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.errors import TieredError
from orchestrator.local import cluster as lc
from orchestrator.local.state import STATE_FILE, LocalClusterState, ProcessInfo
from orchestrator.metadata.records import SegmentState, TieredState
from tests.support.live_cluster import FAST_CONTROLLER, LiveCluster, process_state, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0"}
BROKERS = {1, 2, 3}
# A controller that takes the lease gives every registered broker a full session from then on, so a broker it lists
# as unfenced proves it heart-beats that controller only once a session (plus a sender tick or two) has passed.
GRACE_S = FAST_CONTROLLER["membership"]["session_timeout_ms"] / 1000 + 1.0


class Freezer:
    """SIGSTOPs processes of a live cluster and, at teardown, SIGCONTs and stops each of them by pid."""

    def __init__(self, live: LiveCluster) -> None:
        self.live = live
        self.stopped: list[ProcessInfo] = []

    def freeze(self, p: ProcessInfo) -> None:
        """SIGSTOP ``p`` at a moment it holds no write lock on the shared store."""
        self.stopped.append(self.live.pause_outside_store_writes(p.role, p.id))

    def thaw(self, p: ProcessInfo) -> None:
        os.kill(p.pid, signal.SIGCONT)
        self.stopped.remove(p)

    def stop_all(self) -> None:
        for p in self.stopped:
            if lc.is_ours(p):
                os.kill(p.pid, signal.SIGCONT)  # a stopped process would keep SIGTERM pending forever
                lc.stop_process(p, timeout_s=10)  # SIGTERM, then SIGKILL; by pid, only if it is still ours
        self.stopped.clear()


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[LiveCluster, Freezer]]:
    cluster = LiveCluster(tmp_path / "cluster", brokers=3, controllers=2)
    freezer = Freezer(cluster)
    try:
        yield cluster, freezer
    finally:
        try:
            freezer.stop_all()
        finally:
            cluster.close()
    for p in LocalClusterState.load(cluster.dir).processes if (cluster.dir / STATE_FILE).exists() else []:
        assert not lc.is_ours(p)


def _unfenced_brokers(live: LiveCluster, controller_id: int) -> set[int]:
    """The brokers the active controller lists as unfenced, if ``controller_id`` is that controller (else none)."""
    try:
        md, active = live.metadata_and_active_controller()
    except TieredError:  # a handover in progress: no controller yet, or the client gave up on this attempt
        return set()
    if active != controller_id:
        return set()
    return {b["node_id"] for b in md["brokers"] if b["node_id"] < lc.CONTROLLER_ID_BASE}


def _cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``tieredctl --bootstrap-server BOOTSTRAP ARGS...`` as its own process, killed if it runs past a minute."""
    command = [sys.executable, "-m", "orchestrator.cli", "--bootstrap-server", bootstrap, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def _disabled(live: LiveCluster, topic: str) -> object:
    try:
        st = live.status(topic)
    except TieredError:
        return False
    return st.state == TieredState.DISABLED and st


def test_a_controller_frozen_for_good_is_replaced_and_the_cluster_serves_and_converges(live):
    cluster, freezer = live
    cluster.call(lambda c: c.create_topic("orders", partitions=3, configs=TIERED))

    async def produce_orders(c):
        for p in range(3):
            await c.produce("orders", [b"v" * 200 for _ in range(100)], partition=p)

    cluster.call(produce_orders)
    tid = cluster.status("orders").topic_id
    cluster.wait_tiering_settled(tid, 3)

    # A delete-policy disablement left pending: the leader of partition 0 is paused while it is requested.
    paused = cluster.process("broker", cluster.call(lambda c: c.topic("orders"))["partitions"][0]["leader_id"])
    freezer.freeze(paused)
    cluster.call(lambda c: c.disable_tiering("orders", "delete"))

    def pending_broker_ids() -> list[int]:
        return [p.broker_id for p in cluster.status("orders").pending_brokers]

    wait_until("only the paused broker to be pending", lambda: pending_broker_ids() == [paused.id], 60)
    old = cluster.active_controller()
    others = BROKERS - {paused.id}
    wait_until("the paused broker to be fenced", lambda: _unfenced_brokers(cluster, old.id) == others, 60)

    freezer.freeze(old)  # held until teardown
    freezer.thaw(paused)  # it can only be unfenced again by the new controller
    # Every client from here on (the test's and the CLI's) asks the frozen controller first.
    frozen_entry = f"127.0.0.1:{old.port}"
    assert frozen_entry in cluster.bootstrap.split(",")
    cluster.bootstrap = ",".join(sorted(cluster.bootstrap.split(","), key=lambda entry: entry != frozen_entry))

    new = wait_until(
        "the standby to take the lease", lambda: (a := cluster.maybe_active_controller()) and a.id != old.id and a, 60
    )
    seen_active = time.monotonic()
    wait_until(
        "every broker to heart-beat the new active controller and be unfenced there",
        lambda: time.monotonic() > seen_active + GRACE_S and _unfenced_brokers(cluster, new.id) == BROKERS,
        60,
        interval_s=0.5,
    )

    # The cluster serves: clients whose bootstrap list names the frozen controller reach the new one.
    cluster.call(lambda c: c.create_topic("after-freeze", partitions=3, configs=TIERED))

    async def produce_after(c):
        return [await c.produce("after-freeze", [b"w" * 200 for _ in range(50)], partition=p) for p in range(3)]

    assert [first for first, _last in cluster.call(produce_after)] == [0, 0, 0]
    created = _cli(cluster.bootstrap, "topic", "create", "from-the-cli", "--partitions", "3")
    assert created.returncode == 0, created.stdout + created.stderr
    produced = _cli(cluster.bootstrap, "topic", "produce", "from-the-cli", "--records", "300")
    assert produced.returncode == 0, produced.stdout + produced.stderr

    # And converges: the disablement pending when the controller froze finishes, every segment deleted. The thawed
    # broker and the partition's new deleter may both journal DELETE_SEGMENT_STARTED for one segment (the race
    # remote_storage/deletion.py documents; Kafka's RLMM takes a repeated state as a retry), never a copy state after.
    final = wait_until("orders to be DISABLED", lambda: _disabled(cluster, "orders"), 90, interval_s=0.5)
    assert final.pending_brokers == ()
    for states in cluster.segments(tid).values():
        first_delete = states.index(SegmentState.DELETE_SEGMENT_STARTED)
        assert states[:first_delete] == [SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED]
        assert set(states[first_delete:]) <= {SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED}
        assert states[-1] == SegmentState.DELETE_SEGMENT_FINISHED

    # A delete-policy disable requested after the freeze completes too.
    cluster.call(lambda c: c.disable_tiering("after-freeze", "delete"))
    wait_until("after-freeze to be DISABLED", lambda: _disabled(cluster, "after-freeze"), 90, interval_s=0.5)

    assert _unfenced_brokers(cluster, new.id) == BROKERS
    assert process_state(old.pid) == "T", "the frozen controller must not have come back during the test"
