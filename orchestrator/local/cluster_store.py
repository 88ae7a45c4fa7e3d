"""The local cluster's metadata store, as the CLI side of the cluster opens it: ``metadata.db`` beside
``cluster.json``, or an external PostgreSQL database (``cluster up --store postgresql://...``).

Invariants:
* A password is never written into ``cluster.json`` or a settings file: the one ``cluster up`` was given, in the
  URL or in the environment (``TIEREDCTL_STORE_PASSWORD``, else ``PGPASSWORD``), is kept in
  ``config/store-password`` (mode 0600), which the settings files name, so later commands, and a resumed cluster,
  started from a shell without it, find it. (libpq's own ``~/.pgpass`` is left to libpq: nothing is copied.)
* A new cluster takes only an empty external store: one that holds records or a lease is another cluster's.
* Opened here, a store is a reader and is never recovered (that is the processes' job), except the new cluster's,
  made ready for its first records.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from orchestrator.errors import LocalClusterError
from orchestrator.local.state import LocalClusterState
from orchestrator.metadata.open import PASSWORD_ENV, open_store, parse_store_spec, read_password, split_password
from orchestrator.metadata.store import MetadataStore
from orchestrator.settings import StoreSettings


def record_external_store(state: LocalClusterState, store: str) -> None:
    """Record a new cluster's PostgreSQL store: its URL without the password (kept in a 0600 file, if the URL or
    the environment gave one), after checking it can be opened and holds no other cluster's metadata."""
    if not parse_store_spec(store).is_postgresql:
        raise LocalClusterError("--store takes a postgresql:// URL (without it the cluster keeps metadata.db)")
    dsn, password = split_password(store)
    if password is None:
        password = os.environ.get(PASSWORD_ENV) or os.environ.get("PGPASSWORD") or None
    password_file = state.store_password_file
    if password is not None:
        password_file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(password + "\n")
    state.store = dsn
    with open_cluster_store(state) as opened:
        if opened.end_offset() > 0 or opened.current_lease() is not None:
            location = parse_store_spec(dsn).location
            raise LocalClusterError(
                f"the store {location} already holds a cluster's metadata; a new local cluster needs an empty one "
                "(another database, or drop that one's tieredctl schema yourself)"
            )


def store_password_tables(state: LocalClusterState) -> dict[str, dict[str, str]]:
    """The settings table that names the store's password file, when the cluster has one."""
    if state.store_password_file.exists():
        return {"store": {"password_file": str(state.store_password_file)}}
    return {}


@contextlib.contextmanager
def open_cluster_store(state: LocalClusterState, *, create: bool = False) -> Iterator[MetadataStore]:
    """The cluster's store as a reader (never recovered here: that is the processes' job), or, with ``create``, a
    new cluster's store made ready for its first records."""
    password_file = state.store_password_file
    settings = StoreSettings(password_file=str(password_file) if password_file.exists() else None)
    password = read_password(settings, os.environ) if state.store else None
    store = open_store(
        state.store_spec,
        settings=settings if state.store else None,
        password=password,
        recover_on_open=create,
        application_name="tieredctl-cli",
    )
    try:
        yield store
    finally:
        store.close()
