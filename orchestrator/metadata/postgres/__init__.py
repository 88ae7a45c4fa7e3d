"""A metadata store backend on PostgreSQL, for processes that share a database server rather than a file
(see :mod:`.store`)."""

from orchestrator.metadata.postgres.connection import SessionTimeouts, masked_dsn
from orchestrator.metadata.postgres.store import DEFAULT_SCHEMA, PostgresMetadataStore

__all__ = ["DEFAULT_SCHEMA", "PostgresMetadataStore", "SessionTimeouts", "masked_dsn"]
