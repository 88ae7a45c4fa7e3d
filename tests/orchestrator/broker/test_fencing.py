"""One controller-epoch fence per broker: an epoch learnt from one API fences requests on the others, and the
store's lease epoch is a floor even before any request was seen."""

from __future__ import annotations

import time

import pytest

from orchestrator.broker.fencing import ControllerEpochFence
from orchestrator.errors import KafkaStorageError, StaleControllerEpoch
from orchestrator.metadata.memory_store import InMemoryMetadataStore

pytestmark = pytest.mark.unit


def test_an_epoch_seen_on_one_api_refuses_an_older_one_on_another():
    fence = ControllerEpochFence(InMemoryMetadataStore())
    disable_remote_topic, delete_remote_partitions = fence.admit, fence.admit  # what both handlers call
    disable_remote_topic(5)
    with pytest.raises(StaleControllerEpoch, match="epoch 4; current is 5"):
        delete_remote_partitions(4)
    delete_remote_partitions(5)
    delete_remote_partitions(6)
    assert fence.highest == 6


def test_the_lease_epoch_is_a_floor_before_any_request():
    store = InMemoryMetadataStore()
    lease = store.acquire_lease(holder="3000@127.0.0.1:1", now_ms=int(time.time() * 1000), ttl_ms=60_000)
    assert lease is not None
    fence = ControllerEpochFence(store)
    with pytest.raises(StaleControllerEpoch):
        fence.admit(lease.controller_epoch - 1)
    fence.admit(lease.controller_epoch)
    assert fence.highest == lease.controller_epoch


class SwitchableStore(InMemoryMetadataStore):
    reachable = True

    def current_lease(self):  # type: ignore[no-untyped-def]
        if not self.reachable:
            raise KafkaStorageError("the store cannot be reached")
        return super().current_lease()


def test_an_epoch_below_one_seen_is_refused_as_stale_without_the_store_and_a_newer_one_waits_for_it():
    store = SwitchableStore()
    fence = ControllerEpochFence(store)
    fence.admit(5)
    store.reachable = False
    with pytest.raises(StaleControllerEpoch, match="epoch 4; current is 5"):
        fence.admit(4)
    with pytest.raises(KafkaStorageError):  # it may be current: only the lease can tell, so it is not admitted
        fence.admit(5)
    assert fence.highest == 5
