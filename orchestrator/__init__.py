"""tieredctl: the complete KIP-950 tiered storage disablement design, for Kafka-style tiered storage on S3.

Packages: ``orchestrator`` (ids, protocol, metadata, controller, broker, CLI), ``remote_storage`` (object key
layout, S3 RemoteStorageManager, RLMM, inventory, the Spark scan) and ``policies`` (pure planners plus thin
executors for retain, delete, retention expiry and orphan reclaim).
"""

from orchestrator.lean_imports import import_structlog

__version__ = "0.1.0"

import_structlog()  # before any module of ours imports it (see orchestrator.lean_imports)
