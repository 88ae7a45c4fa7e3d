"""Controller, standby controller and brokers as real OS processes, with moto's server as S3.

Faults are real signals: SIGSTOP/SIGCONT pause a broker, SIGKILL kills the active controller.

The tests that only pause a process (SIGSTOP, then SIGCONT whatever happens) leave the cluster whole, each on its
own topic, so they share one cluster for the module (``shared``); the port-fuzzing test runs last on it, so every
process must also have survived their pauses and failover. The test that SIGKILLs a controller has its own.
"""

import contextlib
import os
import signal
import socket
import struct
from collections.abc import Iterator

import pytest

from orchestrator.errors import BrokerNotAvailable, NotController
from orchestrator.ids import Uuid
from orchestrator.local import cluster as lc
from orchestrator.local.state import LocalClusterState
from orchestrator.metadata.records import SegmentState, TieredState
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.net.connection import KafkaConnection
from tests.support.live_cluster import COPIED_THEN_DELETED, LiveCluster, live_cluster, retries_folded, run, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def live(tmp_path):
    with live_cluster(tmp_path / "cluster", brokers=3, controllers=2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    """One cluster like ``live`` for the tests that pause processes but neither kill nor remove any."""
    with live_cluster(tmp_path_factory.mktemp("shared") / "cluster", brokers=3, controllers=2) as cluster:
        yield cluster


def _tiered_topic(live: LiveCluster, name: str, partitions: int = 3) -> None:
    configs = {"remote.storage.enable": "true", "local.retention.ms": "0"}
    live.call(lambda c: c.create_topic(name, partitions=partitions, configs=configs))

    async def produce(c):
        for p in range(partitions):
            await c.produce(name, [b"v" * 200 for _ in range(100)], partition=p)

    live.call(produce)


def _settled_tiered_topic(live: LiveCluster, name: str) -> tuple[Uuid, int]:
    """A tiered topic of three partitions whose segments are all copied: its id, and the leader of partition 0."""
    _tiered_topic(live, name)
    tid = live.status(name).topic_id
    live.wait_tiering_settled(tid, 3)
    return tid, live.call(lambda c: c.topic(name))["partitions"][0]["leader_id"]


@contextlib.contextmanager
def _paused(live: LiveCluster, broker_id: int) -> Iterator[None]:
    """Broker ``broker_id`` stopped (SIGSTOP) for the body of the ``with``, then continued, whatever happened."""
    live.signal("broker", broker_id, signal.SIGSTOP)
    try:
        yield
    finally:
        live.signal("broker", broker_id, signal.SIGCONT)


def test_disable_with_delete_waits_for_a_paused_broker_and_completes_when_it_resumes(shared: LiveCluster) -> None:
    live = shared
    tid, leader_of_0 = _settled_tiered_topic(live, "orders")
    with _paused(live, leader_of_0):
        live.call(lambda c: c.disable_tiering("orders", "delete"))
        st = wait_until("the paused broker to be pending", lambda: (s := live.status("orders")).pending_brokers and s)
        assert st.state == TieredState.DISABLING

        def pending_broker_ids() -> list[int]:
            return [p.broker_id for p in live.status("orders").pending_brokers]

        wait_until("the others to acknowledge", lambda: pending_broker_ids() == [leader_of_0])
        assert live.status("orders").state == TieredState.DISABLING
    final = wait_until("DISABLED", lambda: (s := live.status("orders")).state == TieredState.DISABLED and s, 60)
    assert final.pending_brokers == ()
    segs = live.segments(tid)
    assert segs and all(states[-1] == SegmentState.DELETE_SEGMENT_FINISHED for states in segs.values())


def test_killing_the_active_controller_mid_disable_ends_disabled_with_the_policy_applied_once(live):
    tid, leader_of_0 = _settled_tiered_topic(live, "payments")
    with _paused(live, leader_of_0):
        live.call(lambda c: c.disable_tiering("payments", "delete"))
        wait_until("DISABLING with a pending broker", lambda: live.status("payments").pending_brokers)
        active = live.active_controller()
        os.kill(active.pid, signal.SIGKILL)

    def disabled_status():
        try:
            s = live.status("payments")
        except (BrokerNotAvailable, NotController):  # no controller yet: the client's own retries ended first
            return None
        return s.state == TieredState.DISABLED and s

    final = wait_until("DISABLED after failover", disabled_status, 60)
    assert final.tiered_epoch == 2
    assert wait_until("an active controller", live.maybe_active_controller).id != active.id
    for records in live.segment_records(tid).values():  # each segment copied, then deleted, once (retries aside)
        assert retries_folded(records) == COPIED_THEN_DELETED, records


def test_a_deposed_controllers_request_is_refused_by_a_broker(shared: LiveCluster) -> None:
    live = shared
    _tiered_topic(live, "events", partitions=1)
    old = live.active_controller()
    with SqliteMetadataStore(live.dir / "metadata.db", recover_on_open=False) as store:
        old_epoch = store.current_lease().controller_epoch
    live.pause_outside_store_writes("controller", old.id)  # not while it holds the store's write lock
    try:
        new = wait_until(
            "the standby to take over", lambda: (a := live.maybe_active_controller()) and a.id != old.id and a, 30
        )
    finally:
        live.signal("controller", old.id, signal.SIGCONT)
    assert new.id != old.id
    live.call(lambda c: c.disable_tiering("events", "retain"))
    st = live.status("events")
    broker = live.process("broker", 1)

    async def stale_request():
        conn = await KafkaConnection.open("127.0.0.1", broker.port)
        try:
            body = {
                "topic_id": st.topic_id,
                "partition_id": -1,
                "tiered_epoch": st.tiered_epoch,
                "controller_epoch": old_epoch,
            }
            return await conn.request(10950, 0, body, timeout_s=10)
        finally:
            await conn.close()

    resp = run(stale_request())
    assert resp["error_code"] == 11, resp  # STALE_CONTROLLER_EPOCH
    wait_until("DISABLED", lambda: live.status("events").state == TieredState.DISABLED, 60)


def _send_raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            return b""
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def test_every_port_survives_random_bytes_truncated_frames_and_oversized_lengths(shared: LiveCluster) -> None:
    live = shared
    import random

    rng = random.Random(950)
    random_bytes = [bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300))) for _ in range(5)]
    malformed_frames = [
        struct.pack(">i", 100) + b"abc",
        struct.pack(">i", -7),
        struct.pack(">i", 2**31 - 1) + b"x" * 100,
        struct.pack(">i", 8) + struct.pack(">hhi", 31000, 0, 1),
    ]
    junk = random_bytes + malformed_frames
    procs = [p for p in LocalClusterState.load(live.dir).processes if p.role in ("controller", "broker")]
    for p in procs:
        for blob in junk:
            _send_raw(p.port, blob)  # the server closes that connection; nothing else happens

    async def still_serving(port):
        conn = await KafkaConnection.open("127.0.0.1", port)
        try:
            return await conn.api_versions(timeout_s=10)
        finally:
            await conn.close()

    for p in procs:
        assert lc.is_ours(p), f"{p.role} {p.id} died"
        assert run(still_serving(p.port)), f"{p.role} {p.id} stopped serving"
    _, active = live.metadata_and_active_controller()
    assert active is not None and active >= lc.CONTROLLER_ID_BASE
