"""The default metadata store backend: one SQLite file shared by every process of a cluster (see :mod:`.store`)."""

from orchestrator.metadata.sqlite.store import SqliteMetadataStore, WalInspection, inspect_wal

__all__ = ["SqliteMetadataStore", "WalInspection", "inspect_wal"]
