"""What the controller's metrics show: its view of the image and queues, the result of each DisableRemoteTopic
exchange, and the duration of each disablement the core completes (fake clock, in-memory store)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.controller import retry_queue as rq
from orchestrator.controller.core import ControllerCore
from orchestrator.controller.metrics_view import controller_view, disable_result, queue_view
from orchestrator.errors import BrokerNotAvailable, KafkaStorageError, RequestTimedOut, error_name
from orchestrator.ids import Uuid
from orchestrator.metadata.memory_store import InMemoryMetadataStore
from orchestrator.metadata.records import TieredState
from orchestrator.metrics import ControllerMetrics
from orchestrator.settings import BrokerMembership, DisablementSettings

pytestmark = pytest.mark.unit

STALL_MS = 5_000


class Cluster:
    """A core holding the lease over an in-memory store, three registered brokers, a fake clock, metrics."""

    def __init__(self) -> None:
        self.clock = 1_000_000
        self.store = InMemoryMetadataStore()
        self.metrics = ControllerMetrics()
        lease = self.store.acquire_lease(holder="c1", now_ms=self.clock, ttl_ms=1)
        assert lease is not None
        self.core = ControllerCore(
            self.store,
            holder=lease.holder,
            controller_epoch=lease.controller_epoch,
            now_ms=lambda: self.clock,
            rng=random.Random(1),
            membership=BrokerMembership(session_timeout_ms=1_000),
            disablement=DisablementSettings(stall_threshold_ms=STALL_MS),
            metrics=self.metrics,
        )
        for b in (1, 2, 3):
            listener = {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9000 + b, "security_protocol": 0}
            registration = {
                "broker_id": b,
                "cluster_id": "tieredctl",
                "incarnation_id": Uuid.random(random.Random(b).randbytes),
                "listeners": [listener],
                "rack": None,
            }
            epoch = self.core.broker_registration(registration)["broker_epoch"]
            offset = self.store.end_offset() - 1
            self.core.broker_heartbeat({"broker_id": b, "broker_epoch": epoch, "current_metadata_offset": offset})

    def create_tiered(self, name: str) -> None:
        configs = [{"name": "remote.storage.enable", "value": "true"}]
        topic = {"name": name, "num_partitions": 3, "replication_factor": 1, "assignments": [], "configs": configs}
        assert self.core.create_topics({"topics": [topic]}, 7)["topics"][0]["error_code"] == 0

    def disable(self, name: str) -> None:
        ops = [{"name": "remote.storage.enable", "config_operation": 0, "value": "false"}]
        body = {"resources": [{"resource_type": 2, "resource_name": name, "configs": ops}], "validate_only": False}
        assert self.core.incremental_alter_configs(body, 1)["responses"][0]["error_code"] == 0

    def view(self) -> Any:
        queues = queue_view(self.core.queue, self.core.deletion_queue, now_ms=self.clock, stall_threshold_ms=STALL_MS)
        image = self.core.image
        return controller_view(image, queues=queues, controller_epoch=1, log_end_offset=self.store.end_offset())

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = generate_latest(self.metrics.registry).decode()
        families = text_string_to_metric_families(text)
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_the_view_counts_topics_per_state_the_queue_and_its_oldest_disablement() -> None:
    c = Cluster()
    c.create_tiered("orders")
    c.create_tiered("payments")
    view = c.view()
    assert view.topics_by_state == {"NOT_TIERED": 0, "ENABLED": 2, "DISABLING": 0, "DISABLED": 0}
    assert view.active and view.queue is not None and view.queue.topics == 0 and view.queue.oldest_age_s == 0
    assert view.broker_fenced == {1: False, 2: False, 3: False}
    assert view.metadata.follower_lag_records == 0
    c.disable("orders")
    c.clock += STALL_MS
    view = c.view()
    assert view.topics_by_state["DISABLING"] == 1 and view.topics_by_state["ENABLED"] == 1
    assert view.queue is not None
    assert (view.queue.topics, view.queue.pending_acks, view.queue.stalled_acks) == (1, 3, 3)
    assert view.queue.oldest_age_s == STALL_MS / 1000


def test_a_standby_shows_the_image_and_no_queue() -> None:
    c = Cluster()
    c.create_tiered("orders")
    view = controller_view(c.core.image, queues=None, controller_epoch=None, log_end_offset=None)
    assert not view.active and view.queue is None and view.topics_by_state["ENABLED"] == 1
    assert view.metadata.follower_lag_records is None


def test_each_completed_disablement_is_one_duration_from_when_the_queue_took_it_in() -> None:
    c = Cluster()
    c.create_tiered("orders")
    c.disable("orders")
    sent = c.core.due_disable_requests()
    c.clock += 90_000
    for broker_id, body in sent:
        c.core.on_disable_response(broker_id, body, {"error_code": 0, "status": 0}, None)
    topic = c.core.image.topic_by_name("orders")
    assert topic is not None and topic.tiered_state == TieredState.DISABLED
    got = c.samples()
    assert got[("tieredctl_disablement_duration_seconds_count", (("policy", "retain"),))] == 1
    assert got[("tieredctl_disablement_duration_seconds_sum", (("policy", "retain"),))] == 90.0
    assert c.view().queue.topics == 0  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("response", "error", "result"),
    [
        ({"error_code": 0, "status": 0}, None, "acknowledged"),
        ({"error_code": 0, "status": 1}, None, "in_progress"),
        (None, None, "timeout"),
        (None, RequestTimedOut("no answer within 10s"), "timeout"),
        (None, BrokerNotAvailable("broker 2 has no endpoint"), "BROKER_NOT_AVAILABLE"),
        ({"error_code": 10951, "error_message": "stale"}, None, "STALE_TIERED_EPOCH"),
        (None, KafkaStorageError("disk"), "KAFKA_STORAGE_ERROR"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_each_disable_remote_topic_exchange_gets_one_result_label(
    response: dict[str, Any] | None, error: Exception | None, result: str
) -> None:
    assert disable_result(response, error) == result  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "response",
    [
        {},
        {"error_code": 0},
        {"error_code": 0, "status": 0},
        {"error_code": 0, "status": 1},
        {"status": 1},
        {"error_code": 10951, "status": 1},
        {"error_code": 7, "error_message": "no answer"},
    ],
)
def test_a_reply_is_labelled_as_the_queue_reads_its_outcome(response: dict[str, Any]) -> None:
    """Replies are labelled without building the queue's outcome (thousands per batched exchange): the label must be
    the one the outcome gives."""
    outcome = rq.read_outcome(response, None)  # type: ignore[arg-type]
    expected = (
        "in_progress"
        if outcome.in_progress
        else "acknowledged"
        if outcome.ok
        else "timeout"
        if outcome.error_code == RequestTimedOut.code
        else error_name(outcome.error_code)
    )
    assert disable_result(response, None) == expected  # type: ignore[arg-type]
