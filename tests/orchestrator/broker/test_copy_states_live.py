"""``tiering status`` while the cluster's S3 hangs, on real processes: the embedded S3 is SIGSTOPped (it accepts
connections in the kernel and never answers), and the status names the upload in flight, stalled past the broker's
threshold, then the error the S3 client's timeouts end it in; once S3 runs again the copies catch up and the status
has nothing more to say. Every wait is a bounded loop on the status, never a sleep: the loops ask through the
client (a CLI process every 0.2 s for the half minute S3's retries take cost more CPU than the rest of the test), and
the CLI's JSON and text are checked once the status has what they must show."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.client.views import PartitionCopyView
from orchestrator.ids import Uuid
from tests.support.live_cluster import FAST_BROKER, LiveCluster, live_cluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BROKER = {
    "broker": {**FAST_BROKER["broker"], "copy_stall_threshold_ms": 1_000},
    "s3": {"connect_timeout_s": 1, "read_timeout_s": 1, "max_attempts": 2},  # a hung upload fails within 2 s
}


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveCluster]:
    with live_cluster(tmp_path / "cluster", brokers=1, controllers=1, broker_overrides=BROKER) as cluster:
        yield cluster


def _status(live: LiveCluster, topic: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "orchestrator.cli", "--bootstrap-server", live.bootstrap, "-o", "json"]
    proc = subprocess.run([*command, "tiering", "status", topic], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    [status] = json.loads(proc.stdout)
    return dict(status)


def _copies(live: LiveCluster, topic: str) -> tuple[PartitionCopyView, ...]:
    [status] = live.call(lambda c: c.tiering_status([topic]))
    return status.copies


def _copy(live: LiveCluster, topic: str, wanted: Callable[[PartitionCopyView], Any]) -> PartitionCopyView | None:
    return next((c for c in _copies(live, topic) if wanted(c)), None)


def test_a_hung_s3_shows_in_tiering_status_as_a_stalled_upload_then_its_error_and_clears_once_s3_answers(
    live: LiveCluster,
) -> None:
    configs = {"remote.storage.enable": "true"}
    tid: Uuid = live.call(lambda c: c.create_topic("orders", partitions=1, configs=configs))
    live.call(lambda c: c.produce("orders", [b"v" * 200 for _ in range(60)], partition=0))
    live.wait_tiering_settled(tid)
    # The broker's copy report rides on its next heartbeat: the controller's view clears within one interval.
    wait_until("the status to show no copy once the copies settled", lambda: _copies(live, "orders") == ())
    assert _status(live, "orders")["copies"] == [], "every copy keeps up"

    s3 = live.process("s3", 0)
    live.signal("s3", 0, signal.SIGSTOP)
    try:
        live.call(lambda c: c.produce("orders", [b"w" * 200 for _ in range(60)], partition=0))
        stalled = wait_until("the upload to show stalled", lambda: _copy(live, "orders", lambda c: c.stalled), 60, 0.2)
        assert stalled.partition == 0 and stalled.broker_id == 1 and stalled.in_flight_since_ms > 0
        assert stalled.in_flight is not None and stalled.in_flight.startswith("upload of segment ")
        assert " of orders-0 to s3://" in stalled.in_flight
        wait_until("the copy pass to fail", lambda: _copy(live, "orders", lambda c: c.last_error), 120, 0.2)
        [failed] = _status(live, "orders")["copies"]  # the error stays until a pass ends without one: S3 is stopped
        assert failed["partition"] == 0 and failed["broker_id"] == 1, failed
        assert failed["failed_passes"] >= 1 and "timeout" in failed["last_error"].lower(), failed
        command = [sys.executable, "-m", "orchestrator.cli", "--bootstrap-server", live.bootstrap]
        text = subprocess.run([*command, "tiering", "status", "orders"], capture_output=True, text=True, timeout=60)
        assert "orders: partition 0 (broker 1) copying: " in text.stdout, text.stdout
    finally:
        assert live.process("s3", 0).pid == s3.pid
        live.signal("s3", 0, signal.SIGCONT)

    wait_until("the copies to catch up", lambda: _copies(live, "orders") == (), 120, 0.5)
    assert _status(live, "orders")["copies"] == []
