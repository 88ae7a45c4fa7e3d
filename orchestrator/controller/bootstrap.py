"""SCRAM users written into a cluster's metadata log before any process starts: Kafka's
``kafka-storage format --add-scram``, for clusters whose every port asks for a login.

A SASL-only cluster cannot create its first user through the admin API (nobody can log in to send the request), so
the operator (``tieredctl users bootstrap``) or the local cluster (``cluster up --sasl``) writes the first
credentials straight into the store, as a controller would: under a lease of its own, released at once.

Invariants:
* Only an empty log is written to (a running cluster's users are managed with AlterUserScramCredentials, through
  the active controller); a log that holds anything is refused with :class:`~orchestrator.errors.InvalidRequest`.
* Only credentials are written (salted and hashed, never a password), all in one append.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from orchestrator.clock import wall_ms
from orchestrator.errors import InvalidRequest, NotController
from orchestrator.metadata.records import make_record
from orchestrator.metadata.store import MetadataStore
from orchestrator.security.scram import ScramCredential

log = structlog.get_logger(__name__)

BOOTSTRAP_HOLDER = "bootstrap"
_LEASE_TTL_MS = 30_000


def bootstrap_scram_users(
    store: MetadataStore, credentials: Mapping[tuple[str, int], ScramCredential], *, now_ms: int | None = None
) -> None:
    """Write ``credentials`` ((user, mechanism code) -> credential) as the first records of an empty log."""
    now = wall_ms() if now_ms is None else now_ms
    lease = store.acquire_lease(holder=BOOTSTRAP_HOLDER, now_ms=now, ttl_ms=_LEASE_TTL_MS)
    if lease is None:
        raise NotController(
            "a controller holds the store's lease: the cluster is running; add users with 'tieredctl users add'"
        )
    try:
        if store.end_offset() > 0 or store.latest_snapshot() is not None:
            raise InvalidRequest(
                "the metadata log is not empty: users of a formatted cluster are added with 'tieredctl users add'"
            )
        records = [
            make_record(
                "UserScramCredentialRecord",
                name=user,
                mechanism=mechanism,
                salt=credential.salt,
                stored_key=credential.stored_key,
                server_key=credential.server_key,
                iterations=credential.iterations,
            )
            for (user, mechanism), credential in sorted(credentials.items())
        ]
        store.append(records, controller_epoch=lease.controller_epoch)
        log.info("controller.scram_users_bootstrapped", users=sorted({user for user, _ in credentials}))
    finally:
        store.release_lease(holder=BOOTSTRAP_HOLDER, controller_epoch=lease.controller_epoch)
