"""Remote storage: the object key layout, the S3 RemoteStorageManager, the RLMM, inventory and the Spark scan."""

from orchestrator.lean_imports import import_structlog

import_structlog()  # before any module of ours imports it (see orchestrator.lean_imports)
