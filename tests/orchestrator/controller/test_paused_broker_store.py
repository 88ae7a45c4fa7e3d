"""A paused broker cannot stop the control plane: brokers send their remote log metadata records to the active
controller (AppendRemoteLogMetadata) and never hold the store's write lock, so a broker frozen (SIGSTOP) at any
moment of its tiering leaves the controller's lease renewals and admin writes going on, on the one-file SQLite
store and on PostgreSQL alike.

The broker is armed to freeze inside the store's RLMM append transaction (``store.mid_rlmm_append``, a stop point):
were it to write the store itself, it would freeze there holding SQLite's write lock, no copy would ever finish and
the controller would lose its lease. It never reaches the point: its copies finish through the controller."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import crash_points
from orchestrator.ids import Uuid
from orchestrator.local import cluster as lc
from orchestrator.metadata.open import open_store
from orchestrator.metadata.records import SegmentState
from orchestrator.metadata.store import Lease, MetadataStore
from remote_storage.rlmm import RlmmFold
from remote_storage.s3 import make_s3_client
from tests.support.live_cluster import LiveCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

TIERED = {"remote.storage.enable": "true", "local.retention.ms": "0"}


@pytest.fixture(params=["sqlite", "postgresql"])
def store_spec(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None: the cluster's own SQLite file; else a new database of the session's PostgreSQL server."""
    if request.param == "sqlite":
        yield None
        return
    server = request.getfixturevalue("postgres_server")
    name = server.create_database()
    try:
        yield f"postgresql://postgres:{server.password}@127.0.0.1:{server.port}/{name}"
    finally:
        server.drop_database(name)


@pytest.fixture
def live(tmp_path: Path, moto_endpoint: str, store_spec: str | None) -> Iterator[LiveCluster]:
    bucket = "paused-broker"
    make_s3_client(endpoint_url=moto_endpoint).create_bucket(Bucket=bucket)
    cluster = LiveCluster(
        tmp_path / "cluster", brokers=1, controllers=1, s3_endpoint=moto_endpoint, bucket=bucket, store=store_spec
    )
    try:
        yield cluster
    finally:
        cluster.close()


def _store(live: LiveCluster, spec: str | None) -> MetadataStore:
    return open_store(spec or live.dir / "metadata.db", recover_on_open=False)


def _lease(live: LiveCluster, spec: str | None) -> Lease | None:
    with contextlib.closing(_store(live, spec)) as store:
        return store.current_lease()


def _copied(live: LiveCluster, spec: str | None, tid: Uuid) -> int:
    """The topic's segments whose copy finished, from the RLMM."""
    with contextlib.closing(_store(live, spec)) as store:
        rlmm = RlmmFold(store)
        rlmm.refresh()
        return len(rlmm.segments(tid, states=[SegmentState.COPY_SEGMENT_FINISHED]))


def _broker_serving(live: LiveCluster) -> bool:
    nodes = live.call(lambda c: c.metadata([]))["brokers"]
    return 1 in {b["node_id"] for b in nodes}


def test_a_broker_frozen_while_tiering_holds_up_neither_the_lease_nor_admin_writes(live, tmp_path, store_spec):
    record = tmp_path / "stops.jsonl"
    lc.kill_process(live.process("broker", 1))
    env = {crash_points.STOP_ENV_VAR: "store.mid_rlmm_append", crash_points.RECORD_ENV_VAR: str(record)}
    lc.restart(live.dir, "broker", 1, env=env)
    wait_until("the armed broker to serve", lambda: _broker_serving(live), 30)

    tid = live.call(lambda c: c.create_topic("tiered", partitions=1, configs=TIERED))
    live.call(lambda c: c.produce("tiered", [b"v" * 200 for _ in range(80)], partition=0))

    def copied() -> int:
        return _copied(live, store_spec, tid)

    wait_until("copies finished through the controller", lambda: copied() >= 2, 60)
    assert not record.exists(), "the broker never wrote the store's RLMM itself"

    # frozen at whatever it is doing now (a copy, an RLMM request, a fetch of the metadata log)
    live.signal("broker", 1, signal.SIGSTOP)
    try:
        held = _lease(live, store_spec)
        for renewal in (1, 2):  # the same controller renews twice while the broker stays frozen
            assert held is not None
            last = held

            def renewed(last: Lease = last) -> Lease | None:
                now = _lease(live, store_spec)
                same = now is not None and (now.holder, now.controller_epoch) == (last.holder, last.controller_epoch)
                return now if same and now is not None and now.expires_at_ms > last.expires_at_ms else None

            held = wait_until(f"lease renewal {renewal} by the same controller", renewed, 30)
        # an admin write the active controller appends (a frozen broker is soon fenced: no topic creation)
        live.call(lambda c: c.alter_configs("tiered", {"retention.ms": "86400000"}))
        assert live.call(lambda c: c.describe_configs("tiered"))["retention.ms"] == "86400000"
        assert live.active_controller().pid == live.process("controller", lc.CONTROLLER_ID_BASE).pid
    finally:
        os.kill(live.process("broker", 1).pid, signal.SIGCONT)
    before = copied()
    live.call(lambda c: c.produce("tiered", [b"w" * 200 for _ in range(40)], partition=0))
    wait_until("tiering to go on after the broker is resumed", lambda: copied() > before, 60)
