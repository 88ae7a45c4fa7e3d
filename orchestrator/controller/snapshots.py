"""The active controller's metadata snapshots: when one is due, and writing it.

The controller snapshots its own image (immutable, at an offset it has applied) every ``every_records`` records
or every ``every_ms`` while records keep arriving (:class:`~orchestrator.settings.SnapshotSettings`). The store
keeps the newest ``retained`` snapshots and deletes the log's records below the oldest one kept (``store``
invariant 7), so every process starts from the latest snapshot plus a short tail and the log stays bounded.

Invariants:
* Only the lease holder writes: :meth:`SnapshotWriter.write` passes the controller epoch and the store refuses a
  stale one (:class:`StaleControllerEpoch`) in the same transaction as the write, exactly like an append.
* The decision (:meth:`SnapshotWriter.due`) is pure bookkeeping on the offset and the caller's clock; the snapshot
  loop (``snapshot_loop.py``) calls :meth:`SnapshotWriter.write` on a worker thread of its own, never on the event
  loop and never on the core's thread, so a large image never delays a request.
* A snapshot is never written twice at one offset, nor for an image that has not moved since the last one.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.store import MetadataStore
from orchestrator.settings import SnapshotSettings

log = structlog.get_logger(__name__)


class SnapshotWriter:
    """Decides when the active controller's image is due for a snapshot, and writes it (one per controller tenure)."""

    def __init__(
        self,
        store: MetadataStore,
        settings: SnapshotSettings,
        *,
        last_offset: int,
        now_ms: Callable[[], int],
    ) -> None:
        self._store = store
        self.settings = settings
        self._now_ms = now_ms
        self.last_offset = last_offset  # the offset of the newest snapshot in the store (-1: none)
        self._last_at_ms = now_ms()

    @classmethod
    def resume(cls, store: MetadataStore, settings: SnapshotSettings, *, now_ms: Callable[[], int]) -> SnapshotWriter:
        """A writer that counts from the newest snapshot already in the store (store I/O: call off the event loop)."""
        latest = store.latest_snapshot()
        return cls(store, settings, last_offset=-1 if latest is None else latest.offset, now_ms=now_ms)

    def due(self, image: MetadataImage) -> bool:
        """Whether ``image`` should be snapshotted now (no I/O)."""
        behind = image.offset - self.last_offset
        if behind <= 0:
            return False
        if self.settings.every_records and behind >= self.settings.every_records:
            return True
        return bool(self.settings.every_ms) and self._now_ms() - self._last_at_ms >= self.settings.every_ms

    def write(self, image: MetadataImage, *, controller_epoch: int) -> int:
        """Save ``image`` as a snapshot at its offset, fenced by ``controller_epoch``; returns the log's start offset
        afterwards. Raises :class:`StaleControllerEpoch` if this controller no longer holds the lease."""
        records = image.to_records()
        start = self._store.save_snapshot(
            offset=image.offset,
            records=records,
            controller_epoch=controller_epoch,
            retain=self.settings.retained,
            now_ms=self._now_ms(),
        )
        log.info(
            "controller.snapshot_written",
            snapshot_offset=image.offset,
            snapshot_records=len(records),
            records_since_last=image.offset - self.last_offset,
            log_start_offset=start,
            controller_epoch=controller_epoch,
        )
        self.last_offset = image.offset
        self._last_at_ms = self._now_ms()
        return start

    def maybe_write(self, image: MetadataImage, *, controller_epoch: int) -> bool:
        """:meth:`write` if :meth:`due`; returns whether a snapshot was written."""
        if not self.due(image):
            return False
        self.write(image, controller_epoch=controller_epoch)
        return True
