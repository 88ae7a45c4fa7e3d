"""The scan's own error: inputs it cannot run on. (Errors of the inventory, the export and the object store are
their modules'; a task's error is raised on the driver as itself, see :mod:`remote_storage.scan.job`.)"""

from __future__ import annotations

from orchestrator.errors import ScanInputError


class ScanError(ScanInputError):
    """The scan cannot run on these inputs (missing export file, unreadable inventory data, more manifests to read
    than allowed); the message says which and what to do."""

    name, retriable = "INVALID_SCAN_INPUT", False
