"""Prometheus metrics of a live local cluster (separate OS processes, the embedded S3): every controller and broker
serves /metrics on loopback at the URL ``cluster status`` lists; a tiered topic's copies and a delete-policy
disablement move the counters; every metric name deploy/'s alert rules and dashboard use is in the scrape."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from orchestrator.local import cluster as lc
from orchestrator.metadata.records import SegmentState, TieredState
from tests.support.live_cluster import LiveCluster, live_cluster, wait_until
from tests.support.monitoring import exposed_names, referenced_names, sampled_names, samples, scrape, total

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def live(tmp_path):
    with live_cluster(tmp_path / "cluster", brokers=2, controllers=2) as cluster:
        yield cluster


def _urls(live: LiveCluster) -> dict[tuple[str, int], str]:
    """(role, id) -> metrics URL of every controller and broker, as ``cluster status`` lists them."""
    return {(p["role"], p["id"]): p["metrics_url"] for p in lc.status(live.dir)["processes"] if p["role"] != "s3"}


def _brokers(live: LiveCluster, urls: dict[tuple[str, int], str]) -> list[str]:
    return [scrape(url) for (role, _), url in sorted(urls.items()) if role == "broker"]


def _sum(texts: list[str], name: str, **labels: str) -> float:
    return sum(total(text, name, **labels) for text in texts)


def test_every_process_serves_metrics_that_follow_tiering_and_a_delete_disablement(live):
    urls = _urls(live)
    assert len(urls) == 4 and all(url is not None for url in urls.values())
    for url in urls.values():
        parsed = urlparse(url)
        assert (parsed.scheme, parsed.hostname, parsed.path) == ("http", "127.0.0.1", "/metrics")
    active = live.active_controller()
    standby_id = next(i for role, i in urls if role == "controller" and i != active.id)
    controller_url = urls[("controller", active.id)]

    before = scrape(controller_url)
    assert total(before, "tieredctl_controller_active") == 1
    epoch = total(before, "tieredctl_controller_epoch")
    assert epoch >= 1
    assert total(before, "tieredctl_topics", tiered_state="ENABLED") == 0
    assert samples(before, "tieredctl_disable_remote_topic_requests_total") == []
    assert {ls["broker_id"]: v for ls, v in samples(before, "tieredctl_broker_fenced")} == {"1": 0, "2": 0}
    standby = scrape(urls[("controller", standby_id)])
    assert total(standby, "tieredctl_controller_active") == 0
    assert total(standby, "tieredctl_controller_epoch") == epoch, "a standby shows the lease's epoch"
    assert samples(standby, "tieredctl_disablement_queue_topics") == [], "a standby has no queue"

    configs = {"remote.storage.enable": "true", "local.retention.ms": "0"}
    live.call(lambda c: c.create_topic("orders", partitions=2, configs=configs))

    async def produce(c):
        for p in range(2):
            await c.produce("orders", [b"v" * 200 for _ in range(100)], partition=p)

    live.call(produce)
    tid = live.status("orders").topic_id
    live.wait_tiering_settled(tid, 2)
    copied = len(live.segments(tid))

    brokers = _brokers(live, urls)
    assert _sum(brokers, "tieredctl_s3_request_duration_seconds_count", operation="PutObject") >= 3 * copied
    lagging = [ls for text in brokers for ls, _ in samples(text, "tieredctl_remote_copy_lag_segments")]
    assert sorted((ls["topic"], ls["partition"]) for ls in lagging) == [("orders", "0"), ("orders", "1")]
    assert _sum(brokers, "tieredctl_remote_objects_deleted_total") == 0
    tiered = scrape(controller_url)
    assert total(tiered, "tieredctl_topics", tiered_state="ENABLED") == 1

    live.call(lambda c: c.disable_tiering("orders", "delete"))
    wait_until("DISABLED", lambda: live.status("orders").state == TieredState.DISABLED, 60)
    segments = live.segments(tid)
    assert all(states[-1] == SegmentState.DELETE_SEGMENT_FINISHED for states in segments.values())

    after = scrape(controller_url)
    assert total(after, "tieredctl_topics", tiered_state="DISABLED") == 1
    assert total(after, "tieredctl_topics", tiered_state="ENABLED") == 0
    assert total(after, "tieredctl_disable_remote_topic_requests_total", result="acknowledged") >= 2
    assert total(after, "tieredctl_disable_remote_topic_request_duration_seconds_count") >= 2
    assert total(after, "tieredctl_disablement_duration_seconds_count", policy="delete") == 1
    assert total(after, "tieredctl_disablement_queue_topics") == 0
    assert total(after, "tieredctl_disablement_pending_acks") == 0
    assert total(after, "tieredctl_metadata_log_end_offset") > total(before, "tieredctl_metadata_log_end_offset")

    # Each broker exports its publication lag once it leads partitions of __remote_log_metadata, which the
    # controller creates when the brokers have stayed the same for its settle time.
    wait_until(
        "every broker to publish __remote_log_metadata",
        lambda: all(samples(text, "tieredctl_remote_log_metadata_records_lag") for text in _brokers(live, urls)),
        60,
    )
    brokers = _brokers(live, urls)
    assert _sum(brokers, "tieredctl_remote_segments_deleted_total") == len(segments)
    assert _sum(brokers, "tieredctl_remote_objects_deleted_total") >= 3 * len(segments)
    assert _sum(brokers, "tieredctl_remote_bytes_deleted_total") > 0
    assert _sum(brokers, "tieredctl_s3_request_duration_seconds_count", operation="DeleteObjects") >= 1
    assert all(samples(text, "tieredctl_remote_copy_lag_segments") == [] for text in brokers), "no longer tiering"
    for text in brokers:
        (lag,) = samples(text, "tieredctl_metadata_follower_lag_records")
        assert lag[1] >= 0

    # Every name the alert rules and the dashboard use is in the scrape; those about what happened have samples.
    scraped = [after, *brokers]
    exposed = set().union(*(exposed_names(text) for text in scraped))
    assert referenced_names() - exposed == set()
    sampled = set().union(*(sampled_names(text) for text in scraped))
    no_error_and_nothing_tiered = {"tieredctl_s3_request_errors_total", "tieredctl_remote_copy_lag_segments"}
    no_error_and_nothing_tiered.add("tieredctl_remote_copy_lag_bytes")
    assert referenced_names() - sampled <= no_error_and_nothing_tiered
