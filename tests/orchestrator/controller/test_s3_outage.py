"""An S3 outage during a delete-policy disable, on real processes: the operator sees why, retries back off, and the
disable finishes once S3 is back.

The cluster's S3 is moto's server behind a :class:`~tests.support.tcp_gate.TcpGate`: shutting the gate resets
every connection to it (an endpoint gone away) while moto keeps the objects, so once it opens again the test can
check that they were really deleted. Assertions are on counts (attempt numbers, consecutive attempts without
progress) and on the controller's own next-attempt times, never on how long the test waited.

The cluster's retry backoff is capped at 2 s instead of the default 30 s: the windows still grow well past the
re-poll interval before the cap (200, 400, 800, 1600 ms, then 2 s), so a fixed re-poll is still told apart from a
backoff; the cap is reached within the six attempts, so the bound on each next attempt now checks it (with the
30 s default it was never reached); and once S3 is back the next attempt is at most 2 s away instead of up to 30 s.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest

from orchestrator.client import BrokerProgressView
from orchestrator.errors import KafkaStorageError
from orchestrator.metadata.records import SegmentState, TieredState
from remote_storage.keys import topic_prefix
from tests.support.live_cluster import FAST_CONTROLLER, S3_OUTAGE_TIMINGS, LiveCluster, bucket_keys, wait_until
from tests.support.tcp_gate import TcpGate

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPOLL_MS = FAST_CONTROLLER["disablement"]["repoll_ms"]
CAP_MS = FAST_CONTROLLER["disablement"]["retry_backoff_max_ms"]  # the retry backoff's cap (the default is 30 s)
# An attempt's time is when it was sent; its backoff runs from its answer, which comes within the request timeout
# (or the attempt fails then): so the next attempt is at most this long after the last one.
REQUEST_TIMEOUT_MS = FAST_CONTROLLER["disablement"]["request_timeout_ms"]
CAUSE = re.compile(r"could not be deleted from bucket \S+: (ConnectionClosedError|EndpointConnectionError): \S")


@pytest.fixture
def live(tmp_path, gate: TcpGate, bucket: str) -> Iterator[LiveCluster]:  # type: ignore[no-untyped-def]
    """Three brokers and one controller whose S3 is moto behind ``gate``, their retry backoff capped at CAP_MS."""
    cluster = LiveCluster(
        tmp_path / "cluster",
        brokers=3,
        controllers=1,
        s3_endpoint=gate.url,
        bucket=bucket,
        broker_overrides=S3_OUTAGE_TIMINGS,
    )
    try:
        yield cluster
    finally:
        cluster.close()


def _tieredctl(live: LiveCluster, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "orchestrator.cli", "--bootstrap-server", live.bootstrap, *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_an_s3_outage_shows_each_brokers_error_and_next_attempt_backs_off_and_the_disable_finishes_after(
    live: LiveCluster, gate: TcpGate, s3_client, bucket: str
) -> None:
    configs = {"remote.storage.enable": "true", "local.retention.ms": "0"}
    tid = live.call(lambda c: c.create_topic("orders", partitions=3, configs=configs))

    async def produce(c):  # type: ignore[no-untyped-def]
        for p in range(3):
            await c.produce("orders", [b"v" * 200 for _ in range(100)], partition=p)

    live.call(produce)
    live.wait_tiering_settled(tid, 3)
    prefix = topic_prefix(live.state.prefix, "orders", tid)
    assert bucket_keys(s3_client, bucket, prefix), "segments were tiered"
    leaders = {p["leader_id"] for p in live.call(lambda c: c.topic("orders"))["partitions"]}

    gate.shut()
    live.call(lambda c: c.disable_tiering("orders", "delete"))

    # Every broker with something to delete fails, over and over: watch the status until each has failed (or made
    # no progress) six times in a row, collecting what it said about every attempt it saw.
    seen: dict[int, dict[int, BrokerProgressView]] = {}  # broker -> attempt -> its entry then

    def every_broker_backed_off_six_times() -> bool:
        st = live.status("orders")
        assert st.state == TieredState.DISABLING
        for p in st.pending_brokers:
            seen.setdefault(p.broker_id, {})[p.attempts] = p
        latest = {p.broker_id: p for p in st.pending_brokers}
        return latest.keys() == leaders and all(
            p.attempts_without_progress >= 6 and p.last_error for p in latest.values()
        )

    wait_until("every pending broker to back off six times", every_broker_backed_off_six_times, 120, 0.2)
    assert gate.refused > 0, "the brokers did try S3"

    for broker_id in leaders:
        attempts = seen[broker_id]
        last = attempts[max(attempts)]
        assert last.last_error is not None and last.last_error.startswith(f"{KafkaStorageError.name}: "), last
        assert CAUSE.search(last.last_error), f"the S3 error's class and text: {last.last_error}"
        assert "orders-" in last.last_error
        # Only the first answer (the job accepted) was progress: every attempt after it was a backed-off one.
        assert last.attempts <= last.attempts_without_progress + 2, last
        for p in attempts.values():
            if p.attempts and p.next_attempt_ms >= 0:  # never asked yet, or (-1) a request in flight
                assert 0 < p.next_attempt_ms - p.last_attempt_ms <= REQUEST_TIMEOUT_MS + CAP_MS, p
    # The windows grow: some wait after the fourth attempt without progress is well beyond the re-poll interval
    # (a fixed 100 ms re-poll, as before, would never be).
    late_gaps = [
        p.next_attempt_ms - p.last_attempt_ms
        for attempts in seen.values()
        for p in attempts.values()
        if p.attempts_without_progress >= 4 and p.next_attempt_ms >= 0
    ]
    assert late_gaps and max(late_gaps) > 4 * REPOLL_MS, late_gaps

    # The operator's view, text and JSON: the error with its cause and when the broker is asked next.
    doc = json.loads(_tieredctl(live, "--output", "json", "tiering", "status", "orders").stdout)[0]
    assert {p["broker_id"] for p in doc["pending_brokers"]} == leaders
    for p in doc["pending_brokers"]:
        assert p["last_error"].startswith("KAFKA_STORAGE_ERROR: ") and CAUSE.search(p["last_error"]), p
        assert {"next_attempt_ms", "attempts_without_progress"} <= p.keys() and p["attempts_without_progress"] >= 6
    text = _tieredctl(live, "tiering", "status", "orders").stdout
    assert "last error: KAFKA_STORAGE_ERROR: " in text and ("next attempt" in text or "in flight" in text), text

    gate.open()
    final = wait_until(
        "DISABLED once S3 is back", lambda: (s := live.status("orders")).state == TieredState.DISABLED and s, 120
    )
    assert final.pending_brokers == () and final.acknowledged_brokers == len(leaders)
    assert bucket_keys(s3_client, bucket, prefix) == [], "the objects are really gone, not just forgotten"
    segments = live.segments(tid)
    assert segments and all(states[-1] == SegmentState.DELETE_SEGMENT_FINISHED for states in segments.values())
    assert final.segments_deleted == len(segments)
