"""Follow the metadata log: keep an image up to date by replaying what the store appended since last time.

Every process (controller, standby, broker agents, the CLI's readers) owns one follower. The first refresh starts
from the latest snapshot when there is one (``metadata.snapshot_loaded``, with its offset), then replays only
the log after it; later refreshes read only new records. Each refresh publishes a new immutable image, so
readers holding the previous one are never disturbed.

The log's records below the oldest kept snapshot are deleted by the active controller (``store`` invariant 7).
A follower that fell behind that point (a paused broker, a slow reader) gets :class:`LogTruncated` from the
store and reloads from the latest snapshot instead of failing (``metadata.follower.reload``), then reads on;
the same happens if records are deleted while a refresh is reading them.

Replays run with the cycle collector paused (:mod:`orchestrator.collector`): a replay allocates only what the
image keeps or reference counting frees. Every refresh then lets the collector settle, saying whether it moved
the image on (:func:`~orchestrator.collector.settle_if_grown`): once the heap grew enough and the image is quiet,
what is alive is frozen, so later full collections do not walk the image again.

If the store's log now ends before the image's offset (recovery cut a corrupt tail the image had already
applied), the follower drops its image and rebuilds from the snapshot and the log: an image never describes
records the log no longer holds.
"""

from __future__ import annotations

import threading

import structlog

from orchestrator.collector import collector_paused, settle_if_grown
from orchestrator.metadata.image import EMPTY_IMAGE, MetadataImage, from_snapshot, replay
from orchestrator.metadata.store import LogTruncated, MetadataStore

log = structlog.get_logger(__name__)

# Each reload starts from the newest snapshot; failing again means the controller saved ``retain`` newer
# snapshots (and deleted the records after ours) while we read: rare enough that a few tries always suffice.
MAX_RELOADS = 5


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
            for attempt in range(1, MAX_RELOADS + 1):
                try:
                    with collector_paused():
                        image = self._catch_up()
                except LogTruncated as exc:
                    if attempt == MAX_RELOADS:
                        raise
                    log.info("metadata.follower.reload", image_offset=self._image.offset, reason=exc.message)
                    self._started = False
                    continue
                grew = image.offset != self._image.offset
                self._image = image
                settle_if_grown(busy=grew)  # what a replay built is long-lived: see orchestrator/collector.py
                return image
            raise AssertionError("unreachable")  # pragma: no cover

    def _catch_up(self) -> MetadataImage:
        image = self._image
        if self._started:
            end = self._store.end_offset()
            if end == image.offset + 1:
                return image  # nothing appended since: the very same image (one query, as every request pays)
            if end <= image.offset:
                log.warning("metadata.follower.rebuild", image_offset=image.offset, log_end=end)
                image, self._started = EMPTY_IMAGE, False
        if not self._started:
            image = self._load_start()
            self._started = True
        entries = self._store.read(from_offset=image.offset + 1)
        return replay(image, entries)

    def _load_start(self) -> MetadataImage:
        """The image to replay the log onto: the latest snapshot's, or the empty image if there is none."""
        snap = self._store.latest_snapshot()
        if snap is None:
            return EMPTY_IMAGE
        image = from_snapshot(snap.offset, snap.records)
        log.info(
            "metadata.snapshot_loaded",
            snapshot_offset=snap.offset,
            snapshot_records=len(snap.records),
            log_start_offset=self._store.start_offset(),
            log_end_offset=self._store.end_offset(),
        )
        return image
