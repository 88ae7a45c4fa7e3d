"""Follow the metadata log: keep an image up to date by replaying what the store appended since last time.

Every process (controller, standby, broker agents) owns one follower. The first refresh starts from the latest
snapshot when there is one, then replays the log after it; later refreshes read only new records. Each refresh
publishes a new immutable image, so readers holding the previous one are never disturbed.

If the store's log now ends before the image's offset (recovery cut a corrupt tail the image had already
applied), the follower drops its image and rebuilds from the snapshot and the log: an image never describes
records the log no longer holds.
"""

from __future__ import annotations

import threading

import structlog

from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, from_snapshot, replay
from orchestrator.metadata.store import MetadataStore

log = structlog.get_logger(__name__)


class MetadataFollower:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._image = EMPTY_IMAGE
        self._lock = threading.Lock()
        self._started = False

    @property
    def image(self) -> MetadataImage:
        """The last published image (no I/O)."""
        return self._image

    def refresh(self) -> MetadataImage:
        with self._lock:
            image = self._image
            if self._started and self._store.end_offset() <= image.offset:
                log.warning("metadata.follower.rebuild", image_offset=image.offset, log_end=self._store.end_offset())
                image, self._started = EMPTY_IMAGE, False
            if not self._started:
                snap = self._store.latest_snapshot()
                if snap is not None:
                    image = from_snapshot(snap.offset, snap.records)
                self._started = True
            entries = self._store.read(from_offset=image.offset + 1)
            image = replay(image, ((e.offset, e.record) for e in entries))
            self._image = image
            return image
