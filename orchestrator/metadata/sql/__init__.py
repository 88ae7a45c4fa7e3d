"""The one SQL core every SQL backend of the metadata store shares (:mod:`.store`), the dialect adapter each
engine implements (:mod:`.dialect`) and the row-level reads and repairs (:mod:`.tables`)."""

from orchestrator.metadata.sql.dialect import FileFindings, Polling, SqlDialect, Statements, statements
from orchestrator.metadata.sql.store import SqlMetadataStore

__all__ = ["FileFindings", "Polling", "SqlDialect", "SqlMetadataStore", "Statements", "statements"]
