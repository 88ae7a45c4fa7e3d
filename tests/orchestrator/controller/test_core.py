"""ControllerCore's request handlers: Kafka-shaped responses, per-topic errors, broker lifecycle and failover."""

from __future__ import annotations

import random
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.admin_api import reads
from orchestrator.controller import retry_queue as rq
from orchestrator.controller.core import ControllerCore
from orchestrator.controller.disablement import STALLS_LOGGED_ONE_BY_ONE
from orchestrator.errors import StaleControllerEpoch
from orchestrator.ids import ZERO_UUID, Uuid
from orchestrator.metadata.memory_store import InMemoryMetadataStore
from orchestrator.metadata.records import DisablePolicy, SegmentState, TieredState
from orchestrator.protocol import codec
from orchestrator.protocol.schema import schema
from orchestrator.settings import BrokerMembership, DisablementSettings, RemoteLogMetadataTopicSettings, TopicDefaults
from remote_storage.rlmm import RemoteLogMetadataManager, RemoteSegment

pytestmark = pytest.mark.unit

MEMBERSHIP = BrokerMembership(session_timeout_ms=1_000)
DISABLEMENT = DisablementSettings(stall_threshold_ms=5_000)
TOPIC_DEFAULTS = TopicDefaults(replication_factor=2)


class CoreHarness:
    """An in-memory store, a fake clock and a core holding the lease; brokers registered and unfenced. A subclass
    that sets ``remote_log_metadata`` gets cores that create ``__remote_log_metadata``."""

    remote_log_metadata: RemoteLogMetadataTopicSettings | None = None

    def __init__(self, brokers: int = 3) -> None:
        self.clock = 1_000_000
        self.store = InMemoryMetadataStore()
        self.generation = 0
        self.registrations = 0
        self.core = self.new_controller()
        self.epochs: dict[int, int] = {}
        self.incarnations: dict[int, Uuid] = {}
        for b in range(1, brokers + 1):
            self.register(b)
            self.heartbeat(b)

    def now(self) -> int:
        return self.clock

    def new_controller(self) -> ControllerCore:
        self.generation += 1
        self.clock += 1
        lease = self.store.acquire_lease(holder=f"c{self.generation}", now_ms=self.clock, ttl_ms=1)
        assert lease is not None
        return ControllerCore(
            self.store,
            holder=lease.holder,
            controller_epoch=lease.controller_epoch,
            now_ms=self.now,
            rng=random.Random(self.generation),
            membership=MEMBERSHIP,
            disablement=DISABLEMENT,
            topic_defaults=TOPIC_DEFAULTS,
            remote_log_metadata=self.remote_log_metadata,
        )

    def register(self, b: int, *, incarnation: Uuid | None = None, cluster_id: str = "tieredctl") -> dict[str, Any]:
        self.registrations += 1
        inc = incarnation or Uuid.random(random.Random(self.registrations).randbytes)
        body = {
            "broker_id": b,
            "cluster_id": cluster_id,
            "incarnation_id": inc,
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9000 + b, "security_protocol": 0}],
            "rack": None,
        }
        response = self.core.broker_registration(body)
        if response["error_code"] == 0:
            self.epochs[b], self.incarnations[b] = response["broker_epoch"], inc
        return response

    def heartbeat(self, b: int, **kw: Any) -> dict[str, Any]:
        body = {"broker_id": b, "broker_epoch": self.epochs[b], "current_metadata_offset": self.store.end_offset() - 1}
        return self.core.broker_heartbeat({**body, **kw})

    def create(self, name: str, *, version: int = 7, **topic: Any) -> dict[str, Any]:
        entry = {"name": name, "num_partitions": -1, "replication_factor": -1, "assignments": [], "configs": []}
        entry.update(topic)
        result: dict[str, Any] = self.core.create_topics({"topics": [entry]}, version)["topics"][0]
        return result

    def alter(self, name: str, changes: dict[str, str], *, validate_only: bool = False) -> dict[str, Any]:
        ops = [{"name": k, "config_operation": 0, "value": v} for k, v in changes.items()]
        body = {
            "resources": [{"resource_type": 2, "resource_name": name, "configs": ops}],
            "validate_only": validate_only,
        }
        result: dict[str, Any] = self.core.incremental_alter_configs(body, 1)["responses"][0]
        return result

    def alter_partition(self, leader: int, name: str, partition: int, new_isr: list[int], **kw: Any) -> dict[str, Any]:
        """AlterPartition (v2) from ``leader`` for one partition, at the partition's current epochs unless ``kw``
        says otherwise; the partition's entry of the response, with the top-level error when there is one."""
        topic = self.topic(name)
        p = topic.partitions[partition]
        entry = {
            "partition_index": partition,
            "leader_epoch": p.leader_epoch,
            "new_isr": new_isr,
            "partition_epoch": p.partition_epoch,
            **kw,
        }
        body = {
            "broker_id": leader,
            "broker_epoch": self.epochs[leader],
            "topics": [{"topic_id": topic.topic_id, "partitions": [entry]}],
        }
        response = self.core.alter_partition(body, 2)
        _encodes("AlterPartitionResponse", 2, response)
        if response["error_code"]:
            return {"error_code": response["error_code"]}
        result: dict[str, Any] = response["topics"][0]["partitions"][0]
        return result

    def topic(self, name: str) -> Any:
        return self.core.image.topic_by_name(name)

    def answer_all(self, response: dict[str, Any] | None = None) -> list[tuple[int, dict[str, Any]]]:
        sent = self.core.due_disable_requests()
        for b, body in sent:
            self.core.on_disable_response(b, body, response or {"error_code": 0, "status": 0}, None)
        return sent


def _describe_configs(c: CoreHarness, body: Any, version: int) -> Any:
    """DescribeConfigs as every node answers it, from the active core's image."""
    return reads.describe_configs(c.core.refresh(), body, version)


def _metadata(c: CoreHarness, body: Any, version: int, *, nodes: Any, controller_id: int) -> Any:
    """Metadata as every node answers it, from the active core's image, naming ``nodes`` and ``controller_id``."""
    view = reads.ClusterView(cluster_id="tieredctl", nodes=nodes, controller_id=controller_id, controllers={})
    return reads.metadata(c.core.refresh(), body, version, view)


def _encodes(name: str, version: int, body: dict[str, Any]) -> None:
    codec.encode(schema(name), version, body)


def test_every_admin_response_encodes_at_every_version_it_is_asked_in() -> None:
    c = CoreHarness()
    c.create("orders", configs=[{"name": "remote.storage.enable", "value": "true"}])
    c.alter("orders", {"remote.storage.enable": "false"})
    for v in range(2, 8):
        created = c.core.create_topics(
            {"topics": [{"name": f"t{v}", "num_partitions": -1, "replication_factor": -1}]}, v
        )
        assert created["topics"][0]["error_code"] == 0
        _encodes("CreateTopicsResponse", v, created)
        _encodes("CreateTopicsResponse", v, c.core.create_topics({"topics": [{"name": "bad name!"}]}, v))
    for v in range(0, 4):
        body: dict[str, Any] = {
            "topics": [{"name": "orders", "count": 3 + v, "assignments": None}, {"name": "nope", "count": 2}]
        }
        _encodes("CreatePartitionsResponse", v, c.core.create_partitions(body, v))
    for v in range(1, 5):
        body = {
            "resources": [{"resource_type": 2, "resource_name": n, "configuration_keys": None} for n in ("orders", "x")]
        }
        _encodes("DescribeConfigsResponse", v, _describe_configs(c, {**body, "include_synonyms": True}, v))
    for v in range(0, 2):
        _encodes("IncrementalAlterConfigsResponse", v, c.core.incremental_alter_configs({"resources": []}, v))
    for v in range(0, 13):
        topics: list[dict[str, Any]] = [{"name": "orders"}, {"name": "missing"}]
        if v >= 10:
            topics.append({"name": None, "topic_id": Uuid.random()})
        nodes = {1: ("127.0.0.1", 9001, None), 2: ("127.0.0.1", 9002, "r2")}
        _encodes("MetadataResponse", v, _metadata(c, {"topics": topics}, v, nodes=nodes, controller_id=100))
        _encodes("MetadataResponse", v, _metadata(c, {"topics": None if v else []}, v, nodes=nodes, controller_id=1))
    for v in range(1, 7):
        delete: dict[str, Any] = {"topics": [{"name": f"t{v}"}]} if v >= 6 else {"topic_names": [f"t{v}", "nope"]}
        _encodes("DeleteTopicsResponse", v, c.core.delete_topics(delete, v))
    _encodes("DescribeTieredStateResponse", 0, c.core.describe_tiered_state({"topics": None}))
    _encodes("DescribeTieredStateResponse", 0, c.core.describe_tiered_state({"topics": ["orders", "nope"]}))
    _encodes("BrokerRegistrationResponse", 4, c.register(9))
    _encodes("BrokerHeartbeatResponse", 1, c.heartbeat(9))
    _encodes("UnregisterBrokerResponse", 0, c.core.unregister_broker({"broker_id": 9}))


def test_create_topics_places_replicas_round_robin_with_the_first_replica_leading() -> None:
    c = CoreHarness()
    result = c.create("orders", num_partitions=6, replication_factor=2)
    assert (result["error_code"], result["num_partitions"], result["replication_factor"]) == (0, 6, 2)
    topic = c.topic("orders")
    assert topic.topic_id == result["topic_id"] and not topic.topic_id.is_zero
    firsts = [topic.partitions[p].replicas[0] for p in range(6)]
    for p in topic.partitions.values():
        assert len(set(p.replicas)) == 2 and p.leader == p.replicas[0] and p.isr == p.replicas
    assert sorted(firsts) == [1, 1, 2, 2, 3, 3], "leaders are spread evenly"
    other = c.topic("payments") if c.create("payments", num_partitions=1)["error_code"] == 0 else None
    assert other is not None and other.partitions[0].replicas[0] != topic.partitions[0].replicas[0], "start rotates"
    assert (topic.tiered_state, topic.tiered_epoch) == (TieredState.NOT_TIERED, 0)


def test_a_topic_created_with_remote_storage_enabled_is_enabled_at_epoch_1() -> None:
    c = CoreHarness()
    assert c.create("orders", configs=[{"name": "remote.storage.enable", "value": "true"}])["error_code"] == 0
    topic = c.topic("orders")
    assert (topic.tiered_state, topic.tiered_epoch, topic.policy) == (TieredState.ENABLED, 1, DisablePolicy.NONE)
    assert c.core.image.topic_configs("orders") == {"remote.storage.enable": "true"}


@pytest.mark.parametrize(
    ("topic", "code", "says"),
    [
        ({"name": "bad/name"}, 17, "illegal characters"),
        ({"name": "a" * 250}, 17, "249"),
        ({"name": "orders.eu"}, 17, "collides with 'orders_eu'"),
        ({"name": "orders_eu"}, 36, "already exists"),
        ({"name": "t", "num_partitions": 0}, 37, "positive"),
        ({"name": "t", "replication_factor": 4}, 38, "only 3 broker(s)"),
        ({"name": "t", "configs": [{"name": "retention.msec", "value": "1"}]}, 40, "'retention.msec'"),
        ({"name": "t", "configs": [{"name": "retention.ms", "value": "-9"}]}, 40, "at least -1"),
        ({"name": "t", "configs": [{"name": "remote.storage.enable", "value": "si"}]}, 42, "'si'"),
        ({"name": "t", "configs": [{"name": "retention.ms", "value": None}]}, 40, "null"),
        ({"name": "t", "num_partitions": 2, "assignments": [{"partition_index": 0, "broker_ids": [1]}]}, 42, "-1"),
        ({"name": "t", "assignments": [{"partition_index": 1, "broker_ids": [1]}]}, 39, "consecutive"),
        ({"name": "t", "assignments": [{"partition_index": 0, "broker_ids": [1, 1]}]}, 39, "twice"),
        ({"name": "t", "assignments": [{"partition_index": 0, "broker_ids": [1, 7]}]}, 39, "unregistered"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_bad_create_topic_gets_its_kafka_error_and_writes_nothing(
    topic: dict[str, Any], code: int, says: str
) -> None:
    c = CoreHarness()
    c.create("orders_eu")
    end = c.store.end_offset()
    result = c.create(**topic)
    assert result["error_code"] == code and says in result["error_message"]
    assert c.store.end_offset() == end


def test_duplicate_names_in_one_create_request_fail_both_and_validate_only_writes_nothing() -> None:
    c = CoreHarness()
    end = c.store.end_offset()
    body = {"topics": [{"name": "a", "configs": []}, {"name": "a", "configs": []}]}
    assert [t["error_code"] for t in c.core.create_topics(body, 7)["topics"]] == [42, 42]
    topic = {"name": "b", "num_partitions": -1, "replication_factor": -1, "configs": []}
    result = c.core.create_topics({"topics": [topic], "validate_only": True}, 7)["topics"][0]
    assert result["error_code"] == 0 and result["topic_id"] == ZERO_UUID and result["num_partitions"] == 1
    assert c.store.end_offset() == end and c.topic("b") is None


def test_explicit_assignments_are_used_as_given() -> None:
    c = CoreHarness()
    assignments = [{"partition_index": 0, "broker_ids": [3, 1]}, {"partition_index": 1, "broker_ids": [2, 3]}]
    assert c.create("t", assignments=assignments)["error_code"] == 0
    t = c.topic("t")
    assert [t.partitions[0].replicas, t.partitions[1].replicas] == [(3, 1), (2, 3)]
    assert [t.partitions[0].leader, t.partitions[1].leader] == [3, 2]


def test_delete_topics_by_name_and_by_id_with_kafka_errors_for_unknown_ones() -> None:
    c = CoreHarness()
    c.create("a")
    c.create("b")
    b_id = c.topic("b").topic_id
    unknown = Uuid.random(random.Random(5).randbytes)
    body = {
        "topics": [
            {"name": "a"},
            {"name": None, "topic_id": b_id},
            {"name": "zz"},
            {"name": None, "topic_id": unknown},
            {"name": "a", "topic_id": Uuid.random(random.Random(6).randbytes)},
        ]
    }
    results = c.core.delete_topics(body, 6)["responses"]
    assert [r["error_code"] for r in results] == [0, 0, 3, 100, 42]
    assert results[1]["name"] == "b" and results[3]["name"] is None and results[3]["topic_id"] == unknown
    assert c.topic("a") is None and c.topic("b") is None
    old = c.core.delete_topics({"topic_names": ["nope"]}, 5)["responses"][0]
    assert (old["name"], old["error_code"]) == ("nope", 3)


def test_create_partitions_grows_a_topic_and_refuses_to_shrink_it() -> None:
    c = CoreHarness()
    c.create("t", num_partitions=2)
    body = {"topics": [{"name": "t", "count": 4, "assignments": None}, {"name": "u", "count": 2, "assignments": None}]}
    results = c.core.create_partitions(body, 3)["results"]
    assert [r["error_code"] for r in results] == [0, 3]
    assert sorted(c.topic("t").partitions) == [0, 1, 2, 3]
    for count, says in ((3, "more than the requested 3"), (4, "already has 4")):
        r = c.core.create_partitions({"topics": [{"name": "t", "count": count, "assignments": None}]}, 3)["results"][0]
        assert r["error_code"] == 37 and says in r["error_message"]
    wrong = {"topics": [{"name": "t", "count": 5, "assignments": [{"broker_ids": [1]}]}]}
    assert c.core.create_partitions(wrong, 3)["results"][0]["error_code"] == 39, "replication factor must match"


def test_partitions_added_to_a_disabling_topic_are_covered_by_the_queue() -> None:
    c = CoreHarness(brokers=4)
    c.create("t", assignments=[{"partition_index": 0, "broker_ids": [1, 2]}])
    c.alter("t", {"remote.storage.enable": "true"})
    c.alter("t", {"remote.storage.enable": "false"})
    tid = c.topic("t").topic_id
    assert sorted(c.core.queue.pending_brokers(tid)) == [1, 2]
    c.answer_all()
    assert c.topic("t").tiered_state == TieredState.DISABLED
    c.alter("t", {"remote.storage.enable": "true"})
    c.alter("t", {"remote.storage.enable": "false"})
    held = {}
    for b, body in c.core.due_disable_requests():
        if b == 1:
            c.core.on_disable_response(b, body, {"error_code": 0, "status": 0}, None)
        else:
            held[b] = body  # broker 2's reply is still on its way
    grow = {"topics": [{"name": "t", "count": 2, "assignments": [{"broker_ids": [3, 4]}]}]}
    assert c.core.create_partitions(grow, 3)["results"][0]["error_code"] == 0
    assert sorted(c.core.queue.pending_brokers(tid)) == [2, 3, 4]
    assert sorted(b for b, _ in c.answer_all()) == [3, 4]
    assert c.topic("t").tiered_state == TieredState.DISABLING
    c.core.on_disable_response(2, held[2], {"error_code": 0, "status": 0}, None)
    assert c.topic("t").tiered_state == TieredState.DISABLED


def test_describe_configs_returns_explicit_values_and_defaults_with_their_sources() -> None:
    c = CoreHarness()
    c.create("t", configs=[{"name": "retention.ms", "value": "60000"}])
    body = {
        "resources": [
            {"resource_type": 2, "resource_name": "t", "configuration_keys": ["retention.ms", "segment.bytes"]},
            {"resource_type": 2, "resource_name": "nope", "configuration_keys": None},
            {"resource_type": 16, "resource_name": "x", "configuration_keys": None},
        ],
        "include_synonyms": True,
        "include_documentation": True,
    }
    results = _describe_configs(c, body, 4)["results"]
    assert [r["error_code"] for r in results] == [0, 3, 42]
    by_name = {e["name"]: e for e in results[0]["configs"]}
    assert set(by_name) == {"retention.ms", "segment.bytes"}
    assert (by_name["retention.ms"]["value"], by_name["retention.ms"]["config_source"]) == ("60000", 1)
    assert [s["source"] for s in by_name["retention.ms"]["synonyms"]] == [1, 5]
    assert (by_name["segment.bytes"]["value"], by_name["segment.bytes"]["config_source"]) == ("1073741824", 5)
    assert by_name["retention.ms"]["documentation"] and by_name["retention.ms"]["config_type"] == 5


def test_a_failed_resource_changes_nothing_while_the_others_apply() -> None:
    c = CoreHarness()
    c.create("a")
    c.create("b")
    set_retention = {"name": "retention.ms", "config_operation": 0, "value": "5"}
    bad_policy = {"name": "remote.log.disable.policy", "config_operation": 0, "value": "shred"}
    resources = [
        {"resource_type": 2, "resource_name": "a", "configs": [set_retention]},
        {"resource_type": 2, "resource_name": "b", "configs": [set_retention, bad_policy]},
        {"resource_type": 2, "resource_name": "zz", "configs": []},
        {"resource_type": 4, "resource_name": "1", "configs": []},
    ]
    body = {"resources": resources}
    results = c.core.incremental_alter_configs(body, 1)["responses"]
    assert [r["error_code"] for r in results] == [0, 42, 3, 42]
    assert "'shred'" in results[1]["error_message"]
    assert c.core.image.topic_configs("a") == {"retention.ms": "5"}
    assert c.core.image.topic_configs("b") == {}
    end = c.store.end_offset()
    assert c.alter("a", {"retention.ms": "7"}, validate_only=True)["error_code"] == 0
    assert c.store.end_offset() == end and c.core.image.topic_configs("a") == {"retention.ms": "5"}


def test_an_alter_of_many_topics_logs_one_line_of_transitions_and_one_of_other_changes() -> None:
    c = CoreHarness()
    tiering_on = [{"name": "remote.storage.enable", "value": "true"}]
    for name in ("a", "b", "c"):
        assert c.create(name, configs=tiering_on)["error_code"] == 0
    off = [
        {"name": "remote.storage.enable", "config_operation": 0, "value": "false"},
        {"name": "remote.log.disable.policy", "config_operation": 0, "value": "retain"},
    ]
    retention = [{"name": "retention.ms", "config_operation": 0, "value": "5"}]
    resources = [
        {"resource_type": 2, "resource_name": "a", "configs": off},
        {"resource_type": 2, "resource_name": "b", "configs": off},
        {"resource_type": 2, "resource_name": "c", "configs": retention},
        {"resource_type": 2, "resource_name": "zz", "configs": off},
    ]
    with capture_logs() as logs:
        results = c.core.incremental_alter_configs({"resources": resources}, 1)["responses"]
    assert [r["error_code"] for r in results] == [0, 0, 0, 3]
    transitions = [e for e in logs if e["event"] == "tiering.transition"]
    altered = [e for e in logs if e["event"] == "topic.configs_altered"]
    assert len(transitions) == 1 and len(altered) == 1, logs
    assert [(t["topic"], t["from_state"], t["to_state"], t["policy"]) for t in transitions[0]["topics"]] == [
        ("a", "ENABLED", "DISABLING", "RETAIN"),
        ("b", "ENABLED", "DISABLING", "RETAIN"),
    ]
    assert all(
        t["pending_brokers"] and t["topic_id"] == str(c.topic(t["topic"]).topic_id) for t in transitions[0]["topics"]
    )
    assert altered[0]["topics"] == [{"topic": "c", "topic_id": str(c.topic("c").topic_id), "records": 1}]


def test_metadata_lists_nodes_topics_and_kafka_errors_for_unknown_or_leaderless_topics() -> None:
    c = CoreHarness(brokers=2)
    c.create("t", num_partitions=1, replication_factor=1)
    tid = c.topic("t").topic_id
    nodes = {1: ("h1", 9001, None), 2: ("h2", 9002, "rack-b")}
    unknown = Uuid.random(random.Random(9).randbytes)
    topics = [{"name": "t"}, {"name": "nope"}, {"name": "bad/name"}, {"name": None, "topic_id": unknown}]
    r = _metadata(c, {"topics": topics}, 12, nodes=nodes, controller_id=100)
    assert (r["cluster_id"], r["controller_id"]) == ("tieredctl", 100)
    assert [(b["node_id"], b["rack"]) for b in r["brokers"]] == [(1, None), (2, "rack-b")]
    assert [t["error_code"] for t in r["topics"]] == [0, 3, 17, 100]
    assert r["topics"][0]["topic_id"] == tid and r["topics"][3]["name"] is None
    leader = c.topic("t").partitions[0].leader
    c.heartbeat(leader, want_fence=True)
    partition = _metadata(c, {"topics": None}, 12, nodes=nodes, controller_id=100)["topics"][0]["partitions"][0]
    assert (partition["leader_id"], partition["error_code"]) == (-1, 5)


def test_broker_epoch_is_the_registration_offset_and_a_retry_of_the_same_incarnation_keeps_it() -> None:
    c = CoreHarness(brokers=0)
    end = c.store.end_offset()
    first = c.register(1)
    assert first == {"throttle_time_ms": 0, "error_code": 0, "broker_epoch": end}
    assert c.core.image.brokers[1].fenced
    assert c.register(1, incarnation=c.incarnations[1])["broker_epoch"] == end
    assert c.store.end_offset() == end + 1
    assert c.register(2, cluster_id="other")["error_code"] == 104


def test_a_heartbeat_unfences_a_caught_up_broker_and_refuses_a_stale_epoch() -> None:
    c = CoreHarness(brokers=0)
    c.register(1)
    behind = c.core.broker_heartbeat({"broker_id": 1, "broker_epoch": c.epochs[1], "current_metadata_offset": -1})
    assert (behind["is_caught_up"], behind["is_fenced"]) == (False, True)
    assert c.heartbeat(1) == {
        "throttle_time_ms": 0,
        "error_code": 0,
        "is_caught_up": True,
        "is_fenced": False,
        "should_shut_down": False,
    }
    stale = c.core.broker_heartbeat({"broker_id": 1, "broker_epoch": c.epochs[1] + 99, "current_metadata_offset": 5})
    assert stale["error_code"] == 77 and stale["is_fenced"]
    bye = c.heartbeat(1, want_shut_down=True)
    assert bye["should_shut_down"] and bye["is_fenced"]


def test_a_new_incarnation_is_refused_while_the_old_session_lives_and_accepted_after() -> None:
    c = CoreHarness()
    old_epoch = c.epochs[1]
    assert c.register(1)["error_code"] == 101
    c.clock += MEMBERSHIP.session_timeout_ms
    for b in (2, 3):
        c.heartbeat(b)
    c.core.tick()
    assert c.core.image.brokers[1].fenced
    response = c.register(1)
    assert response["error_code"] == 0 and response["broker_epoch"] > old_epoch


def test_session_timeout_fences_a_broker_and_moves_its_leadership_to_a_live_in_sync_replica() -> None:
    c = CoreHarness()
    c.create("t", num_partitions=3, replication_factor=2)
    led_by_1 = [p.partition_id for p in c.topic("t").partitions.values() if p.leader == 1]
    assert led_by_1
    c.clock += MEMBERSHIP.session_timeout_ms - 1
    c.heartbeat(2)
    c.heartbeat(3)
    c.clock += 1
    c.core.tick()
    image = c.core.image
    assert image.brokers[1].fenced and not image.brokers[2].fenced
    for p in c.topic("t").partitions.values():
        assert 1 not in p.isr and p.leader != 1 and p.leader in p.isr
    leaders = {pid: p.leader for pid, p in c.topic("t").partitions.items()}
    c.heartbeat(1)  # back, caught up: unfenced, but in no ISR (it has not caught up with its leaders' logs)
    c.core.tick()
    for pid, p in c.topic("t").partitions.items():
        assert 1 not in p.isr and p.leader == leaders[pid]
    for pid, p in c.topic("t").partitions.items():  # each leader adds it once it has caught up (AlterPartition)
        if 1 in p.replicas:
            assert c.alter_partition(p.leader, "t", pid, [*p.isr, 1])["error_code"] == 0
    c.core.tick()  # in sync again: its preferred leaderships are restored
    for pid in led_by_1:
        p = c.topic("t").partitions[pid]
        assert p.leader == 1 and 1 in p.isr


def test_alter_partition_shrinks_and_expands_the_isr_and_refuses_a_follower_and_a_stale_incarnation() -> None:
    c = CoreHarness()
    c.create("t", num_partitions=1, replication_factor=3)
    p = c.topic("t").partitions[0]
    leader, followers = p.leader, [b for b in p.replicas if b != p.leader]
    start = c.store.end_offset()
    shrunk = c.alter_partition(leader, "t", 0, [leader, followers[0]])
    assert shrunk == {
        "partition_index": 0,
        "error_code": 0,
        "leader_id": leader,
        "leader_epoch": p.leader_epoch,
        "isr": [leader, followers[0]],
        "partition_epoch": p.partition_epoch + 1,
    }
    assert c.topic("t").partitions[0].isr == (leader, followers[0]) and c.store.end_offset() == start + 1
    again = c.alter_partition(leader, "t", 0, [leader, followers[0]], partition_epoch=p.partition_epoch)
    assert again == shrunk and c.store.end_offset() == start + 1, "a repeat is answered and writes nothing"
    stale = c.alter_partition(leader, "t", 0, [leader, *followers], partition_epoch=p.partition_epoch)
    assert stale["error_code"] == 95  # INVALID_UPDATE_VERSION: based on the state before the shrink
    expanded = c.alter_partition(leader, "t", 0, [leader, *followers])
    assert (expanded["error_code"], expanded["isr"], expanded["partition_epoch"]) == (0, [leader, *followers], 2)
    assert c.alter_partition(followers[0], "t", 0, followers)["error_code"] == 6  # NOT_LEADER_OR_FOLLOWER
    c.epochs[leader] += 1
    assert c.alter_partition(leader, "t", 0, [leader])["error_code"] == 77  # STALE_BROKER_EPOCH
    assert c.topic("t").partitions[0].isr == (leader, *followers) and c.store.end_offset() == start + 2


def test_disablement_end_to_end_writes_disabled_exactly_once_after_every_broker_acknowledged() -> None:
    c = CoreHarness()
    c.create("t", num_partitions=3, configs=[{"name": "remote.storage.enable", "value": "true"}])
    assert c.alter("t", {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"})["error_code"] == 0
    t = c.topic("t")
    assert (t.tiered_state, t.tiered_epoch, t.policy) == (TieredState.DISABLING, 2, DisablePolicy.DELETE)
    assert c.alter("t", {"remote.storage.enable": "true"})["error_code"] == 10950
    sent = c.core.due_disable_requests()
    assert sorted(b for b, _ in sent) == [1, 2, 3]
    body = sent[0][1]
    assert body["partition_id"] == -1 and body["tiered_epoch"] == 2 and body["policy"] == 2
    assert body["controller_epoch"] == c.core.controller_epoch and body["broker_epoch"] == c.epochs[sent[0][0]]
    c.core.on_disable_response(sent[0][0], body, {"error_code": 0, "status": 1}, None)
    c.core.on_disable_response(sent[1][0], sent[1][1], None, None)  # timeout
    c.core.on_disable_response(sent[2][0], sent[2][1], {"error_code": 0, "status": 0}, None)
    assert c.topic("t").tiered_state == TieredState.DISABLING
    status = c.core.describe_tiered_state({"topics": ["t"]})["topics"][0]
    pending = {p["broker_id"]: p for p in status["pending_brokers"]}
    assert sorted(pending) == sorted(b for b, _ in sent[:2])
    assert pending[sent[1][0]]["last_error"].startswith("REQUEST_TIMED_OUT")
    c.clock += 60_000
    while c.topic("t").tiered_state == TieredState.DISABLING:
        assert c.answer_all(), "something must be due"
    records = [e.record for e in c.store.read() if e.record.name == "TieredStateRecord"]
    assert [(r["tiered_state"], r["tiered_epoch"]) for r in records] == [(1, 1), (2, 2), (3, 2)]
    end = c.store.end_offset()
    for b, request in sent:
        c.core.on_disable_response(b, request, {"error_code": 0, "status": 0}, None)
    assert c.store.end_offset() == end, "re-delivered replies write nothing"


def test_describe_tiered_state_reports_fenced_and_stalled_pending_brokers() -> None:
    c = CoreHarness()
    c.create("t", num_partitions=3, configs=[{"name": "remote.storage.enable", "value": "true"}])
    c.alter("t", {"remote.storage.enable": "false"})
    c.answer_all({"error_code": 56, "error_message": "S3 said 503"})
    c.clock += DISABLEMENT.stall_threshold_ms
    c.heartbeat(2)
    c.heartbeat(3)
    c.core.tick()
    topic = c.core.describe_tiered_state({"topics": None})["topics"][0]
    assert (topic["name"], topic["tiered_state"], topic["policy"], topic["partition_count"]) == ("t", 2, 1, 3)
    pending = {p["broker_id"]: p for p in topic["pending_brokers"]}
    assert pending[1]["fenced"] and not pending[2]["fenced"]
    assert all(p["stalled"] and p["attempts"] >= 1 for p in pending.values())
    assert pending[2]["last_error"] == "KAFKA_STORAGE_ERROR: S3 said 503"
    missing = c.core.describe_tiered_state({"topics": ["nope"]})["topics"][0]
    assert (missing["error_code"], missing["topic_id"]) == (3, ZERO_UUID)


def test_decommissioning_a_dead_broker_releases_its_pending_acks_and_completes_the_topic() -> None:
    c = CoreHarness()
    c.create("t", num_partitions=3, configs=[{"name": "remote.storage.enable", "value": "true"}])
    c.alter("t", {"remote.storage.enable": "false"})
    for b, body in c.core.due_disable_requests():
        if b != 1:
            c.core.on_disable_response(b, body, {"error_code": 0, "status": 0}, None)
    assert c.topic("t").tiered_state == TieredState.DISABLING
    led_by_1 = [p.partition_id for p in c.topic("t").partitions.values() if p.leader == 1]
    assert c.core.unregister_broker({"broker_id": 1})["error_code"] == 0
    assert 1 not in c.core.image.brokers
    new_leaders = {c.topic("t").partitions[pid].leader for pid in led_by_1}
    assert all(1 not in p.isr or p.isr == (1,) for p in c.topic("t").partitions.values())
    assert 1 not in c.core.queue.pending_brokers(c.topic("t").topic_id)
    assert set(c.core.queue.pending_brokers(c.topic("t").topic_id)) == new_leaders, "the new leaders owe again"
    c.answer_all()
    assert c.topic("t").tiered_state == TieredState.DISABLED
    assert c.core.unregister_broker({"broker_id": 1})["error_code"] == 102


def test_a_new_controller_rebuilds_the_queue_and_the_deposed_one_can_change_nothing() -> None:
    c = CoreHarness()
    c.create("t", num_partitions=3, configs=[{"name": "remote.storage.enable", "value": "true"}])
    c.alter("t", {"remote.storage.enable": "false"})
    old = c.core
    in_flight = old.due_disable_requests()
    old.on_disable_response(in_flight[0][0], in_flight[0][1], {"error_code": 0, "status": 0}, None)
    c.core = c.new_controller()
    assert c.core.controller_epoch == old.controller_epoch + 1
    resent = c.core.due_disable_requests()
    assert sorted(b for b, _ in resent) == [1, 2, 3], "after failover every broker is asked again (KIP-950)"
    assert all(body["controller_epoch"] == c.core.controller_epoch for _, body in resent)
    end = c.store.end_offset()
    change = [{"name": "retention.ms", "config_operation": 0, "value": "1"}]
    with pytest.raises(StaleControllerEpoch):
        old.incremental_alter_configs({"resources": [{"resource_type": 2, "resource_name": "t", "configs": change}]}, 1)
    with pytest.raises(StaleControllerEpoch):  # a broker saying so deposes the core too
        old.on_disable_response(in_flight[1][0], in_flight[1][1], {"error_code": 11, "error_message": "stale"}, None)
    assert c.store.end_offset() == end
    for b, body in resent:
        c.core.on_disable_response(b, body, {"error_code": 0, "status": 0}, None)
    assert c.topic("t").tiered_state == TieredState.DISABLED


def test_a_deposed_controller_hands_out_no_disable_requests() -> None:
    c = CoreHarness()
    c.create("t", configs=[{"name": "remote.storage.enable", "value": "true"}])
    c.alter("t", {"remote.storage.enable": "false"})
    old = c.core
    c.core = c.new_controller()
    with pytest.raises(StaleControllerEpoch):
        old.due_disable_requests()


def _stall_logs(names: list[str]) -> list[dict[str, Any]]:
    """The ``disable.stalled`` lines of two ticks, once every broker has failed every topic of ``names`` (each
    disabled) for the stall threshold."""
    c = CoreHarness()
    for name in names:
        c.create(name, num_partitions=3, configs=[{"name": "remote.storage.enable", "value": "true"}])
        c.alter(name, {"remote.storage.enable": "false"})
    c.answer_all({"error_code": 56, "error_message": "S3 said 503"})
    c.clock += DISABLEMENT.stall_threshold_ms
    for b in (1, 2, 3):
        c.heartbeat(b)
    with capture_logs() as logs:
        c.core.tick()
        c.core.tick()
    return [e for e in logs if e["event"] == "disable.stalled"]


def test_a_stalled_pair_is_logged_once_with_its_last_error() -> None:
    stalled = _stall_logs(["t"])
    assert sorted(e["broker_id"] for e in stalled) == [1, 2, 3]  # once each, not once per tick
    assert all(e["last_error"] == "KAFKA_STORAGE_ERROR: S3 said 503" and e["topic"] == "t" for e in stalled)


def test_describe_tiered_state_shows_a_failing_brokers_error_with_its_cause_and_its_next_attempt() -> None:
    """The S3 outage as the controller sees it: broker 1's job answers IN_PROGRESS, fails, restarts. Its error
    (with the cause the broker sent) stays in the status between the failures, and the next attempt moves out."""
    c = CoreHarness()
    c.create("t", num_partitions=3, configs=[{"name": "remote.storage.enable", "value": "true"}])
    c.alter("t", {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"})
    cause = "3 object(s) of t-0 could not be deleted from bucket b: EndpointConnectionError: Could not connect"
    started = {"error_code": 0, "status": 1, "tiered_epoch": 2, "partitions_total": 1, "segments_remaining": 3}
    failed = {**started, "error_code": 56, "error_message": cause, "status": 0}
    replies = [started, failed, started, started, failed, started]
    seen = []
    for reply in replies:
        due = [(b, body) for b, body in c.core.due_disable_requests() if b == 1]
        assert due, "broker 1 is asked again once its next attempt is due"
        c.core.on_disable_response(1, due[0][1], reply, None)
        status = c.core.describe_tiered_state({"topics": ["t"]})["topics"][0]
        pending = {p["broker_id"]: p for p in status["pending_brokers"]}[1]
        seen.append(pending)
        assert pending["last_attempt_ms"] == c.clock and pending["next_attempt_ms"] > c.clock
        c.clock = pending["next_attempt_ms"]
    assert [p["attempts_without_progress"] for p in seen] == [0, 1, 2, 3, 4, 5]
    assert [p["last_error"] for p in seen] == [None] + [f"KAFKA_STORAGE_ERROR: {cause}"] * 5
    gaps = [p["next_attempt_ms"] - p["last_attempt_ms"] for p in seen]
    assert gaps[0] == DISABLEMENT.repoll_ms and all(g >= DISABLEMENT.repoll_ms for g in gaps[2:4])
    codec.encode(schema("DescribeTieredStateResponse"), 0, c.core.describe_tiered_state({"topics": ["t"]}))


def test_a_disabled_topic_counts_every_broker_that_acknowledged_it_also_after_a_failover() -> None:
    c = CoreHarness()
    c.create("t", num_partitions=3, configs=[{"name": "remote.storage.enable", "value": "true"}])
    c.alter("t", {"remote.storage.enable": "false"})
    c.answer_all()
    assert c.topic("t").tiered_state == TieredState.DISABLED
    for core in (c.core, c.new_controller()):
        status = core.describe_tiered_state({"topics": ["t"]})["topics"][0]
        assert (status["acknowledged_brokers"], status["pending_brokers"]) == (3, [])


def _segment(topic: Any, partition: int) -> RemoteSegment:
    return RemoteSegment(
        topic=topic.name,
        topic_id=topic.topic_id,
        partition=partition,
        segment_id=Uuid.random(random.Random(partition + 100).randbytes),
        start_offset=0,
        end_offset=9,
        max_timestamp_ms=0,
        size_bytes=1_000,
        tiered_epoch=topic.tiered_epoch,
    )


def test_disabled_delete_waits_until_the_rlmm_shows_every_partitions_remote_data_deleted_whoever_leads() -> None:
    """Replication factor 1 over three brokers, broker 3 decommissioned: its partition is leaderless. The controller
    assigns it to a live broker (named in that broker's request); brokers that answer "done" without the RLMM showing
    the segments deleted do not make the topic DISABLED: they are asked again, and DescribeTieredState shows the
    partitions still owed with who deletes them."""
    c = CoreHarness()
    c.create("t", num_partitions=3, replication_factor=1, configs=[{"name": "remote.storage.enable", "value": "true"}])
    topic = c.topic("t")
    rlmm = RemoteLogMetadataManager(c.store)
    segments = {p: _segment(topic, p) for p in range(3)}
    for seg in segments.values():
        rlmm.copy_started(seg, now_ms=c.clock)
    rlmm.transition(segments.values(), SegmentState.COPY_SEGMENT_FINISHED, broker_id=1, now_ms=c.clock)
    orphaned = next(p.partition_id for p in topic.partitions.values() if p.replicas == (3,))
    assert c.core.unregister_broker({"broker_id": 3})["error_code"] == 0
    assert c.topic("t").partitions[orphaned].leader == -1
    assert c.alter("t", {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"})["error_code"] == 0

    sent = dict(c.answer_all())  # every broker says done, and deletes nothing
    assignee = [1, 2][orphaned % 2]
    assert sent[assignee]["assigned_partitions"] == [orphaned]
    assert sent[3 - assignee]["assigned_partitions"] == []
    assert c.topic("t").tiered_state == TieredState.DISABLING, "the RLMM still holds every partition's segments"
    described = c.core.describe_tiered_state({"topics": ["t"]})
    _encodes("DescribeTieredStateResponse", 0, dict(described))
    status = described["topics"][0]
    owed = {o["partition_id"]: o for o in status["owed_partitions"]}
    assert sorted(owed) == [0, 1, 2]
    assert (owed[orphaned]["leader"], owed[orphaned]["assigned_broker"]) == (-1, assignee)
    assert owed[orphaned]["segments_remaining"] == 1 and owed[orphaned]["bytes_remaining"] == 1_000
    pending = {p["broker_id"]: p for p in status["pending_brokers"]}
    assert sorted(pending) == [1, 2], "asked again: the brokers answerable for the owed partitions"
    assert "not DELETE_SEGMENT_FINISHED in the RLMM" in pending[assignee]["last_error"]

    # The brokers delete the remote data for real this time (the orphaned partition by its assignee).
    for p, seg in segments.items():
        by = assignee if p == orphaned else c.topic("t").partitions[p].leader
        rlmm.transition([seg], SegmentState.DELETE_SEGMENT_STARTED, broker_id=by, now_ms=c.clock)
        rlmm.transition([seg], SegmentState.DELETE_SEGMENT_FINISHED, broker_id=by, now_ms=c.clock)
    c.clock += 60_000
    again = dict(c.answer_all())
    assert again[assignee]["assigned_partitions"] == [orphaned]
    assert c.topic("t").tiered_state == TieredState.DISABLED
    assert c.core.describe_tiered_state({"topics": ["t"]})["topics"][0]["owed_partitions"] == []


def test_a_topic_whose_only_brokers_are_gone_is_not_disabled_while_the_rlmm_holds_its_remote_data() -> None:
    c = CoreHarness(brokers=1)
    c.create("t", num_partitions=1, replication_factor=1, configs=[{"name": "remote.storage.enable", "value": "true"}])
    rlmm = RemoteLogMetadataManager(c.store)
    rlmm.copy_started(_segment(c.topic("t"), 0), now_ms=c.clock)
    assert c.core.unregister_broker({"broker_id": 1})["error_code"] == 0
    c.alter("t", {"remote.storage.enable": "false", "remote.log.disable.policy": "delete"})
    c.core.tick()
    assert c.answer_all() == [] and c.topic("t").tiered_state == TieredState.DISABLING
    owed = c.core.describe_tiered_state({"topics": ["t"]})["topics"][0]["owed_partitions"]
    assert [(o["partition_id"], o["assigned_broker"]) for o in owed] == [(0, -1)]
    c.register(2)
    c.heartbeat(2)  # a live broker again: it is assigned the leaderless partition
    sent = dict(c.answer_all())
    assert sent[2]["assigned_partitions"] == [0]


def test_alter_configs_sets_what_it_names_and_resets_every_other_config_of_the_topic() -> None:
    c = CoreHarness()
    c.create("t", configs=[{"name": "retention.ms", "value": "5000"}, {"name": "segment.bytes", "value": "2097152"}])
    named = [{"name": "retention.ms", "value": "9000"}, {"name": "cleanup.policy", "value": None}]
    body = {"resources": [{"resource_type": 2, "resource_name": "t", "configs": named}]}
    for version in range(3):
        response = c.core.alter_configs(body, version)
        _encodes("AlterConfigsResponse", version, response)
        assert response["responses"][0]["error_code"] == 0
    assert c.core.image.topic_configs("t") == {"retention.ms": "9000"}


def test_alter_configs_goes_through_the_kip950_state_machine_like_the_incremental_api() -> None:
    c = CoreHarness()
    c.create("t", configs=[{"name": "remote.storage.enable", "value": "true"}])
    bad = {"name": "remote.log.disable.policy", "value": "shred"}
    broker = {"resource_type": 4, "resource_name": "1", "configs": []}
    body = {"resources": [{"resource_type": 2, "resource_name": "t", "configs": [bad]}, broker]}
    end = c.store.end_offset()
    assert [r["error_code"] for r in c.core.alter_configs(body, 1)["responses"]] == [42, 42]
    assert c.store.end_offset() == end and c.topic("t").tiered_state == TieredState.ENABLED

    # Naming only retention.ms would reset remote.storage.enable to false, a disablement nobody asked for: refused
    # INVALID_CONFIG, saying how to do it, and nothing written (what librdkafka's and kafkajs's alterConfigs send).
    def legacy(*configs: tuple[str, str]) -> dict[str, Any]:
        named = [{"name": k, "value": v} for k, v in configs]
        [result] = c.core.alter_configs(
            {"resources": [{"resource_type": 2, "resource_name": "t", "configs": named}]}, 1
        )["responses"]
        return result

    refused_reset = legacy(("retention.ms", "1"))
    assert refused_reset["error_code"] == 40, refused_reset
    assert "remote.storage.enable" in refused_reset["error_message"]
    assert "IncrementalAlterConfigs" in refused_reset["error_message"]
    assert c.store.end_offset() == end and c.topic("t").tiered_state == TieredState.ENABLED
    assert c.core.image.topic_configs("t") == {"remote.storage.enable": "true"}
    # Naming it keeps tiering as it is; naming it false disables, with the default policy (retain).
    assert legacy(("retention.ms", "1"), ("remote.storage.enable", "true"))["error_code"] == 0
    assert c.topic("t").tiered_state == TieredState.ENABLED
    assert c.core.image.topic_configs("t") == {"remote.storage.enable": "true", "retention.ms": "1"}
    assert legacy(("retention.ms", "1"), ("remote.storage.enable", "false"))["error_code"] == 0
    topic = c.topic("t")
    assert (topic.tiered_state, topic.tiered_epoch, topic.policy) == (
        TieredState.DISABLING,
        2,
        DisablePolicy.RETAIN,
    )
    delete = [
        {"name": "remote.storage.enable", "value": "false"},
        {"name": "remote.log.disable.policy", "value": "delete"},
    ]
    refused = c.core.alter_configs({"resources": [{"resource_type": 2, "resource_name": "t", "configs": delete}]}, 1)
    assert refused["responses"][0]["error_code"] != 0, "a disablement in progress cannot change policy"


def test_ticks_over_an_unchanged_queue_do_not_walk_it_yet_a_repoll_and_a_timeout_come_on_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A controller ticks every 100 ms; over thousands of queued topics a walk of the queue per tick was most of a
    bulk disablement's work. Ticks that find the very queue the last walk left, before its next event, walk nothing;
    the repoll and the timeout still happen at their time."""
    walks: list[int] = []
    real_due = rq.due

    def counted_due(queue: rq.RetryQueue[Any], now: int) -> tuple[rq.RetryQueue[Any], list[rq.Send[Any, Any]]]:
        walks.append(now)
        return real_due(queue, now)

    monkeypatch.setattr(rq, "due", counted_due)
    c = CoreHarness()
    c.create("t", num_partitions=3, configs=[{"name": "remote.storage.enable", "value": "true"}])
    c.alter("t", {"remote.storage.enable": "false"})
    sent = dict(c.core.due_disable_requests())
    assert sorted(sent) == [1, 2, 3]
    progress = {"error_code": 0, "status": 1, "tiered_epoch": 2, "partitions_done": 1, "partitions_total": 2}
    c.core.on_disable_response(1, sent[1], progress, None)  # asked again after repoll_ms
    c.core.on_disable_response(3, sent[3], {"error_code": 0, "status": 0}, None)  # done; broker 2 never answers
    sent_at = c.clock

    def tick() -> list[int]:
        c.core.tick()
        return [b for b, _ in c.core.due_disable_requests()]

    assert tick() == [], "the replies changed the queue: walked once, nothing due"
    walks.clear()
    for _ in range(5):
        c.clock += 10
        assert tick() == []
    assert walks == [], "the same queue, before its next event: not walked"
    c.clock = sent_at + DISABLEMENT.repoll_ms
    assert tick() == [1], "the repoll goes out at its time"
    c.core.on_disable_response(1, sent[1], None, None)  # a late duplicate of the first attempt: ignored
    c.clock = sent_at + DISABLEMENT.stall_threshold_ms
    assert tick() == [] and walks, "walked when the waits reached the stall threshold (stalls reported)"
    walks.clear()
    c.clock = sent_at + DISABLEMENT.request_timeout_ms - 1
    assert tick() == [] and walks == [], "nothing new since: not walked"
    c.clock += 1
    tick()
    pending = {
        p["broker_id"]: p for p in c.core.describe_tiered_state({"topics": ["t"]})["topics"][0]["pending_brokers"]
    }
    assert pending[2]["last_error"].startswith("REQUEST_TIMED_OUT"), "broker 2's request timed out at its time"
    assert walks, "walked at the timeout"


def test_a_broker_with_many_newly_stalled_topics_gets_one_line_naming_how_many_and_the_first() -> None:
    """A fenced or failing broker in a bulk disablement stalls thousands of topics at once: one line for the broker
    (the count, the first topics by name, its errors counted), not one per topic; a few stalls stay one line each."""
    many = STALLS_LOGGED_ONE_BY_ONE + 5
    names = [f"t-{i:02d}" for i in range(many)]
    stalled = _stall_logs(names)
    assert sorted(e["broker_id"] for e in stalled) == [1, 2, 3]  # one line each, once
    for e in stalled:
        assert e["topics"] == many
        assert e["first_topics"] == names[:STALLS_LOGGED_ONE_BY_ONE]
        assert e["last_errors"] == {"KAFKA_STORAGE_ERROR: S3 said 503": many}
        assert e["fenced"] is False
