"""The active controller's snapshots: one every N records (or M ms while records arrive), fenced by its epoch, and
a controller that takes over starts from the latest one; the service writes them off the event loop."""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.controller.core import ControllerCore
from orchestrator.controller.service import ControllerService
from orchestrator.controller.snapshots import SnapshotWriter
from orchestrator.errors import StaleControllerEpoch
from orchestrator.ids import Uuid
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.memory_store import InMemoryMetadataStore
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.settings import ControllerSettings, SnapshotSettings

pytestmark = pytest.mark.timeout(60)  # each test's kind is beside it


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


def _core(store: InMemoryMetadataStore, clock: Clock, holder: str = "c1") -> ControllerCore:
    lease = store.acquire_lease(holder=holder, now_ms=clock(), ttl_ms=10**9)
    assert lease is not None
    return ControllerCore(
        store, holder=holder, controller_epoch=lease.controller_epoch, now_ms=clock, rng=random.Random(1)
    )


def _register_broker(core: ControllerCore, b: int = 1) -> None:
    listener = {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9000 + b, "security_protocol": 0}
    body: Any = {
        "broker_id": b,
        "cluster_id": "tieredctl",
        "incarnation_id": Uuid.random(),
        "listeners": [listener],
        "rack": None,
    }
    registered = core.broker_registration(body)
    assert registered["error_code"] == 0, registered
    beat: Any = {"broker_id": b, "broker_epoch": registered["broker_epoch"], "current_metadata_offset": 10**9}
    core.broker_heartbeat(beat)


def _create(core: ControllerCore, name: str, partitions: int = 3) -> None:
    entry = {"name": name, "num_partitions": partitions, "replication_factor": -1, "assignments": [], "configs": []}
    result = core.create_topics({"topics": [entry]}, 7)["topics"][0]  # type: ignore[typeddict-item]
    assert result["error_code"] == 0, result


@pytest.mark.unit
def test_the_active_controller_writes_a_snapshot_every_n_records() -> None:
    store, clock = InMemoryMetadataStore(), Clock()
    core = _core(store, clock)
    _register_broker(core)
    writer = SnapshotWriter.resume(store, SnapshotSettings(every_records=10, every_ms=0, retained=2), now_ms=clock)
    written: list[int] = []
    for i in range(20):
        _create(core, f"t{i}")  # 4 records each: a TopicRecord and 3 PartitionRecords
        if writer.maybe_write(core.image, controller_epoch=core.controller_epoch):
            written.append(core.image.offset)
    # Each snapshot is of the first image at least 10 records past the previous one (4 records per request).
    gaps = [b - a for a, b in zip([-1, *written], written, strict=False)]
    assert len(written) >= 6 and all(10 <= gap < 14 for gap in gaps), written
    snap = store.latest_snapshot()
    assert snap is not None and snap.offset == written[-1]
    assert store.start_offset() == written[-2]  # two kept; the records below the older one are deleted

    # A controller that takes over starts from the latest snapshot and the tail, and sees the same cluster.
    clock.ms += 10**9 + 1
    with capture_logs() as logs:
        successor = _core(store, clock, holder="c2")
    assert sorted(successor.image.topics_by_name) == sorted(core.image.topics_by_name)
    assert [e["snapshot_offset"] for e in logs if e["event"] == "metadata.snapshot_loaded"] == [written[-1]]


@pytest.mark.unit
def test_a_snapshot_is_due_after_m_ms_only_if_records_arrived() -> None:
    store, clock = InMemoryMetadataStore(), Clock()
    core = _core(store, clock)
    _register_broker(core)
    writer = SnapshotWriter.resume(store, SnapshotSettings(every_records=0, every_ms=60_000), now_ms=clock)
    _create(core, "a")
    assert not writer.due(core.image)
    clock.ms += 60_000
    assert writer.maybe_write(core.image, controller_epoch=core.controller_epoch)
    clock.ms += 60_000
    assert not writer.due(core.image)  # nothing new since the last snapshot
    _create(core, "b")
    assert writer.due(core.image)


@pytest.mark.unit
def test_a_deposed_controller_cannot_write_a_snapshot() -> None:
    store, clock = InMemoryMetadataStore(), Clock()
    core = _core(store, clock)
    _register_broker(core)
    _create(core, "a")
    clock.ms += 10**9 + 1
    _core(store, clock, holder="c2")
    writer = SnapshotWriter.resume(store, SnapshotSettings(every_records=1), now_ms=clock)
    with pytest.raises(StaleControllerEpoch):
        writer.write(core.image, controller_epoch=core.controller_epoch)
    assert store.latest_snapshot() is None and store.start_offset() == 0


@pytest.mark.integration
def test_the_service_writes_snapshots_on_its_own_thread_while_active(tmp_path: Any, monkeypatch: Any) -> None:
    threads: list[str] = []
    real_write = SnapshotWriter.write

    def write(self: SnapshotWriter, *args: Any, **kwargs: Any) -> int:
        threads.append(threading.current_thread().name.split("_")[0])
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(SnapshotWriter, "write", write)
    path = tmp_path / "m.db"
    settings = ControllerSettings(
        node_id=3000,
        metadata_store=str(path),
        lease_ttl_ms=3000,
        snapshots=SnapshotSettings(every_records=8, every_ms=0, retained=2),
    )
    service = ControllerService(settings)

    async def drive() -> None:
        task = asyncio.create_task(service.run())
        try:
            async with asyncio.timeout(30):
                while service.core is None:
                    await asyncio.sleep(0.02)
                core = service.core
                await service.on_core(lambda: _register_broker(core))
                for i in range(10):
                    await service.on_core(lambda i=i: _create(core, f"t{i}"))  # type: ignore[misc]
                while service.snapshot_store.start_offset() == 0 or service.snapshot_store.latest_snapshot() is None:
                    await asyncio.sleep(0.05)
                snap = service.snapshot_store.latest_snapshot()
                assert snap is not None
                while snap.offset < 32:  # 40 records: at least 32 is 8 past a snapshot
                    await asyncio.sleep(0.05)
                    snap = service.snapshot_store.latest_snapshot()
                    assert snap is not None
        finally:
            service.stop()
            await asyncio.wait_for(task, 10)

    with capture_logs() as logs:
        asyncio.run(drive())
    written = [e for e in logs if e["event"] == "controller.snapshot_written"]
    assert written and all(e["records_since_last"] >= 8 for e in written)
    assert threads and set(threads) == {"snapshot"}  # neither the event loop nor the core's thread
    with SqliteMetadataStore(path, recover_on_open=False) as store:
        assert store.start_offset() > 0
        image = MetadataFollower(store).refresh()
        assert sorted(image.topics_by_name) == sorted(f"t{i}" for i in range(10))
