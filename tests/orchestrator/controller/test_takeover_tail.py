"""A standby that takes over continues from the image its follower kept current: the new core reads only the log
after that image (its tail), never the whole log again, so failover does not grow with the log."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from orchestrator.controller.core import ControllerCore
from orchestrator.controller.lease import STANDBY_EXPIRY_MARGIN_MS, standby_pause_s
from orchestrator.ids import Uuid
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.records import make_record
from orchestrator.metadata.sqlite import SqliteMetadataStore
from orchestrator.metadata.store import Lease

pytestmark = pytest.mark.unit


def _topic(name: str) -> list[Any]:
    tid = Uuid.random()
    return [make_record("TopicRecord", name=name, topic_id=tid)]


def _count_reads(store: SqliteMetadataStore, real_read: Any) -> list[int]:
    """Record the offset every read of the log starts from."""
    reads: list[int] = []

    def counting_read(*, from_offset: int = 0, limit: int | None = None) -> Any:
        reads.append(from_offset)
        return real_read(from_offset=from_offset, limit=limit)

    store.read = counting_read  # type: ignore[method-assign]
    return reads


def test_a_core_given_the_standbys_follower_reads_only_the_tail_of_the_log(tmp_path):
    store = SqliteMetadataStore(tmp_path / "metadata.db")
    lease = store.acquire_lease(holder="old", now_ms=0, ttl_ms=1)
    assert lease is not None
    for i in range(50):
        store.append(_topic(f"before-{i}"), controller_epoch=lease.controller_epoch)
    standby = MetadataFollower(store)
    seen = standby.refresh()
    assert seen.offset == 49
    store.append(_topic("after"), controller_epoch=lease.controller_epoch)  # appended after the standby's last round

    real_read = store.read
    reads = _count_reads(store, real_read)
    now = int(time.time() * 1000)
    taken = store.acquire_lease(holder="new", now_ms=now, ttl_ms=10_000)
    assert taken is not None
    core = ControllerCore(
        store,
        holder="new",
        controller_epoch=taken.controller_epoch,
        now_ms=lambda: now,
        rng=random.Random(1),
        follower=standby,
    )
    assert reads and min(reads) == 50, f"only the tail after offset 49 is read, got reads from {reads}"
    assert core.image.offset == 50 and core.image.topic_by_name("after") is not None
    assert core.image.topics.keys() >= seen.topics.keys()

    fresh_reads = _count_reads(store, real_read)
    ControllerCore(
        store, holder="new", controller_epoch=taken.controller_epoch, now_ms=lambda: now, rng=random.Random(1)
    )
    assert min(fresh_reads) == 0, "without a follower the whole log is replayed (what a takeover used to cost)"


def test_a_standby_asks_again_just_after_the_lease_it_saw_expires_not_a_quarter_ttl_later():
    ttl = 10_000
    alive = Lease("3000@h:1", 4, expires_at_ms=1_000 + ttl)  # renewed at 1,000
    assert standby_pause_s(None, 1_000, ttl) == ttl / 4000, "no lease seen: the usual round"
    assert standby_pause_s(alive, 1_000, ttl) == ttl / 4000, "a live lease: the usual round"
    assert standby_pause_s(alive, 10_000, ttl) == pytest.approx((1_000 + STANDBY_EXPIRY_MARGIN_MS) / 1000)
    assert standby_pause_s(alive, 20_000, ttl) == STANDBY_EXPIRY_MARGIN_MS / 1000, "expired: at once (a margin)"
