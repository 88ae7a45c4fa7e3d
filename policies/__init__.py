"""Disablement policies (retain, delete), retention expiry and orphan reclaim: pure planners plus thin executors."""

from orchestrator.lean_imports import import_structlog

import_structlog()  # before any module of ours imports it (see orchestrator.lean_imports)
