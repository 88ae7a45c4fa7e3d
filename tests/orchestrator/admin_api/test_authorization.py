"""The authorization gate in front of every node's handlers: who may do what, per entry, with Kafka's codes."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.admin_api.authorization import AccessPolicy, Gatekeeper
from orchestrator.ids import Uuid
from orchestrator.metadata.image import MetadataImage
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
