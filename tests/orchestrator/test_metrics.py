"""orchestrator.metrics: the gauges a view turns into, the event metrics, one registry per process, the endpoint."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from orchestrator.local.certificates import IssuedCertificate, issue_local_certificates
from orchestrator.metrics import (
    BrokerMetrics,
    BrokerView,
    ControllerMetrics,
    ControllerView,
    CopyLag,
    DisablementQueueView,
    MetadataView,
    MetricsEndpoint,
)
from orchestrator.net.tls import metrics_ssl_context
from orchestrator.settings import MetricsSettings

STATES = {"NOT_TIERED": 1, "ENABLED": 2, "DISABLING": 1, "DISABLED": 0}


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _active_view(log_end: int | None = 12) -> ControllerView:
    queue = DisablementQueueView(topics=1, pending_acks=2, stalled_acks=1, oldest_age_s=90.5, remote_deletion_topics=3)
    return ControllerView(
        metadata=MetadataView(image_offset=9, log_end_offset=log_end),
        active=True,
        controller_epoch=4,
        topics_by_state=STATES,
        broker_fenced={1: False, 2: True},
        queue=queue,
    )


@pytest.mark.unit
def test_the_controller_gauges_are_read_from_its_view_at_every_scrape() -> None:
    views = [_active_view()]
    metrics = ControllerMetrics()
    metrics.observe(lambda: views[-1])
    got = _samples(metrics.registry)
    assert got[("tieredctl_controller_active", ())] == 1
    assert got[("tieredctl_controller_epoch", ())] == 4
    assert {k[1][0][1]: v for k, v in got.items() if k[0] == "tieredctl_topics"} == STATES
    assert got[("tieredctl_broker_fenced", (("broker_id", "2"),))] == 1
    assert got[("tieredctl_broker_fenced", (("broker_id", "1"),))] == 0
    assert got[("tieredctl_disablement_queue_topics", ())] == 1
    assert got[("tieredctl_disablement_pending_acks", ())] == 2
    assert got[("tieredctl_disablement_stalled_acks", ())] == 1
    assert got[("tieredctl_disablement_oldest_age_seconds", ())] == 90.5
    assert got[("tieredctl_remote_deletion_queue_topics", ())] == 3
    assert got[("tieredctl_metadata_image_offset", ())] == 9
    assert got[("tieredctl_metadata_log_end_offset", ())] == 12
    assert got[("tieredctl_metadata_follower_lag_records", ())] == 2
    standby = ControllerView(
        metadata=MetadataView(image_offset=5, log_end_offset=None),
        active=False,
        controller_epoch=None,
        topics_by_state=STATES,
        broker_fenced={},
        queue=None,
    )
    views.append(standby)
    got = _samples(metrics.registry)
    assert got[("tieredctl_controller_active", ())] == 0
    unknown_to_a_standby = ("controller_epoch", "disablement_pending_acks", "metadata_log_end_offset")
    absent = {f"tieredctl_{name}" for name in (*unknown_to_a_standby, "metadata_follower_lag_records")}
    assert not any(name in absent for name, _ in got), "no value is better than a made-up one"


@pytest.mark.unit
def test_a_view_that_fails_leaves_its_gauges_out_and_the_event_metrics_are_still_served() -> None:
    metrics = ControllerMetrics()

    def broken() -> ControllerView:
        raise RuntimeError("store gone")

    metrics.observe(broken)
    metrics.disable_exchange_done(1, 1, ["acknowledged"], 0.02)
    with capture_logs() as logs:
        got = _samples(metrics.registry)
    assert got[("tieredctl_disable_remote_topic_requests_total", (("result", "acknowledged"),))] == 1
    assert ("tieredctl_controller_active", ()) not in got
    assert [e["event"] for e in logs] == ["metrics.view_failed"] and logs[0]["detail"] == "store gone"


@pytest.mark.unit
def test_event_metrics_count_by_label_and_two_processes_in_one_interpreter_do_not_share_them() -> None:
    first, second = ControllerMetrics(), ControllerMetrics()
    first.disable_exchange_done(1, 1, ["acknowledged", "in_progress"], 0.004)  # one exchange, two topics
    first.disable_exchange_done(0, 2, ["timeout", "timeout"], 10.0)  # two version 0 exchanges
    first.disablement_completed("delete", 95.0)
    first.disablement_completed("retain", -1.0)  # a clock step back is not a negative duration
    got = _samples(first.registry)
    requests = {k[1][0][1]: v for k, v in got.items() if k[0] == "tieredctl_disable_remote_topic_requests_total"}
    assert requests == {"acknowledged": 1, "in_progress": 1, "timeout": 2}
    exchanges = {k[1][0][1]: v for k, v in got.items() if k[0] == "tieredctl_disable_remote_topic_exchanges_total"}
    assert exchanges == {"1": 1, "0": 2}
    assert got[("tieredctl_disable_remote_topic_request_duration_seconds_count", ())] == 3
    assert got[("tieredctl_disablement_duration_seconds_sum", (("policy", "delete"),))] == 95.0
    assert got[("tieredctl_disablement_duration_seconds_bucket", (("le", "60.0"), ("policy", "delete")))] == 0
    assert got[("tieredctl_disablement_duration_seconds_bucket", (("le", "300.0"), ("policy", "delete")))] == 1
    assert got[("tieredctl_disablement_duration_seconds_sum", (("policy", "retain"),))] == 0
    assert not any(k[0] == "tieredctl_disable_remote_topic_requests_total" for k in _samples(second.registry))


@pytest.mark.unit
def test_the_broker_shows_copy_lag_per_partition_and_counts_s3_requests_and_deletions() -> None:
    metrics = BrokerMetrics()
    lag = (CopyLag("orders", 1, 2, 8192), CopyLag("orders", 0, 0, 0))
    metrics.observe(lambda: BrokerView(MetadataView(image_offset=3, log_end_offset=3), lag))
    storage = metrics.remote_storage
    storage.request_done("PutObject", 0.01)
    storage.request_done("GetObject", 0.02, error_code="NoSuchKey")
    storage.objects_deleted.inc(6)
    storage.segments_removed(2, 8192)
    got = _samples(metrics.registry)
    assert got[("tieredctl_remote_copy_lag_segments", (("partition", "1"), ("topic", "orders")))] == 2
    assert got[("tieredctl_remote_copy_lag_bytes", (("partition", "1"), ("topic", "orders")))] == 8192
    assert got[("tieredctl_remote_copy_lag_bytes", (("partition", "0"), ("topic", "orders")))] == 0
    assert got[("tieredctl_metadata_follower_lag_records", ())] == 0, "a log end of 3 means offsets 0..2: caught up"
    assert got[("tieredctl_s3_request_duration_seconds_count", (("operation", "PutObject"),))] == 1
    assert got[("tieredctl_s3_request_errors_total", (("code", "NoSuchKey"), ("operation", "GetObject")))] == 1
    assert ("tieredctl_s3_request_errors_total", (("code", "NoSuchKey"), ("operation", "PutObject"))) not in got
    assert got[("tieredctl_remote_objects_deleted_total", ())] == 6
    assert got[("tieredctl_remote_segments_deleted_total", ())] == 2
    assert got[("tieredctl_remote_bytes_deleted_total", ())] == 8192


@pytest.mark.unit
def test_the_broker_shows_its_remote_log_metadata_publishing_lag_per_partition_it_leads() -> None:
    metrics = BrokerMetrics()
    lag: dict[int, int] = {}
    metrics.observe_rlmm_lag(lambda: lag)
    assert [k for k in _samples(metrics.registry) if k[0] == "tieredctl_remote_log_metadata_records_lag"] == []
    lag.update({7: 0, 12: 5})
    samples = _samples(metrics.registry)
    name = "tieredctl_remote_log_metadata_records_lag"
    assert samples[(name, (("partition", "7"), ("topic", "__remote_log_metadata")))] == 0
    assert samples[(name, (("partition", "12"), ("topic", "__remote_log_metadata")))] == 5


@pytest.mark.unit
def test_the_follower_lag_is_never_negative_and_unknown_without_a_log_end() -> None:
    assert MetadataView(image_offset=10, log_end_offset=5).follower_lag_records == 0
    assert MetadataView(image_offset=-1, log_end_offset=4).follower_lag_records == 4
    assert MetadataView(image_offset=3, log_end_offset=None).follower_lag_records is None


@pytest.mark.integration
def test_the_endpoint_serves_the_registry_on_loopback_and_frees_its_port_when_closed() -> None:
    metrics = ControllerMetrics()
    metrics.observe(_active_view)
    endpoint = MetricsEndpoint.start(metrics.registry, host="127.0.0.1", port=0)
    try:
        assert endpoint.host == "127.0.0.1" and endpoint.port > 0
        assert endpoint.url == f"http://127.0.0.1:{endpoint.port}/metrics"
        with urllib.request.urlopen(endpoint.url, timeout=5) as response:
            body = response.read().decode()
        assert "tieredctl_controller_active 1.0" in body
    finally:
        endpoint.close()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", endpoint.port)) != 0


@pytest.mark.integration
def test_with_client_certificates_the_endpoint_serves_only_https_scrapes_that_present_one(tmp_path: Path) -> None:
    issued = issue_local_certificates(tmp_path / "tls", ["broker-1", "admin"])
    other_ca = issue_local_certificates(tmp_path / "other", ["admin"])["admin"]
    server = issued["broker-1"]
    settings = MetricsSettings(
        certfile=str(server.certfile), keyfile=str(server.keyfile), client_cafile=str(server.cafile)
    )
    metrics = ControllerMetrics()
    metrics.observe(_active_view)
    endpoint = MetricsEndpoint.start(
        metrics.registry, host="127.0.0.1", port=0, ssl_context=metrics_ssl_context(settings)
    )
    silent = socket.create_connection(("127.0.0.1", endpoint.port))  # connects, never speaks: holds up no one

    def scrape(url: str, client: ssl.SSLContext | None) -> str:
        with urllib.request.urlopen(url, timeout=5, context=client) as response:
            return str(response.read().decode())

    def client(cert: IssuedCertificate | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(server.cafile))
        if cert is not None:
            context.load_cert_chain(str(cert.certfile), str(cert.keyfile))
        return context

    try:
        assert endpoint.url == f"https://127.0.0.1:{endpoint.port}/metrics"
        assert "tieredctl_controller_active 1.0" in scrape(endpoint.url, client(issued["admin"]))
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):  # no client certificate
            scrape(endpoint.url, client(None))
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):  # one of another CA
            scrape(endpoint.url, client(other_ca))
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP: dropped in the handshake
            scrape(f"http://127.0.0.1:{endpoint.port}/metrics", None)
        assert "tieredctl_controller_active 1.0" in scrape(endpoint.url, client(issued["admin"]))
    finally:
        silent.close()
        endpoint.close()


@pytest.mark.unit
def test_the_broker_shows_its_under_replicated_partitions_and_counts_isr_shrinks_and_expands() -> None:
    from orchestrator.broker.metrics_view import broker_view
    from orchestrator.ids import Uuid
    from orchestrator.metadata.image import MetadataImage, PartitionImage, TopicImage

    tid = Uuid.random()
    parts = {
        0: PartitionImage(0, (1, 2, 3), (1, 2), leader=1, leader_epoch=0, partition_epoch=1),  # under-replicated
        1: PartitionImage(1, (1, 2, 3), (1, 2, 3), leader=1, leader_epoch=0, partition_epoch=0),
        2: PartitionImage(2, (2, 1, 3), (2,), leader=2, leader_epoch=0, partition_epoch=2),  # led elsewhere
    }
    image = MetadataImage(topics={tid: TopicImage(tid, "r", parts)})
    metrics = BrokerMetrics()
    metrics.observe(lambda: broker_view(image, broker_id=1, copy_lag={}, log_end_offset=None))
    metrics.replication.changed(2, 0)
    metrics.replication.changed(0, 1)
    got = _samples(metrics.registry)
    assert got[("tieredctl_under_replicated_partitions", ())] == 1
    assert got[("tieredctl_isr_shrinks_total", ())] == 2
    assert got[("tieredctl_isr_expands_total", ())] == 1
