"""The authorization gate in front of every node's handlers: who may do what, per entry, with Kafka's codes."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.admin_api.authorization import AccessPolicy, Gatekeeper
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage, replay
from orchestrator.net.server import CLOSE_CONNECTION, NO_RESPONSE
from orchestrator.protocol.api_keys import ApiKey
from orchestrator.protocol.framing import Request, RequestHeader
from orchestrator.protocol.schema import request_schema
from orchestrator.security.acls import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tests.support.metadata_records import topic as topic_record

pytestmark = pytest.mark.unit

ALICE, BROKER, ADMIN = "User:alice", "User:broker-1", "User:admin"
POLICY = AccessPolicy(authorizer=True, super_users=frozenset({ADMIN}), cluster_principals=frozenset({BROKER}))


def allow(
    operation: AclOperation, name: str, *, rtype: ResourceType = ResourceType.TOPIC, prefixed: bool = False
) -> AclBinding:
    pattern = PatternType.PREFIXED if prefixed else PatternType.LITERAL
    return AclBinding(rtype, name, pattern, ALICE, "*", operation, AclPermissionType.ALLOW)


def image_with(*acls: AclBinding) -> MetadataImage:
    return dataclasses.replace(MetadataImage(), acls={Uuid.random(): acl for acl in acls})


def request(api_key: int, version: int, body: dict[str, Any], principal: str = ALICE) -> Request:
    schema = request_schema(api_key)
    assert schema is not None
    return Request(RequestHeader(api_key, version, 7, "test"), body, schema, 0, principal, "127.0.0.1")


class Recorder:
    """A handler that answers every entry it is given with success, and remembers what it was given."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, req: Request) -> dict[str, Any]:
        self.seen.append(req.body)
        key = req.header.api_key
        if key == ApiKey.CREATE_TOPICS:
            return {"topics": [{"name": t["name"], "error_code": 0} for t in req.body["topics"]]}
        if key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
            return {
                "responses": [
                    {"resource_type": r["resource_type"], "resource_name": r["resource_name"], "error_code": 0}
                    for r in req.body["resources"]
                ]
            }
        if key == ApiKey.METADATA:
            return {"brokers": [], "topics": [{"name": n, "error_code": 0, "partitions": []} for n in ("a1", "b1")]}
        return {"error_code": 0}


def serve(image: MetadataImage, req: Request, handler: Recorder, policy: AccessPolicy = POLICY) -> dict[str, Any]:
    gate = Gatekeeper(policy, lambda: image)
    return dict(asyncio.run(gate.guard(req.header.api_key, handler)(req)))


def create_topics(*names: str) -> dict[str, Any]:
    return {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1} for n in names], "timeout_ms": 1000}


def test_a_topic_the_principal_may_not_create_is_refused_alone_and_never_reaches_the_handler():
    handler = Recorder()
    with capture_logs() as logs:
        answer = serve(
            image_with(allow(AclOperation.CREATE, "ok-", prefixed=True)),
            request(ApiKey.CREATE_TOPICS, 5, create_topics("ok-1", "no-1")),
            handler,
        )
    assert [t["name"] for t in handler.seen[0]["topics"]] == ["ok-1"]
    assert {t["name"]: t["error_code"] for t in answer["topics"]} == {"ok-1": 0, "no-1": 29}
    denied = [e for e in logs if e["event"] == "authz.denied"]
    assert [(e["principal"], e["resource"], e["operation"]) for e in denied] == [(ALICE, "no-1", "CREATE")]


def test_create_on_the_cluster_allows_every_topic():
    handler = Recorder()
    cluster_create = allow(AclOperation.CREATE, CLUSTER_RESOURCE_NAME, rtype=ResourceType.CLUSTER)
    answer = serve(image_with(cluster_create), request(ApiKey.CREATE_TOPICS, 5, create_topics("x", "y")), handler)
    assert [t["error_code"] for t in answer["topics"]] == [0, 0]


def test_nothing_allowed_means_nothing_reaches_the_handler():
    handler = Recorder()
    answer = serve(image_with(), request(ApiKey.CREATE_TOPICS, 5, create_topics("x")), handler)
    assert handler.seen == [] and answer["topics"][0]["error_code"] == 29


def test_altering_a_topics_config_needs_alter_configs_and_a_broker_resource_the_cluster():
    body = {
        "resources": [
            {"resource_type": 2, "resource_name": "t1", "configs": []},
            {"resource_type": 2, "resource_name": "t2", "configs": []},
            {"resource_type": 4, "resource_name": "1", "configs": []},
        ],
        "validate_only": False,
    }
    handler = Recorder()
    answer = serve(
        image_with(allow(AclOperation.ALTER_CONFIGS, "t1")), request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, body), handler
    )
    assert [r["resource_name"] for r in handler.seen[0]["resources"]] == ["t1"]
    assert {r["resource_name"]: r["error_code"] for r in answer["responses"]} == {"t1": 0, "t2": 29, "1": 29}


def test_a_listing_shows_only_describable_topics_and_a_named_one_is_refused():
    listing = serve(
        image_with(allow(AclOperation.DESCRIBE, "a", prefixed=True)),
        request(ApiKey.METADATA, 12, {"topics": None}),
        Recorder(),
    )
    assert [t["name"] for t in listing["topics"]] == ["a1"]
    named = serve(
        image_with(allow(AclOperation.WRITE, "a1")),
        request(ApiKey.METADATA, 12, {"topics": [{"name": "a1"}, {"name": "b1"}]}),
        Recorder(),
    )
    assert {t["name"]: t["error_code"] for t in named["topics"]} == {"a1": 0, "b1": 29}  # WRITE implies DESCRIBE


@pytest.mark.parametrize("principal", [ALICE, ADMIN])
def test_only_the_clusters_own_principals_may_send_disable_remote_topic(principal):
    handler = Recorder()
    body = {"topic_id": Uuid.random(), "tiered_epoch": 2}
    answer = serve(image_with(), request(ApiKey.DISABLE_REMOTE_TOPIC, 0, body, principal), handler)
    assert answer["error_code"] == 31 and handler.seen == []
    assert serve(image_with(), request(ApiKey.DISABLE_REMOTE_TOPIC, 0, body, BROKER), handler)["error_code"] == 0


def test_cluster_principals_are_checked_even_without_the_authorizer():
    only_nodes = AccessPolicy(cluster_principals=frozenset({BROKER}))
    handler = Recorder()
    body = {
        "broker_id": 1,
        "broker_epoch": 1,
        "current_metadata_offset": 0,
        "want_fence": False,
        "want_shut_down": False,
    }
    assert (
        serve(image_with(), request(ApiKey.BROKER_HEARTBEAT, 0, body, "User:ANONYMOUS"), handler, only_nodes)[
            "error_code"
        ]
        == 31
    )
    answer = serve(image_with(), request(ApiKey.CREATE_TOPICS, 5, create_topics("x")), handler, only_nodes)
    assert answer["topics"][0]["error_code"] == 0  # no authorizer: anyone may create


def test_the_super_user_and_the_cluster_principals_may_do_everything_else():
    for principal in (ADMIN, BROKER):
        answer = serve(image_with(), request(ApiKey.CREATE_TOPICS, 5, create_topics("x"), principal), Recorder())
        assert answer["topics"][0]["error_code"] == 0


def test_describe_cluster_needs_describe_on_the_cluster():
    body = {"include_cluster_authorized_operations": False, "endpoint_type": 1}
    assert serve(image_with(), request(ApiKey.DESCRIBE_CLUSTER, 1, body), Recorder())["error_code"] == 31
    describe = allow(AclOperation.DESCRIBE, CLUSTER_RESOURCE_NAME, rtype=ResourceType.CLUSTER)
    assert serve(image_with(describe), request(ApiKey.DESCRIBE_CLUSTER, 1, body), Recorder())["error_code"] == 0


def test_without_any_policy_the_handlers_are_not_wrapped():
    handler = Recorder()
    gate = Gatekeeper(AccessPolicy(), lambda: MetadataImage())
    assert gate.guard(ApiKey.CREATE_TOPICS, handler) is handler


def test_with_acls_but_no_cluster_principals_an_envelope_needs_cluster_action():
    """Otherwise any user could forward a request naming a super user as its client."""
    acls_only = AccessPolicy(authorizer=True, super_users=frozenset({ADMIN}))
    body = {"request_data": b"", "request_principal": ADMIN.encode(), "client_host_address": b""}
    handler = Recorder()
    assert serve(image_with(), request(ApiKey.ENVELOPE, 0, body), handler, acls_only)["error_code"] == 31
    assert handler.seen == []
    assert serve(image_with(), request(ApiKey.ENVELOPE, 0, body, ADMIN), handler, acls_only)["error_code"] == 0
    cluster_action = allow(AclOperation.CLUSTER_ACTION, CLUSTER_RESOURCE_NAME, rtype=ResourceType.CLUSTER)
    assert serve(image_with(cluster_action), request(ApiKey.ENVELOPE, 0, body), handler, acls_only)["error_code"] == 0


# --- the data plane: Produce needs WRITE on the topic, Fetch READ, ListOffsets DESCRIBE


class DataPlaneRecorder:
    """Produce, Fetch and ListOffsets answered with success on every partition it is given (an acks=0 Produce with
    no response, as the broker's handler does), remembering what it was given."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    async def __call__(self, req: Request) -> Mapping[str, Any]:
        body = req.body
        self.seen.append(body)
        key = req.header.api_key
        if key == ApiKey.PRODUCE:
            if body["acks"] == 0:
                return NO_RESPONSE
            return {
                "responses": [
                    {
                        "name": t["name"],
                        "partition_responses": [
                            {"index": p["index"], "error_code": 0, "base_offset": 7} for p in t["partition_data"]
                        ],
                    }
                    for t in body["topic_data"]
                ]
            }
        if key == ApiKey.FETCH:
            return {
                "error_code": 0,
                "session_id": 0,
                "responses": [
                    {
                        "topic": t["topic"],
                        "partitions": [
                            {"partition_index": p["partition"], "error_code": 0, "high_watermark": 1, "records": b"r"}
                            for p in t["partitions"]
                        ],
                    }
                    for t in body["topics"]
                ],
            }
        assert key == ApiKey.LIST_OFFSETS
        return {
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "error_code": 0, "offset": 5, "timestamp": -1}
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ]
        }


# WRITE on "w", READ on "r", DESCRIBE on "d", nothing on "x" (ALTER_CONFIGS on "a" implies no DESCRIBE)
DATA_ACLS = (
    allow(AclOperation.WRITE, "w"),
    allow(AclOperation.READ, "r"),
    allow(AclOperation.DESCRIBE, "d"),
    allow(AclOperation.ALTER_CONFIGS, "a"),
)
DATA_TOPICS = ("w", "r", "d", "a", "x")


def produce(*topics: str, acks: int = -1) -> dict[str, Any]:
    partitions = [{"index": 0, "records": b"batch"}, {"index": 1, "records": b"batch"}]
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [{"name": t, "partition_data": partitions} for t in topics],
    }


def fetch(*topics: str) -> dict[str, Any]:
    partitions = [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}]
    return {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": t, "partitions": partitions} for t in topics],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def list_offsets(*topics: str) -> dict[str, Any]:
    partitions = [{"partition_index": 0, "timestamp": -1}, {"partition_index": 3, "timestamp": -2}]
    return {"replica_id": -1, "isolation_level": 0, "topics": [{"name": t, "partitions": partitions} for t in topics]}


def codes(
    answer: Mapping[str, Any], list_field: str, name: str, entries: str, index: str
) -> dict[tuple[str, int], int]:
    return {(t[name], p[index]): p["error_code"] for t in answer[list_field] for p in t[entries]}


def denied_events(logs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (e["principal"], e["host"], e["api"], e["operation"], e["resource_type"], e["resource"], e["log_level"])
        for e in logs
        if e["event"] == "authz.denied"
    )


@pytest.mark.parametrize("version", [3, 9])
def test_produce_needs_write_on_the_topic_and_a_refused_topics_partitions_get_29_while_the_others_are_served(version):
    handler = DataPlaneRecorder()
    with capture_logs() as logs:
        answer = serve(image_with(*DATA_ACLS), request(ApiKey.PRODUCE, version, produce(*DATA_TOPICS)), handler)
    assert [t["name"] for t in handler.seen[0]["topic_data"]] == ["w"]  # the refused never reach the handler
    got = codes(answer, "responses", "name", "partition_responses", "index")
    assert got == {(t, p): 0 if t == "w" else 29 for t in DATA_TOPICS for p in (0, 1)}
    served = answer["responses"][0]["partition_responses"][0]
    assert (served["index"], served["base_offset"]) == (0, 7)
    assert denied_events(logs) == [
        (ALICE, "127.0.0.1", "Produce", "WRITE", "TOPIC", t, "warning") for t in ("a", "d", "r", "x")
    ]


@pytest.mark.parametrize("version", [4, 12])
def test_fetch_needs_read_on_the_topic(version):
    handler = DataPlaneRecorder()
    with capture_logs() as logs:
        answer = serve(image_with(*DATA_ACLS), request(ApiKey.FETCH, version, fetch(*DATA_TOPICS)), handler)
    assert [t["topic"] for t in handler.seen[0]["topics"]] == ["r"]
    assert answer["error_code"] == 0
    assert codes(answer, "responses", "topic", "partitions", "partition_index") == {
        (t, 0): 0 if t == "r" else 29 for t in DATA_TOPICS
    }
    refused = [p for t in answer["responses"] if t["topic"] != "r" for p in t["partitions"]]
    assert all(p["records"] in (b"", None) for p in refused)  # nothing of a refused topic is read
    assert [e[3:6] for e in denied_events(logs)] == [("READ", "TOPIC", t) for t in ("a", "d", "w", "x")]


@pytest.mark.parametrize("version", [1, 9])
def test_list_offsets_needs_describe_on_the_topic_which_read_and_write_imply(version):
    handler = DataPlaneRecorder()
    with capture_logs() as logs:
        answer = serve(
            image_with(*DATA_ACLS), request(ApiKey.LIST_OFFSETS, version, list_offsets(*DATA_TOPICS)), handler
        )
    assert [t["name"] for t in handler.seen[0]["topics"]] == ["w", "r", "d"]
    allowed = {"w", "r", "d"}
    assert codes(answer, "topics", "name", "partitions", "partition_index") == {
        (t, p): 0 if t in allowed else 29 for t in DATA_TOPICS for p in (0, 3)
    }
    refused = [p for t in answer["topics"] if t["name"] not in allowed for p in t["partitions"]]
    assert all(p.get("offset", -1) == -1 for p in refused)
    assert [e[3:6] for e in denied_events(logs)] == [("DESCRIBE", "TOPIC", t) for t in ("a", "x")]


def test_a_data_plane_request_with_every_topic_refused_never_reaches_the_handler():
    handler = DataPlaneRecorder()
    image = image_with(*DATA_ACLS)
    produced = serve(image, request(ApiKey.PRODUCE, 9, produce("r", "x")), handler)
    fetched = serve(image, request(ApiKey.FETCH, 12, fetch("w", "x")), handler)
    listed = serve(image, request(ApiKey.LIST_OFFSETS, 9, list_offsets("a")), handler)
    assert handler.seen == []
    assert set(codes(produced, "responses", "name", "partition_responses", "index").values()) == {29}
    assert set(codes(fetched, "responses", "topic", "partitions", "partition_index").values()) == {29}
    assert set(codes(listed, "topics", "name", "partitions", "partition_index").values()) == {29}


def test_a_prefixed_acl_allows_the_topics_under_it():
    handler = DataPlaneRecorder()
    image = image_with(allow(AclOperation.WRITE, "orders-", prefixed=True))
    answer = serve(image, request(ApiKey.PRODUCE, 9, produce("orders-eu", "orders", "payments")), handler)
    got = codes(answer, "responses", "name", "partition_responses", "index")
    assert {t: c for (t, _), c in got.items()} == {"orders-eu": 0, "orders": 29, "payments": 29}


def gate_answer(image: MetadataImage, req: Request, handler: DataPlaneRecorder) -> Mapping[str, object]:
    """The gate's answer as the server receives it (the acks=0 markers are compared by identity)."""
    return asyncio.run(Gatekeeper(POLICY, lambda: image).guard(req.header.api_key, handler)(req))


def test_a_refused_acks_0_produce_closes_the_connection_and_is_audited():
    image = image_with(*DATA_ACLS)
    handler = DataPlaneRecorder()
    with capture_logs() as logs:
        answer = gate_answer(image, request(ApiKey.PRODUCE, 9, produce("x", acks=0)), handler)
    assert answer is CLOSE_CONNECTION and handler.seen == []
    assert denied_events(logs) == [(ALICE, "127.0.0.1", "Produce", "WRITE", "TOPIC", "x", "warning")]

    mixed = gate_answer(image, request(ApiKey.PRODUCE, 9, produce("w", "x", acks=0)), handler)
    assert mixed is CLOSE_CONNECTION  # a failure anywhere in an acks=0 produce: the producer must notice
    assert [[t["name"] for t in seen["topic_data"]] for seen in handler.seen] == [["w"]]  # the allowed part is served

    allowed = gate_answer(image, request(ApiKey.PRODUCE, 9, produce("w", acks=0)), handler)
    assert allowed is NO_RESPONSE  # nothing refused: the handler's own answer, no response


def test_without_the_authorizer_every_topic_is_served_to_anyone():
    handler = DataPlaneRecorder()
    cluster_only = AccessPolicy(cluster_principals=frozenset({BROKER}))
    answer = serve(image_with(), request(ApiKey.PRODUCE, 9, produce("x", "y")), handler, cluster_only)
    assert set(codes(answer, "responses", "name", "partition_responses", "index").values()) == {0}
    for principal in (ADMIN, BROKER):  # the super user and the cluster's own principals, with the authorizer on
        answer = serve(image_with(), request(ApiKey.FETCH, 12, fetch("x"), principal), handler)
        assert set(codes(answer, "responses", "topic", "partitions", "partition_index").values()) == {0}


def _with_topics(image: MetadataImage, *names: str) -> MetadataImage:
    return replay(image, ((i, topic_record(name, Uuid.random())) for i, name in enumerate(names)))


def test_init_producer_id_needs_idempotent_write_on_the_cluster_or_write_on_any_topic():
    body = {"transactional_id": None, "transaction_timeout_ms": 60000}
    nothing = _with_topics(image_with(allow(AclOperation.READ, "orders")), "orders")
    with capture_logs() as logs:
        refused = serve(nothing, request(ApiKey.INIT_PRODUCER_ID, 4, body), Recorder())
    assert refused["error_code"] == 31 and refused["producer_id"] == -1
    assert denied_events(logs) == [
        (ALICE, "127.0.0.1", "InitProducerId", "IDEMPOTENT_WRITE", "CLUSTER", "kafka-cluster", "warning")
    ]
    writer = _with_topics(image_with(allow(AclOperation.WRITE, "orders")), "orders", "other")
    assert serve(writer, request(ApiKey.INIT_PRODUCER_ID, 4, body), Recorder())["error_code"] == 0
    cluster = image_with(allow(AclOperation.IDEMPOTENT_WRITE, "kafka-cluster", rtype=ResourceType.CLUSTER))
    assert serve(cluster, request(ApiKey.INIT_PRODUCER_ID, 4, body), Recorder())["error_code"] == 0
    transactional = {**body, "transactional_id": "tx"}  # the handler refuses it: no transactions are served
    assert serve(nothing, request(ApiKey.INIT_PRODUCER_ID, 4, transactional), Recorder())["error_code"] == 0


def offset_for_leader_epoch(*topics: str, replica_id: int = -1) -> dict[str, Any]:
    partitions = [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 1}, {"partition": 2, "leader_epoch": 0}]
    return {"replica_id": replica_id, "topics": [{"topic": t, "partitions": partitions} for t in topics]}


class EpochEndOffsetsRecorder(Recorder):
    async def __call__(self, req: Request) -> dict[str, Any]:
        self.seen.append(req.body)
        return {
            "topics": [
                {
                    "topic": t["topic"],
                    "partitions": [
                        {"partition": p["partition"], "error_code": 0, "leader_epoch": 1, "end_offset": 9}
                        for p in t["partitions"]
                    ],
                }
                for t in req.body["topics"]
            ]
        }


@pytest.mark.parametrize("version", [2, 4])
def test_offset_for_leader_epoch_needs_describe_on_the_topic_and_refused_partitions_get_29(version):
    handler = EpochEndOffsetsRecorder()
    with capture_logs() as logs:
        answer = serve(
            image_with(*DATA_ACLS),
            request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, offset_for_leader_epoch(*DATA_TOPICS)),
            handler,
        )
    allowed = {"w", "r", "d"}  # READ and WRITE imply DESCRIBE
    assert [t["topic"] for t in handler.seen[0]["topics"]] == ["w", "r", "d"]
    got = {
        (t["topic"], p["partition"]): (p["error_code"], p["end_offset"])
        for t in answer["topics"]
        for p in t["partitions"]
    }
    assert got == {(t, p): (0, 9) if t in allowed else (29, -1) for t in DATA_TOPICS for p in (0, 2)}
    assert [e[3:6] for e in denied_events(logs)] == [("DESCRIBE", "TOPIC", t) for t in ("a", "x")]


@pytest.mark.parametrize("replica_id", [-1, 2])
def test_cluster_action_allows_offset_for_leader_epoch_on_every_topic_and_a_replica_needs_nothing_more(replica_id):
    """Kafka 3's rule: CLUSTER_ACTION on the cluster (a replica's) or DESCRIBE on the topic, whatever the replica id.
    Not having CLUSTER_ACTION is no refusal and is not audited."""
    handler = EpochEndOffsetsRecorder()
    cluster_action = allow(AclOperation.CLUSTER_ACTION, CLUSTER_RESOURCE_NAME, rtype=ResourceType.CLUSTER)
    body = offset_for_leader_epoch("x", "y", replica_id=replica_id)
    answer = serve(image_with(cluster_action), request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, body), handler)
    assert {p["error_code"] for t in answer["topics"] for p in t["partitions"]} == {0}
    with capture_logs() as logs:
        described = serve(
            image_with(allow(AclOperation.DESCRIBE, "x")), request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, body), handler
        )
    assert {t["topic"]: {p["error_code"] for p in t["partitions"]} for t in described["topics"]} == {
        "x": {0},
        "y": {29},
    }
    assert [e[3:6] for e in denied_events(logs)] == [("DESCRIBE", "TOPIC", "y")]
    nothing = serve(image_with(), request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, body), EpochEndOffsetsRecorder())
    assert {p["error_code"] for t in nothing["topics"] for p in t["partitions"]} == {29}
