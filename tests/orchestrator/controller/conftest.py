"""Fixtures of the controller's tests on real processes: moto behind a TCP gate, so a test can take S3 away (the
gate resets every connection while shut) and give it back with every object still there."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlparse

import pytest

from tests.support.live_cluster import LiveCluster
from tests.support.tcp_gate import TcpGate


@pytest.fixture
def gate(moto_endpoint: str) -> Iterator[TcpGate]:
    target = urlparse(moto_endpoint)
    assert target.hostname is not None and target.port is not None
    g = TcpGate(target.hostname, target.port)
    try:
        yield g
    finally:
        g.close()


@pytest.fixture
def live(tmp_path, gate: TcpGate, bucket: str) -> Iterator[LiveCluster]:  # type: ignore[no-untyped-def]
    """Three brokers and one controller whose S3 is moto behind ``gate``."""
    cluster = LiveCluster(tmp_path / "cluster", brokers=3, controllers=1, s3_endpoint=gate.url, bucket=bucket)
    try:
        yield cluster
    finally:
        cluster.close()
