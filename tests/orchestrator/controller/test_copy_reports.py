"""The controller's side of the brokers' copy reports (ReportCopyStates): what DescribeTieredState's ``copies`` shows
of a tiered topic whose upload is in flight, stalled or failing, and whose word counts."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import StaleBrokerEpoch
from tests.orchestrator.controller.test_core import CoreHarness

pytestmark = pytest.mark.unit

TIERED = [{"name": "remote.storage.enable", "value": "true"}]
SINCE = 1_700_000_000_000
UPLOAD = "upload of segment 0-99 of clicks-0 to s3://tiered-storage/tiered/clicks-x/0/00000000000000000000-y.log"


def _state(topic_id: Any, partition: int, **fields: Any) -> dict[str, Any]:
    base = {
        "topic_id": topic_id,
        "partition": partition,
        "in_flight_since_ms": -1,
        "in_flight": None,
        "stalled": False,
        "last_error": None,
        "last_error_ms": -1,
        "failed_passes": 0,
    }
    return base | fields


def _report(c: CoreHarness, broker_id: int, states: list[dict[str, Any]], epoch: int | None = None) -> Any:
    body = {"broker_id": broker_id, "broker_epoch": c.epochs[broker_id] if epoch is None else epoch}
    return c.core.report_copy_states({**body, "copy_states": states})


def _copies(c: CoreHarness, name: str) -> list[dict[str, Any]]:
    [topic] = c.core.describe_tiered_state({"topics": [name]})["topics"]
    return list(topic["copies"])


def _leader(c: CoreHarness, name: str, partition: int) -> int:
    leader: int = c.topic(name).partitions[partition].leader
    return leader


def test_a_stalled_upload_and_a_failing_pass_reported_by_a_partitions_leader_show_in_the_topics_status() -> None:
    c = CoreHarness()
    c.create("clicks", num_partitions=2, replication_factor=1, configs=TIERED)
    tid = c.topic("clicks").topic_id
    assert _copies(c, "clicks") == [], "nothing reported: every copy keeps up"
    stuck = _state(tid, 0, in_flight_since_ms=SINCE, in_flight=UPLOAD, stalled=True)
    failing = _state(tid, 1, last_error="RemoteStorageError: Read timeout", last_error_ms=SINCE + 5, failed_passes=3)
    assert _report(c, _leader(c, "clicks", 0), [stuck])["error_code"] == 0
    assert _report(c, _leader(c, "clicks", 1), [failing])["error_code"] == 0

    copies = _copies(c, "clicks")
    assert [(x["partition_id"], x["broker_id"]) for x in copies] == [
        (0, _leader(c, "clicks", 0)),
        (1, _leader(c, "clicks", 1)),
    ]
    assert (copies[0]["in_flight_since_ms"], copies[0]["in_flight"], copies[0]["stalled"]) == (SINCE, UPLOAD, True)
    assert (copies[1]["last_error"], copies[1]["failed_passes"]) == ("RemoteStorageError: Read timeout", 3)


def test_a_brokers_next_report_replaces_its_last_and_an_empty_one_clears_it() -> None:
    c = CoreHarness()
    c.create("clicks", num_partitions=1, replication_factor=1, configs=TIERED)
    tid, leader = c.topic("clicks").topic_id, _leader(c, "clicks", 0)
    _report(c, leader, [_state(tid, 0, in_flight_since_ms=SINCE, in_flight=UPLOAD)])
    assert len(_copies(c, "clicks")) == 1
    _report(c, leader, [])
    assert _copies(c, "clicks") == []


def test_only_the_current_unfenced_leaders_report_counts_and_a_stale_incarnation_is_refused() -> None:
    c = CoreHarness()
    c.create("clicks", num_partitions=1, replication_factor=1, configs=TIERED)
    tid, leader = c.topic("clicks").topic_id, _leader(c, "clicks", 0)
    other = next(b for b in (1, 2, 3) if b != leader)
    _report(c, other, [_state(tid, 0, in_flight_since_ms=SINCE, in_flight=UPLOAD)])
    assert _copies(c, "clicks") == [], "a broker that does not lead the partition is not its copier"

    refused = _report(c, leader, [_state(tid, 0, in_flight_since_ms=SINCE)], epoch=c.epochs[leader] + 1000)
    assert refused["error_code"] == StaleBrokerEpoch.code and _copies(c, "clicks") == []

    _report(c, leader, [_state(tid, 0, in_flight_since_ms=SINCE, in_flight=UPLOAD)])
    assert len(_copies(c, "clicks")) == 1
    c.heartbeat(leader, want_fence=True)  # fenced: its last word is no longer the partition's state
    assert _copies(c, "clicks") == []
