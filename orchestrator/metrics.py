"""Prometheus metrics of every controller and broker: what they are, and the HTTP endpoint that serves them.

Every metric tieredctl exports is declared here, once, with a stable name prefixed ``tieredctl_``: the alert rules
(``deploy/prometheus/alerts.yml``) and the dashboard (``deploy/grafana/tieredctl.json``) use these names, and a test
checks that each name they use is in a live cluster's scrape. Renaming one is a breaking change.

Two kinds:

* State, as gauges computed at scrape time from a *view* the process hands in (:class:`ControllerView`,
  :class:`BrokerView`): a function that reads the process's immutable image and queues and returns plain numbers.
  Nothing ``set()``s these gauges, so they cannot drift from the state they describe, and a standby or a broker
  shows exactly what it holds. A view that fails is logged (``metrics.view_failed``) and leaves its gauges out of
  that scrape; the event metrics are still served.
* Events, as counters and histograms the code updates where the event happens: :class:`ControllerMetrics`
  (DisableRemoteTopic exchanges, completed disablements), :class:`RemoteStorageMetrics` (S3 requests, deletions),
  :class:`TieringMetrics` (a broker's tiering rounds and the partition passes they ran).

Invariants:
* Each process builds its own :class:`prometheus_client.CollectorRegistry` and passes it (or the metrics objects
  built on it) in; nothing here registers with prometheus_client's global registry, so two processes' objects
  (tests run several in one interpreter) never collide.
* This module knows no process type: views are plain dataclasses (names, counts, offsets), built by the controller
  (:mod:`orchestrator.controller.metrics_view`) and the broker (:mod:`orchestrator.broker.metrics_view`).
* :class:`MetricsEndpoint` serves ``/metrics`` from a daemon thread on the address it is given (loopback unless the
  settings say otherwise: it shows topic names), and :meth:`MetricsEndpoint.close` stops it and frees the port.
  Given a server TLS context (:func:`orchestrator.net.tls.metrics_ssl_context`: the process's certificate and,
  for mutual TLS, the CA whose client certificates it requires) it speaks only HTTPS: a plain-HTTP request or a
  client without a valid certificate is dropped in the handshake and never reaches the registry. Each handshake
  runs in its connection's own thread, bounded by :data:`HANDSHAKE_TIMEOUT_S`, so a client that connects and
  stays silent holds up nobody else's scrape.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections import Counter as _Tally
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

log = structlog.get_logger(__name__)

PREFIX = "tieredctl_"

# DisableRemoteTopic is answered at once (the work runs in the background): milliseconds, seconds when a broker
# is busy or far away; the request timeout (10 s by default) ends the range.
DISABLE_REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A disablement takes from a second (retain, few brokers) to hours (delete, millions of objects).
DISABLEMENT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0)
S3_REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


# -- views: the state a process shows at scrape time ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetadataView:
    """Where this process's image of the metadata log stands."""

    image_offset: int  # the offset of the last record applied to the image (-1: none yet)
    log_end_offset: int | None  # the offset the next record will get, read from the store now (None: unreadable)

    @property
    def follower_lag_records(self) -> int | None:
        if self.log_end_offset is None:
            return None
        return max(0, self.log_end_offset - 1 - self.image_offset)


@dataclass(frozen=True, slots=True)
class DisablementQueueView:
    """The active controller's queues."""

    topics: int  # topics in the disablement queue (DISABLING)
    pending_acks: int  # (topic, broker) acknowledgements still owed
    stalled_acks: int  # of those, owed without progress for the stall threshold or longer
    oldest_age_s: float  # how long the oldest disablement of the queue has been in it (0: empty queue)
    remote_deletion_topics: int  # deleted topics whose remote data is still being deleted


@dataclass(frozen=True, slots=True)
class ControllerView:
    metadata: MetadataView
    active: bool
    controller_epoch: int | None  # active: its own; standby: the lease's as last seen (None: no lease seen yet)
    topics_by_state: Mapping[str, int]  # every tiered state, zeros included
    broker_fenced: Mapping[int, bool]  # every registered broker
    queue: DisablementQueueView | None  # None on a standby: it owes nothing and sends nothing


@dataclass(frozen=True, slots=True)
class CopyLag:
    """Closed local segments of a partition this broker leads that are not in remote storage yet."""

    topic: str
    partition: int
    segments: int
    bytes: int


@dataclass(frozen=True, slots=True)
class BrokerView:
    metadata: MetadataView
    copy_lag: Sequence[CopyLag] = field(default_factory=tuple)
    under_replicated: int = 0  # partitions this broker leads with fewer in-sync replicas than replicas


# -- the metrics ------------------------------------------------------------------------------------------------

V = TypeVar("V")


class _ViewCollector:
    """Gauges computed from a view at each scrape (a prometheus_client custom collector)."""

    def __init__(self, view: Callable[[], V], families: Callable[[V], Iterable[Metric]], role: str) -> None:
        self._view = view
        self._families = families
        self._role = role

    def collect(self) -> Iterator[Metric]:
        try:
            families = list(self._families(self._view()))
        except Exception as exc:  # a scrape must not fail because one view did: the event metrics still go out
            log.warning("metrics.view_failed", role=self._role, error=type(exc).__name__, detail=str(exc))
            return
        yield from families


def _gauge(name: str, documentation: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, documentation, labels=list(labels))


def metadata_families(view: MetadataView) -> list[Metric]:
    image = _gauge("metadata_image_offset", "Offset of the last metadata log record applied to this process's image")
    image.add_metric([], view.image_offset)
    end = _gauge("metadata_log_end_offset", "Offset the next metadata log record will get, as read at this scrape")
    lag = _gauge("metadata_follower_lag_records", "Metadata log records not yet applied to this process's image")
    if view.log_end_offset is not None:
        end.add_metric([], view.log_end_offset)
    if view.follower_lag_records is not None:
        lag.add_metric([], view.follower_lag_records)
    return [image, end, lag]


def controller_families(view: ControllerView) -> list[Metric]:
    active = _gauge("controller_active", "1 if this controller holds the lease and drives the cluster, else 0")
    active.add_metric([], 1 if view.active else 0)
    epoch = _gauge("controller_epoch", "Controller epoch: this controller's when active, else the lease's last seen")
    if view.controller_epoch is not None:
        epoch.add_metric([], view.controller_epoch)
    topics = _gauge("topics", "Topics per tiered storage state", ["tiered_state"])
    for state, count in sorted(view.topics_by_state.items()):
        topics.add_metric([state], count)
    fenced = _gauge("broker_fenced", "1 if the registered broker is fenced, else 0", ["broker_id"])
    for broker_id, is_fenced in sorted(view.broker_fenced.items()):
        fenced.add_metric([str(broker_id)], 1 if is_fenced else 0)
    queue_topics = _gauge("disablement_queue_topics", "Topics being disabled (DISABLING) in the controller's queue")
    pending = _gauge("disablement_pending_acks", "DisableRemoteTopic acknowledgements still owed, per (topic, broker)")
    stalled = _gauge(
        "disablement_stalled_acks", "Owed acknowledgements without progress for the stall threshold or longer"
    )
    oldest = _gauge("disablement_oldest_age_seconds", "Time the oldest disablement of the queue has spent in it")
    deleting = _gauge(
        "remote_deletion_queue_topics", "Deleted topics whose remote data the active controller is still deleting"
    )
    q = view.queue
    if q is not None:
        queue_topics.add_metric([], q.topics)
        pending.add_metric([], q.pending_acks)
        stalled.add_metric([], q.stalled_acks)
        oldest.add_metric([], q.oldest_age_s)
        deleting.add_metric([], q.remote_deletion_topics)
    cluster = [active, epoch, topics, fenced]
    return [*cluster, queue_topics, pending, stalled, oldest, deleting, *metadata_families(view.metadata)]


def broker_families(view: BrokerView) -> list[Metric]:
    labels = ["topic", "partition"]
    segments = _gauge("remote_copy_lag_segments", "Closed local segments not copied to remote storage yet", labels)
    size = _gauge("remote_copy_lag_bytes", "Bytes of closed local segments not copied to remote storage yet", labels)
    for lag in sorted(view.copy_lag, key=lambda c: (c.topic, c.partition)):
        segments.add_metric([lag.topic, str(lag.partition)], lag.segments)
        size.add_metric([lag.topic, str(lag.partition)], lag.bytes)
    under = _gauge(
        "under_replicated_partitions", "Partitions this broker leads with fewer in-sync replicas than replicas", []
    )
    under.add_metric([], view.under_replicated)
    return [segments, size, under, *metadata_families(view.metadata)]


class ReplicationMetrics:
    """ISR changes a leader had the controller make (Kafka's IsrShrinksPerSec and IsrExpandsPerSec, as counts)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.isr_shrinks = Counter(
            PREFIX + "isr_shrinks", "Replicas this broker, as leader, had removed from an ISR", registry=registry
        )
        self.isr_expands = Counter(
            PREFIX + "isr_expands", "Replicas this broker, as leader, had added to an ISR", registry=registry
        )

    def changed(self, removed: int, added: int) -> None:
        self.isr_shrinks.inc(removed)
        self.isr_expands.inc(added)


class TieringMetrics:
    """A broker's tiering rounds, and the partition passes they ran: an idle partition is passed only every few
    rounds, so passes per round fall once its logs are quiet, and a change every partition's pass must act on (a
    bulk enable; not a disable, which leaves nothing to do at once) shows as a round that passed them all."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.rounds = Counter(PREFIX + "tiering_rounds", "Tiering rounds this broker finished", registry=registry)
        self.partitions_passed = Counter(
            PREFIX + "tiering_partition_passes",
            "Partition passes its tiering rounds ran (a leader's: roll, copy, local retention, remote expiry; a "
            "follower's: local retention), failed ones included",
            registry=registry,
        )

    def round_done(self, passed: int) -> None:
        self.rounds.inc()
        self.partitions_passed.inc(passed)


class RemoteStorageMetrics:
    """S3 requests (every HTTP request, retries included) and the remote data deleted."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.request_seconds = Histogram(
            PREFIX + "s3_request_duration_seconds",
            "S3 request latency, by operation (each attempt of a retried call is one request)",
            ["operation"],
            buckets=S3_REQUEST_BUCKETS,
            registry=registry,
        )
        self.request_errors = Counter(
            PREFIX + "s3_request_errors",
            "S3 requests that failed, by operation and S3 error code (or the client's exception name)",
            ["operation", "code"],
            registry=registry,
        )
        self.objects_deleted = Counter(
            PREFIX + "remote_objects_deleted", "Objects deleted from remote storage", registry=registry
        )
        self.segments_deleted = Counter(
            PREFIX + "remote_segments_deleted", "Remote segments deleted (all their objects gone)", registry=registry
        )
        self.bytes_deleted = Counter(
            PREFIX + "remote_bytes_deleted",
            "Bytes of the remote segments deleted (their log size as the RLMM records it)",
            registry=registry,
        )
        self.chunk_cache_hits = Counter(
            PREFIX + "remote_chunk_cache_hits",
            "Remote segment chunks and indexes a fetch found in the broker's chunk cache",
            registry=registry,
        )
        self.chunk_cache_misses = Counter(
            PREFIX + "remote_chunk_cache_misses",
            "Remote segment chunks and indexes a fetch did not find in the chunk cache (read from S3)",
            registry=registry,
        )
        self.chunk_cache_bytes = Gauge(
            PREFIX + "remote_chunk_cache_bytes", "Bytes the broker's chunk cache holds", registry=registry
        )

    def request_done(self, operation: str, seconds: float, *, error_code: str | None = None) -> None:
        self.request_seconds.labels(operation).observe(seconds)
        if error_code is not None:
            self.request_errors.labels(operation, error_code).inc()

    def chunk_cache_lookup(self, *, hit: bool) -> None:
        (self.chunk_cache_hits if hit else self.chunk_cache_misses).inc()

    def segments_removed(self, segments: int, size_bytes: int) -> None:
        self.segments_deleted.inc(segments)
        self.bytes_deleted.inc(size_bytes)


class ControllerMetrics:
    """The controller's event metrics; :meth:`observe` adds the gauges of its state."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.disable_requests = Counter(
            PREFIX + "disable_remote_topic_requests",
            "DisableRemoteTopic answers from brokers, one per topic asked (a version 1 exchange asks many), by "
            "result: acknowledged, in_progress, timeout, or the error name (e.g. BROKER_NOT_AVAILABLE, "
            "STALE_TIERED_EPOCH)",
            ["result"],
            registry=self.registry,
        )
        self.disable_exchanges = Counter(
            PREFIX + "disable_remote_topic_exchanges",
            "DisableRemoteTopic requests sent to brokers, by version (version 1 carries many topics, version 0 one)",
            ["version"],
            registry=self.registry,
        )
        self.disable_request_seconds = Histogram(
            PREFIX + "disable_remote_topic_request_duration_seconds",
            "DisableRemoteTopic round-trip time, per exchange (a timed-out request counts its timeout)",
            buckets=DISABLE_REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.disablement_seconds = Histogram(
            PREFIX + "disablement_duration_seconds",
            "Time from DISABLING to DISABLED, by policy, measured by the controller that completes it from when its "
            "queue took the topic in (the DISABLING append, or its own takeover after a failover)",
            ["policy"],
            buckets=DISABLEMENT_BUCKETS,
            registry=self.registry,
        )

    def disable_exchange_done(self, version: int, exchanges: int, results: list[str], seconds: float) -> None:
        """``exchanges`` DisableRemoteTopic requests at ``version`` answered (or failed) in ``seconds``, with one
        result per topic they asked about."""
        if exchanges:
            self.disable_exchanges.labels(str(version)).inc(exchanges)
        for result, count in _Tally(results).items():
            self.disable_requests.labels(result).inc(count)
        for _ in range(exchanges):
            self.disable_request_seconds.observe(seconds)

    def disablement_completed(self, policy: str, seconds: float) -> None:
        self.disablement_seconds.labels(policy).observe(max(0.0, seconds))

    def observe(self, view: Callable[[], ControllerView]) -> None:
        """Serve the gauges of ``view()`` (called on the scrape's thread: it must only read immutable state)."""
        self.registry.register(_ViewCollector(view, controller_families, "controller"))


RLMM_TOPIC = "__remote_log_metadata"


def rlmm_lag_families(lag: Mapping[int, int]) -> list[Metric]:
    """The publisher's lag: per partition of ``__remote_log_metadata`` this broker leads, the store's RLMM records
    read for it and not yet appended (named after Kafka's consumer ``records-lag``, labelled as it is)."""
    family = _gauge(
        "remote_log_metadata_records_lag",
        "Remote log metadata records in the store not yet published to this partition of __remote_log_metadata, "
        "per partition this broker leads (as of its publisher's last round)",
        ["topic", "partition"],
    )
    for partition, records in sorted(lag.items()):
        family.add_metric([RLMM_TOPIC, str(partition)], records)
    return [family]


class BrokerMetrics:
    """The broker's metrics: remote storage events, and (:meth:`observe`, :meth:`observe_rlmm_lag`) the gauges of
    its state."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.remote_storage = RemoteStorageMetrics(self.registry)
        self.replication = ReplicationMetrics(self.registry)
        self.tiering = TieringMetrics(self.registry)

    def observe(self, view: Callable[[], BrokerView]) -> None:
        self.registry.register(_ViewCollector(view, broker_families, "broker"))

    def observe_rlmm_lag(self, lag: Callable[[], Mapping[int, int]]) -> None:
        """Serve :func:`rlmm_lag_families` of ``lag()`` (partition -> records; read on the scrape's thread)."""
        self.registry.register(_ViewCollector(lag, rlmm_lag_families, "broker"))


# -- the endpoint -----------------------------------------------------------------------------------------------


HANDSHAKE_TIMEOUT_S = 10.0  # a TLS client gets this long to finish its handshake, and then to send each request


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A scrape every few seconds is not news: no access log on stderr."""


class _MetricsServer(ThreadingMixIn, WSGIServer):
    """One thread per connection; with :attr:`ssl_context`, the TLS handshake is done in that thread."""

    daemon_threads = True
    ssl_context: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)  # closes the socket when it fails
        except (ssl.SSLError, OSError) as exc:
            log.debug("metrics.handshake_failed", peer=str(client_address[0]), error=type(exc).__name__)
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            tls.close()


class _MetricsServer6(_MetricsServer):
    address_family = socket.AF_INET6


class MetricsEndpoint:
    """``/metrics`` of one registry over HTTP, or HTTPS with an SSL context, served by a daemon thread until
    :meth:`close`."""

    def __init__(self, server: _MetricsServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.host = str(server.server_address[0])
        self.port = int(server.server_address[1])
        self.tls = server.ssl_context is not None

    @classmethod
    def start(
        cls, registry: CollectorRegistry, *, host: str, port: int, ssl_context: ssl.SSLContext | None = None
    ) -> MetricsEndpoint:
        """Serve ``registry`` on ``host``:``port`` (0: a free port; :attr:`port` is the one bound); over TLS with
        ``ssl_context`` (a server context; one that requires client certificates makes it mutual TLS)."""
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        server_class = _MetricsServer6 if family == socket.AF_INET6 else _MetricsServer
        server = make_server(host, port, make_wsgi_app(registry), server_class, _QuietHandler)
        server.ssl_context = ssl_context
        thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
        thread.start()
        endpoint = cls(server, thread)
        log.info("metrics.serving", host=endpoint.host, port=endpoint.port, tls=endpoint.tls)
        return endpoint

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()  # returns once serve_forever has stopped
        self._server.server_close()
        self._thread.join(timeout=5)
