"""What the active controller holds, and the one way it writes.

:class:`ControllerState` is shared by the admin API, the broker lifecycle and the disablement driver: the metadata
image (a :class:`MetadataFollower` over the store: the log is the only source of truth), the disablement queue
(``disablement_queue.py``, rebuilt from the log on construction: KIP-950's failover rule), who this controller is
(``holder``, ``controller_epoch``) and the injected clock (``now_ms``) and randomness (``rng``). It is not
thread-safe: one task uses it.

Invariants:
* Every write is :meth:`ControllerState.append`, i.e. ``store.append(..., controller_epoch=controller_epoch)``; a
  deposed controller's write raises :class:`StaleControllerEpoch`, which is logged as ``controller.deposed`` and
  propagates (never turned into a per-topic error code) so that the driver steps down (ARCHITECTURE §4 invariant 6).
* The queue sees every image: :meth:`refresh` reconciles it with each newer image, and :meth:`append` refreshes
  after writing (this controller is the only writer, so no image is skipped). The queue relies on this to tell
  a broker whose duty changed while its request was in flight.
* One request's change to one topic (or resource, or broker) is one :meth:`append`: all of it is written, or none.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import NoReturn

import structlog

from orchestrator.errors import StaleControllerEpoch
from orchestrator.metadata.follower import MetadataFollower
from orchestrator.metadata.image import MetadataImage
from orchestrator.metadata.records import MetadataRecord
from orchestrator.metadata.store import MetadataStore

from . import disablement_queue as dq

log = structlog.get_logger(__name__)


class ControllerState:
    def __init__(
        self,
        store: MetadataStore,
        *,
        holder: str,
        controller_epoch: int,
        now_ms: Callable[[], int],
        rng: random.Random,
        follower: MetadataFollower | None = None,
    ) -> None:
        """``follower``: a follower of ``store`` to continue from (a standby's, kept current while it waited), so
        taking over replays only the log's tail; a new one (a full replay) if None."""
        self.holder = holder
        self.controller_epoch = controller_epoch
        self.now_ms = now_ms
        self.rng = rng
        self._store = store
        self._follower = follower if follower is not None else MetadataFollower(store)
        image = self._follower.refresh()
        self.queue: dq.DisablementQueue = dq.rebuild(image, now_ms())

    @property
    def image(self) -> MetadataImage:
        """The image as of the last :meth:`refresh` (no I/O)."""
        return self._follower.image

    def refresh(self) -> MetadataImage:
        """Catch the image up with the log and reconcile the queue with it."""
        previous = self._follower.image
        image = self._follower.refresh()
        if image.offset != previous.offset or image.offset < 0:
            self.queue = dq.on_image(self.queue, image, self.now_ms(), previous=previous)
        return image

    def append(self, records: Sequence[MetadataRecord], *, remote_log_metadata: Sequence[MetadataRecord] = ()) -> int:
        """Append ``records`` in one batch, fenced by this controller's epoch, and ``remote_log_metadata`` to the RLMM
        in the same transaction; returns the offset of the last metadata-log record."""
        try:
            offset = self._store.append(
                records,
                controller_epoch=self.controller_epoch,
                remote_log_metadata=remote_log_metadata,
                now_ms=self.now_ms() if remote_log_metadata else None,
            )
        except StaleControllerEpoch:
            self.log_deposed()
            raise
        self.refresh()
        return offset

    def next_offset(self) -> int:
        """The offset the next appended record will get (a broker epoch is the offset of its registration)."""
        return self._store.end_offset()

    def check_lease(self) -> None:
        """Raise :class:`StaleControllerEpoch` unless this controller's epoch still holds the lease."""
        lease = self._store.current_lease()
        if lease is None or lease.controller_epoch != self.controller_epoch:
            self.log_deposed()
            raise StaleControllerEpoch(
                f"controller epoch {self.controller_epoch} no longer holds the lease "
                f"({'none' if lease is None else lease.controller_epoch} does)"
            )

    def deposed_by_broker(self, broker_id: int) -> NoReturn:
        """A broker answered STALE_CONTROLLER_EPOCH: it knows a newer controller. Raises
        :class:`StaleControllerEpoch` (the driver steps down)."""
        self.log_deposed()
        raise StaleControllerEpoch(f"broker {broker_id} knows a newer controller than epoch {self.controller_epoch}")

    def log_deposed(self) -> None:
        log.warning("controller.deposed", holder=self.holder, controller_epoch=self.controller_epoch)
