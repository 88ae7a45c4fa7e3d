"""``tieredctl topic produce`` that fails part way, against a real local cluster: it says what was written.

The console script runs as a user runs it (a subprocess); the fault is real: the leader of one partition is killed
with SIGKILL while the produce is going. What the command reports as acknowledged is checked against the log of
the partition whose leader survived.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.live_cluster import LiveCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

REQUESTED = 1_000_000  # far more than is written before the kill: the produce is always cut short
BATCH = 500  # records per request: 50 KB of values, sent as several record batches of at most 16 KiB each


@pytest.fixture
def live(tmp_path) -> Iterator[LiveCluster]:  # type: ignore[no-untyped-def]
    cluster = LiveCluster(tmp_path / "cluster", brokers=2, controllers=1)
    try:
        yield cluster
    finally:
        cluster.close()


def _log_end(live: LiveCluster, partition: int) -> int:
    return live.call(lambda c: c.offsets("orders", partition)).log_end_offset


def test_a_produce_cut_short_says_how_many_records_were_acknowledged_and_where(live: LiveCluster) -> None:
    live.call(lambda c: c.create_topic("orders", partitions=2))
    leaders = {p["partition_index"]: p["leader_id"] for p in live.call(lambda c: c.topic("orders"))["partitions"]}
    assert leaders[0] != leaders[1], f"one partition per broker: {leaders}"

    command = [sys.executable, "-m", "orchestrator.cli", "--output", "json", "--bootstrap-server", live.bootstrap]
    args = ["topic", "produce", "orders", "--records", str(REQUESTED), "--batch", str(BATCH)]
    proc = subprocess.Popen([*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # The command writes its requests one at a time, partition 0 then 1 then 0: once partition 0 holds more
        # than one request's records, the first request to partition 1 was answered in full.
        wait_until("one answered request to partition 1", lambda: _log_end(live, 0) > BATCH, 60)
        live.signal("broker", leaders[1], signal.SIGKILL)  # partition 1's only replica: its produce must fail
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 1, f"stdout: {stdout}\nstderr: {stderr}"

    doc = json.loads(stdout)
    acknowledged = doc["records_per_partition"]
    assert doc["complete"] is False and doc["requested"] == REQUESTED and "error" in doc
    assert 0 < doc["records"] == sum(acknowledged.values()) < REQUESTED
    # Partition 0's leader is alive: its log holds exactly what the command says was acknowledged there (every
    # request to it was answered before the one to partition 1 failed), at the offsets it names.
    end = _log_end(live, 0)
    assert acknowledged["0"] == end and doc["partitions"]["0"] == [0, end - 1]
    # Partition 1 counts every record batch its leader answered, those of the request cut short included.
    first, last = doc["partitions"]["1"]
    assert (first, last - first + 1) == (0, acknowledged["1"]) and acknowledged["1"] >= BATCH

    error = stderr.strip().splitlines()[-1]
    assert re.match(r"error: [A-Z_]+ \(\d+\): ", error), error  # the Kafka error the failed request got
    assert f"{doc['records']} of {REQUESTED} records were acknowledged before this failure" in error
    assert f"partition 0 offsets 0-{end - 1} ({end} records)" in error
    assert f"partition 1 offsets 0-{last} ({acknowledged['1']} records)" in error
    assert f"produce only the remaining {REQUESTED - doc['records']}" in error
