"""The default metadata store backend: one SQLite file shared by every process of a cluster (see :mod:`.store`)."""

from orchestrator.metadata.sqlite.store import SqliteMetadataStore
from orchestrator.metadata.sqlite.wal import WalInspection, inspect_wal

__all__ = ["SqliteMetadataStore", "WalInspection", "inspect_wal"]
