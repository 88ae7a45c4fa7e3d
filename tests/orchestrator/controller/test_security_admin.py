"""The security admin API on an in-memory store: CreateAcls, DescribeAcls, DeleteAcls, AlterUserScramCredentials and
DescribeUserScramCredentials answer as Kafka does, entry by entry, and write one append per request."""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest

from orchestrator import errors
from orchestrator.controller.security_admin import SecurityAdmin
from orchestrator.controller.state import ControllerState
from orchestrator.errors import StaleControllerEpoch
from orchestrator.metadata.memory_store import InMemoryMetadataStore
from orchestrator.protocol import codec
from orchestrator.protocol.schema import schema
from orchestrator.security.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from orchestrator.security.authorizer import Authorizer
from orchestrator.security.scram import ScramClientExchange, ScramMechanism, ScramServerExchange

pytestmark = pytest.mark.unit

INVALID_REQUEST = errors.InvalidRequest.code
UNSUPPORTED_SASL_MECHANISM = errors.UnsupportedSaslMechanism.code
RESOURCE_NOT_FOUND = errors.ResourceNotFound.code
DUPLICATE_RESOURCE = errors.DuplicateResource.code
UNACCEPTABLE_CREDENTIAL = errors.UnacceptableCredential.code
SALT = b"salt-of-the-earth-24byte"


class Harness:
    def __init__(self) -> None:
        self.store = InMemoryMetadataStore()
        self.clock = 1_000
        self.generation = 0
        self.admin = self.new_controller()

    def new_controller(self) -> SecurityAdmin:
        self.generation += 1
        self.clock += 10
        lease = self.store.acquire_lease(holder=f"c{self.generation}", now_ms=self.clock, ttl_ms=1)
        assert lease is not None
        self.state = ControllerState(
            self.store,
            holder=lease.holder,
            controller_epoch=lease.controller_epoch,
            now_ms=lambda: self.clock,
            rng=random.Random(self.generation),
        )
        return SecurityAdmin(self.state)

    @property
    def image(self) -> Any:
        return self.state.refresh()


def creation(name: str = "orders", op: AclOperation = AclOperation.READ, **kw: Any) -> dict[str, Any]:
    entry = {
        "resource_type": ResourceType.TOPIC,
        "resource_name": name,
        "resource_pattern_type": PatternType.LITERAL,
        "principal": "User:alice",
        "host": "*",
        "operation": op,
        "permission_type": AclPermissionType.ALLOW,
    }
    return {**entry, **kw}


def acl_filter(**kw: Any) -> dict[str, Any]:
    entry = {
        "resource_type_filter": ResourceType.ANY,
        "resource_name_filter": None,
        "pattern_type_filter": PatternType.ANY,
        "principal_filter": None,
        "host_filter": None,
        "operation": AclOperation.ANY,
        "permission_type": AclPermissionType.ANY,
    }
    return {**entry, **kw}


def upsertion(name: str, mechanism: int = 1, iterations: int = 4096, password: str = "s3cret") -> dict[str, Any]:
    digest = {1: "sha256", 2: "sha512"}.get(mechanism, "sha256")
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), SALT, max(iterations, 1))
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": SALT, "salted_password": salted}


def encodes(name: str, version: int, body: Any) -> Any:
    codec.encode(schema(name), version, body)
    return body


# --- ACLs -------------------------------------------------------------------------------------------------------


def test_create_acls_stores_each_valid_binding_once_and_refuses_invalid_ones_entry_by_entry() -> None:
    h = Harness()
    end = h.store.end_offset()
    response = h.admin.create_acls(
        {
            "creations": [
                creation("orders"),
                creation("orders"),  # the same binding twice: one record
                creation("", op=AclOperation.WRITE),
                creation("x", resource_type=ResourceType.ANY),
                creation("x", op=99),  # a code Kafka does not define is UNKNOWN
                creation("pay-", resource_pattern_type=PatternType.PREFIXED, permission_type=AclPermissionType.DENY),
            ]
        },
        3,
    )
    codes = [r["error_code"] for r in response["results"]]
    assert codes == [0, 0, INVALID_REQUEST, INVALID_REQUEST, INVALID_REQUEST, 0]
    assert "empty" in response["results"][2]["error_message"]
    assert h.store.end_offset() == end + 2  # one append of two records
    assert sorted(b.resource_name for b in h.image.acls.values()) == ["orders", "pay-"]

    again = h.admin.create_acls({"creations": [creation("orders")]}, 3)
    assert again["results"][0]["error_code"] == 0 and h.store.end_offset() == end + 2  # already held: no write


def test_the_acls_created_are_what_the_authorizer_reads_from_the_image() -> None:
    h = Harness()
    h.admin.create_acls({"creations": [creation("ord", resource_pattern_type=PatternType.PREFIXED)]}, 2)
    authorizer = Authorizer(h.image.acls.values())
    assert authorizer.authorize("User:alice", "h", AclOperation.READ, ResourceType.TOPIC, "orders")
    assert authorizer.authorize("User:alice", "h", AclOperation.DESCRIBE, ResourceType.TOPIC, "orders")
    assert not authorizer.authorize("User:alice", "h", AclOperation.WRITE, ResourceType.TOPIC, "orders")


def test_describe_acls_groups_the_matching_acls_by_resource_pattern() -> None:
    h = Harness()
    h.admin.create_acls(
        {
            "creations": [
                creation("orders"),
                creation("orders", op=AclOperation.WRITE, principal="User:bob"),
                creation("ord", resource_pattern_type=PatternType.PREFIXED),
                creation("*"),
                creation("payments"),
            ]
        },
        3,
    )
    match = acl_filter(resource_name_filter="orders", pattern_type_filter=PatternType.MATCH)
    response = encodes("DescribeAclsResponse", 3, h.admin.describe_acls(match, 3))
    assert response["error_code"] == 0
    resources = {(r["resource_name"], r["pattern_type"]): r["acls"] for r in response["resources"]}
    assert sorted(resources) == [("*", 3), ("ord", 4), ("orders", 3)]
    assert [(a["principal"], a["operation"]) for a in resources[("orders", 3)]] == [
        ("User:alice", AclOperation.READ),
        ("User:bob", AclOperation.WRITE),
    ]
    everything = h.admin.describe_acls(acl_filter(), 1)
    assert sum(len(r["acls"]) for r in everything["resources"]) == 5
    bob = h.admin.describe_acls(acl_filter(principal_filter="User:bob"), 2)
    assert [r["resource_name"] for r in bob["resources"]] == ["orders"]


def test_describe_acls_with_an_unknown_filter_field_is_an_invalid_request() -> None:
    response = Harness().admin.describe_acls(acl_filter(pattern_type_filter=0), 3)
    assert response["error_code"] == INVALID_REQUEST and response["resources"] == []
    assert "pattern type" in response["error_message"]


def test_delete_acls_removes_every_match_once_and_reports_it_under_each_filter() -> None:
    h = Harness()
    h.admin.create_acls(
        {"creations": [creation("orders"), creation("orders", op=AclOperation.WRITE), creation("payments")]}, 3
    )
    end = h.store.end_offset()
    response = h.admin.delete_acls(
        {
            "filters": [
                acl_filter(resource_name_filter="orders"),
                acl_filter(operation=AclOperation.WRITE),
                acl_filter(operation=AclOperation.UNKNOWN),
                acl_filter(resource_name_filter="nothing"),
            ]
        },
        3,
    )
    encodes("DeleteAclsResponse", 3, response)
    results = response["filter_results"]
    assert [r["error_code"] for r in results] == [0, 0, INVALID_REQUEST, 0]
    assert sorted(a["operation"] for a in results[0]["matching_acls"]) == [AclOperation.READ, AclOperation.WRITE]
    assert [a["resource_name"] for a in results[1]["matching_acls"]] == ["orders"]
    assert results[3]["matching_acls"] == []
    assert h.store.end_offset() == end + 2  # the WRITE ACL matched twice, removed once
    assert [b.resource_name for b in h.image.acls.values()] == ["payments"]

    none_left = h.admin.delete_acls({"filters": [acl_filter(resource_name_filter="orders")]}, 1)
    assert none_left["filter_results"][0]["matching_acls"] == [] and h.store.end_offset() == end + 2


@pytest.mark.parametrize("version", [1, 2, 3])
def test_every_acl_response_encodes_at_every_version(version: int) -> None:
    h = Harness()
    encodes("CreateAclsResponse", version, h.admin.create_acls({"creations": [creation(), creation("")]}, version))
    encodes("DescribeAclsResponse", version, h.admin.describe_acls(acl_filter(), version))
    encodes("DeleteAclsResponse", version, h.admin.delete_acls({"filters": [acl_filter()]}, version))


# --- SCRAM credentials ------------------------------------------------------------------------------------------


def test_an_upserted_credential_logs_in_with_its_password_and_is_described_without_secrets() -> None:
    h = Harness()
    response = h.admin.alter_user_scram_credentials(
        {"deletions": [], "upsertions": [upsertion("alice", 1, 8192), upsertion("bob", 2)]}, 0
    )
    encodes("AlterUserScramCredentialsResponse", 0, response)
    assert [(r["user"], r["error_code"]) for r in response["results"]] == [("alice", 0), ("bob", 0)]

    image = h.image
    mechanism = ScramMechanism.SCRAM_SHA_256
    server = ScramServerExchange(mechanism, lambda user: image.scram_credential(user, mechanism))
    client = ScramClientExchange(mechanism, "alice", "s3cret")
    client.finish(server.step(client.step(server.step(client.first()))))
    assert server.username == "alice"

    described = encodes(
        "DescribeUserScramCredentialsResponse",
        0,
        h.admin.describe_user_scram_credentials({"users": None}, 0),
    )
    assert described["results"] == [
        {
            "user": "alice",
            "error_code": 0,
            "error_message": None,
            "credential_infos": [{"mechanism": 1, "iterations": 8192}],
        },
        {
            "user": "bob",
            "error_code": 0,
            "error_message": None,
            "credential_infos": [{"mechanism": 2, "iterations": 4096}],
        },
    ]


def test_alter_user_scram_credentials_refuses_each_bad_entry_with_kafkas_error() -> None:
    h = Harness()
    h.admin.alter_user_scram_credentials({"deletions": [], "upsertions": [upsertion("carol")]}, 0)
    end = h.store.end_offset()
    response = h.admin.alter_user_scram_credentials(
        {
            "deletions": [
                {"name": "dave", "mechanism": 1},  # nothing to delete
                {"name": "erin", "mechanism": 7},  # no such mechanism
                {"name": "", "mechanism": 1},
                {"name": "carol", "mechanism": 1},
            ],
            "upsertions": [
                upsertion("frank", iterations=4095),
                upsertion("grace", iterations=16385),
                upsertion("heidi", mechanism=0),
                upsertion("carol", mechanism=2),  # the same user twice in one request
                upsertion("ivan"),
                {**upsertion("judy"), "salted_password": b"short"},
            ],
        },
        0,
    )
    encodes("AlterUserScramCredentialsResponse", 0, response)
    by_user = {r["user"]: r["error_code"] for r in response["results"]}
    assert by_user == {
        "dave": RESOURCE_NOT_FOUND,
        "erin": UNSUPPORTED_SASL_MECHANISM,
        "": UNACCEPTABLE_CREDENTIAL,
        "carol": DUPLICATE_RESOURCE,
        "frank": UNACCEPTABLE_CREDENTIAL,
        "grace": UNACCEPTABLE_CREDENTIAL,
        "heidi": UNSUPPORTED_SASL_MECHANISM,
        "ivan": 0,
        "judy": UNACCEPTABLE_CREDENTIAL,
    }
    assert [r["user"] for r in response["results"]][:4] == ["dave", "erin", "", "carol"]  # the request's order
    assert h.store.end_offset() == end + 1  # only ivan's credential; carol's deletion was dropped
    assert sorted(h.image.scram_credentials) == [("carol", 1), ("ivan", 1)]


def test_a_deletion_removes_one_mechanism_and_describing_a_user_without_any_is_resource_not_found() -> None:
    h = Harness()
    h.admin.alter_user_scram_credentials({"deletions": [], "upsertions": [upsertion("alice", 1)]}, 0)
    h.admin.alter_user_scram_credentials({"deletions": [], "upsertions": [upsertion("alice", 2)]}, 0)
    response = h.admin.alter_user_scram_credentials(
        {"deletions": [{"name": "alice", "mechanism": 1}], "upsertions": []}, 0
    )
    assert response["results"][0]["error_code"] == 0
    assert sorted(h.image.scram_credentials) == [("alice", 2)]

    described = h.admin.describe_user_scram_credentials(
        {"users": [{"name": "alice"}, {"name": "nobody"}, {"name": "twice"}, {"name": "twice"}]}, 0
    )
    assert [(r["user"], r["error_code"]) for r in described["results"]] == [
        ("alice", 0),
        ("nobody", RESOURCE_NOT_FOUND),
        ("twice", DUPLICATE_RESOURCE),
    ]
    assert described["results"][0]["credential_infos"] == [{"mechanism": 2, "iterations": 4096}]
    assert h.admin.describe_user_scram_credentials({"users": []}, 0)["results"][0]["user"] == "alice"


def test_a_deposed_controller_writes_no_acl_and_no_credential() -> None:
    h = Harness()
    old = h.admin
    h.admin = h.new_controller()
    end = h.store.end_offset()
    with pytest.raises(StaleControllerEpoch):
        old.create_acls({"creations": [creation()]}, 3)
    with pytest.raises(StaleControllerEpoch):
        old.alter_user_scram_credentials({"deletions": [], "upsertions": [upsertion("alice")]}, 0)
    assert h.store.end_offset() == end
