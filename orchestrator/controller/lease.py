"""Lease election: which controller is the active one (it holds the store's lease), on a thread of its own.

A standby asks for the lease every ttl/4, and just after the expiry of the lease it last saw if that comes sooner
(:func:`standby_pause_s`; on a PostgreSQL store also as soon as a lease change is notified, so a released lease is
taken at once); when the active controller stops renewing (killed, paused, partitioned) the lease expires and a
standby takes it at controller epoch + 1. The active controller renews every ttl/3. A renewal that fails retriably
(the store busy, e.g. a lock timeout behind a paused writer) is retried every ttl/10 for as long as the last good
renewal leaves a third of the TTL; a renewal refused (StaleControllerEpoch), or none by then, means the lease can no
longer be trusted: :meth:`LeaseElection.renew` says so, and the controller steps down at once (every append of a
deposed controller is refused by the store anyway: ARCHITECTURE §4 invariant 6).

Invariants:
* The lease has its own store connection and thread: a renewal never waits behind a long burst of core work, or a
  busy controller would lose its lease to a standby for nothing.
* Taking the lease is decided by the store, under its write lock (``acquire_lease``); the read before it is only a
  shortcut that spares that lock while another controller is active.
* Lease times are wall-clock milliseconds (every controller compares them); the renewal deadline is monotonic.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from orchestrator.clock import wall_ms
from orchestrator.errors import KafkaError, StaleControllerEpoch
from orchestrator.metadata.store import Lease, MetadataStore

log = structlog.get_logger(__name__)

T = TypeVar("T")
STANDBY_EXPIRY_MARGIN_MS = 20  # a standby asks again this long after the lease it saw should have expired


def standby_pause_s(seen: Lease | None, now_ms: int, ttl_ms: int) -> float:
    """How long a standby waits before asking for the lease again: ttl/4, or, when the lease it saw expires
    sooner, just past that expiry, so a dead controller is replaced within the TTL plus a round, not plus ttl/4."""
    pause_ms = ttl_ms / 4
    if seen is not None:
        pause_ms = min(pause_ms, max(STANDBY_EXPIRY_MARGIN_MS, seen.expires_at_ms - now_ms + STANDBY_EXPIRY_MARGIN_MS))
    return pause_ms / 1000


def who_is_active(lease: Lease | None, now_ms: int) -> str:
    """Who the active controller is, as a refusal's message says it."""
    if lease is None or lease.expired(now_ms):
        return "no controller is active right now; retry shortly"
    return f"the active controller is {lease.holder} (epoch {lease.controller_epoch})"


@dataclass(frozen=True, slots=True)
class Renewal:
    """What a renewal round found: when to renew next, or why the lease can no longer be trusted."""

    pause_s: float
    lost: str | None = None  # set: step down now


class LeaseElection:
    """This controller's part in the election, over a store connection and a thread of its own."""

    def __init__(self, store: MetadataStore, *, ttl_ms: int) -> None:
        self.store = store
        self.ttl_ms = ttl_ms
        self.holder = ""  # "<node_id>@<host>:<port>", known once the server listens
        self.seen: Lease | None = None  # the lease as the last standby round read it
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="lease")
        self._renewal_deadline = 0.0  # monotonic: a failed renewal is retried until then

    async def _on_lease(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def take(self) -> Lease | None:
        """The lease, if nobody else holds it unexpired (then this controller is the active one from now)."""
        lease = await self._on_lease(self._acquire_if_free)
        if lease is not None:
            self.took_office()
        return lease

    def took_office(self) -> None:
        """The lease was just taken: the first renewal is due, and may be retried, within two thirds of the TTL."""
        self._renewal_deadline = time.monotonic() + self.ttl_ms / 1000 * 2 / 3

    def _acquire_if_free(self) -> Lease | None:
        current = self.seen = self.store.current_lease()
        if current is not None and current.holder != self.holder and not current.expired(wall_ms()):
            return None
        return self.store.acquire_lease(holder=self.holder, now_ms=wall_ms(), ttl_ms=self.ttl_ms)

    def standby_pause_s(self) -> float:
        """How long a standby waits before its next round (:func:`standby_pause_s`)."""
        return standby_pause_s(self.seen, wall_ms(), self.ttl_ms)

    async def renew(self, controller_epoch: int) -> Renewal:
        """Renew the lease held at ``controller_epoch`` (see the module docstring for when a failure is retried)."""
        ttl = self.ttl_ms
        started = time.monotonic()

        def renew() -> object:
            return self.store.renew_lease(
                holder=self.holder, controller_epoch=controller_epoch, now_ms=wall_ms(), ttl_ms=ttl
            )

        try:
            await self._on_lease(renew)
        except KafkaError as exc:
            if exc.retriable and not isinstance(exc, StaleControllerEpoch) and started < self._renewal_deadline:
                log.warning("controller.lease_renewal_failed", error=exc.name, detail=exc.message)
                return Renewal(ttl / 10_000)
            return Renewal(ttl / 4000, lost=f"lease renewal failed: {exc.name}")
        self._renewal_deadline = started + ttl / 1000 * 2 / 3
        return Renewal(ttl / 3000)

    async def holds(self) -> bool:
        """Whether the lease names this controller and has not expired (read on the lease's connection)."""
        lease = await self._on_lease(self.store.current_lease)
        return lease is not None and lease.holder == self.holder and not lease.expired(wall_ms())

    @property
    def notifies_changes(self) -> bool:
        """Whether the store notifies lease changes and appends (PostgreSQL's NOTIFY)."""
        return self.store.notifies_changes

    async def wait_for_change(self, timeout_s: float) -> None:
        """Until a lease change or an append is notified, or ``timeout_s`` passed."""
        await self._on_lease(lambda: self.store.wait_for_change(timeout_s=timeout_s))

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self.store.close()
