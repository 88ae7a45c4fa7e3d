"""The broker's fence against deposed controllers (ARCHITECTURE §4 invariant 6), one per broker process.

Every request a controller sends a broker (DisableRemoteTopic, DeleteRemotePartitions) carries its controller
epoch. Invariant: a request whose epoch is below the highest this broker has seen from any controller, on any of
those APIs, or below the store's current lease epoch, comes from a deposed controller and is refused with
STALE_CONTROLLER_EPOCH before it changes anything. One fence is shared by every handler, so an epoch learnt from
one API fences the others.
"""

from __future__ import annotations

import threading

from orchestrator.errors import StaleControllerEpoch
from orchestrator.metadata.store import MetadataStore


class ControllerEpochFence:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._highest = -1

    @property
    def highest(self) -> int:
        """The highest controller epoch a request has carried so far (-1: none yet)."""
        return self._highest

    def admit(self, controller_epoch: int) -> None:
        """Raise :class:`StaleControllerEpoch` for a deposed controller's request; else remember its epoch. An epoch
        below one already seen is refused without reading the store, so it is refused as stale while the store
        cannot be reached too (the lease read would fail with a retriable KafkaStorageError)."""
        with self._lock:
            if controller_epoch < self._highest:
                raise StaleControllerEpoch(
                    f"request from controller epoch {controller_epoch}; current is {self._highest}"
                )
        lease = self._store.current_lease()
        with self._lock:
            floor = max(self._highest, lease.controller_epoch if lease else -1)
            if controller_epoch < floor:
                raise StaleControllerEpoch(f"request from controller epoch {controller_epoch}; current is {floor}")
            self._highest = max(self._highest, controller_epoch)
