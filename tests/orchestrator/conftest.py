"""Fixtures shared by the orchestrator's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.local import cluster as lc
from orchestrator.local.state import STATE_FILE


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """A local cluster's directory for the test; a cluster the test left there (it failed part way) is stopped and
    purged, so no process outlives the test."""
    d = tmp_path / "c"
    yield d
    if (d / STATE_FILE).exists():
        lc.down(d, purge=True, timeout_s=20)
