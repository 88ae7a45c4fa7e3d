"""A broker's partition directories following its image (KIP-516/KIP-631; what makes one stale is
:mod:`orchestrator.broker.partition_dirs`'): the data directory made and its id read at start, stale partitions
retired (log closed, directory moved to ``data_dir/stale/``) whenever the image's set of topic ids changed, and
moved-aside directories removed ``stale_dir_retention_ms`` later (-1: never), looked for at most every
:data:`STALE_DIR_CHECK_INTERVAL_S`.

Invariants:
* A reconcile holds the broker's open lock, so no log is opened meanwhile: every log open now was opened with an
  older image, and the newest image, never an older one, says what is stale (an older one would condemn a partition
  created since, whose log may be open).
* :meth:`HostedDirs.reconcile`'s caller holds the broker's log lock (or nothing runs yet: start-up);
  :meth:`HostedDirs.reconcile_if_topics_changed` takes it, so closing a log never races an append, fetch or
  retention.
* The clocks are injected: ``clock`` (seconds) says when to look at ``stale/`` again, ``wall_clock_ms`` when a
  directory was moved aside and how long ago (across restarts).
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
from collections.abc import Callable, Mapping, MutableMapping
from pathlib import Path

from orchestrator.broker import directory_id
from orchestrator.broker.local_log import PartitionLog
from orchestrator.broker.partition_dirs import PartitionKey, remove_expired_stale_dirs, retire_stale_partitions
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, TopicImage
from orchestrator.metadata.image_changes import same_topic_ids

# How often the metadata loop looks for moved-aside directories past their retention (a listing of data_dir/stale/).
STALE_DIR_CHECK_INTERVAL_S = 60.0


class HostedDirs:
    def __init__(
        self,
        *,
        data_dir: Path,
        broker_id: int,
        cluster_id: str,
        logs: Callable[[], MutableMapping[PartitionKey, PartitionLog]],
        newest_image: Callable[[], MetadataImage],
        open_lock: threading.Lock,
        log_lock: asyncio.Lock,
        stale_retention_ms: int,
        clock: Callable[[], float],
        wall_clock_ms: Callable[[], int],
    ) -> None:
        """``logs`` reads the broker's map of open logs; ``newest_image`` its image as last refreshed."""
        self.data_dir = data_dir
        self._broker_id = broker_id
        self._cluster_id = cluster_id
        self._logs = logs
        self._newest_image = newest_image
        self._open_lock = open_lock
        self._log_lock = log_lock
        self._stale_retention_ms = stale_retention_ms
        self._clock = clock
        self._wall_clock_ms = wall_clock_ms
        self._reconciled_topics: Mapping[Uuid, TopicImage] | None = None  # the topics at the last reconciliation
        self._next_stale_check = -math.inf  # clock() time; the first round looks

    def open_data_dir(self) -> tuple[Uuid, bool]:
        """The data directory made if missing, and its id (``directory_id``: read, or created now)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return directory_id.load_or_create(self.data_dir, broker_id=self._broker_id, cluster_id=self._cluster_id)

    def reconcile(self, image: MetadataImage) -> list[Path]:
        """Close the logs and move aside the directories of partitions the image (or a newer one) no longer has;
        return where the directories went."""
        with self._open_lock:
            newest = self._newest_image()
            if newest.offset > image.offset:
                image = newest
            moved = retire_stale_partitions(self.data_dir, image, self._logs(), now_ms=self._wall_clock_ms())
            self._reconciled_topics = image.topics
        return moved

    async def reconcile_if_topics_changed(self, image: MetadataImage) -> None:
        """Reconcile when a topic was created or deleted since the last time (a cheap check every round)."""
        if self._reconciled_topics is not None and same_topic_ids(self._reconciled_topics, image.topics):
            return
        async with self._log_lock:
            await asyncio.to_thread(self.reconcile, image)

    async def remove_expired_stale(self) -> None:
        """Delete directories moved aside ``stale_dir_retention_ms`` ago or more; look at most once an interval."""
        now = self._clock()
        if self._stale_retention_ms < 0 or now < self._next_stale_check:
            return
        self._next_stale_check = now + STALE_DIR_CHECK_INTERVAL_S
        remove = functools.partial(remove_expired_stale_dirs, self.data_dir, retention_ms=self._stale_retention_ms)
        await asyncio.to_thread(remove, now_ms=self._wall_clock_ms())
